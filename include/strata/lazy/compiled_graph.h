// A graph compiled once and run on new inputs: jax.jit's compiled object,
// and what strata.torch runs each time a torch.compile'd graph is called.
// The values `outputs` compute from `inputs` (materialized tensors that
// stand for the arguments) are lowered and compiled once, through the
// context's compile cache; Run binds buffers of the same shapes and dtypes
// to the inputs and returns the outputs' buffers, building no IR: a call
// costs the program's run and the binding of its buffers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "strata/ir/hash.h"
#include "strata/lazy/context.h"
#include "strata/lazy/tensor.h"
#include "strata/runtime/device.h"
#include "strata/runtime/executable.h"

namespace strata::lazy {

class CompiledGraph {
 public:
  // Every input must be a materialized tensor of its own buffer (two inputs
  // sharing one would be one program parameter). Outputs may be inputs
  // themselves, constants, or anything computed from the inputs and from
  // other materialized tensors (kept as the program's fixed arguments).
  CompiledGraph(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                Context& context = Context::Get());

  // The outputs for `inputs` (shapes and dtypes as at construction, else an
  // Error naming the input). An index out of range in an indexing op is an
  // Error, as at a sync.
  std::vector<runtime::Buffer> Run(const std::vector<runtime::Buffer>& inputs) const;
  // As Run, with output `o` of each pair (o, i) in `homes` written straight
  // into input i's bytes where the program allows it (it reads input i for
  // the last time before it first writes output o): an in-place update, an
  // optimizer's or a buffer's, that lands in the caller's storage without a
  // copy. Where it does not, output o is a new buffer as in Run. The caller
  // must not read input i's old value afterwards.
  std::vector<runtime::Buffer> Run(const std::vector<runtime::Buffer>& inputs,
                                   const std::vector<std::pair<int64_t, int64_t>>& homes) const;

  const std::vector<Shape>& input_shapes() const { return input_shapes_; }
  const std::vector<Shape>& output_shapes() const { return output_shapes_; }
  // The graph's cache key, and whether building this object compiled it
  // (false: the context's cache already held the program).
  const ir::Hash128& key() const { return key_; }
  bool compiled() const { return compiled_; }
  // The lowered program (before the compiler's passes) as HLO text.
  const std::string& hlo_text() const { return hlo_text_; }
  // Instructions of the program the runtime runs (after fusion).
  int64_t instruction_count() const;
  // Its buffer plan: arena and result bytes (all 0 for a graph that runs nothing).
  runtime::PlanStats plan() const {
    return executable_ ? executable_->stats() : runtime::PlanStats{};
  }

 private:
  // Where each output comes from: a root of the program, an input, or a
  // fixed buffer (a constant the graph returns as it is).
  struct Source {
    enum Kind { kRoot, kInput, kFixed } kind;
    int64_t index;
  };
  // Per program root: the parameter whose bytes it is written into (-1:
  // none); empty where no pair of `homes` names a root and a parameter.
  std::vector<int64_t> RootHomes(const std::vector<std::pair<int64_t, int64_t>>& homes) const;

  std::shared_ptr<const runtime::Executable> executable_;  // owned by its cache entry
  ir::Hash128 key_;
  bool compiled_ = false;
  std::string hlo_text_;
  std::vector<Shape> input_shapes_, output_shapes_;
  // Per program parameter: the input bound to it (-1: fixed_arguments_ holds it).
  std::vector<int64_t> parameter_input_;
  std::vector<runtime::Buffer> fixed_arguments_;  // by parameter (empty where an input binds)
  std::vector<Source> sources_;
  std::vector<runtime::Buffer> fixed_outputs_;
  // The index checks (values computed after the roots from checks_from_ on).
  std::vector<ir::IndexCheck> checks_;
  size_t checks_from_ = 0;
};

}  // namespace strata::lazy
