// SPMD from Python, as PyTorch/XLA spells it: strata.Mesh(device_ids,
// mesh_shape, axis_names) and strata.mark_sharding(t, mesh, partition_spec),
// a spec entry per dimension being None, an axis name or index, or a tuple
// of them.
#include <pybind11/stl.h>

#include <functional>

#include "bindings.h"
#include "strata/ir/sharding.h"
#include "strata/lazy/context.h"
#include "strata/spmd/partitioner.h"

namespace strata::python {

namespace {

std::string AxisName(const ir::Mesh& mesh, py::handle axis) {
  if (py::isinstance<py::str>(axis)) return axis.cast<std::string>();
  if (py::isinstance<py::int_>(axis)) {
    const int64_t i = Int64Arg(axis, "mark_sharding");
    if (i < 0 || i >= mesh.rank()) {
      Fail("[mark_sharding] mesh axis {} out of range for {}", i, mesh.ToString());
    }
    return mesh.axis_names()[i];
  }
  throw py::type_error("a partition spec entry is None, an axis name or index, or a tuple of them");
}

ir::PartitionSpec SpecArg(const ir::Mesh& mesh, py::handle spec) {
  if (!py::isinstance<py::sequence>(spec) || py::isinstance<py::str>(spec)) {
    throw py::type_error("partition_spec must be a tuple with one entry per dimension");
  }
  ir::PartitionSpec out;
  for (py::handle entry : spec) {
    std::vector<std::string> axes;
    if (entry.is_none()) {
    } else if (py::isinstance<py::tuple>(entry) || py::isinstance<py::list>(entry)) {
      for (py::handle a : entry) axes.push_back(AxisName(mesh, a));
    } else {
      axes.push_back(AxisName(mesh, entry));
    }
    out.push_back(std::move(axes));
  }
  return out;
}

// A strata.Tensor argument, or a TypeError naming what came instead.
Tensor& TensorOf(py::handle value, std::string_view op) {
  if (!py::isinstance<Tensor>(value)) {
    throw py::type_error(fmt::format(
        "strata.{} takes a strata.Tensor (it annotates the tensor itself), got {}; make one "
        "with strata.tensor(...) first",
        op, std::string(py::str(py::type::of(value).attr("__name__")))));
  }
  return value.cast<Tensor&>();
}

std::vector<Tensor> Tensors(const py::args& tensors) {
  std::vector<Tensor> out;
  for (py::handle t : tensors) out.push_back(TensorOf(t, "partition_report"));
  return out;
}

// A sequence of ints (device ids, the mesh's shape), or a TypeError naming
// the argument and the first item that is not one.
std::vector<int64_t> IntsOf(py::handle value, std::string_view what) {
  if (!py::isinstance<py::sequence>(value) || py::isinstance<py::str>(value)) {
    throw py::type_error(fmt::format("strata.Mesh: {} must be a sequence of ints, got {}", what,
                                     std::string(py::str(py::type::of(value).attr("__name__")))));
  }
  std::vector<int64_t> out;
  for (py::handle item : value) {
    // Python ints and NumPy's integers (anything with __index__), never bools.
    if (py::isinstance<py::bool_>(item) || py::isinstance<py::float_>(item) ||
        !py::hasattr(item, "__index__")) {
      throw py::type_error(fmt::format("strata.Mesh: {} must be ints, got {} at position {}", what,
                                       std::string(py::repr(item)), out.size()));
    }
    out.push_back(Int64Arg(item, "Mesh"));
  }
  return out;
}

// Where the tensor lives (strata::sharding_of) as text, or None.
template <typename Text>
py::object ShardingAs(const Tensor& t, Text text) {
  std::optional<ir::Sharding> sharding = sharding_of(t);
  if (!sharding) return py::none();
  return py::str(std::invoke(text, *sharding));
}

}  // namespace

void BindSharding(py::module_& m) {
  py::class_<ir::Mesh>(m, "Mesh", "Devices laid out row-major over named axes.")
      .def(py::init([](py::handle id_list, py::handle shape_list, py::object names) {
             std::vector<int64_t> ids = IntsOf(id_list, "device_ids");
             std::vector<int64_t> shape = IntsOf(shape_list, "mesh_shape");
             std::vector<std::string> axis_names;
             if (names.is_none()) {
               for (size_t i = 0; i < shape.size(); ++i)
                 axis_names.push_back("axis" + std::to_string(i));
             } else if (!py::isinstance<py::sequence>(names) || py::isinstance<py::str>(names)) {
               throw py::type_error("strata.Mesh: axis_names must be a sequence of strings");
             } else {
               for (py::handle n : names) {
                 if (!py::isinstance<py::str>(n)) {
                   throw py::type_error(
                       fmt::format("strata.Mesh: axis_names must be strings, got {} at position {}",
                                   std::string(py::repr(n)), axis_names.size()));
                 }
                 axis_names.push_back(n.cast<std::string>());
               }
             }
             return ir::Mesh(std::move(ids), std::move(shape), std::move(axis_names));
           }),
           py::arg("device_ids"), py::arg("mesh_shape"), py::arg("axis_names") = py::none())
      .def_property_readonly("device_ids", &ir::Mesh::device_ids)
      .def_property_readonly("shape", &ir::Mesh::shape)
      .def_property_readonly("axis_names", &ir::Mesh::axis_names)
      .def_property_readonly("size", &ir::Mesh::size)
      .def("__repr__", &ir::Mesh::ToString)
      .def("__eq__", [](const ir::Mesh& a, const ir::Mesh& b) { return a == b; });
  m.def(
      "mark_sharding",
      [](py::object tensor, const ir::Mesh& mesh, py::handle spec) {
        Tensor& t = TensorOf(tensor, "mark_sharding");
        mark_sharding(t, mesh, SpecArg(mesh, spec));
        return tensor;
      },
      py::arg("tensor"), py::arg("mesh"), py::arg("partition_spec"),
      "Records how the tensor is split over the mesh; syncs partition the graph over its "
      "devices. Returns the tensor.");
  m.def(
      "clear_sharding",
      [](py::object tensor) {
        clear_sharding(TensorOf(tensor, "clear_sharding"));
        return tensor;
      },
      py::arg("tensor"));
  m.def(
      "sharding_of", [](const Tensor& t) { return ShardingAs(t, &ir::Sharding::ToString); },
      py::arg("tensor"),
      "Where the tensor lives, as a partition spec on its mesh ('(\\'x\\', None) on "
      "mesh[x=2]'): its own spec, or the layout the partitioner chose for a result or "
      "gradient of a sharded program; None when nothing is sharded.");
  m.def(
      "reshard",
      [](const Tensor& t, const ir::Mesh& mesh, py::handle spec) {
        Tensor out(t.value());
        mark_sharding(out, mesh, SpecArg(mesh, spec));
        return out;
      },
      py::arg("tensor"), py::arg("mesh"), py::arg("partition_spec"),
      "A tensor with the same values, split over the mesh as `partition_spec` says (the "
      "input keeps its own sharding): jax.device_put(x, NamedSharding(...)).");
  m.def(
      "_sharding_parts",
      [](const Tensor& t) -> py::object {
        std::optional<ir::Sharding> sharding = sharding_of(t);
        if (!sharding) return py::none();
        py::list spec;
        for (const std::vector<std::string>& axes : sharding->spec()) spec.append(py::cast(axes));
        return py::make_tuple(py::cast(sharding->mesh()), py::tuple(spec));
      },
      py::arg("tensor"), "(mesh, spec: one list of axis names per dim), or None.");
  m.def(
      "hlo_sharding_of", [](const Tensor& t) { return ShardingAs(t, &ir::Sharding::hlo_text); },
      py::arg("tensor"),
      "The same as XLA's sharding text ('{devices=[2,1]0,1}', torch_xla's "
      "_get_xla_sharding_spec), or None.");
  m.def(
      "partition_report",
      [](py::args tensors) -> py::object {
        auto report = lazy::Context::Get().PartitionReportOf(Tensors(tensors));
        if (!report) return py::none();
        return py::str(report->ToString());
      },
      "What syncing the tensors does on their mesh (collectives, bytes, peak memory), before "
      "running it; None when nothing is sharded.");
}

}  // namespace strata::python
