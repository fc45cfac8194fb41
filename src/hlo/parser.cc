// Parses XLA's HLO text format: the canonical strata form the printer writes
// and the richer form XLA itself prints ('%' names, operand shapes, layouts,
// metadata, module attributes). Every error starts with "line L, column C: ".
// Modules, computations, instructions and their attributes; the values they
// hold are read in parser_values.cc.
#include "parser.h"

namespace strata::hlo {
namespace text_parser {

// One row per attribute an opcode understands: where it goes, whether XLA
// always prints it.
struct AttributeRule {
  Opcode opcode;
  std::string_view key;
  bool required;
  void (*parse)(Parser& p, Instruction& inst);
};

// Row actions: store an integer list / an integer / a called computation.
#define INTEGER_LIST_INTO(field) [](Parser& p, Instruction& i) { i.field = p.ParseIntegerList(); }
#define INTEGER_INTO(field) \
  [](Parser& p, Instruction& i) { i.field = p.ParseInteger("an integer"); }
#define CALLED_INTO(index)                                         \
  [](Parser& p, Instruction& i) {                                  \
    i.called.resize(std::max<size_t>(i.called.size(), index + 1)); \
    i.called[index] = p.ParseCalledComputation();                  \
  }

// The attributes every group collective takes.
#define COLLECTIVE_RULES(op)                                                          \
  {Opcode::op, "channel_id", false, INTEGER_INTO(channel_id)},                        \
      {Opcode::op, "replica_groups", false,                                           \
       [](Parser& p, Instruction& i) { i.replica_groups = p.ParseReplicaGroups(); }}, \
  {                                                                                   \
    Opcode::op, "use_global_device_ids", false,                                       \
        [](Parser& p, Instruction& i) { i.use_global_device_ids = p.ParseBool(); }    \
  }

// batch-norm-training, -inference and -grad.
#define BATCH_NORM_RULES(op)                                                                      \
  {Opcode::op, "epsilon", true, [](Parser& p, Instruction& i) { i.epsilon = p.ParseFloat(); }}, { \
    Opcode::op, "feature_index", true, INTEGER_INTO(feature_index)                                \
  }

const AttributeRule kAttributeRules[] = {
    {Opcode::kIota, "iota_dimension", true,
     [](Parser& p, Instruction& i) { i.dimensions = {p.ParseInteger("an iota dimension")}; }},
    {Opcode::kBroadcast, "dimensions", true, INTEGER_LIST_INTO(dimensions)},
    {Opcode::kTranspose, "dimensions", true, INTEGER_LIST_INTO(dimensions)},
    {Opcode::kReverse, "dimensions", true, INTEGER_LIST_INTO(dimensions)},
    {Opcode::kConcatenate, "dimensions", true, INTEGER_LIST_INTO(dimensions)},
    {Opcode::kReduce, "dimensions", true, INTEGER_LIST_INTO(dimensions)},
    {Opcode::kReduce, "to_apply", true, CALLED_INTO(0)},
    {Opcode::kSlice, "slice", true, [](Parser& p, Instruction& i) { i.slice = p.ParseSlice(); }},
    {Opcode::kDynamicSlice, "dynamic_slice_sizes", true, INTEGER_LIST_INTO(dynamic_slice_sizes)},
    {Opcode::kPad, "padding", true,
     [](Parser& p, Instruction& i) { i.padding = p.ParsePadding(); }},
    {Opcode::kCompare, "direction", true,
     [](Parser& p, Instruction& i) { i.direction = p.ParseDirection(); }},
    {Opcode::kCompare, "type", false,
     [](Parser& p, Instruction& i) { i.comparison_type = p.ParseComparisonType(); }},
    {Opcode::kSort, "dimensions", true, INTEGER_LIST_INTO(dimensions)},
    {Opcode::kSort, "is_stable", false,
     [](Parser& p, Instruction& i) { i.is_stable = p.ParseBool(); }},
    {Opcode::kSort, "to_apply", true, CALLED_INTO(0)},
    {Opcode::kTopK, "k", true, INTEGER_INTO(k)},
    {Opcode::kTopK, "largest", false, [](Parser& p, Instruction& i) { i.largest = p.ParseBool(); }},
    {Opcode::kConvolution, "window", false,
     [](Parser& p, Instruction& i) { i.window = p.ParseWindow(); }},
    {Opcode::kConvolution, "dim_labels", true,
     [](Parser& p, Instruction& i) { i.convolution = p.ParseDimLabels(); }},
    {Opcode::kConvolution, "feature_group_count", false, INTEGER_INTO(feature_group_count)},
    {Opcode::kConvolution, "batch_group_count", false, INTEGER_INTO(batch_group_count)},
    {Opcode::kReduceWindow, "window", true,
     [](Parser& p, Instruction& i) { i.window = p.ParseWindow(); }},
    {Opcode::kReduceWindow, "to_apply", true, CALLED_INTO(0)},
    {Opcode::kSelectAndScatter, "window", true,
     [](Parser& p, Instruction& i) { i.window = p.ParseWindow(); }},
    {Opcode::kSelectAndScatter, "select", true, CALLED_INTO(0)},
    {Opcode::kSelectAndScatter, "scatter", true, CALLED_INTO(1)},
    {Opcode::kDot, "lhs_batch_dims", false, INTEGER_LIST_INTO(dot.lhs_batch)},
    {Opcode::kDot, "rhs_batch_dims", false, INTEGER_LIST_INTO(dot.rhs_batch)},
    {Opcode::kDot, "lhs_contracting_dims", false, INTEGER_LIST_INTO(dot.lhs_contracting)},
    {Opcode::kDot, "rhs_contracting_dims", false, INTEGER_LIST_INTO(dot.rhs_contracting)},
    {Opcode::kGather, "offset_dims", true, INTEGER_LIST_INTO(gather.offset_dims)},
    {Opcode::kGather, "collapsed_slice_dims", true, INTEGER_LIST_INTO(gather.collapsed_slice_dims)},
    {Opcode::kGather, "start_index_map", true, INTEGER_LIST_INTO(gather.start_index_map)},
    {Opcode::kGather, "index_vector_dim", true, INTEGER_INTO(gather.index_vector_dim)},
    {Opcode::kGather, "slice_sizes", true, INTEGER_LIST_INTO(gather.slice_sizes)},
    {Opcode::kGather, "operand_batching_dims", false,
     INTEGER_LIST_INTO(gather.operand_batching_dims)},
    {Opcode::kGather, "start_indices_batching_dims", false,
     INTEGER_LIST_INTO(gather.start_indices_batching_dims)},
    {Opcode::kScatter, "input_batching_dims", false,
     INTEGER_LIST_INTO(scatter.input_batching_dims)},
    {Opcode::kScatter, "scatter_indices_batching_dims", false,
     INTEGER_LIST_INTO(scatter.scatter_indices_batching_dims)},
    {Opcode::kScatter, "update_window_dims", true, INTEGER_LIST_INTO(scatter.update_window_dims)},
    {Opcode::kScatter, "inserted_window_dims", true,
     INTEGER_LIST_INTO(scatter.inserted_window_dims)},
    {Opcode::kScatter, "scatter_dims_to_operand_dims", true,
     INTEGER_LIST_INTO(scatter.scatter_dims_to_operand_dims)},
    {Opcode::kScatter, "index_vector_dim", true, INTEGER_INTO(scatter.index_vector_dim)},
    {Opcode::kScatter, "to_apply", true, CALLED_INTO(0)},
    {Opcode::kGetTupleElement, "index", true, INTEGER_INTO(tuple_index)},
    {Opcode::kConditional, "true_computation", false, CALLED_INTO(0)},
    {Opcode::kConditional, "false_computation", false, CALLED_INTO(1)},
    {Opcode::kConditional, "branch_computations", false,
     [](Parser& p, Instruction& i) { i.called = p.ParseCalledList(); }},
    {Opcode::kWhile, "condition", true, CALLED_INTO(0)},
    {Opcode::kWhile, "body", true, CALLED_INTO(1)},
    {Opcode::kCall, "to_apply", true, CALLED_INTO(0)},
    {Opcode::kFusion, "calls", true, CALLED_INTO(0)},
    {Opcode::kFusion, "kind", false,
     [](Parser& p, Instruction& i) { i.fusion_kind = p.ParseFusionKind(); }},
    {Opcode::kDot, "algorithm", false,
     [](Parser& p, Instruction& i) {
       i.algorithm = std::string(p.ExpectName("a dot algorithm after 'algorithm='").text);
     }},
    {Opcode::kRngBitGenerator, "algorithm", false,
     [](Parser& p, Instruction& i) { i.rng_algorithm = p.ParseRngAlgorithm(); }},
    {Opcode::kCholesky, "lower", false,
     [](Parser& p, Instruction& i) { i.linalg.lower = p.ParseBool(); }},
    {Opcode::kTriangularSolve, "left_side", false,
     [](Parser& p, Instruction& i) { i.linalg.left_side = p.ParseBool(); }},
    {Opcode::kTriangularSolve, "lower", false,
     [](Parser& p, Instruction& i) { i.linalg.lower = p.ParseBool(); }},
    {Opcode::kTriangularSolve, "unit_diagonal", false,
     [](Parser& p, Instruction& i) { i.linalg.unit_diagonal = p.ParseBool(); }},
    {Opcode::kTriangularSolve, "transpose_a", false,
     [](Parser& p, Instruction& i) { i.linalg.transpose_a = p.ParseTranspose(); }},
    BATCH_NORM_RULES(kBatchNormTraining),
    BATCH_NORM_RULES(kBatchNormInference),
    BATCH_NORM_RULES(kBatchNormGrad),
    {Opcode::kMap, "dimensions", false, INTEGER_LIST_INTO(dimensions)},
    {Opcode::kMap, "to_apply", true, CALLED_INTO(0)},
    {Opcode::kReducePrecision, "exponent_bits", true, INTEGER_INTO(exponent_bits)},
    {Opcode::kReducePrecision, "mantissa_bits", true, INTEGER_INTO(mantissa_bits)},
    COLLECTIVE_RULES(kAllReduce),
    {Opcode::kAllReduce, "to_apply", true, CALLED_INTO(0)},
    COLLECTIVE_RULES(kAllReduceStart),
    {Opcode::kAllReduceStart, "to_apply", true, CALLED_INTO(0)},
    COLLECTIVE_RULES(kAllGather),
    {Opcode::kAllGather, "dimensions", true, INTEGER_LIST_INTO(dimensions)},
    COLLECTIVE_RULES(kAllGatherStart),
    {Opcode::kAllGatherStart, "dimensions", true, INTEGER_LIST_INTO(dimensions)},
    {Opcode::kCollectivePermuteStart, "channel_id", false, INTEGER_INTO(channel_id)},
    {Opcode::kCollectivePermuteStart, "source_target_pairs", true,
     [](Parser& p, Instruction& i) { i.source_target_pairs = p.ParseSourceTargetPairs(); }},
    COLLECTIVE_RULES(kReduceScatter),
    {Opcode::kReduceScatter, "dimensions", true, INTEGER_LIST_INTO(dimensions)},
    {Opcode::kReduceScatter, "to_apply", true, CALLED_INTO(0)},
    COLLECTIVE_RULES(kAllToAll),
    {Opcode::kAllToAll, "dimensions", true, INTEGER_LIST_INTO(dimensions)},
    {Opcode::kCollectivePermute, "channel_id", false, INTEGER_INTO(channel_id)},
    {Opcode::kCollectivePermute, "source_target_pairs", true,
     [](Parser& p, Instruction& i) { i.source_target_pairs = p.ParseSourceTargetPairs(); }},
};

#undef COLLECTIVE_RULES
#undef BATCH_NORM_RULES

#undef INTEGER_LIST_INTO
#undef INTEGER_INTO
#undef CALLED_INTO

std::unique_ptr<Module> Parser::ParseModule() {
  Token header = Take();
  if (!header.IsName("HloModule"))
    FailAt(header, "expected 'HloModule', found {}", Describe(header));
  Token name = Take();
  if (name.kind != TokenKind::kName || name.IsName("ENTRY")) {
    FailAt(name, "expected a module name after 'HloModule', found {}", Describe(name));
  }
  auto result = std::make_unique<Module>(std::string(StripPercent(name.text)));
  module = result.get();
  // num_partitions=4; the rest (entry_computation_layout={...}, is_scheduled=true, ...) is skipped.
  while (TakeIf(',')) {
    Token key = ExpectName("an attribute name after ','");
    Expect('=', fmt::format("after attribute '{}'", key.text));
    if (key.IsName("num_partitions")) {
      Token at = Peek();
      int64_t n = ParseInteger("a partition count");
      if (n < 1) FailAt(at, "num_partitions must be at least 1, found {}", n);
      result->set_num_partitions(n);
    } else {
      SkipValue(key);
    }
  }
  SkipStackFrameTables();
  Computation* entry = nullptr;
  do {
    ParseComputation(&entry);
  } while (Peek().kind != TokenKind::kEnd);
  result->set_entry(entry ? entry : result->computations().back().get());
  Verify(*result);
  return result;
}

// The debug tables newer XLA prints after the module's header (FileNames,
// FunctionNames, FileLocations, StackFrames): rows of an id and a string or
// a {key=value} group, which metadata's stack_frame_id points into. strata
// keeps no metadata, so they are read for syntax and dropped.
void Parser::SkipStackFrameTables() {
  auto is_table = [this](const Token& t) {
    return (t.IsName("FileNames") || t.IsName("FunctionNames") || t.IsName("FileLocations") ||
            t.IsName("StackFrames")) &&
           Peek(1).kind == TokenKind::kNumber;  // not a computation of that name
  };
  for (Token t = Peek(); is_table(t); t = Peek()) {
    Take();
    while (Peek().kind == TokenKind::kNumber) {
      Take();
      Token value = Peek();
      if (value.kind == TokenKind::kString) {
        Take();
      } else if (value.Is('{')) {
        SkipBalanced();
      } else {
        FailAt(value, "expected a string or '{{' in the {} table, found {}", t.text,
               Describe(value));
      }
    }
  }
}

// ", key=value" pairs after the module name or a computation's body.
void Parser::SkipKeyValues() {
  while (TakeIf(',')) {
    Token key = ExpectName("an attribute name after ','");
    Expect('=', fmt::format("after attribute '{}'", key.text));
    SkipValue(key);
  }
}

// Consumes a group opened by the next token through its matching closer;
// returns the closer.
Token Parser::SkipBalanced() {
  std::vector<Token> open;
  while (true) {
    Token t = Take();
    if (t.IsOpener()) {
      open.push_back(t);
    } else if (t.IsCloser() || t.kind == TokenKind::kEnd) {
      const Token& opener = open.back();
      char closer = opener.Is('{') ? '}' : opener.Is('(') ? ')' : ']';
      if (!t.Is(closer)) {
        FailAt(t, "expected '{}' to close '{}' from line {}, column {}, found {}", closer,
               opener.text, opener.line, opener.column, Describe(t));
      }
      open.pop_back();
      if (open.empty()) return t;
    }
  }
}

void Parser::SkipValue(const Token& key) {
  Token t = Peek();
  if (t.IsOpener()) {
    SkipBalanced();
  } else if (t.kind == TokenKind::kName || t.kind == TokenKind::kNumber ||
             t.kind == TokenKind::kString) {
    Take();
  } else {
    FailAt(t, "expected a value for attribute '{}', found {}", key.text, Describe(t));
  }
}

void Parser::ParseComputation(Computation** entry) {
  Token first = Peek();
  bool is_entry = first.IsName("ENTRY");
  if (is_entry) {
    Take();
    if (*entry) FailAt(first, "second ENTRY computation (the first is '{}')", (*entry)->name());
  }
  PendingComputation pc;
  pc.name = ExpectName(is_entry ? "a computation name after 'ENTRY'" : "a computation name");
  std::string name(StripPercent(pc.name.text));
  if (module->FindComputation(name)) FailAt(pc.name, "duplicate computation name '{}'", name);
  pc.computation = std::make_unique<Computation>(name);
  if (Peek().Is('(')) ParseSignature();
  Expect('{', fmt::format("to open computation '{}'", name));
  while (!Peek().Is('}')) {
    if (Peek().kind == TokenKind::kEnd) {
      FailAt(Peek(), "expected '}}' to close computation '{}', found end of input", name);
    }
    ParseInstruction(pc);
  }
  Token close = Take();
  SkipKeyValues();  // execution_thread="..."
  FinishComputation(pc, close);
  Computation* added = module->AddComputation(std::move(pc.computation));
  if (is_entry) *entry = added;
}

// "(p: f32[2], q: (s32[], f32[])) -> f32[2]": parsed for syntax, then ignored;
// the parameter instructions carry the same information.
void Parser::ParseSignature() {
  Expect('(', "to open the parameter list");
  if (!Peek().Is(')')) {
    do {
      Token name = ExpectName("a parameter name");
      Expect(':', fmt::format("after parameter name '{}'", name.text));
      ParseShape(0, false);
    } while (TakeIf(','));
  }
  Expect(')', "to close the parameter list");
  Token arrow = Take();
  if (arrow.kind != TokenKind::kArrow) {
    FailAt(arrow, "expected '->' after the parameter list, found {}", Describe(arrow));
  }
  ParseShape(0, true);
}

void Parser::FinishComputation(PendingComputation& pc, const Token& close) {
  Computation& c = *pc.computation;
  if (pc.instructions.empty()) FailAt(close, "computation '{}' has no instructions", c.name());
  std::unordered_map<const Instruction*, size_t> index_of;
  for (size_t i = 0; i < pc.instructions.size(); ++i) index_of[pc.instructions[i].instruction] = i;
  for (PendingInstruction& p : pc.instructions) {
    std::vector<Instruction*> operands;
    for (const OperandRef& ref : p.operands) {
      auto it = pc.index_of.find(ref.name);
      if (it == pc.index_of.end()) {
        FailAt(ref.at, "undefined operand '{}' in instruction '{}'", ref.name,
               p.instruction->name());
      }
      Instruction* operand = pc.instructions[it->second].instruction;
      if (ref.declared && *ref.declared != operand->shape()) {
        FailAt(ref.at, "operand '{}' is written as {} but is defined as {}", ref.name,
               ref.declared->ToString(), operand->shape().ToString());
      }
      operands.push_back(operand);
    }
    p.instruction->set_operands(std::move(operands));
  }
  // XLA takes the last instruction as the root when none is marked ROOT.
  c.set_root(pc.root ? pc.root : pc.instructions.back().instruction);

  // Operands may be written after their users; reject cycles, then sort.
  std::vector<uint8_t> state(pc.instructions.size(), 0);  // 0 new, 1 on stack, 2 done
  for (size_t start = 0; start < state.size(); ++start) {
    if (state[start]) continue;
    std::vector<std::pair<size_t, size_t>> stack{{start, 0}};
    state[start] = 1;
    while (!stack.empty()) {
      auto [index, next] = stack.back();
      const Instruction* inst = pc.instructions[index].instruction;
      if (next == inst->operands().size()) {
        state[index] = 2;
        stack.pop_back();
        continue;
      }
      ++stack.back().second;
      size_t op = index_of.at(inst->operand(next));
      if (state[op] == 1) {
        FailAt(pc.instructions[index].name, "instruction '{}' depends on itself through '{}'",
               inst->name(), inst->operand(next)->name());
      }
      if (state[op] == 0) {
        state[op] = 1;
        stack.push_back({op, 0});
      }
    }
  }
  c.SortTopologically();

  // Check shapes here rather than only in Verify so errors carry a position.
  for (const auto& inst : c.instructions()) {
    const Token& at = pc.instructions[pc.index_of.at(inst->name())].name;
    Shape expected;
    try {
      expected = InferShape(*inst);
    } catch (const Error& e) {
      FailAt(at, "{}", e.what());
    }
    if (expected != inst->shape()) {
      FailAt(at, "[{}] {} declares shape {} but its operands give {}", OpcodeName(inst->opcode()),
             inst->name(), inst->shape().ToString(), expected.ToString());
    }
  }
  for (int64_t n = 0; n < static_cast<int64_t>(pc.parameter_names.size()); ++n) {
    if (!pc.parameter_names.count(n)) {
      FailAt(pc.name, "computation '{}' has {} parameters but no parameter({})", c.name(),
             pc.parameter_names.size(), n);
    }
  }
}

void Parser::ParseInstruction(PendingComputation& pc) {
  Token first = Peek();
  bool is_root = first.IsName("ROOT") && !Peek(1).Is('=');
  if (is_root) {
    Take();
    if (pc.root) {
      FailAt(first, "computation '{}' already has ROOT '{}'", pc.computation->name(),
             pc.root->name());
    }
  }
  Token name_token = ExpectName("an instruction name");
  std::string_view name = StripPercent(name_token.text);
  if (auto it = pc.index_of.find(name); it != pc.index_of.end()) {
    FailAt(name_token, "duplicate instruction name '{}' (first defined on line {})", name,
           pc.instructions[it->second].name.line);
  }
  Expect('=', fmt::format("after instruction name '{}'", name));
  Token shape_token = Peek();
  default_layouts = true;
  last_layout.reset();
  Shape shape = ParseShape(0, false);
  const std::optional<std::vector<int64_t>> layout = last_layout;
  if (!default_layouts) {
    pc.non_default_layout.insert(name);
    if (layout && shape.is_array()) pc.layouts[name] = *layout;
  }
  const bool shape_default_layout = default_layouts;
  Token opcode_token = Take();
  if (opcode_token.kind != TokenKind::kName) {
    FailAt(opcode_token, "expected an opcode after the shape, found {}", Describe(opcode_token));
  }
  // XLA's bitcast reinterprets the bytes under the layouts: with the
  // default (row-major) ones it is a reshape, and strata reads it as one.
  const bool bitcast = opcode_token.text == "bitcast";
  // A custom-call with target "Sharding" (what jax.lax.with_sharding_constraint
  // and mark_sharding emit) annotates its operand: strata reads it as a copy
  // carrying the sharding. Other targets are errors naming them.
  const bool custom_call = opcode_token.text == "custom-call";
  // (A custom-call is parsed as a copy; a manual-sharding target becomes a
  // kCustomCall below, once its target is read.)
  std::optional<Opcode> opcode = bitcast       ? Opcode::kReshape
                                 : custom_call ? Opcode::kCopy
                                               : OpcodeFromName(opcode_token.text);
  if (!opcode) FailAt(opcode_token, "unknown opcode '{}'", opcode_token.text);
  auto inst = std::make_unique<Instruction>(*opcode, shape, std::vector<Instruction*>{});
  inst->set_name(std::string(name));
  PendingInstruction pending{nullptr, name_token, {}};

  Expect('(', fmt::format("after opcode '{}'", opcode_token.text));
  if (*opcode == Opcode::kParameter) {
    Token number_token = Peek();
    int64_t number = ParseInteger("a parameter number");
    if (number < 0) FailAt(number_token, "parameter number must be non-negative, found {}", number);
    auto [it, inserted] = pc.parameter_names.emplace(number, name);
    if (!inserted) {
      FailAt(number_token, "duplicate parameter number {}: '{}' already is parameter({})", number,
             it->second, number);
    }
    inst->parameter_number = number;
  } else if (*opcode == Opcode::kConstant) {
    inst->literal = ParseLiteral(shape, shape_token);
  } else if (!Peek().Is(')')) {
    do {
      pending.operands.push_back(ParseOperand());
    } while (TakeIf(','));
  }
  Expect(')', "after operands");
  std::optional<LayoutBitcast> across_layouts;
  if (bitcast && pending.operands.size() == 1 &&
      (!shape_default_layout || !pending.operands[0].default_layout ||
       pc.non_default_layout.count(pending.operands[0].name))) {
    across_layouts =
        PlanLayoutBitcast(pc, shape, shape_default_layout, layout, pending.operands[0]);
  }
  if (across_layouts) {
    AddLayoutBitcast(pc, *across_layouts, shape, pending.operands[0], name, opcode_token);
    pending.operands = {OperandRef{made_names.back(), opcode_token}};
  } else if (bitcast &&
             CheckBitcast(pc, shape, shape_default_layout, pending.operands, opcode_token)) {
    inst =
        std::make_unique<Instruction>(Opcode::kBitcastConvert, shape, std::vector<Instruction*>{});
    inst->set_name(std::string(name));
  }
  CustomCallText call;
  ParseAttributes(*inst, opcode_token, custom_call ? &call : nullptr);
  if (across_layouts) {  // (its attributes were read as a bitcast's)
    auto transpose =
        std::make_unique<Instruction>(Opcode::kTranspose, shape, std::vector<Instruction*>{});
    transpose->set_name(std::string(name));
    transpose->sharding = std::move(inst->sharding);
    transpose->dimensions = across_layouts->from_memory_order;
    inst = std::move(transpose);
  }
  if (custom_call && call.target == "TopK") {
    // XLA:CPU's top-k: (values, s32 positions) of the k largest along the
    // last dimension, k the result's last dimension.
    if (pending.operands.size() != 1 || !shape.is_tuple() || shape.tuple_size() != 2 ||
        !shape.tuple_shape(0).is_array() || shape.tuple_shape(0).rank() == 0) {
      FailAt(opcode_token,
             "custom-call target 'TopK' takes one operand and gives (values, "
             "positions) of rank 1 or more, found {} operand(s) giving {}",
             pending.operands.size(), shape.ToString());
    }
    auto top = std::make_unique<Instruction>(Opcode::kTopK, shape, std::vector<Instruction*>{});
    top->set_name(std::string(name));
    top->k = shape.tuple_shape(0).dims().back();
    top->largest = true;
    inst = std::move(top);
  } else if (custom_call) {
    CheckCustomCall(call, pending.operands, opcode_token);
    if (call.target != "Sharding") {  // a manual-sharding boundary or fused attention
      auto op =
          std::make_unique<Instruction>(Opcode::kCustomCall, shape, std::vector<Instruction*>{});
      op->set_name(std::string(name));
      op->sharding = std::move(inst->sharding);
      op->custom_call_target = call.target;
      if (IsAttentionTarget(call.target) || LibraryCallOf(call.target)) {
        op->backend_config = call.backend_config;
      }
      inst = std::move(op);
    }
  }

  pending.instruction = pc.computation->AddInstruction(std::move(inst));
  pc.index_of[name] = pc.instructions.size();
  if (is_root) pc.root = pending.instruction;
  pc.instructions.push_back(std::move(pending));
}

// A bitcast strata reads as a reshape: one array operand, every layout
// involved the default one. Returns whether it changes the element type
// instead (XLA's optimized modules bitcast f32 to s32 of the same dims:
// that is a bitcast-convert), which needs the operand defined before it.
bool Parser::CheckBitcast(const PendingComputation& pc, const Shape& shape, bool default_layout,
                          const std::vector<OperandRef>& operands, const Token& at) {
  if (operands.size() != 1) FailAt(at, "bitcast takes one operand, found {}", operands.size());
  const OperandRef& operand = operands[0];
  const bool operand_default = operand.default_layout && !pc.non_default_layout.count(operand.name);
  if (!default_layout || !operand_default) {
    FailAt(at,
           "bitcast with a layout other than the default (row-major) one: strata stores arrays "
           "row-major and reads a bitcast as a reshape");
  }
  std::optional<Shape> from = operand.declared;
  if (!from) {
    auto it = pc.index_of.find(operand.name);
    if (it != pc.index_of.end()) from = pc.instructions[it->second].instruction->shape();
  }
  if (!from || !from->is_array() || !shape.is_array() || from->dtype() == shape.dtype()) {
    return false;
  }
  if (from->dims() != shape.dims() || DTypeSize(from->dtype()) != DTypeSize(shape.dtype())) {
    FailAt(at,
           "bitcast from {} to {} changes the element type and the dims: strata reads a bitcast "
           "as a reshape or, between types of one size, a bitcast-convert",
           from->ToString(), shape.ToString());
  }
  return true;
}

// The operand's and the result's layouts must both be plain permutations
// (a tiled layout has no such reading) and the element type kept.
std::optional<LayoutBitcast> Parser::PlanLayoutBitcast(
    const PendingComputation& pc, const Shape& shape, bool to_default,
    const std::optional<std::vector<int64_t>>& layout, const OperandRef& operand) {
  std::optional<Shape> from = operand.declared;
  bool from_default = operand.default_layout;
  std::optional<std::vector<int64_t>> from_layout = operand.layout;
  if (!from) {
    auto it = pc.index_of.find(operand.name);
    if (it == pc.index_of.end()) return std::nullopt;  // defined later: CheckBitcast says so
    from = pc.instructions[it->second].instruction->shape();
    from_default = !pc.non_default_layout.count(operand.name);
    if (auto l = pc.layouts.find(operand.name); l != pc.layouts.end()) from_layout = l->second;
  }
  if (!from->is_array() || !shape.is_array() || from->dtype() != shape.dtype() ||
      from->num_elements() != shape.num_elements()) {
    return std::nullopt;
  }
  auto row_major = [](int64_t rank) {
    std::vector<int64_t> order;
    for (int64_t d = rank - 1; d >= 0; --d) order.push_back(d);
    return order;
  };
  if ((!from_default && !from_layout) || (!to_default && !layout) ||
      (!to_default && layout->size() != shape.dims().size())) {
    return std::nullopt;
  }
  const std::vector<int64_t> in = from_default ? row_major(from->rank()) : *from_layout;
  const std::vector<int64_t> out = to_default ? row_major(shape.rank()) : *layout;
  LayoutBitcast plan;
  plan.to_memory_order.assign(in.rbegin(), in.rend());  // major to minor
  const std::vector<int64_t> major_to_minor(out.rbegin(), out.rend());
  plan.from_memory_order.resize(major_to_minor.size());
  for (size_t i = 0; i < major_to_minor.size(); ++i) {
    plan.memory_dims.push_back(shape.dim(major_to_minor[i]));
    plan.from_memory_order[major_to_minor[i]] = static_cast<int64_t>(i);
  }
  return plan;
}

// The transpose to the operand's memory order and the reshape to the
// result's, named after the bitcast; the bitcast itself becomes the
// transpose out of the result's memory order.
void Parser::AddLayoutBitcast(PendingComputation& pc, const LayoutBitcast& plan, const Shape& shape,
                              const OperandRef& operand, std::string_view name, const Token& at) {
  const Shape from = operand.declared
                         ? *operand.declared
                         : pc.instructions[pc.index_of.at(operand.name)].instruction->shape();
  std::vector<int64_t> memory_order_dims;
  for (int64_t d : plan.to_memory_order) memory_order_dims.push_back(from.dim(d));
  auto add = [&](Opcode opcode, Shape result, std::vector<int64_t> dims, OperandRef ref,
                 std::string suffix) {
    made_names.push_back(std::string(name) + suffix);
    std::string_view made = made_names.back();
    if (pc.index_of.count(made)) FailAt(at, "duplicate instruction name '{}'", made);
    auto inst =
        std::make_unique<Instruction>(opcode, std::move(result), std::vector<Instruction*>{});
    inst->set_name(std::string(made));
    inst->dimensions = std::move(dims);
    PendingInstruction pending{nullptr, at, {std::move(ref)}};
    pending.instruction = pc.computation->AddInstruction(std::move(inst));
    pc.index_of[made] = pc.instructions.size();
    pc.instructions.push_back(std::move(pending));
  };
  add(Opcode::kTranspose, Shape(shape.dtype(), memory_order_dims), plan.to_memory_order, operand,
      ".in_memory_order");
  add(Opcode::kReshape, Shape(shape.dtype(), plan.memory_dims), {},
      OperandRef{made_names.back(), at}, ".in_result_memory_order");
}

void Parser::CheckCustomCall(const CustomCallText& call, const std::vector<OperandRef>& operands,
                             const Token& at) {
  const std::string& target = call.target;
  if (target.empty()) FailAt(at, "custom-call is missing attribute 'custom_call_target'");
  if (IsAttentionTarget(target)) {
    const size_t expected = AttentionOperandCount(target);
    if (operands.size() != expected && operands.size() != expected + 1) {
      FailAt(at, "custom-call target '{}' takes {} operands ({} with a mask), found {}", target,
             expected, expected + 1, operands.size());
    }
    try {
      ParseAttentionConfig(call.backend_config);
    } catch (const Error& e) {
      FailAt(at, "{}", e.what());
    }
    return;
  }
  if (auto library = LibraryCallOf(target)) {
    const size_t expected = LibraryCallOperands(*library);
    if (operands.size() != expected) {
      FailAt(at, "custom-call target '{}' takes {} operand(s), found {}", target, expected,
             operands.size());
    }
    return;
  }
  if (target != "Sharding" && target != "SPMDFullToShardShape" &&
      target != "SPMDShardToFullShape") {
    FailAt(at,
           "custom-call target '{}' is not supported: strata runs the targets JAX's sharding "
           "emits: \"Sharding\" (an annotation, read as a copy with its sharding), "
           "\"SPMDFullToShardShape\" and \"SPMDShardToFullShape\" (a manual region's "
           "boundaries), its own fused attention (\"strata.attention\", "
           "\"strata.attention_grad\"), XLA:CPU's \"TopK\" and XLA's client-library calls "
           "({}); other library calls are not implemented",
           target, LibraryCallTargets());
  }
  if (operands.size() != 1) {
    FailAt(at, "custom-call target '{}' takes one operand, found {}", target, operands.size());
  }
}

// "x", "%x", or XLA's "f32[2,3]{1,0} %x".
OperandRef Parser::ParseOperand() {
  OperandRef ref;
  Token t = Peek();
  if (t.Is('(') || (t.kind == TokenKind::kName && Peek(1).Is('['))) {
    default_layouts = true;
    last_layout.reset();
    ref.declared = ParseShape(0, false);
    ref.default_layout = default_layouts;
    if (!default_layouts) ref.layout = last_layout;
  }
  ref.at = ExpectName("an operand name");
  ref.name = StripPercent(ref.at.text);
  return ref;
}

void Parser::ParseAttributes(Instruction& inst, const Token& opcode_token,
                             CustomCallText* custom_call) {
  std::unordered_set<std::string_view> seen;
  while (TakeIf(',')) {
    Token key = ExpectName("an attribute name after ','");
    if (!seen.insert(key.text).second) FailAt(key, "duplicate attribute '{}'", key.text);
    Expect('=', fmt::format("after attribute '{}'", key.text));
    if (key.text == "sharding") {
      inst.sharding = ParseSharding();
      continue;
    }
    if (custom_call && (key.text == "custom_call_target" || key.text == "backend_config")) {
      Token value = Take();
      if (value.kind != TokenKind::kString) {
        FailAt(value, "expected a string after '{}=', found {}", key.text, Describe(value));
      }
      std::string text(value.text.substr(1, value.text.size() - 2));
      (key.text == "custom_call_target" ? custom_call->target : custom_call->backend_config) =
          std::move(text);
      continue;
    }
    if (custom_call) {
      // How XLA calls the function (api_version, operand layouts, ...):
      // nothing for the targets strata runs, and the error for any other
      // target is about the target, not its options.
      SkipValue(key);
      continue;
    }
    const AttributeRule* rule = nullptr;
    bool known = false;
    for (const AttributeRule& r : kAttributeRules) {
      known = known || r.key == key.text;
      if (r.key == key.text && r.opcode == inst.opcode()) rule = &r;
    }
    if (!rule && std::find(std::begin(kSkippedAttributes), std::end(kSkippedAttributes),
                           key.text) != std::end(kSkippedAttributes)) {
      SkipValue(key);
      continue;
    }
    if (!rule && known) {
      FailAt(key, "attribute '{}' does not apply to {}", key.text, OpcodeName(inst.opcode()));
    }
    if (!rule) FailAt(key, "unknown attribute '{}'", key.text);
    rule->parse(*this, inst);
  }
  for (const AttributeRule& r : kAttributeRules) {
    if (r.opcode == inst.opcode() && r.required && !seen.count(r.key)) {
      FailAt(opcode_token, "{} is missing attribute '{}'", OpcodeName(inst.opcode()), r.key);
    }
  }
  if (inst.opcode() == Opcode::kRngBitGenerator && inst.rng_algorithm.empty()) {
    inst.rng_algorithm = "rng_default";
  }
}

}  // namespace text_parser

std::unique_ptr<Module> ParseModule(std::string_view text) {
  text_parser::Parser parser(text);
  return parser.ParseModule();
}

}  // namespace strata::hlo
