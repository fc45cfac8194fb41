// apply_layers against applying the layers one after another (values and
// every gradient), and each homogeneity error.
#include "strata/nn/apply_layers.h"

#include <gtest/gtest.h>

#include "strata/autograd/grad.h"
#include "strata/ir/lowering.h"
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

// ---- LayerStack: the layers' tensors stored stacked ----

std::vector<std::unique_ptr<Module>> AsModules(std::vector<std::unique_ptr<Block>> blocks) {
  std::vector<std::unique_ptr<Module>> out;
  for (auto& b : blocks) out.push_back(std::move(b));
  return out;
}

int64_t CountOps(const std::vector<Tensor>& roots, hlo::Opcode op) {
  std::vector<ir::Value> values;
  for (const Tensor& t : roots) values.push_back(t.value());
  int64_t n = 0;
  for (const ir::Node* node : ir::BuildGraph(values).post_order)
    n += node->kind() == ir::NodeKind::kOp && node->opcode() == op;
  return n;
}

// Scan and unrolled over the stack equal the original, separately stored
// layers applied one after another: values and each layer's gradients
// (row i of a stacked gradient against layer i's own).
TEST(LayerStack, EqualsTheOriginalLayersOneAfterAnother) {
  for (double p : {0.0, 0.3}) {
    SCOPED_TRACE(p);
    auto reference = MakeBlocks(4, 8, p);
    Tensor x = normal(5, {2, 3, 8}), key = random_key(9);
    LayerForward fwd = [&](Module& m, const Tensor& h) {
      return static_cast<Block&>(m).forward(h, key);
    };
    LayerStack stack(AsModules(MakeBlocks(4, 8, p)), x, fwd);  // same keys, same weights
    ASSERT_EQ(stack.size(), 4);
    Tensor expected = x;
    for (auto& b : reference) expected = b->forward(expected, key);
    std::vector<Tensor> ref_wrt;
    for (auto& b : reference) {
      for (Tensor* t : b->parameters()) ref_wrt.push_back(*t);
    }
    std::vector<Tensor> ref_grads = gradients(sum(expected * expected), ref_wrt);
    std::vector<std::pair<std::string, Tensor*>> stacked = stack.named_parameters();
    ASSERT_EQ(stacked.size(), 4u);  // norm.weight, norm.bias, fc.weight, fc.bias
    std::vector<Tensor> wrt;
    for (auto& [name, t] : stacked) wrt.push_back(*t);
    for (bool unrolled : {false, true}) {
      SCOPED_TRACE(unrolled ? "unrolled" : "scan");
      Tensor y = unrolled ? stack.forward_unrolled(x, fwd) : stack.forward(x, fwd);
      std::vector<Tensor> grads = gradients(sum(y * y), wrt);
      ExpectClose(y, expected);
      for (size_t k = 0; k < stacked.size(); ++k) {
        for (int64_t layer = 0; layer < 4; ++layer) {
          SCOPED_TRACE(stacked[k].first + " layer " + std::to_string(layer));
          Tensor row = reshape(slice(grads[k], 0, layer, layer + 1), ref_grads[k].shape().dims());
          ExpectClose(row, ref_grads[layer * stacked.size() + k]);
        }
      }
    }
  }
}

// A step over a stack traces the layer once, whatever the depth, and its
// gradient program stacks nothing; apply_layers over a list traces every
// layer and stacks every parameter.
TEST(LayerStack, TracesOneLayerAndStacksNothingPerStep) {
  Tensor x = normal(5, {2, 8});
  int64_t traces = 0;
  LayerForward fwd = [&](Module& m, const Tensor& h) {
    ++traces;
    return static_cast<Block&>(m).forward(h, Tensor());
  };
  std::vector<int64_t> slices;  // per depth: must not grow with it
  for (int n : {2, 16}) {
    SCOPED_TRACE(n);
    LayerStack stack(AsModules(MakeBlocks(n, 8)), x, fwd);
    sync(stack.parameters());  // weights are data, as in training
    std::vector<Tensor> wrt;
    for (Tensor* t : stack.parameters()) wrt.push_back(*t);
    traces = 0;
    Tensor y = stack.forward(x, fwd);
    EXPECT_EQ(traces, 1);
    std::vector<Tensor> roots = gradients(sum(y), wrt);
    roots.push_back(y);
    EXPECT_EQ(CountOps(roots, hlo::Opcode::kConcatenate), 0);
    slices.push_back(CountOps(roots, hlo::Opcode::kSlice));
    // The list form of the same layers.
    auto blocks = MakeBlocks(n, 8);
    for (auto& b : blocks) sync(b->parameters());
    traces = 0;
    Tensor z = apply_layers(Pointers(blocks), x, fwd);
    EXPECT_EQ(traces, n + 1);  // n proofs, then the scan's own trace
    EXPECT_GT(CountOps({z}, hlo::Opcode::kConcatenate), 0);
  }
  EXPECT_EQ(slices[0], slices[1]);
}

TEST(LayerStack, StateDictsNameEveryLayer) {
  Tensor x = normal(5, {2, 4});
  LayerForward fwd = [&](Module& m, const Tensor& h) {
    return static_cast<Block&>(m).forward(h, Tensor());
  };
  LayerStack stack(AsModules(MakeBlocks(3, 4)), x, fwd);
  std::vector<std::string> names;
  for (auto& [n, t] : stack.named_parameters()) names.push_back(n + " " + t->shape().ToString());
  EXPECT_EQ(names, (std::vector<std::string>{"*.norm.weight f32[3,4]", "*.norm.bias f32[3,4]",
                                             "*.fc.weight f32[3,4,4]", "*.fc.bias f32[3,4]"}));
  names.clear();
  for (auto& [n, t] : stack.state_entries()) names.push_back(n);
  ASSERT_EQ(names.size(), 12u);  // layer by layer, as checkpoints order them
  EXPECT_EQ(names[0], "0.norm.weight");
  EXPECT_EQ(names[3], "0.fc.bias");
  EXPECT_EQ(names[4], "1.norm.weight");
  EXPECT_EQ(names[11], "2.fc.bias");
  // Each entry is that layer's slice: the original layer 1's fc.weight.
  auto originals = MakeBlocks(3, 4);
  auto state = stack.state_dict();
  EXPECT_EQ(state.at("1.fc.weight").to_vector<float>(), originals[1]->fc.weight.to_vector<float>());
  // Loading a changed entry changes that row of the stack only.
  state["2.fc.bias"] = Tensor::FromVector<float>({1, 2, 3, 4}, {4});
  requires_grad_(stack.tensor("*.fc.bias"));
  stack.load_state_dict(state);
  std::vector<float> bias = stack.tensor("*.fc.bias").to_vector<float>();
  EXPECT_EQ(std::vector<float>(bias.begin() + 8, bias.end()), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(std::vector<float>(bias.begin(), bias.begin() + 4),
            originals[0]->fc.bias->to_vector<float>());
  EXPECT_TRUE(requires_grad(stack.tensor("*.fc.bias")));  // the slot's flag is kept
  // Errors name the layer's entry; nothing changes on error.
  auto broken = state;
  broken.erase("1.fc.weight");
  broken["2.norm.bias"] = zeros({5});
  std::string e = ErrorOf([&] { stack.load_state_dict(broken); });
  EXPECT_NE(e.find("missing: 1.fc.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("2.norm.bias (expected f32[4], found f32[5])"), std::string::npos) << e;
  EXPECT_EQ(stack.tensor("*.fc.bias").to_vector<float>(), bias);
  e = ErrorOf([&] { stack.tensor("1.fc.weight"); });
  EXPECT_NE(e.find("layer 1 of the stacked '*.fc.weight' f32[3,4,4]"), std::string::npos) << e;
  // Per-tensor values (gradients) in state-dict form; stacks must agree on N.
  auto entries =
      unstack_entries({{"a.*.w", zeros({2, 3})}, {"a.*.b", ones({2})}, {"c", zeros({1})}});
  names.clear();
  for (auto& [n, t] : entries) names.push_back(n + " " + t.shape().ToString());
  EXPECT_EQ(names, (std::vector<std::string>{"a.0.w f32[3]", "a.0.b f32[]", "a.1.w f32[3]",
                                             "a.1.b f32[]", "c f32[1]"}));
  e = ErrorOf([&] { unstack_entries({{"a.*.w", zeros({2, 3})}, {"a.*.b", ones({3})}}); });
  EXPECT_NE(e.find("stacked 'a.*.b' has 3 layers, 'a.*.w' 2"), std::string::npos) << e;
}

TEST(LayerStack, ProvesHomogeneityWhenBuiltAndFollowsTheMode) {
  Tensor x = normal(5, {2, 8}), key = random_key(9);
  LayerForward fwd = [&](Module& m, const Tensor& h) {
    return static_cast<Block&>(m).forward(h, key);
  };
  std::vector<Tensor> keys = split_key(random_key(1), 3);
  std::vector<std::unique_ptr<Module>> layers;
  layers.push_back(std::make_unique<Block>(8, 0.1, keys[0]));
  layers.push_back(std::make_unique<Block>(8, 0.2, keys[1]));
  std::string e = ErrorOf([&] { LayerStack stack(std::move(layers), x, fwd); });
  EXPECT_NE(e.find("layer 1 differs from layer 0"), std::string::npos) << e;
  // Dropout follows the stack's mode: in eval mode it is the identity.
  auto reference = MakeBlocks(3, 8, 0.5);
  LayerStack stack(AsModules(MakeBlocks(3, 8, 0.5)), x, fwd);
  stack.eval();
  Tensor expected = x;
  for (auto& b : reference) {
    b->eval();
    expected = b->forward(expected, key);
  }
  ExpectClose(stack.forward(x, fwd), expected);
  stack.train();
  Tensor dropped = stack.forward(x, fwd);
  EXPECT_NE(dropped.to_vector<float>(), expected.to_vector<float>());
  // No layers: the input.
  LayerStack empty({}, x, fwd);
  EXPECT_EQ(empty.forward(x, fwd).value().node, x.value().node);
  EXPECT_TRUE(empty.state_dict().empty());
}

// Stacked paths are checked where they are registered.
class Stacker : public Module {
 public:
  Stacker() : Module("Stacker") {}
  void Add(std::string path, Tensor value) {
    register_stacked(std::move(path), std::move(value), false);
  }
};

TEST(LayerStack, StackedPathsAreChecked) {
  Stacker s;
  s.Add("*.fc.weight", zeros({2, 3}));
  EXPECT_EQ(s.tensor("*.fc.weight").shape().dims(), (std::vector<int64_t>{2, 3}));
  for (const char* bad : {"fc.weight", "*.", "*.fc..w", "*.fc."}) {
    std::string e = ErrorOf([&] { s.Add(bad, zeros({2})); });
    EXPECT_NE(e.find("a stacked path looks like"), std::string::npos) << bad << ": " << e;
  }
  std::string e = ErrorOf([&] { s.Add("*.b", zeros({})); });
  EXPECT_NE(e.find("needs a leading layer dimension"), std::string::npos) << e;
  e = ErrorOf([&] { s.Add("*.fc.weight", zeros({2})); });
  EXPECT_NE(e.find("already has something named '*.fc.weight'"), std::string::npos) << e;
}

}  // namespace
}  // namespace strata::nn
