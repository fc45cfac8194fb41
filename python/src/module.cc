// strata._strata: the extension module behind `import strata`
// (python/strata/__init__.py re-exports it). Every strata::Error reaching
// Python becomes strata.Error, a ValueError with the same message;
// strata.InternalError (a RuntimeError) means a bug in strata.
#include "bindings.h"
#include "strata/core/error.h"

PYBIND11_MODULE(_strata, m) {
  namespace py = pybind11;
  m.doc() = "strata: a lazy-tensor compiler (the C++ core)";
  // Translators run newest first: InternalError (a subclass of Error in C++)
  // is registered after Error so it is caught as itself.
  py::register_exception<strata::Error>(m, "Error", PyExc_ValueError);
  py::register_exception<strata::InternalError>(m, "InternalError", PyExc_RuntimeError);
  strata::python::BindTensor(m);
  strata::python::BindOps(m);
  strata::python::BindTransforms(m);
  strata::python::BindOptim(m);
  strata::python::BindLlama(m);
  strata::python::BindSharding(m);
}
