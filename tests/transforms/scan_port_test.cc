// PyTorch/XLA's test/scan tests ported: every scan is checked against the
// same loop unrolled as a C++ for-loop over lazy ops (values and gradients
// with respect to init, xs and captured tensors), in f32 and f64.
#include "strata/transforms/scan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "strata/autograd/grad.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr DType kF32 = DType::kF32;
constexpr DType kF64 = DType::kF64;

// ---- inputs ------------------------------------------------------------------------

Tensor T(const std::vector<double>& v, std::vector<int64_t> dims, DType dtype = kF32) {
  if (dtype == kF64) return Tensor::FromVector<double>(v, std::move(dims));
  return Tensor::FromVector<float>(std::vector<float>(v.begin(), v.end()), std::move(dims));
}

// Deterministic values in [-scale, scale), the same for f32 and f64.
Tensor R(uint64_t seed, std::vector<int64_t> dims, DType dtype = kF32, double scale = 1) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    v.push_back((static_cast<double>(s >> 11) * 0x1.0p-53 * 2 - 1) * scale);
  }
  return T(v, std::move(dims), dtype);
}

// ---- reading and comparing ---------------------------------------------------------

std::vector<double> ToDoubles(const Tensor& t) {
  auto widen = [](const auto& v) { return std::vector<double>(v.begin(), v.end()); };
  switch (t.dtype()) {
    case DType::kF32:
      return widen(t.to_vector<float>());
    case DType::kF64:
      return t.to_vector<double>();
    case DType::kS32:
      return widen(t.to_vector<int32_t>());
    case DType::kS64:
      return widen(t.to_vector<int64_t>());
    case DType::kU64:
      return widen(t.to_vector<uint64_t>());
    case DType::kPred:
      return widen(t.to_vector<bool>());
    default:
      ADD_FAILURE() << "unexpected dtype " << t.shape().ToString();
      return {};
  }
}

double Tol(DType dtype) {
  if (dtype == kF64) return 1e-10;
  if (dtype == kF32) return 1e-5;
  return 0;
}

// |a - b| <= tol * max(1, |b|), tol from b's dtype (exact for integers) or
// `min_tol` if larger.
void ExpectClose(const Tensor& a, const Tensor& b, const std::string& what, double min_tol = 0) {
  SCOPED_TRACE(what);
  ASSERT_EQ(a.shape(), b.shape()) << a.shape().ToString() << " vs " << b.shape().ToString();
  std::vector<double> x = ToDoubles(a), y = ToDoubles(b);
  ASSERT_EQ(x.size(), y.size());
  const double tol = std::max(Tol(b.dtype()), min_tol);
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(x[i], y[i], tol * std::max(1.0, std::abs(y[i]))) << "element " << i;
}

void ExpectValues(const Tensor& t, const std::vector<double>& want, const std::string& what) {
  SCOPED_TRACE(what);
  std::vector<double> got = ToDoubles(t);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], Tol(t.dtype()) * std::max(1.0, std::abs(want[i]))) << i;
}

void SyncAll(std::vector<Tensor>& tensors) {
  std::vector<Tensor*> ptrs;
  for (Tensor& t : tensors) ptrs.push_back(&t);
  sync(std::span<Tensor* const>(ptrs));
}

int64_t Count(const std::string& text, const std::string& needle) {
  int64_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// ---- the reference loop ------------------------------------------------------------

// xs[t] along the leading dimension: slice + reshape.
Tensor Row(const Tensor& x, int64_t t) {
  std::vector<int64_t> rest(x.shape().dims().begin() + 1, x.shape().dims().end());
  return reshape(slice(x, 0, t, t + 1), rest);
}

// scan written as a plain for-loop; ys[t] stays at index t when reversed.
std::pair<Tree, Tree> LoopScan(const ScanFn& fn, const Tree& init, const Tree& xs,
                               const ScanOptions& options = {}) {
  int64_t length = options.length ? *options.length : xs.leaves().at(0).dim(0);
  Tree carry = init;
  std::vector<Tree> ys(length);
  for (int64_t i = 0; i < length; ++i) {
    int64_t t = options.reverse ? length - 1 - i : i;
    auto [next, y] = fn(carry, xs.map([&](const Tensor& x) { return Row(x, t); }));
    carry = next;
    ys[t] = y;
  }
  if (length == 0) return {carry, Tree()};
  std::vector<std::vector<Tensor>> per_step;
  for (const Tree& y : ys) per_step.push_back(y.leaves());
  std::vector<Tensor> stacked;
  for (size_t k = 0; k < per_step[0].size(); ++k) {
    std::vector<Tensor> parts;
    for (const auto& step : per_step) parts.push_back(step[k]);
    stacked.push_back(stack(parts));
  }
  return {carry, ys[0].spec().Unflatten(stacked)};
}

// ---- the harness ---------------------------------------------------------------------

// The loss every check differentiates: sum(l^2 / 2 + l) over the float leaves.
Tensor Squish(const Tree& t) {
  Tensor loss;
  for (const Tensor& l : t.leaves()) {
    if (!IsFloating(l.dtype())) continue;
    Tensor s = sum(l * l) * 0.5 + sum(l);
    loss = loss.defined() ? loss + s : s;
  }
  return loss.defined() ? loss : zeros({});
}

std::vector<Tensor> FloatLeaves(const Tree& t) {
  std::vector<Tensor> out;
  for (const Tensor& l : t.leaves()) {
    if (IsFloating(l.dtype())) out.push_back(l);
  }
  return out;
}

// Float leaves of init and xs, then the captured tensors.
std::vector<Tensor> Wrt(const Tree& init, const Tree& xs, const std::vector<Tensor>& captured) {
  std::vector<Tensor> wrt = FloatLeaves(init);
  for (const Tensor& t : FloatLeaves(xs)) wrt.push_back(t);
  wrt.insert(wrt.end(), captured.begin(), captured.end());
  return wrt;
}

using Program = std::function<std::pair<Tree, Tree>()>;

// A program's outputs and gradients, materialized.
struct Outcome {
  Tree carry, ys;
  std::vector<Tensor> grads;
};

// Runs `got` and `want`, differentiates Squish(carry) + Squish(ys) of each
// with respect to `wrt`, materializes everything in one graph and compares.
Outcome Compare(const Program& got_program, const Program& want_program,
                const std::vector<Tensor>& wrt, double min_tol = 0) {
  auto run = [&](const Program& p, std::vector<Tensor>& all) {
    auto [carry, ys] = p();
    Tensor loss = Squish(carry) + Squish(ys);
    std::vector<Tensor> grads = wrt.empty() ? std::vector<Tensor>{} : gradients(loss, wrt);
    for (const Tree* t : {&carry, &ys}) {
      for (const Tensor& l : t->leaves()) all.push_back(l);
    }
    all.insert(all.end(), grads.begin(), grads.end());
    return std::pair{carry.spec(), ys.spec()};
  };
  std::vector<Tensor> got, want;
  auto [got_carry, got_ys] = run(got_program, got);
  auto [want_carry, want_ys] = run(want_program, want);
  std::vector<Tensor> all = got;
  all.insert(all.end(), want.begin(), want.end());
  SyncAll(all);
  got.assign(all.begin(), all.begin() + got.size());
  want.assign(all.begin() + got.size(), all.end());
  Outcome out;
  EXPECT_EQ(got_carry.ToString(), want_carry.ToString()) << "carry structure";
  EXPECT_EQ(got_ys.ToString(), want_ys.ToString()) << "ys structure";
  if (got.size() != want.size()) {
    ADD_FAILURE() << got.size() << " vs " << want.size() << " tensors";
    return out;
  }
  const size_t nc = got_carry.num_leaves(), ny = got_ys.num_leaves();
  for (size_t i = 0; i < got.size(); ++i) {
    std::string what = i < nc        ? "carry leaf " + std::to_string(i)
                       : i < nc + ny ? "ys leaf " + std::to_string(i - nc)
                                     : "gradient " + std::to_string(i - nc - ny);
    ExpectClose(got[i], want[i], what, min_tol);
  }
  out.carry = got_carry.Unflatten(std::vector<Tensor>(got.begin(), got.begin() + nc));
  out.ys = got_ys.Unflatten(std::vector<Tensor>(got.begin() + nc, got.begin() + nc + ny));
  out.grads.assign(got.begin() + nc + ny, got.end());
  return out;
}

// scan(fn, init, xs) against LoopScan(fn, init, xs), gradients w.r.t. the
// float leaves of init and xs and `captured`.
Outcome CheckScan(const ScanFn& fn, const Tree& init, const Tree& xs,
                  const std::vector<Tensor>& captured = {}, const ScanOptions& options = {},
                  double min_tol = 0) {
  return Compare([&] { return scan(fn, init, xs, options); },
                 [&] { return LoopScan(fn, init, xs, options); }, Wrt(init, xs, captured), min_tol);
}

// scan or the reference loop, for programs with several scans.
using Scanner = std::function<std::pair<Tree, Tree>(const ScanFn&, const Tree&, const Tree&)>;

std::pair<Tree, Tree> UseScan(const ScanFn& f, const Tree& init, const Tree& xs) {
  return scan(f, init, xs);
}
std::pair<Tree, Tree> UseLoop(const ScanFn& f, const Tree& init, const Tree& xs) {
  return LoopScan(f, init, xs);
}

// ---- 1. cumulative sum (test_scan_simple) ------------------------------------------

TEST(ScanPort, CumulativeSum) {
  for (DType dt : {kF32, kF64}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor init = T({0, 0}, {2}, dt);
    Tensor xs = T({1, 2, 3, 4, 5, 6}, {3, 2}, dt);
    auto fn = [](const Tree& c, const Tree& x) {
      Tensor s = c.leaf() + x.leaf();
      return std::pair{Tree(s), Tree(s)};
    };
    Outcome out = CheckScan(fn, Tree(init), Tree(xs));
    // By hand: the final sum and the running sums.
    ExpectValues(out.carry.leaf(), {9, 12}, "carry");
    ExpectValues(out.ys.leaf(), {1, 2, 4, 6, 9, 12}, "ys");
    EXPECT_EQ(out.ys.leaf().shape().dims(), (std::vector<int64_t>{3, 2}));
    // d(sum carry + sum ys): init feeds 4 sums; xs[t] feeds the carry and 3 - t ys.
    auto [carry, ys] = scan(fn, Tree(init), Tree(xs));
    auto g = gradients(sum(carry.leaf()) + sum(ys.leaf()), {init, xs});
    ExpectValues(g[0], {4, 4}, "d init");
    ExpectValues(g[1], {4, 4, 3, 3, 2, 2}, "d xs");
  }
}

// ---- 2. tuple carry and tuple xs (test_scan_tuples) ----------------------------------

TEST(ScanPort, TupleCarryAndTupleXs) {
  for (DType dt : {kF32, kF64}) {
    SCOPED_TRACE(DTypeName(dt));
    Tree init{R(1, {2}, dt), R(2, {3}, dt)};
    Tree xs{R(3, {4, 2}, dt), R(4, {4, 5}, dt)};
    auto fn = [](const Tree& c, const Tree& x) {
      const Tensor &a = c[0].leaf(), &b = c[1].leaf();
      const Tensor &p = x[0].leaf(), &q = x[1].leaf();
      Tensor a2 = a + p * sum(q) * 0.1;
      Tensor b2 = b * 0.9 + sum(p) + sum(a2);
      Tree y{p * 2.0 + sum(b2), q * sum(a2)};
      return std::pair{Tree{a2, b2}, y};
    };
    Outcome out = CheckScan(fn, init, xs);
    EXPECT_EQ(out.ys[0].leaf().shape().dims(), (std::vector<int64_t>{4, 2}));
    EXPECT_EQ(out.ys[1].leaf().shape().dims(), (std::vector<int64_t>{4, 5}));
    // The same tensor as two init leaves and two xs leaves: its gradient is the sum.
    Tensor a = R(5, {2}, dt), p = R(6, {4, 2}, dt);
    auto twice = [](const Tree& c, const Tree& x) {
      Tree next{c[0].leaf() * x[1].leaf(), c[1].leaf() + x[0].leaf()};
      return std::pair{next, Tree(c[0].leaf() * c[1].leaf())};
    };
    auto with_scan = [&] { return scan(twice, Tree{a, a}, Tree{p, p}); };
    auto with_loop = [&] { return LoopScan(twice, Tree{a, a}, Tree{p, p}); };
    Compare(with_scan, with_loop, {a, p});
  }
}

// ---- 3. map carry and xs, captured weights (test_transform_non_trivial_pytree) ----------

TEST(ScanPort, MapCarryAndXsWithCapturedWeights) {
  for (DType dt : {kF32, kF64}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor w = R(10, {3, 3}, dt), b = R(11, {2, 3}, dt);
    Tree init(Tree::Dict{{"a", R(12, {2, 3}, dt)}, {"b", R(13, {2, 3}, dt)}});
    Tree xs(Tree::Dict{{"p", R(14, {4, 2, 3}, dt)}, {"q", R(15, {4, 3}, dt)}});
    auto fn = [&](const Tree& c, const Tree& x) {
      Tensor a = sin(matmul(c["a"].leaf(), w) + b + x["p"].leaf());
      Tensor bb = cos(matmul(c["b"].leaf(), w) + b + x["q"].leaf());
      Tensor y = sigmoid(a + bb);
      return std::pair{Tree(Tree::Dict{{"a", a}, {"b", bb}}), Tree(y)};
    };
    for (Remat remat : {Remat::kSaveCarries, Remat::kSaveAll}) {
      SCOPED_TRACE(remat == Remat::kSaveAll ? "save all" : "save carries");
      ScanOptions options;
      options.remat = remat;
      Outcome out = CheckScan(fn, init, xs, {w, b}, options);
      // W and B do get (non-zero) gradients.
      ASSERT_EQ(out.grads.size(), 6u);
      for (size_t k : {4, 5}) {
        double norm = 0;
        for (double v : ToDoubles(out.grads[k])) norm += std::abs(v);
        EXPECT_GT(norm, 1e-3) << "captured " << k;
      }
    }
  }
}

// ---- 4. tensors created inside fn (test_scan_create_tensors) ---------------------------

TEST(ScanPort, TensorsCreatedInsideFn) {
  for (DType dt : {kF32, kF64}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor init = R(20, {2}, dt), xs = R(21, {3, 2}, dt);
    auto fn = [dt](const Tree& c, const Tree& x) {
      Tensor a = arange(0, 2, 1, dt) + ones({2}, dt);          // [1, 2]
      Tensor b = full({2}, 3.0, dt) + astype(arange(2), dt);   // [3, 4]
      Tensor z = zeros({2}, dt) + sum(eye(2, dt), {0}) - 1.0;  // [0, 0]
      return std::pair{Tree(c.leaf() * ones({2}, dt) + a), Tree(x.leaf() * b + z)};
    };
    Outcome out = CheckScan(fn, Tree(init), Tree(xs));
    // By hand: carry = init + 3 * [1, 2].
    std::vector<double> i0 = ToDoubles(init);
    ExpectValues(out.carry.leaf(), {i0[0] + 3, i0[1] + 6}, "carry");
    // ys that do not depend on the loop at all.
    Outcome consts = CheckScan(
        [dt](const Tree& c, const Tree& x) {
          return std::pair{Tree(c.leaf() + x.leaf()), Tree{full({2}, 7.0, dt), ones({3}, dt)}};
        },
        Tree(init), Tree(xs));
    ExpectValues(consts.ys[0].leaf(), {7, 7, 7, 7, 7, 7}, "full");
    ExpectValues(consts.ys[1].leaf(), std::vector<double>(9, 1.0), "ones");
  }
}

// Outer tensors read in every role: returned as y, reshaped, converted,
// broadcast, and C++ scalars.
TEST(ScanPort, CapturedOuterValuesInEveryRole) {
  Tensor w = R(24, {2}), w2 = R(25, {1, 2}), w64 = R(26, {2}, kF64), s = R(27, {});
  Tensor init = R(28, {2}), xs = R(29, {3, 2});
  auto fn = [&](const Tree& c, const Tree& x) {
    Tensor next = c.leaf() * reshape(w2, {2}) + astype(w64, kF32) * 0.5 +
                  broadcast_to(s, {2}) * x.leaf() - 0.25;
    return std::pair{Tree(next), Tree{w, reshape(w2, {2}) * c.leaf()}};
  };
  // f32 tolerance for d w64 too: its gradient is computed in f32.
  CheckScan(fn, Tree(init), Tree(xs), {w, w2, w64, s}, {}, 1e-5);
}

// In-place updates of body-local tensors are fine (test_scan_internal_in_place_mutation).
TEST(ScanPort, InPlaceUpdatesOfBodyTensors) {
  for (DType dt : {kF32, kF64}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor init = R(22, {2}, dt), xs = R(23, {3, 2}, dt);
    auto fn = [](const Tree& c, const Tree& x) {
      Tensor carry = c.leaf();
      carry += x.leaf();
      Tensor y = x.leaf();
      y *= carry;
      y += 42.0 * ones({2}, y.dtype());
      return std::pair{Tree(carry), Tree(y)};
    };
    CheckScan(fn, Tree(init), Tree(xs));
  }
}

// ---- 5. outputs aliasing inputs ------------------------------------------------------

TEST(ScanPort, OutputsAliasInputs) {
  using Fn = std::pair<Tree, Tree> (*)(const Tree&, const Tree&);
  const std::vector<std::pair<const char*, Fn>> cases = {
      {"(c, x + 1)",
       [](const Tree& c, const Tree& x) {
         return std::pair{c, Tree(x.leaf() + 1.0)};
       }},
      {"(c + 1, x)",
       [](const Tree& c, const Tree& x) {
         return std::pair{Tree(c.leaf() + 1.0), x};
       }},
      {"(x, c)",
       [](const Tree& c, const Tree& x) {
         return std::pair{x, c};
       }},
      {"(c, c)",
       [](const Tree& c, const Tree&) {
         return std::pair{c, c};
       }},
      {"(x, x)",
       [](const Tree&, const Tree& x) {
         return std::pair{x, x};
       }},
      {"(c, [c, x, c])",
       [](const Tree& c, const Tree& x) {
         return std::pair{c, Tree{c, x, c}};
       }},
  };
  for (DType dt : {kF32, kF64}) {
    for (const auto& [name, fn] : cases) {
      SCOPED_TRACE(std::string(name) + " " + std::string(DTypeName(dt)));
      Tensor init = R(30, {2}, dt), xs = R(31, {3, 2}, dt);
      CheckScan(fn, Tree(init), Tree(xs));
    }
  }
  // By hand for (c + 1, x): ys is xs itself, the carry counts steps.
  Tensor xs = T({1, 2, 3, 4, 5, 6}, {3, 2});
  auto [carry, ys] = scan(
      [](const Tree& c, const Tree& x) {
        return std::pair{Tree(c.leaf() + 1.0), x};
      },
      Tree(T({0, 10}, {2})), Tree(xs));
  ExpectValues(carry.leaf(), {3, 13}, "carry");
  ExpectValues(ys.leaf(), {1, 2, 3, 4, 5, 6}, "ys");
}

// ---- 6. every requires-grad combination (test_scan_gradness) -------------------------

TEST(ScanPort, EveryGradientSubset) {
  for (DType dt : {kF32, kF64}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor init = T({1, 1}, {2}, dt);
    Tensor xs = T({2, 3, 4, 5, 6, 7}, {3, 2}, dt);
    Tensor w = T({0.5, -0.25}, {2}, dt);
    auto fn = [&](const Tree& c, const Tree& x) {
      Tensor next = c.leaf() * x.leaf() * w;
      return std::pair{Tree(next), Tree(next + x.leaf())};
    };
    auto [carry, ys] = scan(fn, Tree(init), Tree(xs));
    auto [ref_carry, ref_ys] = LoopScan(fn, Tree(init), Tree(xs));
    const std::vector<std::pair<const char*, std::pair<Tensor, Tensor>>> losses = {
        {"carry only", {Squish(carry), Squish(ref_carry)}},
        {"ys only", {Squish(ys), Squish(ref_ys)}},
        {"both", {Squish(carry) + Squish(ys), Squish(ref_carry) + Squish(ref_ys)}},
    };
    const std::vector<Tensor> all = {init, xs, w};
    std::vector<Tensor> got, want;
    std::vector<std::string> names;
    for (const auto& [loss_name, pair] : losses) {
      for (int mask = 1; mask < 8; ++mask) {
        std::vector<Tensor> subset;
        std::string name = loss_name;
        for (int k = 0; k < 3; ++k) {
          if (mask & (1 << k)) {
            subset.push_back(all[k]);
            name += std::string(" ") + (k == 0 ? "init" : k == 1 ? "xs" : "w");
          }
        }
        auto g = gradients(pair.first, subset);
        auto r = gradients(pair.second, subset);
        ASSERT_EQ(g.size(), subset.size());
        for (size_t i = 0; i < g.size(); ++i) {
          got.push_back(g[i]);
          want.push_back(r[i]);
          names.push_back(name + " #" + std::to_string(i));
        }
      }
    }
    std::vector<Tensor> both = got;
    both.insert(both.end(), want.begin(), want.end());
    SyncAll(both);
    for (size_t i = 0; i < got.size(); ++i) ExpectClose(both[i], both[got.size() + i], names[i]);
  }
}

// The same with requires_grad_ / backward (PyTorch's flags): only marked tensors get grads.
TEST(ScanPort, RequiresGradFlags) {
  for (auto [init_rg, xs_rg] : {std::pair{true, true}, {true, false}, {false, true}}) {
    SCOPED_TRACE(std::to_string(init_rg) + std::to_string(xs_rg));
    auto fn = [](const Tree& c, const Tree& x) {
      Tensor next = c.leaf() * x.leaf();
      return std::pair{Tree(next), Tree(next + x.leaf())};
    };
    Tensor init = T({1, 1}, {2}), xs = T({2, 3, 4, 5, 6, 7}, {3, 2});
    Tensor ref_init = T({1, 1}, {2}), ref_xs = T({2, 3, 4, 5, 6, 7}, {3, 2});
    if (init_rg) {
      requires_grad_(init);
      requires_grad_(ref_init);
    }
    if (xs_rg) {
      requires_grad_(xs);
      requires_grad_(ref_xs);
    }
    auto [carry, ys] = scan(fn, Tree(init), Tree(xs));
    auto [rc, rys] = LoopScan(fn, Tree(ref_init), Tree(ref_xs));
    backward(Squish(carry) + Squish(ys));
    backward(Squish(rc) + Squish(rys));
    EXPECT_EQ(grad(init).defined(), init_rg);
    EXPECT_EQ(grad(xs).defined(), xs_rg);
    if (init_rg) ExpectClose(grad(init), grad(ref_init), "init.grad");
    if (xs_rg) ExpectClose(grad(xs), grad(ref_xs), "xs.grad");
  }
}

// ---- 7. y empty (test_scan_output_none / _unit) ----------------------------------------

TEST(ScanPort, EmptyY) {
  for (DType dt : {kF32, kF64}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor init = T({1, 1}, {2}, dt), xs = T({2, 3, 4, 5, 6, 7}, {3, 2}, dt);
    // None: ys is an empty tree.
    Outcome none = CheckScan(
        [](const Tree& c, const Tree& x) {
          return std::pair{Tree(cos(c.leaf()) + x.leaf()), Tree()};
        },
        Tree(init), Tree(xs));
    EXPECT_TRUE(none.ys.is_empty());
    // (): ys is an empty list.
    Outcome unit = CheckScan(
        [](const Tree& c, const Tree& x) {
          return std::pair{Tree(cos(c.leaf()) + x.leaf()), Tree(Tree::List{})};
        },
        Tree(init), Tree(xs));
    EXPECT_TRUE(unit.ys.is_list());
    EXPECT_EQ(unit.ys.size(), 0u);
    // The carry by hand.
    std::vector<double> c = {1, 1}, x = {2, 3, 4, 5, 6, 7};
    for (int t = 0; t < 3; ++t) {
      for (int i = 0; i < 2; ++i) c[i] = std::cos(c[i]) + x[2 * t + i];
    }
    ExpectValues(none.carry.leaf(), c, "carry");
  }
}

// ---- 8. mixed dtypes -----------------------------------------------------------------

TEST(ScanPort, MixedDtypes) {
  for (DType dt : {kF32, kF64}) {
    SCOPED_TRACE(DTypeName(dt));
    Tree init(Tree::Dict{{"n", Tensor::FromVector<int64_t>({0}, {})},
                         {"h", R(40, {2}, dt)},
                         {"flag", Tensor::FromVector<bool>({false}, {})}});
    Tree xs(Tree::Dict{{"ids", Tensor::FromVector<int32_t>({3, -1, 4, 1, -5}, {5})},
                       {"v", R(41, {5, 2}, dt)}});
    auto fn = [dt](const Tree& c, const Tree& x) {
      const Tensor& ids = x["ids"].leaf();
      Tensor n = c["n"].leaf() + 1;
      Tensor h = tanh(c["h"].leaf() * 0.9 + x["v"].leaf() * astype(ids, dt));
      Tensor flag = logical_or(c["flag"].leaf(), lt(ids, zeros({}, DType::kS32)));
      Tree y(Tree::Dict{{"n", n}, {"ids", ids * 2}, {"h", h}});
      return std::pair{Tree(Tree::Dict{{"n", n}, {"h", h}, {"flag", flag}}), y};
    };
    ScanOptions save_all;
    save_all.remat = Remat::kSaveAll;
    CheckScan(fn, init, xs, {}, save_all);
    Outcome out = CheckScan(fn, init, xs);
    EXPECT_EQ(out.carry["n"].leaf().dtype(), DType::kS64);
    EXPECT_EQ(out.carry["h"].leaf().dtype(), dt);
    EXPECT_EQ(out.carry["flag"].leaf().dtype(), DType::kPred);
    EXPECT_EQ(out.ys["n"].leaf().dtype(), DType::kS64);
    EXPECT_EQ(out.ys["ids"].leaf().dtype(), DType::kS32);
    ExpectValues(out.carry["n"].leaf(), {5}, "n");
    ExpectValues(out.carry["flag"].leaf(), {1}, "flag");
    ExpectValues(out.ys["n"].leaf(), {1, 2, 3, 4, 5}, "ys n");
    ExpectValues(out.ys["ids"].leaf(), {6, -2, 8, 2, -10}, "ys ids");
    EXPECT_EQ(out.grads.size(), 2u);  // d h, d v
  }
}

// A random key carried through the loop gives every step new numbers
// (test_scan_rand_in_fn; strata's keys are explicit).
TEST(ScanPort, RandomKeyCarried) {
  auto fn = [](const Tree& c, const Tree& x) {
    std::vector<Tensor> keys = split_key(c[0].leaf(), 2);
    Tensor next = c[1].leaf() + x.leaf();
    return std::pair{Tree{keys[0], next}, Tree(next + uniform(keys[1], {2}))};
  };
  Tree init{random_key(7), T({0, 0}, {2})};
  Tensor xs = zeros({3, 2});
  Outcome out = CheckScan(fn, init, Tree(xs));
  std::vector<double> ys = ToDoubles(out.ys.leaf());
  EXPECT_NE(ys[0], ys[2]);
  EXPECT_NE(ys[1], ys[3]);
  EXPECT_NE(ys[2], ys[4]);
  EXPECT_EQ(out.carry[0].leaf().dtype(), DType::kU64);
}

// ---- 9. ten sines per step (test_scan_with_rematerialization) ---------------------------

TEST(ScanPort, TenSinesPerStep) {
  auto fn = [](const Tree& c, const Tree& x) {
    Tensor carry = c.leaf(), y = x.leaf();
    for (int i = 0; i < 10; ++i) carry = sin(carry);
    for (int i = 0; i < 10; ++i) y = sin(y);
    return std::pair{Tree(carry), Tree(y)};
  };
  for (DType dt : {kF32, kF64}) {
    for (Remat remat : {Remat::kSaveCarries, Remat::kSaveAll}) {
      SCOPED_TRACE(std::string(DTypeName(dt)) + (remat == Remat::kSaveAll ? " save all" : ""));
      Tensor init = R(50, {2, 3}, dt, 2), xs = R(51, {6, 2, 3}, dt, 2);
      ScanOptions options;
      options.remat = remat;
      CheckScan(fn, Tree(init), Tree(xs), {}, options);
    }
  }
  // Saving only carries, the backward loop recomputes the sines.
  Tensor init = R(50, {2, 3}), xs = R(51, {6, 2, 3});
  auto [carry, ys] = scan(fn, Tree(init), Tree(xs));
  std::string forward = lazy::LoweringContext({carry.leaf(), ys.leaf()}).hlo_text();
  EXPECT_EQ(Count(forward, " sine("), 20);
  auto g = gradients(sum(carry.leaf()) + sum(ys.leaf()), {init, xs});
  std::string backward = lazy::LoweringContext(g).hlo_text();
  EXPECT_GT(Count(backward, " sine("), 20) << backward;
}

// ---- 10. a 2-layer GRU over 16 steps -----------------------------------------------------

struct Gru {
  Tensor w_ih, w_hh, b_ih, b_hh;  // [in, 3H], [H, 3H], [3H], [3H]; gates r, z, n
};

Gru MakeGru(uint64_t seed, int64_t in, int64_t hidden, DType dt) {
  return {R(seed, {in, 3 * hidden}, dt, 0.5), R(seed + 1, {hidden, 3 * hidden}, dt, 0.5),
          R(seed + 2, {3 * hidden}, dt, 0.1), R(seed + 3, {3 * hidden}, dt, 0.1)};
}

// torch.nn.GRUCell.
Tensor GruCell(const Gru& w, const Tensor& x, const Tensor& h) {
  const int64_t n = h.dim(1);
  Tensor gi = matmul(x, w.w_ih) + w.b_ih, gh = matmul(h, w.w_hh) + w.b_hh;
  auto gate = [n](const Tensor& g, int64_t k) { return slice(g, 1, k * n, (k + 1) * n); };
  Tensor r = sigmoid(gate(gi, 0) + gate(gh, 0));
  Tensor z = sigmoid(gate(gi, 1) + gate(gh, 1));
  Tensor cand = tanh(gate(gi, 2) + r * gate(gh, 2));
  return (1.0 - z) * cand + z * h;
}

TEST(ScanPort, TwoLayerGru) {
  const int64_t length = 16, batch = 2, in = 3, hidden = 4;
  for (DType dt : {kF32, kF64}) {
    SCOPED_TRACE(DTypeName(dt));
    Gru l1 = MakeGru(60, in, hidden, dt), l2 = MakeGru(70, hidden, hidden, dt);
    Tensor h0 = R(80, {2, batch, hidden}, dt), xs = R(81, {length, batch, in}, dt);
    std::vector<Tensor> wrt = {h0, xs};
    for (const Gru* g : {&l1, &l2}) wrt.insert(wrt.end(), {g->w_ih, g->w_hh, g->b_ih, g->b_hh});
    // One scan, the layers' carries stacked.
    auto stacked = [&](const Scanner& s) {
      return [&, s] {
        return s(
            [&](const Tree& c, const Tree& x) {
              Tensor h1 = GruCell(l1, x.leaf(), Row(c.leaf(), 0));
              Tensor h2 = GruCell(l2, h1, Row(c.leaf(), 1));
              return std::pair{Tree(stack({h1, h2})), Tree(h2)};
            },
            Tree(h0), Tree(xs));
      };
    };
    // Two scans: layer 2 scans over layer 1's ys.
    auto layered = [&](const Scanner& s) {
      return [&, s] {
        auto layer = [](const Gru& w) {
          return [&w](const Tree& c, const Tree& x) {
            Tensor h = GruCell(w, x.leaf(), c.leaf());
            return std::pair{Tree(h), Tree(h)};
          };
        };
        auto [c1, ys1] = s(layer(l1), Tree(Row(h0, 0)), Tree(xs));
        auto [c2, ys2] = s(layer(l2), Tree(Row(h0, 1)), ys1);
        return std::pair{Tree(stack({c1.leaf(), c2.leaf()})), ys2};
      };
    };
    {
      SCOPED_TRACE("stacked carries");
      Compare(stacked(UseScan), stacked(UseLoop), wrt);
    }
    {
      SCOPED_TRACE("two scans");
      Compare(layered(UseScan), layered(UseLoop), wrt);
    }
    {
      SCOPED_TRACE("two scans vs stacked");
      Compare(layered(UseScan), stacked(UseScan), wrt);
    }
  }
}

// ---- 11. reverse ---------------------------------------------------------------------------

TEST(ScanPort, Reverse) {
  // By hand: a reversed cumulative sum gives suffix sums, at their own index.
  auto cumsum = [](const Tree& c, const Tree& x) {
    Tensor s = c.leaf() + x.leaf();
    return std::pair{Tree(s), Tree(s)};
  };
  ScanOptions reverse;
  reverse.reverse = true;
  auto [carry, ys] =
      scan(cumsum, Tree(T({0, 0}, {2})), Tree(T({1, 2, 3, 4, 5, 6}, {3, 2})), reverse);
  ExpectValues(carry.leaf(), {9, 12}, "carry");
  ExpectValues(ys.leaf(), {9, 12, 8, 10, 5, 6}, "ys");
  for (DType dt : {kF32, kF64}) {
    for (auto [unroll, remat] : {std::pair{int64_t{1}, Remat::kSaveCarries},
                                 {int64_t{2}, Remat::kSaveCarries},
                                 {int64_t{1}, Remat::kSaveAll}}) {
      SCOPED_TRACE(std::string(DTypeName(dt)) + " unroll " + std::to_string(unroll) +
                   (remat == Remat::kSaveAll ? " save all" : ""));
      Tensor w = R(90, {2}, dt), init = R(91, {2}, dt), xs = R(92, {5, 2}, dt);
      auto fn = [&](const Tree& c, const Tree& x) {
        Tensor next = tanh(c.leaf() * w + x.leaf());
        return std::pair{Tree(next), Tree{next * x.leaf() + c.leaf(), sum(next)}};
      };
      ScanOptions options;
      options.reverse = true;
      options.unroll = unroll;
      options.remat = remat;
      CheckScan(fn, Tree(init), Tree(xs), {w}, options);
    }
  }
}

// ---- 12. length without xs, length 0 --------------------------------------------------------

TEST(ScanPort, LengthWithoutXs) {
  for (DType dt : {kF32, kF64}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor w = R(100, {2}, dt), init = R(101, {2}, dt);
    bool saw_empty = false;
    auto fn = [&](const Tree& c, const Tree& x) {
      saw_empty = x.is_empty();
      Tensor next = c.leaf() * w + 1.0;
      return std::pair{Tree(next), Tree(sin(next))};
    };
    ScanOptions five;
    five.length = 5;
    Outcome out = CheckScan(fn, Tree(init), Tree(), {w}, five);
    EXPECT_TRUE(saw_empty);
    EXPECT_EQ(out.ys.leaf().shape().dims(), (std::vector<int64_t>{5, 2}));
    // An empty list of xs, with the length given.
    auto list_fn = [&](const Tree& c, const Tree& x) {
      EXPECT_TRUE(x.is_list());
      return fn(c, Tree());
    };
    CheckScan(list_fn, Tree(init), Tree(Tree::List{}), {w}, five);
    // A length that agrees with xs.
    ScanOptions three;
    three.length = 3;
    auto x_fn = [&](const Tree& c, const Tree& x) {
      Tensor next = c.leaf() * w + x.leaf();
      return std::pair{Tree(next), Tree(next)};
    };
    CheckScan(x_fn, Tree(init), Tree(R(102, {3, 2}, dt)), {w}, three);
  }
}

TEST(ScanPort, LengthZero) {
  for (DType dt : {kF32, kF64}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor w = T({2, 3}, {2}, dt), init = T({1, -1}, {2}, dt);
    auto fn = [&](const Tree& c, const Tree& x) {
      Tensor next = c.leaf() * w + (x.is_empty() ? zeros({2}, dt) : x.leaf());
      return std::pair{Tree(next), Tree{next, sum(next)}};
    };
    // Zero-length xs.
    Tensor xs = zeros({0, 2}, dt);
    auto [carry, ys] = scan(fn, Tree(init), Tree(xs));
    EXPECT_EQ(ys[0].leaf().shape().dims(), (std::vector<int64_t>{0, 2}));
    EXPECT_EQ(ys[1].leaf().shape().dims(), (std::vector<int64_t>{0}));
    auto g = gradients(Squish(carry) + Squish(ys), {init, xs, w});
    // Length 0 without xs.
    ScanOptions zero;
    zero.length = 0;
    auto [carry0, ys0] = scan(fn, Tree(init), Tree(), zero);
    EXPECT_EQ(ys0[0].leaf().shape().dims(), (std::vector<int64_t>{0, 2}));
    auto g0 = gradients(Squish(carry0), {init, w});
    std::vector<Tensor> all = {carry.leaf(), ys[0].leaf(),  ys[1].leaf(), g[0], g[1],
                               g[2],         carry0.leaf(), g0[0],        g0[1]};
    SyncAll(all);
    ExpectValues(all[0], {1, -1}, "carry");  // init itself
    ExpectValues(all[3], {2, 0}, "d init");  // l + 1
    EXPECT_EQ(all[4].shape().dims(), (std::vector<int64_t>{0, 2}));
    ExpectValues(all[5], {0, 0}, "d w");
    ExpectValues(all[6], {1, -1}, "carry, no xs");
    ExpectValues(all[7], {2, 0}, "d init, no xs");
    ExpectValues(all[8], {0, 0}, "d w, no xs");
  }
}

// ---- 13. nested scan -----------------------------------------------------------------------

// The outer body scans its x ([4, 2]) from the outer carry; the inner body
// reads w (two levels out) and the outer carry.
Program NestedProgram(const Scanner& outer, const Scanner& inner, const Tensor& w,
                      const Tensor& init, const Tensor& xs) {
  return [=] {
    return outer(
        [&](const Tree& c, const Tree& x) {
          const Tensor& oc = c.leaf();
          auto [ic, iys] = inner(
              [&](const Tree& ci, const Tree& xi) {
                Tensor next = tanh(matmul(ci.leaf(), w) + xi.leaf() * oc);
                return std::pair{Tree(next), Tree(next * 2.0)};
              },
              Tree(oc), x);
          Tensor next = ic.leaf() + sum(iys.leaf(), {0}) * 0.1;
          return std::pair{Tree(next), iys};
        },
        Tree(init), Tree(xs));
  };
}

TEST(ScanPort, NestedScan) {
  for (DType dt : {kF32, kF64}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor w = R(110, {2, 2}, dt), init = R(111, {2}, dt), xs = R(112, {3, 4, 2}, dt);
    Program want = NestedProgram(UseLoop, UseLoop, w, init, xs);
    {
      SCOPED_TRACE("scan in scan");
      Outcome out = Compare(NestedProgram(UseScan, UseScan, w, init, xs), want, {init, xs, w});
      EXPECT_EQ(out.ys.leaf().shape().dims(), (std::vector<int64_t>{3, 4, 2}));
    }
    {
      SCOPED_TRACE("loop in scan");
      Compare(NestedProgram(UseScan, UseLoop, w, init, xs), want, {init, xs, w});
    }
  }
}

// A scan inside a for-loop captures w and the loop's carry, itself computed
// from w (regression: d/dw used to count that path twice).
TEST(ScanPort, NestedScanInsideLoop) {
  for (DType dt : {kF32, kF64}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor w = R(110, {2, 2}, dt), init = R(111, {2}, dt), xs = R(112, {3, 4, 2}, dt);
    Compare(NestedProgram(UseLoop, UseScan, w, init, xs),
            NestedProgram(UseLoop, UseLoop, w, init, xs), {init, xs, w});
  }
}

// d/dw when fn captures both w and v = 3w: 4 w c0 has d/dw = 4 (regression:
// the backward step once reached from v back to w itself, giving 7).
TEST(ScanPort, CapturedTensorComputedFromAnother) {
  Tensor w = T({0.5}, {1}), c0 = T({1}, {1});
  Tensor v = w * 3.0;
  ScanOptions one;
  one.length = 1;
  auto [carry, ys] = scan(
      [&](const Tree& c, const Tree&) {
        return std::pair{Tree(c.leaf() * w + c.leaf() * v), Tree()};
      },
      Tree(c0), Tree(), one);
  auto g = gradients(sum(carry.leaf()), {w});
  ExpectValues(carry.leaf(), {2}, "carry");
  ExpectValues(g[0], {4}, "d w");
  // carry = w, y = w * 2 (an invariant computed from the invariant w).
  Tensor w2 = R(1, {2}), init = R(2, {2}), xs = R(3, {3, 2});
  CheckScan(
      [&](const Tree&, const Tree&) {
        return std::pair{Tree(w2), Tree(w2 * 2.0)};
      },
      Tree(init), Tree(xs), {w2});
}

// ---- 14. unroll --------------------------------------------------------------------------

TEST(ScanPort, UnrollWithRemainder) {
  for (DType dt : {kF32, kF64}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor w = R(120, {2}, dt), init = R(121, {2}, dt), xs = R(122, {7, 2}, dt);
    auto fn = [&](const Tree& c, const Tree& x) {
      Tensor next = sin(c.leaf() * w + x.leaf());
      return std::pair{Tree(next), Tree(next * 2.0)};
    };
    std::vector<Outcome> outcomes;
    for (int64_t unroll : {1, 2, 3, 7, 10}) {
      SCOPED_TRACE("unroll " + std::to_string(unroll));
      ScanOptions options;
      options.unroll = unroll;
      outcomes.push_back(CheckScan(fn, Tree(init), Tree(xs), {w}, options));
      // One while; the body op once per copy in it plus once per leftover step.
      auto [carry, ys] = scan(fn, Tree(init), Tree(xs), options);
      std::string text = lazy::LoweringContext({carry.leaf(), ys.leaf()}).hlo_text();
      const int64_t u = std::min<int64_t>(unroll, 7);
      EXPECT_EQ(Count(text, " while("), 1) << text;
      EXPECT_EQ(Count(text, " sine("), u + 7 % u) << text;
      // Forward and backward: one while each.
      auto g = gradients(Squish(carry) + Squish(ys), {init, xs, w});
      EXPECT_EQ(Count(lazy::LoweringContext(g).hlo_text(), " while("), 2);
    }
    // Identical results, bit for bit.
    for (size_t k = 1; k < outcomes.size(); ++k) {
      SCOPED_TRACE("unroll variant " + std::to_string(k));
      EXPECT_EQ(ToDoubles(outcomes[k].carry.leaf()), ToDoubles(outcomes[0].carry.leaf()));
      EXPECT_EQ(ToDoubles(outcomes[k].ys.leaf()), ToDoubles(outcomes[0].ys.leaf()));
      for (size_t i = 0; i < outcomes[0].grads.size(); ++i)
        EXPECT_EQ(ToDoubles(outcomes[k].grads[i]), ToDoubles(outcomes[0].grads[i])) << i;
    }
  }
}

// ---- 15. errors ------------------------------------------------------------------------------

// The strata::Error `f` throws (empty if none).
std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a strata::Error: ") + e.what();
  }
  return "";
}

// A scan that must still work after an error.
void ExpectScanStillWorks() {
  auto [carry, ys] = scan(
      [](const Tree& c, const Tree& x) {
        Tensor s = c.leaf() + x.leaf();
        return std::pair{Tree(s), Tree(s)};
      },
      Tree(T({0, 0}, {2})), Tree(T({1, 2, 3, 4}, {2, 2})));
  ExpectValues(carry.leaf(), {4, 6}, "carry after the error");
}

TEST(ScanPort, ErrorCarryStructure) {
  Tensor a = T({1, 2}, {2}), b = T({3}, {1}), xs = zeros({3, 2});
  Tree init(Tree::Dict{{"h", a}, {"s", Tree{b, b * 2.0}}});
  auto fn = [](const Tree& c, const Tree&) {
    // A list of one (Tree{t} of a Tree t is a copy to some compilers).
    return std::pair{Tree(Tree::Dict{{"h", c["h"]}, {"s", Tree(Tree::List{c["s"][0]})}}), Tree()};
  };
  EXPECT_THROW(scan(fn, init, Tree(xs)), Error);
  std::string msg = ErrorOf([&] { scan(fn, init, Tree(xs)); });
  EXPECT_THAT(msg, StartsWith("[scan]"));
  EXPECT_THAT(msg, HasSubstr("['s']"));
  EXPECT_THAT(msg, HasSubstr("a list of 2 vs a list of 1"));
  ExpectScanStillWorks();
}

TEST(ScanPort, ErrorCarryShape) {
  Tree init{T({1, 2}, {2}), Tree(Tree::Dict{{"w", T({1, 2, 3}, {3})}})};
  auto fn = [](const Tree& c, const Tree&) {
    return std::pair{Tree{c[0], Tree(Tree::Dict{{"w", unsqueeze(c[1]["w"].leaf(), 0)}})}, Tree()};
  };
  ScanOptions options;
  options.length = 2;
  EXPECT_THROW(scan(fn, init, Tree(), options), Error);
  std::string msg = ErrorOf([&] { scan(fn, init, Tree(), options); });
  EXPECT_THAT(msg, StartsWith("[scan]"));
  EXPECT_THAT(msg, HasSubstr("[1]['w']"));
  EXPECT_THAT(msg, HasSubstr("f32[3]"));
  EXPECT_THAT(msg, HasSubstr("f32[1,3]"));
}

TEST(ScanPort, ErrorCarryDtype) {
  // An s64 counter plus a float scalar becomes f32.
  Tree init(Tree::Dict{{"n", Tensor::FromVector<int64_t>({0}, {})}, {"h", T({1}, {1})}});
  auto fn = [](const Tree& c, const Tree&) {
    return std::pair{Tree(Tree::Dict{{"n", c["n"].leaf() + 0.5}, {"h", c["h"]}}), Tree()};
  };
  ScanOptions options;
  options.length = 2;
  EXPECT_THROW(scan(fn, init, Tree(), options), Error);
  std::string msg = ErrorOf([&] { scan(fn, init, Tree(), options); });
  EXPECT_THAT(msg, StartsWith("[scan]"));
  EXPECT_THAT(msg, HasSubstr("['n']"));
  EXPECT_THAT(msg, HasSubstr("s64[]"));
  EXPECT_THAT(msg, HasSubstr("f32[]"));
  // f32 returned as f64.
  auto widen = [](const Tree& c, const Tree&) {
    return std::pair{Tree(astype(c.leaf(), kF64)), Tree()};
  };
  std::string msg2 = ErrorOf([&] { scan(widen, Tree(T({1}, {1})), Tree(), options); });
  EXPECT_THAT(msg2, StartsWith("[scan]"));
  EXPECT_THAT(msg2, HasSubstr("f32[1]"));
  EXPECT_THAT(msg2, HasSubstr("f64[1]"));
}

TEST(ScanPort, ErrorXsAndLength) {
  auto fn = [](const Tree& c, const Tree&) { return std::pair{c, Tree()}; };
  Tree init(T({0, 0}, {2}));
  // Different leading sizes (test_scan_incompatible_length).
  Tree xs{zeros({3, 2}), zeros({2, 2})};
  EXPECT_THROW(scan(fn, init, xs), Error);
  std::string msg = ErrorOf([&] { scan(fn, init, xs); });
  EXPECT_THAT(msg, StartsWith("[scan]"));
  EXPECT_THAT(msg, HasSubstr("xs[1]"));
  EXPECT_THAT(msg, HasSubstr("leading size 2"));
  EXPECT_THAT(msg, HasSubstr("xs[0]"));
  // A length that disagrees with xs.
  ScanOptions four;
  four.length = 4;
  msg = ErrorOf([&] { scan(fn, init, Tree(zeros({3, 2})), four); });
  EXPECT_THAT(msg, StartsWith("[scan]"));
  EXPECT_THAT(msg, HasSubstr("leading size 3"));
  EXPECT_THAT(msg, HasSubstr("length"));
  // Neither xs nor length.
  EXPECT_THROW(scan(fn, init, Tree()), Error);
  msg = ErrorOf([&] { scan(fn, init, Tree(Tree::List{})); });
  EXPECT_THAT(msg, StartsWith("[scan]"));
  EXPECT_THAT(msg, HasSubstr("no length"));
  // A scalar xs leaf.
  Tree scalar_xs(Tree::Dict{{"a", zeros({3})}, {"b", zeros({})}});
  EXPECT_THROW(scan(fn, init, scalar_xs), Error);
  msg = ErrorOf([&] { scan(fn, init, scalar_xs); });
  EXPECT_THAT(msg, StartsWith("[scan]"));
  EXPECT_THAT(msg, HasSubstr("xs['b']"));
  EXPECT_THAT(msg, HasSubstr("scalar"));
  // Bad options.
  ScanOptions negative;
  negative.length = -1;
  EXPECT_THAT(ErrorOf([&] { scan(fn, init, Tree(), negative); }), StartsWith("[scan] length"));
  ScanOptions no_unroll;
  no_unroll.unroll = 0;
  EXPECT_THAT(ErrorOf([&] {
                scan(fn, init, Tree(zeros({3, 2})), no_unroll);
              }),
              StartsWith("[scan] unroll"));
  ExpectScanStillWorks();
}

TEST(ScanPort, ErrorBodyTensorStoredOutside) {
  Tensor stash;
  auto fn = [&](const Tree& c, const Tree& x) {
    stash = c.leaf() * 2.0;
    return std::pair{Tree(c.leaf() + x.leaf()), Tree()};
  };
  Tree init(T({0, 0}, {2}));
  Tree xs(T({1, 2, 3, 4}, {2, 2}));
  std::string msg = ErrorOf([&] { scan(fn, init, xs); });
  EXPECT_THAT(msg, StartsWith("[scan]"));
  EXPECT_THAT(msg, HasSubstr("still alive outside"));
  stash = Tensor();  // a leaked tensor left alive breaks later scans (see below)
  ExpectScanStillWorks();
}

// Assigning a body tensor to an outer variable (`outer = c + x`, copy or
// move) is an error and `outer` keeps its value (assignment keeps the
// handle's identity, so the leak check can undo it).
TEST(ScanPort, AssignedOuterTensorKeepsItsValue) {
  Tree init(T({0, 0}, {2}));
  Tree xs(T({1, 2, 3, 4}, {2, 2}));
  Tensor outer = T({5, 6}, {2});
  auto assign = [&](const Tree& c, const Tree& x) {
    outer = c.leaf() + x.leaf();
    return std::pair{c, Tree()};
  };
  EXPECT_THROW(scan(assign, init, xs), Error);
  ExpectValues(outer, {5, 6}, "outer keeps its old value");
  Tensor outer2 = T({7, 8}, {2});
  auto copy = [&](const Tree& c, const Tree&) {
    outer2 = c.leaf();
    return std::pair{c, Tree()};
  };
  EXPECT_THROW(scan(copy, init, xs), Error);
  ExpectValues(outer2, {7, 8}, "outer2 keeps its old value");
}

// A tensor leaked by an earlier failed trace (still alive) does not make
// later, unrelated scans fail.
TEST(ScanPort, LeakedTensorDoesNotBreakLaterScans) {
  Tensor stash;
  auto fn = [&](const Tree& c, const Tree& x) {
    stash = c.leaf() * 2.0;
    return std::pair{Tree(c.leaf() + x.leaf()), Tree()};
  };
  EXPECT_THROW(scan(fn, Tree(T({0, 0}, {2})), Tree(T({1, 2, 3, 4}, {2, 2}))), Error);
  ExpectScanStillWorks();
}

TEST(ScanPort, ErrorCapturedTensorRebound) {
  // test_scan_external_in_place_mutation.
  Tensor outer = T({1, 2}, {2});
  auto fn = [&](const Tree& c, const Tree& x) {
    outer += x.leaf();
    return std::pair{Tree(c.leaf() + outer), Tree(outer)};
  };
  Tree init(T({0, 0}, {2}));
  Tree xs(T({1, 2, 3, 4}, {2, 2}));
  EXPECT_THROW(scan(fn, init, xs), Error);
  std::string msg = ErrorOf([&] { scan(fn, init, xs); });
  EXPECT_THAT(msg, StartsWith("[scan]"));
  EXPECT_THAT(msg, HasSubstr("assigned or updated in place"));
  ExpectValues(outer, {1, 2}, "outer keeps its old value");
  // Still usable as a captured tensor.
  auto [carry, ys] = scan(
      [&](const Tree& c, const Tree& x) {
        return std::pair{Tree(c.leaf() + x.leaf() * outer), Tree()};
      },
      init, xs);
  ExpectValues(carry.leaf(), {4, 12}, "carry");
}

TEST(ScanPort, ErrorMaterializingInsideFn) {
  Tree init(T({0, 0}, {2}));
  Tree xs(T({1, 2, 3, 4}, {2, 2}));
  auto item = [](const Tree& c, const Tree& x) {
    float v = sum(c.leaf()).item<float>();
    return std::pair{Tree(c.leaf() + v), Tree()};
  };
  EXPECT_THROW(scan(item, init, xs), Error);
  EXPECT_THAT(ErrorOf([&] { scan(item, init, xs); }), HasSubstr("scan body"));
  auto to_vector = [](const Tree& c, const Tree& x) {
    std::vector<float> v = x.leaf().to_vector<float>();
    return std::pair{Tree(c.leaf() + v[0]), Tree()};
  };
  EXPECT_THROW(scan(to_vector, init, xs), Error);
  EXPECT_THAT(ErrorOf([&] { scan(to_vector, init, xs); }), HasSubstr("scan body"));
  ExpectScanStillWorks();
}

// test_scan_fn_not_callable: an empty function should be a strata::Error.
TEST(ScanPort, ErrorFnNotCallable) {
  EXPECT_THAT(ErrorOf([] {
                scan(ScanFn(), Tree(T({0}, {1})), Tree(zeros({3, 1})));
              }),
              StartsWith("[scan]"));
}

// ---- 16. caching --------------------------------------------------------------------------

TEST(ScanPort, RetracingHitsTheCache) {
  auto& metrics = lazy::Context::Get().metrics();
  auto step = [](double scale, uint64_t seed) {
    Tensor w = R(seed, {2, 2}), init = R(seed + 1, {2}), xs = R(seed + 2, {5, 2});
    auto [carry, ys] = scan(
        [&](const Tree& c, const Tree& x) {
          Tensor next = tanh(matmul(c.leaf(), w) * scale + x.leaf());
          return std::pair{Tree(next), Tree(next)};
        },
        Tree(init), Tree(xs));
    auto g = gradients(sum(carry.leaf()) + sum(ys.leaf()), {w, init});
    std::vector<Tensor> out = {carry.leaf(), ys.leaf(), g[0], g[1]};
    SyncAll(out);
    return ToDoubles(out[0]);
  };
  step(0.5, 130);
  const int64_t compiles = metrics.compiles, hits = metrics.cache_hits;
  // Same shapes, new data: no compile.
  std::vector<double> second = step(0.5, 140);
  EXPECT_EQ(metrics.compiles, compiles);
  EXPECT_EQ(metrics.cache_hits, hits + 1);
  // A new C++ scalar in the body is a parameter: still no compile, new values.
  std::vector<double> third = step(0.25, 140);
  EXPECT_EQ(metrics.compiles, compiles);
  EXPECT_EQ(metrics.cache_hits, hits + 2);
  EXPECT_NE(second, third);
}

}  // namespace
}  // namespace strata
