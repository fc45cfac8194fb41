#include "strata/ir/lowering.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
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

Graph BuildGraph(std::vector<Value> roots, bool with_index_checks) {
  Graph g;
  g.roots = std::move(roots);
  g.checks_from = g.roots.size();
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
  // Iterative post-order; leaf uses are recorded in operand order. A node's
  // index check becomes a root walked after those before it.
  std::vector<std::pair<const Node*, size_t>> stack;
  for (size_t r = 0; r < g.roots.size(); ++r) {
    const Value root = g.roots[r];  // a copy: checks append to the roots
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
        if (with_index_checks && node->index_check()) {
          g.checks.push_back(node->index_check());
          g.roots.push_back(node->index_check()->value);
        }
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

std::vector<Value> ReplaceValues(const std::vector<Value>& roots,
                                 const std::map<ValueKey, Value>& replacements) {
  Graph graph = BuildGraph(roots);
  std::unordered_map<const Node*, NodePtr> cloned;
  auto map_value = [&](const Value& v) -> Value {
    if (auto r = replacements.find({v.node.get(), v.index}); r != replacements.end())
      return r->second;
    if (auto c = cloned.find(v.node.get()); c != cloned.end()) return {c->second, v.index};
    return v;
  };
  for (const Node* n : graph.post_order) {
    if (n->is_leaf()) continue;
    std::vector<Value> operands;
    bool changed = false;
    for (const Value& v : n->operands()) {
      Value m = map_value(v);
      changed = changed || m.node != v.node || m.index != v.index;
      operands.push_back(std::move(m));
    }
    if (changed) cloned[n] = n->Clone(std::move(operands));
  }
  std::vector<Value> result;
  for (const Value& r : roots) result.push_back(map_value(r));
  return result;
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

namespace {

using OutputKey = std::pair<const Node*, int64_t>;

struct OutputKeyHash {
  size_t operator()(const OutputKey& k) const {
    return std::hash<const void*>()(k.first) * 31 + static_cast<size_t>(k.second);
  }
};

// Lowers lazy IR into builders of one module; loop nodes become While
// loops whose bodies are lowered recursively.
class Lowerer {
 public:
  explicit Lowerer(hlo::Module& module) : module_(module) {}

  // Lowers the graph of `roots` into `b` (leaves come from `leaf`) and
  // returns the instruction of each root.
  std::vector<hlo::Instruction*> Lower(hlo::Builder& b, const std::vector<Value>& roots,
                                       const std::vector<const Node*>& post_order,
                                       const std::function<hlo::Instruction*(const Node*)>& leaf) {
    // Which outputs of each loop node someone reads: only those are built.
    std::unordered_set<OutputKey, OutputKeyHash> used;
    auto note = [&](const Value& v) {
      if (v.node->loop()) used.insert({v.node.get(), v.index});
    };
    for (const Node* n : post_order) {
      for (const Value& v : n->operands()) note(v);
    }
    for (const Value& r : roots) note(r);

    std::unordered_map<const Node*, hlo::Instruction*> lowered;
    std::unordered_map<const Node*, std::vector<hlo::Instruction*>> loop_outputs;
    auto value_of = [&](const Value& v) -> hlo::Instruction* {
      if (auto it = loop_outputs.find(v.node.get()); it != loop_outputs.end()) {
        STRATA_CHECK(it->second.at(v.index) != nullptr, "loop output {} was not built", v.index);
        return it->second[v.index];
      }
      hlo::Instruction* inst = lowered.at(v.node.get());
      if (!inst->shape().is_tuple()) return inst;
      return b.GetTupleElement(inst, v.index);
    };
    for (const Node* node : post_order) {
      if (node->is_leaf()) {
        lowered[node] = leaf(node);
        continue;
      }
      std::vector<hlo::Instruction*> operands;
      for (const Value& v : node->operands()) operands.push_back(value_of(v));
      if (node->loop()) {
        std::vector<bool> wanted(node->num_outputs());
        for (int64_t k = 0; k < node->num_outputs(); ++k) wanted[k] = used.count({node, k}) > 0;
        loop_outputs[node] = LowerLoop(b, *node->loop(), operands, wanted);
        continue;
      }
      if (node->branches()) {
        lowered[node] = LowerConditional(b, *node->branches(), operands);
        continue;
      }
      if (node->opcode() == hlo::Opcode::kOptimizationBarrier) {
        lowered[node] = b.OptimizationBarrier(b.Tuple(std::move(operands)));
        continue;
      }
      bool tuple = node->num_outputs() > 1 || node->opcode() == hlo::Opcode::kTuple;
      Shape shape = tuple ? Shape::Tuple(node->shapes()) : node->shape();
      auto inst = std::make_unique<hlo::Instruction>(node->opcode(), shape, std::move(operands));
      static_cast<hlo::Attributes&>(*inst) = node->attributes();
      for (hlo::Computation*& c : inst->called) c = Import(module_, c, imported_);
      if (node->sharding()) inst->sharding = node->sharding()->hlo_text();
      lowered[node] = b.AddShaped(std::move(inst));  // the node's shape came from the same rules
    }
    std::vector<hlo::Instruction*> result;
    for (const Value& r : roots) result.push_back(value_of(r));
    return result;
  }

 private:
  // One While: state = (counter, carries, xs, invariants, ys, histories),
  // with `unroll` body copies per trip and the remainder trips inlined after
  // it. Returns the instruction of every wanted output (others null).
  std::vector<hlo::Instruction*> LowerLoop(hlo::Builder& b, const LoopBody& body,
                                           const std::vector<hlo::Instruction*>& operands,
                                           const std::vector<bool>& wanted) {
    const int64_t c = body.num_carries, x = body.num_xs;
    const int64_t ny = body.num_ys(), length = body.length;
    const int64_t nr = static_cast<int64_t>(body.residuals.size());
    const int64_t unroll = std::clamp<int64_t>(body.unroll, 1, std::max<int64_t>(length, 1));
    std::vector<int64_t> ys, hist, res;  // outputs kept
    for (int64_t j = 0; j < nr; ++j) {
      if (wanted[c + ny + c + j]) res.push_back(j);
    }
    // The body computes its roots and the residuals someone reads.
    std::vector<Value> computed = body.roots;
    for (int64_t j : res) computed.push_back(body.residuals[j]);
    Graph graph = BuildGraph(computed);
    for (int64_t j = 0; j < ny; ++j) {
      if (wanted[c + j]) ys.push_back(j);
    }
    for (int64_t j = 0; j < c; ++j) {
      if (wanted[c + ny + j]) hist.push_back(j);
    }
    auto stacked = [&](const Shape& s) {
      std::vector<int64_t> dims{length};
      dims.insert(dims.end(), s.dims().begin(), s.dims().end());
      return dims;
    };
    // The state's parts, as instructions of the builder being filled.
    struct State {
      std::vector<hlo::Instruction*> carries, xs, invariants, ys, hist, res;
    };
    // One step at position `index` (an s64 scalar).
    auto step = [&](hlo::Builder& sb, hlo::Instruction* index, State& st) {
      hlo::Instruction* zero = sb.ConstantScalar<int64_t>(0);
      auto starts = [&](int64_t rank) {
        std::vector<hlo::Instruction*> s{index};
        for (int64_t d = 1; d < rank; ++d) s.push_back(zero);
        return s;
      };
      auto write = [&](hlo::Instruction* into, hlo::Instruction* value) {
        std::vector<int64_t> dims{1};
        const auto& vd = value->shape().dims();
        dims.insert(dims.end(), vd.begin(), vd.end());
        return sb.DynamicUpdateSlice(into, sb.Reshape(value, dims), starts(into->shape().rank()));
      };
      std::vector<hlo::Instruction*> slices;
      for (hlo::Instruction* xs : st.xs) {
        std::vector<int64_t> sizes = xs->shape().dims();
        sizes[0] = 1;
        hlo::Instruction* s = sb.DynamicSlice(xs, starts(xs->shape().rank()), sizes);
        slices.push_back(sb.Reshape(s, std::vector<int64_t>(sizes.begin() + 1, sizes.end())));
      }
      for (size_t k = 0; k < hist.size(); ++k) st.hist[k] = write(st.hist[k], st.carries[hist[k]]);
      auto leaf = [&](const Node* n) -> hlo::Instruction* {
        STRATA_CHECK(n->kind() == NodeKind::kPlaceholder,
                     "a loop body reads {} that is not one of its placeholders", n->OpName());
        int64_t id = n->placeholder_id();
        if (id < c) return st.carries[id];
        if (id < c + x) return slices[id - c];
        return st.invariants[id - c - x];
      };
      std::vector<hlo::Instruction*> out = Lower(sb, computed, graph.post_order, leaf);
      for (int64_t i = 0; i < c; ++i) st.carries[i] = out[i];
      for (size_t k = 0; k < ys.size(); ++k) st.ys[k] = write(st.ys[k], out[c + ys[k]]);
      for (size_t k = 0; k < res.size(); ++k) {
        st.res[k] = write(st.res[k], out[body.roots.size() + k]);
      }
    };
    auto position = [&](hlo::Builder& sb, hlo::Instruction* t) {  // trip t -> xs index
      if (!body.reverse) return t;
      return sb.Subtract(sb.ConstantScalar<int64_t>(length - 1), t);
    };

    State init;
    init.carries.assign(operands.begin(), operands.begin() + c);
    init.xs.assign(operands.begin() + c, operands.begin() + c + x);
    init.invariants.assign(operands.begin() + c + x, operands.end());
    for (int64_t j : ys) {
      const Shape& s = body.roots[c + j].shape();
      init.ys.push_back(
          b.Broadcast(b.Constant(hlo::Literal(Shape::Scalar(s.dtype()))), stacked(s), {}));
    }
    for (int64_t j : res) {
      const Shape& s = body.residuals[j].shape();
      init.res.push_back(
          b.Broadcast(b.Constant(hlo::Literal(Shape::Scalar(s.dtype()))), stacked(s), {}));
    }
    for (int64_t j : hist) {
      const Shape& s = body.placeholders[j]->shape();
      init.hist.push_back(
          b.Broadcast(b.Constant(hlo::Literal(Shape::Scalar(s.dtype()))), stacked(s), {}));
    }
    auto flatten = [&](hlo::Builder& sb, hlo::Instruction* counter, const State& st) {
      std::vector<hlo::Instruction*> parts{counter};
      for (const auto* group : {&st.carries, &st.xs, &st.invariants, &st.ys, &st.hist, &st.res})
        parts.insert(parts.end(), group->begin(), group->end());
      return sb.Tuple(std::move(parts));
    };
    auto unflatten = [&](hlo::Builder& sb, hlo::Instruction* tuple, State& st) {
      int64_t k = 1;
      for (auto* group : {&st.carries, &st.xs, &st.invariants, &st.ys, &st.hist, &st.res}) {
        for (hlo::Instruction*& e : *group) e = sb.GetTupleElement(tuple, k++);
      }
    };
    const int64_t trips = length / unroll;
    State st = init;
    if (trips > 0) {
      hlo::Instruction* state = flatten(b, b.ConstantScalar<int64_t>(0), init);
      int64_t id = loop_count_++;
      hlo::Builder cb(fmt::format("scan_condition.{}", id));
      hlo::Instruction* cp = cb.Parameter(0, state->shape(), "state");
      hlo::Computation* cond = module_.AddComputation(
          cb.Build(cb.Compare(cb.GetTupleElement(cp, 0), cb.ConstantScalar<int64_t>(trips * unroll),
                              hlo::Comparison::kLt)));
      hlo::Builder bb(fmt::format("scan_body.{}", id));
      hlo::Instruction* bp = bb.Parameter(0, state->shape(), "state");
      State inner = init;
      unflatten(bb, bp, inner);
      hlo::Instruction* counter = bb.GetTupleElement(bp, 0);
      for (int64_t u = 0; u < unroll; ++u) {
        hlo::Instruction* t = u == 0 ? counter : bb.Add(counter, bb.ConstantScalar<int64_t>(u));
        step(bb, position(bb, t), inner);
      }
      hlo::Instruction* next = bb.Add(counter, bb.ConstantScalar<int64_t>(unroll));
      hlo::Computation* loop_body = module_.AddComputation(bb.Build(flatten(bb, next, inner)));
      unflatten(b, b.While(cond, loop_body, state), st);
    }
    for (int64_t t = trips * unroll; t < length; ++t) {
      step(b, position(b, b.ConstantScalar<int64_t>(t)), st);
    }
    std::vector<hlo::Instruction*> result(wanted.size(), nullptr);
    for (int64_t i = 0; i < c; ++i) result[i] = st.carries[i];
    for (size_t k = 0; k < ys.size(); ++k) result[c + ys[k]] = st.ys[k];
    for (size_t k = 0; k < hist.size(); ++k) result[c + ny + hist[k]] = st.hist[k];
    for (size_t k = 0; k < res.size(); ++k) result[c + ny + c + res[k]] = st.res[k];
    return result;
  }

  // One conditional: each branch a computation of one tuple parameter (the
  // operands after the selector) returning a tuple of its roots.
  hlo::Instruction* LowerConditional(hlo::Builder& b, const Branches& branches,
                                     const std::vector<hlo::Instruction*>& operands) {
    hlo::Instruction* tuple =
        b.Tuple(std::vector<hlo::Instruction*>(operands.begin() + 1, operands.end()));
    const int64_t id = cond_count_++;
    std::vector<hlo::Computation*> computations;
    for (size_t k = 0; k < branches.roots.size(); ++k) {
      hlo::Builder bb(fmt::format("cond_branch.{}.{}", id, k));
      hlo::Instruction* param = bb.Parameter(0, tuple->shape(), "operands");
      const std::vector<Value>& roots = branches.roots[k];
      auto leaf = [&](const Node* n) -> hlo::Instruction* {
        STRATA_CHECK(n->kind() == NodeKind::kPlaceholder,
                     "a cond branch reads {} that is not one of its placeholders", n->OpName());
        return bb.GetTupleElement(param, n->placeholder_id());
      };
      std::vector<hlo::Instruction*> out = Lower(bb, roots, BuildGraph(roots).post_order, leaf);
      computations.push_back(module_.AddComputation(bb.Build(bb.Tuple(std::move(out)))));
    }
    std::vector<hlo::Instruction*> inputs(computations.size(), tuple);
    return b.Conditional(operands[0], std::move(computations), std::move(inputs));
  }

  hlo::Module& module_;
  std::unordered_map<const hlo::Computation*, hlo::Computation*> imported_;
  int64_t loop_count_ = 0;
  int64_t cond_count_ = 0;
};

}  // namespace

std::unique_ptr<hlo::Module> LowerGraph(const Graph& graph, const std::string& name) {
  auto module = std::make_unique<hlo::Module>(name);
  hlo::Builder b("main");
  std::vector<hlo::Instruction*> parameters;
  for (size_t i = 0; i < graph.parameters.size(); ++i) {
    const Node* leaf = graph.parameters[i];
    if (leaf->kind() == NodeKind::kPlaceholder) {
      Fail(
          "[lowering] a loop-body placeholder ({}) escaped its scan: a tensor computed inside a "
          "scan body was used outside it",
          leaf->shape().ToString());
    }
    hlo::Instruction* p =
        b.Parameter(static_cast<int64_t>(i), leaf->shape(), fmt::format("p{}", i));
    if (leaf->sharding()) p->sharding = leaf->sharding()->hlo_text();
    parameters.push_back(p);
  }
  Lowerer lowerer(*module);
  std::vector<hlo::Instruction*> outputs =
      lowerer.Lower(b, graph.roots, graph.post_order,
                    [&](const Node* leaf) { return parameters.at(graph.ParameterIdOf(leaf)); });
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
