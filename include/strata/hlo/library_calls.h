// XLA's client-library functions written as custom calls: the targets
// "xla_builder.math.*" and "xla_builder.matrix.*" that XLA's own tests
// write for functions its builder library composes from other ops. strata
// runs them: the elementwise math and the matrix ones are rewritten into
// strata's ops (hlo::ExpandXlaOps), the special functions (polygamma, the
// regularized incomplete beta, the incomplete gamma's derivative in a, the
// gamma sample's) run as scalar kernels in double.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace strata::hlo {

enum class LibraryCall : uint8_t {
  kAcos,
  kAcosh,
  kAsin,
  kAsinh,
  kAtan,
  kCosh,
  kNextAfter,                  // (x, toward)
  kPolygamma,                  // (n, x)
  kRegularizedIncompleteBeta,  // (a, b, x)
  kIgammaGradA,                // (a, x): d/da of P(a, x)
  kRandomGammaGrad,            // (a, x): d/da of a Gamma(a) sample x
  kMatrixDiagonal,             // "xla_builder.matrix.GetMatrixDiagonalViaGather"
  kEinsum,                     // (a, b), backend_config="ab,bc->ac"
};

// The call a custom-call target names, if it is one strata runs.
std::optional<LibraryCall> LibraryCallOf(std::string_view target);
// How many operands it takes.
int LibraryCallOperands(LibraryCall call);
// Elementwise over operands of one float shape (all but the matrix calls).
bool IsElementwiseLibraryCall(LibraryCall call);
// Run by a kernel (the special functions) rather than rewritten.
bool IsKernelLibraryCall(LibraryCall call);
// An einsum's config "ab,bc->ac": one letter per dimension of each operand
// and of the result. An Error names the config and what is wrong with it.
struct EinsumSpec {
  std::string a, b, out;
};
EinsumSpec ParseEinsumConfig(std::string_view config);

// Every target, for error messages.
std::string_view LibraryCallTargets();

}  // namespace strata::hlo
