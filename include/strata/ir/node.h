// The lazy IR: immutable nodes that hash themselves when constructed.
//
// A node is a primitive with HLO semantics (an hlo opcode plus
// hlo::Attributes), a DeviceData leaf holding a materialized buffer, or a
// Scalar leaf holding a host value that changes between steps (a learning
// rate, a step count). Leaves lower to program parameters; their hashes cover
// dtype, shape and sharding but never the bytes or the value, so the same
// graph over new data hits the compile cache.
//
// node_hash covers the kind, opcode, attributes, output shapes and sharding;
// dag_hash folds in each operand's dag_hash and output index. Nothing changes
// a node after construction: Clone and CloneWithSharding make new nodes, so
// tensors sharing the old node keep seeing exactly what they saw.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/hlo/module.h"
#include "strata/ir/hash.h"
#include "strata/ir/sharding.h"
#include "strata/runtime/device.h"

namespace strata::ir {

class Node;
using NodePtr = std::shared_ptr<const Node>;

// One output of a node.
struct Value {
  NodePtr node;
  int64_t index = 0;

  const Shape& shape() const;
  // dag_hash combined with the output index.
  Hash128 hash() const;
  explicit operator bool() const { return node != nullptr; }
};

// A check that the indices an op reads are in range (checked indexing,
// lazy::Context::set_index_checks): `value` computes s64[2] {the row-major
// position of the first index out of range, or -1; that index}. A node
// carrying one (Node::WithIndexCheck) adds it to every program that computes
// the node, and the sync that runs it throws an Error naming `op`, the index
// and the range. A divisor check is the same over an integer divisor, whose
// "index out of range" is a zero (torch's ZeroDivisionError).
struct IndexCheck {
  Value value;
  std::string op;     // "index_select", "one_hot", ...
  std::string range;  // "[0, 256) (dimension 0 of f32[256,32])"
  Shape index_shape;  // where the position points
  bool divisor = false;
};

// kPlaceholder stands for a value inside a loop body (one carry, one slice
// of xs, one loop invariant): it has a shape and a position, never data.
enum class NodeKind : uint8_t { kDeviceData, kScalar, kOp, kPlaceholder };

// The body of a loop node (scan): a graph whose only leaves are placeholders
// 0..P-1, standing for the carries, one slice of each xs leaf, then the loop
// invariants, in that order (the loop node's operands follow the same
// order: initial carries, xs, invariant values).
struct LoopBody {
  std::vector<Value> roots;  // new carries, then one y slice per ys leaf
  // Body values the loop can also stack over steps for its backward pass
  // (scan's save-everything policy); outputs after the carry history.
  std::vector<Value> residuals;
  std::vector<NodePtr> placeholders;  // ids 0..P-1 in order
  int64_t num_carries = 0;
  int64_t num_xs = 0;
  int64_t length = 0;  // trip count
  bool reverse = false;
  int64_t unroll = 1;  // body copies per While iteration
  int64_t num_ys() const { return static_cast<int64_t>(roots.size()) - num_carries; }
  int64_t num_invariants() const {
    return static_cast<int64_t>(placeholders.size()) - num_carries - num_xs;
  }
};

// The branches of a conditional node (cond, switch_case): one graph per
// branch over the same placeholders 0..P-1, which stand for the node's
// operands 1..P. Operand 0 picks the branch: a pred (true runs branch 0,
// false branch 1) or an s32 index (the last branch when out of range, as
// HLO's conditional). Every branch's roots have the node's output shapes.
struct Branches {
  std::vector<std::vector<Value>> roots;  // per branch
  std::vector<NodePtr> placeholders;      // ids 0..P-1 in order
};

// A node's own reverse-mode rule, used instead of the per-opcode VJP table
// (checkpointed regions, loops). Given the cotangents of the node's outputs
// (a null Value where none flowed) it returns one per operand (null = none).
// `needed[i]` says whether operand i lies on a path to a value whose
// gradient was asked for: a rule may skip the others (a loop then carries no
// accumulator for an invariant nothing asks about, such as a scalar).
class GradientRule {
 public:
  virtual ~GradientRule() = default;
  virtual std::vector<Value> Vjp(const NodePtr& node, const std::vector<Value>& cotangents,
                                 const std::vector<bool>& needed) const = 0;
};

class Node {
 public:
  // A primitive op. Shapes come from the HLO shape rules (`declared` is
  // used by opcodes whose shape is an attribute: broadcast, reshape, iota,
  // convert, rng-bit-generator). Multi-output ops (tuple-shaped in HLO)
  // have one output per tuple element. Throws strata::Error on bad operands.
  static NodePtr MakeOp(hlo::Opcode opcode, std::vector<Value> operands,
                        hlo::Attributes attributes = {}, Shape declared = {});
  static NodePtr MakeConstant(hlo::Literal literal);
  // `computed`: the buffer is the result of running this value's graph
  // (sync), not data the user supplied. `origin`: that graph, kept for
  // autodiff (see origin()).
  static NodePtr MakeDeviceData(runtime::Buffer buffer,
                                std::optional<Sharding> sharding = std::nullopt,
                                bool computed = false, Value origin = {});
  // Device data held as one shard per device of `mesh`, laid out by
  // `layout` (what a partitioned program returns); `full` is the array's
  // shape. No device holds the whole array; WholeBuffer() assembles it.
  // In a job of several processes each holds the shards of its own
  // partitions only: `shards` are those of partitions first, first + 1, ...
  static NodePtr MakeShardedDeviceData(std::vector<runtime::Buffer> shards, Shape full,
                                       const spmd::Mesh& mesh, spmd::AxisSharding layout,
                                       std::optional<Sharding> sharding, bool computed = true,
                                       int64_t first = 0, Value origin = {});
  static NodePtr MakeScalar(hlo::Literal value);
  // A loop-body placeholder; `level` is the loop nesting depth it belongs to
  // (1 for the outermost scan).
  static NodePtr MakePlaceholder(Shape shape, int64_t id, int32_t level);
  // A loop over `body`: outputs are the final carries, one stacked [length,
  // ...] tensor per y, the carry history (the carries each step started
  // from, stacked in xs order), then one stack per residual. Lowering emits
  // only the outputs some user reads.
  static NodePtr MakeLoop(std::vector<Value> operands, std::shared_ptr<const LoopBody> body);
  // A conditional over `branches`, lowered to HLO's conditional: only the
  // chosen branch runs. Operands: the selector, then one per placeholder.
  static NodePtr MakeConditional(std::vector<Value> operands,
                                 std::shared_ptr<const Branches> branches);
  // A tuple node whose outputs are its operands (lowered to a tuple the
  // passes fold away) differentiated by `rule` rather than as a tuple.
  static NodePtr MakeWithGradientRule(std::vector<Value> operands,
                                      std::shared_ptr<const GradientRule> rule);

  NodeKind kind() const { return kind_; }
  hlo::Opcode opcode() const { return opcode_; }
  const std::vector<Value>& operands() const { return operands_; }
  const std::vector<Shape>& shapes() const { return shapes_; }
  const Shape& shape(int64_t output = 0) const { return shapes_[output]; }
  int64_t num_outputs() const { return static_cast<int64_t>(shapes_.size()); }
  const hlo::Attributes& attributes() const { return *attributes_; }
  const std::optional<Sharding>& sharding() const { return sharding_; }
  const Hash128& node_hash() const { return node_hash_; }
  const Hash128& dag_hash() const { return dag_hash_; }
  bool is_leaf() const { return kind_ != NodeKind::kOp; }
  // Gradients do not flow through this node into its operands (detach, and
  // every op built inside a StopGradientScope). Part of node_hash.
  bool stops_gradient() const { return stops_gradient_; }
  // kDeviceData: the whole array; for sharded data, partition 0's shard,
  // which stands for the data's identity (read the values with WholeBuffer).
  const runtime::Buffer& buffer() const { return buffer_; }
  struct ShardedData {
    std::vector<runtime::Buffer> shards;  // one per partition this process holds
    spmd::Mesh mesh;
    spmd::AxisSharding layout;
    int64_t first = 0;  // the partition of shards[0]
    bool complete() const {
      return first == 0 && static_cast<int64_t>(shards.size()) == mesh.size();
    }
  };
  const ShardedData* sharded_data() const { return sharded_data_.get(); }
  // The whole array (assembled from the shards of sharded data).
  runtime::Buffer WholeBuffer() const;
  bool computed() const { return computed_; }  // kDeviceData
  // kDeviceData that a sync computed from a differentiable value: that
  // value, so gradients flow through data that was materialized (PyTorch
  // keeps the graph after .item() too). Empty for user data, integer
  // results, values built under a StopGradientScope, and detached data.
  const Value& origin() const { return origin_; }
  // kDeviceData whose buffer a later sync gave to its results (donation):
  // the bytes hold another value now. Only an origin can still refer to
  // such a node; a program that would read it is an Error.
  bool overwritten() const { return overwritten_; }
  // Called by the sync that donated the buffer, before anyone else can
  // see this node again: drops the buffer (it belongs to the results).
  void MarkOverwritten() const;
  const hlo::Literal& scalar() const { return scalar_; }  // kScalar
  // Set by MakeWithGradientRule / WithGradientRule (and kept by the clones).
  const GradientRule* gradient_rule() const { return gradient_rule_.get(); }
  NodePtr WithGradientRule(std::shared_ptr<const GradientRule> rule) const;
  // Set by WithIndexCheck; kept by CloneWithSharding, dropped by Clone (a
  // clone over new operands may read other indices).
  const IndexCheck* index_check() const { return index_check_.get(); }
  NodePtr WithIndexCheck(std::shared_ptr<const IndexCheck> check) const;
  const LoopBody* loop() const { return loop_.get(); }          // loop nodes
  const Branches* branches() const { return branches_.get(); }  // conditional nodes
  int64_t placeholder_id() const { return placeholder_id_; }    // kPlaceholder
  // The deepest loop level of any placeholder this value depends on (0 =
  // none): values depending on a body's placeholders must not escape it.
  int32_t placeholder_level() const { return placeholder_level_; }

  // Same op and attributes over new operands.
  NodePtr Clone(std::vector<Value> operands) const;
  // Same operands (and, for device data, the same buffer) with another
  // sharding, or none.
  NodePtr CloneWithSharding(std::optional<Sharding> sharding) const;
  // The same value with gradients stopped (a leaf keeps its buffer).
  NodePtr CloneStoppingGradient() const;

  // "add(f32[2,3], f32[2,3]) -> f32[2,3]" style summary for dumps and errors.
  std::string OpName() const;

 private:
  // Only the factories make nodes; the tag lets them use one allocation
  // (std::make_shared) for the node and its reference count.
  struct Private {};

 public:
  explicit Node(Private) {}
  Node(const Node&) = default;
  // Iterative: dropping the last handle of a long chain (a loop that
  // materializes a differentiable value every step) never recurses deeply.
  ~Node();

 private:
  void ComputeHashes();
  // A loop's or conditional's last step, once its body or branches are set:
  // its opcode, operands (and their placeholder level), no attributes, its hashes.
  void SealCompound(hlo::Opcode opcode, std::vector<Value> operands);
  // Device data's last step, once its shape and buffers are set.
  void SealDeviceData(std::optional<Sharding> sharding, bool computed, Value origin);

  NodeKind kind_ = NodeKind::kOp;
  hlo::Opcode opcode_ = hlo::Opcode::kParameter;
  std::vector<Value> operands_;
  std::vector<Shape> shapes_;
  std::shared_ptr<const hlo::Attributes> attributes_;
  std::optional<Sharding> sharding_;
  mutable runtime::Buffer buffer_;  // mutable: MarkOverwritten drops it
  mutable std::shared_ptr<const ShardedData> sharded_data_;
  hlo::Literal scalar_;
  bool stops_gradient_ = false;
  std::shared_ptr<const GradientRule> gradient_rule_;
  std::shared_ptr<const IndexCheck> index_check_;
  std::shared_ptr<const LoopBody> loop_;
  std::shared_ptr<const Branches> branches_;
  int64_t placeholder_id_ = -1;
  int32_t placeholder_level_ = 0;
  bool computed_ = false;
  mutable bool overwritten_ = false;
  Value origin_;
  Hash128 node_hash_, dag_hash_;
};

// While alive, every op node built on this thread stops gradients (the
// no_grad scope of autograd). Scopes nest.
class StopGradientScope {
 public:
  StopGradientScope();
  ~StopGradientScope();
  StopGradientScope(const StopGradientScope&) = delete;
  StopGradientScope& operator=(const StopGradientScope&) = delete;
  static bool active();
};

// Scalar (a, b) -> a op b computations used as reduce / scatter combiners,
// shared by every graph (lowering copies them into the module).
hlo::Computation* ScalarCombiner(hlo::Opcode op, DType dtype);
// (value_a, index_a, value_b, index_b) -> (value, index) keeping the larger
// (or smaller) value and, on ties, the smaller index: argmax / argmin.
hlo::Computation* ArgCombiner(bool is_max, DType value, DType index);
// (a, b) -> compare(a, b, direction): select-and-scatter's select (keep a).
hlo::Computation* ScalarComparator(hlo::Comparison direction, DType dtype);

}  // namespace strata::ir
