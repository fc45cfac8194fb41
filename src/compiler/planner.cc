// Buffer assignment and kernel steps: one computation becomes a
// runtime::Program (src/runtime/program.h says what a slot, a storage and a
// step are).
#include "planner.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "kernels/kernels.h"

namespace strata::compiler {

using hlo::Instruction;
using hlo::Opcode;
using runtime::AcceptsScalarBroadcast;
using runtime::AlignUp;
using runtime::CanRunInPlace;
using runtime::FusionElementwiseOperands;
using runtime::FusionOutputShape;
using runtime::FusionReadsElementwise;
using runtime::IsScalarBroadcast;
using runtime::Placement;
using runtime::Program;
using runtime::Step;
using runtime::Storage;
using runtime::StorageKind;

namespace {

// Number of array leaves in each tuple element before `index`.
int64_t LeafOffset(const Shape& tuple, int64_t index) {
  int64_t offset = 0;
  for (int64_t i = 0; i < index; ++i)
    offset += static_cast<int64_t>(tuple.tuple_shape(i).Leaves().size());
  return offset;
}

}  // namespace

// Builds a Program: slots, liveness, storages (with in-place reuse), arena
// offsets, and one step per instruction that does work.
class Planner {
 public:
  Planner(const hlo::Computation& c, StorageKind parameter_kind, bool root_is_output,
          runtime::ThreadPool& pool)
      : c_(c), parameter_kind_(parameter_kind), root_is_output_(root_is_output), pool_(pool) {}

  std::unique_ptr<Program> Plan() {
    program_ = std::make_unique<Program>();
    AssignSlots();
    AssignStorages();
    PlaceUpdates();
    FindViewReaders();
    PlaceArena();
    return std::move(program_);
  }

 private:
  int64_t NewSlot(int64_t size) {
    slot_size_.push_back(size);
    last_use_.push_back(-1);
    program_->slot_storage_.push_back(-1);
    return static_cast<int64_t>(slot_size_.size()) - 1;
  }

  int64_t NewStorage(Storage s) {
    program_->storages_.push_back(s);
    return static_cast<int64_t>(program_->storages_.size()) - 1;
  }

  // Pass 1: which slots each instruction reads and writes, and when each slot
  // is last read.
  void AssignSlots() {
    int64_t parameter_leaves = 0;
    std::unordered_map<const Instruction*, int64_t> parameter_base;
    for (const Instruction* p : c_.parameters()) {
      parameter_base[p] = parameter_leaves;
      parameter_leaves += static_cast<int64_t>(p->shape().Leaves().size());
    }
    const auto& instructions = c_.instructions();
    // Broadcasts of a scalar whose every user reads it as a scalar are never
    // materialized (AcceptsScalarBroadcast): their slot is the scalar's.
    std::unordered_map<const Instruction*, bool> scalar_view;
    for (const auto& owned : instructions) {
      if (IsScalarBroadcast(*owned) && owned.get() != c_.root()) scalar_view[owned.get()] = true;
    }
    for (const auto& owned : instructions) {
      for (int64_t k = 0; k < owned->operand_count(); ++k) {
        auto it = scalar_view.find(owned->operand(k));
        if (it != scalar_view.end() && !AcceptsScalarBroadcast(*owned, k)) it->second = false;
      }
    }
    for (size_t i = 0; i < instructions.size(); ++i) {
      const Instruction* inst = instructions[i].get();
      std::vector<int64_t>& out = leaves_[inst];
      std::vector<int64_t> operand_slots;
      // A get-tuple-element reads nothing: its users read the one element's
      // slots. Counting it as a use of every element kept all loop state
      // alive past its last real read (no in-place update after any later
      // get-tuple-element of the state).
      const bool view_only = inst->opcode() == Opcode::kGetTupleElement;
      for (const Instruction* op : inst->operands()) {
        for (int64_t s : leaves_.at(op)) {
          operand_slots.push_back(s);
          if (!view_only) last_use_[s] = std::max<int64_t>(last_use_[s], static_cast<int64_t>(i));
        }
      }
      switch (inst->opcode()) {
        case Opcode::kParameter: {
          auto shapes = inst->shape().Leaves();
          for (size_t k = 0; k < shapes.size(); ++k) {
            int64_t s = NewSlot(shapes[k].byte_size());
            program_->slot_storage_[s] =
                NewStorage({parameter_kind_, shapes[k].byte_size(),
                            parameter_base[inst] + static_cast<int64_t>(k)});
            out.push_back(s);
          }
          continue;
        }
        case Opcode::kConstant: {
          int64_t s = NewSlot(inst->literal.size_bytes());
          Storage st{StorageKind::kConstant, inst->literal.size_bytes()};
          st.constant = inst->literal.data();
          program_->slot_storage_[s] = NewStorage(st);
          out.push_back(s);
          continue;
        }
        case Opcode::kTuple:
        case Opcode::kReshape:
        case Opcode::kOptimizationBarrier:
          out = operand_slots;
          continue;
        case Opcode::kBroadcast:
          if (scalar_view.count(inst) && scalar_view.at(inst)) {
            out = operand_slots;
            continue;
          }
          break;
        case Opcode::kAddDependency:  // its first operand's slots: the token only orders
          out = leaves_.at(inst->operand(0));
          continue;
        case Opcode::kAllGatherStart:
        case Opcode::kAllGatherDone:
        case Opcode::kAllReduceDone: {
          // An asynchronous pair. all-gather-start's value is (its operand,
          // the gathered result): the operand's own slot, which its -done
          // reads, so it lives until the data has moved, and a slot the
          // step writes. A -done's value is the start's result, already
          // there: its step only waits.
          Step step;
          step.inst = inst;
          step.operand_slots = operand_slots;
          if (inst->opcode() == Opcode::kAllGatherStart) {
            out = {operand_slots.at(0), NewSlot(inst->shape().tuple_shape(1).byte_size())};
            step.output_slots = {out[1]};
          } else {
            const auto& started = leaves_.at(inst->operand(0));
            out = inst->opcode() == Opcode::kAllGatherDone ? std::vector<int64_t>{started.at(1)}
                                                           : started;
          }
          step_position_.push_back(static_cast<int64_t>(i));
          program_->steps_.push_back(std::move(step));
          continue;
        }
        case Opcode::kGetTupleElement: {
          const Shape& t = inst->operand(0)->shape();
          int64_t begin = LeafOffset(t, inst->tuple_index);
          int64_t count = static_cast<int64_t>(t.tuple_shape(inst->tuple_index).Leaves().size());
          const auto& src = leaves_.at(inst->operand(0));
          out.assign(src.begin() + begin, src.begin() + begin + count);
          continue;
        }
        default:
          break;
      }
      for (const Shape& leaf : inst->shape().Leaves()) out.push_back(NewSlot(leaf.byte_size()));
      Step step;
      step.inst = inst;
      step.operand_slots = operand_slots;
      step.output_slots = out;
      step_position_.push_back(static_cast<int64_t>(i));
      program_->steps_.push_back(std::move(step));
    }
    end_ = static_cast<int64_t>(instructions.size());
    program_->root_slots_ = leaves_.at(c_.root());
    for (int64_t s : program_->root_slots_) last_use_[s] = end_;
  }

  // Where each view's readers keep its address: their indices in
  // Frame::operands (laid out step by step, as Bind lays them out).
  void FindViewReaders() {
    std::unordered_map<int64_t, Step*> view_of;  // slot -> its view step
    size_t flat = 0;
    for (Step& step : program_->steps_) {
      for (int64_t slot : step.operand_slots) {
        auto it = view_of.find(slot);
        if (it != view_of.end()) it->second->view_readers.push_back(flat);
        ++flat;
      }
      if (step.view) view_of[step.output_slots[0]] = &step;
    }
  }

  // Whether loop fusion step `source` reads its operand `i` element by
  // element from a view of exactly the block dynamic-update-slice `update`
  // writes (the same start slots, the update's dims).
  bool ReadsTheBlockElementwise(const Step& source, size_t i, const Step& update) const {
    const Instruction& fusion = *source.inst;
    const int64_t slot = source.operand_slots[i];
    if (fusion.opcode() != Opcode::kFusion ||
        source.operand_slots.size() != static_cast<size_t>(fusion.operand_count()) ||
        !view_slots_.count(slot) || !FusionReadsElementwise(fusion, static_cast<int64_t>(i))) {
      return false;
    }
    for (const Step& view : program_->steps_) {
      if (!view.view || view.output_slots[0] != slot) continue;
      if (view.inst->dynamic_slice_sizes != update.inst->operand(1)->shape().dims() ||
          view.operand_slots.size() != update.operand_slots.size() - 1) {
        return false;
      }
      for (size_t d = 1; d < view.operand_slots.size(); ++d) {
        if (view.operand_slots[d] != update.operand_slots[d + 1]) return false;
      }
      return true;
    }
    return false;
  }

  // Where each in-place dynamic-update-slice may have its update computed
  // in place (Step::places): the update is a result of a kernel step
  // (P) in storage of its own (an arena value, not a result), the block it
  // goes to is contiguous (unit leading dims, one dim cut, whole dims after),
  // its start indices are known before P runs, and nothing but the update
  // itself reads or writes the updated operand's storage from P on. That
  // storage then lives as long as the update's value is read.
  void PlaceUpdates() {
    auto& storages = program_->storages_;
    const auto& slot_storage = program_->slot_storage_;
    auto& steps = program_->steps_;
    std::unordered_map<int64_t, size_t> producer;  // slot -> the step writing it
    std::vector<size_t> operand_begin, output_begin;
    size_t operands = 0, outputs = 0;
    for (size_t k = 0; k < steps.size(); ++k) {
      for (int64_t slot : steps[k].output_slots) producer[slot] = k;
      operand_begin.push_back(operands);
      output_begin.push_back(outputs);
      operands += steps[k].operand_slots.size();
      outputs += steps[k].output_slots.size();
    }
    auto root = [&](int64_t slot) {
      const auto& roots = program_->root_slots_;
      return std::find(roots.begin(), roots.end(), slot) != roots.end();
    };
    for (size_t d = 0; d < steps.size(); ++d) {
      const Step& update = steps[d];
      const Instruction& inst = *update.inst;
      if (inst.opcode() != Opcode::kDynamicUpdateSlice || !inst.shape().is_array()) continue;
      const int64_t target = slot_storage[update.operand_slots[0]];
      if (slot_storage[update.output_slots[0]] != target) continue;  // not in place
      const int64_t u = update.operand_slots[1];
      auto it = producer.find(u);
      if (it == producer.end() || root(u) || view_slots_.count(u) ||
          storages[slot_storage[u]].kind != StorageKind::kArena) {
        continue;
      }
      const size_t p = it->second;
      Step& source = steps[p];
      if (!source.kernel || source.view) continue;
      bool placed_already = false;
      for (const Placement& other : source.places) placed_already |= other.slot == u;
      if (placed_already) continue;
      // The block: unit leading dims, then one dim cut, then whole dims.
      const std::vector<int64_t>& dims = inst.shape().dims();
      const std::vector<int64_t>& sizes = inst.operand(1)->shape().dims();
      size_t at = 0;
      while (at < dims.size() && sizes[at] == 1) ++at;
      if (at < dims.size()) ++at;
      bool contiguous = true;
      for (; at < dims.size(); ++at) contiguous = contiguous && sizes[at] == dims[at];
      if (!contiguous) continue;
      // The starts are computed before P.
      bool starts_known = true;
      for (size_t i = 2; i < update.operand_slots.size(); ++i) {
        auto found = producer.find(update.operand_slots[i]);
        starts_known = starts_known && (found == producer.end() || found->second < p);
      }
      // From P to the update nothing reads or writes the operand's storage,
      // and after it nothing writes there (the update's readers may come
      // later). P itself may read the very block it writes, as a view read
      // element by element (a loop fusion updating a layer's weights: each
      // block of outputs is written after that block's inputs are read).
      bool alone = starts_known;
      for (size_t k = p; alone && k < steps.size(); ++k) {
        if (k == d) continue;
        for (int64_t slot : steps[k].output_slots) alone = alone && slot_storage[slot] != target;
        if (k > d) continue;
        for (size_t i = 0; i < steps[k].operand_slots.size(); ++i) {
          const int64_t slot = steps[k].operand_slots[i];
          alone = alone && (slot_storage[slot] != target ||
                            (k == p && ReadsTheBlockElementwise(source, i, update)));
        }
      }
      if (!alone) continue;
      Storage& block = storages[target];
      if (block.kind == StorageKind::kArena) block.last = std::max(block.last, last_use_[u]);
      Placement place;
      place.update = static_cast<int64_t>(d);
      place.slot = u;
      for (size_t j = 0; j < source.output_slots.size(); ++j) {
        if (source.output_slots[j] == u) place.output = output_begin[p] + j;
      }
      for (size_t k = p + 1; k < steps.size(); ++k) {
        for (size_t i = 0; i < steps[k].operand_slots.size(); ++i) {
          if (steps[k].operand_slots[i] == u) place.readers.push_back(operand_begin[k] + i);
        }
      }
      source.places.push_back(std::move(place));
      ++program_->placed_updates_;
    }
  }

  // Whether nothing writes `slot`'s bytes while the program runs: a
  // parameter of the entry, a constant, or loop state the body passes
  // through unchanged (and is not a view into other state).
  bool ReadOnlyWhileRunning(int64_t slot) const {
    const Storage& st = program_->storages_.at(program_->slot_storage_[slot]);
    if (st.kind == StorageKind::kParameter || st.kind == StorageKind::kConstant) return true;
    return st.kind == StorageKind::kLoopState &&
           st.index < static_cast<int64_t>(program_->root_slots_.size()) &&
           program_->root_slots_[st.index] == slot && !view_slots_.count(slot);
  }

  // Whether loop state in slot `in` stays unwritten while a view of it in
  // slot `out` is read: every reader of the view comes before the last
  // reader of `in`, and only that last reader (taking the storage over in
  // place: the body's update of the same weights, slice by slice) or a
  // kernel placed into it later (PlaceUpdates: nothing may read the storage
  // between that kernel and the update) can write there.
  bool UnwrittenWhileViewed(int64_t in, int64_t out) const {
    const Storage& st = program_->storages_.at(program_->slot_storage_[in]);
    return st.kind == StorageKind::kLoopState && !view_slots_.count(in) &&
           last_use_[out] < last_use_[in];
  }

  // Whether a dynamic-slice step reads a contiguous block (unit slices of
  // leading dims, then one dim cut, then whole dims) of a leaf nothing
  // writes while the program runs: a parameter of the entry, a constant, or
  // loop state the body passes through unchanged. Its result must not be a
  // result of the program (those get bytes of their own).
  bool IsView(const Step& step) const {
    const Instruction& inst = *step.inst;
    if (inst.opcode() != Opcode::kDynamicSlice || !inst.shape().is_array()) return false;
    const int64_t out = step.output_slots[0], in = step.operand_slots[0];
    for (int64_t r : program_->root_slots_) {
      if (r == out) return false;
    }
    if (!ReadOnlyWhileRunning(in) && !UnwrittenWhileViewed(in, out)) return false;
    const std::vector<int64_t>& dims = inst.operand(0)->shape().dims();
    const std::vector<int64_t>& sizes = inst.dynamic_slice_sizes;
    size_t d = 0;
    while (d < dims.size() && sizes[d] == 1) ++d;
    if (d < dims.size()) ++d;  // the one dim cut anywhere
    for (; d < dims.size(); ++d) {
      if (sizes[d] != dims[d]) return false;
    }
    return true;
  }

  // Whether state element j of a while may keep its initial value's bytes:
  // nothing writes them while the program runs (IsView's rule), the body
  // hands the element on unchanged and the condition never reads it. Then
  // the loop reads the stacked weights it scans in place instead of copying
  // them into its state.
  bool PassesThroughReadOnly(const Step& step, size_t j) const {
    const Instruction& loop = *step.inst;
    const Shape& state = loop.shape();
    if (state.tuple_size() != static_cast<int64_t>(step.output_slots.size())) return false;
    const int64_t k = static_cast<int64_t>(j);
    if (!state.tuple_shape(k).is_array()) return false;
    // (A view's slot shares its operand's storage at an offset: the state
    // would alias the operand's start.)
    const int64_t in = step.operand_slots[j];
    if (!ReadOnlyWhileRunning(in) || view_slots_.count(in)) return false;
    const hlo::Computation& condition = *loop.called[0];
    const hlo::Computation& body = *loop.called[1];
    for (const auto& inst : condition.instructions()) {
      if (inst->opcode() == Opcode::kGetTupleElement && inst->tuple_index == k) return false;
    }
    const Instruction* root = body.root();
    if (root->opcode() != Opcode::kTuple) return false;
    const Instruction* passed = root->operand(k);
    return passed->opcode() == Opcode::kGetTupleElement && passed->tuple_index == k &&
           passed->operand(0)->opcode() == Opcode::kParameter;
  }

  bool Writable(int64_t storage) const {
    StorageKind k = program_->storages_[storage].kind;
    return k == StorageKind::kArena || k == StorageKind::kLoopState;
  }

  // Pass 2: give every step's outputs a storage, reusing a dying operand's
  // when the kernel allows it; build kernels and while sub-programs.
  void AssignStorages() {
    auto& storages = program_->storages_;
    auto& slot_storage = program_->slot_storage_;
    for (size_t k = 0; k < program_->steps_.size(); ++k) {
      Step& step = program_->steps_[k];
      const Instruction& inst = *step.inst;
      int64_t pos = step_position_[k];
      std::vector<int64_t> claimed;
      // Whether `out_slot` may take `in_slot`'s storage as far as lives and
      // sizes go: checked before the costlier question of whether the op
      // reads that operand elementwise (a fusion of many parameters).
      auto reusable = [&](int64_t in_slot, int64_t out_slot) {
        int64_t st = slot_storage[in_slot];
        return last_use_[in_slot] == pos && Writable(st) && !view_slots_.count(in_slot) &&
               storages[st].size == slot_size_[out_slot] &&
               std::find(claimed.begin(), claimed.end(), st) == claimed.end();
      };
      auto try_reuse = [&](int64_t in_slot, int64_t out_slot) {
        if (!reusable(in_slot, out_slot)) return false;
        int64_t st = slot_storage[in_slot];
        claimed.push_back(st);
        slot_storage[out_slot] = st;
        ++program_->in_place_updates_;
        return true;
      };
      if (IsView(step)) {  // its operand's storage, at an offset set at run time
        step.view = true;
        slot_storage[step.output_slots[0]] = slot_storage[step.operand_slots[0]];
        view_slots_.insert(step.output_slots[0]);
        continue;
      }
      if (inst.opcode() == Opcode::kWhile) {
        for (size_t j = 0; j < step.output_slots.size(); ++j) {
          if (PassesThroughReadOnly(step, j)) {
            slot_storage[step.output_slots[j]] = slot_storage[step.operand_slots[j]];
            continue;
          }
          try_reuse(step.operand_slots[j], step.output_slots[j]);
        }
      } else if (inst.opcode() == Opcode::kFusion && step.output_slots.size() > 1) {
        // A multi-output fusion writes a block's outputs after reading all
        // of it: each output may take a dying operand it reads elementwise.
        const std::vector<Shape> leaves = inst.shape().Leaves();
        const bool same_dims = FusionOutputShape(inst).has_value();
        const std::vector<bool> elementwise = FusionElementwiseOperands(inst);
        for (size_t j = 0; j < step.output_slots.size(); ++j) {
          const int64_t out_slot = step.output_slots[j];
          for (int64_t i = 0; same_dims && i < inst.operand_count(); ++i) {
            const Shape& in = inst.operand(i)->shape();
            if (in.is_array() && in.byte_size() == leaves.at(j).byte_size() &&
                reusable(leaves_.at(inst.operand(i))[0], out_slot) && elementwise[i] &&
                try_reuse(leaves_.at(inst.operand(i))[0], out_slot)) {
              break;
            }
          }
        }
      } else if (step.output_slots.size() == 1) {
        // Window writers (dynamic-update-slice, scatter) read their other
        // operands while writing: never over storage one of those shares.
        bool window =
            inst.opcode() == Opcode::kDynamicUpdateSlice || inst.opcode() == Opcode::kScatter;
        for (int64_t i = 0; i < inst.operand_count(); ++i) {
          if (!inst.operand(i)->shape().is_array()) continue;
          int64_t in_slot = leaves_.at(inst.operand(i))[0];
          if (!reusable(in_slot, step.output_slots[0]) || !CanRunInPlace(inst, i)) continue;
          bool shared = false;
          for (int64_t j = 0; window && j < inst.operand_count(); ++j) {
            for (int64_t other : leaves_.at(inst.operand(j))) {
              shared = shared || (j != i && slot_storage[other] == slot_storage[in_slot]);
            }
          }
          if (!shared && try_reuse(in_slot, step.output_slots[0])) break;
        }
      }
      for (int64_t s : step.output_slots) {
        if (slot_storage[s] < 0) {
          Storage st{StorageKind::kArena, slot_size_[s]};
          st.first = st.last = pos;  // even an unused value is written at pos
          slot_storage[s] = NewStorage(st);
        }
      }
      int64_t scratch = 0;
      if (inst.opcode() == Opcode::kWhile) {
        scratch = PlanWhile(step);
      } else {
        runtime::KernelInfo info = runtime::MakeKernel(
            inst, pool_, [this](const hlo::Computation& called) -> std::shared_ptr<const Program> {
              return PlanProgram(called, StorageKind::kParameter, false, pool_);
            });
        step.kernel = std::move(info.run);
        scratch = info.scratch_bytes;
      }
      if (scratch > 0) {
        Storage st{StorageKind::kArena, scratch};
        st.first = st.last = pos;
        scratch_storage_.push_back({k, NewStorage(st)});
      }
    }
    // Live ranges: a storage lives from its first definition to its last read.
    for (size_t s = 0; s < slot_storage.size(); ++s) {
      Storage& st = storages[slot_storage[s]];
      if (st.kind == StorageKind::kArena) st.last = std::max(st.last, last_use_[s]);
    }
    if (root_is_output_) {
      program_->root_needs_copy_.assign(program_->root_slots_.size(), true);
      program_->root_first_write_.assign(program_->root_slots_.size(), -1);
      program_->root_writer_elementwise_.assign(program_->root_slots_.size(), false);
      program_->root_carried_parameter_.assign(program_->root_slots_.size(), -1);
      for (size_t k = 0; k < program_->root_slots_.size(); ++k) {
        Storage& st = storages[slot_storage[program_->root_slots_[k]]];
        if (st.kind == StorageKind::kArena) {  // first use of this storage as a result
          st.kind = StorageKind::kOutput;
          st.index = static_cast<int64_t>(k);
          program_->root_needs_copy_[k] = false;
          program_->root_first_write_[k] = st.first;
          // An elementwise op reads each element before writing it: it may
          // write into the very parameter it reads last.
          const Instruction& writer = *c_.instructions()[st.first];
          // (A fusion: every operand the result's size is read elementwise.)
          bool fusion_elementwise =
              writer.opcode() == Opcode::kFusion && FusionOutputShape(writer).has_value();
          const std::vector<Shape> leaves =
              fusion_elementwise ? writer.shape().Leaves() : std::vector<Shape>{};
          const std::vector<bool> reads_elementwise =
              fusion_elementwise ? FusionElementwiseOperands(writer) : std::vector<bool>{};
          for (int64_t i = 0; fusion_elementwise && i < writer.operand_count(); ++i) {
            bool output_sized = false;
            for (const Shape& leaf : leaves)
              output_sized =
                  output_sized || writer.operand(i)->shape().byte_size() == leaf.byte_size();
            fusion_elementwise = !output_sized || reads_elementwise[i];
          }
          program_->root_carried_parameter_[k] =
              CarriedParameter(st.first, slot_storage[program_->root_slots_[k]]);
          program_->root_writer_elementwise_[k] = hlo::IsElementwiseUnary(writer.opcode()) ||
                                                  hlo::IsElementwiseBinary(writer.opcode()) ||
                                                  writer.opcode() == Opcode::kSelect ||
                                                  fusion_elementwise;
        }
      }
      for (size_t s = 0; s < slot_storage.size(); ++s) {
        const Storage& st = storages[slot_storage[s]];
        if (st.kind != StorageKind::kParameter) continue;
        auto& last = program_->parameter_last_read_;
        if (last.size() <= static_cast<size_t>(st.index)) last.resize(st.index + 1, -1);
        last[st.index] = std::max(last[st.index], last_use_[s]);
      }
    }
  }

  // The parameter leaf a while at `position` carries into `storage` (one of
  // its state elements): the element starts as that parameter and no other
  // element does. A donated parameter's bytes may then be the element's
  // (the loop updates its weights in place). -1 otherwise.
  int64_t CarriedParameter(int64_t position, int64_t storage) const {
    const auto& slot_storage = program_->slot_storage_;
    for (size_t k = 0; k < program_->steps_.size(); ++k) {
      const Step& step = program_->steps_[k];
      if (step_position_[k] != position || step.inst->opcode() != Opcode::kWhile) continue;
      int64_t carried = -1;
      for (size_t j = 0; j < step.output_slots.size(); ++j) {
        if (slot_storage[step.output_slots[j]] == storage)
          carried = slot_storage[step.operand_slots[j]];
      }
      if (carried < 0 || program_->storages_[carried].kind != StorageKind::kParameter) return -1;
      int64_t readers = 0;
      for (int64_t slot : step.operand_slots) readers += slot_storage[slot] == carried ? 1 : 0;
      return readers == 1 ? program_->storages_[carried].index : -1;
    }
    return -1;
  }

  // Compiles condition and body; returns the scratch the loop needs.
  int64_t PlanWhile(Step& step) {
    const Instruction& inst = *step.inst;
    step.condition = PlanProgram(*inst.called[0], StorageKind::kParameter, false, pool_);
    step.body = PlanProgram(*inst.called[1], StorageKind::kLoopState, false, pool_);
    program_->in_place_updates_ +=
        step.body->in_place_updates() + step.condition->in_place_updates();
    program_->placed_updates_ += step.body->placed_updates() + step.condition->placed_updates();
    int64_t body = AlignUp(step.body->arena_bytes());
    step.condition_offset = body;
    step.swap_offset = body + AlignUp(step.condition->arena_bytes());
    int64_t swap = 0;
    for (size_t i = 0; i < step.body->root_slots().size(); ++i) {
      const Storage& st = step.body->storage_of(step.body->root_slots()[i]);
      if (st.kind == StorageKind::kLoopState && st.index != static_cast<int64_t>(i)) {
        swap += AlignUp(st.size);
      }
    }
    return step.swap_offset + swap;
  }

  // Pass 3: arena offsets, largest first, each at the lowest offset that no
  // storage alive at the same time occupies.
  void PlaceArena() {
    auto& storages = program_->storages_;
    std::vector<int64_t> order;
    for (size_t i = 0; i < storages.size(); ++i) {
      if (storages[i].kind == StorageKind::kArena) order.push_back(static_cast<int64_t>(i));
    }
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      if (storages[a].size != storages[b].size) return storages[a].size > storages[b].size;
      return a < b;
    });
    std::vector<int64_t> placed;
    int64_t arena = 0;
    for (int64_t id : order) {
      Storage& st = storages[id];
      std::vector<std::pair<int64_t, int64_t>> busy;  // [offset, end) of overlapping lives
      for (int64_t other : placed) {
        const Storage& o = storages[other];
        if (o.first <= st.last && st.first <= o.last)
          busy.push_back({o.offset, o.offset + AlignUp(o.size)});
      }
      std::sort(busy.begin(), busy.end());
      int64_t offset = 0;
      for (auto [begin, end] : busy) {
        if (offset + AlignUp(st.size) <= begin) break;
        offset = std::max(offset, end);
      }
      st.offset = offset;
      arena = std::max(arena, offset + AlignUp(st.size));
      placed.push_back(id);
    }
    for (auto [step, storage] : scratch_storage_)
      program_->steps_[step].scratch_offset = storages[storage].offset;
    program_->arena_bytes_ = arena;
  }

  const hlo::Computation& c_;
  StorageKind parameter_kind_;
  bool root_is_output_;
  runtime::ThreadPool& pool_;
  std::unique_ptr<Program> program_;
  std::unordered_map<const Instruction*, std::vector<int64_t>> leaves_;
  std::unordered_set<int64_t> view_slots_;  // results of view steps
  std::vector<int64_t> slot_size_, last_use_, step_position_;
  std::vector<std::pair<size_t, int64_t>> scratch_storage_;
  int64_t end_ = 0;
};

std::unique_ptr<Program> PlanProgram(const hlo::Computation& computation,
                                     StorageKind parameter_kind, bool root_is_output,
                                     runtime::ThreadPool& pool) {
  return Planner(computation, parameter_kind, root_is_output, pool).Plan();
}

}  // namespace strata::compiler
