// FuseElementwise: groups chains of f32 / f64 elementwise ops into loop
// fusions (XLA's kLoop fusion, single output), which the runtime runs block
// by block so intermediates stay in cache (kernels/fusion.cc).
//
// A fusion grows from its root (the last op of a chain) towards its operands.
// An elementwise op joins when every one of its users is already in the
// fusion and its result has the root's dims; a broadcast joins any fusion
// that reads it (a broadcast is an index map, so each fusion reads its
// operand directly and the broadcast itself is never materialized unless
// something outside still needs it). A chain of index maps that moves
// elements (a transpose, slice or reverse, with reshapes and broadcasts)
// joins the same way when the fused loop can read it as one strided view of
// the value under it (kernels/fusion_view.h). Compares join as 0 / 1 values
// for a select in the same fusion. Everything else a fusion reads becomes
// one of its parameters.
//
// A cheap elementwise op (a convert, an add, a multiply, a select) that
// other ops read too joins as well, computed again in the fusion: its
// operands are read instead of its result, and once every reader is a
// fusion it is never written. An elementwise op with the root's dims that is
// also one of the computation's results joins as an extra output (a multi-output fusion,
// whose result is a tuple): its operands are then read once, by the fusion,
// instead of once by its own fusion and again through its result (AdamW's
// new moments, which the new parameter also reads). Only results: a user
// outside that other ops read could make a cycle through the fusion.
//
// A reduction over the fusion's trailing dims joins too when its result is
// read only inside the fusion (a softmax's max and sum, a norm's mean
// square), through broadcasts back along those dims or through per-row ops
// on the way to them (the norm's + eps and rsqrt, reshapes of unit dims):
// the fusion then runs a row at a time, and the reduction and what it reads
// never leave cache. A row-shaped value the fusion does not compute is read
// one element per row. A row reduction whose result several fusions read
// roots a fusion of its own instead (a reduce fusion): the ops making its
// input join it and its result is one value per row.
//
// An f32 fusion also takes bf16 values: the converts between f32 and bf16
// the widening pass puts around each half-precision op (passes/widen_half.cc),
// bf16 broadcasts and selects of bf16 values. Its operands and outputs may
// then be bf16 (kernels/fusion.cc holds them as f32 inside), so a chain of
// bf16 ops reads and writes bf16 memory once.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>

#include "kernels/fusion_view.h"
#include "strata/compiler/passes.h"
#include "strata/hlo/builder.h"

namespace strata::compiler {

using runtime::IsIndexMap;
using runtime::MovesElements;
using runtime::OperandView;
using runtime::ViewBase;
using runtime::ViewOf;
namespace {

using hlo::Instruction;
using hlo::Opcode;

bool IsFloat(DType t) { return t == DType::kF32 || t == DType::kF64; }

// A bf16 value an f32 fusion holds.
bool IsHalfIn(DType t, DType type) { return type == DType::kF32 && t == DType::kBF16; }

// The type a fusion rooted at `root` computes in: a convert from f32 to bf16
// computes in f32; anything else in its own type (pred for a tuple: none).
DType ComputeType(const Instruction& root) {
  if (!root.shape().is_array()) return DType::kPred;
  if (root.opcode() == Opcode::kConvert && IsHalfIn(root.shape().dtype(), DType::kF32) &&
      root.operand(0)->shape().is_array()) {
    return root.operand(0)->shape().dtype();
  }
  return root.shape().dtype();
}

// The fused loop's index arithmetic keeps a fixed-size multi-index.
constexpr int64_t kMaxFusedRank = 8;

// An op the fused loop computes per element in `type`: a value of that type,
// or a compare of two such values (a select's predicate).
bool IsCore(const Instruction& i, DType type) {
  if (!i.shape().is_array()) return false;
  const Opcode op = i.opcode();
  const DType t = i.shape().dtype();
  // Unary and binary ops on floats (the verifier admits no bitwise op, not or
  // shift on them; is-finite gives pred).
  if (op == Opcode::kConvert) {  // between the fusion's type and bf16, either way
    const DType from = i.operand(0)->shape().dtype();
    return (from == type && IsHalfIn(t, type)) || (IsHalfIn(from, type) && t == type);
  }
  if (hlo::IsElementwiseUnary(op) || hlo::IsElementwiseBinary(op)) return t == type;
  if (op == Opcode::kSelect) return t == type || IsHalfIn(t, type);
  if (op == Opcode::kCompare) {  // a total-order compare runs on its own
    return i.operand(0)->shape().dtype() == type &&
           i.comparison_type == hlo::ComparisonType::kDefault;
  }
  return false;
}

// A broadcast the fusion reads through (to the fusion's dims).
bool IsFusibleBroadcast(const Instruction& i, const std::vector<int64_t>& dims, DType type) {
  return i.opcode() == Opcode::kBroadcast && i.shape().is_array() && i.shape().dims() == dims &&
         (i.shape().dtype() == type || i.shape().dtype() == DType::kPred ||
          IsHalfIn(i.shape().dtype(), type)) &&
         i.operand(0)->shape().is_array() && i.operand(0)->shape().rank() <= kMaxFusedRank;
}

// A chain of index maps (a transpose, slice, reverse or reshape, and the
// broadcasts with them) at the fusion's dims that the fused loop reads as
// one strided view of the value under it (kernels/fusion_view.h): runs of
// consecutive elements along its innermost dim (or one element repeated),
// so the moved copy is never written. A view needing more dims than the
// loop's index keeps stays outside.
bool IsFusibleView(const Instruction& i, const std::vector<int64_t>& dims, DType type) {
  if (!IsIndexMap(i) || !MovesElements(i) || i.shape().dims() != dims) return false;
  const DType t = i.shape().dtype();
  if (t != type && t != DType::kPred && !IsHalfIn(t, type)) return false;
  if (ViewBase(i).shape().rank() == 0) return true;
  std::optional<OperandView> view = ViewOf(i);
  return view && view->dims.size() <= static_cast<size_t>(kMaxFusedRank) &&
         (view->strides.empty() || std::abs(view->strides.back()) <= 1);
}

// A fused row is a block of the fused loop: long enough to amortize a
// block's bookkeeping, short enough that its values stay in L1 / L2.
constexpr int64_t kMinRow = 32, kMaxRow = 16384;

// The elements a reduce of the fusion's `dims` covers, when it is a row
// reduction: over the trailing dims, with one binary op (add, multiply,
// maximum, minimum) from a scalar constant. Else 0.
int64_t RowReduceLength(const Instruction& i, const std::vector<int64_t>& dims, DType type) {
  if (i.opcode() != Opcode::kReduce || i.operand_count() != 2 || !i.shape().is_array() ||
      i.shape().dtype() != type || i.operand(0)->shape().dims() != dims) {
    return 0;
  }
  const Instruction& init = *i.operand(1);
  if (init.opcode() != Opcode::kConstant || init.shape().rank() != 0) return 0;
  std::optional<Opcode> reducer = hlo::SimpleReducer(*i.called.at(0));
  if (!reducer || *reducer == Opcode::kAnd || *reducer == Opcode::kOr) return 0;
  const int64_t rank = static_cast<int64_t>(dims.size());
  const int64_t reduced = static_cast<int64_t>(i.dimensions.size());
  int64_t length = 1;
  for (int64_t k = 0; k < reduced; ++k) {
    if (i.dimensions[k] != rank - reduced + k) return 0;
    length *= dims[rank - reduced + k];
  }
  return reduced > 0 && length >= kMinRow && length <= kMaxRow ? length : 0;
}

// How many leading dims of `dims` a broadcast keeps when it spreads a
// per-row value along the rest: its operand is those dims (then only unit
// dims), mapped in order. -1 when it is not such a broadcast.
int64_t RowBroadcastLead(const Instruction& b, const std::vector<int64_t>& dims) {
  if (b.opcode() != Opcode::kBroadcast || b.shape().dims() != dims) return -1;
  const Shape& s = b.operand(0)->shape();
  if (!s.is_array() || s.rank() == 0) return -1;
  for (size_t k = 0; k < b.dimensions.size(); ++k) {
    if (b.dimensions[k] != static_cast<int64_t>(k)) return -1;
  }
  int64_t lead = 0;
  while (lead < s.rank() && s.dim(lead) == dims[lead]) ++lead;
  for (int64_t i = lead; i < s.rank(); ++i) {
    if (s.dim(i) != 1) return -1;
  }
  int64_t spread = 1;  // elements each value is spread over
  for (size_t i = lead; i < dims.size(); ++i) spread *= dims[i];
  return spread > 1 ? lead : -1;
}

std::vector<int64_t> WithoutUnitDims(std::span<const int64_t> dims) {
  std::vector<int64_t> out;
  for (int64_t d : dims) {
    if (d != 1) out.push_back(d);
  }
  return out;
}

// A value with one element per row of a fusion whose rows are `dims` after
// its first `lead` dims (up to unit dims).
bool IsRowShaped(const Shape& s, const std::vector<int64_t>& dims, int64_t lead) {
  return s.is_array() &&
         WithoutUnitDims(s.dims()) == WithoutUnitDims(std::span<const int64_t>(dims.data(), lead));
}

// Elementwise ops cheap enough to compute again in each fusion that reads
// them (XLA duplicates cheap producers into their consumers too): writing
// their result once and reading it in every reader costs more than
// recomputing it, and a loop over memory is bound by the bytes it moves.
// Transcendentals, divisions and roots are not cheap.
bool IsCheapToRepeat(const Instruction& i) {
  switch (i.opcode()) {
    case Opcode::kConvert:
    case Opcode::kNegate:
    case Opcode::kAbs:
    case Opcode::kAdd:
    case Opcode::kSubtract:
    case Opcode::kMultiply:
    case Opcode::kMaximum:
    case Opcode::kMinimum:
    case Opcode::kSelect:
      return true;
    default:
      return false;
  }
}

// A cheap op is repeated in at most this many readers.
constexpr size_t kMaxRepeats = 4;

// A row reduction that may root a fusion of its own (a reduce fusion): the
// elementwise ops that make its input join it, so the input is never
// written, and the fusion's result is the reduction's, one value per row.
bool IsRowReduction(const Instruction& i) {
  return i.opcode() == Opcode::kReduce && i.operand_count() == 2 && i.shape().is_array() &&
         i.operand(0)->shape().is_array() &&
         RowReduceLength(i, i.operand(0)->shape().dims(), i.shape().dtype()) > 0;
}

// The dims a fusion rooted at `root` loops over: a reduction's input's.
const std::vector<int64_t>& LoopDims(const Instruction& root) {
  return IsRowReduction(root) ? root.operand(0)->shape().dims() : root.shape().dims();
}

struct Group {
  Instruction* root = nullptr;
  std::vector<int64_t> dims;  // what the fusion loops over
  bool reduction = false;     // rooted at a row reduction: one output, per row
  std::unordered_set<Instruction*> members;
  // Members that also stay outside for readers elsewhere: the fusion
  // computes them again (cheap ones only).
  std::unordered_set<Instruction*> repeated;
  std::vector<Instruction*> outputs;  // members also read outside, after the root
  std::vector<Instruction*> joined;   // members in the order they joined (deterministic)
  int64_t core = 0;
  bool absorbs_broadcast = false;  // reads a non-scalar broadcast or a view
  // Index maps read as strided views of their bases (IsFusibleView): like
  // broadcasts, they stay outside too for any other reader.
  std::unordered_set<Instruction*> views;
  // The values those views read: operands of the fusion, so they never join.
  std::unordered_set<const Instruction*> view_bases;
  int64_t row = 0;    // the row its reductions cover (0: none)
  int64_t lead = -1;  // dims before the row (-1: no row value yet)
  // Ops on per-row values (a reduction's result on its way to a broadcast:
  // the mean of squares, its rsqrt) and scalars spread over them.
  std::unordered_set<Instruction*> row_ops, row_spreads;

  void Join(Instruction* i) {
    if (members.insert(i).second) joined.push_back(i);
  }
};

class Fuser {
 public:
  Fuser(hlo::Module& module, hlo::Computation& c) : module_(module), c_(c) {
    for (const auto& inst : c.instructions()) {
      for (Instruction* op : inst->operands()) {
        auto& u = users_[op];
        // (A reader of `op` in several operand slots was pushed as it was
        // seen: it is the last one. A search of the list made a value read by
        // n instructions cost n^2.)
        if (u.empty() || u.back() != inst.get()) u.push_back(inst.get());
      }
    }
  }

  bool Run() {
    std::vector<Instruction*> order;
    for (const auto& inst : c_.instructions()) {
      position_[inst.get()] = static_cast<int64_t>(order.size());
      order.push_back(inst.get());
    }
    hlo::Computation::Replacements replacements;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Instruction* root = *it;
      if (Dead(root)) {
        dead_.insert(root);
        continue;
      }
      const bool reduction = IsRowReduction(*root);
      if (fused_.count(root) || !IsFloat(ComputeType(*root)) ||
          (!reduction && !IsCore(*root, ComputeType(*root))) ||
          LoopDims(*root).size() > static_cast<size_t>(kMaxFusedRank)) {
        continue;
      }
      Group g = Grow(root);
      // (A reduction with nothing fused into it stays the reduce kernel.)
      if (g.core < 2 && !(g.core == 1 && g.absorbs_broadcast && !reduction)) continue;
      for (Instruction* m : g.members) {
        if (m->opcode() != Opcode::kBroadcast && !g.repeated.count(m) && !g.views.count(m))
          fused_.insert(m);
      }
      Instruction* fusion = Build(g);
      if (g.outputs.empty()) {
        replacements[root] = fusion;
        continue;
      }
      replacements[root] = Element(fusion, 0);
      for (size_t j = 0; j < g.outputs.size(); ++j)
        replacements[g.outputs[j]] = Element(fusion, static_cast<int64_t>(j) + 1);
    }
    if (replacements.empty()) return false;
    c_.ApplyReplacements(replacements);
    c_.SortTopologically();
    c_.RemoveDeadInstructions();
    return true;
  }

 private:
  // Whether nothing will read `root` once the fusions built so far replace
  // what they hold: every reader is a member of one, or dead itself, and no
  // fusion reads it as an operand. (A cheap op every reader computed again
  // needs no fusion of its own.) All readers come later, so all were seen.
  bool Dead(Instruction* root) const {
    if (root == c_.root() || read_.count(root)) return false;
    auto it = users_.find(root);
    if (it == users_.end()) return false;
    for (Instruction* u : it->second) {
      if (!fused_.count(u) && !dead_.count(u)) return false;
    }
    return true;
  }

  // Every reader of `i` is in the group and leaves with it (a repeated
  // member still reads `i` outside).
  bool AllUsersIn(Instruction* i, const Group& g) const {
    // (A value a built fusion reads stays written: no other fusion may
    // compute it inside only.)
    if (i == c_.root() || read_.count(i)) return false;
    auto it = users_.find(i);
    if (it == users_.end()) return false;
    for (Instruction* u : it->second) {
      if (!g.members.count(u) || g.repeated.count(u)) return false;
      // A value read through a view is the view's operand: written.
      if (g.views.count(u)) return false;
      // A broadcast other fusions also read stays outside, reading `i`.
      if (u->opcode() == Opcode::kBroadcast && !AllUsersIn(u, g)) return false;
    }
    return true;
  }

  // Whether `i`, read outside the group as well, may be computed again in
  // it: cheap, elementwise at the root's dims, read by a few ops.
  bool CanRepeat(Instruction* i, const Group& g, DType type) const {
    if (!IsCheapToRepeat(*i) || !IsCore(*i, type) || i == c_.root() ||
        i->shape().dims() != g.dims) {
      return false;
    }
    // A rounding to bf16 is written once: repeated, its readers would read
    // the wide value it rounds instead (an exp's result in f32).
    if (i->opcode() == Opcode::kConvert &&
        DTypeSize(i->shape().dtype()) < DTypeSize(i->operand(0)->shape().dtype())) {
      return false;
    }
    auto it = users_.find(i);
    if (it == users_.end() || it->second.size() > kMaxRepeats) return false;
    // Bytes per element: computed again by each of n readers, it reads its
    // full-size operands n times; written once, it reads them once, writes
    // itself and is read n times. Repeat only where that moves no more.
    const int64_t n = static_cast<int64_t>(it->second.size());
    int64_t reads = 0;
    for (const Instruction* op : i->operands()) {
      if (op->shape().dims() == i->shape().dims() && op->opcode() != Opcode::kBroadcast &&
          op->opcode() != Opcode::kConstant) {
        // No chains: repeating an op over another cheap op would repeat that
        // one too, and each reader would read everything the chain reads
        // (a backward chain of products, each also read elsewhere). Only
        // converts are passed through.
        if (IsCheapToRepeat(*op) && op->opcode() != Opcode::kConvert) return false;
        reads += DTypeSize(op->shape().dtype());
      }
    }
    const int64_t own = DTypeSize(i->shape().dtype());
    return n * reads <= reads + own + n * own;
  }

  Instruction* Element(Instruction* tuple, int64_t index) {
    return c_.AddTupleElement(tuple, index, fmt::format("{}.{}", tuple->name(), index));
  }

  // Whether `i`, a core op some of whose users are outside the group, can
  // join as an extra output: every user outside is the computation's result
  // (a tuple), which nothing reads, so no cycle can form through it.
  bool CanExport(Instruction* i, const Group& g) const {
    const Instruction* result = c_.root();
    if (i == result || result->opcode() != Opcode::kTuple || read_.count(i) || g.reduction)
      return false;
    auto it = users_.find(i);
    if (it == users_.end()) return false;
    for (Instruction* u : it->second) {
      if (u != result && (!g.members.count(u) || g.repeated.count(u))) return false;
    }
    return true;
  }

  // Every user of a per-row value is inside, and reads it per row.
  bool ReadPerRowInside(Instruction* i, const Group& g) const {
    if (!AllUsersIn(i, g)) return false;
    for (Instruction* user : users_.at(i)) {
      if (user->opcode() == Opcode::kBroadcast && RowBroadcastLead(*user, g.dims) != g.lead) {
        return false;
      }
    }
    return true;
  }

  // An op on per-row values: elementwise over them, or a reshape that only
  // adds or drops unit dims.
  bool IsRowOp(const Instruction& i, const Group& g, DType type) const {
    const std::vector<int64_t>& dims = g.dims;
    if (g.lead < 0 || !IsRowShaped(i.shape(), dims, g.lead)) return false;
    if (i.opcode() == Opcode::kReshape) {
      return i.shape().dtype() == type && IsRowShaped(i.operand(0)->shape(), dims, g.lead);
    }
    return IsCore(i, type) && i.opcode() != Opcode::kCompare && i.opcode() != Opcode::kSelect;
  }

  Group Grow(Instruction* root) {
    const DType type = ComputeType(*root);
    const std::vector<int64_t>& dims = LoopDims(*root);
    const int64_t rank = static_cast<int64_t>(dims.size());
    Group g;
    g.root = root;
    g.dims = dims;
    g.Join(root);
    g.core = 1;
    if (IsRowReduction(*root)) {  // a row at a time from the start
      g.reduction = true;
      g.row = RowReduceLength(*root, dims, type);
      g.lead = rank - static_cast<int64_t>(root->dimensions.size());
    }
    // Each member's operands are tried once, as it joins: a worklist, not a
    // rescan of every member per round (that made fusing an n-op chain
    // quadratic in n). What refuses a candidate is a reader of it not in
    // the group yet -- and that reader's joining queues it again -- or the
    // group's row (lead, length) not known yet: refused candidates are
    // tried again when that changes.
    auto try_join = [&](Instruction* op) {
      if (g.view_bases.count(op)) return false;  // a view inside reads it as an operand
      if (op->opcode() == Opcode::kReduce) {
        const int64_t length = RowReduceLength(*op, dims, type);
        const int64_t reduced = static_cast<int64_t>(op->dimensions.size());
        if (length > 0 && (g.row == 0 || g.row == length) && rank - reduced == g.lead &&
            ReadPerRowInside(op, g)) {
          g.Join(op);
          g.row = length;
          ++g.core;
          return true;
        }
      } else if (IsFusibleView(*op, dims, type) &&
                 !g.members.count(const_cast<Instruction*>(&ViewBase(*op)))) {
        for (Instruction* at = op; IsIndexMap(*at); at = at->operand(0)) {
          g.Join(at);
          g.views.insert(at);
        }
        g.view_bases.insert(&ViewBase(*op));
        g.absorbs_broadcast = true;
        return true;
      } else if (IsFusibleBroadcast(*op, dims, type)) {
        g.Join(op);
        // (A broadcast scalar is read as a scalar unfused too.) Fusing a
        // lone op for a broadcast others also read still pays: once every
        // reader is a fusion, the broadcast is never written.
        g.absorbs_broadcast = g.absorbs_broadcast || op->operand(0)->shape().rank() > 0;
        return true;
      } else if (IsCore(*op, type) && op->shape().dims() == dims && AllUsersIn(op, g)) {
        g.Join(op);
        ++g.core;
        return true;
      } else if (IsCore(*op, type) && op->opcode() != Opcode::kCompare &&
                 op->shape().dims() == dims && CanExport(op, g)) {
        g.Join(op);
        g.outputs.push_back(op);
        ++g.core;
        return true;
      } else if (CanRepeat(op, g, type)) {
        g.Join(op);
        g.repeated.insert(op);
        ++g.core;
        return true;
      } else if (op->opcode() == Opcode::kBroadcast && op->operand(0)->shape().rank() == 0 &&
                 g.lead >= 0 && IsRowShaped(op->shape(), dims, g.lead)) {
        g.Join(op);  // a scalar spread over the row values
        g.row_spreads.insert(op);
        return true;
      } else if (IsRowOp(*op, g, type) && ReadPerRowInside(op, g)) {
        g.Join(op);
        g.row_ops.insert(op);
        ++g.core;
        return true;
      }
      return false;
    };
    std::vector<Instruction*> candidates, refused;
    std::unordered_set<Instruction*> refused_set;
    // A refused value read through a broadcast `b` is tried again when `b`
    // or a reader of `b` joins (AllUsersIn looks through broadcasts).
    auto retry_under = [&](Instruction* b) {
      if (b->opcode() == Opcode::kBroadcast && refused_set.count(b->operand(0)))
        candidates.push_back(b->operand(0));
    };
    size_t scanned = 0;  // members of g.joined whose operands were queued
    int64_t lead_seen = g.lead, row_seen = g.row;
    do {
      for (; scanned < g.joined.size(); ++scanned) {
        Instruction* m = g.joined[scanned];
        if (g.views.count(m)) continue;  // its base is the fusion's operand
        if (m->opcode() == Opcode::kBroadcast) {
          const int64_t lead = RowBroadcastLead(*m, dims);
          if (lead >= 0 && (g.lead < 0 || g.lead == lead)) {
            g.lead = lead;
            candidates.push_back(m->operand(0));
          } else {
            retry_under(m);
          }
          continue;
        }
        for (Instruction* op : m->operands()) {
          if (!g.members.count(op)) candidates.push_back(op);
          retry_under(op);
        }
      }
      if (g.lead != lead_seen || g.row != row_seen) {
        lead_seen = g.lead;
        row_seen = g.row;
        candidates.insert(candidates.end(), refused.begin(), refused.end());
        refused.clear();
        refused_set.clear();
      }
      std::vector<Instruction*> round = std::move(candidates);
      candidates.clear();
      for (Instruction* op : round) {
        if (g.members.count(op) || fused_.count(op)) continue;
        if (try_join(op)) continue;
        if (refused_set.insert(op).second) refused.push_back(op);
      }
    } while (scanned < g.joined.size() || !candidates.empty() || g.lead != lead_seen ||
             g.row != row_seen);
    // Without a reduction the fusion has no rows to give its row ops one
    // value each: they stay outside (their broadcasts read them as before).
    if (g.row == 0 && !(g.row_ops.empty() && g.row_spreads.empty())) {
      for (Instruction* op : g.row_ops) g.members.erase(op);
      for (Instruction* op : g.row_spreads) g.members.erase(op);
      g.core -= static_cast<int64_t>(g.row_ops.size());
    }
    // A compare must feed only selects inside the fusion (its 0 / 1 is not a
    // pred outside); the root is never a compare (its type is float).
    return g;
  }

  // The fused computation and the fusion instruction that calls it.
  Instruction* Build(const Group& g) {
    // The members in program order, operands before users (sorted, not
    // picked out of the whole program: that made n fusions cost n^2).
    std::vector<Instruction*> order(g.members.begin(), g.members.end());
    std::sort(order.begin(), order.end(),
              [this](Instruction* a, Instruction* b) { return position_.at(a) < position_.at(b); });
    // A name no computation has yet (a module compiled again, an optimized
    // dump run by `strata run`, already holds fused_main_0 ...).
    std::string name;
    do {
      name = fmt::format("fused_{}_{}", c_.name(), count_++);
    } while (module_.FindComputation(name));
    auto fused = std::make_unique<hlo::Computation>(name);
    std::unordered_map<const Instruction*, Instruction*> inside;
    std::vector<Instruction*> arguments;
    auto parameter = [&](Instruction* outer) {
      auto it = inside.find(outer);
      if (it != inside.end()) return it->second;
      auto p = std::make_unique<Instruction>(Opcode::kParameter, outer->shape(),
                                             std::vector<Instruction*>{});
      p->parameter_number = static_cast<int64_t>(arguments.size());
      p->set_name(fmt::format("p{}", arguments.size()));
      arguments.push_back(outer);
      read_.insert(outer);
      return inside[outer] = fused->AddInstruction(std::move(p));
    };
    for (Instruction* m : order) {
      std::vector<Instruction*> operands;
      for (Instruction* op : m->operands()) {
        const bool scalar_constant =
            (m->opcode() == Opcode::kBroadcast || m->opcode() == Opcode::kReduce) &&
            op->opcode() == Opcode::kConstant && op->shape().rank() == 0;
        if (g.members.count(op)) {
          operands.push_back(inside.at(op));
        } else if (scalar_constant) {
          auto k = std::make_unique<Instruction>(Opcode::kConstant, op->shape(),
                                                 std::vector<Instruction*>{});
          static_cast<hlo::Attributes&>(*k) = op->attributes();
          k->set_name(fmt::format("constant.{}", fused->instruction_count()));
          operands.push_back(fused->AddInstruction(std::move(k)));
        } else {
          operands.push_back(parameter(op));
        }
      }
      auto clone = std::make_unique<Instruction>(m->opcode(), m->shape(), std::move(operands));
      static_cast<hlo::Attributes&>(*clone) = m->attributes();
      clone->set_name(m->name());
      inside[m] = fused->AddInstruction(std::move(clone));
    }
    Shape shape = g.root->shape();
    if (g.outputs.empty()) {
      fused->set_root(inside.at(g.root));
    } else {  // (root, outputs...)
      std::vector<Instruction*> elements = {inside.at(g.root)};
      std::vector<Shape> shapes = {g.root->shape()};
      for (Instruction* o : g.outputs) {
        elements.push_back(inside.at(o));
        shapes.push_back(o->shape());
      }
      shape = Shape::Tuple(shapes);
      auto tuple = std::make_unique<Instruction>(Opcode::kTuple, shape, std::move(elements));
      tuple->set_name("outputs");
      fused->set_root(fused->AddInstruction(std::move(tuple)));
    }
    hlo::Computation* callee = module_.AddComputationBefore(std::move(fused), &c_);
    auto fusion = std::make_unique<Instruction>(Opcode::kFusion, shape, arguments);
    fusion->called = {callee};
    fusion->set_name(fmt::format("fusion.{}", g.root->name()));
    return c_.AddInstruction(std::move(fusion));
  }

  hlo::Module& module_;
  hlo::Computation& c_;
  std::unordered_map<const Instruction*, std::vector<Instruction*>> users_;
  std::unordered_set<const Instruction*> fused_;
  std::unordered_set<const Instruction*> dead_;               // read by nothing once fused
  std::unordered_set<const Instruction*> read_;               // the built fusions' operands
  std::unordered_map<const Instruction*, int64_t> position_;  // in the program, before fusing
  int64_t count_ = 0;
};

}  // namespace

std::vector<hlo::Computation*> ProgramComputations(const hlo::Module& module) {
  std::vector<hlo::Computation*> programs{module.entry()};
  for (size_t i = 0; i < programs.size(); ++i) {
    for (const auto& inst : programs[i]->instructions()) {
      if (inst->opcode() == Opcode::kWhile || inst->opcode() == Opcode::kConditional) {
        for (hlo::Computation* called : inst->called) programs.push_back(called);
      }
    }
  }
  return programs;
}

bool FuseElementwise(hlo::Module& module) {
  bool changed = false;
  for (hlo::Computation* c : ProgramComputations(module)) changed |= Fuser(module, *c).Run();
  if (changed) module.RemoveUnreachableComputations();  // fusions nothing reads
  return changed;
}

}  // namespace strata::compiler
