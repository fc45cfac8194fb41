// HLO text fixtures written the way XLA prints modules ('%' names, operand
// shapes, layouts, metadata, module attributes): each parses, has the
// hand-counted structure, and survives truncation and mutation.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "strata/core/error.h"
#include "strata/hlo/text.h"

namespace strata::hlo {
namespace {

const char* const kFixtures[] = {"mlp_loss.hlo", "power_iteration.hlo", "embedding_grad.hlo",
                                 "softmax.hlo", "sampling.hlo"};

std::string ReadFixture(const std::string& name) {
  std::string path = std::string(STRATA_SOURCE_DIR) + "/tests/hlo/testdata/" + name;
  std::ifstream file(path, std::ios::binary);
  EXPECT_TRUE(file.good()) << "cannot open " << path;
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

const Instruction& Named(const Computation& c, std::string_view name) {
  for (const auto& inst : c.instructions()) {
    if (inst->name() == name) return *inst;
  }
  throw Error("no instruction " + std::string(name) + " in " + c.name());
}

using Dims = std::vector<int64_t>;

TEST(TextFixtures, MlpLoss) {
  auto m = ParseModule(ReadFixture("mlp_loss.hlo"));
  EXPECT_EQ(m->name(), "jit_mlp_loss");
  ASSERT_EQ(m->computations().size(), 2u);
  const Computation& entry = *m->entry();
  EXPECT_EQ(entry.name(), "main.22");
  EXPECT_EQ(entry.instruction_count(), 16);
  EXPECT_EQ(entry.parameter_count(), 4);
  EXPECT_EQ(entry.root()->opcode(), Opcode::kDivide);
  EXPECT_EQ(entry.root()->shape(), Shape::Scalar(DType::kF32));
  EXPECT_EQ(entry.root()->sharding, "{replicated}");
  EXPECT_EQ(entry.parameter(0)->name(), "Arg_0.1");
  EXPECT_EQ(entry.parameter(0)->sharding, "{devices=[2,1]0,1}");
  EXPECT_EQ(entry.parameter(3)->sharding, "{devices=[2,1]0,1}");

  const Instruction& dot = Named(entry, "dot.5");
  EXPECT_EQ(dot.opcode(), Opcode::kDot);
  EXPECT_EQ(dot.dot.lhs_contracting, Dims{1});
  EXPECT_EQ(dot.dot.rhs_contracting, Dims{0});
  EXPECT_TRUE(dot.dot.lhs_batch.empty());
  EXPECT_EQ(dot.shape(), Shape(DType::kF32, {8, 32}));
  EXPECT_EQ(dot.operand(1)->name(), "Arg_1.2");

  EXPECT_EQ(Named(entry, "broadcast.6").dimensions, Dims{1});
  const Instruction& reduce = Named(entry, "reduce.18");
  EXPECT_EQ(reduce.dimensions, (Dims{0, 1}));
  ASSERT_EQ(reduce.called.size(), 1u);
  EXPECT_EQ(reduce.called[0], m->computations()[0].get());
  EXPECT_EQ(reduce.called[0]->name(), "region_0.14");
  EXPECT_EQ(Named(entry, "constant.19").literal.GetAsDouble(0), 256.0);
}

TEST(TextFixtures, PowerIterationWhileLoop) {
  auto m = ParseModule(ReadFixture("power_iteration.hlo"));
  ASSERT_EQ(m->computations().size(), 4u);
  const Computation& entry = *m->entry();
  EXPECT_EQ(entry.name(), "main.34");
  EXPECT_EQ(entry.instruction_count(), 8);
  EXPECT_EQ(entry.root()->opcode(), Opcode::kTuple);
  const Instruction& loop = Named(entry, "while.30");
  ASSERT_EQ(loop.called.size(), 2u);
  EXPECT_EQ(loop.called[0]->name(), "while_cond.25");
  EXPECT_EQ(loop.called[1]->name(), "while_body.6");
  EXPECT_EQ(loop.shape().ToString(), "(s32[], f32[4,4], f32[4])");
  EXPECT_EQ(Named(entry, "get-tuple-element.32").tuple_index, 2);

  const Computation& body = *loop.called[1];
  EXPECT_EQ(body.instruction_count(), 14);
  EXPECT_EQ(Named(body, "reduce.20").called[0]->name(), "region_0.16");
  const Computation& cond = *loop.called[0];
  EXPECT_EQ(cond.root()->direction, Comparison::kLt);
  EXPECT_EQ(Named(cond, "constant.28").literal.GetAsDouble(0), 20.0);

  // The canonical form: no '%', no layouts, operands by name, no metadata.
  EXPECT_EQ(ToText(*m), ReadFixture("power_iteration.canonical.hlo"));
}

TEST(TextFixtures, EmbeddingLookupAndItsGradient) {
  auto m = ParseModule(ReadFixture("embedding_grad.hlo"));
  const Computation& entry = *m->entry();
  EXPECT_EQ(entry.instruction_count(), 14);
  // Parameters keep the file's order; they need not come first.
  EXPECT_EQ(entry.instructions()[0]->name(), "Arg_1.2");
  EXPECT_EQ(entry.parameter(0)->name(), "Arg_0.1");

  const Instruction& gather = Named(entry, "gather.10");
  EXPECT_EQ(gather.shape(), Shape(DType::kF32, {6, 8}));
  EXPECT_EQ(gather.gather.offset_dims, Dims{1});
  EXPECT_EQ(gather.gather.collapsed_slice_dims, Dims{0});
  EXPECT_EQ(gather.gather.start_index_map, Dims{0});
  EXPECT_EQ(gather.gather.index_vector_dim, 1);
  EXPECT_EQ(gather.gather.slice_sizes, (Dims{1, 8}));
  EXPECT_EQ(gather.operand(1)->shape(), Shape(DType::kS32, {6, 1}));

  const Instruction& scatter = Named(entry, "scatter.17");
  EXPECT_EQ(scatter.scatter.update_window_dims, Dims{1});
  EXPECT_EQ(scatter.scatter.inserted_window_dims, Dims{0});
  EXPECT_EQ(scatter.scatter.scatter_dims_to_operand_dims, Dims{0});
  EXPECT_EQ(scatter.scatter.index_vector_dim, 1);
  EXPECT_EQ(scatter.called[0]->name(), "region_0.12");
  EXPECT_EQ(scatter.called[0]->root()->opcode(), Opcode::kAdd);
  EXPECT_EQ(scatter.sharding, "{devices=[2,1]0,1}");
  EXPECT_EQ(scatter.operand(1), gather.operand(1));  // both read the same clamped ids
  EXPECT_EQ(Named(entry, "constant.6").literal.GetAsDouble(0), 99.0);
}

TEST(TextFixtures, SoftmaxWithCommentsAndForeignAttributes) {
  auto m = ParseModule(ReadFixture("softmax.hlo"));
  ASSERT_EQ(m->computations().size(), 3u);
  const Computation& entry = *m->entry();
  EXPECT_EQ(entry.instruction_count(), 13);
  EXPECT_EQ(entry.root()->opcode(), Opcode::kDivide);
  EXPECT_EQ(entry.root()->shape(), Shape(DType::kF32, {2, 4}));
  EXPECT_EQ(Named(entry, "reduce.8").called[0]->root()->opcode(), Opcode::kMaximum);
  EXPECT_EQ(Named(entry, "reduce.19").called[0]->root()->opcode(), Opcode::kAdd);
  const Literal& bias = Named(entry, "constant.2").literal;
  EXPECT_EQ(bias.GetAsDouble(0), 0.5);
  EXPECT_EQ(bias.GetAsDouble(1), -2.0);
  EXPECT_EQ(bias.GetAsDouble(2), static_cast<double>(1e-05f));
  EXPECT_EQ(bias.GetAsDouble(3), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(Named(entry, "constant.3").literal.GetAsDouble(0),
            -std::numeric_limits<double>::infinity());
}

TEST(TextFixtures, SamplingWithRngCallAndStridedSlices) {
  auto m = ParseModule(ReadFixture("sampling.hlo"));
  const Computation& entry = *m->entry();
  EXPECT_EQ(entry.instruction_count(), 25);
  EXPECT_EQ(Named(entry, "rng-bit-generator.10").rng_algorithm, "rng_default");
  EXPECT_EQ(Named(entry, "rng-bit-generator.10").shape().ToString(), "(u64[2], u32[4,32])");
  const Instruction& slice = Named(entry, "slice.21");
  ASSERT_EQ(slice.slice.size(), 2u);
  EXPECT_EQ(slice.slice[0], (SliceRange{0, 8, 2}));
  EXPECT_EQ(slice.slice[1], (SliceRange{1, 64, 2}));
  const Instruction& pad = Named(entry, "pad.29");
  ASSERT_EQ(pad.padding.size(), 2u);
  EXPECT_EQ(pad.padding[0], (PadRange{1, 1, 0}));
  EXPECT_EQ(pad.padding[1], (PadRange{-16, -15, 1}));
  EXPECT_EQ(Named(entry, "dynamic-slice.20").dynamic_slice_sizes, (Dims{8, 64}));
  EXPECT_EQ(Named(entry, "transpose.24").dimensions, (Dims{1, 0}));
  EXPECT_EQ(Named(entry, "call.23").called[0]->name(), "scale.5");
  EXPECT_EQ(Named(entry, "constant.15").literal.data_as<uint32_t>()[0], 0x3f800000u);
  EXPECT_EQ(Named(entry, "bitcast-convert.18").shape().dtype(), DType::kF32);
}

TEST(TextFixtures, PrintedFormReparsesIdentically) {
  for (const char* name : kFixtures) {
    SCOPED_TRACE(name);
    std::string printed = ToText(*ParseModule(ReadFixture(name)));
    EXPECT_EQ(ToText(*ParseModule(printed)), printed);
    EXPECT_EQ(printed.find('%'), std::string::npos);
  }
}

bool ParsesOrThrowsError(const std::string& text) {
  try {
    ParseModule(text);
    return true;
  } catch (const InternalError& e) {
    ADD_FAILURE() << "internal error " << e.what() << " for:\n" << text;
  } catch (const Error&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-strata exception " << e.what() << " for:\n" << text;
  }
  return false;
}

TEST(TextFixtures, EveryTruncationParsesOrThrows) {
  for (const char* name : kFixtures) {
    SCOPED_TRACE(name);
    std::string text = ReadFixture(name);
    int64_t computations = static_cast<int64_t>(ParseModule(text)->computations().size());
    int64_t parsed = 0;
    for (size_t n = 0; n <= text.size(); ++n) parsed += ParsesOrThrowsError(text.substr(0, n));
    // Each computation is followed by "\n\n": the prefixes ending in its "}",
    // "}\n" and "}\n\n" parse; nothing else does.
    EXPECT_EQ(parsed, 3 * computations);
  }
}

TEST(TextFixtures, RandomMutationsParseOrThrow) {
  std::mt19937_64 rng(1234);
  std::vector<std::string> texts;
  for (const char* name : kFixtures) texts.push_back(ReadFixture(name));
  static constexpr std::string_view kInteresting = "{}()[],=%:-\"/*0123456789_x.\n ";
  int parsed = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string text = texts[i % texts.size()];
    for (int edits = 1 + static_cast<int>(rng() % 3); edits > 0; --edits) {
      size_t at = rng() % text.size();
      char byte = rng() % 2 ? kInteresting[rng() % kInteresting.size()] : static_cast<char>(rng());
      switch (rng() % 3) {
        case 0:
          text[at] = byte;
          break;
        case 1:
          text.insert(text.begin() + at, byte);
          break;
        default:
          text.erase(at, 1);
          break;
      }
    }
    parsed += ParsesOrThrowsError(text);
  }
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, 2000);
}

}  // namespace
}  // namespace strata::hlo
