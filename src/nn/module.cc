#include "strata/nn/module.h"

#include <fmt/format.h>

#include <set>

#include "strata/autograd/grad.h"
#include "strata/core/error.h"
#include "strata/lazy/ops.h"

namespace strata::nn {

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
  for (auto& [n, t] : named_parameters()) {
    if (n == name) return *t;
  }
  for (auto& [n, t] : named_buffers()) {
    if (n == name) return *t;
  }
  Fail("[module] {} has no parameter or buffer named '{}'", type_name_, name);
}

void Module::train(bool on) {
  Walk("", [&](const std::string&, Module& m) {
    m.training_ = on;
    m.OnTrain(on);
  });
}

std::map<std::string, Tensor> Module::state_dict() {
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : named_parameters()) out.emplace(n, *t);
  for (auto& [n, t] : named_buffers()) out.emplace(n, *t);
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  std::vector<std::pair<std::string, Tensor*>> own = named_parameters();
  for (auto& b : named_buffers()) own.push_back(b);
  std::vector<std::string> missing, mismatched;
  std::set<std::string> known;
  for (auto& [name, t] : own) {
    known.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
    } else if (it->second.shape().dims() != t->shape().dims()) {
      mismatched.push_back(fmt::format("{} (expected {}, found {})", name, t->shape().ToString(),
                                       it->second.shape().ToString()));
    }
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
  for (auto& [name, t] : own) {
    auto it = state.find(name);
    if (it == state.end()) continue;
    bool trainable = requires_grad(*t);  // a loaded value keeps the slot's flag
    *t = it->second.dtype() == t->dtype() ? it->second : astype(it->second, t->dtype());
    requires_grad_(*t, trainable);
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
    if (value.shape() != slot.shape()) {
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
