#include "strata/ir/lowering.h"

#include <fmt/format.h>

#include <unordered_map>
#include <unordered_set>

#include "strata/core/error.h"
#include "strata/hlo/builder.h"

namespace strata::ir {

int64_t Graph::ParameterIdOf(const Node* leaf) const {
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (parameters[i] == leaf) return static_cast<int64_t>(i);
    if (leaf->kind() == NodeKind::kDeviceData && parameters[i]->kind() == NodeKind::kDeviceData &&
        parameters[i]->buffer().data() == leaf->buffer().data()) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

namespace {

// Open-addressing set of pointers: the graph walk visits every node once, and
// a node-allocating std::unordered_set cost more than the rest of the walk.
class PointerSet {
 public:
  PointerSet() : slots_(256, nullptr) {}
  // Returns true if `p` was not in the set.
  bool Insert(const void* p) {
    if (2 * (count_ + 1) > slots_.size()) Grow();
    size_t i = Slot(p, slots_.size());
    while (slots_[i]) {
      if (slots_[i] == p) return false;
      i = (i + 1) & (slots_.size() - 1);
    }
    slots_[i] = p;
    ++count_;
    return true;
  }

 private:
  static size_t Slot(const void* p, size_t size) {
    auto x = reinterpret_cast<uintptr_t>(p);
    return static_cast<size_t>((x >> 4) * 0x9e3779b97f4a7c15ull >> 20) & (size - 1);
  }
  void Grow() {
    std::vector<const void*> old = std::move(slots_);
    slots_.assign(old.size() * 2, nullptr);
    for (const void* p : old) {
      if (!p) continue;
      size_t i = Slot(p, slots_.size());
      while (slots_[i]) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = p;
    }
  }
  std::vector<const void*> slots_;
  size_t count_ = 0;
};

}  // namespace

Graph BuildGraph(std::vector<Value> roots) {
  Graph g;
  g.roots = std::move(roots);
  PointerSet visited;
  std::unordered_map<const Node*, int64_t> leaf_param;
  std::unordered_map<const uint8_t*, int64_t> buffer_param;
  auto param_of = [&](const Node* leaf) {
    auto it = leaf_param.find(leaf);
    if (it != leaf_param.end()) return it->second;
    int64_t id;
    if (leaf->kind() == NodeKind::kDeviceData) {
      auto [bit, inserted] =
          buffer_param.emplace(leaf->buffer().data(), static_cast<int64_t>(g.parameters.size()));
      if (inserted) g.parameters.push_back(leaf);
      id = bit->second;
    } else {
      id = static_cast<int64_t>(g.parameters.size());
      g.parameters.push_back(leaf);
    }
    leaf_param[leaf] = id;
    return id;
  };
  // Iterative post-order; leaf uses are recorded in operand order.
  std::vector<std::pair<const Node*, size_t>> stack;
  for (const Value& root : g.roots) {
    if (root.node->is_leaf()) g.parameter_sequence.push_back(param_of(root.node.get()));
    if (!visited.Insert(root.node.get())) continue;
    stack.push_back({root.node.get(), 0});
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->operands().size()) {
        const Node* op = node->operands()[next++].node.get();
        if (op->is_leaf()) g.parameter_sequence.push_back(param_of(op));
        if (visited.Insert(op)) stack.push_back({op, 0});
      } else {
        g.post_order.push_back(node);
        stack.pop_back();
      }
    }
  }
  HashBuilder h;
  h.Add<uint64_t>(g.roots.size());
  for (const Value& root : g.roots) h.AddHash(root.hash());
  h.AddSpan(std::span<const int64_t>(g.parameter_sequence));
  g.hash = h.Finish();
  return g;
}

namespace {

// Copies a flat shared combiner computation into `module` (once).
hlo::Computation* Import(hlo::Module& module, const hlo::Computation* prototype,
                         std::unordered_map<const hlo::Computation*, hlo::Computation*>& imported) {
  auto it = imported.find(prototype);
  if (it != imported.end()) return it->second;
  auto copy = std::make_unique<hlo::Computation>(prototype->name());
  std::unordered_map<const hlo::Instruction*, hlo::Instruction*> map;
  for (const auto& inst : prototype->instructions()) {
    STRATA_CHECK(inst->called.empty(), "combiner {} calls other computations", prototype->name());
    auto clone = std::make_unique<hlo::Instruction>(*inst);
    std::vector<hlo::Instruction*> operands;
    for (hlo::Instruction* op : inst->operands()) operands.push_back(map.at(op));
    clone->set_operands(std::move(operands));
    map[inst.get()] = copy->AddInstruction(std::move(clone));
  }
  copy->set_root(map.at(prototype->root()));
  hlo::Computation* added = module.AddComputation(std::move(copy));
  imported[prototype] = added;
  return added;
}

}  // namespace

std::unique_ptr<hlo::Module> LowerGraph(const Graph& graph, const std::string& name) {
  auto module = std::make_unique<hlo::Module>(name);
  std::unordered_map<const hlo::Computation*, hlo::Computation*> imported;
  hlo::Builder b("main");
  std::unordered_map<const Node*, hlo::Instruction*> lowered;
  std::vector<hlo::Instruction*> parameters;
  for (size_t i = 0; i < graph.parameters.size(); ++i) {
    const Node* leaf = graph.parameters[i];
    hlo::Instruction* p =
        b.Parameter(static_cast<int64_t>(i), leaf->shape(), fmt::format("p{}", i));
    if (leaf->sharding()) p->sharding = leaf->sharding()->hlo_text();
    parameters.push_back(p);
  }
  auto value_of = [&](const Value& v) -> hlo::Instruction* {
    hlo::Instruction* inst = lowered.at(v.node.get());
    if (!inst->shape().is_tuple()) return inst;
    return b.GetTupleElement(inst, v.index);
  };
  for (const Node* node : graph.post_order) {
    if (node->is_leaf()) {
      lowered[node] = parameters.at(graph.ParameterIdOf(node));
      continue;
    }
    std::vector<hlo::Instruction*> operands;
    for (const Value& v : node->operands()) operands.push_back(value_of(v));
    if (node->opcode() == hlo::Opcode::kOptimizationBarrier) {
      lowered[node] = b.OptimizationBarrier(b.Tuple(std::move(operands)));
      continue;
    }
    bool tuple = node->num_outputs() > 1 || node->opcode() == hlo::Opcode::kTuple;
    Shape shape = tuple ? Shape::Tuple(node->shapes()) : node->shape();
    auto inst = std::make_unique<hlo::Instruction>(node->opcode(), shape, std::move(operands));
    static_cast<hlo::Attributes&>(*inst) = node->attributes();
    for (hlo::Computation*& c : inst->called) c = Import(*module, c, imported);
    if (node->sharding()) inst->sharding = node->sharding()->hlo_text();
    lowered[node] = b.Add(std::move(inst));
  }
  std::vector<hlo::Instruction*> outputs;
  for (const Value& root : graph.roots) outputs.push_back(value_of(root));
  module->AddEntryComputation(b.Build(b.Tuple(std::move(outputs))));
  return module;
}

std::string GraphToText(const Graph& graph) {
  std::unordered_map<const Node*, size_t> id;
  std::string out = fmt::format("IR graph {} {{\n", graph.hash.ToString());
  for (const Node* node : graph.post_order) {
    id[node] = id.size();
    std::string operands;
    for (const Value& v : node->operands()) {
      if (!operands.empty()) operands += ", ";
      operands += v.node->num_outputs() == 1 ? fmt::format("%{}", id.at(v.node.get()))
                                             : fmt::format("%{}.{}", id.at(v.node.get()), v.index);
    }
    std::string shapes;
    for (const Shape& s : node->shapes()) shapes += (shapes.empty() ? "" : ", ") + s.ToString();
    std::string extra;
    if (node->is_leaf()) extra = fmt::format(", parameter={}", graph.ParameterIdOf(node));
    if (node->sharding()) extra += ", sharding=" + node->sharding()->hlo_text();
    out += fmt::format("  %{} = {} {}({}){}, hash={}\n", id[node], shapes, node->OpName(), operands,
                       extra, node->dag_hash().ToString());
  }
  for (size_t i = 0; i < graph.roots.size(); ++i) {
    out += fmt::format("  ROOT {} = %{}.{}\n", i, id.at(graph.roots[i].node.get()),
                       graph.roots[i].index);
  }
  return out + "}\n";
}

std::string GraphToDot(const Graph& graph) {
  std::unordered_map<const Node*, size_t> id;
  std::string out = "digraph strata {\n  node [shape=box, fontname=monospace];\n";
  for (const Node* node : graph.post_order) {
    size_t n = id.size();
    id[node] = n;
    std::string label = fmt::format("{}\\n{}", node->OpName(), node->shape().ToString());
    if (node->sharding()) label += "\\n" + node->sharding()->hlo_text();
    out += fmt::format("  n{} [label=\"{}\"];\n", n, label);
    for (const Value& v : node->operands())
      out += fmt::format("  n{} -> n{};\n", id.at(v.node.get()), n);
  }
  for (size_t i = 0; i < graph.roots.size(); ++i) {
    out += fmt::format("  root{} [label=\"ROOT {}\", shape=ellipse];\n  n{} -> root{};\n", i, i,
                       id.at(graph.roots[i].node.get()), i);
  }
  return out + "}\n";
}

}  // namespace strata::ir
