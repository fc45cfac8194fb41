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
               "  ROOT v5 = s32[8,1] copy(v4)\n"},
        // The same split with the halves swapped between the devices (a tile
        // assignment no axis order gives): one collective-permute.
        Golden{"permute_into_device_order",
               "  p = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}\n"
               "  ROOT c = f32[8,4] copy(p), sharding={devices=[2,1]1,0}",
               "  v0 = f32[4,4] parameter(0)\n"
               "  v1 = f32[4,4] copy(v0)\n"
               "  ROOT v2 = f32[4,4] collective-permute(v1), channel_id=1, "
               "source_target_pairs={{0,1},{1,0}}\n"},
        // Out of a device order first, then the usual reshard (a gather).
        Golden{"permute_then_gather",
               "  p = f32[8,4] parameter(0), sharding={devices=[2,1]1,0}\n"
               "  ROOT c = f32[8,4] copy(p), sharding={replicated}",
               "  v0 = f32[4,4] parameter(0)\n"
               "  v1 = f32[4,4] collective-permute(v0), channel_id=1, "
               "source_target_pairs={{0,1},{1,0}}\n"
               "  v2 = f32[8,4] all-gather(v1), channel_id=2, replica_groups={{0,1}}, "
               "dimensions={0}, use_global_device_ids=true\n"
               "  ROOT v3 = f32[8,4] copy(v2)\n"}),
    [](const ::testing::TestParamInfo<Golden>& info) { return std::string(info.param.name); });

// A sharding in a device order of its own feeds device 0 the second half.
TEST(ReshardByPermute, ShardsFollowTheDeviceOrder) {
  runtime::Client client(2, 1);
  std::vector<const runtime::Device*> devices = {client.device(0), client.device(1)};
  auto full = runtime::Buffer::FromVector<float>({0, 1, 2, 3}, {4}, devices[0]);
  AxisSharding swapped{{{0}}, {1, 0}};
  auto shards = runtime::SplitIntoShards(full, Mesh::Line(2), swapped, devices);
  EXPECT_EQ(shards[0].ToVector<float>(), (std::vector<float>{2, 3}));
  EXPECT_EQ(shards[1].ToVector<float>(), (std::vector<float>{0, 1}));
  auto back = runtime::AssembleShards(shards, full.shape(), Mesh::Line(2), swapped, devices[0]);
  EXPECT_EQ(back.ToVector<float>(), (std::vector<float>{0, 1, 2, 3}));
}

// Axes swapped between two dims (tile counts alike): every device wants a
// tile another holds, so one collective-permute does what gathering both
// dims and slicing again would (XLA's reshard by permutation). Devices 0 and
// 3 hold tiles (0,0) and (1,1) either way and keep them.
TEST(ReshardByPermute, AxesSwappedBetweenDims) {
  for (const char* shape : {"f32[8,6]", "f32[7,5]"}) {  // even, and padded shards
    SCOPED_TRACE(shape);
    std::string text = fmt::format(
        "HloModule m\nENTRY main {{\n  p = {0} parameter(0), sharding={{devices=[2,2]0,1,2,3}}\n"
        "  ROOT c = {0} copy(p), sharding={{devices=[2,2]0,2,1,3}}\n}}\n",
        shape);
    Mesh mesh({0, 1, 2, 3}, {2, 2}, {"a", "b"});
    auto run = testing::RunBoth(text, mesh);
    testing::ExpectClose(run);
    const PartitionReport& r = run.partition.report;
    EXPECT_EQ(r.count("collective-permute"), 1) << r.ToString();
    EXPECT_EQ(r.collectives.size(), 1u) << r.ToString();
    EXPECT_NE(
        hlo::ToText(*run.partition.module).find("source_target_pairs={{0,0},{1,2},{2,1},{3,3}}"),
        std::string::npos)
        << hlo::ToText(*run.partition.module);
    EXPECT_EQ(run.sent_bytes, 0);  // partition 0 keeps its tile
  }
}

// One axis for another on the same dim, on a 2x2 mesh: a permute, no gather.
TEST(ReshardByPermute, OneAxisForAnother) {
  const char* text = R"(
HloModule m
ENTRY main {
  p = f32[8,3] parameter(0), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}
  ROOT c = f32[8,3] copy(p), sharding={devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}
})";
  Mesh mesh({0, 1, 2, 3}, {2, 2}, {"a", "b"});
  auto run = testing::RunBoth(text, mesh);
  testing::ExpectClose(run);
  EXPECT_EQ(run.partition.report.count("collective-permute"), 1) << run.partition.report.ToString();
  EXPECT_EQ(run.partition.report.count("all-gather"), 0) << run.partition.report.ToString();
}

// A device order of its own on a 2x2 mesh, into and out of a computation
// that works in the mesh's order (an elementwise op and a reduce over 'a').
TEST(ReshardByPermute, DeviceOrderThroughAComputation) {
  const char* text = R"(
HloModule m
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY main {
  p = f32[8,6] parameter(0), sharding={devices=[2,2]3,1,2,0}
  e = f32[8,6] exponential(p)
  z = f32[] constant(0)
  ROOT r = f32[6] reduce(e, z), dimensions={0}, to_apply=add, sharding={devices=[2,2]2,3,0,1 last_tile_dim_replicate}
})";
  Mesh mesh({0, 1, 2, 3}, {2, 2}, {"a", "b"});
  auto run = testing::RunBoth(text, mesh);
  testing::ExpectClose(run);
  // Into the mesh's order for exp, the partial sums over 'a' all-reduced, and
  // the result's tiles moved by permutes: nothing is gathered.
  const PartitionReport& r = run.partition.report;
  EXPECT_EQ(r.count("all-reduce"), 1) << r.ToString();
  EXPECT_EQ(r.count("all-gather"), 0) << r.ToString();
  EXPECT_EQ(r.count("collective-permute"), static_cast<int64_t>(r.collectives.size()) - 1)
      << r.ToString();
}

}  // namespace
}  // namespace strata::spmd
