// strata_fuzz_seeds OUT: writes the seed inputs scripts/fuzz.sh gives the
// harnesses that read files strata itself writes (the HLO seeds come from the
// test suite): OUT/checkpoint/*.pack, OUT/safetensors/*, OUT/llama_config/*.
// Under mpirun -np 2 it writes a job's checkpoint (a shard file per process
// and their index) instead: OUT/checkpoint/job.pack and its shard files.
#include <fmt/core.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "strata/core/error.h"
#include "strata/distributed/mpi.h"
#include "strata/io/llama_config.h"
#include "strata/io/safetensors.h"
#include "strata/lazy/context.h"

namespace fs = std::filesystem;
using namespace strata;

namespace {

void WriteBytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

void WriteText(const fs::path& path, const std::string& text) {
  WriteBytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

// A checkpoint directory of `options` after steps 1 and 2.
fs::path TrainAndSave(const train::TrainOptions& options, const fs::path& dir) {
  if (distributed::Processes().rank == 0) fs::remove_all(dir);  // before any process saves
  train::Trainer trainer(options, fuzz::CheckpointCorpus());
  for (int step = 0; step < 2; ++step) {
    trainer.Step();
    trainer.SaveCheckpoint(dir.string(), 2);
  }
  return dir;
}

std::vector<uint8_t> Bytes(std::initializer_list<uint8_t> b) { return b; }

void SafetensorsSeeds(const fs::path& out, const fs::path& step) {
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    fs::copy_file(step / file, out / file, fs::copy_options::overwrite_existing);
  }
  // Every dtype, with strata's checksums and without metadata.
  std::vector<io::TensorData> tensors = {
      {"f32", DType::kF32, {2}, Bytes({0, 0, 128, 63, 0, 0, 0, 64})},
      {"f16", DType::kF16, {1, 2}, Bytes({0, 60, 0, 64})},
      {"bf16", DType::kBF16, {2}, Bytes({128, 63, 0, 64})},
      {"f64", DType::kF64, {}, Bytes({0, 0, 0, 0, 0, 0, 240, 63})},
      {"i64", DType::kS64, {1}, Bytes({7, 0, 0, 0, 0, 0, 0, 0})},
      {"i32", DType::kS32, {1}, Bytes({255, 255, 255, 255})},
      {"u8", DType::kU8, {3}, Bytes({1, 2, 3})},
      {"bool", DType::kPred, {2}, Bytes({0, 1})},
      {"empty", DType::kF32, {0, 3}, {}},
  };
  WriteBytes(out / "dtypes.safetensors",
             io::SerializeSafetensors(tensors, io::ChecksumMetadata(tensors)));
  WriteBytes(out / "plain.safetensors", io::SerializeSafetensors(tensors));
  WriteBytes(out / "none.safetensors", io::SerializeSafetensors({}));
}

void ConfigSeeds(const fs::path& out, const fs::path& step) {
  fs::copy_file(step / "config.json", out / "trained.json", fs::copy_options::overwrite_existing);
  io::LlamaConfig c = io::ReadLlamaConfig(step / "config.json");
  c.tie_word_embeddings = true;
  c.attention_bias = true;
  c.eos_token_id.reset();
  c.torch_dtype = DType::kBF16;
  WriteText(out / "variant.json", io::ToJson(c));
  c.head_dim = 32;
  c.num_key_value_heads = c.num_attention_heads;
  c.rope_theta = 500000.0;
  c.rms_norm_eps = 1e-5;
  WriteText(out / "head_dim.json", io::ToJson(c));
  // The keys transformers writes that strata ignores, and the newer spellings.
  WriteText(out / "transformers.json", R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "dtype": "float16",
  "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
  "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
  "initializer_range": 0.02, "use_cache": true, "pretraining_tp": 1, "rope_scaling": null,
  "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
  "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": null, "transformers_version": "4.56.0"
}
)");
}

int Main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: strata_fuzz_seeds OUT\n");
    return 2;
  }
  const fs::path out = argv[1];
  const distributed::ProcessGroup& job = distributed::Processes();
  const fs::path scratch = out / "scratch";
  if (job.size > 1) {
    lazy::Context::Get().set_process_group(distributed::MpiProcessGroup());
    train::TrainOptions options = fuzz::CheckpointOptions();
    options.mesh = fmt::format("data={}", job.size);
    options.sharding = "fsdp";
    const fs::path dir = scratch / "job";
    TrainAndSave(options, dir);
    if (job.rank == 0) {
      WriteBytes(out / "checkpoint" / "job.pack", fuzz::PackDirectory(dir));
      for (const auto& entry : fs::directory_iterator(dir / "step-0000002")) {
        if (entry.path().extension() == ".safetensors") {
          fs::copy_file(entry.path(),
                        out / "safetensors" / ("job-" + entry.path().filename().string()),
                        fs::copy_options::overwrite_existing);
        }
      }
    }
    return 0;
  }
  const fs::path run = TrainAndSave(fuzz::CheckpointOptions(), scratch / "run");
  const fs::path step = run / "step-0000002";
  WriteBytes(out / "checkpoint" / "run.pack", fuzz::PackDirectory(run));
  WriteBytes(out / "checkpoint" / "step.pack", fuzz::PackDirectory(step));
  train::TrainOptions mesh = fuzz::CheckpointOptions();
  mesh.mesh = "data=2";
  WriteBytes(out / "checkpoint" / "mesh.pack",
             fuzz::PackDirectory(TrainAndSave(mesh, scratch / "mesh")));
  fs::create_directories(out / "safetensors");
  fs::create_directories(out / "llama_config");
  SafetensorsSeeds(out / "safetensors", step);
  ConfigSeeds(out / "llama_config", step);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata_fuzz_seeds: %s\n", e.what());
    distributed::EndJobOnError(1);
    return 1;
  }
}
