// Driven by the opcode list: tests/hlo/testdata/every_opcode.hlo (written in
// XLA's syntax from its operation semantics, not from strata's printer)
// holds an instruction of every opcode. Each one must be there, have a shape
// rule (the parser verifies every instruction), print and parse back to the
// same text, and compile to a kernel; the module runs on two partitions
// with results checked against values worked out by hand. A new opcode
// without a fixture line fails here.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "opcode_list.h"
#include "strata/compiler/compile.h"
#include "strata/hlo/module.h"
#include "strata/hlo/opcode.h"
#include "strata/hlo/text.h"
#include "strata/runtime/communicator.h"

namespace strata::runtime {
namespace {

using hlo::Opcode;

using strata::test_support::AllOpcodes;

std::string Fixture() {
  std::ifstream file(std::string(STRATA_SOURCE_DIR) + "/tests/hlo/testdata/every_opcode.hlo");
  EXPECT_TRUE(file.good());
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::map<Opcode, int> CountOpcodes(const hlo::Module& m) {
  std::map<Opcode, int> counts;
  for (const auto& c : m.computations()) {
    for (const auto& inst : c->instructions()) ++counts[inst->opcode()];
  }
  return counts;
}

// Every row's columns agree with each other: an elementwise row has the
// elementwise shape rule, SPMD rule and kernel and a gradient exactly when
// it takes floats; a collective has the collective shape rule; only
// elementwise rows name a lazy / Python op; each name is its own.
TEST(OpcodeCoverage, EveryRowIsWholeAndConsistent) {
  ASSERT_EQ(static_cast<int>(AllOpcodes().size()), hlo::kOpcodeCount);
  std::map<std::string_view, Opcode> apis;
  for (Opcode op : AllOpcodes()) {
    SCOPED_TRACE(std::string(hlo::OpcodeName(op)));
    EXPECT_EQ(hlo::OpcodeFromName(hlo::OpcodeName(op)), op);
    const bool elementwise = hlo::IsElementwiseUnary(op) || hlo::IsElementwiseBinary(op);
    if (elementwise) {
      EXPECT_EQ(hlo::ShapeRuleOf(op), hlo::ShapeRule::kElementwise);
      EXPECT_EQ(hlo::SpmdRuleOf(op), hlo::SpmdRule::kElementwise);
      EXPECT_EQ(hlo::KernelOf(op), hlo::Kernel::kElementwise);
      EXPECT_EQ(hlo::VjpRuleOf(op) == hlo::VjpRule::kElementwise,
                hlo::TakesFloats(hlo::ElementTypesOf(op)));
      EXPECT_NE(hlo::ElementTypesOf(op), hlo::ElementTypes::kNone);
    } else {
      EXPECT_EQ(hlo::ElementTypesOf(op), hlo::ElementTypes::kNone);
      EXPECT_TRUE(hlo::ApiNameOf(op).empty());
    }
    EXPECT_EQ(hlo::IsCollective(op), hlo::ShapeRuleOf(op) == hlo::ShapeRule::kCollective);
    if (hlo::ApiIsGenerated(op)) EXPECT_FALSE(hlo::ApiNameOf(op).empty());
    if (!hlo::ApiNameOf(op).empty()) {
      EXPECT_TRUE(apis.emplace(hlo::ApiNameOf(op), op).second) << "api name used twice";
    }
  }
}

TEST(OpcodeCoverage, EveryOpcodeIsInTheFixtureAndRoundTripsThroughText) {
  std::unique_ptr<hlo::Module> m = hlo::ParseModule(Fixture());  // verifies every shape
  const std::map<Opcode, int> counts = CountOpcodes(*m);
  for (Opcode op : AllOpcodes()) {
    EXPECT_GT(counts.count(op) ? counts.at(op) : 0, 0)
        << "no " << hlo::OpcodeName(op) << " in every_opcode.hlo: add one";
  }
  const std::string printed = hlo::ToText(*m);
  std::unique_ptr<hlo::Module> again = hlo::ParseModule(printed);
  EXPECT_EQ(hlo::ToText(*again), printed);
  EXPECT_EQ(CountOpcodes(*again), counts);
}

TEST(OpcodeCoverage, EveryOpcodeCompilesToAKernelAndTheModuleRuns) {
  std::unique_ptr<hlo::Module> m = hlo::ParseModule(Fixture());
  // Every instruction of the entry live (a kernel is built only for what
  // the result reads): a root tuple of all of them, the fixture's own root
  // last, so its four leaves are the last four results.
  hlo::Computation& entry = *m->entry();
  std::vector<hlo::Instruction*> everything;
  std::vector<Shape> shapes;
  for (const auto& inst : entry.instructions()) {
    if (inst.get() == entry.root() || inst->opcode() == Opcode::kParameter) continue;
    // An asynchronous -start has one reader, its -done (the verifier's rule).
    if (inst->opcode() == Opcode::kAllGatherStart || inst->opcode() == Opcode::kAllReduceStart) {
      continue;
    }
    everything.push_back(inst.get());
    shapes.push_back(inst->shape());
  }
  everything.push_back(entry.root());
  shapes.push_back(entry.root()->shape());
  auto all = std::make_unique<hlo::Instruction>(Opcode::kTuple, Shape::Tuple(shapes), everything);
  all->set_name("everything");
  entry.set_root(entry.AddInstruction(std::move(all)));
  static Client client(2, 1);
  compiler::CompileOptions options;
  options.run_passes = false;  // keep every instruction: nothing folded or removed
  options.client = &client;
  // Throws naming the instruction when an opcode has no kernel.
  std::unique_ptr<Executable> exe = compiler::Compile(*m, options);
  const std::vector<std::vector<float>> xs = {{1, 2, 3, 4}, {5, 6, 7, 8}};
  std::vector<std::vector<Buffer>> args(2);
  const std::vector<uint8_t> pred = {1, 0, 1, 0};
  for (int p = 0; p < 2; ++p) {
    const Device* d = client.device(p);
    args[p] = {Buffer::FromVector<float>(xs[p], {4}, d),
               Buffer::FromVector<float>({2, 2, 2, 2}, {4}, d),
               Buffer::FromVector<int32_t>({1, 2, 3, 4}, {4}, d),
               Buffer::FromHost(Shape(DType::kPred, {4}), pred, d)};
  }
  auto communicator = MakeInProcessCommunicator(2, std::chrono::milliseconds(10000));
  std::vector<std::vector<Buffer>> out =
      exe->RunPartitioned(args, {client.device(0), client.device(1)}, *communicator);
  for (int p = 0; p < 2; ++p) {
    SCOPED_TRACE(p);
    ASSERT_GE(out[p].size(), 4u);
    const size_t r = out[p].size() - 4;             // the fixture's root
    EXPECT_EQ(out[p][r].ToVector<float>(), xs[p]);  // the loop leaves x as it is
    std::vector<float> negated;
    for (float v : xs[p]) negated.push_back(-v);
    EXPECT_EQ(out[p][r + 1].ToVector<float>(), negated);              // call(negate)
    EXPECT_EQ(out[p][r + 2].ToVector<float>()[0], p == 0 ? 10 : 26);  // reduce(add)
    EXPECT_EQ(out[p][r + 3].ToVector<float>(), xs[1 - p]);            // collective-permute swaps
  }
}

}  // namespace
}  // namespace strata::runtime
