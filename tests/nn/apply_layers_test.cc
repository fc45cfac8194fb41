// apply_layers against applying the layers one after another (values and
// every gradient), and each homogeneity error.
#include "strata/nn/apply_layers.h"

#include <gtest/gtest.h>

#include "strata/autograd/grad.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/nn/layers.h"

namespace strata::nn {
namespace {

// A residual block: x + dropout(tanh(fc(norm(x)))).
class Block : public Module {
 public:
  Block(int64_t width, double p, const Tensor& key, bool bias = true)
      : Module("Block"),
        norm(register_module("norm", std::make_unique<LayerNorm>(width))),
        fc(register_module("fc", std::make_unique<Linear>(width, width, bias, key))),
        drop(register_module("drop", std::make_unique<Dropout>(p))) {}
  Tensor forward(const Tensor& x, const Tensor& key) {
    return x + drop.forward(tanh(fc.forward(norm.forward(x))), key);
  }
  LayerNorm& norm;
  Linear& fc;
  Dropout& drop;
};

std::vector<std::unique_ptr<Block>> MakeBlocks(int n, int64_t width, double p = 0.0) {
  std::vector<std::unique_ptr<Block>> blocks;
  std::vector<Tensor> keys = split_key(random_key(11), n);
  for (int i = 0; i < n; ++i) blocks.push_back(std::make_unique<Block>(width, p, keys[i]));
  return blocks;
}

std::vector<Module*> Pointers(std::vector<std::unique_ptr<Block>>& blocks) {
  std::vector<Module*> out;
  for (auto& b : blocks) out.push_back(b.get());
  return out;
}

void ExpectClose(const Tensor& a, const Tensor& b, double tol = 1e-5) {
  ASSERT_EQ(a.shape(), b.shape());
  auto x = a.to_vector<float>(), y = b.to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(x[i], y[i], tol * std::max(1.0f, std::abs(y[i]))) << i;
}

TEST(ApplyLayers, EqualsTheLayersOneAfterAnother) {
  for (double p : {0.0, 0.3}) {
    SCOPED_TRACE(p);
    auto blocks = MakeBlocks(4, 8, p);
    Tensor x = normal(5, {2, 3, 8}), key = random_key(9);
    LayerForward fwd = [&](Module& m, const Tensor& h) {
      return static_cast<Block&>(m).forward(h, key);
    };
    Tensor scanned = apply_layers(Pointers(blocks), x, fwd);
    Tensor unrolled = x;
    for (auto& b : blocks) unrolled = b->forward(unrolled, key);
    std::vector<Tensor> wrt = {x};
    for (auto& b : blocks) {
      for (Tensor* t : b->parameters()) wrt.push_back(*t);
    }
    Tensor loss_s = sum(scanned * scanned), loss_u = sum(unrolled * unrolled);
    std::vector<Tensor> gs = gradients(loss_s, wrt), gu = gradients(loss_u, wrt);
    // One While, not one copy of the block per layer.
    std::string hlo = lazy::LoweringContext({scanned}).hlo_text();
    size_t whiles = 0;
    for (size_t at = hlo.find(" while("); at != std::string::npos; at = hlo.find(" while(", at + 1))
      ++whiles;
    EXPECT_EQ(whiles, 1u);
    std::vector<Tensor*> all = {&scanned, &unrolled};
    for (Tensor& g : gs) all.push_back(&g);
    for (Tensor& g : gu) all.push_back(&g);
    sync(all);  // one program
    ExpectClose(scanned, unrolled);
    for (size_t i = 0; i < gs.size(); ++i) {
      SCOPED_TRACE(i);
      ExpectClose(gs[i], gu[i]);
    }
  }
}

// A layer without parameters.
class Squash : public Module {
 public:
  Squash() : Module("Squash") {}
};

TEST(ApplyLayers, LayersWithoutParametersAndTheEmptyList) {
  Squash a, b, c;
  Tensor x = Tensor::FromVector<float>({0.5, -1, 2}, {3});
  LayerForward fwd = [](Module&, const Tensor& h) { return tanh(h) * 2.0; };
  Tensor y = apply_layers({&a, &b, &c}, x, fwd);
  Tensor expected = tanh(tanh(tanh(x) * 2.0) * 2.0) * 2.0;
  ExpectClose(y, expected);
  EXPECT_EQ(apply_layers({}, x, fwd).value().node, x.value().node);
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(ApplyLayers, HeterogeneousLayersAreNamed) {
  Tensor x = normal(5, {2, 8}), key = random_key(9);
  LayerForward fwd = [&](Module& m, const Tensor& h) {
    return static_cast<Block&>(m).forward(h, key);
  };
  std::vector<Tensor> keys = split_key(random_key(1), 3);
  {  // a different dropout rate: a captured scalar, not a different program
    Block a(8, 0.1, keys[0]), b(8, 0.1, keys[1]), c(8, 0.2, keys[2]);
    std::string e = ErrorOf([&] { apply_layers({&a, &b, &c}, x, fwd); });
    EXPECT_NE(e.find("layer 2 differs from layer 0"), std::string::npos) << e;
    EXPECT_NE(e.find("scalar"), std::string::npos) << e;
  }
  {  // eval mode in one submodule
    Block a(8, 0.1, keys[0]), b(8, 0.1, keys[1]);
    b.drop.eval();
    std::string e = ErrorOf([&] { apply_layers({&a, &b}, x, fwd); });
    EXPECT_NE(e.find("layer 1 differs from layer 0: 'drop' is in eval mode"), std::string::npos)
        << e;
  }
  {  // a missing parameter
    Block a(8, 0, keys[0]), b(8, 0, keys[1], /*bias=*/false);
    std::string e = ErrorOf([&] { apply_layers({&a, &b}, x, fwd); });
    EXPECT_NE(e.find("layer 1 differs from layer 0: it has no 'fc.bias'"), std::string::npos) << e;
  }
  {  // a shape
    Block a(8, 0, keys[0]), b(8, 0, keys[1]);
    b.fc.weight = zeros({8, 4});
    std::string e = ErrorOf([&] { apply_layers({&a, &b}, x, fwd); });
    EXPECT_NE(e.find("'fc.weight' is f32[8,4], in layer 0 f32[8,8]"), std::string::npos) << e;
  }
  {  // a dtype
    Block a(8, 0, keys[0]), b(8, 0, keys[1]);
    b.norm.weight = ones({8}, DType::kF64);
    std::string e = ErrorOf([&] { apply_layers({&a, &b}, x, fwd); });
    EXPECT_NE(e.find("layer 1 differs from layer 0"), std::string::npos) << e;
    EXPECT_NE(e.find("f64[8]"), std::string::npos) << e;
  }
}

TEST(Module, NamesStateDictsAndFunctionalCall) {
  auto blocks = MakeBlocks(1, 4);
  Block& b = *blocks[0];
  std::vector<std::string> names;
  for (auto& [n, t] : b.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"norm.weight", "norm.bias", "fc.weight", "fc.bias"}));
  // Linear's default init: U(-1/sqrt(in), 1/sqrt(in)).
  for (float v : b.fc.weight.to_vector<float>()) EXPECT_LE(std::abs(v), 0.5f);
  auto state = b.state_dict();
  state["fc.bias"] = Tensor::FromVector<float>({1, 2, 3, 4}, {4});
  b.load_state_dict(state);
  EXPECT_EQ(b.fc.bias->to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  state.erase("norm.bias");
  state["extra"] = zeros({1});
  std::string e = ErrorOf([&] { b.load_state_dict(state); });
  EXPECT_NE(e.find("missing: norm.bias"), std::string::npos) << e;
  EXPECT_NE(e.find("unexpected: extra"), std::string::npos) << e;
  state["norm.bias"] = zeros({5});
  e = ErrorOf([&] { b.load_state_dict(state, /*strict=*/false); });
  EXPECT_NE(e.find("norm.bias (expected f32[4], found f32[5])"), std::string::npos) << e;
  EXPECT_EQ(b.fc.bias->to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));  // unchanged
  // functional_call swaps in and restores, also on error.
  Tensor x = ones({4});
  Tensor swapped;
  functional_call(b, {{"fc.bias", zeros({4})}}, [&] { swapped = b.fc.forward(x); });
  Tensor direct = matmul(x, transpose(b.fc.weight, 0, 1));
  ExpectClose(swapped, direct);
  EXPECT_EQ(b.fc.bias->to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_THROW(functional_call(b, {{"fc.bias", zeros({4})}}, [] { Fail("boom"); }), Error);
  EXPECT_EQ(b.fc.bias->to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_THROW(functional_call(b, {{"nope", zeros({4})}}, [] {}), Error);
  b.eval();
  EXPECT_FALSE(b.drop.is_training());
}

}  // namespace
}  // namespace strata::nn
