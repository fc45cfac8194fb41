// Tree: nested lists and string-keyed maps of tensors, with empty nodes
// (JAX's pytrees). Transforms (grad, scan, apply_layers) take and return
// Trees; a Tree flattens to its leaves in a fixed order (lists by position,
// maps by sorted key) and unflattens from its TreeSpec, the structure alone,
// which compares and prints.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "strata/lazy/tensor.h"

namespace strata {

class TreeSpec;

class Tree {
 public:
  using List = std::vector<Tree>;
  using Dict = std::map<std::string, Tree>;

  Tree() = default;   // empty: no leaves
  Tree(Tensor leaf);  // NOLINT: a tensor is a one-leaf tree
  Tree(List items);   // NOLINT
  Tree(Dict items);   // NOLINT
  Tree(std::initializer_list<Tree> items) : Tree(List(items)) {}

  bool is_empty() const { return std::holds_alternative<std::monostate>(node_); }
  bool is_leaf() const { return std::holds_alternative<Tensor>(node_); }
  bool is_list() const { return std::holds_alternative<List>(node_); }
  bool is_dict() const { return std::holds_alternative<Dict>(node_); }

  // Accessors throw strata::Error naming the kind found.
  const Tensor& leaf() const;
  const List& list() const;
  const Dict& dict() const;
  const Tree& operator[](size_t index) const;
  const Tree& operator[](const std::string& key) const;
  size_t size() const;  // list or dict entries; 0 for empty, 1 for a leaf

  std::vector<Tensor> leaves() const;
  // Visits the leaves in flatten order, in place (no copies).
  void for_each_leaf(const std::function<void(const Tensor&)>& f) const;
  // Leaves with their paths: "[0]['h']", or "" for a root leaf.
  std::vector<std::pair<std::string, Tensor>> leaves_with_paths() const;
  int64_t num_leaves() const;
  TreeSpec spec() const;
  // The same structure with f applied to every leaf.
  Tree map(const std::function<Tensor(const Tensor&)>& f) const;

 private:
  std::variant<std::monostate, Tensor, List, Dict> node_;
};

// A tree's structure without its tensors.
class TreeSpec {
 public:
  enum class Kind : uint8_t { kEmpty, kLeaf, kList, kDict };

  Kind kind() const { return kind_; }
  int64_t num_leaves() const { return num_leaves_; }
  // A tree of this structure holding `leaves` in flatten order; Error if the
  // count differs.
  Tree Unflatten(std::vector<Tensor> leaves) const;
  // Where the first difference between two structures is ("" if equal),
  // e.g. "[1]: a list of 2 vs a list of 3".
  std::string FirstDifference(const TreeSpec& other) const;
  bool operator==(const TreeSpec& other) const { return FirstDifference(other).empty(); }
  bool operator!=(const TreeSpec& other) const { return !(*this == other); }
  // "[*, {'a': *, 'b': []}, None]": * is a leaf, None an empty node.
  std::string ToString() const;

 private:
  friend class Tree;
  Tree Build(std::vector<Tensor>& leaves, size_t& next) const;
  std::string Diff(const TreeSpec& other, const std::string& path) const;
  Kind kind_ = Kind::kEmpty;
  std::vector<TreeSpec> children_;
  std::vector<std::string> keys_;  // kDict, sorted
  int64_t num_leaves_ = 0;
};

}  // namespace strata
