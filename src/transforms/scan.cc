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
#include "strata/hlo/attention.h"
#include "strata/ir/lowering.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "trace.h"

namespace strata {
namespace {

using trace::Body;

Shape SliceShape(const Shape& s) {
  return Shape(s.dtype(), std::vector<int64_t>(s.dims().begin() + 1, s.dims().end()));
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
      .divisor = body.divisor,
  });
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
  std::vector<ir::Value> wanted = body.roots;
  if (!saved.empty()) wanted.insert(wanted.end(), body.residuals.begin(), body.residuals.end());
  std::vector<ir::Value> roots = trace::Instantiate(wanted, values);
  std::vector<ir::Value> residuals(roots.begin() + static_cast<int64_t>(body.roots.size()),
                                   roots.end());
  roots.resize(body.roots.size());
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
  trace::Level depth;  // a level of its own: nested scans traced here nest below it
  const int32_t level = depth.level();
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

  std::vector<ir::Value> Vjp(const ir::NodePtr& node, const std::vector<ir::Value>& cotangents,
                             const std::vector<bool>& needed) const override {
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
    // xs and invariants off every path to a requested gradient get none: a
    // scalar the body multiplies by would otherwise cost a product and a
    // full reduction per step for a sum nothing reads. (Carries are all
    // kept: one carry's cotangent flows into the others through the body.)
    for (int64_t j = 0; j < x; ++j) {
      if (needed[c + j] && Differentiable(ops[c + j].shape())) fx.push_back(j);
    }
    for (int64_t k = 0; k < inv; ++k) {
      if (needed[c + x + k] && Differentiable(ops[c + x + k].shape())) fi.push_back(k);
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
      // Invariants with a gradient behind identities of their own: d/d(an
      // invariant) must not reach through to another invariant it is
      // computed from (the outer sweep does that, once). The rest stay as
      // they are, so the step's trace still sees a scalar as a scalar (and
      // carries it, not its broadcast, as the backward loop's invariant).
      for (int64_t k = 0; k < inv; ++k) {
        const bool with_gradient = std::find(fi.begin(), fi.end(), k) != fi.end();
        values.push_back(with_gradient ? Fresh(ops[c + x + k]) : ops[c + x + k]);
      }
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

  trace::Level depth;
  const int32_t level = depth.level();
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
  for (const Tree* t : {&carry_tree, &x_tree, &out.first, &out.second})
    trace::AddImpls(*t, allowed);
  trace::CheckLeaks(before, level, allowed, "[scan] fn", "Return them as carries or ys instead");
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
  const std::vector<ir::IndexCheck> body_checks = trace::BodyIndexChecks(roots, level);
  for (const ir::IndexCheck& check : body_checks) roots.push_back(check.value);

  Body body = trace::Extract(roots, level, c + x);
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
          n->opcode() == hlo::Opcode::kTuple)
        continue;
      // Fused attention's output and log-sum-exp count as a product's result
      // ([B, H, S, D] and [B, H, S], never the scores): kept, the backward
      // loop does not run the attention forward again.
      const bool attention = n->opcode() == hlo::Opcode::kCustomCall &&
                             n->attributes().custom_call_target == hlo::kAttentionTarget;
      if (dots_only && n->opcode() != hlo::Opcode::kDot && !attention) continue;
      if (no_batch && !attention && !n->attributes().dot.lhs_batch.empty()) continue;
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
