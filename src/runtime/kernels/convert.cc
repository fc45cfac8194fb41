// convert and bitcast-convert. Float-to-integer conversion saturates and
// maps NaN to 0 (C++ leaves it undefined); f16 and bf16 go through f32
// (rounded to odd on the way, so the result is rounded once).
#include <algorithm>
#include <bit>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/gemm.h"
#include "kernels/kernels.h"
#include "strata/hlo/literal.h"

namespace strata::runtime {
namespace {

// Loads element i of `dtype` as a wide value of type W.
template <typename W, typename T>
W Widen(T v, DType dtype) {
  if constexpr (std::is_same_v<T, HalfBits>) {
    const auto bits = static_cast<uint16_t>(v);
    float f = dtype == DType::kF16 ? hlo::HalfToFloat(bits) : hlo::BFloat16ToFloat(bits);
    return static_cast<W>(f);
  } else {
    return static_cast<W>(v);
  }
}

// f16 and bf16 are rounded from f32. Reaching f32 by rounding to odd keeps a
// sticky bit, so the second rounding is still correct; rounding to nearest
// twice is not (f64 1 + 2^-11 + 2^-40 -> f32 1 + 2^-11 -> f16 1, not 1 + 2^-10).
template <typename From>
float ToFloatRoundingToOdd(From v) {
  if constexpr (std::is_floating_point_v<From>) {
    float f = static_cast<float>(v);
    if (std::isnan(v) || static_cast<From>(f) == v) return f;
    if (std::abs(static_cast<From>(f)) > std::abs(v)) f = std::nextafter(f, 0.0f);  // truncate
    return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
  } else {  // integers: keep 24 significant bits, OR-ing the dropped ones into the last
    bool negative = false;
    if constexpr (std::is_signed_v<From>) negative = v < 0;
    uint64_t magnitude =
        negative ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    int shift = std::max(0, static_cast<int>(std::bit_width(magnitude)) - 24);
    uint64_t kept = (magnitude >> shift) | ((magnitude & ((uint64_t{1} << shift) - 1)) != 0);
    float f = std::ldexp(static_cast<float>(kept), shift);
    return negative ? -f : f;
  }
}

template <typename To, typename From>
To ConvertOne(From v, DType from, DType to) {
  if constexpr (std::is_same_v<To, bool>) {
    if constexpr (std::is_same_v<From, HalfBits>) return Widen<float>(v, from) != 0.0f;
    return v != From(0);
  } else if constexpr (std::is_same_v<To, HalfBits>) {
    float f;
    if constexpr (std::is_same_v<From, HalfBits>) {
      f = Widen<float>(v, from);  // exact
    } else {
      f = ToFloatRoundingToOdd(v);
    }
    return HalfBits{to == DType::kF16 ? hlo::FloatToHalf(f) : hlo::FloatToBFloat16(f)};
  } else if constexpr (std::is_floating_point_v<To>) {
    return Widen<To>(v, from);
  } else {
    // Integer target: from floating point saturate, NaN -> 0.
    if constexpr (std::is_floating_point_v<From> || std::is_same_v<From, HalfBits>) {
      double d = Widen<double>(v, from);
      if (std::isnan(d)) return 0;
      if (d <= static_cast<double>(std::numeric_limits<To>::min()))
        return std::numeric_limits<To>::min();
      if (d >= static_cast<double>(std::numeric_limits<To>::max()))
        return std::numeric_limits<To>::max();
      return static_cast<To>(d);
    } else {
      return static_cast<To>(v);  // integer to integer wraps (two's complement)
    }
  }
}

// To a complex type: from a real or integer one the imaginary part is 0;
// between c64 and c128 each part converts (complex to real is rejected by
// the shape rule, as in XLA: real() and imag() say which part).
template <typename Part>
Kernel ToComplex(DType from, int64_t n, ThreadPool* pool) {
  using C = std::complex<Part>;
  if (IsComplex(from)) {
    return [=](const KernelArgs& a) {
      auto* out = reinterpret_cast<C*>(a.outputs[0]);
      auto convert = [&](auto* x) {
        pool->ParallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i)
            out[i] = C(static_cast<Part>(x[i].real()), static_cast<Part>(x[i].imag()));
        });
      };
      if (from == DType::kC64) {
        convert(reinterpret_cast<const std::complex<float>*>(a.operands[0]));
      } else {
        convert(reinterpret_cast<const std::complex<double>*>(a.operands[0]));
      }
    };
  }
  return DispatchAnyType(from, [&](auto from_tag) -> Kernel {
    using From = typename decltype(from_tag)::type;
    return [=](const KernelArgs& a) {
      auto* x = reinterpret_cast<const From*>(a.operands[0]);
      auto* out = reinterpret_cast<C*>(a.outputs[0]);
      pool->ParallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i)
          out[i] = C(ConvertOne<Part, From>(x[i], from, DTypeOf<Part>::value));
      });
    };
  });
}

}  // namespace

KernelInfo MakeConvertKernel(const hlo::Instruction& inst, ThreadPool& pool_ref) {
  ThreadPool* pool = &pool_ref;
  int64_t n = inst.shape().num_elements();
  DType from = inst.operand(0)->shape().dtype();
  DType to = inst.shape().dtype();
  if (inst.opcode() == hlo::Opcode::kBitcastConvert || from == to) {
    int64_t bytes = inst.shape().byte_size();
    return {[=](const KernelArgs& a) {
      if (a.outputs[0] != a.operands[0]) std::memcpy(a.outputs[0], a.operands[0], bytes);
    }};
  }
  // f32 <-> bf16, the mixed-precision step's converts: vectorized loops
  // (the same rounding as hlo::FloatToBFloat16).
  if (from == DType::kF32 && to == DType::kBF16) {
    return {[=](const KernelArgs& a) {
      auto* x = reinterpret_cast<const float*>(a.operands[0]);
      auto* out = reinterpret_cast<uint16_t*>(a.outputs[0]);
      pool->ParallelFor(n, kElementwiseGrain,
                        [&](int64_t lo, int64_t hi) { NarrowToBf16(x + lo, out + lo, hi - lo); });
    }};
  }
  if (from == DType::kBF16 && to == DType::kF32) {
    return {[=](const KernelArgs& a) {
      auto* x = reinterpret_cast<const uint16_t*>(a.operands[0]);
      auto* out = reinterpret_cast<uint32_t*>(a.outputs[0]);
      pool->ParallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) out[i] = static_cast<uint32_t>(x[i]) << 16;
      });
    }};
  }
  if (to == DType::kC64) return {ToComplex<float>(from, n, pool)};
  if (to == DType::kC128) return {ToComplex<double>(from, n, pool)};
  if (IsComplex(from)) UnsupportedType(inst, from);
  return {DispatchAnyType(from, [&](auto from_tag) -> Kernel {
    using From = typename decltype(from_tag)::type;
    return DispatchAnyType(to, [&](auto to_tag) -> Kernel {
      using To = typename decltype(to_tag)::type;
      return [=](const KernelArgs& a) {
        auto* x = reinterpret_cast<const From*>(a.operands[0]);
        auto* out = reinterpret_cast<To*>(a.outputs[0]);
        pool->ParallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) out[i] = ConvertOne<To, From>(x[i], from, to);
        });
      };
    });
  })};
}

}  // namespace strata::runtime
