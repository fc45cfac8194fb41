// strata.Tensor and strata.dtype: the handle's properties, its Python
// operators, indexing, and the ways in and out (NumPy, DLPack, scalars).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "strata/autograd/grad.h"
#include "strata/lazy/ops.h"

namespace strata::python {

namespace {

using Binary = Tensor (*)(const Tensor&, const Tensor&);

template <Binary op>
Tensor Forward(const Tensor& a, py::handle b) {
  return op(a, TensorArg(a, b).get());
}
template <Binary op>
Tensor Reflected(const Tensor& a, py::handle b) {
  return op(TensorArg(a, b).get(), a);
}
Tensor Add(const Tensor& a, const Tensor& b) { return a + b; }
Tensor Sub(const Tensor& a, const Tensor& b) { return a - b; }
Tensor Mul(const Tensor& a, const Tensor& b) { return a * b; }
Tensor Div(const Tensor& a, const Tensor& b) { return a / b; }
Tensor Pow(const Tensor& a, const Tensor& b) { return pow(a, b); }
Tensor Rem(const Tensor& a, const Tensor& b) { return remainder(a, b); }
Tensor MatMul(const Tensor& a, const Tensor& b) { return matmul(a, b); }
// &, |, ^ and ~ are bitwise, as in torch (logical on bools, an error on floats).
Tensor And(const Tensor& a, const Tensor& b) { return bitwise_and(a, b); }
Tensor Or(const Tensor& a, const Tensor& b) { return bitwise_or(a, b); }
Tensor Xor(const Tensor& a, const Tensor& b) { return bitwise_xor(a, b); }

Tensor FloorDiv(const Tensor& a, const Tensor& b) { return floor_divide(a, b); }
Tensor PowOf(const Tensor& a, py::handle b) {
  CheckIntegerPower(a, b);
  return PowerOfNumber(a, b, TensorArg(a, b).get());
}

int64_t Length(const Tensor& t) {
  if (t.rank() == 0) throw py::type_error("len() of a 0-d tensor");
  return t.dim(0);
}

py::object Item(Tensor& t) {
  if (t.numel() != 1) {
    Fail("[item] needs a tensor with one element, got {}", t.shape().ToString());
  }
  py::object array = ToNumpy(t);
  return array.attr("reshape")(py::tuple()).attr("item")();
}

// ---- indexing ---------------------------------------------------------------------------
struct Index {
  Tensor result;
  // For assignment: what each dimension of the input keeps (start, count,
  // step), and whether every item was an int, a slice or None (no tensor).
  std::vector<int64_t> starts, sizes, steps;
  bool is_window = true;
};

std::optional<int64_t> SliceBound(py::handle bound) {
  if (bound.is_none()) return std::nullopt;
  return ClampedInt64(bound);
}

// x[key] as PyTorch reads it: ints, slices (positive steps), None, one
// Ellipsis, and one integer tensor (or list) indexing a dimension.
Index Apply(const Tensor& x, py::handle key) {
  py::tuple items =
      py::isinstance<py::tuple>(key) ? py::reinterpret_borrow<py::tuple>(key) : py::make_tuple(key);
  const int64_t rank = x.rank();
  int64_t consuming = 0;
  bool ellipsis = false;
  for (py::handle item : items) {
    if (item.is(py::ellipsis())) {
      if (ellipsis) throw py::index_error("an index can only have a single ellipsis ('...')");
      ellipsis = true;
    } else if (!item.is_none()) {
      ++consuming;
    }
  }
  if (consuming > rank) {
    throw py::index_error(fmt::format("too many indices for tensor of dimension {}", rank));
  }
  Index out{x, std::vector<int64_t>(rank, 0), x.shape().dims(), std::vector<int64_t>(rank, 1),
            true};
  Tensor& t = out.result;
  int64_t d = 0;      // dimension of t
  int64_t input = 0;  // dimension of x
  std::vector<int64_t> drop;
  int tensor_indices = 0;
  for (py::handle item : items) {
    if (item.is(py::ellipsis())) {
      d += rank - consuming;
      input += rank - consuming;
    } else if (item.is_none()) {
      t = unsqueeze(t, d++);
    } else if (py::isinstance<py::int_>(item) && !py::isinstance<py::bool_>(item)) {
      const int64_t size = t.dim(d);
      const int64_t i_clamped = ClampedInt64(item);
      if (i_clamped < -size || i_clamped >= size) {
        throw py::index_error(fmt::format("index {} is out of bounds for dimension {} with size {}",
                                          py::str(item).cast<std::string>(), input, size));
      }
      int64_t i = i_clamped;
      if (i < 0) i += size;
      t = slice(t, d, i, i + 1);
      out.starts[input] = i;
      out.sizes[input++] = 1;
      drop.push_back(d++);
    } else if (py::isinstance<py::slice>(item)) {
      py::object step_object = item.attr("step");
      const int64_t step = step_object.is_none() ? 1 : ClampedInt64(step_object);
      if (step <= 0) Fail("[index] slice steps must be positive, got {}", step);
      const int64_t size = t.dim(d);
      t = slice(t, d, SliceBound(item.attr("start")), SliceBound(item.attr("stop")), step);
      // Where the window starts, bounds clamped as Python clamps them.
      py::ssize_t start = 0, stop = 0, unused_step = 0, length = 0;
      py::slice(py::reinterpret_borrow<py::object>(item))
          .compute(static_cast<size_t>(size), &start, &stop, &unused_step, &length);
      out.starts[input] = length > 0 ? start : 0;
      out.steps[input] = length > 1 ? step : 1;
      out.sizes[input++] = length;
      ++d;
    } else {
      // An empty list indexes nothing (torch's x[[]] is x[:0] along the dim);
      // as a tensor it would be float32.
      const bool empty_list =
          py::isinstance<py::list>(item) && py::len(py::reinterpret_borrow<py::list>(item)) == 0;
      Tensor index = empty_list ? ToTensor(item, DType::kS64) : ToTensor(item);
      if (index.dtype() == DType::kPred) {
        Fail(
            "[index] a boolean mask gives a shape that depends on the data, which a compiled "
            "program cannot have; use strata.where(mask, x, other) instead");
      }
      if (IsFloating(index.dtype())) {
        throw py::index_error(fmt::format("tensors used as indices must be integer tensors, got {}",
                                          index.shape().ToString()));
      }
      if (++tensor_indices > 1) {
        Fail("[index] more than one tensor index is not supported; index one dimension at a time");
      }
      out.is_window = false;
      std::vector<int64_t> index_dims = index.shape().dims();
      // Negative indices count from the end, as in NumPy and PyTorch, in
      // int64 (an int8 index into 300 rows must reach 299). One below -size
      // is left as it is, so the index check names the index the user gave.
      if (IsSignedInteger(index.dtype())) {
        index = astype(index, DType::kS64);
        const Tensor size = integer_scalar(t.dim(d), DType::kS64);
        index = where(logical_and(lt(index, zeros({}, DType::kS64)), ge(index, -size)),
                      index + size, index);
      }
      t = index_select(t, d, reshape(index, {-1}));
      std::vector<int64_t> dims = t.shape().dims();
      dims.erase(dims.begin() + d);
      dims.insert(dims.begin() + d, index_dims.begin(), index_dims.end());
      t = reshape(t, dims);
      d += static_cast<int64_t>(index_dims.size());
      ++input;
    }
  }
  if (!drop.empty()) {
    std::vector<int64_t> dims;
    for (int64_t i = 0; i < t.rank(); ++i) {
      if (std::find(drop.begin(), drop.end(), i) == drop.end()) dims.push_back(t.dim(i));
    }
    t = reshape(t, dims);
  }
  return out;
}

// `v` (the elements x[key] selects, in x's rank) spread over the window
// they span: along each dimension with a step, v's elements step apart with
// x's own elements between them.
Tensor SpreadOverWindow(const Tensor& x, Tensor v, const Index& index) {
  Tensor mask = ones(v.shape().dims(), DType::kS8);
  std::vector<int64_t> spans = index.sizes;
  for (int64_t d = 0; d < v.rank(); ++d) {
    const int64_t step = index.steps[d], n = index.sizes[d];
    if (step == 1) continue;
    // [.., n, ..] -> [.., n, step, ..] (the new elements 0) -> [.., n*step, ..] -> the span
    auto spread = [&](const Tensor& t) {
      std::vector<int64_t> low(t.rank() + 1, 0), high(t.rank() + 1, 0);
      high[d + 1] = step - 1;
      std::vector<int64_t> dims = t.shape().dims();
      dims[d] = n * step;
      return slice(reshape(pad(unsqueeze(t, d + 1), low, high), dims), d, 0, (n - 1) * step + 1);
    };
    v = spread(v);
    mask = spread(mask);
    spans[d] = (n - 1) * step + 1;
  }
  Tensor window = x;
  for (int64_t d = 0; d < x.rank(); ++d) {
    window = slice(window, d, index.starts[d], index.starts[d] + spans[d]);
  }
  return where(ne(mask, zeros({}, DType::kS8)), v, window);
}

// x[key] = value, for ints, slices (any positive step) and None: rebinds x
// to a copy with those elements replaced, as x.copy_ does.
void Assign(Tensor& x, py::handle key, py::handle value) {
  Index index = Apply(x, key);
  if (!index.is_window) {
    Fail(
        "[setitem] assigning through a tensor index is not supported; assign to ints and "
        "slices (or build the value with strata.where / index_add / scatter_add)");
  }
  // A Python number must fit an integer tensor (torch refuses x[0] = 200 on
  // int8 rather than wrapping it, and nan or inf into any integer).
  if (IsInteger(x.dtype()) &&
      (py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value)) &&
      !py::isinstance<py::bool_>(value)) {
    CheckIntegerRange(value, x.dtype(), "setitem");
  }
  Tensor v = astype(TensorArg(x, value).get(), x.dtype());
  v = reshape(broadcast_to(v, index.result.shape().dims()), index.sizes);
  if (v.numel() == 0) return;  // nothing selected: x stays as it is
  if (std::any_of(index.steps.begin(), index.steps.end(), [](int64_t s) { return s != 1; })) {
    v = SpreadOverWindow(x, v, index);
  }
  std::vector<Tensor> starts;
  for (int64_t s : index.starts) starts.push_back(constant(static_cast<double>(s), DType::kS64));
  x.copy_(dynamic_update_slice(x, v, starts));
}

// strata.dtype: the element types, printed as torch prints its own.
void BindDType(py::module_& m) {
  py::enum_<DType> dtype(m, "dtype");
  for (DType t :
       {DType::kPred, DType::kS8, DType::kS16, DType::kS32, DType::kS64, DType::kU8, DType::kU16,
        DType::kU32, DType::kU64, DType::kF16, DType::kBF16, DType::kF32, DType::kF64}) {
    dtype.value(PythonDTypeName(t).c_str(), t);
  }
  dtype.export_values();
  // Set, not def'd: def would chain these after the enum's own __repr__.
  for (const char* name : {"__repr__", "__str__"}) {
    dtype.attr(name) = py::cpp_function([](DType t) { return "strata." + PythonDTypeName(t); },
                                        py::is_method(dtype));
  }
  dtype.def_property_readonly("itemsize", [](DType t) { return DTypeSize(t); })
      .def_property_readonly("is_floating_point", [](DType t) { return IsFloating(t); })
      .def_property_readonly("name", [](DType t) { return PythonDTypeName(t); });
}

// The in-place operators, and the methods of autodiff and conversion.
void BindTensorMethods(py::class_<Tensor>& tensor) {
  // In place: rebinds this handle (other handles on the old value keep it).
  // As torch: the result must fit the tensor's kind (x /= 2 on an integer x,
  // or += 0.5, is an error, not a truncation); within a kind it is cast.
  auto in_place = [&tensor](const char* name, Binary op) {
    tensor.def(name, [op, name](py::object self, py::handle other) {
      Tensor& t = self.cast<Tensor&>();
      Tensor r = op(t, TensorArg(t, other).get());
      auto kind = [](DType d) { return d == DType::kPred ? 0 : IsFloating(d) ? 2 : 1; };
      if (kind(r.dtype()) > kind(t.dtype())) {
        Fail("[{}] result type {} can't be cast to the tensor's type {} in place", name,
             PythonDTypeName(r.dtype()), PythonDTypeName(t.dtype()));
      }
      t.copy_(astype(r, t.dtype()));
      return self;
    });
  };
  in_place("__iadd__", &Add);
  in_place("__isub__", &Sub);
  in_place("__imul__", &Mul);
  in_place("__itruediv__", &Div);
  in_place("__iand__", &And);
  in_place("__ior__", &Or);
  in_place("__ixor__", &Xor);
  tensor
      .def("copy_",
           [](py::object self, py::handle source) {
             Tensor& t = self.cast<Tensor&>();
             t.copy_(astype(ToTensor(source), t.dtype()));
             return self;
           })
      // Autograd, PyTorch's way.
      .def_property(
          "requires_grad", [](const Tensor& t) { return requires_grad(t); },
          [](Tensor& t, bool value) { requires_grad_(t, value); })
      .def(
          "requires_grad_",
          [](py::object self, bool value) {
            requires_grad_(self.cast<Tensor&>(), value);
            return self;
          },
          py::arg("requires_grad") = true)
      .def_property(
          "grad",
          [](const Tensor& t) -> py::object {
            Tensor g = grad(t);
            return g.defined() ? py::cast(g) : py::none();
          },
          [](Tensor& t, py::object value) {
            if (!value.is_none()) Fail("[grad] only None can be assigned to .grad");
            zero_grad(t);
          })
      .def(
          "backward",
          [](const Tensor& t, py::object gradient) {
            if (gradient.is_none()) {
              backward(t);
            } else {
              backward(t, ToTensor(gradient, t.dtype()));
            }
          },
          py::arg("gradient") = py::none())
      .def("detach", [](const Tensor& t) { return detach(t); })
      .def("astype", [](const Tensor& t, py::handle d) { return astype(t, DTypeArg(d)); })
      .def("to", [](const Tensor& t, py::handle d) { return astype(t, DTypeArg(d)); });
}

// Tensors from Python data, NumPy and DLPack, and back.
void BindInterop(py::module_& m) {
  m.def(
      "tensor",
      [](py::object data, py::object dtype, bool wants_grad) {
        Tensor t =
            ToTensor(data, dtype.is_none() ? std::nullopt : std::optional<DType>(DTypeArg(dtype)));
        if (py::isinstance<Tensor>(data)) t = Tensor(t.value());  // a copy, as torch.tensor
        if (wants_grad) requires_grad_(t, true);
        return t;
      },
      py::arg("data"), py::arg("dtype") = py::none(), py::arg("requires_grad") = false,
      "A tensor holding a copy of `data` (NumPy array, scalar, nested list, tensor).");
  m.def(
      "from_numpy",
      [](py::array array) {
        // Shares the array's memory when NumPy can lend it (writable, native
        // byte order) and it is 64-byte aligned; copies otherwise.
        try {
          return FromDlpack(array);
        } catch (const py::error_already_set&) {  // NumPy would not lend it (read-only, ...)
          return ToTensor(array);
        } catch (const Error&) {
          return ToTensor(array);
        }
      },
      py::arg("array"));
  m.def("from_dlpack", &FromDlpack, py::arg("source"),
        "A tensor from any DLPack producer (torch.Tensor, NumPy), sharing its memory when it "
        "is row-major and 64-byte aligned.");
  m.def("to_dlpack", &ToDlpack, py::arg("tensor"));
  // A new handle on the same value: differentiable (gradients follow the
  // value), and no in-place write to the source reaches it.
  m.def(
      "_clone", [](const Tensor& t) { return Tensor(t.value()); }, py::arg("x"));
  // A module function as a method (x.sum(dim=1) is strata.sum(x, dim=1)):
  // built-in functions do not bind self, instance methods do.
  m.def("_instancemethod", [](py::function f) {
    return py::reinterpret_steal<py::object>(PyInstanceMethod_New(f.ptr()));
  });
}

}  // namespace

void BindTensor(py::module_& m) {
  BindDType(m);
  py::class_<Tensor> tensor(m, "Tensor", R"(A lazy tensor: ops record IR; reading values
(numpy(), item(), sync()) compiles and runs what is pending, once per distinct graph.)");
  // No py::init: pybind11's __new__ would hand out an instance whose C++
  // Tensor was never made (Tensor.__new__(Tensor), then any method, crashed).
  // strata/__init__.py makes strata.Tensor(data, dtype) a call of strata.tensor.
  tensor
      .def_property_readonly("shape",
                             [](const Tensor& t) {
                               py::tuple dims(t.rank());
                               for (int64_t i = 0; i < t.rank(); ++i) dims[i] = t.dim(i);
                               return dims;
                             })
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("ndim", &Tensor::rank)
      .def("dim", &Tensor::rank)
      .def("numel", &Tensor::numel)
      .def(
          "size",
          [](const Tensor& t, py::object d) -> py::object {
            if (!d.is_none()) return py::int_(t.dim(Int64Arg(d, "size")));
            return py::tuple(py::cast(t.shape().dims()));
          },
          py::arg("dim") = py::none())
      .def_property_readonly("is_materialized", &Tensor::is_materialized)
      .def(
          "sync",
          [](py::object self) {
            Tensor& t = self.cast<Tensor&>();
            py::gil_scoped_release release;
            t.sync();
            return self;
          },
          "Runs the pending IR this tensor needs; returns the tensor.")
      .def("numpy", &ToNumpy, "A read-only NumPy array sharing the tensor's bytes.")
      .def("item", &Item)
      .def(
          "__dlpack__",
          // The array API's keywords: torch passes max_version first and, on a
          // TypeError, calls again without it (after formatting this tensor's
          // every value into the error message). strata's capsule is DLPack's
          // unversioned one, which a caller asking for a newer version accepts.
          [](const Tensor& t, py::object stream, py::object max_version, py::object dl_device,
             py::object copy) {
            if (!dl_device.is_none() && !dl_device.equal(py::make_tuple(1, 0))) {
              throw py::buffer_error(
                  fmt::format("strata tensors live on the CPU (DLPack device (1, 0)), asked for {}",
                              std::string(py::repr(dl_device))));
            }
            if (!copy.is_none() && copy.cast<bool>()) {
              throw py::buffer_error(
                  "strata's __dlpack__ shares the tensor's memory; copy=True is not supported "
                  "(copy the consumer's tensor instead)");
            }
            return ToDlpack(t);
          },
          py::kw_only(), py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
          py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", [](const Tensor&) { return py::make_tuple(1, 0); })  // kDLCPU
      .def("__len__", &Length)
      .def("__bool__",
           [](Tensor& t) {
             if (t.numel() != 1) {
               Fail(
                   "[bool] the truth value of a tensor with more than one element ({}) is "
                   "ambiguous",
                   t.shape().ToString());
             }
             return Item(t).cast<bool>();
           })
      // Python's own conversions of the item: int(1.9) is 1, int(nan) a ValueError.
      .def("__float__", [](Tensor& t) { return py::float_(Item(t)); })
      .def("__int__", [](Tensor& t) { return py::int_(Item(t)); })
      .def("__index__",
           [](Tensor& t) {
             if (IsFloating(t.dtype())) throw py::type_error("only integer tensors are indices");
             return Item(t).cast<int64_t>();
           })
      .def("__hash__",
           [](py::object self) {
             return py::hash(py::int_(reinterpret_cast<uintptr_t>(self.ptr())));
           })
      .def("__getitem__", [](const Tensor& t, py::handle key) { return Apply(t, key).result; })
      .def("__setitem__", &Assign)
      .def("__add__", &Forward<Add>)
      .def("__radd__", &Reflected<Add>)
      .def("__sub__", &Forward<Sub>)
      .def("__rsub__", &Reflected<Sub>)
      .def("__mul__", &Forward<Mul>)
      .def("__rmul__", &Reflected<Mul>)
      .def("__truediv__", &Forward<Div>)
      .def("__rtruediv__", &Reflected<Div>)
      .def("__pow__", &PowOf)
      .def("__rpow__", &Reflected<Pow>)
      .def("__floordiv__", &Forward<FloorDiv>)
      .def("__rfloordiv__", &Reflected<FloorDiv>)
      .def("__mod__", &Forward<Rem>)
      .def("__rmod__", &Reflected<Rem>)
      .def("__matmul__", &Forward<MatMul>)
      .def("__rmatmul__", &Reflected<MatMul>)
      .def("__and__", &Forward<And>)
      .def("__rand__", &Reflected<And>)
      .def("__or__", &Forward<Or>)
      .def("__ror__", &Reflected<Or>)
      .def("__xor__", &Forward<Xor>)
      .def("__rxor__", &Reflected<Xor>)
      .def("__invert__", [](const Tensor& t) { return bitwise_not(t); })
      .def("__neg__", [](const Tensor& t) { return -t; })
      .def("__pos__",
           [](const Tensor& t) {
             if (t.dtype() == DType::kPred)
               Fail("[pos] unary + is not defined for bool tensors (as torch)");
             return t;
           })
      .def("__delitem__",
           [](const Tensor&, py::handle) {
             throw py::type_error(
                 "strata.Tensor does not support item deletion (a tensor's shape is fixed; "
                 "select what to keep with indexing)");
           })
      .def("__abs__", [](const Tensor& t) { return abs(t); })
      .def("__eq__", &Forward<eq>)
      .def("__ne__", &Forward<ne>)
      .def("__lt__", &Forward<lt>)
      .def("__le__", &Forward<le>)
      .def("__gt__", &Forward<gt>)
      .def("__ge__", &Forward<ge>);
  BindTensorMethods(tensor);
  BindInterop(m);
}

}  // namespace strata::python
