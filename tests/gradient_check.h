// Gradient checking against central finite differences in f64, shared by
// the autograd and nn tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "strata/autograd/grad.h"
#include "strata/lazy/ops.h"

namespace strata {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Input {
  Input(std::vector<int64_t> d, std::vector<double> v = {})  // NOLINT: {{dims}} reads well
      : dims(std::move(d)), values(std::move(v)) {}
  std::vector<int64_t> dims;
  std::vector<double> values;  // random when empty
};

// A scalar of every element of y, each weighted by sin(its index), so a wrong
// cotangent anywhere changes it.
inline Tensor WeightedSum(const Tensor& y) {
  const int64_t n = y.shape().num_elements();
  Tensor w = reshape(arange(0, static_cast<double>(n), 1, DType::kF64), y.shape().dims());
  return sum(y * sin(w));
}

// Distinct values a step apart (n and 37 coprime), so no window or row holds
// a tie and a finite-difference step never reorders them.
inline std::vector<double> Distinct(int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>((i * 37) % n) * 0.01 - 0.3;
  return v;
}

// Compares gradients(fn) with (f(x + h) - f(x - h)) / 2h for every element.
inline void CheckGradients(const std::string& name, const Fn& fn, std::vector<Input> inputs,
                           double tolerance = 1e-6) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (Input& in : inputs) {
    if (in.values.empty()) {
      int64_t n = 1;
      for (int64_t d : in.dims) n *= d;
      for (int64_t i = 0; i < n; ++i) in.values.push_back(dist(rng));
    }
  }
  auto make = [&](const std::vector<std::vector<double>>& values) {
    std::vector<Tensor> ts;
    for (size_t i = 0; i < inputs.size(); ++i)
      ts.push_back(Tensor::FromVector(values[i], inputs[i].dims));
    return ts;
  };
  std::vector<std::vector<double>> base;
  for (const Input& in : inputs) base.push_back(in.values);
  std::vector<Tensor> xs = make(base);
  std::vector<Tensor> grads = gradients(fn(xs), xs);
  const double h = 1e-6;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<double> analytic = grads[i].to_vector<double>();
    ASSERT_EQ(analytic.size(), base[i].size()) << name;
    for (size_t k = 0; k < base[i].size(); ++k) {
      auto plus = base, minus = base;
      plus[i][k] += h;
      minus[i][k] -= h;
      double numeric = (fn(make(plus)).item<double>() - fn(make(minus)).item<double>()) / (2 * h);
      EXPECT_NEAR(analytic[k], numeric, tolerance * std::max(1.0, std::abs(numeric)))
          << name << ": input " << i << " element " << k;
    }
  }
}

}  // namespace strata
