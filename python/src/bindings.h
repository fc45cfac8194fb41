// What the binding translation units of strata._strata share: the
// conversions between Python objects and strata values, and one Bind*
// function per part of the module (module.cc calls them in order).
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/dtype.h"
#include "strata/lazy/tensor.h"
#include "strata/lazy/tree.h"
#include "strata/runtime/device.h"
#include "strata/transforms/scan.h"

namespace strata::python {

namespace py = pybind11;

// A dtype argument: strata.float32, a NumPy dtype or type (np.float32), a
// torch dtype, or a name ("float32", "f32", "bool").
DType DTypeArg(py::handle value);
std::string PythonDTypeName(DType dtype);  // "float32", as NumPy and PyTorch name it

// A tensor from a strata.Tensor, a NumPy array, a Python scalar or a nested
// list (copied; Python floats become float32 and ints int64, as
// torch.tensor makes them). `dtype` converts.
Tensor ToTensor(py::handle value, std::optional<DType> dtype = std::nullopt);
// An Error unless the Python number `value` (an int or a float, truncated)
// fits integer `dtype`, naming `op`, the value and the range: torch refuses
// torch.tensor([300], dtype=int8) and full(nan, dtype=int32).
void CheckIntegerRange(py::handle value, DType dtype, std::string_view op);
// torch.full's fill: `value` (bool, int or float) checked against `dtype`,
// exact for every int64; with no dtype, bool, int64 or float32 as the
// value's kind.
Tensor FullOf(std::vector<int64_t> dims, py::handle value, std::optional<DType> dtype,
              std::string_view op);
// torch refuses integer ** negative Python int ("Integers to negative
// integer powers are not allowed"); an Error here too.
void CheckIntegerPower(const Tensor& base, py::handle exponent);
// base ** exponent for a Python number exponent: 2 is base * base (the C++
// pow(Tensor, double)'s rule), not a pow kernel whose exponent is a program
// parameter; anything else goes through pow with the exponent as a scalar.
Tensor PowerOfNumber(const Tensor& base, py::handle exponent, const Tensor& exponent_tensor);
// An operand: the Python tensor itself (no copy: copying a handle makes a
// new registered TensorImpl) or a tensor made from the Python value.
class TensorArg {
 public:
  explicit TensorArg(py::handle value, std::optional<DType> dtype = std::nullopt);
  // A Python number next to `like` takes its dtype, as in PyTorch, except
  // that a float meeting an integer or bool tensor is float32 and an int
  // meeting a bool tensor int64.
  TensorArg(const Tensor& like, py::handle value);
  const Tensor& get() const { return ref_ ? *ref_ : *owned_; }

 private:
  const Tensor* ref_ = nullptr;
  std::optional<Tensor> owned_;
};

// A NumPy array viewing the tensor's bytes (materializes it; read-only).
py::object ToNumpy(const Tensor& tensor);
// DLPack, both ways. Export shares the tensor's bytes. Import shares the
// producer's memory when it is row-major and 64-byte aligned (PyTorch's
// allocations are), and copies otherwise.
py::capsule ToDlpack(const Tensor& tensor);
Tensor FromDlpack(py::object source);
// The same at the level of buffers (what a compiled graph's call binds).
py::capsule BufferToDlpack(const runtime::Buffer& buffer);
runtime::Buffer BufferFromDlpack(py::handle source);

// A Python int as an int64; one beyond 64 bits is an Error naming `what`
// and the value (pybind11's own cast says only "Unable to cast").
int64_t Int64Arg(py::handle value, std::string_view what);
// A Python int clamped to the int64 range (slice bounds, as Python clamps them).
int64_t ClampedInt64(py::handle value);

// Dimension arguments: None (all), an int, or a sequence of ints.
std::vector<int64_t> DimsArg(py::handle dims);
// A shape given as ints or one sequence: zeros(2, 3) and zeros((2, 3)).
std::vector<int64_t> ShapeArgs(const py::args& args);

// scan's Remat by its Python name: "carries", "all", "dots", "dots_no_batch".
Remat RematArg(const std::string& name);
std::string RematString(Remat remat);

// Pytrees: tensors in nested lists, tuples and dicts with string keys
// (None is an empty node). `what` names the caller in errors, which give
// the leaf's path: "strata.grad: the leaf at [0]['w'] is a float, not a
// strata.Tensor".
Tree ToTree(py::handle value, const std::string& what);
// `tree` rebuilt with the Python structure of `like` (tuples stay tuples).
py::object FromTree(const Tree& tree, py::handle like);

void BindTensor(py::module_& m);
void BindOps(py::module_& m);
void BindTransforms(py::module_& m);
void BindOptim(py::module_& m);          // the strata.optim submodule
void BindLlama(py::module_& m);          // safetensors files, strata.nn.LlamaForCausalLM
void BindSharding(py::module_& m);       // Mesh, mark_sharding
void BindCompiledGraph(py::module_& m);  // CompiledGraph: what strata.torch runs per call

}  // namespace strata::python
