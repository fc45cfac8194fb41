// The program IR: a Module holds Computations; a Computation holds
// Instructions in a valid (topological) order with one root. This is XLA's
// HLO in miniature: same opcodes, same semantics, same text format. Unlike the
// lazy IR above it, program IR is mutable so compiler passes can rewrite it.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "strata/core/shape.h"
#include "strata/hlo/literal.h"
#include "strata/hlo/opcode.h"

namespace strata::hlo {

class Computation;

struct SliceRange {
  int64_t start = 0, limit = 0, stride = 1;
  bool operator==(const SliceRange&) const = default;
};
struct PadRange {
  int64_t low = 0, high = 0, interior = 0;
  bool operator==(const PadRange&) const = default;
};
struct DotDims {
  std::vector<int64_t> lhs_batch = {}, rhs_batch = {}, lhs_contracting = {}, rhs_contracting = {};
  bool operator==(const DotDims&) const = default;
};
struct GatherDims {
  std::vector<int64_t> offset_dims, collapsed_slice_dims, start_index_map;
  int64_t index_vector_dim = 0;
  std::vector<int64_t> slice_sizes;
  // XLA's batch dims: operand dim operand_batching_dims[i] is indexed by the
  // position along start_indices_batching_dims[i] (hlo::ExpandXlaOps adds
  // that position to the indices, so gathers that reach the runtime have none).
  std::vector<int64_t> operand_batching_dims = {}, start_indices_batching_dims = {};
  bool operator==(const GatherDims&) const = default;
};
struct ScatterDims {
  std::vector<int64_t> update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims;
  int64_t index_vector_dim = 0;
  // As gather's batch dims.
  std::vector<int64_t> input_batching_dims = {}, scatter_indices_batching_dims = {};
  bool operator==(const ScatterDims&) const = default;
};

// One spatial dimension of a convolution's window (XLA's WindowDimension):
// the window spans `size` elements `window_dilation` apart and moves by
// `stride` over the input, which is padded by pad_low / pad_high (negative
// trims) after `base_dilation - 1` holes are put between its elements.
struct WindowDim {
  int64_t size = 1, stride = 1, pad_low = 0, pad_high = 0;
  int64_t window_dilation = 1, base_dilation = 1;
  bool window_reversal = false;
  bool operator==(const WindowDim&) const = default;
};
// Which dimension of each operand and of the result is the batch, the
// feature and each spatial dim (XLA's ConvolutionDimensionNumbers; the text
// form is dim_labels=b01f_01io->b01f). Spatial dims pair up by position.
struct ConvolutionDims {
  int64_t input_batch = 0, input_feature = 0;
  std::vector<int64_t> input_spatial = {};
  int64_t kernel_input_feature = 0, kernel_output_feature = 0;
  std::vector<int64_t> kernel_spatial = {};
  int64_t output_batch = 0, output_feature = 0;
  std::vector<int64_t> output_spatial = {};
  bool operator==(const ConvolutionDims&) const = default;
};

// Groups of partition ids that exchange data in a collective (XLA's
// replica_groups over global device ids: strata's SPMD programs run one
// replica of N partitions). Empty means one group of every partition.
// cholesky: lower; triangular-solve: all four (transpose_a is XLA's
// TRANSPOSE, or ADJOINT, the same on real numbers).
struct LinalgOptions {
  bool lower = false, left_side = false, unit_diagonal = false, transpose_a = false;
  bool operator==(const LinalgOptions&) const = default;
};

using ReplicaGroups = std::vector<std::vector<int64_t>>;
using SourceTargetPairs = std::vector<std::pair<int64_t, int64_t>>;

// Attributes of an instruction; which ones an opcode uses is documented in
// builder.h. Shared with the lazy IR, whose primitive ops carry the same
// attributes and lower one-to-one.
struct Attributes {
  int64_t parameter_number = -1;             // parameter
  int64_t tuple_index = -1;                  // get-tuple-element
  std::vector<int64_t> dimensions;           // broadcast, transpose, reduce, reverse,
                                             // concatenate, iota, sort (one dim);
                                             // all-gather, reduce-scatter, all-to-all (one dim)
  std::vector<SliceRange> slice;             // slice
  std::vector<int64_t> dynamic_slice_sizes;  // dynamic-slice
  std::vector<PadRange> padding;             // pad
  Comparison direction = Comparison::kEq;    // compare
  bool is_stable = false;                    // sort (strata's sort is always stable)
  int64_t k = 0;                             // topk: how many
  bool largest = true;                       // topk: the largest (or the smallest)
  DotDims dot;                               // dot
  // dot: XLA's algorithm= ("dot_bf16_bf16_f32": operands rounded to bf16,
  // products summed in f32); empty: none. shape_reduction.cc lists them.
  std::string algorithm;
  std::vector<WindowDim> window;    // convolution: one per spatial dim; reduce-window,
                                    // select-and-scatter: one per operand dim
  ConvolutionDims convolution;      // convolution
  int64_t feature_group_count = 1;  // convolution
  int64_t batch_group_count = 1;    // convolution
  GatherDims gather;                // gather
  ScatterDims scatter;              // scatter
  Literal literal;                  // constant
  LinalgOptions linalg;             // cholesky, triangular-solve
  float epsilon = 0;                // batch-norm-*
  int64_t feature_index = 0;        // batch-norm-*
  int64_t exponent_bits = 0;        // reduce-precision: the narrower type's exponent
  int64_t mantissa_bits = 0;        // reduce-precision: and its mantissa (stored bits)
  std::string rng_algorithm;        // rng-bit-generator ("rng_philox")
  std::string fusion_kind;          // fusion: XLA's kind; empty is kLoop
  // custom-call: the manual-sharding boundaries JAX's shard_map emits,
  // "SPMDFullToShardShape" and "SPMDShardToFullShape", and strata's fused
  // attention, "strata.attention" and "strata.attention_grad" (the parser
  // reads a "Sharding" target as a copy and rejects every other target).
  std::string custom_call_target;
  // custom-call: the target's options; "strata.attention" and
  // "strata.attention_grad" (hlo/attention.h) read theirs from it.
  std::string backend_config;
  std::string sharding;                   // XLA sharding text, e.g. "{devices=[2,1]0,1}"
  ReplicaGroups replica_groups;           // all-reduce, all-gather, reduce-scatter, all-to-all
  SourceTargetPairs source_target_pairs;  // collective-permute
  int64_t channel_id = 0;                 // collectives; 0: none written
  bool use_global_device_ids = false;     // all-reduce, all-gather, reduce-scatter
  // compare's type= (TOTALORDER, or the element type's own order)
  ComparisonType comparison_type = ComparisonType::kDefault;
  // Called computations: reduce / reduce-window / scatter / all-reduce / reduce-scatter
  // to_apply = [0]; select-and-scatter select = [0], scatter = [1]; while
  // condition = [0], body = [1]; conditional: true_computation = [0], false_computation = [1]
  // map to_apply = [0];
  // (a pred selector) or branch_computations (an s32 index); call = [0]; fusion = [0] (the fused
  // computation: the CPU runtime's FuseElementwise pass makes kLoop ones and runs them as one loop;
  // any other fusion runs as a call of it).
  std::vector<Computation*> called;
};

class Instruction : public Attributes {
 public:
  Instruction(Opcode opcode, Shape shape, std::vector<Instruction*> operands)
      : opcode_(opcode), shape_(std::move(shape)), operands_(std::move(operands)) {}

  Opcode opcode() const { return opcode_; }
  const Shape& shape() const { return shape_; }
  void set_shape(Shape shape) { shape_ = std::move(shape); }
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  const std::vector<Instruction*>& operands() const { return operands_; }
  Instruction* operand(int64_t i) const { return operands_[i]; }
  int64_t operand_count() const { return static_cast<int64_t>(operands_.size()); }
  void set_operand(int64_t i, Instruction* op) { operands_[i] = op; }
  void set_operands(std::vector<Instruction*> ops) { operands_ = std::move(ops); }
  Computation* parent() const { return parent_; }
  const Attributes& attributes() const { return *this; }

 private:
  friend class Computation;
  Opcode opcode_;
  Shape shape_;
  std::vector<Instruction*> operands_;
  std::string name_;
  Computation* parent_ = nullptr;
};

class Computation {
 public:
  explicit Computation(std::string name) : name_(std::move(name)) {}
  Computation(const Computation&) = delete;
  Computation& operator=(const Computation&) = delete;

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  // Appends; operands must already be in this computation.
  Instruction* AddInstruction(std::unique_ptr<Instruction> instruction);
  // Appends a get-tuple-element of `tuple` (already here) named `name`.
  Instruction* AddTupleElement(Instruction* tuple, int64_t index, std::string name);
  // Instructions in insertion order (operands before users).
  const std::vector<std::unique_ptr<Instruction>>& instructions() const { return instructions_; }
  int64_t instruction_count() const { return static_cast<int64_t>(instructions_.size()); }

  Instruction* root() const { return root_; }
  void set_root(Instruction* root) { root_ = root; }
  // Parameters sorted by parameter number.
  std::vector<Instruction*> parameters() const;
  int64_t parameter_count() const;
  Instruction* parameter(int64_t number) const;

  // Replaces every use of `from` (operands and root) by `to`.
  void ReplaceAllUsesWith(Instruction* from, Instruction* to);
  // Many replacements at once, in one pass over the instructions (chains
  // a -> b -> c resolve to c). Passes that replace as they walk in operand
  // order call UpdateOperands on each instruction first, then this once:
  // linear in the computation's size rather than quadratic.
  using Replacements = std::unordered_map<const Instruction*, Instruction*>;
  static void UpdateOperands(Instruction* inst, const Replacements& replacements);
  void ApplyReplacements(const Replacements& replacements);
  // Drops instructions not reachable from the root (parameters stay).
  // Returns how many were removed.
  int64_t RemoveDeadInstructions();
  // Reorders instructions so that operands come before users (stable).
  void SortTopologically();
  // Puts the instructions in `order`, which must be a permutation of them.
  void SetInstructionOrder(const std::vector<Instruction*>& order);

 private:
  std::string name_;
  std::vector<std::unique_ptr<Instruction>> instructions_;
  Instruction* root_ = nullptr;
};

class Module {
 public:
  explicit Module(std::string name = "module") : name_(std::move(name)) {}
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  // Partitions of an SPMD program (XLA's `num_partitions=` module attribute):
  // how many copies run it, each reading its own partition-id.
  int64_t num_partitions() const { return num_partitions_; }
  void set_num_partitions(int64_t n) { num_partitions_ = n; }

  Computation* AddComputation(std::unique_ptr<Computation> computation);
  Computation* AddEntryComputation(std::unique_ptr<Computation> computation);
  // Adds a computation `caller` will call: just before it, keeping the order.
  Computation* AddComputationBefore(std::unique_ptr<Computation> computation,
                                    const Computation* caller);
  Computation* entry() const { return entry_; }
  void set_entry(Computation* entry) { entry_ = entry; }
  // Computations in dependency order (callees before callers), entry last.
  const std::vector<std::unique_ptr<Computation>>& computations() const { return computations_; }
  Computation* FindComputation(std::string_view name) const;

  std::unique_ptr<Module> Clone() const;
  // Drops computations no longer called from the entry.
  void RemoveUnreachableComputations();

 private:
  std::string name_;
  std::vector<std::unique_ptr<Computation>> computations_;
  Computation* entry_ = nullptr;
  int64_t num_partitions_ = 1;
};

}  // namespace strata::hlo
