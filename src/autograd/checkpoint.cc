// Activation checkpointing: the region's outputs go through a tuple node
// whose gradient rule recomputes the region behind an opt-barrier.
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "strata/autograd/grad.h"
#include "strata/autograd/vjp_sweep.h"
#include "strata/ir/lowering.h"
#include "strata/lazy/op_builder.h"

namespace strata {
namespace {

using Key = std::pair<const ir::Node*, int64_t>;

// Outer floating-point values the region from `inputs` to `outputs` reads:
// operands of a node that depends on an input which do not themselves.
std::vector<ir::Value> CapturedValues(const std::vector<ir::Value>& outputs,
                                      const std::vector<ir::Value>& inputs) {
  std::set<Key> input_keys;
  for (const ir::Value& v : inputs) input_keys.insert({v.node.get(), v.index});
  ir::Graph graph = ir::BuildGraph(outputs);
  std::unordered_set<const ir::Node*> dependent;
  std::vector<ir::Value> captured;
  std::set<Key> seen;
  for (const ir::Node* n : graph.post_order) {
    if (n->is_leaf()) continue;
    bool depends = false;
    for (const ir::Value& v : n->operands()) {
      depends =
          depends || input_keys.count({v.node.get(), v.index}) || dependent.count(v.node.get());
    }
    if (!depends) continue;
    dependent.insert(n);
    for (const ir::Value& v : n->operands()) {
      Key k{v.node.get(), v.index};
      if (input_keys.count(k) || dependent.count(v.node.get()) || !Differentiable(v.shape()))
        continue;
      if (seen.insert(k).second) captured.push_back(v);
    }
  }
  return captured;
}

// Operands of the checkpoint node: [outputs (n) | inputs (k) | captured].
class CheckpointRule final : public ir::GradientRule {
 public:
  CheckpointRule(size_t outputs, size_t inputs) : n_(outputs), k_(inputs) {}

  std::vector<ir::Value> Vjp(const ir::NodePtr& node, const std::vector<ir::Value>& cotangents,
                             const std::vector<bool>& needed) const override {
    const auto& ops = node->operands();
    std::vector<ir::Value> result(ops.size());
    std::vector<ir::Value> outputs;
    std::vector<Tensor> cots;
    for (size_t i = 0; i < n_; ++i) {
      if (!cotangents[i] || !Differentiable(ops[i].shape())) continue;
      outputs.push_back(ops[i]);
      cots.emplace_back(cotangents[i]);
    }
    if (outputs.empty()) return result;
    // The barrier holds the inputs until the cotangents exist, so the
    // recomputation runs in the backward pass and nothing of the forward's
    // is kept for it. It stops gradients: cotangents are not differentiated.
    std::vector<ir::Value> barrier_operands(ops.begin() + n_, ops.begin() + n_ + k_);
    for (const Tensor& c : cots) barrier_operands.push_back(c.value());
    ir::NodePtr barrier =
        ir::Node::MakeOp(hlo::Opcode::kOptimizationBarrier, std::move(barrier_operands))
            ->CloneStoppingGradient();
    std::map<Key, ir::Value> subst;
    std::vector<Tensor> wrt;
    for (size_t i = 0; i < k_; ++i) {
      ir::Value held{barrier, static_cast<int64_t>(i)};
      subst[{ops[n_ + i].node.get(), ops[n_ + i].index}] = held;
      wrt.emplace_back(held);
    }
    // Captured values too stand behind identities of their own, so the
    // gradient of one computed from another is not counted twice.
    for (size_t i = n_ + k_; i < ops.size(); ++i) {
      ir::Value fresh = Fresh(ops[i]);
      subst[{ops[i].node.get(), ops[i].index}] = fresh;
      wrt.emplace_back(fresh);
    }
    std::vector<Tensor> recomputed;
    for (ir::Value& v : ir::ReplaceValues(outputs, subst)) recomputed.emplace_back(std::move(v));
    std::vector<Tensor> grads = VjpImpl(recomputed, cots, wrt, /*fill_zeros=*/false);
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].defined()) result[n_ + i] = grads[i].value();
    }
    return result;
  }

 private:
  size_t n_, k_;
};

}  // namespace

std::vector<Tensor> checkpoint(
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
    const std::vector<Tensor>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) Fail("[checkpoint] input {} is an undefined tensor", i);
  }
  std::vector<Tensor> outputs = fn(inputs);
  if (ir::StopGradientScope::active() || outputs.empty()) return outputs;
  std::vector<ir::Value> operands, input_values;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined()) Fail("[checkpoint] fn returned an undefined tensor at {}", i);
    operands.push_back(outputs[i].value());
  }
  for (const Tensor& x : inputs) input_values.push_back(x.value());
  std::vector<ir::Value> captured = CapturedValues(operands, input_values);
  operands.insert(operands.end(), input_values.begin(), input_values.end());
  operands.insert(operands.end(), captured.begin(), captured.end());
  ir::NodePtr node = ir::Node::MakeWithGradientRule(
      std::move(operands), std::make_shared<CheckpointRule>(outputs.size(), inputs.size()));
  for (size_t i = 0; i < outputs.size(); ++i) outputs[i] = Tensor(ir::Value{node, int64_t(i)});
  return outputs;
}

}  // namespace strata
