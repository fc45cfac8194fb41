// What scan and cond share to trace a user function once on placeholders:
// the nesting level of the placeholders, the body rebuilt so its only leaves
// are placeholders (outer values captured as invariants), the check that
// nothing computed from the placeholders escaped, and the body re-built over
// other values. Internal to the transforms layer.
#pragma once

#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "strata/ir/node.h"
#include "strata/lazy/tensor.h"
#include "strata/lazy/tree.h"

namespace strata::trace {

// While alive, functions traced on this thread make placeholders one level
// deeper (scan and cond bodies nest: level 1 is the outermost).
class Level {
 public:
  Level();
  ~Level();
  Level(const Level&) = delete;
  Level& operator=(const Level&) = delete;
  int32_t level() const { return level_; }

 private:
  int32_t level_;
};

// The traced body rebuilt so that its only leaves are this level's
// placeholders: every outer value it reads (anything not depending on them,
// literals aside) is replaced by a new invariant placeholder.
struct Body {
  std::vector<ir::Value> roots;
  std::vector<ir::Value> captured;  // outer values, in invariant order
  std::vector<ir::NodePtr> invariants;
};

// Rebuilds the graph of `roots` at placeholder level `level`; the invariant
// placeholders get ids first_id, first_id + 1, ... Roots traced by several
// functions (cond's branches) extracted together share their captures.
Body Extract(const std::vector<ir::Value>& roots, int32_t level, int64_t first_id);

// The tensors alive before a trace (lazy::Context::LiveValues()).
using LiveValues = std::vector<std::pair<lazy::TensorImpl*, ir::Value>>;

// After tracing: no tensor outside the body may hold a value computed from
// its placeholders. Outer tensors the body rebound are restored. `who`
// names the function in the Error ("[scan] fn").
void CheckLeaks(const LiveValues& before, int32_t level,
                const std::unordered_set<lazy::TensorImpl*>& allowed, std::string_view who,
                std::string_view instead);

void AddImpls(const Tree& t, std::unordered_set<lazy::TensorImpl*>& impls);

// The index checks of ops inside the body (checked indexing): those of nodes
// at the body's level reachable from its roots. Copies, since extracting the
// body rebuilds its nodes.
std::vector<ir::IndexCheck> BodyIndexChecks(const std::vector<ir::Value>& roots, int32_t level);

// `wanted` (body values whose leaves are placeholders) with every
// placeholder replaced by values[its id].
std::vector<ir::Value> Instantiate(const std::vector<ir::Value>& wanted,
                                   const std::vector<ir::Value>& values);

}  // namespace strata::trace
