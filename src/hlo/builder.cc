#include "strata/hlo/builder.h"

#include <fmt/format.h>

#include <atomic>

#include "strata/hlo/shape_inference.h"

namespace strata::hlo {
namespace {

thread_local NameScope* current_scope = nullptr;

// Unique across every module built in the process ("add.17"), or within the
// current NameScope.
std::string FreshName(Opcode op) {
  static std::atomic<int64_t> counter{0};
  const int64_t n = current_scope ? current_scope->Next() : counter.fetch_add(1);
  return fmt::format("{}.{}", OpcodeName(op), n);
}

}  // namespace

NameScope::NameScope() : outer_(current_scope) { current_scope = this; }
NameScope::~NameScope() { current_scope = outer_; }
NameScope* NameScope::current() { return current_scope; }

Builder::Builder(std::string name)
    : owned_(std::make_unique<Computation>(std::move(name))), computation_(owned_.get()) {}

Builder::Builder(Computation* into) : computation_(into) {}

Instruction* Builder::Finish(Instruction* inst) {
  inst->set_shape(InferShape(*inst));
  if (inst->name().empty()) inst->set_name(FreshName(inst->opcode()));
  return inst;
}

Instruction* Builder::Make(Opcode op, Shape shape, std::vector<Instruction*> operands) {
  return computation_->AddInstruction(
      std::make_unique<Instruction>(op, std::move(shape), std::move(operands)));
}

Instruction* Builder::Add(std::unique_ptr<Instruction> instruction) {
  return Finish(computation_->AddInstruction(std::move(instruction)));
}

Instruction* Builder::AddShaped(std::unique_ptr<Instruction> instruction) {
  Instruction* inst = computation_->AddInstruction(std::move(instruction));
  if (inst->name().empty()) inst->set_name(FreshName(inst->opcode()));
  return inst;
}

Instruction* Builder::Parameter(int64_t number, Shape shape, std::string name) {
  Instruction* p = Make(Opcode::kParameter, std::move(shape), {});
  p->parameter_number = number;
  if (!name.empty()) p->set_name(std::move(name));
  return Finish(p);
}

Instruction* Builder::Constant(Literal literal) {
  Instruction* c = Make(Opcode::kConstant, literal.shape(), {});
  c->literal = std::move(literal);
  return Finish(c);
}

Instruction* Builder::Iota(Shape shape, int64_t iota_dimension) {
  Instruction* i = Make(Opcode::kIota, std::move(shape), {});
  i->dimensions = {iota_dimension};
  return Finish(i);
}

Instruction* Builder::Convert(Instruction* x, DType dtype) {
  return Finish(Make(Opcode::kConvert, Shape(dtype, {}), {x}));
}

Instruction* Builder::BitcastConvert(Instruction* x, DType dtype) {
  return Finish(Make(Opcode::kBitcastConvert, Shape(dtype, {}), {x}));
}

Instruction* Builder::Broadcast(Instruction* x, std::vector<int64_t> dims,
                                std::vector<int64_t> dimensions) {
  Instruction* b = Make(Opcode::kBroadcast, Shape(x->shape().dtype(), std::move(dims)), {x});
  b->dimensions = std::move(dimensions);
  return Finish(b);
}

Instruction* Builder::Reshape(Instruction* x, std::vector<int64_t> dims) {
  return Finish(Make(Opcode::kReshape, Shape(x->shape().dtype(), std::move(dims)), {x}));
}

Instruction* Builder::Transpose(Instruction* x, std::vector<int64_t> permutation) {
  Instruction* t = Make(Opcode::kTranspose, Shape(), {x});
  t->dimensions = std::move(permutation);
  return Finish(t);
}

Instruction* Builder::Copy(Instruction* x) { return Finish(Make(Opcode::kCopy, Shape(), {x})); }

Instruction* Builder::Slice(Instruction* x, std::vector<int64_t> starts,
                            std::vector<int64_t> limits, std::vector<int64_t> strides) {
  Instruction* s = Make(Opcode::kSlice, Shape(), {x});
  if (starts.size() != limits.size() || (!strides.empty() && strides.size() != starts.size())) {
    Fail("[slice] starts, limits and strides must have one entry per dimension");
  }
  for (size_t i = 0; i < starts.size(); ++i) {
    s->slice.push_back({starts[i], limits[i], strides.empty() ? 1 : strides[i]});
  }
  return Finish(s);
}

Instruction* Builder::DynamicSlice(Instruction* x, std::vector<Instruction*> starts,
                                   std::vector<int64_t> sizes) {
  starts.insert(starts.begin(), x);
  Instruction* s = Make(Opcode::kDynamicSlice, Shape(), std::move(starts));
  s->dynamic_slice_sizes = std::move(sizes);
  return Finish(s);
}

Instruction* Builder::DynamicUpdateSlice(Instruction* x, Instruction* update,
                                         std::vector<Instruction*> starts) {
  starts.insert(starts.begin(), {x, update});
  return Finish(Make(Opcode::kDynamicUpdateSlice, Shape(), std::move(starts)));
}

Instruction* Builder::Concatenate(std::vector<Instruction*> operands, int64_t dimension) {
  Instruction* c = Make(Opcode::kConcatenate, Shape(), std::move(operands));
  c->dimensions = {dimension};
  return Finish(c);
}

Instruction* Builder::Pad(Instruction* x, Instruction* padding_value,
                          std::vector<PadRange> padding) {
  Instruction* p = Make(Opcode::kPad, Shape(), {x, padding_value});
  p->padding = std::move(padding);
  return Finish(p);
}

Instruction* Builder::Reverse(Instruction* x, std::vector<int64_t> dimensions) {
  Instruction* r = Make(Opcode::kReverse, Shape(), {x});
  r->dimensions = std::move(dimensions);
  return Finish(r);
}

Instruction* Builder::Select(Instruction* pred, Instruction* on_true, Instruction* on_false) {
  return Finish(Make(Opcode::kSelect, Shape(), {pred, on_true, on_false}));
}

Instruction* Builder::Compare(Instruction* a, Instruction* b, Comparison direction,
                              ComparisonType type) {
  Instruction* c = Make(Opcode::kCompare, Shape(), {a, b});
  c->direction = direction;
  c->comparison_type = type;
  return Finish(c);
}

Instruction* Builder::Clamp(Instruction* lo, Instruction* x, Instruction* hi) {
  return Finish(Make(Opcode::kClamp, Shape(), {lo, x, hi}));
}

Instruction* Builder::IsFinite(Instruction* x) {
  return Finish(Make(Opcode::kIsFinite, Shape(), {x}));
}

Instruction* Builder::Unary(Opcode op, Instruction* x) {
  if (!IsElementwiseUnary(op))
    Fail("[builder] {} is not an elementwise unary opcode", OpcodeName(op));
  return Finish(Make(op, Shape(), {x}));
}

Instruction* Builder::Binary(Opcode op, Instruction* a, Instruction* b) {
  if (!IsElementwiseBinary(op))
    Fail("[builder] {} is not an elementwise binary opcode", OpcodeName(op));
  return Finish(Make(op, Shape(), {a, b}));
}

Instruction* Builder::Reduce(std::vector<Instruction*> operands, std::vector<Instruction*> inits,
                             std::vector<int64_t> dimensions, Computation* to_apply) {
  operands.insert(operands.end(), inits.begin(), inits.end());
  Instruction* r = Make(Opcode::kReduce, Shape(), std::move(operands));
  r->dimensions = std::move(dimensions);
  r->called = {to_apply};
  return Finish(r);
}

Instruction* Builder::Dot(Instruction* lhs, Instruction* rhs, DotDims dims) {
  Instruction* d = Make(Opcode::kDot, Shape::Scalar(lhs->shape().dtype()), {lhs, rhs});
  d->dot = std::move(dims);
  return Finish(d);
}

Instruction* Builder::Sort(std::vector<Instruction*> operands, int64_t dimension,
                           Computation* comparator, bool is_stable) {
  Instruction* s = Make(Opcode::kSort, Shape(), std::move(operands));
  s->dimensions = {dimension};
  s->is_stable = is_stable;
  s->called = {comparator};
  return Finish(s);
}

Instruction* Builder::TopK(Instruction* x, int64_t k, bool largest) {
  Instruction* t = Make(Opcode::kTopK, Shape(), {x});
  t->k = k;
  t->largest = largest;
  return Finish(t);
}

Instruction* Builder::Conditional(Instruction* selector, std::vector<Computation*> branches,
                                  std::vector<Instruction*> operands) {
  operands.insert(operands.begin(), selector);
  Instruction* c = Make(Opcode::kConditional, Shape(), std::move(operands));
  c->called = std::move(branches);
  return Finish(c);
}

Instruction* Builder::Gather(Instruction* operand, Instruction* indices, GatherDims dims) {
  Instruction* g = Make(Opcode::kGather, Shape(), {operand, indices});
  g->gather = std::move(dims);
  return Finish(g);
}

Instruction* Builder::Scatter(Instruction* operand, Instruction* indices, Instruction* updates,
                              ScatterDims dims, Computation* to_apply) {
  Instruction* s = Make(Opcode::kScatter, Shape(), {operand, indices, updates});
  s->scatter = std::move(dims);
  s->called = {to_apply};
  return Finish(s);
}

Instruction* Builder::Tuple(std::vector<Instruction*> elements) {
  return Finish(Make(Opcode::kTuple, Shape(), std::move(elements)));
}

Instruction* Builder::GetTupleElement(Instruction* tuple, int64_t index) {
  Instruction* g = Make(Opcode::kGetTupleElement, Shape(), {tuple});
  g->tuple_index = index;
  return Finish(g);
}

Instruction* Builder::While(Computation* condition, Computation* body, Instruction* init) {
  Instruction* w = Make(Opcode::kWhile, Shape(), {init});
  w->called = {condition, body};
  return Finish(w);
}

Instruction* Builder::Call(Computation* computation, std::vector<Instruction*> arguments) {
  Instruction* c = Make(Opcode::kCall, Shape(), std::move(arguments));
  c->called = {computation};
  return Finish(c);
}

Instruction* Builder::Fusion(Computation* computation, std::vector<Instruction*> arguments) {
  Instruction* f = Make(Opcode::kFusion, Shape(), std::move(arguments));
  f->called = {computation};
  return Finish(f);
}

Instruction* Builder::OptimizationBarrier(Instruction* value) {
  return Finish(Make(Opcode::kOptimizationBarrier, Shape(), {value}));
}

Instruction* Builder::RngBitGenerator(Instruction* state, Shape bits_shape) {
  Instruction* r = Make(Opcode::kRngBitGenerator,
                        Shape::Tuple({state->shape(), std::move(bits_shape)}), {state});
  r->rng_algorithm = "rng_philox";
  return Finish(r);
}

Instruction* Builder::CustomCall(Instruction* operand, std::string target, Shape shape) {
  Instruction* c = Make(Opcode::kCustomCall, std::move(shape), {operand});
  c->custom_call_target = std::move(target);
  return Finish(c);
}

Instruction* Builder::PartitionId() { return Finish(Make(Opcode::kPartitionId, Shape(), {})); }

namespace {
void SetCollective(Instruction* c, ReplicaGroups groups, int64_t channel_id) {
  c->replica_groups = std::move(groups);
  c->channel_id = channel_id;
  c->use_global_device_ids = channel_id > 0;
}
}  // namespace

Instruction* Builder::AllReduce(Instruction* x, Computation* to_apply, ReplicaGroups groups,
                                int64_t channel_id) {
  Instruction* c = Make(Opcode::kAllReduce, Shape(), {x});
  SetCollective(c, std::move(groups), channel_id);
  c->called = {to_apply};
  return Finish(c);
}

Instruction* Builder::AllGather(Instruction* x, int64_t dimension, ReplicaGroups groups,
                                int64_t channel_id) {
  Instruction* c = Make(Opcode::kAllGather, Shape(), {x});
  SetCollective(c, std::move(groups), channel_id);
  c->dimensions = {dimension};
  return Finish(c);
}

Instruction* Builder::ReduceScatter(Instruction* x, int64_t dimension, Computation* to_apply,
                                    ReplicaGroups groups, int64_t channel_id) {
  Instruction* c = Make(Opcode::kReduceScatter, Shape(), {x});
  SetCollective(c, std::move(groups), channel_id);
  c->dimensions = {dimension};
  c->called = {to_apply};
  return Finish(c);
}

Instruction* Builder::AllToAll(Instruction* x, int64_t dimension, ReplicaGroups groups,
                               int64_t channel_id) {
  Instruction* c = Make(Opcode::kAllToAll, Shape(), {x});
  c->replica_groups = std::move(groups);
  c->channel_id = channel_id;
  c->dimensions = {dimension};
  return Finish(c);
}

Instruction* Builder::CollectivePermute(Instruction* x, SourceTargetPairs pairs,
                                        int64_t channel_id) {
  Instruction* c = Make(Opcode::kCollectivePermute, Shape(), {x});
  c->source_target_pairs = std::move(pairs);
  c->channel_id = channel_id;
  return Finish(c);
}

std::unique_ptr<Computation> Builder::Build(Instruction* root) {
  STRATA_CHECK(owned_ && root && root->parent() == computation_, "root must belong to {}",
               computation_->name());
  computation_->set_root(root);
  return std::move(owned_);
}

std::unique_ptr<Computation> MakeScalarBinaryComputation(std::string name, Opcode op, DType dtype) {
  Builder b(std::move(name));
  auto* x = b.Parameter(0, Shape::Scalar(dtype), "x");
  auto* y = b.Parameter(1, Shape::Scalar(dtype), "y");
  return b.Build(b.Binary(op, x, y));
}

std::optional<Opcode> SimpleReducer(const Computation& c) {
  const Instruction* root = c.root();
  if (!root || !IsElementwiseBinary(root->opcode()) || c.parameter_count() != 2) {
    return std::nullopt;
  }
  const Instruction* a = root->operand(0);
  const Instruction* b = root->operand(1);
  if (a->opcode() != Opcode::kParameter || b->opcode() != Opcode::kParameter || a == b) {
    return std::nullopt;
  }
  switch (root->opcode()) {
    case Opcode::kAdd:
    case Opcode::kMultiply:
    case Opcode::kMaximum:
    case Opcode::kMinimum:
    case Opcode::kAnd:
    case Opcode::kOr:
      return root->opcode();
    default:
      return std::nullopt;
  }
}

}  // namespace strata::hlo
