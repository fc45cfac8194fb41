// Python objects to strata values and back: dtypes, NumPy arrays, DLPack
// capsules, dimension arguments and pytrees.
#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstring>

#include "bindings.h"

#include <limits>
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/runtime/device.h"

namespace strata::python {

namespace {

struct DTypeNames {
  DType dtype;
  const char* python;  // NumPy's and PyTorch's name
};
constexpr DTypeNames kDTypeNames[] = {
    {DType::kPred, "bool"},   {DType::kS8, "int8"},       {DType::kS16, "int16"},
    {DType::kS32, "int32"},   {DType::kS64, "int64"},     {DType::kU8, "uint8"},
    {DType::kU16, "uint16"},  {DType::kU32, "uint32"},    {DType::kU64, "uint64"},
    {DType::kF16, "float16"}, {DType::kBF16, "bfloat16"}, {DType::kF32, "float32"},
    {DType::kF64, "float64"},
};

std::optional<DType> DTypeFromAnyName(std::string name) {
  if (auto dot = name.rfind('.'); dot != std::string::npos)
    name = name.substr(dot + 1);  // torch.float32
  for (const DTypeNames& n : kDTypeNames) {
    if (name == n.python) return n.dtype;
  }
  if (name == "float" || name == "half" || name == "double" || name == "long" || name == "int" ||
      name == "short") {
    // PyTorch's aliases: float is float32, double float64, long int64, int int32, short int16.
    return name == "float"    ? DType::kF32
           : name == "half"   ? DType::kF16
           : name == "double" ? DType::kF64
           : name == "long"   ? DType::kS64
           : name == "short"  ? DType::kS16
                              : DType::kS32;
  }
  return DTypeFromName(name);  // XLA's names: f32, s64, pred, ...
}

[[noreturn]] void ThrowType(const std::string& message) { throw py::type_error(message); }

std::string TypeName(py::handle value) { return py::str(py::type::of(value).attr("__name__")); }

// The strata dtype of a NumPy array's elements, or an error naming NumPy's.
DType FromNumpyDType(const py::dtype& dtype) {
  const char kind = dtype.kind();
  const auto size = dtype.itemsize();
  std::optional<DType> t;
  if (kind == 'b') t = DType::kPred;
  if (kind == 'i') {
    t = size == 1   ? DType::kS8
        : size == 2 ? DType::kS16
        : size == 4 ? DType::kS32
        : size == 8 ? DType::kS64
                    : t;
  }
  if (kind == 'u') {
    t = size == 1   ? DType::kU8
        : size == 2 ? DType::kU16
        : size == 4 ? DType::kU32
        : size == 8 ? DType::kU64
                    : t;
  }
  if (kind == 'f')
    t = size == 2 ? DType::kF16 : size == 4 ? DType::kF32 : size == 8 ? DType::kF64 : t;
  if (!t) {
    Fail(
        "[tensor] NumPy dtype {} has no strata tensor dtype (tensors are bool, "
        "int8/16/32/64, uint8/16/32/64, float16/32/64 or bfloat16; complex types live in HLO "
        "programs only)",
        std::string(py::str(static_cast<const py::handle&>(dtype))));
  }
  return *t;
}

// The bytes of a materialized tensor, whole; the sync releases the GIL.
runtime::Buffer MaterializedBuffer(const Tensor& tensor) {
  Tensor& t = const_cast<Tensor&>(tensor);
  {
    py::gil_scoped_release release;
    t.sync();
  }
  return t.impl()->context->WholeOf(*t.value().node);
}

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims, int64_t unit) {
  std::vector<int64_t> strides(dims.size());
  int64_t s = unit;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = s;
    s *= dims[i];
  }
  return strides;
}

// ---- DLPack -------------------------------------------------------------------------
constexpr uint8_t kDLBoolCode = 6;  // kDLBool, DLPack 0.8 (the 0.6 header has no name for it)

DLDataType ToDlpackType(DType dtype) {
  const auto bits = static_cast<uint8_t>(DTypeSize(dtype) * 8);
  if (dtype == DType::kPred) return {kDLBoolCode, 8, 1};
  if (dtype == DType::kBF16) return {kDLBfloat, 16, 1};
  if (IsFloating(dtype)) return {kDLFloat, bits, 1};
  if (IsSignedInteger(dtype)) return {kDLInt, bits, 1};
  return {kDLUInt, bits, 1};
}

DType FromDlpackType(DLDataType t) {
  if (t.lanes == 1) {
    for (const DTypeNames& n : kDTypeNames) {
      DLDataType d = ToDlpackType(n.dtype);
      if (d.code == t.code && d.bits == t.bits) return n.dtype;
    }
  }
  Fail("[from_dlpack] DLPack type (code {}, {} bits, {} lanes) has no strata dtype",
       static_cast<int>(t.code), static_cast<int>(t.bits), static_cast<int>(t.lanes));
}

struct DlpackExport {
  runtime::Buffer buffer;
  std::vector<int64_t> dims, strides;
  DLManagedTensor managed{};
};

void DeleteCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;  // consumed: the consumer owns it
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (managed->deleter) managed->deleter(managed);
}

// Copies a strided DLPack array into row-major bytes.
void GatherStrided(const uint8_t* base, const std::vector<int64_t>& dims,
                   const std::vector<int64_t>& strides, int64_t item, uint8_t* out) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  std::vector<int64_t> index(dims.size(), 0);
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  for (int64_t e = 0; e < n; ++e) {
    int64_t offset = 0;
    for (int64_t d = 0; d < rank; ++d) offset += index[d] * strides[d];
    std::memcpy(out + e * item, base + offset * item, item);
    for (int64_t d = rank - 1; d >= 0 && ++index[d] == dims[d]; --d) index[d] = 0;
  }
}

// Why nested Python data is not a numeric array: the first leaf (in
// order) that is not a number or that no int64 holds, or a ragged nesting.
struct BadData {
  std::string message;
  bool wrong_type = false;  // a leaf that is no number: a TypeError, as torch
};

[[noreturn]] void ThrowBadData(const BadData& bad) {
  if (bad.wrong_type) ThrowType("strata.tensor: " + bad.message);
  Fail("[tensor] {}", bad.message);
}

std::optional<BadData> BadLeaf(py::handle value, const std::string& path, int depth = 0) {
  const std::string at = path.empty() ? "" : " at " + path;
  // NumPy stops at 32 dimensions; this walk stops soon after, before the
  // C++ stack does (a list nested 100000 deep once crashed here).
  if (depth > 64) return BadData{"the data is nested more than 64 levels deep"};
  if (py::isinstance<py::bool_>(value) || py::isinstance<py::float_>(value)) return std::nullopt;
  if (py::isinstance<py::int_>(value)) {
    int overflow = 0;
    PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
    if (overflow == 0) return std::nullopt;
    return BadData{fmt::format("the integer {}{} does not fit in 64 bits",
                               py::str(value).cast<std::string>(), at)};
  }
  if (py::isinstance<py::array>(value) || py::hasattr(value, "__dlpack__")) return std::nullopt;
  if (!py::isinstance<py::sequence>(value) || py::isinstance<py::str>(value) ||
      py::isinstance<py::bytes>(value)) {
    return BadData{fmt::format("the element{} is {} of type {}, not a number", at,
                               std::string(py::repr(value)), TypeName(value)),
                   true};
  }
  py::sequence items = py::reinterpret_borrow<py::sequence>(value);
  std::optional<size_t> length;
  for (size_t i = 0; i < items.size(); ++i) {
    py::object item = items[i];
    const std::string item_path = fmt::format("{}[{}]", path, i);
    if (auto bad = BadLeaf(item, item_path, depth + 1)) return bad;
    const bool nested = py::isinstance<py::sequence>(item) && !py::isinstance<py::str>(item);
    const size_t n = nested ? py::len(item) : 0;
    if (i == 0) length = nested ? std::optional<size_t>(n) : std::nullopt;
    if (length.has_value() != nested || (nested && n != *length)) {
      return BadData{fmt::format("the nesting is ragged{}: {} holds {} where {} holds {}", at,
                                 item_path, nested ? fmt::format("{} items", n) : "a number",
                                 path + "[0]",
                                 length ? fmt::format("{} items", *length) : "a number")};
    }
  }
  return std::nullopt;
}

}  // namespace

std::string PythonDTypeName(DType dtype) {
  for (const DTypeNames& n : kDTypeNames) {
    if (n.dtype == dtype) return n.python;
  }
  return std::string(DTypeName(dtype));
}

DType DTypeArg(py::handle value) {
  if (py::isinstance<DType>(value)) return value.cast<DType>();
  std::string name;
  if (py::isinstance<py::str>(value)) {
    name = value.cast<std::string>();
  } else if (py::isinstance<py::dtype>(value) || py::isinstance<py::type>(value)) {
    // np.float32 (a type), np.dtype('float32'), and Python's bool / int / float.
    if (value.is(py::type::of(py::bool_()))) return DType::kPred;
    if (value.is(py::type::of(py::int_()))) return DType::kS64;
    if (value.is(py::type::of(py::float_()))) return DType::kF64;  // as torch and NumPy
    name = py::str(py::object(py::dtype::from_args(py::reinterpret_borrow<py::object>(value))));
  } else {
    name = py::str(value);  // torch.float32 prints as "torch.float32"
  }
  if (auto t = DTypeFromAnyName(name)) return *t;
  ThrowType(
      fmt::format("expected a dtype (strata.float32, numpy.float32, 'float32'), got '{}' "
                  "of type {}",
                  name, TypeName(value)));
}

namespace {

// Whether Python data holds a NumPy float64 scalar or array: torch.tensor
// keeps float64 for it (np.float64 is a Python float, but it carries its dtype).
bool HoldsNumpyFloat64(py::handle value, const py::object& float64, int depth = 0) {
  if (py::isinstance(value, float64)) return true;
  if (py::isinstance<py::array>(value)) {
    return py::reinterpret_borrow<py::array>(value).dtype().equal(py::dtype::of<double>());
  }
  if (depth > 64 || !(py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value))) {
    return false;
  }
  for (py::handle item : value) {
    if (HoldsNumpyFloat64(item, float64, depth + 1)) return true;
  }
  return false;
}

}  // namespace

Tensor ToTensor(py::handle value, std::optional<DType> dtype) {
  if (py::isinstance<Tensor>(value)) {
    const Tensor& t = value.cast<const Tensor&>();
    return dtype && *dtype != t.dtype() ? astype(t, *dtype) : t;
  }
  if (py::hasattr(value, "__dlpack__") && !py::isinstance<py::array>(value)) {
    // A torch.Tensor: read through DLPack, then copied (torch.tensor's
    // semantics; from_dlpack is the way to share).
    Tensor t = FromDlpack(py::reinterpret_borrow<py::object>(value));
    if (t.value().node->buffer().borrowed()) t = Tensor::FromBytes(t.shape(), t.bytes());
    return dtype && *dtype != t.dtype() ? astype(t, *dtype) : t;
  }
  // Python data (scalars, lists) follows torch.tensor: floats are float32.
  const bool python_data = !py::isinstance<py::array>(value) && !py::hasattr(value, "dtype");
  py::module_ np = py::module_::import("numpy");
  py::array array;
  try {
    array = np.attr("asarray")(value);
  } catch (const py::error_already_set&) {
    // NumPy refuses ragged nestings outright: say where.
    if (std::optional<BadData> bad = BadLeaf(value, "")) ThrowBadData(*bad);
    throw;
  }
  if (array.dtype().kind() == 'O' || array.dtype().kind() == 'U' || array.dtype().kind() == 'S') {
    if (std::optional<BadData> bad = BadLeaf(value, "")) ThrowBadData(*bad);
    ThrowType(fmt::format("strata.tensor: cannot make a tensor of {} (NumPy reads it as {})",
                          TypeName(value), std::string(py::str(py::object(array.dtype())))));
  }
  DType source = FromNumpyDType(array.dtype());
  if (python_data && source == DType::kU64 && dtype != DType::kU64) {
    // NumPy reads ints in [2^63, 2^64) as uint64; torch.tensor refuses them.
    Fail("[tensor] {} holds an integer beyond int64's range ({}); give dtype=uint64 to keep it",
         TypeName(value), std::string(py::str(array.attr("max")())));
  }
  if (python_data && source == DType::kF64 && !HoldsNumpyFloat64(value, np.attr("float64"))) {
    source = DType::kF32;
  }
  // Python numbers must fit the dtype asked for (torch.tensor([300],
  // dtype=int8) is an error, not 44); NumPy arrays convert as NumPy does.
  if (python_data && dtype && IsInteger(*dtype) && array.size() > 0) {
    CheckIntegerRange(array.attr("min")(), *dtype, "tensor");
    CheckIntegerRange(array.attr("max")(), *dtype, "tensor");
  }
  // bfloat16 has no NumPy type: come through float32.
  DType read = dtype && *dtype != DType::kBF16 ? *dtype : source;
  if (dtype == DType::kBF16 && !IsFloating(source)) read = DType::kF32;
  py::array contiguous =
      np.attr("asarray")(array, py::arg("dtype") = PythonDTypeName(read), py::arg("order") = "C");
  std::vector<int64_t> dims(contiguous.shape(), contiguous.shape() + contiguous.ndim());
  Tensor t = Tensor::FromBytes(
      Shape(read, dims), std::span<const uint8_t>(static_cast<const uint8_t*>(contiguous.data()),
                                                  static_cast<size_t>(contiguous.nbytes())));
  return dtype && *dtype != read ? astype(t, *dtype) : t;
}

void CheckIntegerRange(py::handle number, DType dtype, std::string_view op) {
  // A NumPy scalar (an array's min or max) as the Python number it holds.
  py::object value = py::hasattr(number, "item") && !py::isinstance<py::int_>(number) &&
                             !py::isinstance<py::float_>(number)
                         ? number.attr("item")()
                         : py::reinterpret_borrow<py::object>(number);
  const std::string text = py::str(value);
  if (dtype == DType::kPred) return;  // any number is a truth value
  if (py::isinstance<py::float_>(value)) {
    const double d = value.cast<double>();
    if (!std::isfinite(d)) {
      Fail(
          "[{}] {} cannot be converted to {} (integers have no NaN or infinity; torch refuses "
          "it too)",
          op, text, PythonDTypeName(dtype));
    }
  }
  // Compared as Python numbers: exact for every int and float.
  py::object low, high;
  if (IsSignedInteger(dtype)) {
    const int bits = static_cast<int>(DTypeSize(dtype)) * 8;
    low = py::int_(-(py::int_(1).attr("__lshift__")(bits - 1)));
    high = py::int_(py::int_(1).attr("__lshift__")(bits - 1)) - py::int_(1);
  } else {
    const int bits = static_cast<int>(DTypeSize(dtype)) * 8;
    low = py::int_(0);
    high = py::int_(py::int_(1).attr("__lshift__")(bits)) - py::int_(1);
  }
  // Floats truncate toward zero, as a C cast (torch: 2.5 fills an int as 2).
  py::object whole = py::int_(py::module_::import("math").attr("trunc")(value));
  if (whole < low || whole > high) {
    Fail("[{}] {} does not fit in {} (its range is [{}, {}]; torch refuses it too)", op, text,
         PythonDTypeName(dtype), py::str(low).cast<std::string>(),
         py::str(high).cast<std::string>());
  }
}

Tensor FullOf(std::vector<int64_t> dims, py::handle value, std::optional<DType> dtype,
              std::string_view op) {
  const bool is_bool = py::isinstance<py::bool_>(value);
  const bool is_int = !is_bool && py::isinstance<py::int_>(value);
  if (!is_bool && !is_int && !py::isinstance<py::float_>(value)) {
    py::object number = py::reinterpret_steal<py::object>(PyNumber_Float(value.ptr()));
    if (!number) {
      PyErr_Clear();
      ThrowType(
          fmt::format("strata.{}: the fill value must be a number, got {}", op, TypeName(value)));
    }
    return FullOf(std::move(dims), number, dtype, op);
  }
  // As torch.full: the dtype follows the value when none is given.
  const DType t = dtype.value_or(is_bool ? DType::kPred : is_int ? DType::kS64 : DType::kF32);
  if (!IsInteger(t)) {
    // A float (or an int) into a float or bool dtype: Python's own
    // OverflowError for an int no double holds.
    return full(std::move(dims),
                py::float_(py::reinterpret_borrow<py::object>(value)).cast<double>(), t);
  }
  CheckIntegerRange(value, t, op);
  if (is_int && t == DType::kU64 && value > py::int_(std::numeric_limits<int64_t>::max())) {
    // The bit pattern of a uint64 beyond int64.
    const auto bits = PyLong_AsUnsignedLongLong(value.ptr());
    return integer_full(std::move(dims), static_cast<int64_t>(bits), t);
  }
  if (is_int || is_bool) return integer_full(std::move(dims), Int64Arg(value, op), t);
  return full(std::move(dims), value.cast<double>(), t);
}

void CheckIntegerPower(const Tensor& base, py::handle exponent) {
  if (!IsInteger(base.dtype()) || py::isinstance<py::bool_>(exponent) ||
      !py::isinstance<py::int_>(exponent)) {
    return;
  }
  if (exponent < py::int_(0)) {
    Fail("[pow] integers to negative integer powers are not allowed (as torch): {} ** {}",
         base.shape().ToString(), py::str(exponent).cast<std::string>());
  }
}

Tensor PowerOfNumber(const Tensor& base, py::handle exponent, const Tensor& exponent_tensor) {
  const bool number = !py::isinstance<py::bool_>(exponent) &&
                      (py::isinstance<py::int_>(exponent) || py::isinstance<py::float_>(exponent));
  // A float 2.0 on an integer base promotes to float (as torch): keep pow.
  const bool same_dtype =
      IsFloating(base.dtype()) || (py::isinstance<py::int_>(exponent) && IsInteger(base.dtype()));
  if (number && same_dtype && exponent.cast<double>() == 2.0) return base * base;
  return pow(base, exponent_tensor);
}

TensorArg::TensorArg(py::handle value, std::optional<DType> dtype) {
  if (py::isinstance<Tensor>(value) && (!dtype || value.cast<const Tensor&>().dtype() == *dtype)) {
    ref_ = &value.cast<const Tensor&>();
  } else {
    owned_ = ToTensor(value, dtype);
  }
}

TensorArg::TensorArg(const Tensor& like, py::handle value) {
  if (py::isinstance<Tensor>(value)) {
    ref_ = &value.cast<const Tensor&>();
    return;
  }
  const bool is_bool = py::isinstance<py::bool_>(value);
  const bool is_int = !is_bool && py::isinstance<py::int_>(value);
  const bool is_float = py::isinstance<py::float_>(value);
  if (is_bool || is_int || is_float) {
    DType t = like.dtype();
    if (is_float && !IsFloating(t)) t = DType::kF32;
    if (is_int && t == DType::kPred) t = DType::kS64;
    if (is_int && IsInteger(t)) {
      // Exact, and wrapped into a narrower dtype as torch does
      // (uint8_tensor + 256 adds 0); beyond 64 bits an Error.
      owned_ = integer_scalar(Int64Arg(value, "operand"), t);
    } else {
      owned_ = scalar(py::float_(py::reinterpret_borrow<py::object>(value)).cast<double>(), t);
    }
  } else {
    owned_ = ToTensor(value);
  }
}

py::object ToNumpy(const Tensor& tensor) {
  if (tensor.dtype() == DType::kBF16) {
    Fail(
        "[numpy] NumPy has no bfloat16: convert with .astype(strata.float32), or hand the "
        "tensor to PyTorch through DLPack (torch.utils.dlpack.from_dlpack)");
  }
  runtime::Buffer buffer = MaterializedBuffer(tensor);
  const std::vector<int64_t>& dims = buffer.shape().dims();
  const int64_t item = DTypeSize(tensor.dtype());
  auto* keep = new runtime::Buffer(buffer);
  py::capsule owner(keep, [](void* p) { delete static_cast<runtime::Buffer*>(p); });
  std::vector<py::ssize_t> shape(dims.begin(), dims.end());
  std::vector<int64_t> s = RowMajorStrides(dims, item);
  std::vector<py::ssize_t> strides(s.begin(), s.end());
  py::array array(py::dtype(PythonDTypeName(tensor.dtype())), shape, strides, buffer.data(), owner);
  // Strata's values are immutable: the view is read-only (as JAX's are).
  array.attr("setflags")(py::arg("write") = false);
  return array;
}

py::capsule ToDlpack(const Tensor& tensor) { return BufferToDlpack(MaterializedBuffer(tensor)); }

py::capsule BufferToDlpack(const runtime::Buffer& buffer) {
  auto* e = new DlpackExport{buffer, {}, {}, {}};
  e->dims = e->buffer.shape().dims();
  e->strides = RowMajorStrides(e->dims, 1);
  DLTensor& d = e->managed.dl_tensor;
  d.data = e->buffer.data();
  d.device = {kDLCPU, 0};
  d.ndim = static_cast<int32_t>(e->dims.size());
  d.dtype = ToDlpackType(buffer.shape().dtype());
  d.shape = e->dims.data();
  d.strides = e->strides.data();
  d.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = [](DLManagedTensor* m) {
    delete static_cast<DlpackExport*>(m->manager_ctx);
  };
  return py::reinterpret_steal<py::capsule>(PyCapsule_New(&e->managed, "dltensor", DeleteCapsule));
}

Tensor FromDlpack(py::object source) {
  return Tensor(ir::Value{ir::Node::MakeDeviceData(BufferFromDlpack(source))});
}

runtime::Buffer BufferFromDlpack(py::handle source) {
  py::object capsule = py::reinterpret_borrow<py::object>(source);
  if (py::hasattr(source, "__dlpack__")) capsule = source.attr("__dlpack__")();
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor")) {
    ThrowType(
        fmt::format("strata.from_dlpack: expected an object with __dlpack__ or an unused "
                    "DLPack capsule, got {}",
                    TypeName(source)));
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  // From here strata owns it: the deleter runs when the last buffer goes.
  std::shared_ptr<DLManagedTensor> owner(managed, [](DLManagedTensor* m) {
    if (m->deleter) m->deleter(m);
  });
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  const DLTensor& d = managed->dl_tensor;
  if (d.device.device_type != kDLCPU) {
    Fail(
        "[from_dlpack] the array lives on DLPack device type {}; strata reads CPU memory (type {})",
        static_cast<int>(d.device.device_type), static_cast<int>(kDLCPU));
  }
  DType dtype = FromDlpackType(d.dtype);
  std::vector<int64_t> dims(d.shape, d.shape + d.ndim);
  std::vector<int64_t> strides =
      d.strides ? std::vector<int64_t>(d.strides, d.strides + d.ndim) : RowMajorStrides(dims, 1);
  std::vector<int64_t> row_major = RowMajorStrides(dims, 1);
  bool compact = true;
  for (int32_t i = 0; i < d.ndim; ++i)
    compact = compact && (dims[i] == 1 || strides[i] == row_major[i]);
  Shape shape(dtype, dims);
  auto* data = static_cast<uint8_t*>(d.data) + d.byte_offset;
  const runtime::Device* device = runtime::Client::Default().device(0);
  if (compact && shape.num_elements() > 0 && reinterpret_cast<uintptr_t>(data) % 64 == 0) {
    // Shares the memory: the aliasing shared_ptr keeps the DLPack owner alive.
    return runtime::Buffer::Borrow(shape, std::shared_ptr<uint8_t>(owner, data), device);
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(shape.byte_size()));
  if (!bytes.empty()) GatherStrided(data, dims, strides, DTypeSize(dtype), bytes.data());
  return runtime::Buffer::FromHost(shape, bytes, device);
}

namespace {
constexpr std::pair<const char*, Remat> kRematNames[] = {
    {"carries", Remat::kSaveCarries},
    {"all", Remat::kSaveAll},
    {"dots", Remat::kSaveDots},
    {"dots_no_batch", Remat::kSaveDotsWithNoBatchDims},
};
}  // namespace

Remat RematArg(const std::string& name) {
  for (const auto& [n, r] : kRematNames) {
    if (name == n) return r;
  }
  Fail("[remat] must be 'carries', 'all', 'dots' or 'dots_no_batch', got '{}'", name);
}

std::string RematString(Remat remat) {
  for (const auto& [n, r] : kRematNames) {
    if (remat == r) return n;
  }
  return "carries";
}

int64_t Int64Arg(py::handle value, std::string_view what) {
  py::object number = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
  if (!number) throw py::error_already_set();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(number.ptr(), &overflow);
  if (overflow != 0) {
    Fail("[{}] {} does not fit in a 64-bit integer", what, py::str(number).cast<std::string>());
  }
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  return v;
}

int64_t ClampedInt64(py::handle value) {
  py::object number = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
  if (!number) throw py::error_already_set();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(number.ptr(), &overflow);
  if (overflow > 0) return std::numeric_limits<int64_t>::max();
  if (overflow < 0) return std::numeric_limits<int64_t>::min();
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  return v;
}

std::vector<int64_t> DimsArg(py::handle dims) {
  if (dims.is_none()) return {};
  if (py::isinstance<py::bool_>(dims)) ThrowType("dimensions must be ints, got bool");
  if (py::isinstance<py::int_>(dims)) return {Int64Arg(dims, "shape")};
  if (py::isinstance<py::sequence>(dims) && !py::isinstance<py::str>(dims)) {
    std::vector<int64_t> out;
    for (py::handle d : dims) {
      if (!py::isinstance<py::int_>(d) || py::isinstance<py::bool_>(d))
        ThrowType("dimensions must be ints, got " + TypeName(d));
      out.push_back(Int64Arg(d, "shape"));
    }
    return out;
  }
  ThrowType("expected None, an int or a sequence of ints as dimensions, got " + TypeName(dims));
}

std::vector<int64_t> ShapeArgs(const py::args& args) {
  if (args.size() == 1 && !py::isinstance<py::int_>(args[0])) return DimsArg(args[0]);
  return DimsArg(args);
}

namespace {
Tree ToTreeAt(py::handle value, const std::string& what, const std::string& path) {
  if (py::isinstance<Tensor>(value)) return Tree(value.cast<Tensor>());
  if (value.is_none()) return Tree();
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    Tree::List items;
    size_t i = 0;
    for (py::handle item : value) {
      items.push_back(ToTreeAt(item, what, fmt::format("{}[{}]", path, i++)));
    }
    return Tree(std::move(items));
  }
  if (py::isinstance<py::dict>(value)) {
    Tree::Dict items;
    for (auto [key, item] : value.cast<py::dict>()) {
      if (!py::isinstance<py::str>(key)) {
        ThrowType(
            fmt::format("{}: dict keys in a pytree must be strings; the key {} at '{}' is a {}",
                        what, std::string(py::repr(key)), path, TypeName(key)));
      }
      std::string k = key.cast<std::string>();
      items.emplace(k, ToTreeAt(item, what, fmt::format("{}['{}']", path, k)));
    }
    return Tree(std::move(items));
  }
  ThrowType(fmt::format("{}: the leaf at {} is a {}, not a strata.Tensor", what,
                        path.empty() ? "the root" : path, TypeName(value)));
}
}  // namespace

Tree ToTree(py::handle value, const std::string& what) { return ToTreeAt(value, what, ""); }

py::object FromTree(const Tree& tree, py::handle like) {
  if (tree.is_leaf()) return py::cast(tree.leaf());
  if (like.is_none()) return py::none();
  if (py::isinstance<py::dict>(like)) {
    py::dict out;
    for (auto [key, item] : like.cast<py::dict>()) {
      out[key] = FromTree(tree[key.cast<std::string>()], item);
    }
    return out;
  }
  if (py::isinstance<py::list>(like) || py::isinstance<py::tuple>(like)) {
    py::list out;
    size_t i = 0;
    for (py::handle item : like) out.append(FromTree(tree[i++], item));
    if (py::isinstance<py::tuple>(like)) return py::tuple(out);
    return out;
  }
  if (tree.is_empty()) return py::none();
  throw InternalError("a tree without the structure of its Python template");
}

}  // namespace strata::python
