// SPMD from Python, as PyTorch/XLA spells it: strata.Mesh(device_ids,
// mesh_shape, axis_names) and strata.mark_sharding(t, mesh, partition_spec),
// a spec entry per dimension being None, an axis name or index, or a tuple
// of them.
#include <pybind11/stl.h>

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

std::vector<Tensor> Tensors(const py::args& tensors) {
  std::vector<Tensor> out;
  for (py::handle t : tensors) out.push_back(t.cast<Tensor>());
  return out;
}

}  // namespace

void BindSharding(py::module_& m) {
  py::class_<ir::Mesh>(m, "Mesh", "Devices laid out row-major over named axes.")
      .def(py::init([](std::vector<int64_t> ids, std::vector<int64_t> shape, py::object names) {
             std::vector<std::string> axis_names;
             if (names.is_none()) {
               for (size_t i = 0; i < shape.size(); ++i)
                 axis_names.push_back("axis" + std::to_string(i));
             } else {
               axis_names = names.cast<std::vector<std::string>>();
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
        Tensor& t = tensor.cast<Tensor&>();
        mark_sharding(t, mesh, SpecArg(mesh, spec));
        return tensor;
      },
      py::arg("tensor"), py::arg("mesh"), py::arg("partition_spec"),
      "Records how the tensor is split over the mesh; syncs partition the graph over its "
      "devices. Returns the tensor.");
  m.def(
      "clear_sharding",
      [](py::object tensor) {
        clear_sharding(tensor.cast<Tensor&>());
        return tensor;
      },
      py::arg("tensor"));
  m.def(
      "sharding_of",
      [](const Tensor& t) -> py::object {
        if (!t.sharding()) return py::none();
        return py::str(t.sharding()->ToString());
      },
      py::arg("tensor"),
      "The tensor's sharding as text ('(\\'x\\', None) on mesh[x=2]'), or None.");
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
