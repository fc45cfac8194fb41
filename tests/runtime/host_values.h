// Host-side values of every dtype, for references computed by the tests
// themselves: XLA's conversions (integers wrap, floats round to nearest
// even, gradual underflow) written here from the formats, never taken from
// strata. Values are long doubles, whose 64-bit significand holds every
// value of every dtype exactly; an Array holds a buffer's bytes.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "strata/core/dtype.h"
#include "strata/core/shape.h"
#include "strata/hlo/opcode.h"
#include "strata/runtime/device.h"
#include "test_util.h"

namespace strata::runtime::host {

using Index = std::vector<int64_t>;
using Real = long double;
static_assert(std::numeric_limits<Real>::digits >= 64, "Real must hold every s64 and u64");

// Every dtype whose values are real numbers: all but c64 / c128 (two reals
// each, complex_test.cc's) and token (no value, token_test.cc's).
inline std::vector<DType> AllDTypes() {
  std::vector<DType> types;
#define STRATA_HOST_DTYPE(e, name, size) \
  if (!IsComplex(DType::e) && DType::e != DType::kToken) types.push_back(DType::e);
  STRATA_DTYPES(STRATA_HOST_DTYPE)
#undef STRATA_HOST_DTYPE
  return types;
}

inline std::string Name(DType t) { return std::string(DTypeName(t)); }

struct Format {
  int exponent_bits, fraction_bits;
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  Real max() const { return std::ldexp(2 - std::ldexp(Real(1), -fraction_bits), bias()); }
};
inline Format FormatOf(DType t) {
  switch (t) {
    case DType::kF16:
      return {5, 10};
    case DType::kBF16:
      return {8, 7};
    case DType::kF32:
      return {8, 23};
    default:
      return {11, 52};
  }
}

// v rounded to the format: to nearest, ties to even, gradual underflow,
// overflow to infinity.
inline Real RoundTo(Format f, Real v) {
  if (!std::isfinite(v) || v == 0) return v;
  int e;
  std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
  const Real quantum = std::ldexp(Real(1), std::max(e - 1, 1 - f.bias()) - f.fraction_bits);
  const Real rounded = std::nearbyint(v / quantum) * quantum;  // the default mode: ties to even
  return std::fabs(rounded) > f.max() ? std::copysign(Real(INFINITY), v) : rounded;
}

// The bits of an f16 / bf16 value (v already in the format).
inline uint16_t HalfBits(Format f, Real v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const int all_ones = ((1 << f.exponent_bits) - 1) << f.fraction_bits;
  if (std::isnan(v)) return sign | all_ones | (1 << (f.fraction_bits - 1));
  if (std::isinf(v)) return sign | all_ones;
  if (v == 0) return sign;
  int e;
  std::frexp(std::fabs(v), &e);
  const int exponent = std::max(e - 1, 1 - f.bias());  // subnormals: no leading 1
  const auto significand =
      static_cast<int>(std::fabs(v) / std::ldexp(Real(1), exponent - f.fraction_bits));
  return sign | (((exponent + f.bias() - 1) << f.fraction_bits) + significand);
}

inline Real FromHalfBits(Format f, uint16_t bits) {
  const int field = (bits >> f.fraction_bits) & ((1 << f.exponent_bits) - 1);
  const int fraction = bits & ((1 << f.fraction_bits) - 1);
  Real v;
  if (field == (1 << f.exponent_bits) - 1) {
    v = fraction ? Real(NAN) : Real(INFINITY);
  } else if (field == 0) {
    v = std::ldexp(Real(fraction), 1 - f.bias() - f.fraction_bits);
  } else {
    v = std::ldexp(Real(fraction + (1 << f.fraction_bits)), field - f.bias() - f.fraction_bits);
  }
  return bits & 0x8000 ? -v : v;
}

// An f16 / bf16 buffer of `values` (each rounded to the type), and back.
inline Buffer HalfBuffer(DType t, const std::vector<double>& values, std::vector<int64_t> dims) {
  std::vector<uint8_t> bytes;
  for (double v : values) {
    const uint16_t h = HalfBits(FormatOf(t), RoundTo(FormatOf(t), v));
    bytes.push_back(static_cast<uint8_t>(h & 0xFF));
    bytes.push_back(static_cast<uint8_t>(h >> 8));
  }
  return Buffer::FromHost(Shape(t, std::move(dims)), bytes, test::Cpu());
}
inline std::vector<double> HalfValues(const Buffer& b) {
  std::vector<double> out;
  for (int64_t i = 0; i < b.shape().num_elements(); ++i) {
    uint16_t h;
    std::memcpy(&h, b.data() + 2 * i, 2);
    out.push_back(static_cast<double>(FromHalfBits(FormatOf(b.shape().dtype()), h)));
  }
  return out;
}

inline Real Max(DType t) {  // the largest finite value
  if (IsFloating(t)) return FormatOf(t).max();
  const int bits = t == DType::kPred ? 1 : static_cast<int>(DTypeSize(t)) * 8;
  return std::ldexp(Real(1), bits - IsSignedInteger(t)) - 1;
}
inline Real Lowest(DType t) {
  if (IsFloating(t)) return -Max(t);
  return IsSignedInteger(t) ? -Max(t) - 1 : 0;
}

// Two's complement bits of an integer value.
inline uint64_t TwosComplement(Real v) {
  return v < 0 ? uint64_t{0} - static_cast<uint64_t>(-v) : static_cast<uint64_t>(v);
}

// Host data of one buffer, row-major.
struct Array {
  Shape shape;
  std::vector<uint8_t> bytes;
  Array(DType t, Index dims) : shape(t, std::move(dims)), bytes(shape.byte_size()) {}
  DType dtype() const { return shape.dtype(); }
  int64_t size() const { return shape.num_elements(); }
  const uint8_t* at(int64_t i) const { return bytes.data() + i * DTypeSize(dtype()); }
  uint8_t* at(int64_t i) { return bytes.data() + i * DTypeSize(dtype()); }
  const uint8_t* at(const Index& index) const { return at(test::Ravel(index, shape.dims())); }
  uint8_t* at(const Index& index) { return at(test::Ravel(index, shape.dims())); }
  Buffer ToBuffer(const Device* device) const { return Buffer::FromHost(shape, bytes, device); }
};

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline Real Get(const Array& a, int64_t i) {
  const uint8_t* p = a.at(i);
  switch (a.dtype()) {
    case DType::kPred:
      return p[0];
    case DType::kS8:
      return Load<int8_t>(p);
    case DType::kS16:
      return Load<int16_t>(p);
    case DType::kU16:
      return Load<uint16_t>(p);
    case DType::kS32:
      return Load<int32_t>(p);
    case DType::kS64:
      return Load<int64_t>(p);
    case DType::kU8:
      return Load<uint8_t>(p);
    case DType::kU32:
      return Load<uint32_t>(p);
    case DType::kU64:
      return Load<uint64_t>(p);
    case DType::kF32:
      return Load<float>(p);
    case DType::kF64:
      return Load<double>(p);
    default:  // f16, bf16
      return FromHalfBits(FormatOf(a.dtype()), Load<uint16_t>(p));
  }
}
inline Real Get(const Array& a, const Index& index) {
  return Get(a, test::Ravel(index, a.shape.dims()));
}

// Stores v as XLA converts it: pred is v != 0, integers (v an integer) wrap,
// floats round to nearest even.
inline void Set(Array& a, int64_t i, Real v) {
  uint8_t* p = a.at(i);
  const DType t = a.dtype();
  if (t == DType::kPred) {
    p[0] = v != 0;
  } else if (IsInteger(t)) {
    const uint64_t bits = TwosComplement(v);
    std::memcpy(p, &bits, DTypeSize(t));  // little-endian: the low bytes are the wrapped value
  } else if (t == DType::kF32) {
    const float f = static_cast<float>(RoundTo(FormatOf(t), v));
    std::memcpy(p, &f, sizeof f);
  } else if (t == DType::kF64) {
    const double d = static_cast<double>(RoundTo(FormatOf(t), v));
    std::memcpy(p, &d, sizeof d);
  } else {
    const uint16_t bits = HalfBits(FormatOf(t), RoundTo(FormatOf(t), v));
    std::memcpy(p, &bits, sizeof bits);
  }
}

inline Array Tabulate(DType t, Index dims, const std::function<Real(const Index&)>& value_at) {
  Array a(t, std::move(dims));
  for (int64_t i = 0; i < a.size(); ++i) Set(a, i, value_at(test::Unravel(i, a.shape.dims())));
  return a;
}
inline Array Values(DType t, const std::vector<Real>& values) {
  return Tabulate(t, {static_cast<int64_t>(values.size())},
                  [&](const Index& i) { return values[i[0]]; });
}
inline Array Scalar(DType t, Real v) {
  return Tabulate(t, {}, [&](const Index&) { return v; });
}
inline Real Wrap(DType t, Real v) { return Get(Scalar(t, v), 0); }  // integer v wrapped into t

// Whether t holds v exactly.
inline bool Holds(DType t, Real v) {
  if (std::isnan(v)) return IsFloating(t);
  if (IsFloating(t)) return std::isinf(v) || RoundTo(FormatOf(t), v) == v;
  return v == std::trunc(v) && v >= Lowest(t) && v <= Max(t);
}
// The values t holds (-0 only for floats).
inline std::vector<Real> Keep(DType t, std::initializer_list<Real> values) {
  std::vector<Real> kept;
  for (Real v : values) {
    if (Holds(t, v) && !(v == 0 && std::signbit(v) && !IsFloating(t))) kept.push_back(v);
  }
  return kept;
}

// What data movement gives: each element's bytes copied from where
// source(index) points.
inline Array Moved(DType t, Index dims, const std::function<const uint8_t*(const Index&)>& source) {
  Array a(t, std::move(dims));
  for (int64_t i = 0; i < a.size(); ++i) {
    std::memcpy(a.at(i), source(test::Unravel(i, a.shape.dims())), DTypeSize(t));
  }
  return a;
}

// XLA's transpose: result dimension d is operand dimension permutation[d].
inline Array Permuted(const Array& x, const Index& permutation) {
  Index dims, from(permutation.size());
  for (int64_t p : permutation) dims.push_back(x.shape.dim(p));
  return Moved(x.dtype(), dims, [&](const Index& i) {
    for (size_t d = 0; d < i.size(); ++d) from[permutation[d]] = i[d];
    return x.at(from);
  });
}

// ---- XLA's scalar semantics ---------------------------------------------------

// a op b in t: integers wrap, floats round to nearest even, maximum and
// minimum propagate NaN; on pred, maximum is or and minimum is and.
inline Real Apply(hlo::Opcode op, DType t, Real a, Real b) {
  using hlo::Opcode;
  if (t == DType::kPred) {
    return op == Opcode::kAnd || op == Opcode::kMinimum ? (a != 0 && b != 0) : (a != 0 || b != 0);
  }
  const bool integer = IsInteger(t);
  const uint64_t x = integer ? TwosComplement(a) : 0, y = integer ? TwosComplement(b) : 0;
  switch (op) {
    case Opcode::kAdd:
      return integer ? Wrap(t, Real(x + y)) : RoundTo(FormatOf(t), a + b);
    case Opcode::kMultiply:
      return integer ? Wrap(t, Real(x * y)) : RoundTo(FormatOf(t), a * b);
    case Opcode::kMaximum:
      return std::isnan(a) || std::isnan(b) ? Real(NAN) : std::max(a, b);
    case Opcode::kMinimum:
      return std::isnan(a) || std::isnan(b) ? Real(NAN) : std::min(a, b);
    case Opcode::kAnd:
      return Wrap(t, Real(x & y));
    case Opcode::kOr:
      return Wrap(t, Real(x | y));
    default:
      ADD_FAILURE() << "no reference for " << hlo::OpcodeName(op);
      return 0;
  }
}

// convert: to pred is v != 0; float to integer truncates, saturates and
// takes NaN to 0; integer to integer wraps; to a float rounds once.
inline Real ConvertValue(Real v, DType from, DType to) {
  if (to == DType::kPred) return v != 0;
  if (!IsInteger(to)) return RoundTo(FormatOf(to), v);
  if (!IsFloating(from)) return Wrap(to, v);
  if (std::isnan(v)) return 0;
  return std::clamp(std::trunc(v), Lowest(to), Max(to));
}

// The type arithmetic on `t` runs in: f16 and bf16 compute in f32 (XLA's
// CPU backend), each op's result rounded back to the half type once.
inline DType ComputedIn(DType t) { return t == DType::kF16 || t == DType::kBF16 ? DType::kF32 : t; }

// out[b.., i, j] = the sum over p, in order, of lhs[b.., i, p] * rhs[b.., p, j],
// accumulated in ComputedIn(t) and rounded to t at the end.
inline Array MatMul(DType t, const Array& lhs, const Array& rhs, const Index& dims, int64_t k) {
  const int64_t m = dims[dims.size() - 2], n = dims.back();
  const DType wide = ComputedIn(t);
  return Tabulate(t, dims, [&](const Index& o) {
    const int64_t b = test::Ravel(o, dims) / (m * n), i = o[o.size() - 2], j = o.back();
    Real acc = 0;
    for (int64_t p = 0; p < k; ++p) {
      const Real product = Apply(hlo::Opcode::kMultiply, wide, Get(lhs, (b * m + i) * k + p),
                                 Get(rhs, (b * k + p) * n + j));
      acc = Apply(hlo::Opcode::kAdd, wide, acc, product);
    }
    return wide == t ? acc : RoundTo(FormatOf(t), acc);
  });
}

// Philox-4x32-10 (Salmon et al., SC'11), from the paper's round function.
inline std::array<uint32_t, 4> Philox(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += 0x9E3779B9u;
      k[1] += 0xBB67AE85u;
    }
    const uint64_t p0 = uint64_t{0xD2511F53u} * c[0], p1 = uint64_t{0xCD9E8D57u} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
  }
  return c;
}

// ---- comparing --------------------------------------------------------------

inline std::string Show(const Array& a, int64_t i) {
  std::ostringstream os;
  os.precision(21);
  os << Get(a, i) << " (0x" << std::hex;
  for (int64_t b = DTypeSize(a.dtype()) - 1; b >= 0; --b) os << a.at(i)[b] / 16 << a.at(i)[b] % 16;
  return os.str() + ")";
}

// The same bytes element by element; unless bit_exact, any NaN matches any NaN.
inline testing::AssertionResult Matches(const Array& expected, const Buffer& buffer,
                                        bool bit_exact) {
  if (buffer.shape() != expected.shape) {
    return testing::AssertionFailure()
           << "shape " << buffer.shape().ToString() << ", expected " << expected.shape.ToString();
  }
  Array actual = expected;
  std::memcpy(actual.bytes.data(), buffer.data(), actual.bytes.size());
  int64_t bad = 0;
  std::ostringstream report;
  for (int64_t i = 0; i < expected.size(); ++i) {
    if (std::memcmp(expected.at(i), actual.at(i), DTypeSize(expected.dtype())) == 0) continue;
    if (!bit_exact && std::isnan(Get(expected, i)) && std::isnan(Get(actual, i))) continue;
    if (bad++ < 5) {
      report << "\n  [" << i << "] expected " << Show(expected, i) << ", got " << Show(actual, i);
    }
  }
  if (bad == 0) return testing::AssertionSuccess();
  return testing::AssertionFailure()
         << bad << " of " << expected.size() << " elements differ:" << report.str();
}

}  // namespace strata::runtime::host
