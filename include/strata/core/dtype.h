// Element types, named and sized as XLA names them (pred, s32, f32, ...).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace strata {

// X-macro: enum name, XLA text name, byte size. The one list of dtypes.
// New types go at the end so the enum's values never change. c64 / c128 are
// complex numbers (two f32 / f64, real part first); a token orders side
// effects and holds no data (XLA's token[]).
#define STRATA_DTYPES(V) \
  V(kPred, "pred", 1)    \
  V(kS8, "s8", 1)        \
  V(kS32, "s32", 4)      \
  V(kS64, "s64", 8)      \
  V(kU8, "u8", 1)        \
  V(kU32, "u32", 4)      \
  V(kU64, "u64", 8)      \
  V(kF16, "f16", 2)      \
  V(kBF16, "bf16", 2)    \
  V(kF32, "f32", 4)      \
  V(kF64, "f64", 8)      \
  V(kS16, "s16", 2)      \
  V(kU16, "u16", 2)      \
  V(kC64, "c64", 8)      \
  V(kC128, "c128", 16)   \
  V(kToken, "token", 0)

enum class DType : uint8_t {
#define STRATA_DTYPE_ENUM(e, name, size) e,
  STRATA_DTYPES(STRATA_DTYPE_ENUM)
#undef STRATA_DTYPE_ENUM
};

inline constexpr int kNumDTypes = 16;

std::string_view DTypeName(DType dtype);
std::optional<DType> DTypeFromName(std::string_view name);
int64_t DTypeSize(DType dtype);

inline bool IsFloating(DType t) {
  return t == DType::kF16 || t == DType::kBF16 || t == DType::kF32 || t == DType::kF64;
}
inline bool IsSignedInteger(DType t) {
  return t == DType::kS8 || t == DType::kS16 || t == DType::kS32 || t == DType::kS64;
}
inline bool IsUnsignedInteger(DType t) {
  return t == DType::kU8 || t == DType::kU16 || t == DType::kU32 || t == DType::kU64;
}
inline bool IsInteger(DType t) { return IsSignedInteger(t) || IsUnsignedInteger(t); }
inline bool IsComplex(DType t) { return t == DType::kC64 || t == DType::kC128; }
// The type of a complex type's parts (f32 for c64, f64 for c128).
inline DType ComplexPartType(DType t) { return t == DType::kC128 ? DType::kF64 : DType::kF32; }

// Maps a C++ type to its DType at compile time.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::kPred;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr DType value = DType::kS8;
};
template <>
struct DTypeOf<int16_t> {
  static constexpr DType value = DType::kS16;
};
template <>
struct DTypeOf<uint16_t> {
  static constexpr DType value = DType::kU16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kS32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kS64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kU8;
};
template <>
struct DTypeOf<uint32_t> {
  static constexpr DType value = DType::kU32;
};
template <>
struct DTypeOf<uint64_t> {
  static constexpr DType value = DType::kU64;
};
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kF64;
};

}  // namespace strata
