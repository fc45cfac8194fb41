// From lazy IR to a program: walking the graph of some root values,
// numbering its parameters, hashing it, and lowering it to an hlo::Module.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "strata/hlo/module.h"
#include "strata/ir/node.h"

namespace strata::ir {

// The graph under a set of roots, in post-order (operands first).
struct Graph {
  std::vector<Value> roots;
  std::vector<const Node*> post_order;
  // Leaves that become program parameters, numbered by first appearance:
  // device data is one parameter per distinct buffer (the same buffer used
  // twice is one parameter), each scalar node is its own parameter.
  std::vector<const Node*> parameters;
  // For every use of a leaf (each operand slot and root, in walk order) the
  // parameter it reads. Part of the hash: (a*b)+a and (a*b)+b differ here.
  std::vector<int64_t> parameter_sequence;
  // Roots' hashes + parameter sequence: the program's identity.
  Hash128 hash;
  // With BuildGraph(..., with_index_checks): the index checks of the graph's
  // nodes, whose values are the roots from `checks_from` on, in order.
  std::vector<const IndexCheck*> checks;
  size_t checks_from = 0;

  // The parameter number of a leaf node, or -1 (PyTorch/XLA's
  // tensor_parameter_id for the lowering context).
  int64_t ParameterIdOf(const Node* leaf) const;
};

// `with_index_checks` also computes every index check of the graph's nodes
// (appended to the roots); a program's own roots come first either way.
Graph BuildGraph(std::vector<Value> roots, bool with_index_checks = false);

// The values computing `roots`, rebuilt with each value named in
// `replacements` (by node and output index) replaced. Nodes that reach no
// replaced value are shared, not copied.
using ValueKey = std::pair<const Node*, int64_t>;
std::vector<Value> ReplaceValues(const std::vector<Value>& roots,
                                 const std::map<ValueKey, Value>& replacements);

// Lowers to a module whose entry takes the graph's parameters and returns a
// tuple of the roots. Node shardings become `sharding=` attributes.
std::unique_ptr<hlo::Module> LowerGraph(const Graph& graph, const std::string& name = "graph");

// IR text of the graph: one line per node with shapes, hashes and shardings.
std::string GraphToText(const Graph& graph);
// Graphviz DOT of the graph.
std::string GraphToDot(const Graph& graph);

}  // namespace strata::ir
