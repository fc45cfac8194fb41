// strata._strata.CompiledGraph: a graph traced once from Python and then run
// on new arguments without building IR (strata.torch's compiled calls).
// Arguments cross in by DLPack (shared where their layout allows) and
// results leave as DLPack capsules of strata's own buffers.
#include <pybind11/stl.h>

#include "bindings.h"
#include "strata/lazy/compiled_graph.h"

namespace strata::python {

void BindCompiledGraph(py::module_& m) {
  py::class_<lazy::CompiledGraph, std::shared_ptr<lazy::CompiledGraph>>(
      m, "CompiledGraph",
      "CompiledGraph(inputs, outputs): what `outputs` compute from `inputs` (materialized "
      "tensors, each its own buffer), compiled once; run(args) binds new arrays of the same "
      "shapes and dtypes to the inputs.")
      .def(py::init([](const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
             return std::make_shared<lazy::CompiledGraph>(inputs, outputs);
           }),
           py::arg("inputs"), py::arg("outputs"))
      .def(
          "run",
          [](const lazy::CompiledGraph& graph, py::sequence args,
             const std::vector<std::pair<int64_t, int64_t>>& homes) {
            std::vector<runtime::Buffer> buffers;
            buffers.reserve(py::len(args));
            for (py::handle a : args) {
              if (py::isinstance<Tensor>(a)) {
                Tensor& t = a.cast<Tensor&>();
                t.sync();
                buffers.push_back(t.value().node->buffer());
              } else {
                buffers.push_back(BufferFromDlpack(a));
              }
            }
            std::vector<runtime::Buffer> results;
            {
              py::gil_scoped_release release;
              results = graph.Run(buffers, homes);
            }
            py::list out(results.size());
            for (size_t i = 0; i < results.size(); ++i) out[i] = BufferToDlpack(results[i]);
            return out;
          },
          py::arg("args"), py::arg("homes") = std::vector<std::pair<int64_t, int64_t>>{},
          "The outputs for `args` (objects with __dlpack__, or strata tensors) as DLPack "
          "capsules. Each pair (output, input) of `homes` writes that output straight into "
          "that input's memory where the program allows it (an in-place update; the input's "
          "old value is gone).")
      .def_property_readonly("key", [](const lazy::CompiledGraph& g) { return g.key().ToString(); })
      .def_property_readonly("compiled", &lazy::CompiledGraph::compiled,
                             "whether building it compiled (False: the cache had it)")
      .def_property_readonly("hlo_text", &lazy::CompiledGraph::hlo_text)
      .def_property_readonly("instruction_count", &lazy::CompiledGraph::instruction_count)
      .def_property_readonly(
          "plan",
          [](const lazy::CompiledGraph& g) {
            const runtime::PlanStats p = g.plan();
            py::dict d;
            d["arena_bytes"] = p.temp_bytes;
            d["output_bytes"] = p.output_bytes;
            d["in_place_updates"] = p.in_place_updates;
            d["kernels"] = p.kernels;
            return d;
          },
          "the program's buffer plan: its arena (temporaries) and result bytes")
      .def_property_readonly("input_shapes", [](const lazy::CompiledGraph& g) {
        py::list out;
        for (const Shape& s : g.input_shapes()) out.append(s.ToString());
        return out;
      });
}

}  // namespace strata::python
