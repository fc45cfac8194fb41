#include "strata/hlo/library_calls.h"

#include <array>
#include <cctype>
#include <utility>

#include "strata/core/error.h"

namespace strata::hlo {
namespace {

constexpr std::array<std::pair<std::string_view, LibraryCall>, 13> kTargets = {{
    {"xla_builder.math.Acos", LibraryCall::kAcos},
    {"xla_builder.math.Acosh", LibraryCall::kAcosh},
    {"xla_builder.math.Asin", LibraryCall::kAsin},
    {"xla_builder.math.Asinh", LibraryCall::kAsinh},
    {"xla_builder.math.Atan", LibraryCall::kAtan},
    {"xla_builder.math.Cosh", LibraryCall::kCosh},
    {"xla_builder.math.NextAfter", LibraryCall::kNextAfter},
    {"xla_builder.math.Polygamma", LibraryCall::kPolygamma},
    {"xla_builder.math.RegularizedIncompleteBeta", LibraryCall::kRegularizedIncompleteBeta},
    {"xla_builder.math.IgammaGradA", LibraryCall::kIgammaGradA},
    {"xla_builder.math.RandomGammaGrad", LibraryCall::kRandomGammaGrad},
    {"xla_builder.matrix.GetMatrixDiagonalViaGather", LibraryCall::kMatrixDiagonal},
    {"xla_builder.matrix.Einsum", LibraryCall::kEinsum},
}};

}  // namespace

std::optional<LibraryCall> LibraryCallOf(std::string_view target) {
  for (const auto& [name, call] : kTargets) {
    if (name == target) return call;
  }
  return std::nullopt;
}

int LibraryCallOperands(LibraryCall call) {
  switch (call) {
    case LibraryCall::kNextAfter:
    case LibraryCall::kPolygamma:
    case LibraryCall::kIgammaGradA:
    case LibraryCall::kRandomGammaGrad:
    case LibraryCall::kEinsum:
      return 2;
    case LibraryCall::kRegularizedIncompleteBeta:
      return 3;
    default:
      return 1;
  }
}

bool IsElementwiseLibraryCall(LibraryCall call) {
  return call != LibraryCall::kMatrixDiagonal && call != LibraryCall::kEinsum;
}

bool IsKernelLibraryCall(LibraryCall call) {
  return call == LibraryCall::kPolygamma || call == LibraryCall::kRegularizedIncompleteBeta ||
         call == LibraryCall::kIgammaGradA || call == LibraryCall::kRandomGammaGrad;
}

EinsumSpec ParseEinsumConfig(std::string_view config) {
  EinsumSpec spec;
  const size_t comma = config.find(','), arrow = config.find("->");
  if (comma == std::string_view::npos || arrow == std::string_view::npos || arrow < comma) {
    Fail("einsum config \"{}\": expected \"<a>,<b>-><result>\" such as \"ab,bc->ac\"", config);
  }
  spec.a = std::string(config.substr(0, comma));
  spec.b = std::string(config.substr(comma + 1, arrow - comma - 1));
  spec.out = std::string(config.substr(arrow + 2));
  for (const std::string* labels : {&spec.a, &spec.b, &spec.out}) {
    for (size_t i = 0; i < labels->size(); ++i) {
      const char c = (*labels)[i];
      if (!std::isalpha(static_cast<unsigned char>(c))) {
        Fail(
            "einsum config \"{}\": '{}' is not a dimension letter (one letter per dimension; "
            "no ellipsis)",
            config, c);
      }
      if (labels->find(c) != i)
        Fail("einsum config \"{}\": '{}' repeats in one operand", config, c);
    }
  }
  for (char c : spec.out) {
    if (spec.a.find(c) == std::string::npos && spec.b.find(c) == std::string::npos) {
      Fail("einsum config \"{}\": result dimension '{}' is in neither operand", config, c);
    }
  }
  return spec;
}

std::string_view LibraryCallTargets() {
  return "xla_builder.math.{Acos, Acosh, Asin, Asinh, Atan, Cosh, NextAfter, Polygamma, "
         "RegularizedIncompleteBeta, IgammaGradA, RandomGammaGrad}, "
         "xla_builder.matrix.{GetMatrixDiagonalViaGather, Einsum}";
}

}  // namespace strata::hlo
