// Resharding goldens in XLA's style: an annotated program in, the exact
// per-device program out (instruction names made sequential, since the
// builder numbers them process-wide), and its numbers against one device.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <map>
#include <regex>

#include "spmd_test_util.h"

namespace strata::spmd {
namespace {

// Renames every instruction "v0", "v1", ... in order of definition and drops
// the to_apply computations the partitioner adds (checked by the numbers).
std::string Canonical(const hlo::Module& m) {
  std::string text = hlo::ToText(*m.entry());
  std::map<std::string, std::string> names;
  std::regex def(R"(^\s*(?:ROOT )?([A-Za-z_][\w.\-]*) = )");
  std::string out;
  std::istringstream lines(text);
  std::string line;
  int next = 0;
  std::vector<std::string> body;
  while (std::getline(lines, line)) {
    std::smatch match;
    if (std::regex_search(line, match, def)) names[match[1].str()] = fmt::format("v{}", next++);
    body.push_back(line);
  }
  std::regex word(R"([A-Za-z_][\w.\-]*)");
  for (size_t i = 1; i + 1 < body.size(); ++i) {  // skip the signature line and the brace
    std::string renamed;
    auto begin = std::sregex_iterator(body[i].begin(), body[i].end(), word);
    size_t last = 0;
    for (auto it = begin; it != std::sregex_iterator(); ++it) {
      renamed += body[i].substr(last, it->position() - last);
      auto found = names.find(it->str());
      renamed += found != names.end() ? found->second : it->str();
      last = it->position() + it->length();
    }
    renamed += body[i].substr(last);
    out += renamed + "\n";
  }
  return out;
}

struct Golden {
  const char* name;
  const char* input;
  const char* expected;
};

class ReshardGolden : public ::testing::TestWithParam<Golden> {};

TEST_P(ReshardGolden, PerDeviceProgram) {
  const Golden& g = GetParam();
  std::string text = std::string("HloModule m\nENTRY main {\n") + g.input + "\n}\n";
  auto run = testing::RunBoth(text, Mesh::Line(2));
  testing::ExpectClose(run);
  EXPECT_EQ(Canonical(*run.partition.module), g.expected) << hlo::ToText(*run.partition.module);
}

INSTANTIATE_TEST_SUITE_P(
    Spmd, ReshardGolden,
    ::testing::Values(
        // Replicated -> split: a local dynamic-slice at this partition's offset.
        Golden{"replicated_to_tiled",
               "  p = f32[8,4] parameter(0), sharding={replicated}\n"
               "  ROOT c = f32[8,4] copy(p), sharding={devices=[2,1]0,1}",
               "  v0 = f32[8,4] parameter(0)\n"
               "  v1 = s32[] constant(0)\n"
               "  v2 = s32[2] constant({0, 4})\n"
               "  v3 = u32[] partition-id()\n"
               "  v4 = s32[] convert(v3)\n"
               "  v5 = s32[1] dynamic-slice(v2, v4), dynamic_slice_sizes={1}\n"
               "  v6 = s32[] reshape(v5)\n"
               "  v7 = f32[4,4] dynamic-slice(v0, v6, v1), dynamic_slice_sizes={4,4}\n"
               "  ROOT v8 = f32[4,4] copy(v7)\n"},
        // Split -> replicated: one all-gather.
        Golden{"tiled_to_replicated",
               "  p = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}\n"
               "  ROOT c = f32[8,4] copy(p), sharding={replicated}",
               "  v0 = f32[4,4] parameter(0)\n"
               "  v1 = f32[8,4] all-gather(v0), channel_id=1, replica_groups={{0,1}}, "
               "dimensions={0}, use_global_device_ids=true\n"
               "  ROOT v2 = f32[8,4] copy(v1)\n"},
        // The split moves from dim 0 to dim 1: one all-to-all, shard s32[8,1].
        Golden{"all_to_all",
               "  p = s32[8,2] parameter(0), sharding={devices=[2,1]0,1}\n"
               "  ROOT c = s32[8,2] copy(p), sharding={devices=[1,2]0,1}",
               "  v0 = s32[4,2] parameter(0)\n"
               "  v1 = s32[4,2] all-to-all(v0), channel_id=1, replica_groups={{0,1}}, "
               "dimensions={1}\n"
               "  v2 = s32[4,2,1] reshape(v1)\n"
               "  v3 = s32[2,4,1] transpose(v2), dimensions={1,0,2}\n"
               "  v4 = s32[8,1] reshape(v3)\n"
               "  ROOT v5 = s32[8,1] copy(v4)\n"}),
    [](const ::testing::TestParamInfo<Golden>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace strata::spmd
