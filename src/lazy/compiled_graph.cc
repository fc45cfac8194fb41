#include "strata/lazy/compiled_graph.h"

#include <fmt/format.h>

#include <map>
#include <utility>

#include "strata/core/error.h"
#include "strata/hlo/text.h"
#include "strata/ir/lowering.h"

namespace strata::lazy {
namespace {

runtime::Buffer BufferOfLeaf(const ir::Node& leaf) {
  if (leaf.kind() == ir::NodeKind::kDeviceData) return leaf.buffer();
  const hlo::Literal& lit = leaf.scalar();
  return runtime::Buffer::FromHost(lit.shape(), {lit.data(), static_cast<size_t>(lit.size_bytes())},
                                   runtime::Client::Default().device(0));
}

}  // namespace

CompiledGraph::CompiledGraph(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                             Context& context) {
  std::map<const ir::Node*, int64_t> input_of;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::Value& v = inputs[i].value();
    if (v.node->kind() != ir::NodeKind::kDeviceData || inputs[i].sharding()) {
      Fail("[compile] input {} must be a materialized tensor on one device, got a {} {}", i,
           v.node->kind() == ir::NodeKind::kDeviceData ? "sharded" : "pending",
           v.shape().ToString());
    }
    if (!input_of.emplace(v.node.get(), static_cast<int64_t>(i)).second) {
      Fail("[compile] input {} is the same tensor as input {}; give each input its own", i,
           input_of.at(v.node.get()));
    }
    input_shapes_.push_back(v.shape());
  }
  std::vector<ir::Value> roots;
  std::map<std::pair<const ir::Node*, int64_t>, int64_t> root_of;
  for (const Tensor& out : outputs) {
    const ir::Value& v = out.value();
    output_shapes_.push_back(v.shape());
    if (v.node->kind() == ir::NodeKind::kPlaceholder) {
      Fail("[compile] output {} is a value inside a scan body being traced", v.shape().ToString());
    }
    if (v.node->is_leaf()) {
      if (auto it = input_of.find(v.node.get()); it != input_of.end()) {
        sources_.push_back({Source::kInput, it->second});
      } else {
        sources_.push_back({Source::kFixed, static_cast<int64_t>(fixed_outputs_.size())});
        fixed_outputs_.push_back(BufferOfLeaf(*v.node));
      }
      continue;
    }
    auto [it, added] =
        root_of.emplace(std::pair{v.node.get(), v.index}, static_cast<int64_t>(roots.size()));
    if (added) roots.push_back(v);
    sources_.push_back({Source::kRoot, it->second});
  }
  if (roots.empty()) return;  // nothing to compute: every output is an input or a constant
  ir::Graph graph = ir::BuildGraph(roots, /*with_index_checks=*/true);
  key_ = context.CacheKey(graph);
  executable_ = context.ProgramFor(graph, &compiled_);
  hlo_text_ = hlo::ToText(*ir::LowerGraph(graph));
  for (const ir::Node* p : graph.parameters) {
    auto it = input_of.find(p);
    // (A buffer used by an input and by another leaf is one parameter: bound
    // to the input, whose buffer that is at construction.)
    parameter_input_.push_back(it == input_of.end() ? -1 : it->second);
    fixed_arguments_.push_back(it == input_of.end() ? BufferOfLeaf(*p) : runtime::Buffer());
  }
  for (const ir::IndexCheck* check : graph.checks) {
    checks_.push_back(
        ir::IndexCheck{{}, check->op, check->range, check->index_shape, check->divisor});
  }
  checks_from_ = graph.checks_from;
}

std::vector<int64_t> CompiledGraph::RootHomes(
    const std::vector<std::pair<int64_t, int64_t>>& homes) const {
  if (homes.empty()) return {};
  std::vector<int64_t> parameter_of(input_shapes_.size(), -1);
  for (size_t p = 0; p < parameter_input_.size(); ++p) {
    if (parameter_input_[p] >= 0) parameter_of[parameter_input_[p]] = static_cast<int64_t>(p);
  }
  std::vector<int64_t> root_homes(executable_->result_shapes().size(), -1);
  bool any = false;
  for (const auto& [output, input] : homes) {
    const Source& s = sources_[output];
    if (s.kind != Source::kRoot || parameter_of[input] < 0) continue;  // nothing to place
    root_homes[s.index] = parameter_of[input];
    any = true;
  }
  if (!any) root_homes.clear();
  return root_homes;
}

int64_t CompiledGraph::instruction_count() const {
  if (!executable_) return 0;
  int64_t n = 0;
  for (const auto& c : executable_->module().computations()) n += c->instruction_count();
  return n;
}

std::vector<runtime::Buffer> CompiledGraph::Run(const std::vector<runtime::Buffer>& inputs) const {
  return Run(inputs, {});
}

std::vector<runtime::Buffer> CompiledGraph::Run(
    const std::vector<runtime::Buffer>& inputs,
    const std::vector<std::pair<int64_t, int64_t>>& homes) const {
  if (inputs.size() != input_shapes_.size()) {
    Fail("[compile] the compiled graph takes {} inputs, got {}", input_shapes_.size(),
         inputs.size());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].shape() != input_shapes_[i]) {
      Fail("[compile] input {} must be {} as when the graph was compiled, got {}", i,
           input_shapes_[i].ToString(), inputs[i].shape().ToString());
    }
  }
  for (const auto& [output, input] : homes) {  // checked even where nothing runs
    if (output < 0 || output >= static_cast<int64_t>(sources_.size()) || input < 0 ||
        input >= static_cast<int64_t>(input_shapes_.size())) {
      Fail("[compile] cannot write output {} into input {}: the graph has {} outputs and {} inputs",
           output, input, sources_.size(), input_shapes_.size());
    }
  }
  std::vector<runtime::Buffer> results;
  if (executable_) {
    std::vector<runtime::Buffer> arguments = fixed_arguments_;
    for (size_t p = 0; p < arguments.size(); ++p) {
      if (parameter_input_[p] >= 0) arguments[p] = inputs[parameter_input_[p]];
    }
    const runtime::Device* device = runtime::Client::Default().device(0);
    std::vector<int64_t> root_homes = RootHomes(homes);
    results = root_homes.empty() ? executable_->Run(arguments, device)
                                 : executable_->RunInto(arguments, root_homes, device);
    if (!checks_.empty()) {
      ir::Graph checks;
      for (const ir::IndexCheck& c : checks_) checks.checks.push_back(&c);
      checks.checks_from = checks_from_;
      Context::ThrowOnIndexErrors(checks, results);
    }
  }
  std::vector<runtime::Buffer> out;
  out.reserve(sources_.size());
  for (const Source& s : sources_) {
    switch (s.kind) {
      case Source::kRoot:
        out.push_back(results[s.index]);
        break;
      case Source::kInput:
        out.push_back(inputs[s.index]);
        break;
      case Source::kFixed:
        out.push_back(fixed_outputs_[s.index]);
        break;
    }
  }
  return out;
}

}  // namespace strata::lazy
