// Builder: constructs one Computation with shapes inferred (and checked) as
// each instruction is added. Every method throws strata::Error on operands
// whose shapes or dtypes the opcode does not accept.
//
//   hlo::Module m("axpy");
//   hlo::Builder b("main");
//   auto* x = b.Parameter(0, Shape(DType::kF32, {4}), "x");
//   auto* y = b.Parameter(1, Shape(DType::kF32, {4}), "y");
//   auto* a = b.Broadcast(b.Constant(Literal::Scalar(2.0f)), {4}, {});
//   m.AddEntryComputation(b.Build(b.Add(b.Multiply(a, x), y)));
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <optional>

#include "strata/hlo/module.h"

namespace strata::hlo {

class Builder {
 public:
  explicit Builder(std::string name);
  // Adds instructions to `into`, an existing computation (Build is not
  // called: the caller wires the new instructions in).
  explicit Builder(Computation* into);
  Builder(const Builder&) = delete;
  Builder& operator=(const Builder&) = delete;

  Instruction* Parameter(int64_t number, Shape shape, std::string name = "");
  Instruction* Constant(Literal literal);
  template <typename T>
  Instruction* ConstantScalar(T value) {
    return Constant(Literal::Scalar<T>(value));
  }
  Instruction* Iota(Shape shape, int64_t iota_dimension);
  Instruction* Convert(Instruction* x, DType dtype);
  Instruction* BitcastConvert(Instruction* x, DType dtype);
  // Output dims `dims`; operand dimension i maps to output dimension dimensions[i].
  Instruction* Broadcast(Instruction* x, std::vector<int64_t> dims,
                         std::vector<int64_t> dimensions);
  Instruction* Reshape(Instruction* x, std::vector<int64_t> dims);
  Instruction* Transpose(Instruction* x, std::vector<int64_t> permutation);
  Instruction* Copy(Instruction* x);
  Instruction* Slice(Instruction* x, std::vector<int64_t> starts, std::vector<int64_t> limits,
                     std::vector<int64_t> strides = {});
  Instruction* DynamicSlice(Instruction* x, std::vector<Instruction*> starts,
                            std::vector<int64_t> sizes);
  Instruction* DynamicUpdateSlice(Instruction* x, Instruction* update,
                                  std::vector<Instruction*> starts);
  Instruction* Concatenate(std::vector<Instruction*> operands, int64_t dimension);
  Instruction* Pad(Instruction* x, Instruction* padding_value, std::vector<PadRange> padding);
  Instruction* Reverse(Instruction* x, std::vector<int64_t> dimensions);
  Instruction* Select(Instruction* pred, Instruction* on_true, Instruction* on_false);
  Instruction* Compare(Instruction* a, Instruction* b, Comparison direction,
                       ComparisonType type = ComparisonType::kDefault);
  Instruction* Clamp(Instruction* lo, Instruction* x, Instruction* hi);
  Instruction* IsFinite(Instruction* x);

  Instruction* Unary(Opcode op, Instruction* x);
  Instruction* Binary(Opcode op, Instruction* a, Instruction* b);
  Instruction* Add(Instruction* a, Instruction* b) { return Binary(Opcode::kAdd, a, b); }
  Instruction* Subtract(Instruction* a, Instruction* b) { return Binary(Opcode::kSubtract, a, b); }
  Instruction* Multiply(Instruction* a, Instruction* b) { return Binary(Opcode::kMultiply, a, b); }
  Instruction* Divide(Instruction* a, Instruction* b) { return Binary(Opcode::kDivide, a, b); }
  Instruction* Maximum(Instruction* a, Instruction* b) { return Binary(Opcode::kMaximum, a, b); }
  Instruction* Minimum(Instruction* a, Instruction* b) { return Binary(Opcode::kMinimum, a, b); }

  // Variadic reduce: N operands, N init scalars, to_apply takes 2N scalars.
  Instruction* Reduce(std::vector<Instruction*> operands, std::vector<Instruction*> inits,
                      std::vector<int64_t> dimensions, Computation* to_apply);
  Instruction* Reduce(Instruction* operand, Instruction* init, std::vector<int64_t> dimensions,
                      Computation* to_apply) {
    return Reduce(std::vector<Instruction*>{operand}, std::vector<Instruction*>{init},
                  std::move(dimensions), to_apply);
  }
  Instruction* Dot(Instruction* lhs, Instruction* rhs, DotDims dims);
  // Sorts every operand along `dimension` by the order `comparator` gives
  // (2N scalars: lhs and rhs of operand 0, of operand 1, ... -> pred "lhs
  // comes first"); one array for one operand, else a tuple.
  Instruction* Sort(std::vector<Instruction*> operands, int64_t dimension, Computation* comparator,
                    bool is_stable = false);
  // (the k largest or smallest of each row along the last dimension, their
  // s32 positions); ties: the earlier position first.
  Instruction* TopK(Instruction* x, int64_t k, bool largest = true);
  Instruction* Gather(Instruction* operand, Instruction* indices, GatherDims dims);
  Instruction* Scatter(Instruction* operand, Instruction* indices, Instruction* updates,
                       ScatterDims dims, Computation* to_apply);
  Instruction* Tuple(std::vector<Instruction*> elements);
  Instruction* GetTupleElement(Instruction* tuple, int64_t index);
  Instruction* While(Computation* condition, Computation* body, Instruction* init);
  Instruction* Call(Computation* computation, std::vector<Instruction*> arguments);
  // Runs branches[i] on operands[i]: a pred selector picks branch 0 (true)
  // or 1 (false); an s32 index picks its branch, the last when out of range.
  Instruction* Conditional(Instruction* selector, std::vector<Computation*> branches,
                           std::vector<Instruction*> operands);
  // A loop fusion of `computation`'s elementwise ops (what the runtime's
  // FuseElementwise pass makes).
  Instruction* Fusion(Computation* computation, std::vector<Instruction*> arguments);
  // The identity on `value` (usually a tuple) that no pass looks through.
  Instruction* OptimizationBarrier(Instruction* value);
  // A manual-sharding boundary (custom_call_target "SPMDFullToShardShape"
  // or "SPMDShardToFullShape") giving `shape`.
  Instruction* CustomCall(Instruction* operand, std::string target, Shape shape);
  // Philox-4x32-10 bits: state is u64[2] (key, counter); result is
  // (new state u64[2], bits of `bits_shape`).
  Instruction* RngBitGenerator(Instruction* state, Shape bits_shape);

  // SPMD: which partition runs (u32[]), and the collectives over groups of
  // partition ids (empty `groups`: every partition; all-gather and
  // reduce-scatter need explicit groups here, as the group size makes their
  // shape). `channel_id` 0 prints none.
  Instruction* PartitionId();
  Instruction* AllReduce(Instruction* x, Computation* to_apply, ReplicaGroups groups,
                         int64_t channel_id = 0);
  Instruction* AllGather(Instruction* x, int64_t dimension, ReplicaGroups groups,
                         int64_t channel_id = 0);
  Instruction* ReduceScatter(Instruction* x, int64_t dimension, Computation* to_apply,
                             ReplicaGroups groups, int64_t channel_id = 0);
  Instruction* AllToAll(Instruction* x, int64_t dimension, ReplicaGroups groups,
                        int64_t channel_id = 0);
  Instruction* CollectivePermute(Instruction* x, SourceTargetPairs pairs, int64_t channel_id = 0);

  // Adds an instruction, its shape inferred from its operands (Error when
  // they do not fit the opcode).
  Instruction* Add(std::unique_ptr<Instruction> instruction);
  // Adds an instruction whose shape the caller already computed with the
  // same shape rules (the lazy IR's nodes carry them): nothing is inferred
  // again. Executable::Compile's verification checks it.
  Instruction* AddShaped(std::unique_ptr<Instruction> instruction);
  // Finishes the computation with `root` as its root.
  std::unique_ptr<Computation> Build(Instruction* root);

 private:
  Instruction* Make(Opcode op, Shape shape, std::vector<Instruction*> operands);
  Instruction* Finish(Instruction* instruction);
  std::unique_ptr<Computation> owned_;
  Computation* computation_;
};

// Instructions added without a name get a fresh one ("add.17"): from a
// process-wide counter, or, while a NameScope is alive on the calling
// thread, from the innermost scope's own counter, starting at 0. A module
// built inside one scope therefore names its instructions the same whatever
// the process built before (lazy's compiles and their dumps do this).
class NameScope {
 public:
  NameScope();
  ~NameScope();
  NameScope(const NameScope&) = delete;
  NameScope& operator=(const NameScope&) = delete;
  int64_t Next() { return next_++; }
  static NameScope* current();

 private:
  int64_t next_ = 0;
  NameScope* outer_;
};

// Common scalar computations for reduce / scatter: (a, b) -> a op b.
std::unique_ptr<Computation> MakeScalarBinaryComputation(std::string name, Opcode op, DType dtype);
// The inverse: the op when `c` is (a, b) -> a op b of its two parameters and
// op is add, multiply, maximum, minimum, and or or; none otherwise.
std::optional<Opcode> SimpleReducer(const Computation& c);

}  // namespace strata::hlo
