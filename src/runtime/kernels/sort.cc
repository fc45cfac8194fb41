// sort: every operand permuted along one dimension by the order a comparator
// gives (XLA's sort). Each row along that dimension gets a permutation from
// a stable merge sort, then every operand's row is gathered through it.
//
// The merge sort is strata's own rather than std::stable_sort: a comparator
// from HLO text need not be a strict weak order (a plain LT over NaNs is
// not), and libstdc++'s sorts may then read outside the range. This one
// never does: any comparator gives some permutation, and a strict weak order
// gives the stable one. A comparator that is one compare of one operand's
// two parameters (what strata's and JAX's sorts emit) runs natively over a
// copy of that operand's keys; any other runs compiled, once per comparison.
#include <algorithm>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "kernels/elementwise_ops.h"
#include "kernels/kernels.h"
#include "strata/hlo/literal.h"

namespace strata::runtime {
namespace {

using hlo::Comparison;
using hlo::Opcode;
// This file is built once, baseline (kernels/isa.h).
using STRATA_ISA_NAMESPACE::elementwise::CompareValues;
using STRATA_ISA_NAMESPACE::elementwise::TotalOrderKey;

// Sorts perm[0, n) stably: b goes before a only when before(b, a). `tmp`
// holds n more entries. Never reads outside either array.
template <typename Before>
void MergeSort(int64_t* perm, int64_t* tmp, int64_t n, const Before& before) {
  constexpr int64_t kRun = 16;
  for (int64_t start = 0; start < n; start += kRun) {
    const int64_t end = std::min(n, start + kRun);
    for (int64_t i = start + 1; i < end; ++i) {
      const int64_t v = perm[i];
      int64_t j = i;
      for (; j > start && before(v, perm[j - 1]); --j) perm[j] = perm[j - 1];
      perm[j] = v;
    }
  }
  int64_t* src = perm;
  int64_t* dst = tmp;
  for (int64_t width = kRun; width < n; width *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * width) {
      const int64_t mid = std::min(n, lo + width), hi = std::min(n, lo + 2 * width);
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) dst[k++] = before(src[j], src[i]) ? src[j++] : src[i++];
      while (i < mid) dst[k++] = src[i++];
      while (j < hi) dst[k++] = src[j++];
    }
    std::swap(src, dst);
  }
  if (src != perm) std::memcpy(perm, src, n * sizeof(int64_t));
}

// The comparator as "compare(lhs, rhs) of one operand's two parameters".
struct NativeOrder {
  int64_t operand = 0;
  Comparison direction = Comparison::kLt;  // "a before b" is compare(a_key, b_key, direction)
  bool total_order = false;
};

std::optional<NativeOrder> FindNativeOrder(const hlo::Computation& c) {
  const hlo::Instruction* root = c.root();
  if (!root || root->opcode() != Opcode::kCompare) return std::nullopt;
  const hlo::Instruction* a = root->operand(0);
  const hlo::Instruction* b = root->operand(1);
  if (a->opcode() != Opcode::kParameter || b->opcode() != Opcode::kParameter) return std::nullopt;
  const int64_t pa = a->parameter_number, pb = b->parameter_number;
  if (pa / 2 != pb / 2 || pa == pb) return std::nullopt;
  NativeOrder order{pa / 2, root->direction,
                    root->comparison_type == hlo::ComparisonType::kTotalOrder};
  if (pa % 2 == 1) {  // compare(rhs, lhs): the mirrored direction
    switch (order.direction) {
      case Comparison::kLt:
        order.direction = Comparison::kGt;
        break;
      case Comparison::kLe:
        order.direction = Comparison::kGe;
        break;
      case Comparison::kGt:
        order.direction = Comparison::kLt;
        break;
      case Comparison::kGe:
        order.direction = Comparison::kLe;
        break;
      default:
        break;
    }
  }
  return order;
}

// Where row r's element k of an operand lies, in elements: rows are the
// positions outside the sort dimension.
struct Rows {
  int64_t outer = 1, n = 1, inner = 1;
  int64_t count() const { return outer * inner; }
  int64_t At(int64_t row, int64_t k) const { return ((row / inner) * n + k) * inner + row % inner; }
};

// out[row k] = in[row perm[k]] for one operand of `size`-byte elements.
void GatherRow(const Rows& rows, int64_t row, const int64_t* perm, int64_t size, const uint8_t* in,
               uint8_t* out) {
  auto gather = [&](auto tag) {
    using E = decltype(tag);
    const E* x = reinterpret_cast<const E*>(in);
    E* y = reinterpret_cast<E*>(out);
    for (int64_t k = 0; k < rows.n; ++k) y[rows.At(row, k)] = x[rows.At(row, perm[k])];
  };
  switch (size) {
    case 1:
      return gather(uint8_t{});
    case 2:
      return gather(uint16_t{});
    case 4:
      return gather(uint32_t{});
    case 8:
      return gather(uint64_t{});
    default:
      return gather(Element16{});
  }
}

// The row's keys as K (a total-order integer, the float, or the integer).
template <typename K>
void LoadKeys(const Rows& rows, int64_t row, DType dtype, bool total_order, const uint8_t* in,
              K* keys) {
  DispatchAnyType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = reinterpret_cast<const T*>(in);
    for (int64_t k = 0; k < rows.n; ++k) {
      const T v = x[rows.At(row, k)];
      if constexpr (std::is_same_v<T, HalfBits>) {  // f16 / bf16: ordered as their f32 value
        const auto bits = static_cast<uint16_t>(v);
        const float f = dtype == DType::kF16 ? hlo::HalfToFloat(bits) : hlo::BFloat16ToFloat(bits);
        if constexpr (std::is_same_v<K, int32_t>) keys[k] = TotalOrderKey(f);
        if constexpr (std::is_same_v<K, float>) keys[k] = f;
      } else if constexpr (std::is_floating_point_v<T>) {
        if (total_order) {
          if constexpr (std::is_same_v<K, decltype(TotalOrderKey(v))>) keys[k] = TotalOrderKey(v);
        } else if constexpr (std::is_same_v<K, T>) {
          keys[k] = v;
        }
      } else if constexpr (std::is_same_v<K, T>) {
        keys[k] = v;
      }
    }
  });
}

// `tasks` x (`bytes_per_element` x n + `extra`) bytes of scratch, or an
// Error naming the instruction when rows of n are too long to sort in
// memory (a fuzzed f32[10^18] still compiles).
int64_t SortScratch(const hlo::Instruction& inst, int64_t n, int64_t bytes_per_element,
                    int64_t extra, int64_t tasks) {
  constexpr int64_t kLimit = int64_t{1} << 40;
  auto align = [](int64_t b) { return (b + 63) / 64 * 64; };
  if (n > kLimit / bytes_per_element || extra > kLimit) {
    Fail("[runtime] {} ({}): rows of {} elements need more than 2^40 bytes of scratch to sort",
         hlo::OpcodeName(inst.opcode()), inst.name(), n);
  }
  const int64_t per_task = align(n * bytes_per_element) + align(extra);
  if (per_task > kLimit / tasks) {
    Fail("[runtime] {} ({}): rows of {} elements need more than 2^40 bytes of scratch to sort",
         hlo::OpcodeName(inst.opcode()), inst.name(), n);
  }
  return per_task;
}

// Per-task scratch: the permutation, the merge buffer and the key copy.
struct TaskScratch {
  int64_t* perm;
  int64_t* tmp;
  uint8_t* keys;
  uint8_t* arena;
};

}  // namespace

KernelInfo MakeSortKernel(const hlo::Instruction& inst, ThreadPool& pool_ref,
                          const std::function<ScalarFunction()>& compile_comparator) {
  ThreadPool* pool = &pool_ref;
  const Shape& first = inst.operand(0)->shape();
  const int64_t d = inst.dimensions.at(0);
  Rows rows;
  rows.n = first.dim(d);
  for (int64_t i = 0; i < d; ++i) rows.outer *= first.dim(i);
  for (int64_t i = d + 1; i < first.rank(); ++i) rows.inner *= first.dim(i);
  const int64_t operands = inst.operand_count();
  std::vector<int64_t> sizes;
  for (int64_t k = 0; k < operands; ++k)
    sizes.push_back(DTypeSize(inst.operand(k)->shape().dtype()));

  std::optional<NativeOrder> native = FindNativeOrder(*inst.called[0]);
  // Complex keys (whose one compare can only be EQ / NE) go through the
  // compiled comparator.
  if (native && IsComplex(inst.operand(native->operand)->shape().dtype())) native.reset();
  const ScalarFunction comparator = native ? ScalarFunction{} : compile_comparator();
  const DType key_type = native ? inst.operand(native->operand)->shape().dtype() : DType::kF32;
  const bool half = key_type == DType::kF16 || key_type == DType::kBF16;
  // The key copy holds 8-byte keys at most (f64, s64, u64 or their total order).
  const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(rows.count(), pool->num_threads()));
  auto align = [](int64_t b) { return (b + 63) / 64 * 64; };
  // The permutation, the merge buffer and the key copy: 8 bytes an element each.
  const bool nothing = rows.count() == 0 || rows.n == 0;
  const int64_t per_task =
      nothing ? 0 : SortScratch(inst, rows.n, 24, comparator.arena_bytes, tasks);
  const int64_t scratch = tasks * per_task;

  // Within a task's scratch: the permutation, the merge buffer and the key
  // copy (8 bytes an element each), then the comparator's arena.
  auto task_scratch = [=](uint8_t* base, int64_t t) {
    uint8_t* p = base + t * per_task;
    return TaskScratch{reinterpret_cast<int64_t*>(p), reinterpret_cast<int64_t*>(p + 8 * rows.n),
                       p + 16 * rows.n, p + align(24 * rows.n)};
  };
  auto finish_row = [=](const KernelArgs& a, int64_t row, const int64_t* perm) {
    for (int64_t k = 0; k < operands; ++k)
      GatherRow(rows, row, perm, sizes[k], a.operands[k], a.outputs[k]);
  };
  auto for_each_task = [=](const KernelArgs& a, auto&& run_rows) {
    if (scratch == 0) return;
    pool->ParallelFor(tasks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) {
        run_rows(task_scratch(a.scratch, t), rows.count() * t / tasks,
                 rows.count() * (t + 1) / tasks);
      }
    });
  };

  if (native) {
    const NativeOrder order = *native;
    // Keys compared as the total-order integer, or as themselves.
    auto make = [&](auto key_tag) -> Kernel {
      using K = decltype(key_tag);
      return [=](const KernelArgs& a) {
        for_each_task(a, [&](const TaskScratch& s, int64_t first_row, int64_t end_row) {
          K* keys = reinterpret_cast<K*>(s.keys);
          auto before = [&](int64_t x, int64_t y) {
            return CompareValues(order.direction, keys[x], keys[y]);
          };
          for (int64_t row = first_row; row < end_row; ++row) {
            LoadKeys(rows, row, key_type, order.total_order, a.operands[order.operand], keys);
            for (int64_t k = 0; k < rows.n; ++k) s.perm[k] = k;
            MergeSort(s.perm, s.tmp, rows.n, before);
            finish_row(a, row, s.perm);
          }
        });
      };
    };
    const bool total = order.total_order;
    Kernel run;
    if (half) {
      run = total ? make(int32_t{}) : make(float{});
    } else if (key_type == DType::kF32) {
      run = total ? make(int32_t{}) : make(float{});
    } else if (key_type == DType::kF64) {
      run = total ? make(int64_t{}) : make(double{});
    } else {
      run = DispatchAnyType(key_type, [&](auto tag) -> Kernel {
        using T = typename decltype(tag)::type;
        return make(T{});
      });
    }
    return {run, scratch};
  }

  return {[=](const KernelArgs& a) {
            for_each_task(a, [&](const TaskScratch& s, int64_t first_row, int64_t end_row) {
              ScalarCall call = comparator.bind(s.arena);
              std::vector<const uint8_t*> args(2 * operands);
              bool result = false;
              uint8_t* results[1] = {reinterpret_cast<uint8_t*>(&result)};
              int64_t row = first_row;
              auto before = [&](int64_t x, int64_t y) {
                for (int64_t k = 0; k < operands; ++k) {
                  args[2 * k] = a.operands[k] + rows.At(row, x) * sizes[k];
                  args[2 * k + 1] = a.operands[k] + rows.At(row, y) * sizes[k];
                }
                call(args.data(), results);
                return result;
              };
              for (; row < end_row; ++row) {
                for (int64_t k = 0; k < rows.n; ++k) s.perm[k] = k;
                MergeSort(s.perm, s.tmp, rows.n, before);
                finish_row(a, row, s.perm);
              }
            });
          },
          scratch};
}

// topk: each row's positions in a strict total order (the key, in total
// order for floats, then the position), of which std::partial_sort puts the
// first k in front: O(n log k) a row, and no comparator of the user's to
// trust.
KernelInfo MakeTopKKernel(const hlo::Instruction& inst, ThreadPool& pool_ref) {
  ThreadPool* pool = &pool_ref;
  const Shape& x = inst.operand(0)->shape();
  const int64_t n = x.dims().back(), k = inst.k;
  const int64_t rows = n == 0 ? 0 : x.num_elements() / n;
  const DType dtype = x.dtype();
  const bool largest = inst.largest;
  const int64_t size = DTypeSize(dtype);
  const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(rows, pool->num_threads()));
  // Positions, then 8-byte keys.
  const int64_t per_task = rows == 0 ? 0 : SortScratch(inst, n, 16, 0, tasks);
  auto make = [&](auto key_tag) -> Kernel {
    using K = decltype(key_tag);
    return [=](const KernelArgs& a) {
      if (rows == 0 || k == 0) return;
      pool->ParallelFor(tasks, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t t = lo; t < hi; ++t) {
          int64_t* positions = reinterpret_cast<int64_t*>(a.scratch + t * per_task);
          K* keys = reinterpret_cast<K*>(a.scratch + t * per_task + n * 8);
          const Rows one_row{rows, n, 1};
          for (int64_t row = rows * t / tasks; row < rows * (t + 1) / tasks; ++row) {
            LoadKeys(one_row, row, dtype, /*total_order=*/true, a.operands[0], keys);
            for (int64_t i = 0; i < n; ++i) positions[i] = i;
            auto first = [&](int64_t p, int64_t q) {
              if (keys[p] != keys[q]) return largest ? keys[p] > keys[q] : keys[p] < keys[q];
              return p < q;
            };
            std::partial_sort(positions, positions + k, positions + n, first);
            const uint8_t* in = a.operands[0] + row * n * size;
            uint8_t* values = a.outputs[0] + row * k * size;
            int32_t* indices = reinterpret_cast<int32_t*>(a.outputs[1]) + row * k;
            for (int64_t j = 0; j < k; ++j) {
              std::memcpy(values + j * size, in + positions[j] * size, size);
              indices[j] = static_cast<int32_t>(positions[j]);
            }
          }
        }
      });
    };
  };
  Kernel run;
  if (dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16) {
    run = make(int32_t{});
  } else if (dtype == DType::kF64) {
    run = make(int64_t{});
  } else {
    run = DispatchAnyType(dtype, [&](auto tag) -> Kernel {
      using T = typename decltype(tag)::type;
      return make(T{});
    });
  }
  return {run, rows == 0 ? 0 : tasks * per_task};
}

}  // namespace strata::runtime
