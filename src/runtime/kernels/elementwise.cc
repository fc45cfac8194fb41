// Elementwise kernels: unary and binary math, compare, select, clamp,
// is-finite. Semantics follow XLA, including the integer corner cases that
// would trap in C++ (division by zero, INT_MIN / -1, oversized shifts).
// Compiled once per instruction set (isa.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/elementwise_ops.h"
#include "kernels/isa_kernels.h"

STRATA_ISA_BEGIN
namespace strata::runtime::STRATA_ISA_NAMESPACE {

// exp over floats, vectorized (the file is built with -fno-trapping-math so
// the clamps become blends): x = k ln2 + r with |r| <= ln2 / 2 (ln2 in two
// parts, Cody and Waite), e^r by a degree-6 polynomial (Cephes' expf
// coefficients, about 1 ulp), times 2^k built in the exponent bits. Inputs
// outside [-87, 88] (where 2^k leaves the normal range), NaN and infinities
// are redone with std::exp. 3.3x glibc's expf here.
void ExpFloats(const float* x, float* out, int64_t n) {
  constexpr float kLo = -87.0f, kHi = 88.0f, kZero = -104.0f;  // e^-104 < 2^-150
  constexpr int64_t kChunk = 512;
  float in[kChunk];  // the inputs, kept for the second pass (out may alias x)
  for (int64_t base = 0; base < n; base += kChunk) {
    const int64_t m = std::min(kChunk, n - base);
    std::memcpy(in, x + base, m * sizeof(float));
    float* o = out + base;
    int outside = 0;
    for (int64_t i = 0; i < m; ++i) {
      const float xi = in[i];
      float v = xi >= kLo ? xi : kLo;  // NaN too: k stays an integer
      v = v > kHi ? kHi : v;
      // Below -104 (and -inf, as masked scores are) e^x rounds to 0 here;
      // other clamped inputs and NaN take the second pass.
      const bool zero = xi <= kZero;
      outside |= (v != xi) & !zero;
      // Round to nearest by the 1.5 * 2^23 trick (|v log2 e| < 2^22).
      float k = (v * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
      float r = v - k * 0.693359375f;
      r = r - k * -2.12194440e-4f;
      float p = 1.9875691500e-4f;
      p = p * r + 1.3981999507e-3f;
      p = p * r + 8.3334519073e-3f;
      p = p * r + 4.1665795894e-2f;
      p = p * r + 1.6666665459e-1f;
      p = p * r + 5.0000001201e-1f;
      p = p * r * r + r + 1.0f;
      int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
      float scale;
      std::memcpy(&scale, &bits, sizeof scale);
      o[i] = zero ? 0.0f : p * scale;
    }
    if (outside) {
      for (int64_t i = 0; i < m; ++i) {
        if (!(in[i] >= kLo && in[i] <= kHi) && !(in[i] <= kZero)) o[i] = std::exp(in[i]);
      }
    }
  }
}

namespace {

using hlo::Opcode;
using namespace elementwise;  // NOLINT: the scalar op semantics

// Which operands are broadcasts of one value (read as a scalar: only their
// first element, read before anything is written, since the output may
// share the broadcast's storage).
struct ScalarOperands {
  bool a = false, b = false;
};

// The hot arithmetic ops get loops the compiler can vectorize.
template <typename T, typename F>
void MapBinary(const T* a, const T* b, T* out, int64_t n, F f, ThreadPool& pool,
               ScalarOperands scalar = {}) {
  if (n == 0) return;
  if (scalar.a && scalar.b) {
    const T v = f(a[0], b[0]);
    pool.ParallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) out[i] = v;
    });
  } else if (scalar.a) {
    const T av = a[0];
    pool.ParallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) out[i] = f(av, b[i]);
    });
  } else if (scalar.b) {
    const T bv = b[0];
    pool.ParallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) out[i] = f(a[i], bv);
    });
  } else {
    pool.ParallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) out[i] = f(a[i], b[i]);
    });
  }
}

// Each op in a loop of its own (its row's kernel inlined), which the
// compiler vectorizes where the kernel allows.
template <typename T>
void RunBinary(Opcode op, const T* a, const T* b, T* out, int64_t n, ThreadPool& pool,
               ScalarOperands scalar) {
  WithBinaryKernel<T>(op, [&](auto kernel) { MapBinary(a, b, out, n, kernel, pool, scalar); });
}

}  // namespace

namespace elementwise {
void NoKernelFor(Opcode op, const char* element) {
  Fail("[runtime] {} has no kernel for {} (its row in the opcode list does not take them)",
       hlo::OpcodeName(op), element);
}
}  // namespace elementwise

void LogisticFloats(const float* x, float* out, int64_t n) {  // 1 / (1 + e^-x)
  for (int64_t i = 0; i < n; ++i) out[i] = -x[i];
  ExpFloats(out, out, n);
  for (int64_t i = 0; i < n; ++i) out[i] = 1.0f / (1.0f + out[i]);
}

// tanh over floats, vectorized. |x| < 0.625: x + x^3 P(x^2) (Cephes'
// tanhf coefficients), no cancellation; otherwise 1 - 2 / (e^{2|x|} + 1)
// through ExpFloats, with |x| capped at 9 (tanh rounds to 1 beyond); both
// on |x|, and the sign put back. NaN stays NaN (it takes the second branch, and
// ExpFloats passes it to std::exp); -0 stays -0.
void TanhFloats(const float* x, float* out, int64_t n) {
  constexpr int64_t kChunk = 512;
  float in[kChunk], e[kChunk];  // the inputs (out may alias x), e^{2|x|}
  for (int64_t base = 0; base < n; base += kChunk) {
    const int64_t m = std::min(kChunk, n - base);
    std::memcpy(in, x + base, m * sizeof(float));
    for (int64_t i = 0; i < m; ++i) {
      float a = std::fabs(in[i]);
      a = a > 9.0f ? 9.0f : a;
      e[i] = 2.0f * a;
    }
    ExpFloats(e, e, m);
    float* o = out + base;
    for (int64_t i = 0; i < m; ++i) {
      const float xi = in[i], a = std::fabs(xi), z = xi * xi;
      float p = -5.70498872745e-3f;
      p = p * z + 2.06390887954e-2f;
      p = p * z - 5.37397155531e-2f;
      p = p * z + 1.33314422036e-1f;
      p = p * z - 3.33332819422e-1f;
      const float small = p * z * a + a, large = 1.0f - 2.0f / (e[i] + 1.0f);
      o[i] = std::copysign(a < 0.625f ? small : large, xi);
    }
  }
}

namespace {

template <typename T>
void RunUnary(Opcode op, const T* x, T* out, int64_t n, ThreadPool& pool) {
  if constexpr (std::is_same_v<T, float>) {
    if (auto* vector = VectorKernelOf(op)) {  // the row's f32 array routine
      pool.ParallelFor(n, kElementwiseGrain / 4,
                       [&](int64_t lo, int64_t hi) { vector(x + lo, out + lo, hi - lo); });
      return;
    }
  }
  WithUnaryKernel<T>(op, [&](auto kernel) {
    pool.ParallelFor(n, kElementwiseGrain / 4, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) out[i] = kernel(x[i]);
    });
  });
}

bool IsHalfType(DType t) { return t == DType::kF16 || t == DType::kBF16; }

}  // namespace

bool IsScalarBroadcast(const hlo::Instruction& inst) {
  return inst.opcode() == Opcode::kBroadcast && inst.operand(0)->shape().is_array() &&
         inst.operand(0)->shape().rank() == 0;
}

bool AcceptsScalarBroadcast(const hlo::Instruction& user, int64_t operand) {
  const Opcode op = user.opcode();
  if (IsHalfType(user.operand(op == Opcode::kSelect ? 1 : 0)->shape().dtype())) return false;
  if (hlo::IsElementwiseBinary(op) || op == Opcode::kCompare) return true;
  return op == Opcode::kSelect && operand >= 1;
}

KernelInfo MakeElementwiseKernel(const hlo::Instruction& inst, ThreadPool& pool_ref) {
  ThreadPool* pool = &pool_ref;
  Opcode op = inst.opcode();
  int64_t n = inst.shape().num_elements();
  DType operand_type = inst.operand(op == Opcode::kSelect ? 1 : 0)->shape().dtype();
  if (IsHalfType(operand_type) && op != Opcode::kSelect) UnsupportedType(inst, operand_type);
  if (hlo::IsElementwiseUnary(op)) {
    return {DispatchArithmeticType(inst, operand_type, [&](auto tag) -> Kernel {
      using T = typename decltype(tag)::type;
      return [=](const KernelArgs& a) {
        RunUnary<T>(op, reinterpret_cast<const T*>(a.operands[0]),
                    reinterpret_cast<T*>(a.outputs[0]), n, *pool);
      };
    })};
  }
  if (hlo::IsElementwiseBinary(op)) {
    ScalarOperands scalar{IsScalarBroadcast(*inst.operand(0)), IsScalarBroadcast(*inst.operand(1))};
    return {DispatchArithmeticType(inst, operand_type, [&](auto tag) -> Kernel {
      using T = typename decltype(tag)::type;
      return [=](const KernelArgs& a) {
        RunBinary<T>(op, reinterpret_cast<const T*>(a.operands[0]),
                     reinterpret_cast<const T*>(a.operands[1]), reinterpret_cast<T*>(a.outputs[0]),
                     n, *pool, scalar);
      };
    })};
  }
  switch (op) {
    case Opcode::kCompare: {
      hlo::Comparison c = inst.direction;
      const bool total_order = inst.comparison_type == hlo::ComparisonType::kTotalOrder;
      const int64_t sx = IsScalarBroadcast(*inst.operand(0)) ? 0 : 1;
      const int64_t sy = IsScalarBroadcast(*inst.operand(1)) ? 0 : 1;
      return {DispatchAnyType(operand_type, [&](auto tag) -> Kernel {
        using T = typename decltype(tag)::type;
        return [=](const KernelArgs& a) {
          auto* x = reinterpret_cast<const T*>(a.operands[0]);
          auto* y = reinterpret_cast<const T*>(a.operands[1]);
          auto* out = reinterpret_cast<bool*>(a.outputs[0]);
          pool->ParallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
            if (total_order) {
              for (int64_t i = lo; i < hi; ++i) out[i] = CompareTotalOrder(c, x[i * sx], y[i * sy]);
            } else {
              for (int64_t i = lo; i < hi; ++i) out[i] = CompareValues(c, x[i * sx], y[i * sy]);
            }
          });
        };
      })};
    }
    case Opcode::kIsFinite:
      return {DispatchAnyType(operand_type, [&](auto tag) -> Kernel {
        using T = typename decltype(tag)::type;
        return [=](const KernelArgs& a) {
          auto* x = reinterpret_cast<const T*>(a.operands[0]);
          auto* out = reinterpret_cast<bool*>(a.outputs[0]);
          for (int64_t i = 0; i < n; ++i) {
            if constexpr (kIsFloat<T>)
              out[i] = std::isfinite(x[i]);
            else
              out[i] = true;
          }
        };
      })};
    case Opcode::kSelect: {
      bool scalar_pred = inst.operand(0)->shape().is_scalar();
      int64_t size = DTypeSize(operand_type);
      const bool scalar_x = IsScalarBroadcast(*inst.operand(1));
      const bool scalar_y = IsScalarBroadcast(*inst.operand(2));
      return {DispatchAnyType(operand_type, [&](auto tag) -> Kernel {
        using T = typename decltype(tag)::type;
        return [=](const KernelArgs& a) {
          auto* p = reinterpret_cast<const bool*>(a.operands[0]);
          auto* x = reinterpret_cast<const T*>(a.operands[1]);
          auto* y = reinterpret_cast<const T*>(a.operands[2]);
          auto* out = reinterpret_cast<T*>(a.outputs[0]);
          if (n == 0) return;
          const T xv = x[0], yv = y[0];  // before the output (maybe x or y) is written
          if (scalar_pred) {
            const bool take_x = p[0];
            const T* src = take_x ? x : y;
            if ((take_x && scalar_x) || (!take_x && scalar_y)) {
              const T v = take_x ? xv : yv;
              std::fill_n(out, n, v);
            } else if (src != out) {
              std::memcpy(out, src, n * size);
            }
            return;
          }
          pool->ParallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
            if (scalar_x && scalar_y) {
              for (int64_t i = lo; i < hi; ++i) out[i] = p[i] ? xv : yv;
            } else if (scalar_x) {
              for (int64_t i = lo; i < hi; ++i) out[i] = p[i] ? xv : y[i];
            } else if (scalar_y) {
              for (int64_t i = lo; i < hi; ++i) out[i] = p[i] ? x[i] : yv;
            } else {
              for (int64_t i = lo; i < hi; ++i) out[i] = p[i] ? x[i] : y[i];
            }
          });
        };
      })};
    }
    case Opcode::kClamp: {
      bool scalar_lo = inst.operand(0)->shape().is_scalar();
      bool scalar_hi = inst.operand(2)->shape().is_scalar();
      return {DispatchArithmeticType(inst, operand_type, [&](auto tag) -> Kernel {
        using T = typename decltype(tag)::type;
        return [=](const KernelArgs& a) {
          auto* lo_p = reinterpret_cast<const T*>(a.operands[0]);
          auto* x = reinterpret_cast<const T*>(a.operands[1]);
          auto* hi_p = reinterpret_cast<const T*>(a.operands[2]);
          auto* out = reinterpret_cast<T*>(a.outputs[0]);
          BinaryOp<T> max_op{Opcode::kMaximum}, min_op{Opcode::kMinimum};
          pool->ParallelFor(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) {
              T lo = lo_p[scalar_lo ? 0 : i], hi = hi_p[scalar_hi ? 0 : i];
              if constexpr (std::is_same_v<T, bool>) {  // false < true; max / min have no pred row
                out[i] = (x[i] || lo) && hi;
              } else {
                out[i] = min_op(max_op(x[i], lo), hi);
              }
            }
          });
        };
      })};
    }
    default:
      break;
  }
  Fail("[runtime] no elementwise kernel for {}", hlo::OpcodeName(op));
}

}  // namespace strata::runtime::STRATA_ISA_NAMESPACE
STRATA_ISA_END
