#include "strata/hlo/literal.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <limits>

namespace strata::hlo {

Literal::Literal(Shape shape) : shape_(std::move(shape)) {
  STRATA_CHECK(shape_.is_array(), "tuple literals are not supported: {}", shape_.ToString());
  bytes_.assign(shape_.byte_size(), 0);
}

Literal::Literal(Shape shape, std::vector<uint8_t> bytes)
    : shape_(std::move(shape)), bytes_(std::move(bytes)) {
  STRATA_CHECK(shape_.is_array() && static_cast<int64_t>(bytes_.size()) == shape_.byte_size(),
               "literal of shape {} given {} bytes", shape_.ToString(), bytes_.size());
}

Literal Literal::ScalarOf(DType dtype, double value) {
  Literal lit(Shape::Scalar(dtype));
  lit.SetFromDouble(0, value);
  return lit;
}

Literal Literal::IntegerOf(DType dtype, int64_t value) {
  if (!IsInteger(dtype)) return ScalarOf(dtype, static_cast<double>(value));
  Literal lit(Shape::Scalar(dtype));
  // Little-endian: the low DTypeSize bytes of the value are its wrapped form.
  const auto bits = static_cast<uint64_t>(value);
  std::memcpy(lit.bytes_.data(), &bits, static_cast<size_t>(DTypeSize(dtype)));
  return lit;
}

template <typename T>
static T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
static void Store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

double Literal::GetAsDouble(int64_t i) const {
  const uint8_t* p = bytes_.data() + i * DTypeSize(shape_.dtype());
  switch (shape_.dtype()) {
    case DType::kPred:
      return p[0] ? 1.0 : 0.0;
    case DType::kS8:
      return Load<int8_t>(p);
    case DType::kS16:
      return Load<int16_t>(p);
    case DType::kU16:
      return Load<uint16_t>(p);
    case DType::kC64:
    case DType::kC128: {
      const auto [re, im] = GetComplex(i);
      return im == 0 ? re : std::numeric_limits<double>::quiet_NaN();
    }
    case DType::kToken:
      return 0;
    case DType::kS32:
      return Load<int32_t>(p);
    case DType::kS64:
      return static_cast<double>(Load<int64_t>(p));
    case DType::kU8:
      return Load<uint8_t>(p);
    case DType::kU32:
      return Load<uint32_t>(p);
    case DType::kU64:
      return static_cast<double>(Load<uint64_t>(p));
    case DType::kF16:
      return HalfToFloat(Load<uint16_t>(p));
    case DType::kBF16:
      return BFloat16ToFloat(Load<uint16_t>(p));
    case DType::kF32:
      return Load<float>(p);
    case DType::kF64:
      return Load<double>(p);
  }
  return 0;
}

std::pair<double, double> Literal::GetComplex(int64_t i) const {
  STRATA_CHECK(IsComplex(shape_.dtype()), "GetComplex on {}", DTypeName(shape_.dtype()));
  const uint8_t* p = bytes_.data() + i * DTypeSize(shape_.dtype());
  if (shape_.dtype() == DType::kC64) return {Load<float>(p), Load<float>(p + 4)};
  return {Load<double>(p), Load<double>(p + 8)};
}

void Literal::SetComplex(int64_t i, double real, double imaginary) {
  STRATA_CHECK(IsComplex(shape_.dtype()), "SetComplex on {}", DTypeName(shape_.dtype()));
  uint8_t* p = bytes_.data() + i * DTypeSize(shape_.dtype());
  if (shape_.dtype() == DType::kC64) {
    Store<float>(p, static_cast<float>(real));
    Store<float>(p + 4, static_cast<float>(imaginary));
  } else {
    Store<double>(p, real);
    Store<double>(p + 8, imaginary);
  }
}

// Out-of-range values saturate (and NaN becomes 0) instead of being undefined.
template <typename T>
static T SaturatingCast(double v) {
  if (std::isnan(v)) return 0;
  if (v <= static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
  if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

void Literal::SetFromDouble(int64_t i, double v) {
  uint8_t* p = bytes_.data() + i * DTypeSize(shape_.dtype());
  switch (shape_.dtype()) {
    case DType::kPred:
      p[0] = v != 0;
      break;
    case DType::kS8:
      Store<int8_t>(p, SaturatingCast<int8_t>(v));
      break;
    case DType::kS16:
      Store<int16_t>(p, SaturatingCast<int16_t>(v));
      break;
    case DType::kU16:
      Store<uint16_t>(p, SaturatingCast<uint16_t>(v));
      break;
    case DType::kC64:
    case DType::kC128:
      SetComplex(i, v, 0);
      break;
    case DType::kToken:
      break;
    case DType::kS32:
      Store<int32_t>(p, SaturatingCast<int32_t>(v));
      break;
    case DType::kS64:
      Store<int64_t>(p, SaturatingCast<int64_t>(v));
      break;
    case DType::kU8:
      Store<uint8_t>(p, SaturatingCast<uint8_t>(v));
      break;
    case DType::kU32:
      Store<uint32_t>(p, SaturatingCast<uint32_t>(v));
      break;
    case DType::kU64:
      Store<uint64_t>(p, SaturatingCast<uint64_t>(v));
      break;
    case DType::kF16:
      Store<uint16_t>(p, FloatToHalf(static_cast<float>(v)));
      break;
    case DType::kBF16:
      Store<uint16_t>(p, FloatToBFloat16(static_cast<float>(v)));
      break;
    case DType::kF32:
      Store<float>(p, static_cast<float>(v));
      break;
    case DType::kF64:
      Store<double>(p, v);
      break;
  }
}

// Shortest text that reads back to the same value; inf/nan as XLA spells them.
static std::string ElementToString(const Literal& lit, int64_t i) {
  const uint8_t* p = lit.data() + i * DTypeSize(lit.shape().dtype());
  auto floating = [](auto v) -> std::string {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return fmt::format("{}", v);
  };
  switch (lit.shape().dtype()) {
    case DType::kPred:
      return p[0] ? "true" : "false";
    case DType::kS8:
      return fmt::format("{}", Load<int8_t>(p));
    case DType::kS16:
      return fmt::format("{}", Load<int16_t>(p));
    case DType::kU16:
      return fmt::format("{}", Load<uint16_t>(p));
    case DType::kC64:
    case DType::kC128: {
      const auto [re, im] = lit.GetComplex(i);
      if (lit.shape().dtype() == DType::kC64) {
        return fmt::format("({}, {})", floating(static_cast<float>(re)),
                           floating(static_cast<float>(im)));
      }
      return fmt::format("({}, {})", floating(re), floating(im));
    }
    case DType::kToken:
      return "";
    case DType::kS32:
      return fmt::format("{}", Load<int32_t>(p));
    case DType::kS64:
      return fmt::format("{}", Load<int64_t>(p));
    case DType::kU8:
      return fmt::format("{}", Load<uint8_t>(p));
    case DType::kU32:
      return fmt::format("{}", Load<uint32_t>(p));
    case DType::kU64:
      return fmt::format("{}", Load<uint64_t>(p));
    case DType::kF16:
      return floating(HalfToFloat(Load<uint16_t>(p)));
    case DType::kBF16:
      return floating(BFloat16ToFloat(Load<uint16_t>(p)));
    case DType::kF32:
      return floating(Load<float>(p));
    case DType::kF64:
      return floating(Load<double>(p));
  }
  return "?";
}

std::string Literal::ValueToString() const {
  const auto& dims = shape_.dims();
  if (dims.empty()) return ElementToString(*this, 0);
  std::string out;
  int64_t index = 0;
  // Recursive nesting: {a, b} for rank 1, { {..}, {..} } above.
  auto emit = [&](auto&& self, size_t level) -> void {
    out += "{";
    if (level + 1 == dims.size()) {
      for (int64_t i = 0; i < dims[level]; ++i) {
        if (i) out += ", ";
        out += ElementToString(*this, index++);
      }
    } else {
      for (int64_t i = 0; i < dims[level]; ++i) {
        out += i ? ", " : " ";
        self(self, level + 1);
      }
      if (dims[level] > 0) out += " ";
    }
    out += "}";
  };
  emit(emit, 0);
  return out;
}

float HalfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        ++e;
        mantissa <<= 1;
      } while ((mantissa & 0x400) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mantissa & 0x3ff) << 13);
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t FloatToHalf(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000)
    return static_cast<uint16_t>(sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0));
  if (abs >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // overflow to inf
  if (abs < 0x38800000) {  // subnormal or zero in half: round to nearest even
    float v = std::bit_cast<float>(abs) * 16777216.0f;  // scale by 2^24
    uint32_t m = static_cast<uint32_t>(std::nearbyint(v));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t rounded = abs + 0xfff + ((abs >> 13) & 1);  // round to nearest even
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000) >> 13));
}

}  // namespace strata::hlo
