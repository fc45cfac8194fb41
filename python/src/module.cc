// strata._strata: the extension module behind `import strata`
// (python/strata/__init__.py re-exports it). Every strata::Error reaching
// Python becomes strata.Error, a ValueError with the same message (bytes
// that are not UTF-8, from a file's names, escaped rather than dropped);
// strata.InternalError (a RuntimeError) means a bug in strata. A filesystem
// error from the C++ library (a bad output path) is a strata.Error too.
#include <cstring>
#include <filesystem>

#include "bindings.h"
#include "strata/core/error.h"

namespace {

namespace py = pybind11;

void SetError(PyObject* type, const char* message) {
  py::object text = py::reinterpret_steal<py::object>(PyUnicode_DecodeUTF8(
      message, static_cast<Py_ssize_t>(std::strlen(message)), "backslashreplace"));
  if (!text) {
    PyErr_Clear();
    text = py::str("(an error message that could not be decoded)");
  }
  PyErr_SetObject(type, text.ptr());
}

}  // namespace

PYBIND11_MODULE(_strata, m) {
  m.doc() = "strata: a lazy-tensor compiler (the C++ core)";
  static py::exception<strata::Error> error(m, "Error", PyExc_ValueError);
  static py::exception<strata::InternalError> internal_error(m, "InternalError",
                                                             PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const strata::InternalError& e) {  // before Error: a subclass of it in C++
      SetError(internal_error.ptr(), e.what());
    } catch (const strata::Error& e) {
      SetError(error.ptr(), e.what());
    } catch (const std::filesystem::filesystem_error& e) {
      SetError(error.ptr(), e.what());
    }
  });
  strata::python::BindTensor(m);
  strata::python::BindOps(m);
  strata::python::BindTransforms(m);
  strata::python::BindOptim(m);
  strata::python::BindLlama(m);
  strata::python::BindSharding(m);
  strata::python::BindCompiledGraph(m);
}
