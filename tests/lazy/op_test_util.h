// Helpers for the lazy op tests: row-major index arithmetic, seeded inputs,
// a NaN-aware closeness check and error expectations. Expected values are
// always computed by the tests with plain loops, never by strata.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/lazy/ops.h"

namespace strata::test {

using Dims = std::vector<int64_t>;

inline int64_t NumElements(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

inline Dims Unravel(int64_t flat, const Dims& dims) {
  Dims index(dims.size());
  for (int64_t i = static_cast<int64_t>(dims.size()) - 1; i >= 0; --i) {
    index[i] = flat % dims[i];
    flat /= dims[i];
  }
  return index;
}

inline int64_t Ravel(const Dims& index, const Dims& dims) {
  int64_t flat = 0;
  for (size_t i = 0; i < dims.size(); ++i) flat = flat * dims[i] + index[i];
  return flat;
}

// n values uniform in [lo, hi]; integer types get integers.
template <typename T>
std::vector<T> RandomValues(int64_t n, uint32_t seed, double lo = -4, double hi = 4) {
  std::mt19937 rng(seed);
  std::vector<T> out(n);
  if constexpr (std::is_floating_point_v<T>) {
    std::uniform_real_distribution<double> dist(lo, hi);
    for (T& v : out) v = static_cast<T>(dist(rng));
  } else {
    std::uniform_int_distribution<int64_t> dist(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
    for (T& v : out) v = static_cast<T>(dist(rng));
  }
  return out;
}

// A vector of `dims` whose element at each index is value_at(index).
template <typename T, typename F>
std::vector<T> Tabulate(const Dims& dims, F value_at) {
  std::vector<T> out(NumElements(dims));
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i)
    out[i] = static_cast<T>(value_at(Unravel(i, dims)));
  return out;
}

// A pred tensor from 0/1 bytes (std::vector<bool> has no data()).
inline Tensor BoolTensor(const std::vector<uint8_t>& values, Dims dims) {
  return astype(Tensor::FromVector<uint8_t>(values, std::move(dims)), DType::kPred);
}
// A pred tensor's elements as 0/1 bytes.
inline std::vector<uint8_t> BoolValues(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::kPred);
  return astype(t, DType::kU8).to_vector<uint8_t>();
}

// |expected - actual| <= abs + rel * |expected|; NaN matches NaN.
template <typename T>
bool IsClose(T expected, T actual, double rel, double abs) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(expected) || std::isnan(actual))
      return std::isnan(expected) && std::isnan(actual);
    if (std::isinf(expected) || std::isinf(actual)) return expected == actual;
    return std::abs(static_cast<double>(expected) - static_cast<double>(actual)) <=
           abs + rel * std::abs(static_cast<double>(expected));
  } else {
    return expected == actual;
  }
}

template <typename T>
::testing::AssertionResult AllClose(const std::vector<T>& expected, const std::vector<T>& actual,
                                    double rel = 0, double abs = 0) {
  if (expected.size() != actual.size()) {
    return ::testing::AssertionFailure()
           << "size " << actual.size() << ", expected " << expected.size();
  }
  int64_t bad = 0;
  std::ostringstream report;
  report.precision(10);
  for (size_t i = 0; i < expected.size(); ++i) {
    if (IsClose(expected[i], actual[i], rel, abs)) continue;
    if (bad++ < 5) {
      report << "\n  [" << i << "] expected " << +expected[i] << ", got " << +actual[i];
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << expected.size() << " elements differ:" << report.str();
}

// Checks dtype, dims and elements of `t` against a reference.
template <typename T>
void ExpectTensor(const Tensor& t, const Dims& dims, const std::vector<T>& expected, double rel = 0,
                  double abs = 0) {
  ASSERT_EQ(t.dtype(), DTypeOf<T>::value) << t.shape().ToString();
  ASSERT_EQ(t.shape().dims(), dims) << t.shape().ToString();
  EXPECT_TRUE(AllClose(expected, t.to_vector<T>(), rel, abs));
}

// `call` throws strata::Error whose message starts with "[op]" and contains
// every one of `parts`.
inline void ExpectError(const std::function<void()>& call, const std::string& op,
                        const std::vector<std::string>& parts = {}) {
  try {
    call();
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_EQ(message.rfind("[" + op + "]", 0), 0u) << message;
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << part << " in " << message;
    return;
  }
  ADD_FAILURE() << "expected a strata::Error from [" << op << "]";
}

}  // namespace strata::test
