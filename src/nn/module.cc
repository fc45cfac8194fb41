#include "strata/nn/module.h"

#include <fmt/format.h>

#include <set>

#include "strata/autograd/grad.h"
#include "strata/core/error.h"
#include "strata/lazy/ops.h"

namespace strata::nn {

namespace {

// Where the "*" segment of a stacked name starts, or npos.
size_t StarAt(const std::string& name) {
  if (name.rfind("*.", 0) == 0) return 0;
  size_t at = name.find(".*.");
  return at == std::string::npos ? at : at + 1;
}

std::string LayerName(const std::string& stacked, size_t star, int64_t layer) {
  return stacked.substr(0, star) + std::to_string(layer) + stacked.substr(star + 1);
}

Tensor LayerSlice(const Tensor& stacked, int64_t layer) {
  std::vector<int64_t> dims(stacked.shape().dims().begin() + 1, stacked.shape().dims().end());
  return reshape(slice(stacked, 0, layer, layer + 1), dims);
}

}  // namespace

template <typename Visit>
void Module::Walk(const std::string& prefix, const Visit& visit) {
  visit(prefix, *this);
  for (auto& [name, child] : children_) child->Walk(prefix + name + ".", visit);
}

std::vector<std::pair<std::string, Tensor*>> Module::named_parameters() {
  std::vector<std::pair<std::string, Tensor*>> out;
  Walk("", [&](const std::string& prefix, Module& m) {
    for (auto& [name, t] : m.parameters_) out.emplace_back(prefix + name, t.get());
  });
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_buffers() {
  std::vector<std::pair<std::string, Tensor*>> out;
  Walk("", [&](const std::string& prefix, Module& m) {
    for (auto& [name, t] : m.buffers_) out.emplace_back(prefix + name, t.get());
  });
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  Walk("", [&](const std::string& prefix, Module& m) {
    out.emplace_back(prefix.empty() ? "" : prefix.substr(0, prefix.size() - 1), &m);
  });
  return out;
}

std::vector<Tensor*> Module::parameters() {
  std::vector<Tensor*> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

Tensor& Module::tensor(const std::string& name) {
  std::vector<std::pair<std::string, Tensor*>> all = named_parameters();
  for (auto& b : named_buffers()) all.push_back(b);
  for (auto& [n, t] : all) {
    if (n == name) return *t;
  }
  for (auto& [n, t] : all) {  // a layer of a stacked tensor?
    size_t star = StarAt(n);
    if (star == std::string::npos || t->dim(0) == 0) continue;
    for (int64_t l = 0; l < t->dim(0); ++l) {
      if (LayerName(n, star, l) == name) {
        Fail(
            "[module] '{}' is layer {} of the stacked '{}' {}: read it through state_dict() or "
            "slice the stacked tensor",
            name, l, n, t->shape().ToString());
      }
    }
  }
  Fail("[module] {} has no parameter or buffer named '{}'", type_name_, name);
}

void Module::train(bool on) {
  Walk("", [&](const std::string&, Module& m) {
    m.training_ = on;
    m.OnTrain(on);
  });
}

std::vector<std::pair<std::string, Tensor>> unstack_entries(
    const std::vector<std::pair<std::string, Tensor>>& entries) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < entries.size();) {
    size_t star = StarAt(entries[i].first);
    if (star == std::string::npos) {
      out.push_back(entries[i++]);
      continue;
    }
    // A run of one stack's tensors: layer by layer, as checkpoints order them.
    const std::string stack = entries[i].first.substr(0, star);
    size_t end = i;
    while (end < entries.size() && StarAt(entries[end].first) == star &&
           entries[end].first.compare(0, star, stack) == 0)
      ++end;
    const int64_t layers = entries[i].second.dim(0);
    for (int64_t l = 0; l < layers; ++l) {
      for (size_t k = i; k < end; ++k) {
        const auto& [name, t] = entries[k];
        if (t.dim(0) != layers) {
          Fail("[module] stacked '{}' has {} layers, '{}' {}", name, t.dim(0), entries[i].first,
               layers);
        }
        out.emplace_back(LayerName(name, star, l), LayerSlice(t, l));
      }
    }
    i = end;
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::state_entries() {
  std::vector<std::pair<std::string, Tensor>> own;
  for (auto& [n, t] : named_parameters()) own.emplace_back(n, *t);
  for (auto& [n, t] : named_buffers()) own.emplace_back(n, *t);
  return unstack_entries(own);
}

std::map<std::string, Tensor> Module::state_dict() {
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : state_entries()) out.emplace(n, t);
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  std::vector<std::pair<std::string, Tensor*>> own = named_parameters();
  for (auto& b : named_buffers()) own.push_back(b);
  std::vector<std::string> missing, mismatched;
  std::set<std::string> known;
  // The value each own tensor takes: the entry, or its layers' entries stacked.
  struct Load {
    Tensor* slot;
    bool stacked;
    std::vector<Tensor> values;
  };
  std::vector<Load> loads;
  for (auto& [name, t] : own) {
    size_t star = StarAt(name);
    std::vector<std::pair<std::string, std::vector<int64_t>>> wanted;  // per-entry name and dims
    if (star == std::string::npos) {
      wanted.emplace_back(name, t->shape().dims());
    } else {
      std::vector<int64_t> dims(t->shape().dims().begin() + 1, t->shape().dims().end());
      for (int64_t l = 0; l < t->dim(0); ++l) wanted.emplace_back(LayerName(name, star, l), dims);
    }
    std::vector<Tensor> found;
    for (auto& [entry, dims] : wanted) {
      known.insert(entry);
      auto it = state.find(entry);
      if (it == state.end()) {
        missing.push_back(entry);
      } else if (it->second.shape().dims() != dims) {
        mismatched.push_back(fmt::format("{} (expected {}, found {})", entry,
                                         Shape(t->dtype(), dims).ToString(),
                                         it->second.shape().ToString()));
      } else {
        found.push_back(it->second);
      }
    }
    if (found.size() == wanted.size())
      loads.push_back({t, star != std::string::npos, std::move(found)});
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, t] : state) {
    if (!known.count(name)) unexpected.push_back(name);
  }
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + v[i];
    if (v.size() > 8) s += fmt::format(", and {} more", v.size() - 8);
    return s;
  };
  std::string problems;
  if (!mismatched.empty()) problems += "shape mismatch: " + list(mismatched) + "; ";
  if (strict && !missing.empty()) problems += "missing: " + list(missing) + "; ";
  if (strict && !unexpected.empty()) problems += "unexpected: " + list(unexpected) + "; ";
  if (!problems.empty()) {
    Fail("[load_state_dict] {} state dict does not fit: {}", type_name_,
         problems.substr(0, problems.size() - 2));
  }
  for (Load& load : loads) {
    Tensor& t = *load.slot;
    bool trainable = requires_grad(t);  // a loaded value keeps the slot's flag
    for (Tensor& v : load.values) {
      if (v.dtype() != t.dtype()) v = astype(v, t.dtype());
    }
    t = load.stacked ? stack(load.values, 0) : load.values[0];
    requires_grad_(t, trainable);
  }
}

void Module::CheckName(const std::string& name) const {
  if (name.empty() || name.find('.') != std::string::npos) {
    Fail("[module] {}: names must be non-empty and without '.', got '{}'", type_name_, name);
  }
  auto taken = [&](const auto& v) {
    for (const auto& [n, x] : v) {
      if (n == name) return true;
    }
    return false;
  };
  if (taken(parameters_) || taken(buffers_) || taken(children_))
    Fail("[module] {} already has something named '{}'", type_name_, name);
}

Tensor& Module::register_parameter(std::string name, Tensor value) {
  CheckName(name);
  if (!value.defined()) Fail("[module] parameter '{}' of {} is undefined", name, type_name_);
  parameters_.emplace_back(std::move(name), std::make_unique<Tensor>(std::move(value)));
  return *parameters_.back().second;
}

Tensor& Module::register_buffer(std::string name, Tensor value) {
  CheckName(name);
  if (!value.defined()) Fail("[module] buffer '{}' of {} is undefined", name, type_name_);
  buffers_.emplace_back(std::move(name), std::make_unique<Tensor>(std::move(value)));
  return *buffers_.back().second;
}

Tensor& Module::register_stacked(std::string path, Tensor value, bool buffer) {
  if (path.rfind("*.", 0) != 0 || path.size() < 3 || path.back() == '.' ||
      path.find("..") != std::string::npos) {
    Fail("[module] {}: a stacked path looks like '*.name.sub', got '{}'", type_name_, path);
  }
  if (!value.defined() || value.rank() == 0)
    Fail("[module] stacked '{}' of {} needs a leading layer dimension", path, type_name_);
  auto& list = buffer ? buffers_ : parameters_;
  for (const auto& [n, x] : list) {
    if (n == path) Fail("[module] {} already has something named '{}'", type_name_, path);
  }
  list.emplace_back(std::move(path), std::make_unique<Tensor>(std::move(value)));
  return *list.back().second;
}

void Module::AddModule(std::string name, std::unique_ptr<Module> module) {
  CheckName(name);
  module->train(training_);
  children_.emplace_back(std::move(name), std::move(module));
}

void functional_call(Module& module, const std::map<std::string, Tensor>& replacements,
                     const std::function<void()>& f) {
  std::vector<std::pair<Tensor*, Tensor>> saved;
  for (const auto& [name, value] : replacements) {
    Tensor& slot = module.tensor(name);
    // Another element type is a replacement too (bf16 copies of f32 weights).
    if (value.shape().dims() != slot.shape().dims()) {
      Fail("[functional_call] {} is {} in the module, the replacement is {}", name,
           slot.shape().ToString(), value.shape().ToString());
    }
    saved.emplace_back(&slot, slot);
  }
  struct Restore {
    std::vector<std::pair<Tensor*, Tensor>>& saved;
    ~Restore() {
      for (auto& [slot, old] : saved) *slot = old;
    }
  } restore{saved};
  for (const auto& [name, value] : replacements) module.tensor(name) = value;
  f();
}

}  // namespace strata::nn
