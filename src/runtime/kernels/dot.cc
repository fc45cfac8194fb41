// dot: each operand is viewed as a batch of row-major matrices, transposing
// into scratch only when its dimension order fits neither GEMM layout. f32
// goes to oneDNN's sgemm (fastest measured here, see bench/RESULTS.md); f64
// and integers use a blocked loop.
//
// oneDNN's sgemm runs single-threaded: strata's pool splits the GEMMs (by
// batch, else by rows) and each piece calls sgemm with a one-thread OpenMP
// team. oneDNN's own OpenMP team would spin after every GEMM while the pool
// runs the next kernels: on 2 busy cores that cost up to 2.5x (bench/RESULTS.md).
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "kernels/kernels.h"

namespace strata::runtime {
namespace {

struct OperandView {
  bool transposed = false;         // matrix stored as its transpose
  bool copy = false;               // needs a transposing copy into scratch
  std::vector<int64_t> dims;       // operand dims
  std::vector<int64_t> copy_perm;  // source dim of each copied dim
  int64_t bytes = 0;
};

std::vector<int64_t> Concat(std::initializer_list<const std::vector<int64_t>*> parts) {
  std::vector<int64_t> out;
  for (auto* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

// `direct` is the order that reads as a plain [batch, rows, cols] matrix,
// `swapped` the order that reads as its transpose.
OperandView MakeView(const Shape& shape, const std::vector<int64_t>& direct,
                     const std::vector<int64_t>& swapped) {
  OperandView v;
  v.dims = shape.dims();
  std::vector<int64_t> identity(shape.rank());
  std::iota(identity.begin(), identity.end(), 0);
  if (direct == identity) return v;
  if (swapped == identity) {
    v.transposed = true;
    return v;
  }
  v.copy = true;
  v.copy_perm = direct;
  v.bytes = (shape.byte_size() + 63) / 64 * 64;
  return v;
}

const uint8_t* Prepare(const OperandView& v, const uint8_t* src, uint8_t* scratch, int64_t es) {
  if (!v.copy) return src;
  auto strides = RowMajorStrides(v.dims);
  std::vector<int64_t> out_dims, src_strides;
  for (int64_t p : v.copy_perm) {
    out_dims.push_back(v.dims[p]);
    src_strides.push_back(strides[p]);
  }
  CopyStrided(es, out_dims, src, src_strides, scratch, RowMajorStrides(out_dims), nullptr);
  return scratch;
}

// C[m,n] = sum_k A[m,k] B[k,n] for non-f32 types; A and B are plain row-major.
template <typename T>
void LoopGemm(int64_t m, int64_t n, int64_t k, const T* a, bool ta, const T* b, bool tb, T* c,
              ThreadPool& pool) {
  pool.ParallelFor(m, std::max<int64_t>(1, 4096 / std::max<int64_t>(n * k, 1)),
                   [&](int64_t lo, int64_t hi) {
                     for (int64_t i = lo; i < hi; ++i) {
                       T* row = c + i * n;
                       std::fill_n(row, n, T(0));
                       for (int64_t p = 0; p < k; ++p) {
                         T av = ta ? a[p * m + i] : a[i * k + p];
                         if (tb) {
                           for (int64_t j = 0; j < n; ++j) row[j] += av * b[j * k + p];
                         } else {
                           const T* brow = b + p * n;
                           for (int64_t j = 0; j < n; ++j) row[j] += av * brow[j];
                         }
                       }
                     }
                   });
}

}  // namespace

KernelInfo MakeDotKernel(const hlo::Instruction& inst, ThreadPool& pool_ref) {
  ThreadPool* pool = &pool_ref;
  const Shape& lhs = inst.operand(0)->shape();
  const Shape& rhs = inst.operand(1)->shape();
  const hlo::DotDims& d = inst.dot;
  DType dtype = lhs.dtype();
  if (dtype == DType::kF16 || dtype == DType::kBF16 || dtype == DType::kPred)
    UnsupportedType(inst, dtype);
  auto free_dims = [](const Shape& s, const std::vector<int64_t>& batch,
                      const std::vector<int64_t>& contracting) {
    std::vector<int64_t> free;
    for (int64_t i = 0; i < s.rank(); ++i) {
      if (std::find(batch.begin(), batch.end(), i) == batch.end() &&
          std::find(contracting.begin(), contracting.end(), i) == contracting.end()) {
        free.push_back(i);
      }
    }
    return free;
  };
  auto lhs_free = free_dims(lhs, d.lhs_batch, d.lhs_contracting);
  auto rhs_free = free_dims(rhs, d.rhs_batch, d.rhs_contracting);
  int64_t batch = 1, m = 1, n = 1, k = 1;
  for (int64_t b : d.lhs_batch) batch *= lhs.dim(b);
  for (int64_t f : lhs_free) m *= lhs.dim(f);
  for (int64_t f : rhs_free) n *= rhs.dim(f);
  for (int64_t c : d.lhs_contracting) k *= lhs.dim(c);
  OperandView lv = MakeView(lhs, Concat({&d.lhs_batch, &lhs_free, &d.lhs_contracting}),
                            Concat({&d.lhs_batch, &d.lhs_contracting, &lhs_free}));
  OperandView rv = MakeView(rhs, Concat({&d.rhs_batch, &d.rhs_contracting, &rhs_free}),
                            Concat({&d.rhs_batch, &rhs_free, &d.rhs_contracting}));
  int64_t es = DTypeSize(dtype);
  int64_t out_bytes = inst.shape().byte_size();
  auto run = DispatchAnyType(dtype, [&](auto tag) -> Kernel {
    using T = typename decltype(tag)::type;
    return [=](const KernelArgs& a) {
      if (out_bytes == 0) return;  // M, N or batch is 0; sgemm rejects zero leading dimensions
      const T* A = reinterpret_cast<const T*>(Prepare(lv, a.operands[0], a.scratch, es));
      const T* B = reinterpret_cast<const T*>(Prepare(rv, a.operands[1], a.scratch + lv.bytes, es));
      T* C = reinterpret_cast<T*>(a.outputs[0]);
      if (k == 0) {
        std::memset(C, 0, out_bytes);
        return;
      }
      if constexpr (std::is_same_v<T, float>) {
        // Pieces: (batch, row block); rows split only when batches are fewer
        // than threads, and never below 16 rows per piece.
        int64_t threads = pool ? pool->num_threads() : 1;
        int64_t blocks = batch >= threads ? 1 : std::clamp<int64_t>(m / 16, 1, threads);
        int64_t rows = (m + blocks - 1) / blocks;
        auto piece = [&](int64_t lo, int64_t hi) {
          // This thread's teams only (a per-thread ICV), restored after.
          int saved = omp_get_max_threads();
          omp_set_num_threads(1);
          struct Restore {
            int n;
            ~Restore() { omp_set_num_threads(n); }
          } restore{saved};
          for (int64_t p = lo; p < hi; ++p) {
            int64_t b = p / blocks, r0 = (p % blocks) * rows, r1 = std::min(m, r0 + rows);
            if (r0 >= r1) continue;
            const T* Ab = A + b * m * k + (lv.transposed ? r0 : r0 * k);
            const T* Bb = B + b * k * n;
            T* Cb = C + b * m * n + r0 * n;
            dnnl_status_t status =
                dnnl_sgemm(lv.transposed ? 'T' : 'N', rv.transposed ? 'T' : 'N', r1 - r0, n, k,
                           1.0f, Ab, lv.transposed ? m : k, Bb, rv.transposed ? k : n, 0.0f, Cb, n);
            if (status != dnnl_success)
              Fail("[runtime] dnnl_sgemm failed with status {}", static_cast<int>(status));
          }
        };
        if (pool && batch * blocks > 1 && 2.0 * m * n * k * batch >= 1 << 17) {
          pool->ParallelFor(batch * blocks, 1, piece);
        } else {
          piece(0, batch * blocks);
        }
        return;
      }
      for (int64_t b = 0; b < batch; ++b) {
        const T* Ab = A + b * m * k;
        const T* Bb = B + b * k * n;
        T* Cb = C + b * m * n;
        if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, uint16_t>) {
          Fail("[runtime] unsupported dot type");
        } else {
          LoopGemm<T>(m, n, k, Ab, lv.transposed, Bb, rv.transposed, Cb, *pool);
        }
      }
    };
  });
  return {run, lv.bytes + rv.bytes};
}

}  // namespace strata::runtime
