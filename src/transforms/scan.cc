// scan: trace the body once on placeholders, capture what it reads from
// outside as loop invariants, and build one loop node (lowered to a While).
// Its gradient is another scan, in the opposite direction, whose step
// recomputes the forward step from the saved carry and pulls the
// cotangents back through it.
#include "strata/transforms/scan.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "strata/autograd/vjp_sweep.h"
#include "strata/ir/lowering.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"

namespace strata {
namespace {

using Key = std::pair<const ir::Node*, int64_t>;

thread_local int32_t scan_depth = 0;

struct DepthScope {
  DepthScope() { ++scan_depth; }
  ~DepthScope() { --scan_depth; }
};

Shape SliceShape(const Shape& s) {
  return Shape(s.dtype(), std::vector<int64_t>(s.dims().begin() + 1, s.dims().end()));
}

// The traced body rebuilt so that its only leaves are this level's
// placeholders: every outer value it reads (anything not depending on them,
// literals aside) is replaced by a new invariant placeholder.
struct Body {
  std::vector<ir::Value> roots;
  std::vector<ir::Value> captured;  // outer values, in invariant order
  std::vector<ir::NodePtr> invariants;
};

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

// A body check over the loop's steps: `per_step` [length, 2] stacks the
// body check's value of every step. The first step with an index out of
// range, as a position in the index stacked over the steps (its first
// coordinate is the step).
std::shared_ptr<const ir::IndexCheck> OverSteps(const ir::IndexCheck& body, const Tensor& per_step,
                                                int64_t length) {
  const int64_t n = body.index_shape.num_elements();
  Tensor found = reshape(slice(per_step, 1, 0, 1), {length});
  Tensor value = reshape(slice(per_step, 1, 1, 2), {length});
  Tensor steps = arange(length);
  Tensor none = full({}, static_cast<double>(length), DType::kS64);
  Tensor zero = zeros({}, DType::kS64);
  Tensor first = min(where(ge(found, zero), steps, none));
  Tensor at = eq(steps, first);
  Tensor position = first * static_cast<double>(n) + sum(where(at, found, zero));
  Tensor flat = where(lt(first, none), position, full({}, -1, DType::kS64));
  std::vector<int64_t> dims = {length};
  dims.insert(dims.end(), body.index_shape.dims().begin(), body.index_shape.dims().end());
  return std::make_shared<const ir::IndexCheck>(ir::IndexCheck{
      .value = stack({flat, sum(where(at, value, zero))}).value(),
      .op = body.op + " in a scan body",
      .range = body.range,
      .index_shape = Shape(body.index_shape.dtype(), dims),
  });
}

Body Extract(const std::vector<ir::Value>& roots, int32_t level, int64_t first_id) {
  Body body;
  std::unordered_map<const ir::Node*, ir::NodePtr> rebuilt;
  std::map<Key, ir::Value> captured;
  auto inside = [&](const ir::Node* n) { return n->placeholder_level() >= level; };
  // Outer values become invariants, except that literals stay in the body
  // (where they fold), and so do broadcasts, reshapes and converts of
  // values no gradient can ask for (scalar parameters, constants, integers):
  // the loop then carries the small operand (a scalar learning rate), not
  // its expansion. A broadcast of a differentiable tensor is captured as it
  // is: pulled into the body, a gradient asked for that tensor (rather than
  // its operand) would find no path through the loop.
  std::function<bool(const ir::Value&)> gradient_free = [&](const ir::Value& v) {
    const ir::Node& n = *v.node;
    if (!Differentiable(v.shape()) || n.kind() == ir::NodeKind::kScalar) return true;
    if (n.kind() != ir::NodeKind::kOp || n.num_outputs() != 1 || n.gradient_rule()) return false;
    if (n.opcode() == hlo::Opcode::kConstant) return true;
    return (n.opcode() == hlo::Opcode::kBroadcast || n.opcode() == hlo::Opcode::kReshape ||
            n.opcode() == hlo::Opcode::kConvert) &&
           gradient_free(n.operands()[0]);
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
void CheckLeaks(const std::vector<std::pair<lazy::TensorImpl*, ir::Value>>& before, int32_t level,
                const std::unordered_set<lazy::TensorImpl*>& allowed) {
  std::unordered_map<lazy::TensorImpl*, ir::Value> old(before.begin(), before.end());
  std::vector<std::string> problems;
  for (auto& [impl, value] : lazy::Context::Get().LiveValues()) {
    if (value.node->placeholder_level() < level || allowed.count(impl)) continue;
    auto it = old.find(impl);
    if (it != old.end() && it->second.node == value.node && it->second.index == value.index)
      continue;  // left over from an earlier failed trace, not this body's doing
    if (it != old.end()) {
      problems.push_back(
          fmt::format("an outer {} tensor was assigned or updated in place inside fn with a value "
                      "computed from the loop ({}); it keeps its old value",
                      it->second.shape().ToString(), value.node->OpName()));
      lazy::Context::Get().SetValue(impl, it->second);
    } else {
      problems.push_back(fmt::format(
          "a {} tensor computed inside fn ({}) is still alive outside it (stored in an outer "
          "variable?)",
          value.shape().ToString(), value.node->OpName()));
    }
  }
  if (!problems.empty()) {
    std::string all;
    for (const std::string& p : problems) all += (all.empty() ? "" : "; ") + p;
    Fail(
        "[scan] fn leaks values computed from its placeholders: {}. Return them as carries or "
        "ys instead",
        all);
  }
}

void AddImpls(const Tree& t, std::unordered_set<lazy::TensorImpl*>& impls) {
  t.for_each_leaf([&](const Tensor& x) { impls.insert(x.impl()); });
}

// The loop body with its placeholders replaced by `values` (by id). With
// `residuals`, also gives the instantiated value of each body residual.
std::vector<ir::Value> Instantiate(const ir::LoopBody& body, const std::vector<ir::Value>& values,
                                   std::vector<ir::Value>* residuals = nullptr) {
  std::vector<ir::Value> wanted = body.roots;
  if (residuals) wanted.insert(wanted.end(), body.residuals.begin(), body.residuals.end());
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
  for (const ir::Value& r : body.roots) out.push_back(map_value(r));
  if (residuals) {
    residuals->clear();
    for (const ir::Value& r : body.residuals) residuals->push_back(map_value(r));
  }
  return out;
}

// One step's pullback: gradients of the instantiated body for carries fc,
// xs fx and invariants fi, given cotangents for carries fc and ys fy. With
// `saved` (instantiated residual -> its saved value), the gradient graph
// reads those instead of recomputing them.
std::vector<Tensor> StepPullback(const ir::LoopBody& body, const std::vector<ir::Value>& values,
                                 const std::vector<int64_t>& fc, const std::vector<int64_t>& fx,
                                 const std::vector<int64_t>& fi, const std::vector<int64_t>& fy,
                                 const std::vector<Tensor>& cots,
                                 const std::vector<std::pair<int64_t, ir::Value>>& saved) {
  const int64_t c = body.num_carries, x = body.num_xs;
  std::vector<ir::Value> residuals;
  std::vector<ir::Value> roots = Instantiate(body, values, saved.empty() ? nullptr : &residuals);
  std::vector<Tensor> outputs, inputs;
  for (int64_t i : fc) outputs.emplace_back(roots[i]);
  for (int64_t j : fy) outputs.emplace_back(roots[c + j]);
  for (int64_t i : fc) inputs.emplace_back(values[i]);
  for (int64_t j : fx) inputs.emplace_back(values[c + j]);
  for (int64_t k : fi) inputs.emplace_back(values[c + x + k]);
  std::vector<Tensor> grads = VjpImpl(outputs, cots, inputs, /*fill_zeros=*/true);
  if (saved.empty()) return grads;
  std::map<ir::ValueKey, ir::Value> replacements;
  for (const auto& [r, value] : saved) {
    const ir::Value& recomputed = residuals[r];
    replacements[{recomputed.node.get(), recomputed.index}] = value;
  }
  std::vector<ir::Value> grad_values;
  for (const Tensor& g : grads) grad_values.push_back(g.value());
  std::vector<Tensor> result;
  for (ir::Value& v : ir::ReplaceValues(grad_values, replacements)) result.emplace_back(v);
  return result;
}

// Which residuals of a loop node the pullback of one step reads: the
// step's pullback traced once on fresh placeholders, every residual
// replaced by a placeholder of its own (empty when the loop saves none).
std::vector<int64_t> UsedResiduals(const ir::Node& node, const std::vector<int64_t>& fc,
                                   const std::vector<int64_t>& fx, const std::vector<int64_t>& fi,
                                   const std::vector<int64_t>& fy) {
  const ir::LoopBody& body = *node.loop();
  if (body.residuals.empty()) return {};
  DepthScope depth;  // a level of its own: nested scans traced here nest below it
  const int32_t level = scan_depth;
  int64_t id = 0;
  auto fresh = [&](const Shape& s) {
    return ir::Value{ir::Node::MakePlaceholder(s, id++, level), 0};
  };
  std::vector<ir::Value> values;
  for (const ir::NodePtr& p : body.placeholders) values.push_back(fresh(p->shape()));
  std::vector<std::pair<int64_t, ir::Value>> stand_ins;
  std::unordered_map<const ir::Node*, int64_t> residual_of;
  for (size_t r = 0; r < body.residuals.size(); ++r) {
    stand_ins.push_back({static_cast<int64_t>(r), fresh(body.residuals[r].shape())});
    residual_of[stand_ins.back().second.node.get()] = static_cast<int64_t>(r);
  }
  std::vector<Tensor> cots;
  for (int64_t i : fc) cots.emplace_back(fresh(body.roots[i].shape()));
  for (int64_t j : fy) cots.emplace_back(fresh(body.roots[body.num_carries + j].shape()));
  std::vector<Tensor> grads = StepPullback(body, values, fc, fx, fi, fy, cots, stand_ins);
  std::vector<ir::Value> grad_values;
  for (const Tensor& g : grads) grad_values.push_back(g.value());
  std::vector<int64_t> used;
  for (const ir::Node* n : ir::BuildGraph(grad_values).parameters) {
    auto it = residual_of.find(n);
    if (it != residual_of.end()) used.push_back(it->second);
  }
  std::sort(used.begin(), used.end());
  return used;
}

// Reverse mode through a loop node: a scan the other way whose carry is
// (d carry, d invariants accumulated) and whose ys are d xs.
class ScanGradient final : public ir::GradientRule {
 public:
  explicit ScanGradient(Remat remat) : remat_(remat) {}

  std::vector<ir::Value> Vjp(const ir::NodePtr& node,
                             const std::vector<ir::Value>& cotangents) const override {
    const ir::LoopBody& body = *node->loop();
    const auto& ops = node->operands();
    const int64_t c = body.num_carries, x = body.num_xs, ny = body.num_ys();
    const int64_t inv = body.num_invariants();
    std::vector<ir::Value> result(ops.size());
    for (int64_t i = 0; i < c; ++i) {
      if (cotangents[c + ny + i] && Differentiable(node->shape(c + ny + i)))
        Fail("[grad] scan: differentiating through the carry history is not supported");
    }
    std::vector<int64_t> fc, fx, fi,
        fy;  // differentiable carries, xs, invariants; ys with cotangents
    for (int64_t i = 0; i < c; ++i) {
      if (Differentiable(ops[i].shape())) fc.push_back(i);
    }
    for (int64_t j = 0; j < x; ++j) {
      if (Differentiable(ops[c + j].shape())) fx.push_back(j);
    }
    for (int64_t k = 0; k < inv; ++k) {
      if (Differentiable(ops[c + x + k].shape())) fi.push_back(k);
    }
    for (int64_t j = 0; j < ny; ++j) {
      if (cotangents[c + j] && Differentiable(node->shape(c + j))) fy.push_back(j);
    }
    bool any_cotangent = !fy.empty();
    for (int64_t i : fc) any_cotangent = any_cotangent || static_cast<bool>(cotangents[i]);
    if (!any_cotangent || (fc.empty() && fx.empty() && fi.empty())) return result;

    // Backward carry: d carries, then the invariants' gradients so far.
    Tree::List carry0, xs;
    for (int64_t i : fc) {
      carry0.push_back(cotangents[i] ? Tensor(cotangents[i])
                                     : zeros(ops[i].shape().dims(), ops[i].shape().dtype()));
    }
    for (int64_t k : fi) {
      const Shape& s = ops[c + x + k].shape();
      carry0.push_back(zeros(s.dims(), s.dtype()));
    }
    // Backward xs: the carry each step started from, the step's x, its dy.
    for (int64_t i = 0; i < c; ++i) xs.push_back(Tensor(ir::Value{node, c + ny + i}));
    for (int64_t j = 0; j < x; ++j) xs.push_back(Tensor(ops[c + j]));
    for (int64_t j : fy) xs.push_back(Tensor(cotangents[c + j]));

    // Save-everything: the step reads the forward's stacked residuals
    // instead of recomputing them; only those the pullback uses are stacked.
    std::vector<int64_t> saved = UsedResiduals(*node, fc, fx, fi, fy);
    for (int64_t r : saved) xs.push_back(Tensor(ir::Value{node, c + ny + c + r}));

    auto step = [&](const Tree& carry, const Tree& slice) {
      std::vector<ir::Value> values;
      for (int64_t i = 0; i < c + x; ++i) values.push_back(slice[i].leaf().value());
      // Invariants behind identities of their own: d/d(an invariant) must
      // not reach through to another invariant it is computed from (the
      // outer sweep does that, once).
      for (int64_t k = 0; k < inv; ++k) values.push_back(Fresh(ops[c + x + k]));
      std::vector<Tensor> cots;
      for (size_t n = 0; n < fc.size(); ++n) cots.push_back(carry[n].leaf());
      for (size_t n = 0; n < fy.size(); ++n) cots.push_back(slice[c + x + n].leaf());
      std::vector<std::pair<int64_t, ir::Value>> slices;
      for (size_t n = 0; n < saved.size(); ++n) {
        slices.push_back(
            {saved[n], slice[c + x + static_cast<int64_t>(fy.size() + n)].leaf().value()});
      }
      std::vector<Tensor> grads = StepPullback(body, values, fc, fx, fi, fy, cots, slices);
      Tree::List next, dxs;
      for (size_t n = 0; n < fc.size(); ++n) next.push_back(grads[n]);
      for (size_t n = 0; n < fi.size(); ++n)
        next.push_back(carry[fc.size() + n].leaf() + grads[fc.size() + fx.size() + n]);
      for (size_t n = 0; n < fx.size(); ++n) dxs.push_back(grads[fc.size() + n]);
      return std::pair{Tree(std::move(next)), Tree(std::move(dxs))};
    };
    ScanOptions options;
    options.reverse = !body.reverse;
    options.length = body.length;
    options.remat = remat_;
    auto [dcarry, dxs] = scan(step, Tree(std::move(carry0)), Tree(std::move(xs)), options);
    for (size_t n = 0; n < fc.size(); ++n) result[fc[n]] = dcarry[n].leaf().value();
    for (size_t n = 0; n < fi.size(); ++n)
      result[c + x + fi[n]] = dcarry[fc.size() + n].leaf().value();
    for (size_t n = 0; n < fx.size(); ++n) result[c + fx[n]] = dxs[n].leaf().value();
    return result;
  }

 private:
  Remat remat_;
};

}  // namespace

std::pair<Tree, Tree> scan(const ScanFn& fn, const Tree& init, const Tree& xs,
                           const ScanOptions& options) {
  if (!fn) Fail("[scan] fn is empty: pass a callable (carry, x) -> (new carry, y)");
  auto init_leaves = init.leaves_with_paths();
  auto xs_leaves = xs.leaves_with_paths();
  if (options.length && *options.length < 0)
    Fail("[scan] length must be non-negative, got {}", *options.length);
  if (options.unroll < 1) Fail("[scan] unroll must be at least 1, got {}", options.unroll);
  std::optional<int64_t> length = options.length;
  std::string length_from = "length";
  for (const auto& [path, t] : xs_leaves) {
    if (t.rank() == 0) {
      Fail("[scan] xs{} is a scalar {}: every xs leaf needs a leading dimension to scan over", path,
           t.shape().ToString());
    }
    if (!length) {
      length = t.dim(0);
      length_from = fmt::format("xs{} ({})", path, t.shape().ToString());
    } else if (t.dim(0) != *length) {
      Fail("[scan] xs{} ({}) has leading size {}, but {} says {}", path, t.shape().ToString(),
           t.dim(0), length_from, *length);
    }
  }
  if (!length) Fail("[scan] xs is empty and no length was given: the trip count is unknown");
  const int64_t c = static_cast<int64_t>(init_leaves.size());
  const int64_t x = static_cast<int64_t>(xs_leaves.size());

  DepthScope depth;
  const int32_t level = scan_depth;
  std::vector<ir::NodePtr> placeholders;
  std::vector<Tensor> carry_in, x_in;
  for (int64_t i = 0; i < c; ++i) {
    placeholders.push_back(ir::Node::MakePlaceholder(init_leaves[i].second.shape(), i, level));
    carry_in.emplace_back(ir::Value{placeholders.back(), 0});
  }
  for (int64_t j = 0; j < x; ++j) {
    placeholders.push_back(
        ir::Node::MakePlaceholder(SliceShape(xs_leaves[j].second.shape()), c + j, level));
    x_in.emplace_back(ir::Value{placeholders.back(), 0});
  }
  Tree carry_tree = init.spec().Unflatten(std::move(carry_in));
  Tree x_tree = xs.spec().Unflatten(std::move(x_in));

  auto before = lazy::Context::Get().LiveValues();
  std::pair<Tree, Tree> out = fn(carry_tree, x_tree);
  std::unordered_set<lazy::TensorImpl*> allowed;
  for (const Tree* t : {&carry_tree, &x_tree, &out.first, &out.second}) AddImpls(*t, allowed);
  CheckLeaks(before, level, allowed);
  before.clear();

  std::string diff = init.spec().FirstDifference(out.first.spec());
  if (!diff.empty()) {
    Fail("[scan] fn returned a carry shaped {} but init is {}: at {}", out.first.spec().ToString(),
         init.spec().ToString(), diff);
  }
  std::vector<ir::Value> roots;
  auto new_carry = out.first.leaves_with_paths();
  for (int64_t i = 0; i < c; ++i) {
    const Shape& want = init_leaves[i].second.shape();
    const Shape& got = new_carry[i].second.shape();
    if (want != got) {
      Fail("[scan] carry{} is {} in init but fn returned {}", new_carry[i].first, want.ToString(),
           got.ToString());
    }
    roots.push_back(new_carry[i].second.value());
  }
  auto ys = out.second.leaves_with_paths();
  for (const auto& [path, y] : ys) roots.push_back(y.value());
  // Each index check of the body computes its s64[2] every step, as one more
  // y after the user's.
  const std::vector<ir::IndexCheck> body_checks = BodyIndexChecks(roots, level);
  for (const ir::IndexCheck& check : body_checks) roots.push_back(check.value);

  Body body = Extract(roots, level, c + x);
  auto loop = std::make_shared<ir::LoopBody>();
  loop->roots = std::move(body.roots);
  loop->placeholders = std::move(placeholders);
  loop->placeholders.insert(loop->placeholders.end(), body.invariants.begin(),
                            body.invariants.end());
  if (options.remat != Remat::kSaveCarries && !ir::StopGradientScope::active()) {
    // Every floating-point value the body computes (kSaveAll), or every
    // matrix product (kSaveDots), may be stacked for the backward pass;
    // lowering builds only the stacks the pullback reads.
    const bool dots_only =
        options.remat == Remat::kSaveDots || options.remat == Remat::kSaveDotsWithNoBatchDims;
    const bool no_batch = options.remat == Remat::kSaveDotsWithNoBatchDims;
    ir::Graph graph = ir::BuildGraph(loop->roots);
    std::unordered_map<const ir::Node*, ir::NodePtr> owners;
    for (const ir::Value& r : loop->roots) owners.emplace(r.node.get(), r.node);
    for (const ir::Node* n : graph.post_order) {
      for (const ir::Value& v : n->operands()) owners.emplace(v.node.get(), v.node);
    }
    for (const ir::Node* n : graph.post_order) {
      if (n->kind() != ir::NodeKind::kOp || n->placeholder_level() < level ||
          n->opcode() == hlo::Opcode::kTuple || (dots_only && n->opcode() != hlo::Opcode::kDot) ||
          (no_batch && !n->attributes().dot.lhs_batch.empty()))
        continue;
      for (int64_t k = 0; k < n->num_outputs(); ++k) {
        if (!Differentiable(n->shape(k))) continue;
        loop->residuals.push_back(ir::Value{owners.at(n), k});
      }
    }
  }
  loop->num_carries = c;
  loop->num_xs = x;
  loop->length = *length;
  loop->reverse = options.reverse;
  loop->unroll = options.unroll;
  std::vector<ir::Value> operands;
  for (const auto& [path, t] : init_leaves) operands.push_back(t.value());
  for (const auto& [path, t] : xs_leaves) operands.push_back(t.value());
  operands.insert(operands.end(), body.captured.begin(), body.captured.end());
  ir::NodePtr node = ir::Node::MakeLoop(std::move(operands), std::move(loop));
  if (!node->stops_gradient())
    node = node->WithGradientRule(std::make_shared<ScanGradient>(options.remat));

  // Every output carries the body's checks over the steps, each on an
  // identity of its own (a node holds one check), so whichever output a
  // program computes, the loop's indices are checked.
  std::vector<std::shared_ptr<const ir::IndexCheck>> checks;
  for (size_t k = 0; k < body_checks.size(); ++k) {
    const Tensor per_step(ir::Value{node, c + static_cast<int64_t>(ys.size() + k)});
    checks.push_back(OverSteps(body_checks[k], per_step, *length));
  }
  auto output = [&](int64_t i) {
    ir::Value v{node, i};
    for (const auto& check : checks)
      v = ir::Value{ir::Node::MakeOp(hlo::Opcode::kTuple, {v})->WithIndexCheck(check), 0};
    return Tensor(v);
  };
  std::vector<Tensor> final_carry, stacked;
  for (int64_t i = 0; i < c; ++i) final_carry.push_back(output(i));
  for (size_t j = 0; j < ys.size(); ++j) stacked.push_back(output(c + int64_t(j)));
  return {init.spec().Unflatten(std::move(final_carry)),
          out.second.spec().Unflatten(std::move(stacked))};
}

}  // namespace strata
