// The tracing machinery of trace.h.
#include "trace.h"

#include <fmt/format.h>

#include <functional>
#include <map>
#include <string>
#include <unordered_map>

#include "strata/autograd/vjp_sweep.h"
#include "strata/core/error.h"
#include "strata/ir/lowering.h"
#include "strata/lazy/context.h"

namespace strata::trace {
namespace {

using Key = std::pair<const ir::Node*, int64_t>;

thread_local int32_t depth = 0;

}  // namespace

Level::Level() : level_(++depth) {}
Level::~Level() { --depth; }

Body Extract(const std::vector<ir::Value>& roots, int32_t level, int64_t first_id) {
  Body body;
  std::unordered_map<const ir::Node*, ir::NodePtr> rebuilt;
  std::map<Key, ir::Value> captured;
  auto inside = [&](const ir::Node* n) { return n->placeholder_level() >= level; };
  // Outer values become invariants, except that literals stay in the body
  // (where they fold), and so do broadcasts, reshapes and converts of
  // values no gradient can ask for: integers, and values computed from
  // literals alone (scalar parameters, constants, iotas: a rotary table).
  // The loop then carries the small operand (a scalar learning rate, the
  // table), not its expansion. A broadcast of a tensor computed from data
  // is captured as it is: pulled into the body, a gradient asked for that
  // tensor (rather than its operand) would find no path through the loop.
  std::unordered_map<const ir::Node*, bool> literal_only;
  std::function<bool(const ir::Value&)> gradient_free = [&](const ir::Value& v) {
    const ir::Node& n = *v.node;
    if (!Differentiable(v.shape()) || n.kind() == ir::NodeKind::kScalar) return true;
    if (n.kind() != ir::NodeKind::kOp || n.num_outputs() != 1 || n.gradient_rule()) return false;
    auto [it, fresh] = literal_only.emplace(&n, false);
    if (!fresh) return it->second;
    bool free = true;
    for (const ir::Value& op : n.operands()) free = free && gradient_free(op);
    return literal_only[&n] = free;
  };
  std::function<ir::Value(const ir::Value&)> map_value = [&](const ir::Value& v) -> ir::Value {
    if (inside(v.node.get())) return {rebuilt.at(v.node.get()), v.index};
    const ir::Node& n = *v.node;
    if (n.kind() == ir::NodeKind::kOp && n.opcode() == hlo::Opcode::kConstant) return v;
    Key key{v.node.get(), v.index};
    auto it = captured.find(key);
    if (it != captured.end()) return it->second;
    if (n.kind() == ir::NodeKind::kOp && n.num_outputs() == 1 && !n.gradient_rule() &&
        (n.opcode() == hlo::Opcode::kBroadcast || n.opcode() == hlo::Opcode::kReshape ||
         n.opcode() == hlo::Opcode::kConvert) &&
        gradient_free(v)) {
      ir::Value operand = map_value(n.operands()[0]);
      return captured[key] = ir::Value{n.Clone({operand}), 0};
    }
    int64_t id = first_id + static_cast<int64_t>(body.captured.size());
    ir::NodePtr p = ir::Node::MakePlaceholder(v.shape(), id, level);
    body.captured.push_back(v);
    body.invariants.push_back(p);
    return captured[key] = ir::Value{p, 0};
  };
  // Iterative post-order over the nodes that depend on the placeholders.
  std::vector<std::pair<const ir::Node*, size_t>> stack;
  std::unordered_set<const ir::Node*> visited;
  std::unordered_map<const ir::Node*, ir::NodePtr> owner;
  auto push = [&](const ir::Value& v) {
    if (inside(v.node.get()) && visited.insert(v.node.get()).second) {
      owner[v.node.get()] = v.node;
      stack.push_back({v.node.get(), 0});
    }
  };
  for (const ir::Value& r : roots) {
    push(r);
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      if (next < n->operands().size()) {
        push(n->operands()[next++]);
        continue;
      }
      const ir::Node* done = n;
      stack.pop_back();
      if (done->is_leaf()) {
        rebuilt[done] = owner.at(done);
        continue;
      }
      std::vector<ir::Value> operands;
      bool changed = false;
      for (const ir::Value& v : done->operands()) {
        ir::Value m = map_value(v);
        changed = changed || m.node != v.node;
        operands.push_back(std::move(m));
      }
      rebuilt[done] = changed ? done->Clone(std::move(operands)) : owner.at(done);
    }
    body.roots.push_back(map_value(r));
  }
  return body;
}

// After tracing: no tensor outside the body may hold a value computed from
// its placeholders. Outer tensors the body rebound are restored.
void CheckLeaks(const LiveValues& before, int32_t level,
                const std::unordered_set<lazy::TensorImpl*>& allowed, std::string_view who,
                std::string_view instead) {
  std::unordered_map<lazy::TensorImpl*, ir::Value> old(before.begin(), before.end());
  std::vector<std::string> problems;
  for (auto& [impl, value] : lazy::Context::Get().LiveValues()) {
    if (value.node->placeholder_level() < level || allowed.count(impl)) continue;
    auto it = old.find(impl);
    if (it != old.end() && it->second.node == value.node && it->second.index == value.index)
      continue;  // left over from an earlier failed trace, not this body's doing
    if (it != old.end()) {
      problems.push_back(
          fmt::format("an outer {} tensor was assigned or updated in place inside {} with a value "
                      "computed from its placeholders ({}); it keeps its old value",
                      it->second.shape().ToString(), who, value.node->OpName()));
      lazy::Context::Get().SetValue(impl, it->second);
    } else {
      problems.push_back(fmt::format(
          "a {} tensor computed inside {} ({}) is still alive outside it (stored in an outer "
          "variable?)",
          value.shape().ToString(), who, value.node->OpName()));
    }
  }
  if (!problems.empty()) {
    std::string all;
    for (const std::string& p : problems) all += (all.empty() ? "" : "; ") + p;
    Fail("{} leaks values computed from its placeholders: {}. {}", who, all, instead);
  }
}

void AddImpls(const Tree& t, std::unordered_set<lazy::TensorImpl*>& impls) {
  t.for_each_leaf([&](const Tensor& x) { impls.insert(x.impl()); });
}

// The index checks of ops inside the body (checked indexing): those of nodes
// at the body's level reachable from its roots. Copies, since extracting the
// body rebuilds its nodes.
std::vector<ir::IndexCheck> BodyIndexChecks(const std::vector<ir::Value>& roots, int32_t level) {
  std::vector<ir::IndexCheck> checks;
  if (!lazy::Context::Get().index_checks()) return checks;
  for (const ir::Node* n : ir::BuildGraph(roots).post_order) {
    if (n->index_check() && n->placeholder_level() >= level) checks.push_back(*n->index_check());
  }
  return checks;
}

std::vector<ir::Value> Instantiate(const std::vector<ir::Value>& wanted,
                                   const std::vector<ir::Value>& values) {
  ir::Graph graph = ir::BuildGraph(wanted);
  std::unordered_map<const ir::Node*, ir::NodePtr> rebuilt;
  auto map_value = [&](const ir::Value& v) -> ir::Value {
    if (v.node->kind() == ir::NodeKind::kPlaceholder) return values.at(v.node->placeholder_id());
    auto it = rebuilt.find(v.node.get());
    return it == rebuilt.end() ? v : ir::Value{it->second, v.index};
  };
  for (const ir::Node* n : graph.post_order) {
    if (n->is_leaf()) continue;
    std::vector<ir::Value> operands;
    for (const ir::Value& v : n->operands()) operands.push_back(map_value(v));
    rebuilt[n] = n->Clone(std::move(operands));
  }
  std::vector<ir::Value> out;
  for (const ir::Value& r : wanted) out.push_back(map_value(r));
  return out;
}

}  // namespace strata::trace
