#include "strata/ir/node.h"

#include "strata/runtime/sharded_buffer.h"

#include <fmt/format.h>

#include <map>
#include <mutex>

#include "strata/core/error.h"
#include "strata/hlo/builder.h"
#include "strata/hlo/shape_inference.h"

namespace strata::ir {
namespace {

const std::shared_ptr<const hlo::Attributes>& EmptyAttributes() {
  static const auto* empty =
      new std::shared_ptr<const hlo::Attributes>(std::make_shared<hlo::Attributes>());
  return *empty;
}

void AddShape(HashBuilder& h, const Shape& s) {
  h.Add(static_cast<uint8_t>(s.dtype())).AddSpan(std::span<const int64_t>(s.dims()));
}

void AddAttributes(HashBuilder& h, const hlo::Attributes& a) {
  h.AddSpan(std::span<const int64_t>(a.dimensions));
  h.Add<uint64_t>(a.slice.size());
  for (const auto& r : a.slice) h.Add(r.start).Add(r.limit).Add(r.stride);
  h.AddSpan(std::span<const int64_t>(a.dynamic_slice_sizes));
  h.Add<uint64_t>(a.padding.size());
  for (const auto& p : a.padding) h.Add(p.low).Add(p.high).Add(p.interior);
  h.Add(static_cast<uint8_t>(a.direction)).Add(static_cast<uint8_t>(a.comparison_type));
  h.Add(static_cast<uint8_t>(a.is_stable)).Add(a.k).Add(static_cast<uint8_t>(a.largest));
  for (const auto* v :
       {&a.dot.lhs_batch, &a.dot.rhs_batch, &a.dot.lhs_contracting, &a.dot.rhs_contracting,
        &a.gather.offset_dims, &a.gather.collapsed_slice_dims, &a.gather.start_index_map,
        &a.gather.slice_sizes, &a.scatter.update_window_dims, &a.scatter.inserted_window_dims,
        &a.scatter.scatter_dims_to_operand_dims, &a.gather.operand_batching_dims,
        &a.gather.start_indices_batching_dims, &a.scatter.input_batching_dims,
        &a.scatter.scatter_indices_batching_dims}) {
    h.AddSpan(std::span<const int64_t>(*v));
  }
  h.Add(a.gather.index_vector_dim).Add(a.scatter.index_vector_dim);
  h.Add<uint64_t>(a.window.size());
  for (const auto& w : a.window) {
    h.Add(w.size).Add(w.stride).Add(w.pad_low).Add(w.pad_high).Add(w.window_dilation);
    h.Add(w.base_dilation).Add(static_cast<uint8_t>(w.window_reversal));
  }
  const hlo::ConvolutionDims& c = a.convolution;
  h.Add(c.input_batch).Add(c.input_feature).Add(c.kernel_input_feature);
  h.Add(c.kernel_output_feature).Add(c.output_batch).Add(c.output_feature);
  for (const auto* v : {&c.input_spatial, &c.kernel_spatial, &c.output_spatial}) {
    h.AddSpan(std::span<const int64_t>(*v));
  }
  h.Add(a.feature_group_count).Add(a.batch_group_count);
  if (a.literal.size_bytes() > 0) {
    AddShape(h, a.literal.shape());
    h.AddSpan(std::span<const uint8_t>(a.literal.data(), a.literal.size_bytes()));
  }
  h.Add(static_cast<uint8_t>(a.linalg.lower)).Add(static_cast<uint8_t>(a.linalg.left_side));
  h.Add(static_cast<uint8_t>(a.linalg.unit_diagonal));
  h.Add(static_cast<uint8_t>(a.linalg.transpose_a)).Add(a.epsilon).Add(a.feature_index);
  h.Add(a.exponent_bits).Add(a.mantissa_bits);
  h.AddString(a.rng_algorithm);
  h.AddString(a.fusion_kind);
  h.AddString(a.custom_call_target);
  h.AddString(a.backend_config);
  h.AddString(a.algorithm);
  // Called computations are shared combiners: their (unique) names identify them.
  for (const hlo::Computation* c : a.called) h.AddString(c->name());
}

}  // namespace

const Shape& Value::shape() const { return node->shape(index); }

Hash128 Value::hash() const { return HashBuilder().AddHash(node->dag_hash()).Add(index).Finish(); }

// Whether `a` holds nothing but defaults (most ops): such nodes share one
// attribute object and skip hashing it.
static bool IsDefault(const hlo::Attributes& a) {
  return a.dimensions.empty() && a.slice.empty() && a.dynamic_slice_sizes.empty() &&
         a.padding.empty() && a.direction == hlo::Comparison::kEq &&
         a.comparison_type == hlo::ComparisonType::kDefault && !a.is_stable && a.k == 0 &&
         a.largest && a.dot == hlo::DotDims{} && a.gather == hlo::GatherDims{} &&
         a.scatter == hlo::ScatterDims{} && a.window.empty() &&
         a.convolution == hlo::ConvolutionDims{} && a.feature_group_count == 1 &&
         a.batch_group_count == 1 && a.literal.size_bytes() == 0 && a.rng_algorithm.empty() &&
         a.linalg == hlo::LinalgOptions{} && a.epsilon == 0 && a.feature_index == 0 &&
         a.exponent_bits == 0 && a.mantissa_bits == 0 && a.fusion_kind.empty() &&
         a.custom_call_target.empty() && a.backend_config.empty() && a.algorithm.empty() &&
         a.sharding.empty() && a.called.empty() && a.parameter_number == -1 && a.tuple_index == -1;
}

namespace {

// Complex numbers and tokens live in HLO programs only: the lazy ops, their
// gradients and the Python API know real tensors, and a complex tensor
// would get real gradients silently.
void CheckTensorType(std::string_view op, const Shape& shape) {
  if (shape.is_tuple()) {
    for (const Shape& element : shape.tuple_shapes()) CheckTensorType(op, element);
  } else if (IsComplex(shape.dtype()) || shape.dtype() == DType::kToken) {
    Fail(
        "[{}] {} tensors are not supported by the lazy tensor API (complex numbers and tokens "
        "exist in HLO programs only)",
        op, DTypeName(shape.dtype()));
  }
}

}  // namespace

NodePtr Node::MakeOp(hlo::Opcode opcode, std::vector<Value> operands, hlo::Attributes attributes,
                     Shape declared) {
  auto node = std::make_shared<Node>(Private{});
  const Shape* inline_shapes[4];
  std::vector<const Shape*> many_shapes;
  std::span<const Shape* const> operand_shapes;
  if (operands.size() <= 4) {
    for (size_t i = 0; i < operands.size(); ++i) inline_shapes[i] = &operands[i].shape();
    operand_shapes = std::span<const Shape* const>(inline_shapes, operands.size());
  } else {
    for (const Value& v : operands) many_shapes.push_back(&v.shape());
    operand_shapes = many_shapes;
  }
  for (const Value& v : operands)
    STRATA_CHECK(v.node != nullptr, "null operand of {}", hlo::OpcodeName(opcode));
  if (opcode == hlo::Opcode::kConstant) declared = attributes.literal.shape();
  // A product's result type is its operands' unless a wider one is declared.
  if ((opcode == hlo::Opcode::kDot || opcode == hlo::Opcode::kConvolution) && declared == Shape() &&
      !operand_shapes.empty()) {
    declared = Shape::Scalar(operand_shapes[0]->dtype());
  }
  // The lazy opt-barrier takes its values one per operand (HLO's takes a
  // tuple, which lowering builds).
  Shape shape;
  if (opcode == hlo::Opcode::kOptimizationBarrier) {
    std::vector<Shape> elements;
    for (const Shape* s : operand_shapes) elements.push_back(*s);
    shape = Shape::Tuple(std::move(elements));
  } else {
    shape = hlo::InferShape(opcode, operand_shapes, attributes, declared);
  }
  CheckTensorType(hlo::OpcodeName(opcode), shape);
  if (shape.is_tuple()) {
    node->shapes_ = shape.tuple_shapes();
  } else {
    node->shapes_.push_back(std::move(shape));
  }
  node->opcode_ = opcode;
  node->stops_gradient_ = StopGradientScope::active();
  for (const Value& v : operands)
    node->placeholder_level_ = std::max(node->placeholder_level_, v.node->placeholder_level_);
  node->operands_ = std::move(operands);
  node->attributes_ = IsDefault(attributes)
                          ? EmptyAttributes()
                          : std::make_shared<const hlo::Attributes>(std::move(attributes));
  node->ComputeHashes();
  return node;
}

NodePtr Node::MakeConstant(hlo::Literal literal) {
  hlo::Attributes a;
  a.literal = std::move(literal);
  return MakeOp(hlo::Opcode::kConstant, {}, std::move(a));
}

NodePtr Node::MakeWithGradientRule(std::vector<Value> operands,
                                   std::shared_ptr<const GradientRule> rule) {
  STRATA_CHECK(rule != nullptr, "MakeWithGradientRule needs a rule");
  return MakeOp(hlo::Opcode::kTuple, std::move(operands))->WithGradientRule(std::move(rule));
}

NodePtr Node::WithIndexCheck(std::shared_ptr<const IndexCheck> check) const {
  STRATA_CHECK(check && check->value.shape() == Shape(DType::kS64, {2}),
               "an index check computes s64[2]");
  auto node = std::make_shared<Node>(*this);
  node->index_check_ = std::move(check);
  return node;
}

NodePtr Node::WithGradientRule(std::shared_ptr<const GradientRule> rule) const {
  auto node = std::make_shared<Node>(*this);
  node->gradient_rule_ = std::move(rule);
  return node;
}

NodePtr Node::MakePlaceholder(Shape shape, int64_t id, int32_t level) {
  STRATA_CHECK(shape.is_array() && id >= 0 && level > 0, "bad placeholder {} #{} level {}",
               shape.ToString(), id, level);
  auto node = std::make_shared<Node>(Private{});
  node->kind_ = NodeKind::kPlaceholder;
  node->shapes_ = {std::move(shape)};
  node->placeholder_id_ = id;
  node->placeholder_level_ = level;
  node->attributes_ = EmptyAttributes();
  node->ComputeHashes();
  return node;
}

NodePtr Node::MakeLoop(std::vector<Value> operands, std::shared_ptr<const LoopBody> body) {
  const LoopBody& b = *body;
  int64_t c = b.num_carries, x = b.num_xs;
  STRATA_CHECK(operands.size() == b.placeholders.size() && c >= 0 && x >= 0 &&
                   c + x <= static_cast<int64_t>(operands.size()) && b.num_ys() >= 0 &&
                   b.length >= 0 && b.unroll >= 1,
               "malformed loop: {} operands, {} placeholders, {} carries, {} xs, {} roots",
               operands.size(), b.placeholders.size(), c, x, b.roots.size());
  auto node = std::make_shared<Node>(Private{});
  for (size_t i = 0; i < operands.size(); ++i) {
    const Shape& outer = operands[i].shape();
    const Shape& inner = b.placeholders[i]->shape();
    bool ok = b.placeholders[i]->kind() == NodeKind::kPlaceholder &&
              b.placeholders[i]->placeholder_id() == static_cast<int64_t>(i);
    if (static_cast<int64_t>(i) >= c && static_cast<int64_t>(i) < c + x) {
      ok = ok && outer.rank() >= 1 && outer.dim(0) == b.length &&
           Shape(outer.dtype(),
                 std::vector<int64_t>(outer.dims().begin() + 1, outer.dims().end())) == inner;
    } else {
      ok = ok && outer == inner;
    }
    STRATA_CHECK(ok, "loop operand {} is {} but its placeholder is {}", i, outer.ToString(),
                 inner.ToString());
  }
  auto stacked = [&](const Shape& s) {
    std::vector<int64_t> dims{b.length};
    dims.insert(dims.end(), s.dims().begin(), s.dims().end());
    return Shape(s.dtype(), std::move(dims));
  };
  for (int64_t i = 0; i < c; ++i) {
    STRATA_CHECK(b.roots[i].shape() == operands[i].shape(), "loop carry {} is {} but becomes {}", i,
                 operands[i].shape().ToString(), b.roots[i].shape().ToString());
    node->shapes_.push_back(operands[i].shape());
  }
  for (int64_t j = 0; j < b.num_ys(); ++j) node->shapes_.push_back(stacked(b.roots[c + j].shape()));
  for (int64_t i = 0; i < c; ++i) node->shapes_.push_back(stacked(operands[i].shape()));
  for (const Value& r : b.residuals) node->shapes_.push_back(stacked(r.shape()));
  node->loop_ = std::move(body);
  node->SealCompound(hlo::Opcode::kWhile, std::move(operands));
  return node;
}

void Node::SealCompound(hlo::Opcode opcode, std::vector<Value> operands) {
  opcode_ = opcode;
  stops_gradient_ = StopGradientScope::active();
  for (const Value& v : operands)
    placeholder_level_ = std::max(placeholder_level_, v.node->placeholder_level_);
  operands_ = std::move(operands);
  attributes_ = EmptyAttributes();
  ComputeHashes();
}

NodePtr Node::MakeConditional(std::vector<Value> operands,
                              std::shared_ptr<const Branches> branches) {
  const Branches& b = *branches;
  const size_t p = b.placeholders.size();
  STRATA_CHECK(operands.size() == p + 1 && !b.roots.empty() && !b.roots[0].empty(),
               "malformed conditional: {} operands, {} placeholders, {} branches", operands.size(),
               p, b.roots.size());
  const Shape& selector = operands[0].shape();
  STRATA_CHECK(
      selector.rank() == 0 && (selector.dtype() == DType::kPred ? b.roots.size() == 2
                                                                : selector.dtype() == DType::kS32),
      "conditional selector {} for {} branches", selector.ToString(), b.roots.size());
  auto node = std::make_shared<Node>(Private{});
  for (size_t i = 0; i < p; ++i) {
    const NodePtr& ph = b.placeholders[i];
    STRATA_CHECK(ph->kind() == NodeKind::kPlaceholder &&
                     ph->placeholder_id() == static_cast<int64_t>(i) &&
                     ph->shape() == operands[i + 1].shape(),
                 "conditional operand {} is {} but its placeholder is {}", i + 1,
                 operands[i + 1].shape().ToString(), ph->shape().ToString());
  }
  for (const Value& v : b.roots[0]) node->shapes_.push_back(v.shape());
  for (const std::vector<Value>& roots : b.roots) {
    STRATA_CHECK(roots.size() == b.roots[0].size(), "conditional branches differ in outputs");
    for (size_t k = 0; k < roots.size(); ++k) {
      STRATA_CHECK(roots[k].shape() == node->shapes_[k], "conditional output {} is {} and {}", k,
                   node->shapes_[k].ToString(), roots[k].shape().ToString());
    }
  }
  node->branches_ = std::move(branches);
  node->SealCompound(hlo::Opcode::kConditional, std::move(operands));
  return node;
}

NodePtr Node::MakeShardedDeviceData(std::vector<runtime::Buffer> shards, Shape full,
                                    const spmd::Mesh& mesh, spmd::AxisSharding layout,
                                    std::optional<Sharding> sharding, bool computed, int64_t first,
                                    Value origin) {
  spmd::CheckSharding(mesh, layout, full.rank());
  Shape shard(full.dtype(), spmd::ShardDims(mesh, layout, full.dims()));
  if (shards.empty() || first < 0 || first + static_cast<int64_t>(shards.size()) > mesh.size()) {
    Fail("[device_data] {} shards from partition {} for {}", shards.size(), first, mesh.ToString());
  }
  for (size_t p = 0; p < shards.size(); ++p) {
    if (!shards[p].defined() || shards[p].shape() != shard) {
      Fail("[device_data] shard {} must be {}, got {}", first + p, shard.ToString(),
           shards[p].defined() ? shards[p].shape().ToString() : "an empty buffer");
    }
  }
  if (sharding && static_cast<int64_t>(sharding->spec().size()) != full.rank()) {
    Fail("[device_data] sharding {} does not fit {}", sharding->ToString(), full.ToString());
  }
  auto node = std::make_shared<Node>(Private{});
  node->kind_ = NodeKind::kDeviceData;
  node->shapes_ = {full};
  node->buffer_ = shards[0];
  node->sharded_data_ = std::make_shared<const ShardedData>(
      ShardedData{std::move(shards), mesh, std::move(layout), first});
  node->SealDeviceData(std::move(sharding), computed, std::move(origin));
  return node;
}

void Node::SealDeviceData(std::optional<Sharding> sharding, bool computed, Value origin) {
  kind_ = NodeKind::kDeviceData;
  sharding_ = std::move(sharding);
  computed_ = computed;
  origin_ = std::move(origin);
  attributes_ = EmptyAttributes();
  ComputeHashes();
}

runtime::Buffer Node::WholeBuffer() const {
  STRATA_CHECK(kind_ == NodeKind::kDeviceData, "WholeBuffer of a {} node", OpName());
  if (!sharded_data_) return buffer_;
  STRATA_CHECK(sharded_data_->complete(),
               "WholeBuffer of data whose shards are spread over processes (this one holds {} "
               "from partition {}): lazy::Context::WholeOf gathers them",
               sharded_data_->shards.size(), sharded_data_->first);
  return runtime::AssembleShards(sharded_data_->shards, shapes_[0], sharded_data_->mesh,
                                 sharded_data_->layout, runtime::Client::Default().device(0));
}

NodePtr Node::MakeDeviceData(runtime::Buffer buffer, std::optional<Sharding> sharding,
                             bool computed, Value origin) {
  if (!buffer.defined()) Fail("[device_data] the buffer is empty");
  CheckTensorType("device_data", buffer.shape());
  if (sharding && static_cast<int64_t>(sharding->spec().size()) != buffer.shape().rank()) {
    Fail("[device_data] sharding {} does not fit {}", sharding->ToString(),
         buffer.shape().ToString());
  }
  auto node = std::make_shared<Node>(Private{});
  node->kind_ = NodeKind::kDeviceData;
  node->shapes_ = {buffer.shape()};
  node->buffer_ = std::move(buffer);
  node->SealDeviceData(std::move(sharding), computed, std::move(origin));
  return node;
}

NodePtr Node::MakeScalar(hlo::Literal value) {
  if (!value.shape().is_scalar())
    Fail("[scalar] expected a scalar, got {}", value.shape().ToString());
  CheckTensorType("scalar", value.shape());
  auto node = std::make_shared<Node>(Private{});
  node->kind_ = NodeKind::kScalar;
  node->shapes_ = {value.shape()};
  node->scalar_ = std::move(value);
  node->attributes_ = EmptyAttributes();
  node->ComputeHashes();
  return node;
}

void Node::ComputeHashes() {
  HashBuilder h;
  h.Add(static_cast<uint8_t>(kind_)).Add(static_cast<uint8_t>(opcode_)).Add(stops_gradient_);
  h.Add<uint64_t>(shapes_.size());
  for (const Shape& s : shapes_) AddShape(h, s);
  if (kind_ == NodeKind::kOp && attributes_ != EmptyAttributes()) AddAttributes(h, *attributes_);
  if (kind_ == NodeKind::kPlaceholder) h.Add(placeholder_id_);
  if (loop_) {
    h.Add(loop_->num_carries).Add(loop_->num_xs).Add(loop_->length).Add(loop_->reverse);
    h.Add(loop_->unroll).Add<uint64_t>(loop_->placeholders.size());
    h.Add<uint64_t>(loop_->roots.size());
    for (const Value& r : loop_->roots) h.AddHash(r.hash());
    h.Add<uint64_t>(loop_->residuals.size());
    for (const Value& r : loop_->residuals) h.AddHash(r.hash());
  }
  if (branches_) {
    h.Add<uint64_t>(branches_->placeholders.size()).Add<uint64_t>(branches_->roots.size());
    for (const std::vector<Value>& roots : branches_->roots) {
      h.Add<uint64_t>(roots.size());
      for (const Value& r : roots) h.AddHash(r.hash());
    }
  }
  if (sharding_) h.AddHash(sharding_->hash());
  node_hash_ = h.Finish();
  HashBuilder d;
  d.AddHash(node_hash_);
  for (const Value& v : operands_) d.AddHash(v.node->dag_hash()).Add(v.index);
  dag_hash_ = d.Finish();
}

NodePtr Node::Clone(std::vector<Value> operands) const {
  if (kind_ != NodeKind::kOp) {
    STRATA_CHECK(operands.empty(), "leaf nodes have no operands");
    return CloneWithSharding(sharding_);
  }
  hlo::Attributes a = *attributes_;
  Shape declared = shapes_.size() == 1 ? shapes_[0] : Shape::Tuple(shapes_);
  NodePtr node = loop_       ? MakeLoop(std::move(operands), loop_)
                 : branches_ ? MakeConditional(std::move(operands), branches_)
                             : MakeOp(opcode_, std::move(operands), std::move(a), declared);
  if (gradient_rule_) node = node->WithGradientRule(gradient_rule_);
  if (stops_gradient_ && !node->stops_gradient()) node = node->CloneStoppingGradient();
  if (!sharding_) return node;
  return node->CloneWithSharding(sharding_);
}

NodePtr Node::CloneWithSharding(std::optional<Sharding> sharding) const {
  auto node = std::make_shared<Node>(*this);
  if (sharding && static_cast<int64_t>(sharding->spec().size()) != shapes_[0].rank()) {
    Fail("[sharding] spec for rank {} given to a {} value", sharding->spec().size(),
         shapes_[0].ToString());
  }
  node->sharding_ = std::move(sharding);
  node->ComputeHashes();
  return node;
}

NodePtr Node::CloneStoppingGradient() const {
  auto node = std::make_shared<Node>(*this);
  node->stops_gradient_ = true;
  node->origin_ = {};  // detached data is a constant
  node->ComputeHashes();
  return node;
}

void Node::MarkOverwritten() const {
  STRATA_CHECK(kind_ == NodeKind::kDeviceData, "MarkOverwritten of a {} node", OpName());
  overwritten_ = true;
  buffer_ = {};
  sharded_data_.reset();
}

namespace {
thread_local int stop_gradient_depth = 0;
// While a node is being destroyed, the handles its destruction releases
// are queued here instead of destroyed inside it.
thread_local std::vector<NodePtr>* pending_destruction = nullptr;
}  // namespace

Node::~Node() {
  // Handles others still hold only lose a count: nothing to queue.
  bool frees = origin_.node && origin_.node.use_count() == 1;
  for (const Value& v : operands_) frees = frees || v.node.use_count() == 1;
  if (!frees) return;
  auto release = [](Node& n, std::vector<NodePtr>& into) {
    for (Value& v : n.operands_) into.push_back(std::move(v.node));
    if (n.origin_.node) into.push_back(std::move(n.origin_.node));
  };
  if (pending_destruction) {
    release(*this, *pending_destruction);
    return;
  }
  std::vector<NodePtr> pending;
  release(*this, pending);
  pending_destruction = &pending;
  while (!pending.empty()) {
    NodePtr last = std::move(pending.back());
    pending.pop_back();
    last.reset();  // may queue its own operands
  }
  pending_destruction = nullptr;
}

StopGradientScope::StopGradientScope() { ++stop_gradient_depth; }
StopGradientScope::~StopGradientScope() { --stop_gradient_depth; }
bool StopGradientScope::active() { return stop_gradient_depth > 0; }

std::string Node::OpName() const {
  switch (kind_) {
    case NodeKind::kDeviceData:
      return "device_data";
    case NodeKind::kScalar:
      return "scalar";
    case NodeKind::kPlaceholder:
      return fmt::format("placeholder#{}", placeholder_id_);
    default:
      return std::string(hlo::OpcodeName(opcode_));
  }
}

// The three caches below are per process, not per context, on purpose: each
// computation is a pure function of its key, immutable once built, and
// graphs of every context must name it alike so their hashes agree.
namespace {

// The computation cached under `key`, made by `make` (under a fresh name
// scope: shared by every module, named the same whoever asks first) on the
// first call. One cache per key type: each of the three below has its own.
template <typename Key, typename Make>
hlo::Computation* Cached(const Key& key, Make make) {
  static std::mutex mutex;
  static auto* cache = new std::map<Key, std::unique_ptr<hlo::Computation>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = (*cache)[key];
  if (!slot) {
    hlo::NameScope names;
    slot = make();
  }
  return slot.get();
}

}  // namespace

hlo::Computation* ScalarCombiner(hlo::Opcode op, DType dtype) {
  return Cached(std::pair{op, dtype}, [&] {
    return hlo::MakeScalarBinaryComputation(
        fmt::format("{}_{}", hlo::OpcodeName(op), DTypeName(dtype)), op, dtype);
  });
}

hlo::Computation* ScalarComparator(hlo::Comparison direction, DType dtype) {
  return Cached(std::pair{direction, dtype}, [&] {
    hlo::Builder b(fmt::format("compare_{}_{}", hlo::ComparisonName(direction), DTypeName(dtype)));
    auto* x = b.Parameter(0, Shape::Scalar(dtype), "a");
    auto* y = b.Parameter(1, Shape::Scalar(dtype), "b");
    return b.Build(b.Compare(x, y, direction));
  });
}

hlo::Computation* ArgCombiner(bool is_max, DType value, DType index) {
  return Cached(std::tuple{is_max, value, index}, [&] {
    hlo::Builder b(
        fmt::format("{}_{}_{}", is_max ? "argmax" : "argmin", DTypeName(value), DTypeName(index)));
    auto* va = b.Parameter(0, Shape::Scalar(value), "value_a");
    auto* ia = b.Parameter(1, Shape::Scalar(index), "index_a");
    auto* vb = b.Parameter(2, Shape::Scalar(value), "value_b");
    auto* ib = b.Parameter(3, Shape::Scalar(index), "index_b");
    // a wins if strictly better, or equal with a smaller index; NaN wins (as torch.argmax).
    auto* better = b.Compare(va, vb, is_max ? hlo::Comparison::kGt : hlo::Comparison::kLt);
    auto* a_nan = b.Compare(va, va, hlo::Comparison::kNe);
    auto* equal = b.Compare(va, vb, hlo::Comparison::kEq);
    auto* smaller_index = b.Compare(ia, ib, hlo::Comparison::kLt);
    auto* take_a = b.Binary(hlo::Opcode::kOr, b.Binary(hlo::Opcode::kOr, better, a_nan),
                            b.Binary(hlo::Opcode::kAnd, equal, smaller_index));
    return b.Build(b.Tuple({b.Select(take_a, va, vb), b.Select(take_a, ia, ib)}));
  });
}

}  // namespace strata::ir
