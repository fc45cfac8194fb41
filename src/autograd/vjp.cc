// The VJP sweep: topological order from the output, one rule per primitive,
// cotangents accumulated by add. Rules are written with the lazy ops, so the
// gradient graph is ordinary lazy IR (it hashes, caches and fuses like any).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "strata/autograd/grad.h"
#include "strata/autograd/vjp_sweep.h"
#include "strata/ir/lowering.h"
#include "strata/lazy/op_builder.h"
#include "vjp_rules.h"

namespace strata {
namespace {

using hlo::Opcode;
using namespace vjp_rules;  // NOLINT: the rules and their helpers
using Key = std::pair<const ir::Node*, int64_t>;

// The sum of one value's cotangent contributions. Pads of disjoint windows
// along one dimension (the rules of slice, split, unstack) are joined into a
// single concatenate instead of N full-size adds: the gradient of N layers
// read as slices of one stacked tensor costs one copy of the stack, not N.
// A cotangent placed in a window of zeros along one dimension: what slice's
// rule gives. {dim, offset} when `g` is such a pad, else nothing.
std::optional<std::pair<int64_t, int64_t>> ZeroPadWindow(const Tensor& g) {
  const ir::Node& n = *g.value().node;
  if (n.kind() != ir::NodeKind::kOp || n.opcode() != Opcode::kPad) return std::nullopt;
  const ir::Node& value = *n.operands()[1].node;
  bool zero = value.kind() == ir::NodeKind::kScalar
                  ? value.scalar().GetAsDouble(0) == 0
                  : value.kind() == ir::NodeKind::kOp && value.opcode() == Opcode::kConstant &&
                        value.attributes().literal.GetAsDouble(0) == 0;
  if (!zero) return std::nullopt;
  std::optional<std::pair<int64_t, int64_t>> window;
  const auto& padding = n.attributes().padding;
  for (int64_t d = 0; d < static_cast<int64_t>(padding.size()); ++d) {
    const hlo::PadRange& p = padding[d];
    if (p.interior != 0 || p.low < 0 || p.high < 0) return std::nullopt;
    if (p.low == 0 && p.high == 0) continue;
    if (window) return std::nullopt;  // padded along two dimensions
    window = std::pair{d, p.low};
  }
  return window;
}

// The nodes under `roots`, operands before users, where a node for which
// `through` gives a value has that value as its one operand.
template <typename Through>
std::vector<const ir::Node*> PostOrderThroughOrigins(const std::vector<ir::Value>& roots,
                                                     const Through& through) {
  std::vector<const ir::Node*> order;
  std::unordered_set<const ir::Node*> visited;
  std::vector<std::pair<const ir::Node*, size_t>> stack;
  auto edges = [&](const ir::Node* n) -> size_t { return through(n) ? 1 : n->operands().size(); };
  auto edge = [&](const ir::Node* n, size_t i) {
    const ir::Value* origin = through(n);
    return origin ? origin->node.get() : n->operands()[i].node.get();
  };
  for (const ir::Value& root : roots) {
    if (!visited.insert(root.node.get()).second) continue;
    stack.push_back({root.node.get(), 0});
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < edges(node)) {
        const ir::Node* op = edge(node, next++);
        if (visited.insert(op).second) stack.push_back({op, 0});
      } else {
        order.push_back(node);
        stack.pop_back();
      }
    }
  }
  return order;
}

Tensor SumContributions(std::vector<Tensor> parts) {
  if (parts.size() == 1) return parts[0];
  const Shape shape = parts[0].shape();
  struct Window {
    int64_t offset;
    Tensor pad;  // the contribution: `piece` placed at `offset` in zeros
    Tensor piece;
  };
  std::map<int64_t, std::vector<Window>> windows;  // by padded dim
  std::vector<Tensor> rest;
  for (Tensor& g : parts) {
    auto w = ZeroPadWindow(g);
    if (!w) {
      rest.push_back(std::move(g));
      continue;
    }
    Tensor piece = T(g.value().node->operands()[0]);
    windows[w->first].push_back({w->second, std::move(g), std::move(piece)});
  }
  for (auto& [dim, ws] : windows) {
    std::sort(ws.begin(), ws.end(),
              [](const auto& a, const auto& b) { return a.offset < b.offset; });
    bool disjoint = ws.size() > 1;
    for (size_t i = 1; i < ws.size() && disjoint; ++i)
      disjoint = ws[i - 1].offset + ws[i - 1].piece.dim(dim) <= ws[i].offset;
    if (!disjoint) {  // overlapping (or alone): add the pads as they are
      for (Window& w : ws) rest.push_back(std::move(w.pad));
      continue;
    }
    std::vector<Tensor> row;
    int64_t at = 0;
    auto gap = [&](int64_t size) {
      if (size == 0) return;
      std::vector<int64_t> dims = shape.dims();
      dims[dim] = size;
      row.push_back(zeros(dims, shape.dtype()));
    };
    for (Window& w : ws) {
      gap(w.offset - at);
      at = w.offset + w.piece.dim(dim);
      row.push_back(std::move(w.piece));
    }
    gap(shape.dim(dim) - at);
    rest.push_back(concat(row, dim));
  }
  Tensor total = rest[0];
  for (size_t i = 1; i < rest.size(); ++i) total = total + rest[i];
  return total;
}

}  // namespace

namespace {

// Cotangents for each operand of `node` given the output cotangents (an
// entry is undefined when that output got none).
std::vector<Tensor> Rule(const ir::NodePtr& owner, const std::vector<Tensor>& out_grads,
                         const std::vector<bool>& needed) {
  const ir::Node& node = *owner;
  const auto& ops = node.operands();
  std::vector<Tensor> in(ops.size());
  if (const ir::GradientRule* rule = node.gradient_rule()) {
    std::vector<ir::Value> cotangents;
    for (const Tensor& g : out_grads) cotangents.push_back(g.defined() ? g.value() : ir::Value{});
    std::vector<ir::Value> grads = rule->Vjp(owner, cotangents, needed);
    STRATA_CHECK(grads.size() == ops.size(), "gradient rule returned {} values for {} operands",
                 grads.size(), ops.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i]) in[i] = T(grads[i]);
    }
    return in;
  }
  if (hlo::VjpRuleOf(node.opcode()) == VjpRule::kIdentity) return out_grads;
  if (node.opcode() == Opcode::kSort) return SortRule(owner, out_grads);
  if (node.opcode() == Opcode::kTopK) return TopKRule(owner, out_grads);
  if (node.opcode() == Opcode::kReduce && node.num_outputs() > 1) {
    return VariadicReduceRule(owner, out_grads);
  }
  if (node.num_outputs() != 1) {
    for (const Tensor& g : out_grads) {
      if (g.defined()) Fail("[grad] no VJP for multi-output {}", node.OpName());
    }
    return in;
  }
  const RuleArgs args{node, node.operands(), out_grads[0], T(ir::Value{owner, 0})};
  // The opcode's row names its rule; every rule is listed here (a new one
  // without a case is a compile error).
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wswitch"
  switch (hlo::VjpRuleOf(node.opcode())) {
    case VjpRule::kElementwise:
      return ElementwiseVjp(args);
    case VjpRule::kDataMovement:
      return DataMovementVjp(args);
    case VjpRule::kReduction:
      return ReductionVjp(args);
    case VjpRule::kIndexing:
      return IndexingVjp(args);
    case VjpRule::kConvolution:
      return ConvolutionVjp(args);
    case VjpRule::kReduceWindow:
      return ReduceWindowVjp(args);
    case VjpRule::kNoGradient:
      return in;          // no gradient flows here
    case VjpRule::kSort:  // SortRule, above
    case VjpRule::kIdentity:
    case VjpRule::kAttached:  // a node without its rule attached: none to use
    case VjpRule::kHloOnly:
      break;
  }
#pragma GCC diagnostic pop
  Fail("[grad] no VJP rule for {} yet", node.OpName());
  return in;
}

}  // namespace

std::vector<Tensor> VjpImpl(const std::vector<Tensor>& outputs,
                            const std::vector<Tensor>& cotangents,
                            const std::vector<Tensor>& inputs, bool fill_zeros) {
  STRATA_CHECK(outputs.size() == cotangents.size(), "{} outputs, {} cotangents", outputs.size(),
               cotangents.size());
  std::vector<ir::Value> roots;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (cotangents[i].shape().dims() != outputs[i].shape().dims()) {
      Fail("[grad] cotangent {} does not match output {}", cotangents[i].shape().ToString(),
           outputs[i].shape().ToString());
    }
    roots.push_back(outputs[i].value());
  }
  // An input is identified by its current value and, when that value is
  // materialized data, by the value it was computed from (a graph built
  // before the input's sync reads that one).
  std::map<Key, size_t> input_index;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::Value& v = inputs[i].value();
    input_index[{v.node.get(), v.index}] = i;
    if (const ir::Value& origin = v.node->origin())
      input_index[{origin.node.get(), origin.index}] = i;
  }
  auto is_input = [&](const ir::Node* n) { return input_index.count({n, 0}) > 0; };
  // Materialized data that kept its origin stands for that value: the
  // sweep passes its cotangent on, as through an identity.
  auto through = [&](const ir::Node* n) -> const ir::Value* {
    return n->kind() == ir::NodeKind::kDeviceData && n->origin() && !is_input(n) ? &n->origin()
                                                                                 : nullptr;
  };
  std::vector<const ir::Node*> post_order = PostOrderThroughOrigins(roots, through);
  // Nodes on a path to some input: only their cotangents are needed.
  std::unordered_set<const ir::Node*> relevant;
  for (const ir::Node* n : post_order) {
    bool r = false;
    for (int64_t k = 0; k < n->num_outputs() && !r; ++k) r = input_index.count({n, k}) > 0;
    if (const ir::Value* origin = through(n)) {
      r = r || relevant.count(origin->node.get());
    } else if (!n->stops_gradient()) {
      for (const ir::Value& v : n->operands()) r = r || relevant.count(v.node.get());
    }
    if (r) relevant.insert(n);
  }
  // Owning pointers to every node (the graph itself holds raw ones).
  std::unordered_map<const ir::Node*, ir::NodePtr> owners;
  for (const ir::Value& root : roots) owners.emplace(root.node.get(), root.node);
  for (const ir::Node* n : post_order) {
    for (const ir::Value& v : n->operands()) owners.emplace(v.node.get(), v.node);
    if (const ir::Value* origin = through(n)) owners.emplace(origin->node.get(), origin->node);
  }
  std::map<Key, std::vector<Tensor>> grads;  // contributions, summed when read
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!Differentiable(outputs[i].shape())) continue;
    grads[{roots[i].node.get(), roots[i].index}].push_back(
        astype(cotangents[i], outputs[i].dtype()));
  }
  for (auto it = post_order.rbegin(); it != post_order.rend(); ++it) {
    const ir::Node* n = *it;
    if (!relevant.count(n)) continue;
    if (const ir::Value* origin = through(n)) {
      auto g = grads.find({n, 0});
      if (g != grads.end()) {
        std::vector<Tensor> passed = std::move(g->second);
        grads.erase(g);
        auto& into = grads[{origin->node.get(), origin->index}];
        into.insert(into.end(), passed.begin(), passed.end());
      }
      continue;
    }
    if (n->is_leaf() || n->stops_gradient()) continue;
    std::vector<Tensor> out_grads(n->num_outputs());
    bool any = false;
    for (int64_t k = 0; k < n->num_outputs(); ++k) {
      auto g = grads.find({n, k});
      if (g != grads.end()) {
        g->second = {SumContributions(std::move(g->second))};  // an input may read it later
        out_grads[k] = g->second[0];
        any = true;
      }
    }
    if (!any) continue;
    std::vector<bool> needed(n->operands().size());
    for (size_t i = 0; i < needed.size(); ++i) {
      const ir::Value& v = n->operands()[i];
      needed[i] = relevant.count(v.node.get()) && Differentiable(v.shape());
    }
    std::vector<Tensor> in_grads = Rule(owners.at(n), out_grads, needed);
    // An op that checks its indices (checked indexing) passes the check to
    // the gradients it produces: a graph of the backward pass alone still
    // finds an index out of range.
    if (const ir::IndexCheck* check = n->index_check()) {
      auto shared = std::make_shared<const ir::IndexCheck>(*check);
      for (Tensor& g : in_grads) {
        if (g.defined() && g.value().node->placeholder_level() == 0)
          g = T(ir::Value{g.value().node->WithIndexCheck(shared), g.value().index});
      }
    }
    for (size_t i = 0; i < n->operands().size(); ++i) {
      const ir::Value& v = n->operands()[i];
      if (!in_grads[i].defined() || !relevant.count(v.node.get()) || !Differentiable(v.shape()))
        continue;
      grads[{v.node.get(), v.index}].push_back(in_grads[i]);
    }
  }
  std::vector<Tensor> result;
  for (const Tensor& x : inputs) {
    std::vector<Tensor> contributions;
    for (const ir::Value* v : {&x.value(), &x.value().node->origin()}) {
      if (!*v) continue;
      auto g = grads.find({v->node.get(), v->index});
      if (g != grads.end())
        contributions.insert(contributions.end(), g->second.begin(), g->second.end());
    }
    Tensor grad = !contributions.empty() ? SumContributions(contributions)
                  : fill_zeros           ? Zeros(x.shape())
                                         : Tensor();
    // A gradient is laid out like its primal (JAX's cotangent rule): the
    // partitioner then reduce-scatters a sharded weight's gradient instead
    // of all-reducing it whole, inside scan's backward loop too.
    const std::optional<ir::Sharding>& sharding =
        x.sharding() ? x.sharding() : x.value().node->sharding();
    if (grad.defined() && sharding && !grad.value().node->sharding()) {
      ir::NodePtr one =
          grad.value().node->num_outputs() == 1 && grad.value().node->kind() == ir::NodeKind::kOp
              ? grad.value().node
              : ir::Node::MakeOp(hlo::Opcode::kCopy, {grad.value()});
      grad = T(ir::Value{one->CloneWithSharding(sharding), 0});
    }
    result.push_back(grad);
  }
  return result;
}

namespace {

// Asking for the gradient of an integer or boolean tensor is an error
// (reaching one on the way is not: it simply carries none).
void CheckInputs(std::string_view op, const std::vector<Tensor>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) Fail("[{}] input {} is an undefined tensor", op, i);
    if (!IsFloating(inputs[i].dtype())) {
      Fail("[{}] input {} is {}: only floating-point tensors have gradients", op, i,
           inputs[i].shape().ToString());
    }
  }
}

}  // namespace

void CheckFloatingOutput(std::string_view op, const Tensor& output) {
  if (!IsFloating(output.dtype())) {
    Fail(
        "[{}] the output is {}: only a floating-point output has gradients (as in torch and "
        "JAX; an integer or bool result is piecewise constant, so convert it with astype if "
        "zero gradients are what you mean)",
        op, output.shape().ToString());
  }
}

std::vector<Tensor> vjp(const Tensor& output, const Tensor& cotangent,
                        const std::vector<Tensor>& inputs) {
  CheckInputs("vjp", inputs);
  return VjpImpl({output}, {cotangent}, inputs, true);
}

std::vector<Tensor> vjp(const std::vector<Tensor>& outputs, const std::vector<Tensor>& cotangents,
                        const std::vector<Tensor>& inputs) {
  if (outputs.size() != cotangents.size()) {
    Fail("[vjp] {} outputs but {} cotangents", outputs.size(), cotangents.size());
  }
  CheckInputs("vjp", inputs);
  return VjpImpl(outputs, cotangents, inputs, true);
}

std::vector<Tensor> gradients(const Tensor& output, const std::vector<Tensor>& inputs) {
  if (output.numel() != 1) {
    Fail("[grad] gradients needs a scalar output, got {}; pass a cotangent to vjp instead",
         output.shape().ToString());
  }
  CheckFloatingOutput("grad", output);
  CheckInputs("gradients", inputs);
  return VjpImpl({output}, {ones(output.shape().dims(), output.dtype())}, inputs, true);
}

}  // namespace strata
