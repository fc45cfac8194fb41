#include "strata/lazy/tree.h"

#include <fmt/format.h>

#include "strata/core/error.h"

namespace strata {
namespace {

const char* KindName(const TreeSpec& s) {
  switch (s.kind()) {
    case TreeSpec::Kind::kEmpty:
      return "an empty node";
    case TreeSpec::Kind::kLeaf:
      return "a tensor";
    case TreeSpec::Kind::kList:
      return "a list";
    case TreeSpec::Kind::kDict:
      return "a map";
  }
  return "?";
}

}  // namespace

Tree::Tree(Tensor leaf) {
  if (!leaf.defined()) Fail("[tree] a leaf must be a defined tensor (use Tree() for none)");
  node_ = std::move(leaf);
}
Tree::Tree(List items) : node_(std::move(items)) {}
Tree::Tree(Dict items) : node_(std::move(items)) {}

const Tensor& Tree::leaf() const {
  if (!is_leaf()) Fail("[tree] expected a tensor, found {}", spec().ToString());
  return std::get<Tensor>(node_);
}
const Tree::List& Tree::list() const {
  if (!is_list()) Fail("[tree] expected a list, found {}", spec().ToString());
  return std::get<List>(node_);
}
const Tree::Dict& Tree::dict() const {
  if (!is_dict()) Fail("[tree] expected a map, found {}", spec().ToString());
  return std::get<Dict>(node_);
}
const Tree& Tree::operator[](size_t index) const {
  const List& l = list();
  if (index >= l.size()) Fail("[tree] index {} out of range for a list of {}", index, l.size());
  return l[index];
}
const Tree& Tree::operator[](const std::string& key) const {
  const Dict& d = dict();
  auto it = d.find(key);
  if (it == d.end()) Fail("[tree] no key '{}' in {}", key, spec().ToString());
  return it->second;
}
size_t Tree::size() const {
  if (is_list()) return std::get<List>(node_).size();
  if (is_dict()) return std::get<Dict>(node_).size();
  return is_leaf() ? 1 : 0;
}

std::vector<std::pair<std::string, Tensor>> Tree::leaves_with_paths() const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::function<void(const Tree&, const std::string&)> walk = [&](const Tree& t,
                                                                  const std::string& path) {
    if (t.is_leaf()) {
      out.emplace_back(path, t.leaf());
    } else if (t.is_list()) {
      const List& l = t.list();
      for (size_t i = 0; i < l.size(); ++i) walk(l[i], fmt::format("{}[{}]", path, i));
    } else if (t.is_dict()) {
      for (const auto& [k, v] : t.dict()) walk(v, fmt::format("{}['{}']", path, k));
    }
  };
  walk(*this, "");
  return out;
}

void Tree::for_each_leaf(const std::function<void(const Tensor&)>& f) const {
  if (is_leaf()) {
    f(std::get<Tensor>(node_));
  } else if (is_list()) {
    for (const Tree& c : std::get<List>(node_)) c.for_each_leaf(f);
  } else if (is_dict()) {
    for (const auto& [k, v] : std::get<Dict>(node_)) v.for_each_leaf(f);
  }
}

std::vector<Tensor> Tree::leaves() const {
  std::vector<Tensor> out;
  for_each_leaf([&](const Tensor& t) { out.push_back(t); });
  return out;
}

int64_t Tree::num_leaves() const { return spec().num_leaves(); }

TreeSpec Tree::spec() const {
  TreeSpec s;
  if (is_leaf()) {
    s.kind_ = TreeSpec::Kind::kLeaf;
    s.num_leaves_ = 1;
  } else if (is_list()) {
    s.kind_ = TreeSpec::Kind::kList;
    for (const Tree& c : std::get<List>(node_)) {
      s.children_.push_back(c.spec());
      s.num_leaves_ += s.children_.back().num_leaves_;
    }
  } else if (is_dict()) {
    s.kind_ = TreeSpec::Kind::kDict;
    for (const auto& [k, v] : std::get<Dict>(node_)) {
      s.keys_.push_back(k);
      s.children_.push_back(v.spec());
      s.num_leaves_ += s.children_.back().num_leaves_;
    }
  }
  return s;
}

Tree Tree::map(const std::function<Tensor(const Tensor&)>& f) const {
  return spec().Unflatten([&] {
    std::vector<Tensor> mapped;
    for (const Tensor& t : leaves()) mapped.push_back(f(t));
    return mapped;
  }());
}

Tree TreeSpec::Unflatten(std::vector<Tensor> leaves) const {
  if (static_cast<int64_t>(leaves.size()) != num_leaves_) {
    Fail("[tree] structure {} has {} leaves, got {} tensors", ToString(), num_leaves_,
         leaves.size());
  }
  size_t next = 0;
  return Build(leaves, next);
}

Tree TreeSpec::Build(std::vector<Tensor>& leaves, size_t& next) const {
  switch (kind_) {
    case Kind::kEmpty:
      return Tree();
    case Kind::kLeaf:
      return Tree(std::move(leaves[next++]));
    case Kind::kList: {
      Tree::List l;
      for (const TreeSpec& c : children_) l.push_back(c.Build(leaves, next));
      return Tree(std::move(l));
    }
    case Kind::kDict: {
      Tree::Dict d;
      for (size_t i = 0; i < children_.size(); ++i) d[keys_[i]] = children_[i].Build(leaves, next);
      return Tree(std::move(d));
    }
  }
  return Tree();
}

std::string TreeSpec::FirstDifference(const TreeSpec& other) const { return Diff(other, ""); }

std::string TreeSpec::Diff(const TreeSpec& other, const std::string& path) const {
  std::string where = path.empty() ? "root" : path;
  if (kind_ != other.kind_)
    return fmt::format("{}: {} vs {}", where, KindName(*this), KindName(other));
  if (kind_ == Kind::kList && children_.size() != other.children_.size()) {
    return fmt::format("{}: a list of {} vs a list of {}", where, children_.size(),
                       other.children_.size());
  }
  if (kind_ == Kind::kDict && keys_ != other.keys_) {
    return fmt::format("{}: keys {} vs {}", where, ToString(), other.ToString());
  }
  for (size_t i = 0; i < children_.size(); ++i) {
    std::string child = kind_ == Kind::kList ? fmt::format("{}[{}]", path, i)
                                             : fmt::format("{}['{}']", path, keys_[i]);
    std::string d = children_[i].Diff(other.children_[i], child);
    if (!d.empty()) return d;
  }
  return "";
}

std::string TreeSpec::ToString() const {
  switch (kind_) {
    case Kind::kEmpty:
      return "None";
    case Kind::kLeaf:
      return "*";
    case Kind::kList: {
      std::string s = "[";
      for (size_t i = 0; i < children_.size(); ++i) s += (i ? ", " : "") + children_[i].ToString();
      return s + "]";
    }
    case Kind::kDict: {
      std::string s = "{";
      for (size_t i = 0; i < children_.size(); ++i)
        s += fmt::format("{}'{}': {}", i ? ", " : "", keys_[i], children_[i].ToString());
      return s + "}";
    }
  }
  return "?";
}

}  // namespace strata
