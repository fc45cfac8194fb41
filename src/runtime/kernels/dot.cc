// dot: each operand is viewed as a batch of row-major matrices, transposing
// into scratch only when its dimension order fits neither GEMM layout. f32
// and f64 go to strata's GEMM (gemm.h), bf16 x bf16 -> f32 to its bf16 GEMM;
// integers use a blocked loop.
//
// The pool splits the work: by batch when there are at least as many
// matrices as threads, else each matrix into one piece per thread along
// whichever of its rows or columns re-packs less (a row piece packs all of
// B, a column piece all of A).
#include <algorithm>
#include <complex>
#include <cstring>
#include <numeric>

#include "kernels/gemm.h"
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

// C[m,n] = sum_k A[m,k] B[k,n] for integer types, wrapping on overflow as
// XLA does (through the unsigned type: no signed overflow in C++).
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
                           for (int64_t j = 0; j < n; ++j)
                             row[j] = WrappingAdd(row[j], WrappingMultiply(av, b[j * k + p]));
                         } else {
                           const T* brow = b + p * n;
                           for (int64_t j = 0; j < n; ++j)
                             row[j] = WrappingAdd(row[j], WrappingMultiply(av, brow[j]));
                         }
                       }
                     }
                   });
}

// The GEMMs a dot runs, with their operand and result types; each writes
// the piece of C at `offset` (elements) of its output.
template <typename T>
struct TypedGemm {
  using In = T;
  T* c;
  void operator()(int64_t m, int64_t n, int64_t k, MatrixView<const T> a, MatrixView<const T> b,
                  int64_t offset, int64_t ldc) const {
    Gemm<T>(m, n, k, a, b, c + offset, ldc);
  }
};
// Into f32 `c`; with `narrow`, rounded to bf16 into narrow, `c` then only
// the f32 sums' scratch (null where GemmBf16NeedsSums says none are needed).
struct Bf16Gemm {
  using In = uint16_t;
  float* c = nullptr;
  uint16_t* narrow = nullptr;
  void operator()(int64_t m, int64_t n, int64_t k, MatrixView<const uint16_t> a,
                  MatrixView<const uint16_t> b, int64_t offset, int64_t ldc) const {
    GemmBf16(m, n, k, a, b, c ? c + offset : nullptr, ldc, narrow ? narrow + offset : nullptr, ldc);
  }
};

}  // namespace

KernelInfo MakeDotKernel(const hlo::Instruction& inst, ThreadPool& pool_ref) {
  ThreadPool* pool = &pool_ref;
  const Shape& lhs = inst.operand(0)->shape();
  const Shape& rhs = inst.operand(1)->shape();
  const hlo::DotDims& d = inst.dot;
  DType dtype = lhs.dtype();
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
  // The GEMM's pieces: by batch when there are enough matrices, else each
  // matrix cut along the side that re-packs less; edges on `tile`'s.
  auto pieces = [=](const KernelArgs& a, const GemmTile& tile, auto gemm) {
    using In = typename decltype(gemm)::In;
    const In* A = reinterpret_cast<const In*>(Prepare(lv, a.operands[0], a.scratch, es));
    const In* B = reinterpret_cast<const In*>(Prepare(rv, a.operands[1], a.scratch + lv.bytes, es));
    int64_t threads = pool ? pool->num_threads() : 1;
    bool worth_splitting = 2.0 * m * n * k * batch >= 1 << 17;
    int64_t parts = batch >= threads || !worth_splitting ? 1 : threads;
    bool split_rows = n <= m;  // re-pack the smaller operand
    int64_t extent = split_rows ? m : n, align = split_rows ? tile.rows : tile.columns;
    int64_t step = ((extent + parts - 1) / parts + align - 1) / align * align;
    auto piece = [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {
        int64_t b = p / parts, s0 = (p % parts) * step, s1 = std::min(extent, s0 + step);
        if (s0 >= s1) continue;
        int64_t r0 = split_rows ? s0 : 0, r1 = split_rows ? s1 : m;
        int64_t c0 = split_rows ? 0 : s0, c1 = split_rows ? n : s1;
        // A is [m, k] (or stored [k, m]); B is [k, n] (or stored [n, k]).
        MatrixView<const In> av{A + b * m * k, lv.transposed ? 1 : k, lv.transposed ? m : 1};
        MatrixView<const In> bv{B + b * k * n, rv.transposed ? 1 : n, rv.transposed ? k : 1};
        av.data += r0 * av.row_stride;
        bv.data += c0 * bv.col_stride;
        gemm(r1 - r0, c1 - c0, k, av, bv, b * m * n + r0 * n + c0, n);
      }
    };
    if (pool && batch * parts > 1 && worth_splitting) {
      pool->ParallelFor(batch * parts, 1, piece);
    } else {
      piece(0, batch * parts);
    }
  };
  if (dtype == DType::kBF16) {  // bf16 x bf16 -> f32 or bf16 (what the widening pass leaves)
    const DType result = inst.shape().dtype();
    if (rhs.dtype() != DType::kBF16 || (result != DType::kF32 && result != DType::kBF16))
      UnsupportedType(inst, dtype);
    // A bf16 result: rounded as the GEMM stores it, the f32 sums in scratch
    // only where the GEMM needs them (k over several blocks, no vdpbf16ps).
    const bool narrow = result == DType::kBF16;
    const int64_t sums_bytes = narrow && k > 0 && GemmBf16NeedsSums(k) ? batch * m * n * 4 : 0;
    Kernel run = [=](const KernelArgs& a) {
      if (out_bytes == 0) return;
      if (k == 0) {
        std::memset(a.outputs[0], 0, out_bytes);
        return;
      }
      if (!narrow) {
        pieces(a, GemmBf16Tile(), Bf16Gemm{reinterpret_cast<float*>(a.outputs[0])});
        return;
      }
      float* sums =
          sums_bytes ? reinterpret_cast<float*>(a.scratch + lv.bytes + rv.bytes) : nullptr;
      pieces(a, GemmBf16Tile(), Bf16Gemm{sums, reinterpret_cast<uint16_t*>(a.outputs[0])});
    };
    return {run, lv.bytes + rv.bytes + sums_bytes};
  }
  if (dtype == DType::kF16 || dtype == DType::kPred) UnsupportedType(inst, dtype);
  auto make = [&](auto tag) -> Kernel {
    using T = typename decltype(tag)::type;
    return [=](const KernelArgs& a) {
      if (out_bytes == 0) return;  // M, N or batch is 0; sgemm rejects zero leading dimensions
      T* C = reinterpret_cast<T*>(a.outputs[0]);
      if (k == 0) {
        std::memset(static_cast<void*>(C), 0, out_bytes);
        return;
      }
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        pieces(a, GemmTileFor<T>(), TypedGemm<T>{C});
        return;
      }
      const T* A = reinterpret_cast<const T*>(Prepare(lv, a.operands[0], a.scratch, es));
      const T* B = reinterpret_cast<const T*>(Prepare(rv, a.operands[1], a.scratch + lv.bytes, es));
      for (int64_t b = 0; b < batch; ++b) {
        const T* Ab = A + b * m * k;
        const T* Bb = B + b * k * n;
        T* Cb = C + b * m * n;
        if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, HalfBits>) {
          Fail("[runtime] unsupported dot type");
        } else {
          LoopGemm<T>(m, n, k, Ab, lv.transposed, Bb, rv.transposed, Cb, *pool);
        }
      }
    };
  };
  Kernel run = dtype == DType::kC64    ? make(TypeTag<std::complex<float>>{})
               : dtype == DType::kC128 ? make(TypeTag<std::complex<double>>{})
                                       : DispatchAnyType(dtype, make);
  return {run, lv.bytes + rv.bytes};
}

}  // namespace strata::runtime
