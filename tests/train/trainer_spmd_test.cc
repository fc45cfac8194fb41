// Training on a mesh: every sharding plan trains the same model to the same
// losses as one device, and a checkpoint written on one mesh resumes on
// another (or on one device) with the losses the uninterrupted run gives.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "strata/core/error.h"
#include "strata/train/trainer.h"

namespace strata::train {
namespace {

namespace fs = std::filesystem;

TrainOptions Tiny() {
  TrainOptions o;
  o.hidden = 16;
  o.num_layers = 2;
  o.heads = 4;
  o.kv_heads = 2;
  o.intermediate = 32;
  o.batch = 4;
  o.seq = 8;
  o.steps = 5;
  o.warmup = 2;
  o.lr = 1e-2;
  o.min_lr = 1e-3;
  o.eval_batches = 1;
  o.seed = 5;
  return o;
}

Corpus TestCorpus() { return LoadCorpus(STRATA_SOURCE_DIR "/data/corpus.txt", 0.1, 9); }

std::vector<float> Losses(const TrainOptions& o, int steps) {
  Trainer t(o, TestCorpus());
  std::vector<float> losses;
  for (int i = 0; i < steps; ++i) losses.push_back(t.Step().loss);
  losses.push_back(t.Evaluate());
  return losses;
}

void ExpectNear(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << "step " << i + 1;
}

class TrainerPlans : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(TrainerPlans, SameLossesAsOneDevice) {
  TrainOptions one = Tiny();
  TrainOptions mesh = Tiny();
  mesh.mesh = GetParam().first;
  mesh.sharding = GetParam().second;
  ExpectNear(Losses(mesh, 5), Losses(one, 5));
}

INSTANTIATE_TEST_SUITE_P(Spmd, TrainerPlans,
                         ::testing::Values(std::pair{"data=2", "dp"}, std::pair{"data=4", "dp"},
                                           std::pair{"data=2", "fsdp"}, std::pair{"model=2", "tp"},
                                           std::pair{"data=2,model=2", "fsdp+tp"}));

TEST(TrainerSpmd, ResumesOnAnotherMesh) {
  fs::path dir = fs::temp_directory_path() / ("strata_trainer_spmd_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  TrainOptions o = Tiny();
  o.steps = 6;
  std::vector<float> uninterrupted;
  {
    Trainer t(o, TestCorpus());
    for (int i = 0; i < 6; ++i) uninterrupted.push_back(t.Step().loss);
  }
  TrainOptions first = o;
  first.mesh = "data=2";
  first.sharding = "fsdp";
  {
    Trainer t(first, TestCorpus());
    for (int i = 0; i < 3; ++i) t.Step();
    t.SaveCheckpoint(dir.string());
  }
  TrainOptions second = o;
  second.mesh = "model=2";
  second.sharding = "tp";
  auto resumed = Trainer::Resume(dir.string(), second, TestCorpus());
  EXPECT_EQ(resumed->step(), 3);
  for (int i = 3; i < 6; ++i) EXPECT_NEAR(resumed->Step().loss, uninterrupted[i], 1e-5) << i;
  fs::remove_all(dir);
}

TEST(TrainerSpmd, BadMeshesAreErrors) {
  TrainOptions o = Tiny();
  for (const char* mesh : {"data", "data=0", "data=2,", "=2", "data=x"}) {
    o.mesh = mesh;
    EXPECT_THROW(o.Validate(), Error) << mesh;
  }
  o.mesh = "data=2";
  o.sharding = "tp";  // needs a 'model' axis
  EXPECT_THROW(o.Validate(), Error);
}

}  // namespace
}  // namespace strata::train
