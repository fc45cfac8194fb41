#include "strata/compiler/passes.h"

namespace strata::compiler {

bool EliminateDeadCode(hlo::Module& module) {
  int64_t removed = 0;
  for (const auto& c : module.computations()) removed += c->RemoveDeadInstructions();
  size_t before = module.computations().size();
  module.RemoveUnreachableComputations();
  return removed > 0 || module.computations().size() != before;
}

}  // namespace strata::compiler
