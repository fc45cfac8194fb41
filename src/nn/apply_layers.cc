#include "strata/nn/apply_layers.h"

#include <fmt/format.h>

#include "strata/autograd/grad.h"
#include "strata/core/error.h"
#include "strata/lazy/ops.h"

namespace strata::nn {
namespace {

// A layer's parameters and buffers by name.
std::vector<std::pair<std::string, Tensor*>> Tensors(Module& m) {
  std::vector<std::pair<std::string, Tensor*>> all = m.named_parameters();
  for (auto& b : m.named_buffers()) all.push_back(b);
  return all;
}

// The scan step running `layer` with its tensors replaced by the slice.
ScanFn Step(Module& layer, const LayerForward& forward) {
  return [&layer, &forward](const Tree& carry, const Tree& slice) {
    std::map<std::string, Tensor> replacements;
    if (slice.is_dict()) {
      for (const auto& [name, t] : slice.dict()) replacements.emplace(name, t.leaf());
    }
    Tensor out;
    functional_call(layer, replacements, [&] { out = forward(layer, carry.leaf()); });
    if (!out.defined() || out.shape() != carry.leaf().shape()) {
      Fail("[apply_layers] a layer must map {} to the same shape and dtype, {} returned {}",
           carry.leaf().shape().ToString(), layer.type_name(),
           out.defined() ? out.shape().ToString() : "an undefined tensor");
    }
    return std::pair{Tree(out), Tree()};
  };
}

struct Trace {
  ir::NodePtr loop;
  std::vector<ir::Value> captured;
};

Trace TraceLayer(Module& layer, const Tensor& input, const LayerForward& forward) {
  Tree::Dict one;
  for (auto& [name, t] : Tensors(layer)) one[name] = unsqueeze(*t, 0);
  ScanOptions options;
  options.length = 1;
  auto [carry, ys] = scan(Step(layer, forward), Tree(input), Tree(std::move(one)), options);
  Trace trace{carry.leaf().value().node, {}};
  const ir::LoopBody& body = *trace.loop->loop();
  const auto& ops = trace.loop->operands();
  trace.captured.assign(ops.begin() + body.num_carries + body.num_xs, ops.end());
  return trace;
}

std::string Describe(const ir::Value& v) {
  const ir::Node& n = *v.node;
  if (n.kind() == ir::NodeKind::kScalar)
    return fmt::format("the scalar {} ({})", n.scalar().ValueToString(), v.shape().ToString());
  if (n.kind() == ir::NodeKind::kDeviceData)
    return fmt::format("a {} tensor's data", v.shape().ToString());
  return fmt::format("a computed {} ({})", v.shape().ToString(), n.OpName());
}

bool SameValue(const ir::Value& a, const ir::Value& b) {
  if (a.node == b.node && a.index == b.index) return true;
  const ir::Node& x = *a.node;
  const ir::Node& y = *b.node;
  if (x.kind() != y.kind() || a.shape() != b.shape()) return false;
  if (x.kind() == ir::NodeKind::kScalar) return x.scalar() == y.scalar();
  if (x.kind() == ir::NodeKind::kDeviceData) return x.buffer().data() == y.buffer().data();
  // Pending outer values: the same computation over the same inputs.
  if (x.dag_hash() != y.dag_hash() || x.operands().size() != y.operands().size()) return false;
  for (size_t i = 0; i < x.operands().size(); ++i) {
    if (!SameValue(x.operands()[i], y.operands()[i])) return false;
  }
  return true;
}

// Error naming how layer i differs from layer 0, or nothing.
void CheckSameAsFirst(size_t i, Module& first, Module& layer) {
  auto prefix = [&] { return fmt::format("[apply_layers] layer {} differs from layer 0:", i); };
  if (layer.type_name() != first.type_name())
    Fail("{} it is a {}, layer 0 a {}", prefix(), layer.type_name(), first.type_name());
  auto a = Tensors(first), b = Tensors(layer);
  for (size_t k = 0; k < std::max(a.size(), b.size()); ++k) {
    if (k >= b.size()) Fail("{} it has no '{}' (layer 0 does)", prefix(), a[k].first);
    if (k >= a.size()) Fail("{} it has an extra '{}'", prefix(), b[k].first);
    if (a[k].first != b[k].first)
      Fail("{} it has '{}' where layer 0 has '{}'", prefix(), b[k].first, a[k].first);
    if (a[k].second->shape() != b[k].second->shape()) {
      Fail("{} '{}' is {}, in layer 0 {}", prefix(), a[k].first, b[k].second->shape().ToString(),
           a[k].second->shape().ToString());
    }
  }
  auto ma = first.named_modules(), mb = layer.named_modules();
  for (size_t k = 0; k < ma.size() && k < mb.size(); ++k) {
    if (ma[k].second->is_training() != mb[k].second->is_training()) {
      std::string where = ma[k].first.empty() ? "the layer" : "'" + ma[k].first + "'";
      Fail("{} {} is in {} mode, in layer 0 in {} mode", prefix(), where,
           mb[k].second->is_training() ? "training" : "eval",
           ma[k].second->is_training() ? "training" : "eval");
    }
  }
}

// Traces every layer and fails naming the first that differs from layer 0.
void CheckHomogeneous(const std::vector<Module*>& layers, const Tensor& input,
                      const LayerForward& forward) {
  if (!forward) Fail("[apply_layers] forward is empty");
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!layers[i]) Fail("[apply_layers] layer {} is null", i);
  }
  if (layers.empty()) return;
  Module& first = *layers[0];
  Trace reference = TraceLayer(first, input, forward);
  for (size_t i = 1; i < layers.size(); ++i) {
    CheckSameAsFirst(i, first, *layers[i]);
    Trace t = TraceLayer(*layers[i], input, forward);
    if (t.loop->node_hash() != reference.loop->node_hash()) {
      Fail(
          "[apply_layers] layer {} differs from layer 0: its traced forward is a different "
          "program (an op, a shape, a dtype or a baked-in constant differs)",
          i);
    }
    if (t.captured.size() != reference.captured.size()) {
      Fail(
          "[apply_layers] layer {} differs from layer 0: its forward reads {} outer values, "
          "layer 0's {}",
          i, t.captured.size(), reference.captured.size());
    }
    for (size_t k = 0; k < t.captured.size(); ++k) {
      if (!SameValue(t.captured[k], reference.captured[k])) {
        Fail(
            "[apply_layers] layer {} differs from layer 0: its forward reads {} where layer 0 "
            "reads {} (a dropout rate or another per-layer constant?)",
            i, Describe(t.captured[k]), Describe(reference.captured[k]));
      }
    }
  }
}

// One scan of `layer` over the stacked tensors (or `length` steps).
Tensor ScanLayers(Module& layer, Tree::Dict stacked, int64_t length, const Tensor& input,
                  const LayerForward& forward, const ScanOptions& options) {
  ScanOptions run = options;
  if (stacked.empty()) run.length = length;
  auto [carry, ys] = scan(Step(layer, forward), Tree(input), Tree(std::move(stacked)), run);
  return carry.leaf();
}

}  // namespace

Tensor apply_layers(const std::vector<Module*>& layers, const Tensor& input,
                    const LayerForward& forward, const ScanOptions& options) {
  if (layers.empty()) return input;
  CheckHomogeneous(layers, input, forward);
  Tree::Dict stacked;
  for (auto& [name, t] : Tensors(*layers[0])) {
    std::vector<Tensor> per_layer;
    for (Module* layer : layers) per_layer.push_back(layer->tensor(name));
    stacked[name] = stack(per_layer, 0);
  }
  return ScanLayers(*layers[0], std::move(stacked), static_cast<int64_t>(layers.size()), input,
                    forward, options);
}

LayerStack::LayerStack(std::vector<std::unique_ptr<Module>> layers, const Tensor& example,
                       const LayerForward& forward)
    : Module("LayerStack"), size_(static_cast<int64_t>(layers.size())) {
  std::vector<Module*> pointers;
  for (auto& layer : layers) pointers.push_back(layer.get());
  CheckHomogeneous(pointers, example, forward);
  if (layers.empty()) return;
  template_ = std::move(layers[0]);
  template_->train(is_training());
  std::vector<std::pair<std::string, Tensor*>> params = template_->named_parameters();
  std::vector<std::pair<std::string, Tensor*>> buffers = template_->named_buffers();
  for (auto* list : {&params, &buffers}) {
    const bool buffer = list == &buffers;
    for (auto& [name, slot] : *list) {
      std::vector<Tensor> per_layer{*slot};
      for (size_t i = 1; i < layers.size(); ++i) per_layer.push_back(layers[i]->tensor(name));
      Tensor& stacked = register_stacked("*." + name, stack(per_layer, 0), buffer);
      if (!buffer) requires_grad_(stacked, requires_grad(*slot));
      // The template's own tensor only gives shape and dtype from now on: a
      // lazy zero, never computed, so no layer's values live twice.
      *slot = zeros(slot->shape().dims(), slot->dtype());
      stacked_.emplace_back(name, &stacked);
    }
  }
}

Tensor LayerStack::forward(const Tensor& x, const LayerForward& forward,
                           const ScanOptions& options) {
  if (size_ == 0) return x;
  if (!forward) Fail("[apply_layers] forward is empty");
  Tree::Dict stacked;
  for (auto& [name, t] : stacked_) stacked[name] = *t;
  return ScanLayers(*template_, std::move(stacked), size_, x, forward, options);
}

Tensor LayerStack::forward_unrolled(const Tensor& x, const LayerForward& forward) {
  if (!forward) Fail("[apply_layers] forward is empty");
  Tensor h = x;
  for (int64_t i = 0; i < size_; ++i)
    functional_call(*template_, layer_tensors(i), [&] { h = forward(*template_, h); });
  return h;
}

std::map<std::string, Tensor> LayerStack::layer_tensors(int64_t i) {
  if (i < 0 || i >= size_) Fail("[apply_layers] layer {} of a stack of {}", i, size_);
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : stacked_) {
    std::vector<int64_t> dims(t->shape().dims().begin() + 1, t->shape().dims().end());
    out.emplace(name, reshape(slice(*t, 0, i, i + 1), dims));
  }
  return out;
}

void LayerStack::OnTrain(bool on) {
  if (template_) template_->train(on);
}

}  // namespace strata::nn
