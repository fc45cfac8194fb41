#include "strata/hlo/opcode.h"

#include <array>

namespace strata::hlo {
namespace {

enum class Kind { Unary, Binary, Collective, Other };

struct OpcodeInfo {
  std::string_view name;
  Kind kind;
};

constexpr std::array kOpcodeInfo = {
#define STRATA_HLO_OPCODE_INFO(e, name, kind, ...) OpcodeInfo{name, Kind::kind},
    STRATA_HLO_OPCODES(STRATA_HLO_OPCODE_INFO)
#undef STRATA_HLO_OPCODE_INFO
};

// The element-types column of the elementwise rows; kNone for the others.
constexpr std::array kElementTypes = {
#define STRATA_HLO_ELEMENT_TYPES(e, name, kind, ...) STRATA_HLO_ELEMENT_TYPES_##kind(__VA_ARGS__),
#define STRATA_HLO_ELEMENT_TYPES_Unary(types, ...) ElementTypes::k##types
#define STRATA_HLO_ELEMENT_TYPES_Binary(types, ...) ElementTypes::k##types
#define STRATA_HLO_ELEMENT_TYPES_Collective(...) ElementTypes::kNone
#define STRATA_HLO_ELEMENT_TYPES_Other(...) ElementTypes::kNone
    STRATA_HLO_OPCODES(STRATA_HLO_ELEMENT_TYPES)
#undef STRATA_HLO_ELEMENT_TYPES
#undef STRATA_HLO_ELEMENT_TYPES_Unary
#undef STRATA_HLO_ELEMENT_TYPES_Binary
#undef STRATA_HLO_ELEMENT_TYPES_Collective
#undef STRATA_HLO_ELEMENT_TYPES_Other
};

constexpr std::array<std::string_view, 6> kComparisonNames = {"EQ", "NE", "LT", "LE", "GT", "GE"};

}  // namespace

std::string_view OpcodeName(Opcode op) { return kOpcodeInfo[static_cast<size_t>(op)].name; }

std::optional<Opcode> OpcodeFromName(std::string_view name) {
  for (size_t i = 0; i < kOpcodeInfo.size(); ++i) {
    if (kOpcodeInfo[i].name == name) return static_cast<Opcode>(i);
  }
  return std::nullopt;
}

bool IsElementwiseUnary(Opcode op) {
  return kOpcodeInfo[static_cast<size_t>(op)].kind == Kind::Unary;
}
bool IsElementwiseBinary(Opcode op) {
  return kOpcodeInfo[static_cast<size_t>(op)].kind == Kind::Binary;
}

ElementTypes ElementTypesOf(Opcode op) { return kElementTypes[static_cast<size_t>(op)]; }

bool TakesComplex(Opcode op) {
  switch (op) {
    // arithmetic
    case Opcode::kNegate:
    case Opcode::kAbs:
    case Opcode::kSign:
    case Opcode::kExp:
    case Opcode::kExpm1:
    case Opcode::kLog:
    case Opcode::kLog1p:
    case Opcode::kTanh:
    case Opcode::kLogistic:
    case Opcode::kSqrt:
    case Opcode::kRsqrt:
    case Opcode::kSin:
    case Opcode::kCos:
    case Opcode::kAdd:
    case Opcode::kSubtract:
    case Opcode::kMultiply:
    case Opcode::kDivide:
    case Opcode::kPower:
    case Opcode::kReal:
    case Opcode::kImag:
    case Opcode::kCompare:
    case Opcode::kSelect:
    case Opcode::kConvert:
    case Opcode::kBitcastConvert:
    case Opcode::kDot:
    case Opcode::kReduce:
    // data movement, indexing, control and the collectives
    case Opcode::kParameter:
    case Opcode::kConstant:
    case Opcode::kBroadcast:
    case Opcode::kReshape:
    case Opcode::kTranspose:
    case Opcode::kCopy:
    case Opcode::kSlice:
    case Opcode::kDynamicSlice:
    case Opcode::kDynamicUpdateSlice:
    case Opcode::kConcatenate:
    case Opcode::kPad:
    case Opcode::kReverse:
    case Opcode::kGather:
    case Opcode::kScatter:
    case Opcode::kSort:  // by a comparator of the user's (on real(), abs(), ...)
    case Opcode::kTuple:
    case Opcode::kGetTupleElement:
    case Opcode::kWhile:
    case Opcode::kConditional:
    case Opcode::kCall:
    case Opcode::kFusion:
    case Opcode::kOptimizationBarrier:
    case Opcode::kCustomCall:
    case Opcode::kAddDependency:
    case Opcode::kAllReduce:
    case Opcode::kAllGather:
    case Opcode::kReduceScatter:
    case Opcode::kAllToAll:
    case Opcode::kCollectivePermute:
      return true;
    default:
      return false;
  }
}

bool IsCollective(Opcode op) {
  return kOpcodeInfo[static_cast<size_t>(op)].kind == Kind::Collective;
}

std::string_view ComparisonName(Comparison c) { return kComparisonNames[static_cast<size_t>(c)]; }

std::optional<Comparison> ComparisonFromName(std::string_view name) {
  for (size_t i = 0; i < kComparisonNames.size(); ++i) {
    if (kComparisonNames[i] == name) return static_cast<Comparison>(i);
  }
  return std::nullopt;
}

}  // namespace strata::hlo
