// Sharding tests: every XLA sharding form round-trips through text exactly,
// iota device lists expand to hand-computed orders, the partitioner's queries
// give hand-computed tile indices and device groups, and malformed text throws
// strata::Error (never crashes) with a message naming the problem.
#include "strata/hlo/sharding.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "strata/core/error.h"

namespace strata::hlo {
namespace {

using Groups = std::vector<std::vector<int64_t>>;

const char* const kCanonicalForms[] = {
    "{replicated}",
    "{maximal device=3}",
    "{manual}",
    "{devices=[2,1]0,1}",
    "{devices=[2,1]1,0}",
    "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",
    "{devices=[2,2,2]0,1,2,3,4,5,6,7 last_tile_dims={manual}}",
    "{devices=[2,1,2,2]<=[8] last_tile_dims={replicated, manual}}",
    "{devices=[2,2,2]<=[8] last_tile_dims={manual, replicated}}",
    "{devices=[4]<=[4]}",
    "{devices=[2,2]<=[2,2]T(1,0)}",
    "{devices=[4,2]<=[2,4]T(1,0)}",
    "{devices=[2,2,2]<=[2,2,2]T(2,0,1) last_tile_dim_replicate}",
    "{{replicated}, {devices=[2,1]0,1}, {maximal device=0}}",
    "{{manual}}",
    "{}",
};

// Whether `text` throws strata::Error whose message contains `expected`.
::testing::AssertionResult ThrowsWith(const std::string& text, const std::string& expected) {
  try {
    Sharding s = Sharding::Parse(text);
    return ::testing::AssertionFailure() << text << " parsed as " << s.ToText();
  } catch (const Error& e) {
    if (std::string(e.what()).find(expected) == std::string::npos) {
      return ::testing::AssertionFailure()
             << text << " threw \"" << e.what() << "\", which lacks \"" << expected << "\"";
    }
    return ::testing::AssertionSuccess();
  }
}

TEST(ShardingText, EveryCanonicalFormRoundTrips) {
  for (const char* text : kCanonicalForms) {
    Sharding parsed = Sharding::Parse(text);
    EXPECT_EQ(parsed.ToText(), text);
    EXPECT_EQ(Sharding::Parse(parsed.ToText()), parsed) << text;
  }
}

TEST(ShardingText, ParsedFormsHaveTheWrittenStructure) {
  EXPECT_TRUE(Sharding::Parse("{replicated}").IsReplicated());
  EXPECT_TRUE(Sharding::Parse("{manual}").IsManual());
  Sharding maximal = Sharding::Parse("{maximal device=3}");
  EXPECT_TRUE(maximal.IsMaximal());
  EXPECT_EQ(maximal.maximal_device(), 3);

  Sharding tiled = Sharding::Parse("{devices=[2,1]1,0}");
  EXPECT_TRUE(tiled.IsTiled());
  EXPECT_EQ(tiled.tile_dims(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(tiled.devices(), (std::vector<int64_t>{1, 0}));
  EXPECT_TRUE(tiled.subgroup_types().empty());
  EXPECT_EQ(tiled, Sharding::Tiled({2, 1}, {1, 0}));

  Sharding mixed = Sharding::Parse("{devices=[2,1,2,2]<=[8] last_tile_dims={replicated, manual}}");
  EXPECT_EQ(mixed.subgroup_types(),
            (std::vector<SubgroupType>{SubgroupType::kReplicated, SubgroupType::kManual}));
  EXPECT_EQ(mixed.devices(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));

  Sharding tuple = Sharding::Parse("{{replicated}, {devices=[2,1]0,1}, {maximal device=0}}");
  ASSERT_TRUE(tuple.IsTuple());
  ASSERT_EQ(tuple.tuple_elements().size(), 3u);
  EXPECT_EQ(tuple.tuple_elements()[1], Sharding::Tiled({2, 1}, {0, 1}));
  EXPECT_EQ(tuple, Sharding::Tuple({Sharding::Replicated(), Sharding::Tiled({2, 1}, {0, 1}),
                                    Sharding::Maximal(0)}));
  EXPECT_TRUE(Sharding::Parse("{}").IsTuple());
  EXPECT_TRUE(Sharding::Parse("{}").tuple_elements().empty());
}

TEST(ShardingText, LastTileDimReplicateIsOneReplicatedSubgroup) {
  Sharding a = Sharding::Parse("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
  Sharding b = Sharding::Parse("{devices=[2,1,2]0,1,2,3 last_tile_dims={replicated}}");
  EXPECT_EQ(a.subgroup_types(), std::vector<SubgroupType>{SubgroupType::kReplicated});
  EXPECT_EQ(a, b);
  EXPECT_EQ(b.ToText(), "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
  EXPECT_EQ(Sharding::Tiled({2, 1, 2}, {0, 1, 2, 3}, {SubgroupType::kReplicated}).ToText(),
            "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
}

TEST(ShardingText, AcceptsWhitespaceBetweenTokens) {
  EXPECT_EQ(Sharding::Parse(" { devices = [ 2 , 1 ] 0 , 1 }\n").ToText(), "{devices=[2,1]0,1}");
  EXPECT_EQ(Sharding::Parse("{devices=[2,2] <= [2,2] T ( 1 , 0 )}").ToText(),
            "{devices=[2,2]<=[2,2]T(1,0)}");
  EXPECT_EQ(Sharding::Parse("{ {replicated} ,{ maximal  device = 0 } }").ToText(),
            "{{replicated}, {maximal device=0}}");
  EXPECT_EQ(
      Sharding::Parse("{devices=[2,1,2]<=[4] last_tile_dims = { manual ,replicated }}").ToText(),
      "{devices=[2,1,2]<=[4] last_tile_dims={manual, replicated}}");
}

TEST(ShardingText, DropsMetadata) {
  EXPECT_EQ(Sharding::Parse(R"({devices=[2,1]0,1 metadata={op_name="jit(f)/dot{x}" )"
                            R"(source_file="/a/b.py" source_line=12}})")
                .ToText(),
            "{devices=[2,1]0,1}");
  EXPECT_EQ(Sharding::Parse(R"({replicated metadata={op_name="a\"}"}})").ToText(), "{replicated}");
  EXPECT_EQ(Sharding::Parse("{maximal device=1 metadata={}}").ToText(), "{maximal device=1}");
  EXPECT_EQ(Sharding::Parse(R"({devices=[2,1,2]<=[4] last_tile_dim_replicate )"
                            R"(metadata={{op_name="a"}, {op_name="b"}}})")
                .ToText(),
            "{devices=[2,1,2]<=[4] last_tile_dim_replicate}");
  EXPECT_EQ(Sharding::Parse(R"({{manual metadata={op_name="m"}}, {replicated}})").ToText(),
            "{{manual}, {replicated}}");
}

TEST(ShardingIota, EqualsTheListWrittenOut) {
  Sharding iota = Sharding::Parse("{devices=[4]<=[4]}");
  Sharding explicit_list = Sharding::Parse("{devices=[4]0,1,2,3}");
  EXPECT_EQ(iota, explicit_list);
  EXPECT_EQ(iota.ToText(), "{devices=[4]<=[4]}");
  EXPECT_EQ(explicit_list.ToText(), "{devices=[4]0,1,2,3}");
  EXPECT_NE(iota, Sharding::Parse("{devices=[4]0,1,3,2}"));
  EXPECT_EQ(Sharding::TiledIota({4}, {4}).ToText(), "{devices=[4]<=[4]}");
}

TEST(ShardingIota, TransposeExpandsToHandComputedOrder) {
  // iota [[0,1],[2,3]] transposed is [[0,2],[1,3]].
  EXPECT_EQ(Sharding::Parse("{devices=[2,2]<=[2,2]T(1,0)}").devices(),
            (std::vector<int64_t>{0, 2, 1, 3}));
  // iota [[0,1,2,3],[4,5,6,7]] transposed is the 4x2 [[0,4],[1,5],[2,6],[3,7]].
  EXPECT_EQ(Sharding::Parse("{devices=[4,2]<=[2,4]T(1,0)}").devices(),
            (std::vector<int64_t>{0, 4, 1, 5, 2, 6, 3, 7}));
  // iota(8) as [2,2,2] (value 4a+2b+c at [a,b,c]) transposed by (2,0,1): the
  // result at [c,a,b] is 4a+2b+c, so rows c=0 then c=1 of a 2x2 over (a,b).
  EXPECT_EQ(Sharding::Parse("{devices=[8]<=[2,2,2]T(2,0,1)}").devices(),
            (std::vector<int64_t>{0, 2, 4, 6, 1, 3, 5, 7}));
  EXPECT_EQ(Sharding::Parse("{devices=[4,2]<=[2,4]T(1,0)}"),
            Sharding::Parse("{devices=[4,2]0,4,1,5,2,6,3,7}"));
}

TEST(ShardingIota, IdentityTransposeIsNotWritten) {
  Sharding s = Sharding::Parse("{devices=[2,2]<=[2,2]T(0,1)}");
  EXPECT_EQ(s.ToText(), "{devices=[2,2]<=[2,2]}");
  EXPECT_EQ(s.devices(), (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(ShardingQueries, TwoByTwo) {
  Sharding s = Sharding::Parse("{devices=[2,2]0,1,2,3}");
  EXPECT_EQ(s.data_rank(), 2);
  EXPECT_EQ(s.TileCount(0), 2);
  EXPECT_EQ(s.TileCount(1), 2);
  EXPECT_EQ(s.replication(), 1);
  EXPECT_EQ(s.device_count(), 4);
  EXPECT_FALSE(s.IsReplicated());
  EXPECT_EQ(s.TileIndexOf(0), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(s.TileIndexOf(1), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(s.TileIndexOf(2), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(s.TileIndexOf(3), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(s.GroupsAlong({0}), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(s.GroupsAlong({1}), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(s.GroupsAlong({0, 1}), (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(s.GroupsAlong({1, 0}), (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(s.GroupsAlong({}), (Groups{{0}, {1}, {2}, {3}}));
}

TEST(ShardingQueries, PartiallyReplicated) {
  // Tile index [row, col, replica]: 0 -> [0,0,0], 1 -> [0,0,1], 2 -> [1,0,0], 3 -> [1,0,1].
  Sharding s = Sharding::Parse("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
  EXPECT_EQ(s.data_rank(), 2);
  EXPECT_EQ(s.TileCount(0), 2);
  EXPECT_EQ(s.TileCount(1), 1);
  EXPECT_EQ(s.replication(), 2);
  EXPECT_FALSE(s.IsReplicated());
  EXPECT_EQ(s.TileIndexOf(1), (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(s.TileIndexOf(3), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(s.GroupsAlong({0}), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(s.GroupsAlong({1}), (Groups{{0}, {1}, {2}, {3}}));
  EXPECT_THROW(s.TileCount(2), Error);  // the replica dim is not an array dim
  EXPECT_THROW(s.GroupsAlong({2}), Error);
}

TEST(ShardingQueries, TransposedDeviceOrder) {
  // Devices 0,2,1,3 row-major over [2,2]: 2 sits at [0,1], 1 at [1,0].
  Sharding s = Sharding::Parse("{devices=[2,2]<=[2,2]T(1,0)}");
  EXPECT_EQ(s.TileIndexOf(2), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(s.TileIndexOf(1), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(s.GroupsAlong({0}), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(s.GroupsAlong({1}), (Groups{{0, 2}, {1, 3}}));
}

TEST(ShardingQueries, GroupsAlongTwoOfThreeDims) {
  // Position 4a+2b+c holds device 7-(4a+2b+c). Along dims {0,2} only b is fixed:
  // b=0 holds positions 0,1,4,5 (devices 7,6,3,2), b=1 positions 2,3,6,7.
  Sharding s = Sharding::Parse("{devices=[2,2,2]7,6,5,4,3,2,1,0}");
  EXPECT_EQ(s.GroupsAlong({0, 2}), (Groups{{7, 6, 3, 2}, {5, 4, 1, 0}}));
  EXPECT_EQ(s.GroupsAlong({2}), (Groups{{7, 6}, {5, 4}, {3, 2}, {1, 0}}));
  EXPECT_EQ(s.TileIndexOf(4), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_THROW(s.GroupsAlong({0, 0}), Error);
  EXPECT_THROW(s.TileIndexOf(8), Error);
}

TEST(ShardingQueries, ReplicationAndManualSubgroups) {
  // Tile dims [2,1 | 2 replicated, 2 manual].
  Sharding s = Sharding::Parse("{devices=[2,1,2,2]<=[8] last_tile_dims={replicated, manual}}");
  EXPECT_EQ(s.data_rank(), 2);
  EXPECT_EQ(s.replication(), 2);
  EXPECT_EQ(s.TileIndexOf(7), (std::vector<int64_t>{1, 0, 1, 1}));
  EXPECT_EQ(s.GroupsAlong({0}), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));

  EXPECT_TRUE(Sharding::Parse("{devices=[1,1,4]<=[4] last_tile_dim_replicate}").IsReplicated());
  EXPECT_FALSE(Sharding::Parse("{devices=[1,2]0,1 last_tile_dims={manual}}").IsReplicated());
  EXPECT_TRUE(Sharding::Parse("{{replicated}, {replicated}}").IsReplicated());
  EXPECT_FALSE(Sharding::Parse("{{replicated}, {maximal device=0}}").IsReplicated());
  EXPECT_FALSE(Sharding::Parse("{maximal device=0}").IsReplicated());
}

TEST(ShardingQueries, UntiledKinds) {
  EXPECT_EQ(Sharding::Replicated().TileCount(3), 1);
  EXPECT_EQ(Sharding::Maximal(2).TileCount(0), 1);
  EXPECT_EQ(Sharding::Maximal(2).device_count(), 1);
  EXPECT_TRUE(Sharding::Replicated().devices().empty());
  EXPECT_THROW(Sharding::Replicated().TileIndexOf(0), Error);
  EXPECT_THROW(Sharding::Replicated().maximal_device(), Error);
  EXPECT_THROW(Sharding::Manual().GroupsAlong({}), Error);
  EXPECT_THROW(Sharding::Parse("{}").TileCount(0), Error);
  EXPECT_NE(Sharding::Replicated(), Sharding::Manual());
  EXPECT_NE(Sharding::Maximal(0), Sharding::Maximal(1));
}

TEST(ShardingQueries, ShardSizeIsCeilDivided) {
  EXPECT_EQ(Sharding::ShardSize(7, 2), 4);
  EXPECT_EQ(Sharding::ShardSize(8, 2), 4);
  EXPECT_EQ(Sharding::ShardSize(1, 4), 1);
  EXPECT_EQ(Sharding::ShardSize(0, 3), 0);
  EXPECT_EQ(Sharding::ShardSize(9, 1), 9);
  EXPECT_THROW(Sharding::ShardSize(4, 0), Error);
}

TEST(ShardingErrors, ValidationNamesTheProblem) {
  EXPECT_TRUE(ThrowsWith("{devices=[2,2]0,1,2}", "3 devices listed but tile dims [2,2] need 4"));
  EXPECT_TRUE(ThrowsWith("{devices=[2]0,1,2}", "3 devices listed"));
  EXPECT_TRUE(ThrowsWith("{devices=[2]0,0}", "duplicate device 0"));
  EXPECT_TRUE(ThrowsWith("{devices=[2]-1,0}", "negative device id -1"));
  EXPECT_TRUE(ThrowsWith("{maximal device=-2}", "negative device id -2"));
  EXPECT_TRUE(ThrowsWith("{devices=[4]<=[2,3]}", "iota device list <=[2,3] holds 6 devices"));
  EXPECT_TRUE(ThrowsWith("{devices=[4]<=[2,2]T(0,0)}", "not a permutation"));
  EXPECT_TRUE(ThrowsWith("{devices=[4]<=[2,2]T(1,0,2)}", "not a permutation"));
  EXPECT_TRUE(ThrowsWith("{devices=[4]<=[2,2]T(2,0)}", "not a permutation"));
  EXPECT_TRUE(ThrowsWith("{devices=[4]<=[2,2]T(-1,0)}", "not a permutation"));
  EXPECT_TRUE(ThrowsWith("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate last_tile_dims={manual}}",
                         "last_tile_dims cannot be given together with last_tile_dim_replicate"));
  EXPECT_TRUE(ThrowsWith("{devices=[2,1,2]0,1,2,3 last_tile_dims={manual} last_tile_dim_replicate}",
                         "together"));
  EXPECT_TRUE(ThrowsWith("{devices=[2,2]<=[4] last_tile_dims={manual, replicated, manual}}",
                         "3 subgroup dims in last_tile_dims but only 2 tile dims"));
  EXPECT_TRUE(ThrowsWith("{devices=[2,2,2]<=[8] last_tile_dims={manual, manual}}",
                         "subgroup type manual appears twice"));
  EXPECT_TRUE(ThrowsWith("{devices=[2,0]<=[1]}", "tile dim 0 in [2,0] is not positive"));
  EXPECT_TRUE(ThrowsWith("{devices=[]0}", "at least one tile dim"));
  EXPECT_TRUE(ThrowsWith("{devices=[2]<=[]}", "at least one dim"));
  EXPECT_TRUE(ThrowsWith("{devices=[1048576,2]<=[2]}", "more than 1048576 devices"));
  EXPECT_TRUE(ThrowsWith("{devices=[4]<=[1048576,1048576]}", "holds too many devices"));
}

TEST(ShardingErrors, SyntaxNamesTheColumn) {
  EXPECT_TRUE(ThrowsWith("{devices=[2]0,1 foo}",
                         "unknown keyword 'foo' at column 17 of \"{devices=[2]0,1 foo}\""));
  EXPECT_TRUE(ThrowsWith("{replicatedd}", "unknown keyword 'replicatedd'"));
  EXPECT_TRUE(
      ThrowsWith("{devices=[2,1,2]<=[4] last_tile_dims={bogus}}", "unknown subgroup type 'bogus'"));
  EXPECT_TRUE(ThrowsWith("{replicated last_tile_dim_replicate}", "only follows a devices= list"));
  EXPECT_TRUE(ThrowsWith("{maximal devise=1}", "expected 'device' at column 10"));
  EXPECT_TRUE(
      ThrowsWith("{replicated} x", "expected end of input after the sharding at column 14"));
  EXPECT_TRUE(ThrowsWith("{replicated}}", "expected end of input"));
  EXPECT_TRUE(ThrowsWith("",
                         "expected '{' to start a sharding at column 1 of \"\", found end of "
                         "input"));
  EXPECT_TRUE(ThrowsWith("replicated", "expected '{' to start a sharding"));
  EXPECT_TRUE(
      ThrowsWith("{devices=[2]0,1", "expected '}' to close the sharding opened at column 1"));
  EXPECT_TRUE(ThrowsWith("{devices=[2]0,1,}", "expected a device id at column 17"));
  EXPECT_TRUE(ThrowsWith("{devices=[2]}", "expected a device id or '<=' after the tile dims"));
  EXPECT_TRUE(ThrowsWith("{devices=[2,1]<=[2]T(1,0}", "expected ',' or ')'"));
  EXPECT_TRUE(ThrowsWith("{{replicated}, {{replicated}}}", "tuple shardings do not nest"));
  EXPECT_TRUE(ThrowsWith("{{replicated}, {}}", "tuple shardings do not nest"));
  EXPECT_TRUE(ThrowsWith("{{replicated} {manual}}", "expected ',' or '}' after a tuple"));
  EXPECT_TRUE(ThrowsWith("{devices=[99999999999999999999]0}",
                         "number 99999999999999999999 is out "
                         "of range"));
  EXPECT_TRUE(ThrowsWith(R"({replicated metadata={op_name="x}})", "unterminated string"));
  EXPECT_TRUE(ThrowsWith("{replicated metadata={{}", "expected '}' to close the metadata"));
  EXPECT_TRUE(ThrowsWith("{replicated metadata}", "expected '=' after 'metadata'"));
}

TEST(ShardingErrors, LongTextIsQuotedAroundTheColumn) {
  std::string text = "{devices=[300]<=[300] bad";
  for (int i = 0; i < 300; ++i) text += " metadata={}";
  text += "}";
  try {
    Sharding::Parse(text);
    FAIL() << "parsed";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("unknown keyword 'bad' at column 23 of \"{devices"), std::string::npos)
        << message;
    EXPECT_LT(message.size(), 300u) << message;
  }
}

TEST(ShardingErrors, ConstructorsValidateLikeTheParser) {
  EXPECT_THROW(Sharding::Tiled({2, 2}, {0, 1, 2}), Error);
  EXPECT_THROW(Sharding::Tiled({2}, {1, 1}), Error);
  EXPECT_THROW(Sharding::Tiled({2}, {0, 1}, {SubgroupType::kManual, SubgroupType::kReplicated}),
               Error);
  EXPECT_THROW(Sharding::TiledIota({4}, {2, 2}, {0}), Error);
  EXPECT_THROW(Sharding::TiledIota({4}, {}), Error);
  EXPECT_THROW(Sharding::Maximal(-1), Error);
  EXPECT_THROW(Sharding::Tuple({Sharding::Tuple({})}), Error);
}

// Every prefix and every one-character change of the canonical forms either
// parses to something that round-trips or throws strata::Error.
TEST(ShardingErrors, MutatedTextNeverCrashes) {
  const std::string replacements = "{}[](),=<-T 0129xa\"";
  int64_t parsed = 0, rejected = 0;
  auto attempt = [&](const std::string& text) {
    try {
      Sharding s = Sharding::Parse(text);
      EXPECT_EQ(Sharding::Parse(s.ToText()), s) << text;
      ++parsed;
    } catch (const Error&) {
      ++rejected;
    }
  };
  for (const char* form : kCanonicalForms) {
    std::string text = form;
    for (size_t n = 0; n < text.size(); ++n) attempt(text.substr(0, n));
    for (size_t i = 0; i < text.size(); ++i) {
      for (char c : replacements) {
        std::string mutated = text;
        mutated[i] = c;
        attempt(mutated);
      }
      attempt(text.substr(0, i) + text.substr(i + 1));
    }
  }
  EXPECT_GT(parsed, 0);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace strata::hlo
