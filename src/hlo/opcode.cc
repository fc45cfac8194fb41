#include "strata/hlo/opcode.h"

#include <array>

namespace strata::hlo {
namespace {

enum class Kind { Unary, Binary, Collective, Other };

// Every column of a row but the elementwise kernels and rules, which their
// consumers expand where they are compiled.
struct OpcodeInfo {
  std::string_view name;
  Kind kind;
  uint8_t special;  // the types column: bit 0 complex, bit 1 tokens
  ElementTypes types;
  ShapeRule shape;
  VjpRule vjp;
  SpmdRule spmd;
  Kernel kernel;
  std::string_view api;
  bool api_generated;
};

constexpr uint8_t Real = 0, Complex = 1, AnyType = 3;

// An elementwise row's traits: the kind fixes its shape, SPMD and kernel
// families; its element types decide whether a gradient flows.
constexpr OpcodeInfo Elementwise(std::string_view name, Kind kind, uint8_t complex,
                                 ElementTypes types, std::string_view api, bool generated) {
  return {name,
          kind,
          complex,
          types,
          ShapeRule::kElementwise,
          TakesFloats(types) ? VjpRule::kElementwise : VjpRule::kNoGradient,
          SpmdRule::kElementwise,
          Kernel::kElementwise,
          api,
          generated};
}

#define STRATA_HLO_OPCODE_INFO(e, name, kind, complex, ...) \
  STRATA_HLO_OPCODE_INFO_##kind(name, kind, complex, __VA_ARGS__),
#define STRATA_HLO_OPCODE_INFO_Other(name, kind, complex, shape, vjp, spmd, kernel)       \
  OpcodeInfo {                                                                            \
    name, Kind::kind, complex, ElementTypes::kNone, ShapeRule::k##shape, VjpRule::k##vjp, \
        SpmdRule::k##spmd, Kernel::k##kernel, "", false                                   \
  }
#define STRATA_HLO_OPCODE_INFO_Collective STRATA_HLO_OPCODE_INFO_Other
#define STRATA_HLO_OPCODE_INFO_Unary(name, kind, complex, api, types, ...) \
  Elementwise(name, Kind::kind, complex, ElementTypes::k##types, STRATA_HLO_API_##api)
#define STRATA_HLO_OPCODE_INFO_Binary STRATA_HLO_OPCODE_INFO_Unary
#define STRATA_HLO_API_Api(n) #n, true
#define STRATA_HLO_API_Custom(n) #n, false
#define STRATA_HLO_API_Internal() "", false
constexpr std::array kOpcodeInfo = {STRATA_HLO_OPCODES(STRATA_HLO_OPCODE_INFO)};
#undef STRATA_HLO_OPCODE_INFO
#undef STRATA_HLO_OPCODE_INFO_Other
#undef STRATA_HLO_OPCODE_INFO_Collective
#undef STRATA_HLO_OPCODE_INFO_Unary
#undef STRATA_HLO_OPCODE_INFO_Binary
#undef STRATA_HLO_API_Api
#undef STRATA_HLO_API_Custom
#undef STRATA_HLO_API_Internal

const OpcodeInfo& Info(Opcode op) { return kOpcodeInfo[static_cast<size_t>(op)]; }

constexpr std::array<std::string_view, 6> kComparisonNames = {"EQ", "NE", "LT", "LE", "GT", "GE"};

}  // namespace

std::string_view OpcodeName(Opcode op) { return Info(op).name; }

std::optional<Opcode> OpcodeFromName(std::string_view name) {
  for (size_t i = 0; i < kOpcodeInfo.size(); ++i) {
    if (kOpcodeInfo[i].name == name) return static_cast<Opcode>(i);
  }
  return std::nullopt;
}

bool IsElementwiseUnary(Opcode op) { return Info(op).kind == Kind::Unary; }
bool IsElementwiseBinary(Opcode op) { return Info(op).kind == Kind::Binary; }
bool IsCollective(Opcode op) { return Info(op).kind == Kind::Collective; }
ElementTypes ElementTypesOf(Opcode op) { return Info(op).types; }
bool TakesComplex(Opcode op) { return (Info(op).special & Complex) != 0; }
bool TakesTokens(Opcode op) { return (Info(op).special & 2) != 0; }
ShapeRule ShapeRuleOf(Opcode op) { return Info(op).shape; }
VjpRule VjpRuleOf(Opcode op) { return Info(op).vjp; }
SpmdRule SpmdRuleOf(Opcode op) { return Info(op).spmd; }
Kernel KernelOf(Opcode op) { return Info(op).kernel; }
std::string_view ApiNameOf(Opcode op) { return Info(op).api; }
bool ApiIsGenerated(Opcode op) { return Info(op).api_generated; }

std::string_view ComparisonName(Comparison c) { return kComparisonNames[static_cast<size_t>(c)]; }

std::optional<Comparison> ComparisonFromName(std::string_view name) {
  for (size_t i = 0; i < kComparisonNames.size(); ++i) {
    if (kComparisonNames[i] == name) return static_cast<Comparison>(i);
  }
  return std::nullopt;
}

}  // namespace strata::hlo
