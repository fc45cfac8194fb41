// Lazy IR nodes: hashes fixed at construction, what they cover, clones,
// and the graph walk's parameter numbering.
#include <gtest/gtest.h>

#include "strata/hlo/text.h"
#include "strata/ir/lowering.h"
#include "strata/ir/node.h"

namespace strata::ir {
namespace {

const runtime::Device* Cpu() { return runtime::Client::Default().device(0); }

Value Data(std::vector<float> v, std::vector<int64_t> dims) {
  return Value{Node::MakeDeviceData(runtime::Buffer::FromVector(v, dims, Cpu()))};
}

Value Add(Value a, Value b) { return Value{Node::MakeOp(hlo::Opcode::kAdd, {a, b})}; }
Value Mul(Value a, Value b) { return Value{Node::MakeOp(hlo::Opcode::kMultiply, {a, b})}; }

TEST(Node, DeviceDataHashCoversShapeNotBytes) {
  Value a = Data({1, 2, 3}, {3}), b = Data({4, 5, 6}, {3}), c = Data({1, 2}, {2});
  EXPECT_EQ(a.node->node_hash(), b.node->node_hash());
  EXPECT_NE(a.node->node_hash(), c.node->node_hash());
  Value ints{Node::MakeDeviceData(runtime::Buffer::FromVector<int32_t>({1, 2, 3}, {3}, Cpu()))};
  EXPECT_NE(a.node->node_hash(), ints.node->node_hash());
}

TEST(Node, StructureAttributesAndOutputIndexAreHashed) {
  Value a = Data({1, 2}, {2}), b = Data({3, 4}, {2});
  EXPECT_EQ(Add(a, b).hash(), Add(a, b).hash());
  EXPECT_NE(Add(a, b).hash(), Mul(a, b).hash());
  EXPECT_NE(Add(Add(a, b), b).hash(), Add(Mul(a, b), b).hash());
  hlo::Attributes lt, gt;
  lt.direction = hlo::Comparison::kLt;
  gt.direction = hlo::Comparison::kGt;
  EXPECT_NE(Node::MakeOp(hlo::Opcode::kCompare, {a, b}, lt)->dag_hash(),
            Node::MakeOp(hlo::Opcode::kCompare, {a, b}, gt)->dag_hash());
  // A two-output node: the two outputs are different values.
  Value key{Node::MakeDeviceData(runtime::Buffer::FromVector<uint64_t>({1, 0}, {2}, Cpu()))};
  hlo::Attributes rng;
  rng.rng_algorithm = "rng_philox";
  NodePtr bits = Node::MakeOp(hlo::Opcode::kRngBitGenerator, {key}, rng,
                              Shape::Tuple({Shape(DType::kU64, {2}), Shape(DType::kU32, {4})}));
  ASSERT_EQ(bits->num_outputs(), 2);
  EXPECT_NE((Value{bits, 0}.hash()), (Value{bits, 1}.hash()));
  // Literal constants are hashed by value.
  EXPECT_NE(Node::MakeConstant(hlo::Literal::Scalar(2.0f))->node_hash(),
            Node::MakeConstant(hlo::Literal::Scalar(3.0f))->node_hash());
  // Scalars (values that change per step) are not.
  EXPECT_EQ(Node::MakeScalar(hlo::Literal::Scalar(0.1f))->node_hash(),
            Node::MakeScalar(hlo::Literal::Scalar(0.2f))->node_hash());
}

TEST(Node, BadOperandsAreErrors) {
  Value a = Data({1, 2}, {2}), c = Data({1, 2, 3}, {3});
  EXPECT_THROW(Node::MakeOp(hlo::Opcode::kAdd, {a, c}), Error);
}

TEST(Node, ClonesAreNewNodesAndLeaveTheOriginalAlone) {
  Value a = Data({1, 2, 3, 4}, {2, 2}), b = Data({1, 1, 1, 1}, {2, 2});
  Value sum = Add(a, b);
  Hash128 before = sum.node->dag_hash();
  Value consumer = Mul(sum, sum);
  Hash128 consumer_before = consumer.node->dag_hash();
  Sharding s(Mesh({0, 1}, {2}, {"x"}), {{"x"}, {}}, 2);
  NodePtr sharded = sum.node->CloneWithSharding(s);
  EXPECT_NE(sharded->dag_hash(), before);
  EXPECT_EQ(sum.node->dag_hash(), before);
  EXPECT_FALSE(sum.node->sharding().has_value());
  EXPECT_EQ(consumer.node->dag_hash(), consumer_before);
  EXPECT_EQ(sharded->CloneWithSharding(std::nullopt)->dag_hash(), before);
  // Clone over other operands of the same shape (device data of one shape
  // hash alike, so use a computed operand to tell them apart).
  NodePtr cloned = sum.node->Clone({sum, b});
  EXPECT_EQ(cloned->node_hash(), sum.node->node_hash());
  EXPECT_NE(cloned->dag_hash(), sum.node->dag_hash());
  // Device data keeps its buffer through a sharding clone.
  NodePtr marked = a.node->CloneWithSharding(s);
  EXPECT_EQ(marked->buffer().data(), a.node->buffer().data());
}

TEST(Graph, ParametersByFirstAppearanceAndTheirUses) {
  Value t0 = Data({1, 2}, {2}), t1 = Data({3, 4}, {2});
  Graph g0 = BuildGraph({Add(Mul(t0, t1), t0)});
  Graph g1 = BuildGraph({Add(Mul(t0, t1), t1)});
  EXPECT_EQ(g0.parameters.size(), 2u);
  EXPECT_EQ(g0.parameter_sequence, (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(g1.parameter_sequence, (std::vector<int64_t>{0, 1, 1}));
  EXPECT_NE(g0.hash, g1.hash);
  // The same buffer behind two nodes is one parameter.
  Value t0_again{t0.node->CloneWithSharding(std::nullopt)};
  Graph g2 = BuildGraph({Add(t0, t0_again)});
  EXPECT_EQ(g2.parameters.size(), 1u);
  // Lowering: parameters p0, p1 and a tuple of the roots.
  auto module = LowerGraph(g0);
  std::string text = hlo::ToText(*module);
  EXPECT_NE(text.find("p0 = f32[2] parameter(0)"), std::string::npos) << text;
  EXPECT_NE(text.find("p1 = f32[2] parameter(1)"), std::string::npos) << text;
  EXPECT_NE(GraphToText(g0).find("parameter=1"), std::string::npos);
  EXPECT_NE(GraphToDot(g0).find("digraph"), std::string::npos);
}

}  // namespace
}  // namespace strata::ir
