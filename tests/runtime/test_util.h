// Helpers shared by the runtime tests: a one-computation module under
// construction (Graph), buffers in and out, seeded random inputs, row-major
// index arithmetic and a NaN-aware closeness check. Expected values are always
// computed by the tests themselves with plain loops, never by strata.
#pragma once

#include <fmt/core.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/compiler/compile.h"
#include "strata/hlo/builder.h"
#include "strata/hlo/text.h"

namespace strata::runtime::test {

inline const Device* Cpu() { return Client::Default().device(0); }

template <typename T>
Buffer Arg(const std::vector<T>& values, std::vector<int64_t> dims) {
  return Buffer::FromVector(values, std::move(dims), Cpu());
}
// std::vector<bool> has no data(): pred buffers go through bytes.
inline Buffer Arg(const std::vector<bool>& values, std::vector<int64_t> dims) {
  std::vector<uint8_t> bytes(values.begin(), values.end());
  return Buffer::FromHost(Shape(DType::kPred, std::move(dims)), bytes, Cpu());
}

// A buffer's elements; pred bytes must be exactly 0 or 1.
template <typename T>
std::vector<T> ToHost(const Buffer& buffer) {
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<bool> out;
    for (int64_t i = 0; i < buffer.shape().num_elements(); ++i) {
      uint8_t byte = buffer.data()[i];
      if (byte > 1) ADD_FAILURE() << "pred element " << i << " holds byte " << int{byte};
      out.push_back(byte != 0);
    }
    return out;
  } else {
    return buffer.ToVector<T>();
  }
}

// An entry computation being built: parameters first, then ops through `b`,
// then Run(root, args). Reduce/scatter/while bodies go in via Add().
struct Graph {
  hlo::Module module{"test"};
  hlo::Builder b{"main"};
  std::vector<hlo::Instruction*> params;
  bool fuse = true;  // off for tests of what the one-op kernels and the planner do alone

  explicit Graph(const std::vector<Shape>& parameter_shapes = {}) {
    for (size_t i = 0; i < parameter_shapes.size(); ++i) {
      params.push_back(
          b.Parameter(static_cast<int64_t>(i), parameter_shapes[i], fmt::format("p{}", i)));
    }
  }
  hlo::Computation* Add(std::unique_ptr<hlo::Computation> c) {
    return module.AddComputation(std::move(c));
  }
  std::unique_ptr<Executable> Compile(hlo::Instruction* root, bool run_passes = true) {
    module.AddEntryComputation(b.Build(root));
    compiler::CompileOptions options;
    options.run_passes = run_passes;
    options.fuse = fuse;
    return compiler::Compile(module, options);
  }
  std::vector<Buffer> Run(hlo::Instruction* root, const std::vector<Buffer>& args,
                          bool run_passes = true) {
    return Compile(root, run_passes)->Run(args);
  }
};

// How many instructions of `c` have opcode `op`.
inline int64_t Count(const hlo::Computation& c, hlo::Opcode op) {
  int64_t n = 0;
  for (const auto& inst : c.instructions()) n += inst->opcode() == op;
  return n;
}

inline std::vector<Shape> ShapesOf(const std::vector<Buffer>& buffers) {
  std::vector<Shape> shapes;
  for (const Buffer& buffer : buffers) shapes.push_back(buffer.shape());
  return shapes;
}

// n values uniform in [lo, hi]; integers are drawn as integers.
template <typename T>
std::vector<T> Random(int64_t n, uint32_t seed, double lo, double hi) {
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

// n arbitrary bit patterns of an integer type.
template <typename T>
std::vector<T> RandomBits(int64_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> out(n);
  for (T& v : out) v = static_cast<T>(rng());
  return out;
}

inline int64_t NumElements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

inline std::vector<int64_t> Unravel(int64_t flat, const std::vector<int64_t>& dims) {
  std::vector<int64_t> index(dims.size());
  for (int64_t i = static_cast<int64_t>(dims.size()) - 1; i >= 0; --i) {
    index[i] = flat % dims[i];
    flat /= dims[i];
  }
  return index;
}

inline int64_t Ravel(const std::vector<int64_t>& index, const std::vector<int64_t>& dims) {
  int64_t flat = 0;
  for (size_t i = 0; i < dims.size(); ++i) flat = flat * dims[i] + index[i];
  return flat;
}

// |expected - actual| <= abs + rel * |expected|; NaN matches NaN, infinities
// must match exactly.
template <typename T>
bool IsClose(T expected, T actual, double rel, double abs = 0) {
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
std::string Show(T v) {
  std::ostringstream os;
  os.precision(10);
  if constexpr (sizeof(T) == 1) {
    os << static_cast<int>(v);
  } else {
    os << v;
  }
  return os.str();
}

// Element-by-element comparison reporting the first few mismatches.
template <typename T>
::testing::AssertionResult AllClose(const std::vector<T>& expected, const std::vector<T>& actual,
                                    double rel = 0, double abs = 0) {
  if (expected.size() != actual.size()) {
    return ::testing::AssertionFailure()
           << "size " << actual.size() << ", expected " << expected.size();
  }
  int64_t bad = 0;
  std::ostringstream report;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (IsClose(expected[i], actual[i], rel, abs)) continue;
    if (bad++ < 5)
      report << "\n  [" << i << "] expected " << Show(expected[i]) << ", got " << Show(actual[i]);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << expected.size() << " elements differ:" << report.str();
}

// Runs `build` over parameters shaped like `args` with passes on and off
// (passes delete identity ops, so only the second run may reach the kernel)
// and checks the single result's dims and elements. `build` takes either
// (Builder&, params) or (Graph&) when it needs to add computations.
template <typename T, typename Build>
void ExpectRun(const std::vector<Buffer>& args, const Build& build,
               const std::vector<int64_t>& expected_dims, const std::vector<T>& expected,
               double rel = 0, double abs = 0) {
  for (bool passes : {true, false}) {
    SCOPED_TRACE(passes ? "with passes" : "without passes");
    Graph g(ShapesOf(args));
    hlo::Instruction* root;
    if constexpr (std::is_invocable_v<const Build&, Graph&>) {
      root = build(g);
    } else {
      root = build(g.b, g.params);
    }
    std::vector<Buffer> out = g.Run(root, args, passes);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].shape().dims(), expected_dims);
    EXPECT_TRUE(AllClose(expected, ToHost<T>(out[0]), rel, abs));
  }
}

// A vector of `dims` whose element at each index is value_at(index).
template <typename T, typename F>
std::vector<T> Tabulate(const std::vector<int64_t>& dims, F value_at) {
  std::vector<T> out(NumElements(dims));
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i)
    out[i] = value_at(Unravel(i, dims));
  return out;
}

// What parsing and compiling HLO `text` throws: the Error's message,
// "internal error: ..." for an internal check (which user input must never
// fire), "no error" when it compiles.
inline std::string CompileError(const std::string& text) {
  try {
    compiler::Compile(*hlo::ParseModule(text));
  } catch (const InternalError& e) {
    return std::string("internal error: ") + e.what();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace strata::runtime::test
