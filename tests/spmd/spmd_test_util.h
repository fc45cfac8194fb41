// Runs an annotated HLO program twice: whole on one device (the reference),
// and partitioned over a mesh on N in-process devices; returns both results.
#pragma once

#include <gtest/gtest.h>

#include <random>

#include "strata/compiler/compile.h"
#include "strata/hlo/text.h"
#include "strata/runtime/communicator.h"
#include "strata/runtime/sharded_buffer.h"
#include "strata/spmd/partitioner.h"

namespace strata::spmd::testing {

inline runtime::Buffer RandomBuffer(const Shape& shape, uint32_t seed,
                                    const runtime::Device* device) {
  std::mt19937 rng(seed);
  runtime::Buffer b = runtime::Buffer::Allocate(shape, device);
  int64_t n = shape.num_elements();
  switch (shape.dtype()) {
    case DType::kF32: {
      std::uniform_real_distribution<float> u(-1, 1);
      for (int64_t i = 0; i < n; ++i) b.data_as<float>()[i] = u(rng);
      break;
    }
    case DType::kF64: {
      std::uniform_real_distribution<double> u(-1, 1);
      for (int64_t i = 0; i < n; ++i) b.data_as<double>()[i] = u(rng);
      break;
    }
    case DType::kS32: {
      std::uniform_int_distribution<int32_t> u(-50, 50);
      for (int64_t i = 0; i < n; ++i) b.data_as<int32_t>()[i] = u(rng);
      break;
    }
    default:
      ADD_FAILURE() << "no random values for " << shape.ToString();
  }
  return b;
}

struct SpmdRun {
  std::vector<runtime::Buffer> reference;    // whole program, one device
  std::vector<runtime::Buffer> partitioned;  // assembled from the shards
  PartitionedModule partition;
  int64_t largest_shard_bytes = 0;  // of any parameter or result on any device
  int64_t sent_bytes = 0;           // what partition 0 sent, as the communicator counted it
};

// `reference_text`, when given, is the program the whole run computes
// instead of `text` (a manual region cannot run on one device): the same
// parameters, an independent way to the same results.
inline SpmdRun RunBoth(const std::string& text, const Mesh& mesh,
                       const PartitionOptions& options = {},
                       const std::string& reference_text = "") {
  SpmdRun run;
  auto module = hlo::ParseModule(text);
  runtime::Client client(static_cast<int>(mesh.size()), 1);
  std::vector<const runtime::Device*> devices;
  for (int64_t p = 0; p < mesh.size(); ++p) devices.push_back(client.device(static_cast<int>(p)));
  std::vector<runtime::Buffer> inputs;
  uint32_t seed = 1;
  for (const hlo::Instruction* p : module->entry()->parameters())
    inputs.push_back(RandomBuffer(p->shape(), seed++, devices[0]));
  compiler::CompileOptions compile;
  compile.client = &client;
  auto reference = reference_text.empty() ? nullptr : hlo::ParseModule(reference_text);
  run.reference =
      compiler::Compile(reference ? *reference : *module, compile)->Run(inputs, devices[0]);

  run.partition = Partition(*module, mesh, options);
  auto exe = compiler::Compile(*run.partition.module, compile);
  std::vector<std::vector<runtime::Buffer>> arguments(mesh.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto shards =
        runtime::SplitIntoShards(inputs[i], mesh, run.partition.parameter_shardings[i], devices);
    for (int64_t p = 0; p < mesh.size(); ++p) {
      run.largest_shard_bytes = std::max(run.largest_shard_bytes, shards[p].size_bytes());
      arguments[p].push_back(shards[p]);
    }
  }
  auto communicator = runtime::MakeInProcessCommunicator(mesh.size());
  auto results = exe->RunPartitioned(arguments, devices, *communicator);
  run.sent_bytes = communicator->bytes_sent(0);
  std::vector<Shape> full = module->entry()->root()->shape().Leaves();
  for (size_t k = 0; k < full.size(); ++k) {
    std::vector<runtime::Buffer> shards;
    for (int64_t p = 0; p < mesh.size(); ++p) {
      shards.push_back(results[p][k]);
      run.largest_shard_bytes = std::max(run.largest_shard_bytes, results[p][k].size_bytes());
    }
    run.partitioned.push_back(runtime::AssembleShards(
        shards, full[k], mesh, run.partition.result_shardings[k], devices[0]));
  }
  return run;
}

// Every element within `tolerance` (relative to max(1, |reference|)).
inline void ExpectClose(const SpmdRun& run, double tolerance = 1e-5) {
  ASSERT_EQ(run.reference.size(), run.partitioned.size());
  for (size_t k = 0; k < run.reference.size(); ++k) {
    const runtime::Buffer& a = run.reference[k];
    const runtime::Buffer& b = run.partitioned[k];
    ASSERT_EQ(a.shape(), b.shape());
    int64_t n = a.shape().num_elements();
    for (int64_t i = 0; i < n; ++i) {
      double x = 0, y = 0;
      switch (a.shape().dtype()) {
        case DType::kF32:
          x = a.data_as<float>()[i], y = b.data_as<float>()[i];
          break;
        case DType::kF64:
          x = a.data_as<double>()[i], y = b.data_as<double>()[i];
          break;
        case DType::kS32:
          x = a.data_as<int32_t>()[i], y = b.data_as<int32_t>()[i];
          break;
        case DType::kPred:
          x = a.data_as<bool>()[i], y = b.data_as<bool>()[i];
          break;
        default:
          FAIL() << "no comparison for " << a.shape().ToString();
      }
      ASSERT_NEAR(x, y, tolerance * std::max(1.0, std::abs(x)))
          << "result " << k << " element " << i << "\n"
          << run.partition.report.ToString();
    }
  }
}

}  // namespace strata::spmd::testing
