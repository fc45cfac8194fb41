// The ops under NumPy's and PyTorch's names: strata.exp, strata.sum(x,
// dim=..., keepdim=...) (axis= and keepdims= too), strata.cat, ... and the
// functions of torch.nn.functional under strata.nn.functional's names.
#include <pybind11/stl.h>

#include <optional>

#include "bindings.h"
#include "strata/lazy/index_check.h"
#include "strata/lazy/ops.h"
#include "strata/nn/functional.h"

namespace strata::python {

namespace {

using Unary = Tensor (*)(const Tensor&);
using Binary = Tensor (*)(const Tensor&, const Tensor&);

std::optional<DType> OptionalDType(py::handle dtype) {
  if (dtype.is_none()) return std::nullopt;
  return DTypeArg(dtype);
}

// A binary op's operands: tensors, arrays or Python numbers (a number next
// to a tensor takes its dtype, as in the operators).
struct Operands {
  Operands(py::handle a, py::handle b)
      : first(py::isinstance<Tensor>(a) || !py::isinstance<Tensor>(b)
                  ? TensorArg(a)
                  : TensorArg(b.cast<const Tensor&>(), a)),
        second(first.get(), b) {}
  TensorArg first, second;
};

// Reductions take dim / keepdim (PyTorch) or axis / keepdims (NumPy).
std::vector<int64_t> ReduceDims(py::handle dim, py::handle axis) {
  if (!dim.is_none() && !axis.is_none()) Fail("[reduce] give dim or axis, not both");
  return DimsArg(dim.is_none() ? axis : dim);
}

nn::Reduction ReductionArg(const std::string& name) {
  if (name == "mean") return nn::Reduction::kMean;
  if (name == "sum") return nn::Reduction::kSum;
  if (name == "none") return nn::Reduction::kNone;
  Fail("[loss] reduction must be 'mean', 'sum' or 'none', got '{}'", name);
}

std::vector<Tensor> TensorList(py::handle items, const char* op) {
  if (!py::isinstance<py::sequence>(items) || py::isinstance<py::str>(items)) {
    throw py::type_error(fmt::format("strata.{} takes a sequence of tensors", op));
  }
  std::vector<Tensor> out;
  for (py::handle item : items) out.push_back(ToTensor(item));
  return out;
}

// torch's int-or-tuple arguments (stride=2, padding=(1, 0)).
std::vector<int64_t> IntOrTuple(py::handle value, const char* op, const char* what) {
  if (py::isinstance<py::int_>(value)) return {Int64Arg(value, op)};
  if (py::isinstance<py::sequence>(value) && !py::isinstance<py::str>(value)) {
    std::vector<int64_t> out;
    for (py::handle v : value) {
      if (!py::isinstance<py::int_>(v)) break;
      out.push_back(Int64Arg(v, op));
    }
    if (out.size() == py::len(value)) return out;
  }
  throw py::type_error(
      fmt::format("strata.nn.functional.{}: {} takes an int or a tuple of ints", op, what));
}

// torch.nn.functional.convNd(input, weight, bias, stride, padding, dilation, groups).
template <Tensor (*conv)(const Tensor&, const Tensor&, std::vector<int64_t>, std::vector<int64_t>,
                         std::vector<int64_t>, int64_t)>
void BindConvolution(py::module_& m, const char* name) {
  m.def(
      name,
      [name](const Tensor& x, const Tensor& w, std::optional<Tensor> bias, py::handle stride,
             py::handle padding, py::handle dilation, int64_t groups) {
        Tensor y =
            conv(x, w, IntOrTuple(stride, name, "stride"), IntOrTuple(padding, name, "padding"),
                 IntOrTuple(dilation, name, "dilation"), groups);
        if (!bias) return y;
        std::vector<int64_t> dims(y.rank(), 1);
        dims[y.rank() == x.rank() && x.rank() == w.rank() ? 1 : 0] = bias->shape().num_elements();
        if (bias->rank() != 1 || bias->shape().dim(0) != w.shape().dim(0)) {
          Fail("[{}] bias must be [{}] (one per output channel), got {}", name, w.shape().dim(0),
               bias->shape().ToString());
        }
        return y + reshape(*bias, dims);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
      py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1);
}

using Pool = Tensor (*)(const Tensor&, std::vector<int64_t>, std::vector<int64_t>,
                        std::vector<int64_t>, std::vector<int64_t>, bool);
using PoolWithIndices = ValuesIndices (*)(const Tensor&, std::vector<int64_t>, std::vector<int64_t>,
                                          std::vector<int64_t>, std::vector<int64_t>, bool);
using AveragePool = Tensor (*)(const Tensor&, std::vector<int64_t>, std::vector<int64_t>,
                               std::vector<int64_t>, bool, bool, std::optional<int64_t>);

// torch.nn.functional.max_poolNd (return_indices=True gives a pair of
// values and s64 positions) / avg_poolNd.
void BindPooling(py::module_& m, const char* max_name, Pool max_pool,
                 PoolWithIndices max_pool_with_indices, const char* avg_name,
                 AveragePool avg_pool) {
  m.def(
      max_name,
      [=](const Tensor& x, py::handle kernel, py::handle stride, py::handle padding,
          py::handle dilation, bool ceil_mode, bool return_indices) -> py::object {
        std::vector<int64_t> k = IntOrTuple(kernel, max_name, "kernel_size");
        std::vector<int64_t> s =
            stride.is_none() ? std::vector<int64_t>{} : IntOrTuple(stride, max_name, "stride");
        std::vector<int64_t> p = IntOrTuple(padding, max_name, "padding");
        std::vector<int64_t> d = IntOrTuple(dilation, max_name, "dilation");
        if (!return_indices) return py::cast(max_pool(x, k, s, p, d, ceil_mode));
        ValuesIndices r = max_pool_with_indices(x, k, s, p, d, ceil_mode);
        return py::make_tuple(r.values, r.indices);
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(),
      py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("ceil_mode") = false,
      py::arg("return_indices") = false);
  m.def(
      avg_name,
      [=](const Tensor& x, py::handle kernel, py::handle stride, py::handle padding, bool ceil_mode,
          bool count_include_pad, py::handle divisor_override) {
        std::optional<int64_t> divisor;
        if (!divisor_override.is_none()) divisor = Int64Arg(divisor_override, "avg_pool");
        return avg_pool(
            x, IntOrTuple(kernel, avg_name, "kernel_size"),
            stride.is_none() ? std::vector<int64_t>{} : IntOrTuple(stride, avg_name, "stride"),
            IntOrTuple(padding, avg_name, "padding"), count_include_pad, ceil_mode, divisor);
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(),
      py::arg("padding") = 0, py::arg("ceil_mode") = false, py::arg("count_include_pad") = true,
      py::arg("divisor_override") = py::none());
}

// Creation
// A Python number as a scalar of `dtype` (f32 when None) made by Float, or
// for an integer dtype by Integer from the exact int (in range).
template <Tensor (*Float)(double, DType), Tensor (*Integer)(int64_t, DType)>
Tensor NumberAs(py::object v, py::object dtype, const char* op) {
  const DType t = OptionalDType(dtype).value_or(DType::kF32);
  if (!IsInteger(t)) return Float(py::float_(v).cast<double>(), t);
  CheckIntegerRange(v, t, op);
  if (py::isinstance<py::int_>(v)) return Integer(Int64Arg(v, op), t);
  return Float(v.cast<double>(), t);
}

void BindCreation(py::module_& m) {
  auto creator = [&m](const char* name, Tensor (*make)(std::vector<int64_t>, DType)) {
    m.def(
        name,
        [make](py::args shape, py::object dtype) {
          return make(ShapeArgs(shape), OptionalDType(dtype).value_or(DType::kF32));
        },
        py::kw_only(), py::arg("dtype") = py::none());
  };
  creator("zeros", &zeros);
  creator("ones", &ones);
  m.def(
      "full",
      [](py::object shape, py::object value, py::object dtype) {
        return FullOf(DimsArg(shape), value, OptionalDType(dtype), "full");
      },
      py::arg("shape"), py::arg("fill_value"), py::arg("dtype") = py::none());
  m.def(
      "zeros_like",
      [](const Tensor& x, py::object dtype) {
        return zeros(x.shape().dims(), OptionalDType(dtype).value_or(x.dtype()));
      },
      py::arg("x"), py::arg("dtype") = py::none());
  m.def(
      "ones_like",
      [](const Tensor& x, py::object dtype) {
        return ones(x.shape().dims(), OptionalDType(dtype).value_or(x.dtype()));
      },
      py::arg("x"), py::arg("dtype") = py::none());
  m.def(
      "full_like",
      [](const Tensor& x, py::object value, py::object dtype) {
        return FullOf(x.shape().dims(), value, OptionalDType(dtype).value_or(x.dtype()),
                      "full_like");
      },
      py::arg("x"), py::arg("fill_value"), py::arg("dtype") = py::none());
  m.def(
      "arange",
      [](py::object start, py::object end, py::object step, py::object dtype) {
        // arange(end) or arange(start, end[, step]); ints give int64 as in torch.
        if (end.is_none()) {
          end = start;
          start = py::int_(0);
        }
        for (const py::object* v : {&start, &end, &step}) {
          if (!py::isinstance<py::int_>(*v) && !py::isinstance<py::float_>(*v)) {
            throw py::type_error("strata.arange: start, end and step must be numbers, got " +
                                 std::string(py::repr(*v)));
          }
        }
        const bool integral = py::isinstance<py::int_>(start) && py::isinstance<py::int_>(end) &&
                              py::isinstance<py::int_>(step);
        DType t = OptionalDType(dtype).value_or(integral ? DType::kS64 : DType::kF32);
        return arange(start.cast<double>(), end.cast<double>(), step.cast<double>(), t);
      },
      py::arg("start"), py::arg("end") = py::none(), py::arg("step") = 1,
      py::arg("dtype") = py::none());
  m.def(
      "eye",
      [](int64_t n, py::object dtype) {
        return eye(n, OptionalDType(dtype).value_or(DType::kF32));
      },
      py::arg("n"), py::arg("dtype") = py::none());
  m.def(
      "constant",
      [](py::object v, py::object dtype) {
        return NumberAs<&constant, &integer_constant>(v, dtype, "constant");
      },
      py::arg("value"), py::arg("dtype") = py::none(),
      "A scalar baked into the program (changing it recompiles).");
  m.def(
      "scalar",
      [](py::object v, py::object dtype) {
        return NumberAs<&scalar, &integer_scalar>(v, dtype, "scalar");
      },
      py::arg("value"), py::arg("dtype") = py::none(),
      "A scalar that is a program parameter (changing it never recompiles).");
  m.def(
      "random_key",
      [](py::handle seed) {
        // torch.manual_seed's range: [-2^63, 2^64), a negative seed as its
        // 64-bit two's complement.
        if (!py::isinstance<py::int_>(seed) || py::isinstance<py::bool_>(seed))
          throw py::type_error("strata.random_key: the seed must be an int, got " +
                               std::string(py::str(py::type::of(seed).attr("__name__"))));
        py::object low = py::int_(-(py::int_(1).attr("__lshift__")(63)));
        py::object high = py::int_(1).attr("__lshift__")(64);
        if (seed < low || seed >= high) {
          Fail("[random_key] the seed must be in [-2^63, 2^64), got {}",
               py::str(seed).cast<std::string>());
        }
        py::object wrapped = seed.attr("__and__")(high - py::int_(1));
        return random_key(PyLong_AsUnsignedLongLong(wrapped.ptr()));
      },
      py::arg("seed"));
  m.def("split_key", &split_key, py::arg("key"), py::arg("count") = 2);
  m.def(
      "uniform",
      [](const Tensor& key, py::object shape, double low, double high, py::object dtype) {
        return uniform(key, DimsArg(shape), low, high, OptionalDType(dtype).value_or(DType::kF32));
      },
      py::arg("key"), py::arg("shape"), py::arg("low") = 0.0, py::arg("high") = 1.0,
      py::arg("dtype") = py::none());
  m.def(
      "normal",
      [](const Tensor& key, py::object shape, double mean, double std, py::object dtype) {
        return normal(key, DimsArg(shape), mean, std, OptionalDType(dtype).value_or(DType::kF32));
      },
      py::arg("key"), py::arg("shape"), py::arg("mean") = 0.0, py::arg("std") = 1.0,
      py::arg("dtype") = py::none());
}

// Elementwise
void BindElementwise(py::module_& m) {
  // The ops of the opcode rows whose api column is Api(name) (ops.h), then
  // the ones written by hand.
#define STRATA_PY_ROW(e, name, kind, complex, ...) STRATA_PY_ROW_##kind(__VA_ARGS__)
#define STRATA_PY_ROW_Other(...)
#define STRATA_PY_ROW_Collective(...)
#define STRATA_PY_ROW_Unary(api, ...) STRATA_PY_UNARY_##api
#define STRATA_PY_ROW_Binary(api, ...) STRATA_PY_BINARY_##api
#define STRATA_PY_UNARY_Api(n) unary.emplace_back(#n, static_cast<Unary>(&n));
#define STRATA_PY_BINARY_Api(n) binary.emplace_back(#n, static_cast<Binary>(&n));
#define STRATA_PY_UNARY_Custom(n)
#define STRATA_PY_BINARY_Custom(n)
#define STRATA_PY_UNARY_Internal()
#define STRATA_PY_BINARY_Internal()
  std::vector<std::pair<const char*, Unary>> unary;
  std::vector<std::pair<const char*, Binary>> binary;
  STRATA_HLO_OPCODES(STRATA_PY_ROW)
#undef STRATA_PY_ROW
#undef STRATA_PY_ROW_Other
#undef STRATA_PY_ROW_Collective
#undef STRATA_PY_ROW_Unary
#undef STRATA_PY_ROW_Binary
#undef STRATA_PY_UNARY_Api
#undef STRATA_PY_BINARY_Api
#undef STRATA_PY_UNARY_Custom
#undef STRATA_PY_BINARY_Custom
#undef STRATA_PY_UNARY_Internal
#undef STRATA_PY_BINARY_Internal
  const std::pair<const char*, Unary> hand_unary[] = {
      {"sign", &sign},
      {"floor", &floor},
      {"ceil", &ceil},
      {"logical_not", &logical_not},
      {"bitwise_not", &bitwise_not},
      {"relu", &nn::relu},
      {"silu", &nn::silu},
      {"mT", &mT},
      {"negative", [](const Tensor& x) { return -x; }},
  };
  unary.insert(unary.end(), std::begin(hand_unary), std::end(hand_unary));
  for (const auto& [name, op] : unary) m.def(name, op, py::arg("x"));
  const std::pair<const char*, Binary> hand_binary[] = {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }},
      {"subtract", [](const Tensor& a, const Tensor& b) { return a - b; }},
      {"multiply", [](const Tensor& a, const Tensor& b) { return a * b; }},
      {"divide", [](const Tensor& a, const Tensor& b) { return a / b; }},
      {"remainder", &remainder},
      {"floor_divide", &floor_divide},
      {"trunc_divide", &trunc_divide},
      {"eq", &eq},
      {"ne", &ne},
      {"lt", &lt},
      {"le", &le},
      {"gt", &gt},
      {"ge", &ge},
      {"logical_and", &logical_and},
      {"logical_or", &logical_or},
      {"bitwise_and", &bitwise_and},
      {"bitwise_or", &bitwise_or},
      {"bitwise_xor", &bitwise_xor},
      {"matmul", &matmul},
  };
  binary.insert(binary.end(), std::begin(hand_binary), std::end(hand_binary));
  // The opcode table's rows as Python sees them (tests walk every row).
  m.def("_opcode_rows", [] {
    py::list rows;
    for (int i = 0; i < hlo::kOpcodeCount; ++i) {
      const auto op = static_cast<hlo::Opcode>(i);
      py::dict row;
      row["name"] = std::string(hlo::OpcodeName(op));
      row["kind"] = hlo::IsElementwiseUnary(op)    ? "unary"
                    : hlo::IsElementwiseBinary(op) ? "binary"
                                                   : "other";
      row["api"] = std::string(hlo::ApiNameOf(op));
      row["generated"] = hlo::ApiIsGenerated(op);
      row["floats"] = hlo::TakesFloats(hlo::ElementTypesOf(op));
      row["integers"] = hlo::TakesIntegers(hlo::ElementTypesOf(op));
      rows.append(row);
    }
    return rows;
  });
  for (const auto& [name, op] : binary) {
    m.def(
        name,
        [op = op](py::handle a, py::handle b) {
          Operands o(a, b);
          return op(o.first.get(), o.second.get());
        },
        py::arg("a"), py::arg("b"));
  }
  m.def(
      "pow",
      [](py::handle a, py::handle b) {
        Operands o(a, b);
        CheckIntegerPower(o.first.get(), b);
        if (py::isinstance<Tensor>(a)) return PowerOfNumber(o.first.get(), b, o.second.get());
        return pow(o.first.get(), o.second.get());
      },
      py::arg("a"), py::arg("b"));
  m.def(
      "where",
      [](py::handle c, py::handle a, py::handle b) {
        Operands o(a, b);
        return where(TensorArg(c).get(), o.first.get(), o.second.get());
      },
      py::arg("condition"), py::arg("a"), py::arg("b"));
  m.def(
      "clamp",
      [](const Tensor& x, py::object lo, py::object hi) {
        if (lo.is_none() && hi.is_none())
          Fail("[clamp] give min or max (or both), got neither");  // as torch
        // A Python float bound makes an integer tensor's result f32, as torch
        // (clamp(int, 0.0) is float even though 0.0 is whole).
        const bool float_bound = py::isinstance<py::float_>(lo) || py::isinstance<py::float_>(hi);
        const Tensor y = float_bound && !IsFloating(x.dtype()) ? astype(x, DType::kF32) : x;
        if (py::isinstance<Tensor>(lo) || py::isinstance<Tensor>(hi)) {
          // Tensor bounds, as torch.clamp(x, min_tensor, max_tensor).
          Tensor r = y;
          if (!lo.is_none()) r = maximum(r, TensorArg(r, lo).get());
          if (!hi.is_none()) r = minimum(r, TensorArg(r, hi).get());
          return r;
        }
        auto value = [](const py::object& v) -> std::optional<double> {
          if (v.is_none()) return std::nullopt;
          if (!py::isinstance<py::int_>(v) && !py::isinstance<py::float_>(v))
            throw py::type_error("strata.clamp: a bound must be a number or a tensor, got " +
                                 std::string(py::repr(v)));
          return v.cast<double>();
        };
        return clamp(y, value(lo), value(hi));
      },
      py::arg("x"), py::arg("min") = py::none(), py::arg("max") = py::none());
  m.def(
      "astype", [](const Tensor& x, py::handle d) { return astype(x, DTypeArg(d)); }, py::arg("x"),
      py::arg("dtype"));
  m.def(
      "gelu",
      [](const Tensor& x, const std::string& approximate) {
        if (approximate != "none" && approximate != "tanh")
          Fail("[gelu] approximate must be 'none' or 'tanh', got '{}'", approximate);
        return nn::gelu(x, approximate == "tanh");
      },
      py::arg("x"), py::arg("approximate") = "none");
}

// Reductions
void BindReductions(py::module_& m) {
  using Reduce = Tensor (*)(const Tensor&, std::vector<int64_t>, bool);
  const std::pair<const char*, Reduce> reductions[] = {
      {"sum", &sum}, {"mean", &mean}, {"amax", &max}, {"amin", &min}};
  for (const auto& [name, op] : reductions) {
    m.def(
        name,
        [op = op](const Tensor& x, py::object dim, bool keepdim, py::object axis, bool keepdims) {
          return op(x, ReduceDims(dim, axis), keepdim || keepdims);
        },
        py::arg("x"), py::arg("dim") = py::none(), py::arg("keepdim") = false, py::kw_only(),
        py::arg("axis") = py::none(), py::arg("keepdims") = false);
  }
  using ArgReduce = Tensor (*)(const Tensor&, int64_t, bool);
  const std::pair<const char*, ArgReduce> arg_reductions[] = {{"argmax", &argmax},
                                                              {"argmin", &argmin}};
  for (const auto& [name, op] : arg_reductions) {
    m.def(
        name,
        [op = op](const Tensor& x, py::object dim, bool keepdim) {
          if (dim.is_none()) {  // over the flattened tensor; keepdim keeps every dim as 1, as torch
            Tensor r = op(reshape(x, {-1}), 0, false);
            return keepdim ? reshape(r, std::vector<int64_t>(x.rank(), 1)) : r;
          }
          return op(x, Int64Arg(dim, "dim"), keepdim);
        },
        py::arg("x"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  }
}

// Shape
void BindShapeOps(py::module_& m) {
  m.def(
      "reshape",
      [](const Tensor& x, py::args shape) {
        // As torch: reshape() needs a shape; reshape(()) is the 0-d one.
        if (shape.size() == 0)
          throw py::type_error("strata.reshape: missing the shape (ints, or one sequence of them)");
        return reshape(x, ShapeArgs(shape));
      },
      py::arg("x"));
  m.def(
      "transpose",
      [](const Tensor& x, py::object d0, py::object d1) {
        if (d0.is_none())
          return x.rank() < 2 ? x : permute(x, [&] {
            std::vector<int64_t> dims(x.rank());
            for (int64_t i = 0; i < x.rank(); ++i) dims[i] = x.rank() - 1 - i;
            return dims;
          }());  // NumPy: reverse every dimension
        return transpose(x, Int64Arg(d0, "transpose"), Int64Arg(d1, "transpose"));
      },
      py::arg("x"), py::arg("dim0") = py::none(), py::arg("dim1") = py::none());
  m.def(
      "permute",
      [](const Tensor& x, py::args dims) {
        return permute(x, dims.size() == 0 ? std::vector<int64_t>{} : ShapeArgs(dims));
      },
      py::arg("x"));
  m.def(
      "flip", [](const Tensor& x, py::object dims) { return flip(x, DimsArg(dims)); }, py::arg("x"),
      py::arg("dims"));
  m.def(
      "expand", [](const Tensor& x, py::args dims) { return expand(x, ShapeArgs(dims)); },
      py::arg("x"));
  m.def(
      "broadcast_to",
      [](const Tensor& x, py::object dims) { return broadcast_to(x, DimsArg(dims)); }, py::arg("x"),
      py::arg("shape"));
  m.def(
      "squeeze", [](const Tensor& x, std::optional<int64_t> dim) { return squeeze(x, dim); },
      py::arg("x"), py::arg("dim") = py::none());
  m.def("unsqueeze", &unsqueeze, py::arg("x"), py::arg("dim"));
  m.def(
      "flatten",
      [](const Tensor& x, int64_t start, int64_t end) {
        const int64_t r = std::max<int64_t>(x.rank(), 1);
        if (start < 0) start += r;
        if (end < 0) end += r;
        if (start < 0 || end >= r || start > end)
          Fail("[flatten] dimensions {}..{} out of range for {}", start, end, x.shape().ToString());
        if (x.rank() == 0) return reshape(x, {1});
        std::vector<int64_t> dims;
        for (int64_t i = 0; i < start; ++i) dims.push_back(x.dim(i));
        int64_t merged = 1;  // not -1: zero elements would not determine it
        for (int64_t i = start; i <= end; ++i) merged *= x.dim(i);
        dims.push_back(merged);
        for (int64_t i = end + 1; i < x.rank(); ++i) dims.push_back(x.dim(i));
        return reshape(x, dims);
      },
      py::arg("x"), py::arg("start_dim") = 0, py::arg("end_dim") = -1);
  m.def(
      "slice",
      [](const Tensor& x, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
         int64_t step) { return slice(x, dim, start, end, step); },
      py::arg("x"), py::arg("dim"), py::arg("start") = py::none(), py::arg("end") = py::none(),
      py::arg("step") = 1);
  m.def(
      "index_select",
      [](const Tensor& x, int64_t dim, py::handle index) {
        return index_select(x, dim, TensorArg(index).get());
      },
      py::arg("x"), py::arg("dim"), py::arg("index"));
  m.def(
      "take_along_dim",
      [](const Tensor& x, py::handle index, int64_t dim) {
        return take_along_dim(x, TensorArg(index).get(), dim);
      },
      py::arg("x"), py::arg("indices"), py::arg("dim"));
  m.def(
      "scatter_add",
      [](const Tensor& x, int64_t dim, py::handle index, const Tensor& src) {
        return scatter_add(x, dim, TensorArg(index).get(), src);
      },
      py::arg("x"), py::arg("dim"), py::arg("index"), py::arg("src"));
}

// Sorting (the Python package wraps sort and topk's pairs as named tuples)
void BindSorting(py::module_& m) {
  m.def(
      "_sort",
      [](const Tensor& x, int64_t dim, bool descending, bool stable) {
        ValuesIndices r = sort(x, dim, descending, stable);
        return std::make_pair(r.values, r.indices);
      },
      py::arg("x"), py::arg("dim") = -1, py::arg("descending") = false, py::kw_only(),
      py::arg("stable") = false);
  m.def("argsort", &argsort, py::arg("x"), py::arg("dim") = -1, py::arg("descending") = false,
        py::kw_only(), py::arg("stable") = false);
  m.def(
      "_topk",
      [](const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
        ValuesIndices r = topk(x, k, dim, largest, sorted);
        return std::make_pair(r.values, r.indices);
      },
      py::arg("x"), py::arg("k"), py::arg("dim") = -1, py::arg("largest") = true,
      py::arg("sorted") = true);
}

// Cumulative
void BindCumulative(py::module_& m) {
  m.def("cumsum", &cumsum, py::arg("x"), py::arg("dim"));
  m.def("cumprod", &cumprod, py::arg("x"), py::arg("dim"));
  m.def("logcumsumexp", &logcumsumexp, py::arg("x"), py::arg("dim"));
  using Cumulative = ValuesIndices (*)(const Tensor&, int64_t);
  const std::pair<const char*, Cumulative> running_extremes[] = {{"_cummax", &cummax},
                                                                 {"_cummin", &cummin}};
  for (const auto& [name, op] : running_extremes) {
    m.def(
        name,
        [op = op](const Tensor& x, int64_t dim) {
          ValuesIndices r = op(x, dim);
          return std::make_pair(r.values, r.indices);
        },
        py::arg("x"), py::arg("dim"));
  }
  for (const char* name : {"cat", "concatenate", "concat"}) {
    m.def(
        name,
        [name](py::handle items, int64_t dim, std::optional<int64_t> axis) {
          return concat(TensorList(items, name), axis.value_or(dim));
        },
        py::arg("tensors"), py::arg("dim") = 0, py::kw_only(), py::arg("axis") = py::none());
  }
  m.def(
      "stack",
      [](py::handle items, int64_t dim, std::optional<int64_t> axis) {
        return stack(TensorList(items, "stack"), axis.value_or(dim));
      },
      py::arg("tensors"), py::arg("dim") = 0, py::kw_only(), py::arg("axis") = py::none());
  m.def(
      "split", [](const Tensor& x, int64_t size, int64_t dim) { return split(x, size, dim); },
      py::arg("x"), py::arg("split_size"), py::arg("dim") = 0);
  m.def("chunk", &chunk, py::arg("x"), py::arg("chunks"), py::arg("dim") = 0);
  m.def(
      "pad",
      [](const Tensor& x, std::vector<int64_t> low, std::vector<int64_t> high, double v) {
        return pad(x, std::move(low), std::move(high), v);
      },
      py::arg("x"), py::arg("low"), py::arg("high"), py::arg("value") = 0.0,
      "Pads low[d] elements before and high[d] after each dimension d.");
  m.def(
      "dynamic_slice",
      [](const Tensor& x, py::handle starts, std::vector<int64_t> sizes) {
        return dynamic_slice(x, TensorList(starts, "dynamic_slice"), std::move(sizes));
      },
      py::arg("x"), py::arg("starts"), py::arg("sizes"));
  m.def(
      "dynamic_update_slice",
      [](const Tensor& x, const Tensor& update, py::handle starts) {
        return dynamic_update_slice(x, update, TensorList(starts, "dynamic_update_slice"));
      },
      py::arg("x"), py::arg("update"), py::arg("starts"));
  m.def(
      "index_add",
      [](const Tensor& x, int64_t dim, py::handle index, const Tensor& source, double alpha) {
        return index_add(x, dim, TensorArg(index).get(), source, alpha);
      },
      py::arg("x"), py::arg("dim"), py::arg("index"), py::arg("source"), py::arg("alpha") = 1.0);
}

// Functions
void BindFunctions(py::module_& m) {
  m.def("softmax", &softmax, py::arg("x"), py::arg("dim"));
  m.def("log_softmax", &log_softmax, py::arg("x"), py::arg("dim"));
  // For lowerings that read by index through other ops (a scatter written as
  // a compare against the positions): `result` carrying strata's check that
  // every element of `index` lies in [0, bound), the Error naming `op`.
  m.def(
      "_with_index_check",
      [](const Tensor& result, const Tensor& index, int64_t bound, const std::string& op,
         const std::string& range) {
        return lazy::WithIndexCheck(result, index, bound, op, range);
      },
      py::arg("result"), py::arg("index"), py::arg("bound"), py::arg("op"), py::arg("range"));
  m.def(
      "one_hot",
      [](py::handle index, int64_t classes, py::object dtype) {
        return one_hot(TensorArg(index).get(), classes, OptionalDType(dtype).value_or(DType::kS64));
      },
      py::arg("index"), py::arg("num_classes"), py::arg("dtype") = py::none());
  m.def(
      "linear",
      [](const Tensor& x, const Tensor& w, std::optional<Tensor> b) { return nn::linear(x, w, b); },
      py::arg("x"), py::arg("weight"), py::arg("bias") = py::none());
  m.def(
      "mse_loss",
      [](const Tensor& x, py::handle target, const std::string& reduction) {
        return nn::mse_loss(x, TensorArg(target, x.dtype()).get(), ReductionArg(reduction));
      },
      py::arg("input"), py::arg("target"), py::arg("reduction") = "mean");
  m.def(
      "cross_entropy",
      [](const Tensor& logits, py::handle target, int64_t ignore_index,
         const std::string& reduction) {
        return nn::cross_entropy(logits, TensorArg(target).get(), ignore_index,
                                 ReductionArg(reduction));
      },
      py::arg("input"), py::arg("target"), py::arg("ignore_index") = -100,
      py::arg("reduction") = "mean");
  m.def("rms_norm", &nn::rms_norm, py::arg("x"), py::arg("weight"), py::arg("eps") = 1e-6);
  m.def(
      "layer_norm",
      [](const Tensor& x, std::optional<Tensor> w, std::optional<Tensor> b, double eps) {
        return nn::layer_norm(x, w, b, eps);
      },
      py::arg("x"), py::arg("weight") = py::none(), py::arg("bias") = py::none(),
      py::arg("eps") = 1e-5);
  m.def("dropout", &nn::dropout, py::arg("x"), py::arg("p"), py::arg("key"),
        py::arg("training") = true);
  m.def(
      "scaled_dot_product_attention",
      [](const Tensor& q, const Tensor& k, const Tensor& v, bool causal, bool fused,
         const std::string& layout) {
        if (layout != "bhsd" && layout != "bshd") {
          Fail("[scaled_dot_product_attention] layout must be 'bhsd' or 'bshd', got '{}'", layout);
        }
        return nn::scaled_dot_product_attention(
            q, k, v, causal, fused,
            layout == "bshd" ? nn::AttentionLayout::kBSHD : nn::AttentionLayout::kBHSD);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("is_causal") = true,
      py::arg("fused") = true, py::arg("layout") = "bhsd");
  m.def(
      "fused_attention",
      [](const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
         std::optional<Tensor> mask) {
        nn::AttentionOutput o =
            nn::fused_attention(q, k, v, causal, scale, mask.value_or(Tensor()));
        return py::make_tuple(o.out, o.lse);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("is_causal"), py::arg("scale"),
      py::arg("mask") = py::none(),
      "The fused attention kernel's forward call: (out, lse), lse the f32 [B, H, S] log-sum-exp "
      "of each row of scores (what torch's flash attention returns). mask, f32 [B or 1, H or 1, "
      "S, S], is added to the scaled scores.");
  m.def(
      "fused_attention_grad",
      [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
         const Tensor& dout, bool causal, double scale, std::optional<Tensor> mask) {
        return nn::fused_attention_grad(q, k, v, out, lse, dout, causal, scale,
                                        mask.value_or(Tensor()));
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"), py::arg("dout"),
      py::arg("is_causal"), py::arg("scale"), py::arg("mask") = py::none(),
      "The fused kernel's gradient call: [dq, dk, dv].");
  m.def(
      "rotary_tables",
      [](int64_t seq, int64_t head_dim, double theta, py::object dtype) {
        nn::RotaryTables t =
            nn::rotary_tables(seq, head_dim, theta, OptionalDType(dtype).value_or(DType::kF32));
        return py::make_tuple(t.cos, t.sin);
      },
      py::arg("seq_len"), py::arg("head_dim"), py::arg("theta") = 10000.0,
      py::arg("dtype") = py::none());
  m.def("apply_rotary", &nn::apply_rotary, py::arg("x"), py::arg("cos"), py::arg("sin"),
        py::arg("seq_dim") = -2);
  BindConvolution<&conv1d>(m, "conv1d");
  BindConvolution<&conv2d>(m, "conv2d");
  BindConvolution<&conv3d>(m, "conv3d");
  BindPooling(m, "max_pool1d", &max_pool1d, &max_pool1d_with_indices, "avg_pool1d", &avg_pool1d);
  BindPooling(m, "max_pool2d", &max_pool2d, &max_pool2d_with_indices, "avg_pool2d", &avg_pool2d);
  BindPooling(m, "max_pool3d", &max_pool3d, &max_pool3d_with_indices, "avg_pool3d", &avg_pool3d);
}

// `with strata._strata._BakeScalars():` makes every scalar made on this
// thread inside a literal (lazy::BakeScalars): the torch.compile backend
// lowers its graphs under it.
struct BakeScalarsScope {
  std::optional<BakeScalars> guard;
};

void BindBakeScalars(py::module_& m) {
  py::class_<BakeScalarsScope>(m, "_BakeScalars")
      .def(py::init<>())
      .def("__enter__", [](BakeScalarsScope& s) { s.guard.emplace(true); })
      .def("__exit__", [](BakeScalarsScope& s, py::args) { s.guard.reset(); });
}

}  // namespace

void BindOps(py::module_& m) {
  BindBakeScalars(m);
  BindCreation(m);
  BindElementwise(m);
  BindReductions(m);
  BindShapeOps(m);
  BindSorting(m);
  BindCumulative(m);
  BindFunctions(m);
}

}  // namespace strata::python
