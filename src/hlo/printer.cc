// Prints modules in XLA's HLO text format (canonical strata form: no '%',
// operands by name only, no layouts). The parser reads this back exactly.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "strata/hlo/convolution.h"
#include "strata/hlo/text.h"

namespace strata::hlo {
namespace {

std::string Braced(const std::vector<int64_t>& dims) {
  return fmt::format("{{{}}}", fmt::join(dims, ","));
}

// Long by design: one line per attribute, in the order XLA prints them (the
// parser's AttributeRule table reads them back).
std::string AttributesText(const Instruction& inst) {
  std::vector<std::string> attrs;
  auto add = [&](std::string_view key, std::string value) {
    attrs.push_back(fmt::format("{}={}", key, value));
  };
  switch (inst.opcode()) {
    case Opcode::kIota:
      add("iota_dimension", fmt::format("{}", inst.dimensions.at(0)));
      break;
    case Opcode::kBroadcast:
    case Opcode::kTranspose:
    case Opcode::kReverse:
    case Opcode::kConcatenate:
      add("dimensions", Braced(inst.dimensions));
      break;
    case Opcode::kReduce:
      add("dimensions", Braced(inst.dimensions));
      add("to_apply", inst.called.at(0)->name());
      break;
    case Opcode::kSlice: {
      std::vector<std::string> ranges;
      for (const SliceRange& r : inst.slice) {
        ranges.push_back(r.stride == 1 ? fmt::format("[{}:{}]", r.start, r.limit)
                                       : fmt::format("[{}:{}:{}]", r.start, r.limit, r.stride));
      }
      add("slice", fmt::format("{{{}}}", fmt::join(ranges, ", ")));
      break;
    }
    case Opcode::kDynamicSlice:
      add("dynamic_slice_sizes", Braced(inst.dynamic_slice_sizes));
      break;
    case Opcode::kPad: {
      std::vector<std::string> dims;
      for (const PadRange& p : inst.padding) {
        dims.push_back(p.interior ? fmt::format("{}_{}_{}", p.low, p.high, p.interior)
                                  : fmt::format("{}_{}", p.low, p.high));
      }
      add("padding", dims.empty() ? "{}" : fmt::format("{}", fmt::join(dims, "x")));
      break;
    }
    case Opcode::kCompare:
      add("direction", std::string(ComparisonName(inst.direction)));
      if (inst.comparison_type == ComparisonType::kTotalOrder) add("type", "TOTALORDER");
      break;
    case Opcode::kConditional:
      if (inst.operand(0)->shape().dtype() == DType::kPred && inst.called.size() == 2) {
        add("true_computation", inst.called[0]->name());
        add("false_computation", inst.called[1]->name());
      } else {
        std::vector<std::string> names;
        for (const Computation* c : inst.called) names.push_back(c->name());
        add("branch_computations", fmt::format("{{{}}}", fmt::join(names, ", ")));
      }
      break;
    case Opcode::kTopK:
      add("k", std::to_string(inst.k));
      add("largest", inst.largest ? "true" : "false");
      break;
    case Opcode::kSort:
      add("dimensions", Braced(inst.dimensions));
      if (inst.is_stable) add("is_stable", "true");
      add("to_apply", inst.called.at(0)->name());
      break;
    case Opcode::kReduceWindow:
      add("window", fmt::format("{{{}}}", WindowText(inst.window)));
      add("to_apply", inst.called.at(0)->name());
      break;
    case Opcode::kSelectAndScatter:
      add("window", fmt::format("{{{}}}", WindowText(inst.window)));
      add("select", inst.called.at(0)->name());
      add("scatter", inst.called.at(1)->name());
      break;
    case Opcode::kConvolution:
      if (!inst.window.empty()) add("window", fmt::format("{{{}}}", WindowText(inst.window)));
      add("dim_labels", DimLabelsText(inst.convolution));
      if (inst.feature_group_count != 1)
        add("feature_group_count", std::to_string(inst.feature_group_count));
      if (inst.batch_group_count != 1)
        add("batch_group_count", std::to_string(inst.batch_group_count));
      break;
    case Opcode::kDot:
      if (!inst.dot.lhs_batch.empty()) add("lhs_batch_dims", Braced(inst.dot.lhs_batch));
      add("lhs_contracting_dims", Braced(inst.dot.lhs_contracting));
      if (!inst.dot.rhs_batch.empty()) add("rhs_batch_dims", Braced(inst.dot.rhs_batch));
      add("rhs_contracting_dims", Braced(inst.dot.rhs_contracting));
      if (!inst.algorithm.empty()) add("algorithm", inst.algorithm);
      break;
    case Opcode::kGather:
      add("offset_dims", Braced(inst.gather.offset_dims));
      add("collapsed_slice_dims", Braced(inst.gather.collapsed_slice_dims));
      add("start_index_map", Braced(inst.gather.start_index_map));
      add("index_vector_dim", fmt::format("{}", inst.gather.index_vector_dim));
      add("slice_sizes", Braced(inst.gather.slice_sizes));
      if (!inst.gather.operand_batching_dims.empty()) {
        add("operand_batching_dims", Braced(inst.gather.operand_batching_dims));
        add("start_indices_batching_dims", Braced(inst.gather.start_indices_batching_dims));
      }
      break;
    case Opcode::kScatter:
      add("update_window_dims", Braced(inst.scatter.update_window_dims));
      add("inserted_window_dims", Braced(inst.scatter.inserted_window_dims));
      add("scatter_dims_to_operand_dims", Braced(inst.scatter.scatter_dims_to_operand_dims));
      add("index_vector_dim", fmt::format("{}", inst.scatter.index_vector_dim));
      if (!inst.scatter.input_batching_dims.empty()) {
        add("input_batching_dims", Braced(inst.scatter.input_batching_dims));
        add("scatter_indices_batching_dims", Braced(inst.scatter.scatter_indices_batching_dims));
      }
      add("to_apply", inst.called.at(0)->name());
      break;
    case Opcode::kGetTupleElement:
      add("index", fmt::format("{}", inst.tuple_index));
      break;
    case Opcode::kWhile:
      add("condition", inst.called.at(0)->name());
      add("body", inst.called.at(1)->name());
      break;
    case Opcode::kCall:
      add("to_apply", inst.called.at(0)->name());
      break;
    case Opcode::kFusion:
      add("kind", inst.fusion_kind.empty() ? "kLoop" : inst.fusion_kind);
      add("calls", inst.called.at(0)->name());
      break;
    case Opcode::kCustomCall:
      add("custom_call_target", fmt::format("\"{}\"", inst.custom_call_target));
      if (!inst.backend_config.empty()) {
        add("backend_config", fmt::format("\"{}\"", inst.backend_config));
      }
      break;
    case Opcode::kRngBitGenerator:
      add("algorithm", inst.rng_algorithm.empty() ? "rng_default" : inst.rng_algorithm);
      break;
    case Opcode::kCholesky:
      add("lower", inst.linalg.lower ? "true" : "false");
      break;
    case Opcode::kTriangularSolve:
      add("left_side", inst.linalg.left_side ? "true" : "false");
      add("lower", inst.linalg.lower ? "true" : "false");
      add("unit_diagonal", inst.linalg.unit_diagonal ? "true" : "false");
      add("transpose_a", inst.linalg.transpose_a ? "TRANSPOSE" : "NO_TRANSPOSE");
      break;
    case Opcode::kBatchNormTraining:
    case Opcode::kBatchNormInference:
    case Opcode::kBatchNormGrad:
      add("epsilon", fmt::format("{}", inst.epsilon));
      add("feature_index", fmt::format("{}", inst.feature_index));
      break;
    case Opcode::kMap:
      add("dimensions", Braced(inst.dimensions));
      add("to_apply", inst.called.at(0)->name());
      break;
    case Opcode::kReducePrecision:
      add("exponent_bits", fmt::format("{}", inst.exponent_bits));
      add("mantissa_bits", fmt::format("{}", inst.mantissa_bits));
      break;
    case Opcode::kAllReduce:
    case Opcode::kAllReduceStart:
    case Opcode::kAllGather:
    case Opcode::kAllGatherStart:
    case Opcode::kReduceScatter:
    case Opcode::kAllToAll: {
      const Opcode op = inst.opcode();
      const bool reduces =
          op == Opcode::kAllReduce || op == Opcode::kAllReduceStart || op == Opcode::kReduceScatter;
      if (inst.channel_id > 0) add("channel_id", fmt::format("{}", inst.channel_id));
      std::vector<std::string> groups;
      for (const auto& g : inst.replica_groups) groups.push_back(Braced(g));
      add("replica_groups", fmt::format("{{{}}}", fmt::join(groups, ",")));
      if (op != Opcode::kAllReduce && op != Opcode::kAllReduceStart)
        add("dimensions", Braced(inst.dimensions));
      if (inst.use_global_device_ids) add("use_global_device_ids", "true");
      if (reduces) add("to_apply", inst.called.at(0)->name());
      break;
    }
    case Opcode::kCollectivePermuteStart:
    case Opcode::kCollectivePermute: {
      if (inst.channel_id > 0) add("channel_id", fmt::format("{}", inst.channel_id));
      std::vector<std::string> pairs;
      for (auto [source, target] : inst.source_target_pairs)
        pairs.push_back(fmt::format("{{{},{}}}", source, target));
      add("source_target_pairs", fmt::format("{{{}}}", fmt::join(pairs, ",")));
      break;
    }
    default:
      break;
  }
  if (!inst.sharding.empty()) add("sharding", inst.sharding);
  std::string out;
  for (const std::string& a : attrs) out += ", " + a;
  return out;
}

std::string Signature(const Computation& c) {
  std::vector<std::string> params;
  for (const Instruction* p : c.parameters()) {
    params.push_back(fmt::format("{}: {}", p->name(), p->shape().ToString()));
  }
  return fmt::format("({}) -> {}", fmt::join(params, ", "),
                     c.root() ? c.root()->shape().ToString() : "()");
}

}  // namespace

std::string ToText(const Instruction& inst) {
  std::string operands;
  if (inst.opcode() == Opcode::kParameter) {
    operands = fmt::format("{}", inst.parameter_number);
  } else if (inst.opcode() == Opcode::kConstant) {
    operands = inst.literal.ValueToString();
  } else {
    for (int64_t i = 0; i < inst.operand_count(); ++i) {
      if (i) operands += ", ";
      operands += inst.operand(i)->name();
    }
  }
  return fmt::format("{} = {} {}({}){}", inst.name(), inst.shape().ToString(),
                     OpcodeName(inst.opcode()), operands, AttributesText(inst));
}

std::string ToText(const Computation& c) {
  std::string out = fmt::format("{} {} {{\n", c.name(), Signature(c));
  for (const auto& inst : c.instructions()) {
    out += fmt::format("  {}{}\n", inst.get() == c.root() ? "ROOT " : "", ToText(*inst));
  }
  return out + "}\n";
}

std::string ToText(const Module& m) {
  std::string out = m.num_partitions() > 1 ? fmt::format("HloModule {}, num_partitions={}\n",
                                                         m.name(), m.num_partitions())
                                           : fmt::format("HloModule {}\n", m.name());
  for (const auto& c : m.computations()) {
    out += "\n";
    if (c.get() == m.entry()) out += "ENTRY ";
    out += ToText(*c);
  }
  return out;
}

}  // namespace strata::hlo
