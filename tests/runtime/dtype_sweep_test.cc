// Driven by the opcode list: every opcode that is not elementwise (those are
// elementwise_completeness_test.cc's), on each of the 11 dtypes, as HLO text
// written from XLA's operation semantics. Each program either fails the
// shape rules or compiles (passes off, then on) and gives, element by
// element, what this file computes with plain loops. Which dtypes each op
// accepts is then held against a table written from XLA's semantics, so a
// shape rule that wrongly rejects a type fails here too; an opcode without
// a case fails ("add a case for ...").
//
// The references are host_values.h's: every value of every dtype exactly,
// XLA's conversions written from the formats.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "host_values.h"
#include "opcode_list.h"
#include "strata/compiler/compile.h"
#include "strata/core/error.h"
#include "strata/hlo/opcode.h"
#include "strata/hlo/text.h"
#include "strata/runtime/communicator.h"

namespace strata::runtime {
namespace {

using hlo::Opcode;
using namespace host;  // NOLINT: the reference values (host_values.h)

// ---- dtypes and sets of them ------------------------------------------------

using Types = uint32_t;
constexpr Types Of(std::initializer_list<DType> types) {
  Types set = 0;
  for (DType t : types) set |= Types{1} << static_cast<int>(t);
  return set;
}
bool In(Types set, DType t) { return (set >> static_cast<int>(t)) & 1; }
constexpr Types kPredOnly = Of({DType::kPred});
constexpr Types kIntegers = Of({DType::kS8, DType::kS16, DType::kS32, DType::kS64, DType::kU8,
                                DType::kU16, DType::kU32, DType::kU64});
constexpr Types kHalves = Of({DType::kF16, DType::kBF16});
constexpr Types kFloats = kHalves | Of({DType::kF32, DType::kF64});
constexpr Types kNumeric = kIntegers | kFloats;
constexpr Types kAll = kNumeric | kPredOnly;

// ---- test data ---------------------------------------------------------------

// Distinct small numbers every dtype holds: 1, -2, 3, -4, ... (no negatives
// for unsigned types, halved for floats); an irregular pattern for pred.
Real Small(DType t, int64_t k) {
  if (t == DType::kPred) return (k * 5 + 1) % 3 == 0;
  Real v = k % 100 + 1;
  if (!IsUnsignedInteger(t) && k % 2 == 1) v = -v;
  return IsFloating(t) ? v / 2 : v;
}
Array Numbers(DType t, Index dims, int salt = 0) {
  Array a(t, std::move(dims));
  for (int64_t i = 0; i < a.size(); ++i) Set(a, i, Small(t, i + 11 * salt));
  return a;
}

// Numbers with, for floats, a signalling NaN with a payload and a -0 among
// them: data movement must keep every bit.
Array Sample(DType t, Index dims, int salt = 0) {
  Array a = Numbers(t, std::move(dims), salt);
  const uint64_t nan = t == DType::kF16    ? 0x7D01
                       : t == DType::kBF16 ? 0xFF81
                       : t == DType::kF32  ? 0x7FA00001
                                           : 0x7FF4000000000001;
  for (int64_t i = 0; i < a.size() && IsFloating(t); ++i) {
    if ((i + salt) % 7 == 3) std::memcpy(a.at(i), &nan, DTypeSize(t));
    if ((i + salt) % 7 == 5) Set(a, i, -0.0L);
  }
  return a;
}

// Corner cases of conversions, each kept for the dtypes that hold it:
// wrap-around, saturation, ties, double rounding, subnormals, NaN.
std::vector<Real> Corners(DType t) {
  const auto p2 = [](int e) { return std::ldexp(Real(1), e); };
  // clang-format off
  return Keep(t, {
      0, -0.0L, 1, -1, 0.5, -0.5, 1.5, 2.5, -2.5, 7, -7, 100, -100,
      127, -128, 128, 200, 255, 255.5, 256, 257, 259, 300, -129,          // 8-bit, bf16 ties
      2049, 2051, 65504, 65519, 65520, 65535, 65537,                      // f16 ties and overflow
      32767, -32768, 32768, -32769, 65536, 40000.5,                       // 16-bit
      p2(24) + 1, p2(31) - 1, -p2(31), p2(31), p2(32) - 1, p2(32),        // f32 ties, 32-bit
      p2(53) + 1, p2(63) - 1, -p2(63), p2(63), p2(64) - 1, p2(64), 1.8e19L,  // f64, 64-bit
      1e10, -1e10, 1e20, p2(100), 1e300, -1e300,
      p2(-24), p2(-25), 3 * p2(-26), p2(-149),                            // subnormals
      1 + p2(-8), 1 + 3 * p2(-9), 1 + p2(-24), 1 + p2(-11) + p2(-40),     // ties, sticky bits
      FormatOf(DType::kBF16).max(), FormatOf(DType::kF32).max(), FormatOf(DType::kF64).max(),
      INFINITY, -INFINITY, NAN});
  // clang-format on
}

// ---- the table: which dtypes XLA's semantics allow ---------------------------

struct Row {
  std::string name;
  Types accepts;              // by the shape rules
  Types compile_rejects = 0;  // accepted, but the CPU runtime throws a strata::Error at compile
};

// bitcast-convert keeps the bits: XLA allows equal bit widths (pred has one).
Types SameWidth(DType t) {
  for (Types group :
       {kPredOnly, Of({DType::kS8, DType::kU8}), kHalves | Of({DType::kS16, DType::kU16}),
        Of({DType::kS32, DType::kU32, DType::kF32}), Of({DType::kS64, DType::kU64, DType::kF64})}) {
    if (In(group, t)) return group;
  }
  return 0;
}

std::vector<Row> Table() {
  std::vector<Row> rows;
  // Moving, selecting and grouping values: any dtype, bit for bit.
  // clang-format off
  for (const char* op : {
           "parameter", "constant", "broadcast", "reshape", "transpose", "copy", "slice",
           "dynamic-slice", "dynamic-update-slice", "concatenate", "pad", "reverse", "select",
           "gather", "scatter overwrite", "tuple", "get-tuple-element", "while", "conditional", "call",
           "opt-barrier", "custom-call", "all-gather", "all-to-all", "collective-permute",
           "add-dependency", "map", "copy-start", "all-gather-start",
           "collective-permute-start"}) {
    // clang-format on
    rows.push_back({op, kAll});
  }
  for (DType to : AllDTypes()) {
    rows.push_back({"convert to " + Name(to), kAll});
    rows.push_back({"bitcast-convert to " + Name(to), SameWidth(to)});
  }
  // Arithmetic on f16 / bf16 runs in f32 and rounds once (XLA's CPU
  // backend); reductions accumulate in f32. The reduce and scatter rows take
  // what their to_apply's op takes.
  const std::vector<Row> arithmetic = {
      {"iota", kNumeric},  // integer or floating point (StableHLO), no pred
      {"compare", kAll},
      {"clamp", kAll},
      {"is-finite", kFloats},
      {"real", kFloats},
      {"imag", kFloats},
      {"complex", Of({DType::kF32, DType::kF64})},
      {"after-all", 0},  // tokens only
      {"reduce add", kNumeric},
      {"reduce multiply", kNumeric},
      {"reduce maximum", kNumeric},
      {"reduce and", kIntegers | kPredOnly},
      {"reduce or", kIntegers | kPredOnly},
      {"reduce by select", kAll},  // a to_apply no native loop knows
      {"dot", kNumeric},
      {"convolution", kNumeric},
      {"reduce-window add", kNumeric},
      {"select-and-scatter", kNumeric},
      {"sort", kAll},
      {"sort compiled comparator", kAll},
      {"topk", kNumeric},
      {"scatter add", kNumeric},
      {"scatter or", kIntegers | kPredOnly},
      // The fused loop runs f32 and f64; any other fusion runs as a call of
      // its computation.
      {"fusion add", kNumeric},
      // Narrower than XLA, whose builder makes any unsigned type (u8 too):
      // strata draws 32-bit words.
      {"rng-bit-generator", Of({DType::kU32, DType::kU64})},
      {"partition-id", Of({DType::kU32})},
      {"replica-id", Of({DType::kU32})},
      {"all-reduce add", kNumeric},  // f16 / bf16 summed in f32 and rounded once
      {"all-reduce maximum", kNumeric},
      {"all-reduce or", kIntegers | kPredOnly},
      {"reduce-scatter add", kNumeric},
      {"all-reduce-start add", kNumeric},
      // Narrower than XLA, which factors and solves f16, bf16 and complex too.
      {"cholesky", Of({DType::kF32, DType::kF64})},
      {"triangular-solve", Of({DType::kF32, DType::kF64})},
      {"batch-norm-training", kFloats},
      {"batch-norm-inference", kFloats},
      {"batch-norm-grad", kFloats},
      {"reduce-precision", kFloats},
  };
  rows.insert(rows.end(), arithmetic.begin(), arithmetic.end());
  return rows;
}

// ---- the sweep: parse, record acceptance, compile, run, compare -------------

struct Trial {
  std::vector<std::vector<Array>> args;     // per partition
  std::vector<std::vector<Array>> results;  // the root's array leaves, per partition
};
Trial On1(std::vector<Array> args, std::vector<Array> results) {
  return {{std::move(args)}, {std::move(results)}};
}
Trial On2(std::vector<Array> args0, std::vector<Array> args1, std::vector<Array> results0,
          std::vector<Array> results1) {
  return {{std::move(args0), std::move(args1)}, {std::move(results0), std::move(results1)}};
}

using Names = std::vector<std::pair<std::string, std::string>>;
std::string Hlo(std::string text, const Names& names) {
  for (const auto& [from, to] : names) {
    for (size_t at = text.find(from); at != std::string::npos;
         at = text.find(from, at + to.size())) {
      text.replace(at, from.size(), to);
    }
  }
  return text;
}

// An HLO module: `computations`, then ENTRY e of `entry` (its lines).
std::string Module(const std::string& entry, const std::string& computations = "",
                   int partitions = 1) {
  return "HloModule m" + (partitions > 1 ? ", num_partitions=" + std::to_string(partitions) : "") +
         "\n" + computations + "ENTRY e {\n" + entry + "}\n";
}

const Client& Mesh() {
  static Client client(2, 1);
  return client;
}

const Row* RowNamed(const std::string& name) {
  static const std::vector<Row> table = Table();
  for (const Row& row : table) {
    if (row.name == name) return &row;
  }
  return nullptr;
}

class Sweep {
 public:
  Opcode op = Opcode::kParameter;  // the opcode being swept

  // `text` (dtype t, the $t in it, in the role `row` names) fails the
  // shape rules, or compiles with the passes off and on and gives each
  // trial's results.
  void CheckTrials(const std::string& row, DType t, std::string text,
                   const std::vector<Trial>& trials, bool bit_exact = true) {
    text = Hlo(text, {{"$t", Name(t)}});
    SCOPED_TRACE(row + " on " + Name(t) + ":\n" + text);
    std::unique_ptr<hlo::Module> module;
    try {
      module = hlo::ParseModule(text);
    } catch (const InternalError& e) {
      ADD_FAILURE() << "an internal check fired instead of a shape rule: " << e.what();
      return;
    } catch (const Error&) {  // not accepted; Table() says whether it should be
    }
    auto [seen, fresh] = accepted_[row].emplace(t, module != nullptr);
    if (!fresh && seen->second != (module != nullptr)) {
      ADD_FAILURE() << "the programs of one row disagree on whether " << Name(t) << " is accepted";
    }
    const Row* expected = RowNamed(row);
    if (!module || !expected) return;  // ExpectTable() reports a missing row
    const bool rejected_at_compile = In(expected->compile_rejects, t);
    for (bool passes : {false, true}) {
      SCOPED_TRACE(passes ? "passes on" : "passes off (nothing folded)");
      compiler::CompileOptions options;
      options.run_passes = passes;
      if (module->num_partitions() > 1) options.client = &Mesh();
      std::unique_ptr<Executable> exe;
      try {
        exe = compiler::Compile(*module, options);
      } catch (const InternalError& e) {
        ADD_FAILURE() << "an internal check fired instead of a strata::Error: " << e.what();
        continue;
      } catch (const Error& e) {
        // Not supported by the CPU runtime yet (Table()'s compile_rejects):
        // an Error naming the dtype, never something else computed.
        EXPECT_TRUE(rejected_at_compile) << "accepted but it does not compile: " << e.what();
        EXPECT_NE(std::string(e.what()).find(Name(t)), std::string::npos) << e.what();
        continue;
      }
      EXPECT_FALSE(rejected_at_compile)
          << "it compiles now: once the values below match, take it out of compile_rejects";
      for (const Trial& trial : trials) Run(*exe, trial, bit_exact);
      checked_.insert({op, t});
    }
  }

  // One run on one device.
  void Check(const std::string& row, DType t, const std::string& text, std::vector<Array> args,
             std::vector<Array> results, bool bit_exact = true) {
    CheckTrials(row, t, text, {On1(std::move(args), std::move(results))}, bit_exact);
  }

  // The acceptance observed, row by row and dtype by dtype, against Table().
  void ExpectTable() const {
    for (const Row& row : Table()) {
      auto observed = accepted_.find(row.name);
      for (DType t : AllDTypes()) {
        if (observed == accepted_.end() || !observed->second.count(t)) {
          ADD_FAILURE() << row.name << " was not tried on " << Name(t);
        } else if (observed->second.at(t) != In(row.accepts, t)) {
          ADD_FAILURE() << row.name << " on " << Name(t)
                        << (observed->second.at(t)
                                ? ": the shape rules accept it; XLA's semantics do not"
                                : ": the shape rules reject it; XLA's semantics allow it");
        }
      }
    }
    for (const auto& [name, observed] : accepted_) {
      if (!RowNamed(name)) ADD_FAILURE() << "no row \"" << name << "\" in Table()";
    }
  }

  const std::set<std::pair<Opcode, DType>>& checked() const { return checked_; }

 private:
  static void Run(const Executable& exe, const Trial& trial, bool bit_exact) {
    const int64_t partitions = static_cast<int64_t>(trial.args.size());
    std::vector<std::vector<Buffer>> args(partitions), out;
    std::vector<const Device*> devices;
    for (int64_t p = 0; p < partitions; ++p) {
      devices.push_back(partitions == 1 ? test::Cpu() : Mesh().device(static_cast<int>(p)));
      for (const Array& a : trial.args[p]) {
        args[p].push_back(a.ToBuffer(devices[p]));
      }
    }
    try {
      if (partitions == 1) {
        out = {exe.Run(args[0])};
      } else {
        auto communicator = MakeInProcessCommunicator(partitions, std::chrono::seconds(10));
        out = exe.RunPartitioned(args, devices, *communicator);
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << "the run failed: " << e.what();
      return;
    }
    for (int64_t p = 0; p < partitions; ++p) {
      ASSERT_EQ(out[p].size(), trial.results[p].size());
      for (size_t k = 0; k < out[p].size(); ++k) {
        EXPECT_TRUE(Matches(trial.results[p][k], out[p][k], bit_exact))
            << "partition " << p << ", result leaf " << k;
      }
    }
  }

  std::map<std::string, std::map<DType, bool>> accepted_;
  std::set<std::pair<Opcode, DType>> checked_;
};

// ---- the cases: one per opcode, HLO text with $t for the dtype ---------------

const std::vector<DType> kIndexTypes = {DType::kS32, DType::kS64};

// A to_apply r(a, b) applying `op`.
std::string Reducer(const std::string& op) {
  return "r {\n  a = $t[] parameter(0)\n  b = $t[] parameter(1)\n  ROOT c = $t[] " + op +
         "(a, b)\n}\n";
}

void Parameter(Sweep& s, DType t) {
  const Array x = Sample(t, {2, 3});
  s.Check("parameter", t, Module("  ROOT x = $t[2,3] parameter(0)\n"), {x}, {x});
}

std::string Literal(DType t, Real v) {  // as XLA's text writes it
  if (t == DType::kPred) return v != 0 ? "true" : "false";
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (IsInteger(t) && v < 0) return std::to_string(static_cast<int64_t>(v));
  if (IsInteger(t)) return std::to_string(static_cast<uint64_t>(v));
  std::ostringstream os;
  os.precision(25);
  os << v;
  return os.str();
}

void Constant(Sweep& s, DType t) {
  const std::vector<Real> values = Corners(t);
  std::string literal;
  for (Real v : values) literal += (literal.empty() ? "" : ", ") + Literal(t, v);
  const std::string n = std::to_string(values.size());
  s.Check("constant", t, Module("  ROOT c = $t[" + n + "] constant({" + literal + "})\n"), {},
          {Values(t, values)}, /*bit_exact=*/false);
}

void Iota(Sweep& s, DType t) {
  const std::string entry = R"(  rows = $t[2,3] iota(), iota_dimension=0
  cols = $t[2,3] iota(), iota_dimension=1
  ROOT r = ($t[2,3], $t[2,3]) tuple(rows, cols)
)";
  s.Check("iota", t, Module(entry), {},
          {Tabulate(t, {2, 3}, [](const Index& i) { return i[0]; }),
           Tabulate(t, {2, 3}, [](const Index& i) { return i[1]; })});
}

// Every source dtype (t) to every destination: the corner cases of each.
void Convert(Sweep& s, DType t) {
  const Array x = Values(t, Corners(t));
  for (DType to : AllDTypes()) {
    const std::string entry = Hlo("  x = $t[$n] parameter(0)\n  ROOT r = $u[$n] convert(x)\n",
                                  {{"$u", Name(to)}, {"$n", std::to_string(x.size())}});
    const Array r = Tabulate(to, x.shape.dims(),
                             [&](const Index& i) { return ConvertValue(Get(x, i), t, to); });
    s.Check("convert to " + Name(to), t, Module(entry), {x}, {r}, /*bit_exact=*/false);
  }
}

void BitcastConvert(Sweep& s, DType t) {
  const Array x = Values(t, Corners(t));  // an integer -1 is a NaN as a float
  for (DType to : AllDTypes()) {
    const std::string entry =
        Hlo("  x = $t[$n] parameter(0)\n  ROOT r = $u[$n] bitcast-convert(x)\n",
            {{"$u", Name(to)}, {"$n", std::to_string(x.size())}});
    Array r(to, x.shape.dims());  // the same bytes
    std::memcpy(r.bytes.data(), x.bytes.data(), std::min(x.bytes.size(), r.bytes.size()));
    s.Check("bitcast-convert to " + Name(to), t, Module(entry), {x}, {r});
  }
}

void Broadcast(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[3] parameter(0)
  v = $t[] parameter(1)
  a = $t[2,3,2] broadcast(x), dimensions={1}
  b = $t[2,2] broadcast(v), dimensions={}
  ROOT r = ($t[2,3,2], $t[2,2]) tuple(a, b)
)";
  const Array x = Sample(t, {3}), v = Sample(t, {}, 3);
  s.Check("broadcast", t, Module(entry), {x, v},
          {Moved(t, {2, 3, 2}, [&](const Index& i) { return x.at(i[1]); }),
           Moved(t, {2, 2}, [&](const Index&) { return v.at(0); })});
}

void Reshape(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[2,3] parameter(0)
  a = $t[3,2] reshape(x)
  b = $t[1,6,1] reshape(x)
  ROOT r = ($t[3,2], $t[1,6,1]) tuple(a, b)
)";
  const Array x = Sample(t, {2, 3});
  Array a = x, b = x;  // the same bytes in row-major order
  a.shape = Shape(t, {3, 2});
  b.shape = Shape(t, {1, 6, 1});
  s.Check("reshape", t, Module(entry), {x}, {a, b});
}

void Transpose(Sweep& s, DType t) {
  const Array x = Sample(t, {2, 3, 4});
  s.Check("transpose", t,
          Module("  x = $t[2,3,4] parameter(0)\n"
                 "  ROOT r = $t[4,2,3] transpose(x), dimensions={2,0,1}\n"),
          {x}, {Permuted(x, {2, 0, 1})});
}

void Copy(Sweep& s, DType t) {
  const Array x = Sample(t, {5});
  s.Check("copy", t, Module("  x = $t[5] parameter(0)\n  ROOT r = $t[5] copy(x)\n"), {x}, {x});
}

void Slice(Sweep& s, DType t) {
  const Array x = Sample(t, {4, 6});
  s.Check("slice", t,
          Module("  x = $t[4,6] parameter(0)\n"
                 "  ROOT r = $t[2,2] slice(x), slice={[1:4:2], [0:6:3]}\n"),
          {x}, {Moved(t, {2, 2}, [&](const Index& i) {
            return x.at({1 + 2 * i[0], 3 * i[1]});
          })});
}

// Start indices out of range are clamped so the slice fits (XLA).
void DynamicSlice(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[4,5] parameter(0)
  i = $i[] parameter(1)
  j = $i[] parameter(2)
  ROOT r = $t[2,3] dynamic-slice(x, i, j), dynamic_slice_sizes={2,3}
)";
  const Array x = Sample(t, {4, 5});
  for (DType it : kIndexTypes) {
    std::vector<Trial> trials;
    for (auto [i, j] : std::vector<std::pair<int, int>>{{1, 1}, {3, 4}, {-1, -7}, {0, 9}}) {
      const int64_t ci = std::clamp(i, 0, 2), cj = std::clamp(j, 0, 2);
      trials.push_back(
          On1({x, Scalar(it, i), Scalar(it, j)}, {Moved(t, {2, 3}, [&](const Index& o) {
                return x.at({ci + o[0], cj + o[1]});
              })}));
    }
    s.CheckTrials("dynamic-slice", t, Module(Hlo(entry, {{"$i", Name(it)}})), trials);
  }
}

void DynamicUpdateSlice(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[4,5] parameter(0)
  u = $t[2,2] parameter(1)
  i = $i[] parameter(2)
  j = $i[] parameter(3)
  ROOT r = $t[4,5] dynamic-update-slice(x, u, i, j)
)";
  const Array x = Sample(t, {4, 5}), u = Sample(t, {2, 2}, 1);
  for (DType it : kIndexTypes) {
    std::vector<Trial> trials;
    for (auto [i, j] : std::vector<std::pair<int, int>>{{1, 2}, {5, 4}, {-3, 0}}) {
      const int64_t ci = std::clamp(i, 0, 2), cj = std::clamp(j, 0, 3);
      trials.push_back(
          On1({x, u, Scalar(it, i), Scalar(it, j)}, {Moved(t, {4, 5}, [&](const Index& o) {
                const int64_t a = o[0] - ci, b = o[1] - cj;
                return a >= 0 && a < 2 && b >= 0 && b < 2 ? u.at({a, b}) : x.at(o);
              })}));
    }
    s.CheckTrials("dynamic-update-slice", t, Module(Hlo(entry, {{"$i", Name(it)}})), trials);
  }
}

void Concatenate(Sweep& s, DType t) {
  const std::string entry = R"(  a = $t[2,2] parameter(0)
  b = $t[2,3] parameter(1)
  c = $t[2,1] parameter(2)
  wide = $t[2,6] concatenate(a, b, c), dimensions={1}
  tall = $t[4,2] concatenate(a, a), dimensions={0}
  ROOT r = ($t[2,6], $t[4,2]) tuple(wide, tall)
)";
  const Array a = Sample(t, {2, 2}), b = Sample(t, {2, 3}, 1), c = Sample(t, {2, 1}, 2);
  const Array wide = Moved(t, {2, 6}, [&](const Index& i) {
    return i[1] < 2 ? a.at(i) : i[1] < 5 ? b.at({i[0], i[1] - 2}) : c.at({i[0], 0});
  });
  const Array tall = Moved(t, {4, 2}, [&](const Index& i) { return a.at({i[0] % 2, i[1]}); });
  s.Check("concatenate", t, Module(entry), {a, b, c}, {wide, tall});
}

// Dim 0: one before, two after, one between; dim 1: the first cut, one after.
void Pad(Sweep& s, DType t) {
  const Array x = Sample(t, {2, 3}), v = Sample(t, {}, 5);
  const Index low = {1, -1}, step = {2, 1};
  const Array r = Moved(t, {6, 3}, [&](const Index& o) {
    Index from(2);
    for (int d = 0; d < 2; ++d) {
      const int64_t p = o[d] - low[d];
      if (p < 0 || p % step[d] != 0 || p / step[d] >= x.shape.dim(d)) return v.at(0);
      from[d] = p / step[d];
    }
    return x.at(from);
  });
  s.Check("pad", t,
          Module("  x = $t[2,3] parameter(0)\n  v = $t[] parameter(1)\n"
                 "  ROOT r = $t[6,3] pad(x, v), padding=1_2_1x-1_1_0\n"),
          {x, v}, {r});
}

void Reverse(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[2,3] parameter(0)
  a = $t[2,3] reverse(x), dimensions={1}
  b = $t[2,3] reverse(x), dimensions={0,1}
  ROOT r = ($t[2,3], $t[2,3]) tuple(a, b)
)";
  const Array x = Sample(t, {2, 3});
  s.Check("reverse", t, Module(entry), {x},
          {Moved(t, {2, 3},
                 [&](const Index& i) {
                   return x.at({i[0], 2 - i[1]});
                 }),
           Moved(t, {2, 3}, [&](const Index& i) {
             return x.at({1 - i[0], 2 - i[1]});
           })});
}

void Select(Sweep& s, DType t) {
  const std::string entry = R"(  p = pred[6] parameter(0)
  x = $t[6] parameter(1)
  y = $t[6] parameter(2)
  q = pred[] parameter(3)
  v = $t[] parameter(4)
  each = $t[6] select(p, x, y)
  all = $t[6] select(q, x, y)
  bv = $t[6] broadcast(v), dimensions={}
  scalar = $t[6] select(p, bv, y)
  ROOT r = ($t[6], $t[6], $t[6]) tuple(each, all, scalar)
)";
  const Array p = Values(DType::kPred, {1, 0, 0, 1, 1, 0}), x = Sample(t, {6});
  const Array y = Sample(t, {6}, 1), v = Sample(t, {}, 2);
  const Array each = Moved(t, {6}, [&](const Index& i) { return Get(p, i) ? x.at(i) : y.at(i); });
  const Array scalar = Moved(t, {6}, [&](const Index& i) { return Get(p, i) ? v.at(0) : y.at(i); });
  s.CheckTrials("select", t, Module(entry),
                {On1({p, x, y, Scalar(DType::kPred, 1), v}, {each, x, scalar}),
                 On1({p, x, y, Scalar(DType::kPred, 0), v}, {each, y, scalar})});
}

// Every pair of values in every direction (XLA's default order for floats:
// NaN is unequal to everything, -0 equals 0).
void Compare(Sweep& s, DType t) {
  const std::vector<Real> values = Keep(t, {0, -0.0L, 1, -1, 2.5, 7, 255, Max(t), Max(t) - 1,
                                            Lowest(t), Lowest(t) + 1, INFINITY, -INFINITY, NAN});
  std::vector<Real> a, b;
  for (Real x : values) {
    for (Real y : values) {
      a.push_back(x);
      b.push_back(y);
    }
  }
  std::string entry = "  x = $t[$n] parameter(0)\n  y = $t[$n] parameter(1)\n";
  for (const char* direction : {"EQ", "NE", "LT", "LE", "GT", "GE"}) {
    entry +=
        "  " + std::string(direction) + " = pred[$n] compare(x, y), direction=" + direction + "\n";
  }
  entry +=
      "  ROOT r = (pred[$n], pred[$n], pred[$n], pred[$n], pred[$n], pred[$n]) "
      "tuple(EQ, NE, LT, LE, GT, GE)\n";
  std::vector<Array> results;
  for (const std::function<bool(Real, Real)>& holds : std::vector<std::function<bool(Real, Real)>>{
           std::equal_to<Real>(), std::not_equal_to<Real>(), std::less<Real>(),
           std::less_equal<Real>(), std::greater<Real>(), std::greater_equal<Real>()}) {
    results.push_back(Tabulate(DType::kPred, {static_cast<int64_t>(a.size())},
                               [&](const Index& i) { return holds(a[i[0]], b[i[0]]); }));
  }
  s.Check("compare", t, Module(Hlo(entry, {{"$n", std::to_string(a.size())}})),
          {Values(t, a), Values(t, b)}, results);
}

// clamp(lo, x, hi) = min(max(x, lo), hi), with arrays and with scalars as bounds.
void Clamp(Sweep& s, DType t) {
  const std::string entry = R"(  lo = $t[$n] parameter(0)
  x = $t[$n] parameter(1)
  hi = $t[$n] parameter(2)
  slo = $t[] parameter(3)
  shi = $t[] parameter(4)
  arrays = $t[$n] clamp(lo, x, hi)
  scalars = $t[$n] clamp(slo, x, shi)
  ROOT r = ($t[$n], $t[$n]) tuple(arrays, scalars)
)";
  const std::vector<Real> xs =
      Keep(t, {0, 1, -1, 2.5, 7, -7, 100, Max(t), Lowest(t), INFINITY, -INFINITY, NAN});
  const std::vector<Real> lows = Keep(t, {-1, 0, 1, 2}), highs = Keep(t, {1, 7, 100});
  const int64_t n = static_cast<int64_t>(xs.size());
  auto clamp = [&](Real lo, Real x, Real hi) {
    return Apply(Opcode::kMinimum, t, Apply(Opcode::kMaximum, t, x, lo), hi);
  };
  const Array lo = Tabulate(t, {n}, [&](const Index& i) { return lows[i[0] % lows.size()]; });
  const Array hi = Tabulate(t, {n}, [&](const Index& i) { return highs[i[0] % highs.size()]; });
  const Array arrays =
      Tabulate(t, {n}, [&](const Index& i) { return clamp(Get(lo, i), xs[i[0]], Get(hi, i)); });
  const Array scalars =
      Tabulate(t, {n}, [&](const Index& i) { return clamp(lows[0], xs[i[0]], highs.back()); });
  s.Check("clamp", t, Module(Hlo(entry, {{"$n", std::to_string(n)}})),
          {lo, Values(t, xs), hi, Scalar(t, lows[0]), Scalar(t, highs.back())}, {arrays, scalars},
          /*bit_exact=*/false);
}

void IsFinite(Sweep& s, DType t) {
  const Array x = Values(t, Corners(t));
  const std::string entry = Hlo("  x = $t[$n] parameter(0)\n  ROOT r = pred[$n] is-finite(x)\n",
                                {{"$n", std::to_string(x.size())}});
  s.Check("is-finite", t, Module(entry), {x},
          {Tabulate(DType::kPred, x.shape.dims(),
                    [&](const Index& i) { return std::isfinite(Get(x, i)); })});
}

// A [3,4] reduced along each dim and along both, folded in row-major order.
void ReduceWith(Sweep& s, DType t, const std::string& row, Opcode op, const std::string& reducer,
                const Array& x, Real init) {
  const std::string entry = R"(  x = $t[3,4] parameter(0)
  init = $t[] parameter(1)
  rows = $t[3] reduce(x, init), dimensions={1}, to_apply=r
  cols = $t[4] reduce(x, init), dimensions={0}, to_apply=r
  all = $t[] reduce(x, init), dimensions={0,1}, to_apply=r
  ROOT out = ($t[3], $t[4], $t[]) tuple(rows, cols, all)
)";
  // Halves accumulate in f32 and round once (XLA's CPU backend).
  const DType wide = ComputedIn(t);
  auto fold = [&](int64_t first, int64_t count, int64_t stride) {
    Real acc = init;
    for (int64_t k = 0; k < count; ++k) acc = Apply(op, wide, acc, Get(x, first + k * stride));
    return wide == t ? acc : RoundTo(FormatOf(t), acc);
  };
  s.Check(row, t, Module(entry, reducer), {x, Scalar(t, init)},
          {Tabulate(t, {3}, [&](const Index& i) { return fold(4 * i[0], 4, 1); }),
           Tabulate(t, {4}, [&](const Index& i) { return fold(i[0], 3, 4); }),
           Scalar(t, fold(0, 12, 1))},
          /*bit_exact=*/false);
}

void Reduce(Sweep& s, DType t) {
  Array sums = Numbers(t, {3, 4});
  Set(sums, 0, Max(t));  // row 0 wraps around for integers (stays the largest float)
  ReduceWith(s, t, "reduce add", Opcode::kAdd, Reducer("add"), sums, 0);
  const Array small = Tabulate(t, {3, 4}, [&](const Index& i) {
    const Real v = (i[0] * 4 + i[1]) % 3 + 1;
    return (i[0] + i[1]) % 4 == 1 && !IsUnsignedInteger(t) ? -v : v;
  });
  ReduceWith(s, t, "reduce multiply", Opcode::kMultiply, Reducer("multiply"), small, 1);
  Array maxima = Numbers(t, {3, 4});
  if (IsFloating(t)) {  // the NaN wins its row and column, -inf loses
    Set(maxima, 6, NAN);
    Set(maxima, 8, -INFINITY);
  }
  ReduceWith(s, t, "reduce maximum", Opcode::kMaximum, Reducer("maximum"), maxima,
             IsFloating(t) ? -INFINITY : Lowest(t));
  ReduceWith(s, t, "reduce and", Opcode::kAnd, Reducer("and"), Numbers(t, {3, 4}), Wrap(t, -1));
  ReduceWith(s, t, "reduce or", Opcode::kOr, Reducer("or"), Numbers(t, {3, 4}), 0);
  const std::string by_select = R"(r {
  a = $t[] parameter(0)
  b = $t[] parameter(1)
  gt = pred[] compare(a, b), direction=GT
  ROOT c = $t[] select(gt, a, b)
}
)";
  ReduceWith(s, t, "reduce by select", Opcode::kMaximum, by_select, Numbers(t, {3, 4}), Lowest(t));
}

// Plain; batched; both operands stored transposed; through a transpose (the
// passes fold it into the dot); one that wraps around.
void Dot(Sweep& s, DType t) {
  const std::string entry = R"(  a = $t[2,3] parameter(0)
  b = $t[3,4] parameter(1)
  ba = $t[2,2,3] parameter(2)
  bb = $t[2,3,2] parameter(3)
  ta = $t[3,2] parameter(4)
  tb = $t[4,3] parameter(5)
  wa = $t[1,2] parameter(6)
  wb = $t[2,1] parameter(7)
  plain = $t[2,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  batched = $t[2,2,2] dot(ba, bb), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
  transposed = $t[2,4] dot(ta, tb), lhs_contracting_dims={0}, rhs_contracting_dims={1}
  at = $t[2,3] transpose(ta), dimensions={1,0}
  through = $t[2,4] dot(at, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  wraps = $t[1,1] dot(wa, wb), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT r = ($t[2,4], $t[2,2,2], $t[2,4], $t[2,4], $t[1,1]) tuple(plain, batched, transposed, through, wraps)
)";
  const Array a = Numbers(t, {2, 3}), b = Numbers(t, {3, 4}, 1), ba = Numbers(t, {2, 2, 3}, 2);
  const Array bb = Numbers(t, {2, 3, 2}, 3), ta = Numbers(t, {3, 2}, 4), tb = Numbers(t, {4, 3}, 5);
  const Array wa = Tabulate(t, {1, 2}, [&](const Index& i) { return i[1] ? 1 : Max(t); });
  const Array wb = Tabulate(t, {2, 1}, [&](const Index& i) { return i[0] ? 1 : 2; });
  const Array at = Permuted(ta, {1, 0}), bt = Permuted(tb, {1, 0});
  s.Check("dot", t, Module(entry), {a, b, ba, bb, ta, tb, wa, wb},
          {MatMul(t, a, b, {2, 4}, 3), MatMul(t, ba, bb, {2, 2, 2}, 3),
           MatMul(t, at, bt, {2, 4}, 3), MatMul(t, at, b, {2, 4}, 3), MatMul(t, wa, wb, {1, 1}, 2)},
          /*bit_exact=*/false);
}

// Pairs along dim 1 summed (the same wraparound as reduce add).
void ReduceWindow(Sweep& s, DType t) {
  Array x = Numbers(t, {3, 4});
  Set(x, 0, Max(t));
  const std::string entry = R"(  x = $t[3,4] parameter(0)
  init = $t[] parameter(1)
  ROOT pairs = $t[3,2] reduce-window(x, init), window={size=1x2 stride=1x2}, to_apply=r
)";
  s.Check("reduce-window add", t, Module(entry, Reducer("add")), {x, Scalar(t, 0)},
          {Tabulate(t, {3, 2},
                    [&](const Index& i) {
                      return Apply(Opcode::kAdd, t, Get(x, i[0] * 4 + 2 * i[1]),
                                   Get(x, i[0] * 4 + 2 * i[1] + 1));
                    })},
          /*bit_exact=*/false);
}

// Each pair's source value lands on the element select keeps: the first
// while it is >= the second (not when either is NaN), added to init 0.
void SelectAndScatter(Sweep& s, DType t) {
  const Array x = Numbers(t, {3, 4}), source = Numbers(t, {3, 2}, 1);
  const std::string entry = R"(  x = $t[3,4] parameter(0)
  source = $t[3,2] parameter(1)
  init = $t[] parameter(2)
  ROOT spread = $t[3,4] select-and-scatter(x, source, init), window={size=1x2 stride=1x2}, select=ge, scatter=r
)";
  const std::string select =
      "ge {\n  a = $t[] parameter(0)\n  b = $t[] parameter(1)\n  ROOT c = "
      "pred[] compare(a, b), direction=GE\n}\n";
  s.Check("select-and-scatter", t, Module(entry, select + Reducer("add")),
          {x, source, Scalar(t, 0)},
          {Tabulate(t, {3, 4},
                    [&](const Index& i) {
                      const int64_t first = i[0] * 4 + (i[1] / 2) * 2;
                      const bool first_wins = Get(x, first) >= Get(x, first + 1);  // NaN: no
                      const bool chosen = (i[1] % 2 == 0) == first_wins;
                      return chosen ? Apply(Opcode::kAdd, t, 0, Get(source, i[0] * 2 + i[1] / 2))
                                    : Real(0);
                    })},
          /*bit_exact=*/false);
}

// Each row of x (with pred's repeats, ties kept in order) sorted by a
// comparator run natively (one compare) and by one that is compiled (the
// same order through not(ge), so compare's own dtypes apply); the s32
// positions travel with it.
void Sort(Sweep& s, DType t) {
  const Array x = Numbers(t, {2, 5}, 2);
  const Array positions = Tabulate(DType::kS32, {2, 5}, [](const Index& i) { return i[1]; });
  const std::string entry = R"(  x = $t[2,5] parameter(0)
  i = s32[2,5] parameter(1)
  ROOT r = ($t[2,5], s32[2,5]) sort(x, i), dimensions={1}, is_stable=true, to_apply=lt
)";
  std::vector<std::vector<int64_t>> order(2);
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t k = 0; k < 5; ++k) order[r].push_back(k);
    std::stable_sort(order[r].begin(), order[r].end(),
                     [&](int64_t a, int64_t b) { return Get(x, r * 5 + a) < Get(x, r * 5 + b); });
  }
  const std::vector<Array> want = {
      Tabulate(t, {2, 5}, [&](const Index& i) { return Get(x, i[0] * 5 + order[i[0]][i[1]]); }),
      Tabulate(DType::kS32, {2, 5}, [&](const Index& i) { return Real(order[i[0]][i[1]]); })};
  const std::string params =
      "  a = $t[] parameter(0)\n  b = $t[] parameter(1)\n  c = s32[] parameter(2)\n"
      "  d = s32[] parameter(3)\n";
  s.Check("sort", t,
          Module(entry, "lt {\n" + params + "  ROOT r = pred[] compare(a, b), direction=LT\n}\n"),
          {x, positions}, want);
  s.Check("sort compiled comparator", t,
          Module(entry,
                 "lt {\n" + params +
                     "  ge = pred[] compare(a, b), direction=GE\n  ROOT r = pred[] not(ge)\n}\n"),
          {x, positions}, want);
}

// The two largest of each row (ties: the earlier), with their positions.
void TopK(Sweep& s, DType t) {
  const Array x = Numbers(t, {2, 5}, 3);
  const std::string entry = R"(  x = $t[2,5] parameter(0)
  ROOT r = ($t[2,2], s32[2,2]) topk(x), k=2, largest=true
)";
  std::vector<std::vector<int64_t>> order(2);
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t k = 0; k < 5; ++k) order[r].push_back(k);
    std::stable_sort(order[r].begin(), order[r].end(),
                     [&](int64_t a, int64_t b) { return Get(x, r * 5 + a) > Get(x, r * 5 + b); });
  }
  s.Check(
      "topk", t, Module(entry), {x},
      {Tabulate(t, {2, 2}, [&](const Index& i) { return Get(x, i[0] * 5 + order[i[0]][i[1]]); }),
       Tabulate(DType::kS32, {2, 2}, [&](const Index& i) { return Real(order[i[0]][i[1]]); })});
}

// A window of one over a spatial dim of one: out[b, f] = sum_i x[b, i] k[i, f],
// a product the matrix reference gives (the window arithmetic is tested in
// convolution_test.cc; this is every dtype's arithmetic and acceptance).
void Convolution(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[2,1,3] parameter(0)
  k = $t[1,3,4] parameter(1)
  ROOT c = $t[1,2,4] convolution(x, k), window={size=1}, dim_labels=b0f_0io->0bf
)";
  const Array x = Numbers(t, {2, 1, 3}), k = Numbers(t, {1, 3, 4}, 1);
  s.Check("convolution", t, Module(entry), {x, k}, {MatMul(t, x, k, {1, 2, 4}, 3)},
          /*bit_exact=*/false);
}

// Rows by index, and windows by two; start indices are clamped so each
// slice fits (XLA).
void Gather(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[5,3] parameter(0)
  rows = $i[4,1] parameter(1)
  y = $t[5,4] parameter(2)
  windows = $i[3,2] parameter(3)
  a = $t[4,3] gather(x, rows), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,3}
  b = $t[3,2,3] gather(y, windows), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0,1}, index_vector_dim=1, slice_sizes={2,3}
  ROOT r = ($t[4,3], $t[3,2,3]) tuple(a, b)
)";
  const Array x = Sample(t, {5, 3}), y = Sample(t, {5, 4}, 1);
  const Index rows = {1, 4, 7, -2}, windows = {0, 1, 4, 3, -1, -5};
  auto clamp = [](int64_t v, int64_t hi) { return std::clamp<int64_t>(v, 0, hi); };
  const Array a = Moved(t, {4, 3}, [&](const Index& o) {
    return x.at({clamp(rows[o[0]], 4), o[1]});
  });
  const Array b = Moved(t, {3, 2, 3}, [&](const Index& o) {
    return y.at({clamp(windows[2 * o[0]], 3) + o[1], clamp(windows[2 * o[0] + 1], 1) + o[2]});
  });
  for (DType it : kIndexTypes) {
    s.Check("gather", t, Module(Hlo(entry, {{"$i", Name(it)}})),
            {x, Tabulate(it, {4, 1}, [&](const Index& i) { return rows[i[0]]; }), y,
             Tabulate(it, {3, 2}, [&](const Index& i) { return windows[2 * i[0] + i[1]]; })},
            {a, b});
  }
}

// Rows scattered by row index and a [2,2] window by both indices; a window
// that does not fit is skipped whole (XLA), repeated indices combine in
// order. Without `op`, updates overwrite.
void ScatterWith(Sweep& s, DType t, const std::string& row, std::optional<Opcode> op,
                 const std::string& reducer, const Index& rows) {
  const std::string entry = R"(  x = $t[5,3] parameter(0)
  idx = $i[4,1] parameter(1)
  upd = $t[4,3] parameter(2)
  y = $t[4,4] parameter(3)
  widx = $i[2,2] parameter(4)
  wupd = $t[2,2,2] parameter(5)
  rows = $t[5,3] scatter(x, idx, upd), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=r
  windows = $t[4,4] scatter(y, widx, wupd), update_window_dims={1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, to_apply=r
  ROOT out = ($t[5,3], $t[4,4]) tuple(rows, windows)
)";
  auto data = [&](Index dims, int salt) {
    return op ? Numbers(t, dims, salt) : Sample(t, dims, salt);
  };
  Array x = data({5, 3}, 0);
  if (op) Set(x, 3, Max(t));  // [1, 0]: integer adds wrap around
  const Array upd = data({4, 3}, 1), y = data({4, 4}, 2), wupd = data({2, 2, 2}, 3);
  const Index windows = {1, 2, 3, 3};  // the second does not fit
  auto combine = [&](Array& out, const Index& at, const Array& from, const Index& index) {
    if (!op) {
      std::memcpy(out.at(at), from.at(index), DTypeSize(t));
    } else {
      Set(out, test::Ravel(at, out.shape.dims()), Apply(*op, t, Get(out, at), Get(from, index)));
    }
  };
  Array scattered_rows = x, scattered_window = y;
  for (int64_t u = 0; u < 4; ++u) {
    for (int64_t c = 0; c < 3 && rows[u] >= 0 && rows[u] <= 4; ++c) {
      combine(scattered_rows, {rows[u], c}, upd, {u, c});
    }
  }
  for (int64_t i = 0; i < 4; ++i) {
    combine(scattered_window, {1 + i / 2, 2 + i % 2}, wupd, {0, i / 2, i % 2});
  }
  for (DType it : kIndexTypes) {
    s.Check(row, t, Module(Hlo(entry, {{"$i", Name(it)}}), reducer),
            {x, Tabulate(it, {4, 1}, [&](const Index& i) { return rows[i[0]]; }), upd, y,
             Tabulate(it, {2, 2}, [&](const Index& i) { return windows[2 * i[0] + i[1]]; }), wupd},
            {scattered_rows, scattered_window}, /*bit_exact=*/!op);
  }
}

void Scatter(Sweep& s, DType t) {
  const std::string overwrite = "r {\n  a = $t[] parameter(0)\n  ROOT b = $t[] parameter(1)\n}\n";
  ScatterWith(s, t, "scatter overwrite", std::nullopt, overwrite, {3, 0, 9, -1});
  ScatterWith(s, t, "scatter add", Opcode::kAdd, Reducer("add"), {1, 1, 4, -1});
  ScatterWith(s, t, "scatter or", Opcode::kOr, Reducer("or"), {1, 1, 4, -1});
}

void Tuple(Sweep& s, DType t) {
  const Array a = Sample(t, {2}), b = Sample(t, {3}, 1);
  s.Check("tuple", t,
          Module("  a = $t[2] parameter(0)\n  b = $t[3] parameter(1)\n"
                 "  ROOT r = ($t[2], $t[3]) tuple(a, b)\n"),
          {a, b}, {a, b});
}

void GetTupleElement(Sweep& s, DType t) {
  const std::string entry = R"(  p = ($t[2], $t[3]) parameter(0)
  first = $t[2] get-tuple-element(p), index=0
  second = $t[3] get-tuple-element(p), index=1
  swapped = ($t[3], $t[2]) tuple(second, first)
  back = $t[2] get-tuple-element(swapped), index=1
  ROOT r = ($t[3], $t[2]) tuple(second, back)
)";
  const Array a = Sample(t, {2}), b = Sample(t, {3}, 1);
  s.Check("get-tuple-element", t, Module(entry), {a, b}, {b, a});
}

// Three turns of a loop that rotates its value by one.
void While(Sweep& s, DType t) {
  const std::string loop = R"(condition {
  s = (s32[], $t[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT more = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], $t[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = $t[4] get-tuple-element(s), index=1
  one = s32[] constant(1)
  next = s32[] add(i, one)
  head = $t[1] slice(x), slice={[0:1]}
  tail = $t[3] slice(x), slice={[1:4]}
  rotated = $t[4] concatenate(tail, head), dimensions={0}
  ROOT out = (s32[], $t[4]) tuple(next, rotated)
}
)";
  const std::string entry = R"(  x = $t[4] parameter(0)
  zero = s32[] constant(0)
  start = (s32[], $t[4]) tuple(zero, x)
  ROOT loop = (s32[], $t[4]) while(start), condition=condition, body=body
)";
  const Array x = Sample(t, {4});
  s.Check("while", t, Module(entry, loop), {x},
          {Scalar(DType::kS32, 3),
           Moved(t, {4}, [&](const Index& i) { return x.at((i[0] + 3) % 4); })});
}

void Call(Sweep& s, DType t) {
  const std::string callee = R"(callee {
  a = $t[4] parameter(0)
  b = $t[2] parameter(1)
  reversed = $t[4] reverse(a), dimensions={0}
  ROOT r = ($t[4], $t[2]) tuple(reversed, b)
}
)";
  const std::string entry = R"(  x = $t[4] parameter(0)
  y = $t[2] parameter(1)
  ROOT c = ($t[4], $t[2]) call(x, y), to_apply=callee
)";
  const Array x = Sample(t, {4}), y = Sample(t, {2}, 1);
  s.Check("call", t, Module(entry, callee), {x, y},
          {Moved(t, {4}, [&](const Index& i) { return x.at(3 - i[0]); }), y});
}

// Values moved through the branch a selector picks: by index (out of
// range: the last branch) and by pred, on every dtype, bit for bit.
void Conditional(Sweep& s, DType t) {
  const std::string branches = R"(reversed {
  a = $t[4] parameter(0)
  ROOT r = $t[4] reverse(a), dimensions={0}
}
second {
  b = ($t[4], $t[2]) parameter(0)
  ROOT r = $t[2] get-tuple-element(b), index=1
}
kept {
  c = $t[4] parameter(0)
  ROOT r = $t[4] copy(c)
}
)";
  const std::string entry = R"(  x = $t[4] parameter(0)
  y = $t[2] parameter(1)
  i = s32[] parameter(2)
  p = pred[] parameter(3)
  pair = ($t[4], $t[2]) tuple(x, y)
  by_index = $t[4] conditional(i, x, x), branch_computations={reversed, kept}
  by_pred = $t[4] conditional(p, x, x), true_computation=reversed, false_computation=kept
  first_two = $t[2] slice(by_index), slice={[0:2]}
  tail = $t[2] conditional(i, pair), branch_computations={second}
  ROOT r = ($t[4], $t[4], $t[2], $t[2]) tuple(by_index, by_pred, first_two, tail)
)";
  const Array x = Sample(t, {4}), y = Sample(t, {2}, 1);
  const Array reversed = Moved(t, {4}, [&](const Index& i) { return x.at(3 - i[0]); });
  const Array head_of_reversed = Moved(t, {2}, [&](const Index& i) { return x.at(3 - i[0]); });
  const Array head = Moved(t, {2}, [&](const Index& i) { return x.at(i[0]); });
  auto index = [](int32_t v) { return Tabulate(DType::kS32, {}, [&](const Index&) { return v; }); };
  auto pred = [](bool v) { return Tabulate(DType::kPred, {}, [&](const Index&) { return v; }); };
  s.CheckTrials("conditional", t, Module(entry, branches),
                {On1({x, y, index(0), pred(true)}, {reversed, reversed, head_of_reversed, y}),
                 On1({x, y, index(-5), pred(false)}, {x, x, head, y}),
                 On1({x, y, index(9), pred(false)}, {x, x, head, y})});
}

void Fusion(Sweep& s, DType t) {
  const std::string fused = R"(fused {
  p0 = $t[6] parameter(0)
  p1 = $t[6] parameter(1)
  ROOT sum = $t[6] add(p0, p1)
}
)";
  const std::string entry = R"(  x = $t[6] parameter(0)
  y = $t[6] parameter(1)
  ROOT f = $t[6] fusion(x, y), kind=kLoop, calls=fused
)";
  const Array x = Numbers(t, {6}), y = Numbers(t, {6}, 1);
  s.Check("fusion add", t, Module(entry, fused), {x, y},
          {Tabulate(t, {6},
                    [&](const Index& i) { return Apply(Opcode::kAdd, t, Get(x, i), Get(y, i)); })},
          /*bit_exact=*/false);
}

void OptimizationBarrier(Sweep& s, DType t) {
  const std::string entry = R"(  a = $t[3] parameter(0)
  b = $t[2] parameter(1)
  kept = ($t[3], $t[2]) tuple(a, b)
  ROOT o = ($t[3], $t[2]) opt-barrier(kept)
)";
  const Array a = Sample(t, {3}), b = Sample(t, {2}, 1);
  s.Check("opt-barrier", t, Module(entry), {a, b}, {a, b});
}

// real and imag of a real number: the number and 0 (XLA); complex takes two
// f32 or f64 parts (complex_test.cc checks the complex types themselves).
void RealPart(Sweep& s, DType t) {
  const Array x = Sample(t, {4});
  s.Check("real", t, Module("  x = $t[4] parameter(0)\n  ROOT r = $t[4] real(x)\n"), {x}, {x});
}
void ImagPart(Sweep& s, DType t) {
  const Array x = Sample(t, {4});
  s.Check("imag", t, Module("  x = $t[4] parameter(0)\n  ROOT r = $t[4] imag(x)\n"), {x},
          {Array(t, {4})});
}
void ComplexOf(Sweep& s, DType t) {
  const Array re = Sample(t, {3}), im = Sample(t, {3}, 1);
  const DType c = t == DType::kF64 ? DType::kC128 : DType::kC64;
  const std::string entry = Hlo(R"(  re = $t[3] parameter(0)
  im = $t[3] parameter(1)
  ROOT r = $c[3] complex(re, im)
)",
                                {{"$c", Name(c)}});
  // Each element is its two parts side by side, real first (of f32 / f64,
  // the types the row accepts; others are rejected before any run).
  Array z(c, {3});
  const int64_t part = DTypeSize(t);
  for (int64_t i = 0; i < 3 && 2 * part == DTypeSize(c); ++i) {
    std::memcpy(z.at(i), re.at(i), part);
    std::memcpy(z.at(i) + part, im.at(i), part);
  }
  s.Check("complex", t, Module(entry), {re, im}, {z});
}

// A value made to wait for a token: the value, bit for bit; after-all joins
// tokens only, so an operand of any other type is rejected.
void AddDependency(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[3] parameter(0)
  first = token[] after-all()
  both = token[] after-all(first, first)
  ROOT r = $t[3] add-dependency(x, both)
)";
  const Array x = Sample(t, {3});
  s.Check("add-dependency", t, Module(entry), {x}, {x});
}
void AfterAll(Sweep& s, DType t) {
  const Array x = Sample(t, {3});
  s.Check("after-all", t, Module("  x = $t[3] parameter(0)\n  ROOT r = token[] after-all(x)\n"),
          {x}, {});
}

// A manual region's boundary in a program run whole on one device (no
// partitioner): the identity when it keeps the shape.
void CustomCall(Sweep& s, DType t) {
  const Array x = Sample(t, {2, 3});
  s.Check(
      "custom-call", t,
      Module("  x = $t[2,3] parameter(0)\n"
             "  ROOT r = $t[2,3] custom-call(x), custom_call_target=\"SPMDFullToShardShape\"\n"),
      {x}, {x});
}

// State {key, counter}: block b is Philox of the 128-bit counter
// (key << 64 | counter) + b (low word first) under the key (low word first),
// as XLA reads a two-word state; the words in order, then the next state.
void RngBitGenerator(Sweep& s, DType t) {
  std::vector<Trial> trials;
  for (auto [key, counter] : std::vector<std::pair<uint64_t, uint64_t>>{
           {0, 0}, {0x0123456789ABCDEF, 41}, {5, ~uint64_t{0}}}) {
    Array bits(t, {6});
    const int64_t words = static_cast<int64_t>(bits.bytes.size()) / 4, blocks = (words + 3) / 4;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint64_t c = counter + b, high = key + (c < counter ? 1 : 0);
      const auto block = Philox({static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32),
                                 static_cast<uint32_t>(high), static_cast<uint32_t>(high >> 32)},
                                {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
      std::memcpy(bits.at(0) + 16 * b, block.data(), std::min<int64_t>(16, 4 * (words - 4 * b)));
    }
    trials.push_back(On1({Values(DType::kU64, {Real(key), Real(counter)})},
                         {Values(DType::kU64, {Real(key), Real(counter + blocks)}), bits}));
  }
  s.CheckTrials(
      "rng-bit-generator", t,
      Module("  state = u64[2] parameter(0)\n"
             "  ROOT r = (u64[2], $t[6]) rng-bit-generator(state), algorithm=rng_default\n"),
      trials);
}

// ---- collectives: two partitions -------------------------------------------

void IdOf(Sweep& s, DType t, const std::string& op, Real second) {
  s.CheckTrials(op, t, Module("  ROOT id = $t[] " + op + "()\n", "", 2),
                {On2({}, {}, {Scalar(t, 0)}, {Scalar(t, second)})});
}
void PartitionId(Sweep& s, DType t) { IdOf(s, t, "partition-id", 1); }
void ReplicaId(Sweep& s, DType t) { IdOf(s, t, "replica-id", 0); }  // one replica

// Once over the group {0, 1} and once over all partitions (no groups).
void AllReduceWith(Sweep& s, DType t, Opcode op, const Array& x0, const Array& x1) {
  const std::string entry = R"(  x = $t[5] parameter(0)
  group = $t[5] all-reduce(x), channel_id=1, replica_groups={{0,1}}, to_apply=r
  all = $t[5] all-reduce(x), channel_id=2, replica_groups={}, to_apply=r
  ROOT out = ($t[5], $t[5]) tuple(group, all)
)";
  const std::string name(hlo::OpcodeName(op));
  const Array r =
      Tabulate(t, {5}, [&](const Index& i) { return Apply(op, t, Get(x0, i), Get(x1, i)); });
  s.CheckTrials("all-reduce " + name, t, Module(entry, Reducer(name), 2),
                {On2({x0}, {x1}, {r, r}, {r, r})}, /*bit_exact=*/false);
}

void AllReduce(Sweep& s, DType t) {
  const Array x0 = Numbers(t, {5}), x1 = Numbers(t, {5}, 1);
  AllReduceWith(s, t, Opcode::kAdd, x0, x1);
  Array y1 = x1;
  if (IsFloating(t)) {  // a NaN wins, -inf loses
    Set(y1, 1, NAN);
    Set(y1, 3, -INFINITY);
  }
  AllReduceWith(s, t, Opcode::kMaximum, x0, y1);
  AllReduceWith(s, t, Opcode::kOr, x0, x1);
}

void AllGather(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[2,3] parameter(0)
  rows = $t[4,3] all-gather(x), channel_id=1, replica_groups={{0,1}}, dimensions={0}
  cols = $t[2,6] all-gather(x), channel_id=2, replica_groups={{0,1}}, dimensions={1}
  ROOT r = ($t[4,3], $t[2,6]) tuple(rows, cols)
)";
  const Array x[2] = {Sample(t, {2, 3}), Sample(t, {2, 3}, 1)};
  const Array rows = Moved(t, {4, 3}, [&](const Index& i) {
    return x[i[0] / 2].at({i[0] % 2, i[1]});
  });
  const Array cols = Moved(t, {2, 6}, [&](const Index& i) {
    return x[i[1] / 3].at({i[0], i[1] % 3});
  });
  s.CheckTrials("all-gather", t, Module(entry, "", 2),
                {On2({x[0]}, {x[1]}, {rows, cols}, {rows, cols})});
}

// Partition p keeps block p of the sum.
void ReduceScatter(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[4,2] parameter(0)
  y = $t[2,4] parameter(1)
  rows = $t[2,2] reduce-scatter(x), channel_id=1, replica_groups={{0,1}}, dimensions={0}, to_apply=r
  cols = $t[2,2] reduce-scatter(y), channel_id=2, replica_groups={{0,1}}, dimensions={1}, to_apply=r
  ROOT out = ($t[2,2], $t[2,2]) tuple(rows, cols)
)";
  const Array x[2] = {Numbers(t, {4, 2}), Numbers(t, {4, 2}, 1)};
  const Array y[2] = {Numbers(t, {2, 4}, 2), Numbers(t, {2, 4}, 3)};
  auto sum = [&](const Array* a, const Index& i) {
    return Apply(Opcode::kAdd, t, Get(a[0], i), Get(a[1], i));
  };
  std::vector<Array> results[2];
  for (int64_t p = 0; p < 2; ++p) {
    results[p].push_back(Tabulate(t, {2, 2}, [&](const Index& i) {
      return sum(x, {2 * p + i[0], i[1]});
    }));
    results[p].push_back(Tabulate(t, {2, 2}, [&](const Index& i) {
      return sum(y, {i[0], 2 * p + i[1]});
    }));
  }
  s.CheckTrials("reduce-scatter add", t, Module(entry, Reducer("add"), 2),
                {On2({x[0], y[0]}, {x[1], y[1]}, results[0], results[1])}, /*bit_exact=*/false);
}

// Block j of each member's operand goes to member j; the blocks received
// are concatenated in member order.
void AllToAll(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[4,2] parameter(0)
  y = $t[2,4] parameter(1)
  rows = $t[4,2] all-to-all(x), channel_id=1, replica_groups={{0,1}}, dimensions={0}
  cols = $t[2,4] all-to-all(y), channel_id=2, replica_groups={{0,1}}, dimensions={1}
  ROOT out = ($t[4,2], $t[2,4]) tuple(rows, cols)
)";
  const Array x[2] = {Sample(t, {4, 2}), Sample(t, {4, 2}, 1)};
  const Array y[2] = {Sample(t, {2, 4}, 2), Sample(t, {2, 4}, 3)};
  std::vector<Array> results[2];
  for (int64_t p = 0; p < 2; ++p) {
    results[p].push_back(Moved(t, {4, 2}, [&](const Index& i) {
      return x[i[0] / 2].at({2 * p + i[0] % 2, i[1]});
    }));
    results[p].push_back(Moved(t, {2, 4}, [&](const Index& i) {
      return y[i[1] / 2].at({i[0], 2 * p + i[1] % 2});
    }));
  }
  s.CheckTrials("all-to-all", t, Module(entry, "", 2),
                {On2({x[0], y[0]}, {x[1], y[1]}, results[0], results[1])});
}

// A target no source sends to gets zeros.
void CollectivePermute(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[3] parameter(0)
  swap = $t[3] collective-permute(x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  one_way = $t[3] collective-permute(x), channel_id=2, source_target_pairs={{0,1}}
  ROOT r = ($t[3], $t[3]) tuple(swap, one_way)
)";
  const Array x0 = Sample(t, {3}), x1 = Sample(t, {3}, 1), zeros(t, {3});
  s.CheckTrials("collective-permute", t, Module(entry, "", 2),
                {On2({x0}, {x1}, {x1, zeros}, {x0, x0})});
}

// An array of `dims` holding `values` in row-major order.
Array Shaped(DType t, Index dims, const std::vector<Real>& values) {
  const int64_t columns = dims.size() == 2 ? dims[1] : 1;
  return Tabulate(t, std::move(dims), [&](const Index& i) {
    return values[i.size() == 2 ? i[0] * columns + i[1] : i[0]];
  });
}

// [[4, 2], [2, 2]] = l l^T with l = [[2, 0], [1, 1]]: exact in every type.
void Cholesky(Sweep& s, DType t) {
  const std::string entry = R"(  a = $t[2,2] parameter(0)
  ROOT l = $t[2,2] cholesky(a), lower=true
)";
  s.Check("cholesky", t, Module(entry), {Shaped(t, {2, 2}, {4, 2, 2, 2})},
          {Shaped(t, {2, 2}, {2, 0, 1, 1})});
}

// [[2, 0], [1, 1]] x = [4, 3]: x = [2, 1].
void TriangularSolve(Sweep& s, DType t) {
  const std::string entry = R"(  a = $t[2,2] parameter(0)
  b = $t[2,1] parameter(1)
  ROOT x = $t[2,1] triangular-solve(a, b), left_side=true, lower=true, unit_diagonal=false, transpose_a=NO_TRANSPOSE
)";
  s.Check("triangular-solve", t, Module(entry),
          {Shaped(t, {2, 2}, {2, 9, 1, 1}), Shaped(t, {2, 1}, {4, 3})},
          {Shaped(t, {2, 1}, {2, 1})});
}

// x's features (columns) are {0, 0, 2, 2} and {1, 1, 3, 3}: means 1 and 2,
// variances 1, so with epsilon 0, scale 1 and offset 0 every value is exact.
const std::vector<Real> kFeatures = {0, 1, 0, 1, 2, 3, 2, 3};
const std::vector<Real> kNormalized = {-1, -1, -1, -1, 1, 1, 1, 1};

void BatchNormTraining(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[4,2] parameter(0)
  one = $t[2] parameter(1)
  zero = $t[2] parameter(2)
  ROOT bn = ($t[4,2], $t[2], $t[2]) batch-norm-training(x, one, zero), epsilon=0, feature_index=1
)";
  s.Check("batch-norm-training", t, Module(entry),
          {Shaped(t, {4, 2}, kFeatures), Shaped(t, {2}, {1, 1}), Shaped(t, {2}, {0, 0})},
          {Shaped(t, {4, 2}, kNormalized), Shaped(t, {2}, {1, 2}), Shaped(t, {2}, {1, 1})});
}

void BatchNormInference(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[4,2] parameter(0)
  one = $t[2] parameter(1)
  zero = $t[2] parameter(2)
  mean = $t[2] parameter(3)
  ROOT bn = $t[4,2] batch-norm-inference(x, one, zero, mean, one), epsilon=0, feature_index=1
)";
  s.Check("batch-norm-inference", t, Module(entry),
          {Shaped(t, {4, 2}, kFeatures), Shaped(t, {2}, {1, 1}), Shaped(t, {2}, {0, 0}),
           Shaped(t, {2}, {1, 2})},
          {Shaped(t, {4, 2}, kNormalized)});
}

// dy picks the first row of feature 0 and the last of feature 1:
// dx = dy - sum(dy) / 4 - xhat sum(dy xhat) / 4.
void BatchNormGrad(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[4,2] parameter(0)
  one = $t[2] parameter(1)
  mean = $t[2] parameter(2)
  dy = $t[4,2] parameter(3)
  ROOT g = ($t[4,2], $t[2], $t[2]) batch-norm-grad(x, one, mean, one, dy), epsilon=0, feature_index=1
)";
  s.Check("batch-norm-grad", t, Module(entry),
          {Shaped(t, {4, 2}, kFeatures), Shaped(t, {2}, {1, 1}), Shaped(t, {2}, {1, 2}),
           Shaped(t, {4, 2}, {1, 0, 0, 0, 0, 0, 0, 1})},
          {Shaped(t, {4, 2}, {0.5, 0, -0.5, 0, 0, -0.5, 0, 0.5}), Shaped(t, {2}, {-1, 1}),
           Shaped(t, {2}, {1, 1})});
}

// map(x, y) with a function that picks y where the two differ, x elsewhere.
void Map(Sweep& s, DType t) {
  const std::string f = R"(f {
  a = $t[] parameter(0)
  b = $t[] parameter(1)
  same = pred[] compare(a, b), direction=EQ
  ROOT r = $t[] select(same, a, b)
}
)";
  const std::string entry = R"(  x = $t[2,3] parameter(0)
  y = $t[2,3] parameter(1)
  ROOT m = $t[2,3] map(x, y), dimensions={0,1}, to_apply=f
)";
  const Array x = Numbers(t, {2, 3}), y = Numbers(t, {2, 3}, 1);
  s.Check("map", t, Module(entry, f), {x, y}, {y});
}

// To a float of 4 exponent and 2 mantissa bits (largest 1.75 * 2^7 = 224,
// smallest normal 2^-6), worked out by hand: 1.125 and 1.375 are ties (to
// 1 and 1.5, the even last bit), 100 = 1.5625 * 2^6 rounds to 1.5 * 2^6,
// 240 = 1.875 * 2^7 rounds up past the largest to infinity, 2^-7 is below
// the smallest normal. Every input is exact in f16 and bf16.
void ReducePrecision(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[8] parameter(0)
  ROOT r = $t[8] reduce-precision(x), exponent_bits=4, mantissa_bits=2
)";
  // (Integer types are refused before any value is read; inf has no integer value.)
  const Real inf = IsFloating(t) ? std::numeric_limits<Real>::infinity() : 0;
  s.Check("reduce-precision", t, Module(entry),
          {Shaped(t, {8}, {1.125, 1.375, -3.5, 240, 224, 0.0078125, -0.015625, 100})},
          {Shaped(t, {8}, {1, 1.5, -3.5, inf, 224, 0, -0.015625, 96})});
}

void CopyStartDone(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[5] parameter(0)
  started = ($t[5], $t[5], u32[]) copy-start(x)
  ROOT r = $t[5] copy-done(started)
)";
  const Array x = Sample(t, {5});
  s.Check("copy-start", t, Module(entry), {x}, {x});
}

// The asynchronous collectives give what their synchronous forms give.
void AllReduceStartDone(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[5] parameter(0)
  started = $t[5] all-reduce-start(x), channel_id=1, replica_groups={{0,1}}, to_apply=r
  ROOT sum = $t[5] all-reduce-done(started)
)";
  const Array x0 = Numbers(t, {5}), x1 = Numbers(t, {5}, 1);
  const Array r = Tabulate(
      t, {5}, [&](const Index& i) { return Apply(Opcode::kAdd, t, Get(x0, i), Get(x1, i)); });
  s.CheckTrials("all-reduce-start add", t, Module(entry, Reducer("add"), 2),
                {On2({x0}, {x1}, {r}, {r})}, /*bit_exact=*/false);
}

void AllGatherStartDone(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[2] parameter(0)
  started = ($t[2], $t[4]) all-gather-start(x), channel_id=1, replica_groups={{0,1}}, dimensions={0}
  ROOT r = $t[4] all-gather-done(started)
)";
  const Array x[2] = {Sample(t, {2}), Sample(t, {2}, 1)};
  const Array all = Moved(t, {4}, [&](const Index& i) { return x[i[0] / 2].at({i[0] % 2}); });
  s.CheckTrials("all-gather-start", t, Module(entry, "", 2), {On2({x[0]}, {x[1]}, {all}, {all})});
}

void CollectivePermuteStartDone(Sweep& s, DType t) {
  const std::string entry = R"(  x = $t[3] parameter(0)
  started = ($t[3], $t[3], u32[], u32[]) collective-permute-start(x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  ROOT r = $t[3] collective-permute-done(started)
)";
  const Array x0 = Sample(t, {3}), x1 = Sample(t, {3}, 1);
  s.CheckTrials("collective-permute-start", t, Module(entry, "", 2), {On2({x0}, {x1}, {x1}, {x0})});
}

using Case = void (*)(Sweep&, DType);
// clang-format off
const std::map<Opcode, Case> kCases = {
    {Opcode::kParameter, Parameter}, {Opcode::kConstant, Constant}, {Opcode::kIota, Iota},
    {Opcode::kConvert, Convert}, {Opcode::kBitcastConvert, BitcastConvert},
    {Opcode::kBroadcast, Broadcast}, {Opcode::kReshape, Reshape}, {Opcode::kTranspose, Transpose},
    {Opcode::kCopy, Copy}, {Opcode::kSlice, Slice}, {Opcode::kDynamicSlice, DynamicSlice},
    {Opcode::kDynamicUpdateSlice, DynamicUpdateSlice}, {Opcode::kConcatenate, Concatenate},
    {Opcode::kPad, Pad}, {Opcode::kReverse, Reverse}, {Opcode::kSelect, Select},
    {Opcode::kCompare, Compare}, {Opcode::kClamp, Clamp}, {Opcode::kIsFinite, IsFinite},
    {Opcode::kReduce, Reduce}, {Opcode::kDot, Dot}, {Opcode::kConvolution, Convolution}, {Opcode::kReduceWindow, ReduceWindow},
    {Opcode::kSelectAndScatter, SelectAndScatter}, {Opcode::kSort, Sort}, {Opcode::kTopK, TopK}, {Opcode::kGather, Gather},
    {Opcode::kScatter, Scatter}, {Opcode::kTuple, Tuple},
    {Opcode::kGetTupleElement, GetTupleElement}, {Opcode::kWhile, While}, {Opcode::kConditional, Conditional}, {Opcode::kCall, Call},
    {Opcode::kFusion, Fusion}, {Opcode::kOptimizationBarrier, OptimizationBarrier},
    {Opcode::kCustomCall, CustomCall}, {Opcode::kReal, RealPart}, {Opcode::kImag, ImagPart},
    {Opcode::kComplex, ComplexOf}, {Opcode::kAddDependency, AddDependency},
    {Opcode::kAfterAll, AfterAll},
    {Opcode::kRngBitGenerator, RngBitGenerator}, {Opcode::kPartitionId, PartitionId},
    {Opcode::kReplicaId, ReplicaId}, {Opcode::kAllReduce, AllReduce},
    {Opcode::kAllGather, AllGather}, {Opcode::kReduceScatter, ReduceScatter},
    {Opcode::kAllToAll, AllToAll}, {Opcode::kCollectivePermute, CollectivePermute},
    {Opcode::kCholesky, Cholesky}, {Opcode::kTriangularSolve, TriangularSolve},
    {Opcode::kBatchNormTraining, BatchNormTraining}, {Opcode::kBatchNormInference, BatchNormInference},
    {Opcode::kBatchNormGrad, BatchNormGrad}, {Opcode::kMap, Map},
    {Opcode::kReducePrecision, ReducePrecision},
    {Opcode::kCopyStart, CopyStartDone}, {Opcode::kCopyDone, CopyStartDone},
    {Opcode::kAllReduceStart, AllReduceStartDone}, {Opcode::kAllReduceDone, AllReduceStartDone},
    {Opcode::kAllGatherStart, AllGatherStartDone}, {Opcode::kAllGatherDone, AllGatherStartDone},
    {Opcode::kCollectivePermuteStart, CollectivePermuteStartDone},
    {Opcode::kCollectivePermuteDone, CollectivePermuteStartDone},
};
// clang-format on

// ---- the tests --------------------------------------------------------------

TEST(DTypeSweep, ReferencesGiveKnownValues) {
  const Format f16 = FormatOf(DType::kF16), bf16 = FormatOf(DType::kBF16);
  const auto p2 = [](int e) { return std::ldexp(Real(1), e); };
  EXPECT_EQ(HalfBits(f16, 65504), 0x7BFF);
  EXPECT_EQ(HalfBits(f16, RoundTo(f16, 65520)), 0x7C00);  // the tie past the largest: inf
  EXPECT_EQ(HalfBits(f16, RoundTo(f16, p2(-24))), 0x0001);
  EXPECT_EQ(HalfBits(f16, RoundTo(f16, p2(-25))), 0x0000);  // the tie goes to even
  EXPECT_EQ(HalfBits(f16, RoundTo(f16, 3 * p2(-26))), 0x0001);
  EXPECT_EQ(HalfBits(f16, RoundTo(f16, -1.5L)), 0xBE00);
  EXPECT_EQ(RoundTo(f16, 1 + p2(-11) + p2(-40)), 1 + p2(-10));
  EXPECT_EQ(HalfBits(bf16, 1), 0x3F80);
  EXPECT_EQ(HalfBits(bf16, RoundTo(bf16, 257)), 0x4380);  // 256: the tie goes to even
  EXPECT_EQ(FromHalfBits(bf16, 0x4049), 3.140625L);
  EXPECT_EQ(FromHalfBits(f16, 0x3555), 0.333251953125L);
  EXPECT_EQ(Wrap(DType::kS8, 200), -56);
  EXPECT_EQ(Lowest(DType::kS64), -p2(63));
  EXPECT_EQ(ConvertValue(-2.5, DType::kF32, DType::kU8), 0);
  EXPECT_EQ(ConvertValue(1e10, DType::kF64, DType::kS32), 2147483647);
  // Random123's known answers for Philox-4x32-10.
  EXPECT_EQ(Philox({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(Philox({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(Philox({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(DTypeSweep, EveryNonElementwiseOpcodeOnEveryDTypeAsXlaDefinesIt) {
  Sweep sweep;
  for (Opcode op : test_support::AllOpcodes()) {
    if (hlo::IsElementwiseUnary(op) || hlo::IsElementwiseBinary(op)) continue;
    auto it = kCases.find(op);
    if (it == kCases.end()) {
      ADD_FAILURE() << "add a case for " << hlo::OpcodeName(op);
      continue;
    }
    sweep.op = op;
    for (DType t : AllDTypes()) it->second(sweep, t);
  }
  sweep.ExpectTable();
  // (opcode, dtype) pairs compiled and run, as the table makes them: a floor.
  EXPECT_GE(sweep.checked().size(), 349u);
}

}  // namespace
}  // namespace strata::runtime
