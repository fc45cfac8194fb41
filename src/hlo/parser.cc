// Parses XLA's HLO text format: the canonical strata form the printer writes
// and the richer form XLA itself prints ('%' names, operand shapes, layouts,
// metadata, module attributes). Every error starts with "line L, column C: ".
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "strata/core/error.h"
#include "strata/hlo/attention.h"
#include "strata/hlo/convolution.h"
#include "strata/hlo/shape_inference.h"
#include "strata/hlo/sharding.h"
#include "strata/hlo/text.h"
#include "strata/hlo/verifier.h"

namespace strata::hlo {
namespace {

// Tuple shapes and constants nest by recursion; deeper input is rejected.
constexpr int64_t kMaxNesting = 256;

// Attributes XLA prints that carry nothing this IR models; their values are
// skipped (balanced over (), {}, [] and strings).
constexpr std::string_view kSkippedAttributes[] = {
    "metadata", "frontend_attributes", "backend_config", "origin", "statistics",
    "control-predecessors", "comparison_type", "type", "operand_precision", "precision_config",
    "indices_are_sorted", "unique_indices", "largest", "parameter_replication",
    // A composite call is a call of its decomposition; its name, version and
    // attributes are in frontend_attributes.
    "is_composite"};

enum class TokenKind { kName, kNumber, kString, kArrow, kPunct, kEnd };

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string_view text;
  int64_t line = 1, column = 1;
  size_t offset = 0;  // of the first byte in the input

  bool Is(char c) const { return kind == TokenKind::kPunct && text[0] == c; }
  bool IsName(std::string_view name) const { return kind == TokenKind::kName && text == name; }
  bool IsOpener() const { return Is('{') || Is('(') || Is('['); }
  bool IsCloser() const { return Is('}') || Is(')') || Is(']'); }
};

[[noreturn]] void FailAt(int64_t line, int64_t column, std::string_view message) {
  throw Error(fmt::format("line {}, column {}: {}", line, column, message));
}

template <typename... Args>
[[noreturn]] void FailAt(const Token& at, fmt::format_string<Args...> format, Args&&... args) {
  FailAt(at.line, at.column, fmt::format(format, std::forward<Args>(args)...));
}

// How a token appears in messages: quoted, shortened, non-printable bytes escaped.
std::string Describe(const Token& t) {
  if (t.kind == TokenKind::kEnd) return "end of input";
  std::string out = "'";
  size_t n = std::min<size_t>(t.text.size(), 40);
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(t.text[i]);
    out +=
        c >= 0x20 && c < 0x7f ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02x}", c);
  }
  return out + (t.text.size() > n ? "...'" : "'");
}

bool IsLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return IsLetter(c) || c == '_'; }
bool IsNameChar(char c) { return IsLetter(c) || IsDigit(c) || c == '_' || c == '.' || c == '-'; }

std::string_view StripPercent(std::string_view name) {
  if (!name.empty() && name[0] == '%') name.remove_prefix(1);
  return name;
}

// Splits the input into names (f32, add.1, %x, get-tuple-element), numbers
// (words starting with a digit or '-': 12, -1.5e-05, -inf, 0_1x2_3_1),
// strings, '->' and single punctuation characters. Skips whitespace and
// comments.
struct Lexer {
  std::string_view text;
  size_t pos = 0;
  int64_t line = 1, column = 1;

  char At(size_t i) const { return i < text.size() ? text[i] : '\0'; }
  void Advance() {
    if (text[pos] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    ++pos;
  }

  void SkipSpaceAndComments() {
    while (pos < text.size()) {
      char c = text[pos];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
        Advance();
      } else if (c == '/' && At(pos + 1) == '/') {
        while (pos < text.size() && text[pos] != '\n') Advance();
      } else if (c == '/' && At(pos + 1) == '*') {
        int64_t start_line = line, start_column = column;
        Advance();
        Advance();
        while (pos < text.size() && !(text[pos] == '*' && At(pos + 1) == '/')) Advance();
        if (pos >= text.size()) {
          FailAt(start_line, start_column, "unterminated comment: '/*' has no closing '*/'");
        }
        Advance();
        Advance();
      } else {
        break;
      }
    }
  }

  Token Next() {
    SkipSpaceAndComments();
    Token t;
    t.line = line;
    t.column = column;
    t.offset = pos;
    if (pos >= text.size()) return t;
    char c = text[pos];
    char next = At(pos + 1);
    if (IsNameStart(c) || (c == '%' && IsNameStart(next))) {
      t.kind = TokenKind::kName;
      Advance();
      // '-' belongs to names (bitcast-convert) unless it starts '->'.
      while (pos < text.size() && IsNameChar(text[pos]) &&
             !(text[pos] == '-' && At(pos + 1) == '>')) {
        Advance();
      }
    } else if (IsDigit(c) || (c == '-' && (IsDigit(next) || IsLetter(next) || next == '.')) ||
               (c == '.' && IsDigit(next))) {
      t.kind = TokenKind::kNumber;
      Advance();
      while (pos < text.size()) {
        char d = text[pos];
        char prev = text[pos - 1];
        bool sign = (d == '-' || d == '+') &&
                    (prev == 'e' || prev == 'E' || prev == '_' || prev == 'x') &&
                    At(pos + 1) != '>';
        if (!(IsLetter(d) || IsDigit(d) || d == '_' || d == '.' || sign)) break;
        Advance();
      }
    } else if (c == '"') {
      t.kind = TokenKind::kString;
      Advance();
      while (true) {
        if (pos >= text.size()) FailAt(t.line, t.column, "unterminated string");
        char d = text[pos];
        Advance();
        if (d == '"') break;
        if (d == '\\' && pos < text.size()) Advance();  // escaped character
      }
    } else if (c == '-' && next == '>') {
      t.kind = TokenKind::kArrow;
      Advance();
      Advance();
    } else {
      t.kind = TokenKind::kPunct;
      Advance();
    }
    t.text = text.substr(t.offset, pos - t.offset);
    return t;
  }
};

// An operand as written: its name, where, and the shape written before it.
struct OperandRef {
  std::string_view name;
  Token at;
  std::optional<Shape> declared;
  bool default_layout = true;  // of the declared shape
};

// An instruction whose operands are resolved once its computation is read.
struct PendingInstruction {
  Instruction* instruction;
  Token name;
  std::vector<OperandRef> operands;
};

struct PendingComputation {
  std::unique_ptr<Computation> computation;
  Token name;
  std::vector<PendingInstruction> instructions;
  std::unordered_map<std::string_view, size_t> index_of;  // instruction name -> index
  std::unordered_map<int64_t, std::string_view> parameter_names;
  std::unordered_set<std::string_view> non_default_layout;  // instructions declared so
  Instruction* root = nullptr;
};

struct Parser {
  Lexer lexer;
  std::deque<Token> lookahead;
  Module* module = nullptr;
  // Whether every layout of the shapes ParseShape read since this was last
  // set held the default (row-major, {rank-1, ..., 0}) order.
  bool default_layouts = true;

  explicit Parser(std::string_view text) : lexer{text} {}

  Token Peek(size_t k = 0) {
    while (lookahead.size() <= k) lookahead.push_back(lexer.Next());
    return lookahead[k];
  }
  Token Take() {
    Token t = Peek();
    lookahead.pop_front();
    return t;
  }
  bool TakeIf(char c) {
    if (!Peek().Is(c)) return false;
    Take();
    return true;
  }
  Token Expect(char c, std::string_view context) {
    Token t = Take();
    if (!t.Is(c)) FailAt(t, "expected '{}' {}, found {}", c, context, Describe(t));
    return t;
  }
  Token ExpectName(std::string_view what) {
    Token t = Take();
    if (t.kind != TokenKind::kName) FailAt(t, "expected {}, found {}", what, Describe(t));
    return t;
  }

  std::unique_ptr<Module> ParseModule();
  void SkipKeyValues();
  Token SkipBalanced();
  void SkipValue(const Token& key);
  void ParseComputation(Computation** entry);
  void ParseSignature();
  void FinishComputation(PendingComputation& pc, const Token& close);
  void ParseInstruction(PendingComputation& pc);
  OperandRef ParseOperand();
  // A custom-call's target and backend_config, as written.
  struct CustomCallText {
    std::string target, backend_config;
  };
  // `custom_call` is set for a custom-call, which reads them.
  void ParseAttributes(Instruction& inst, const Token& opcode_token,
                       CustomCallText* custom_call = nullptr);
  void CheckCustomCall(const CustomCallText& call, const std::vector<OperandRef>& operands,
                       const Token& at);
  Shape ParseShape(int64_t depth, bool body_may_follow);
  bool IsDefaultLayout(int64_t rank);
  int64_t ParseInteger(std::string_view what);
  std::vector<int64_t> ParseIntegerList();
  std::vector<SliceRange> ParseSlice();
  std::vector<PadRange> ParsePadding();
  Comparison ParseDirection();
  ComparisonType ParseComparisonType();
  std::string ParseRngAlgorithm();
  std::string ParseFusionKind();
  std::vector<WindowDim> ParseWindow();
  ConvolutionDims ParseDimLabels();
  void CheckBitcast(const PendingComputation& pc, const Shape& shape, bool default_layout,
                    const std::vector<OperandRef>& operands, const Token& at);
  std::string ParseSharding();
  ReplicaGroups ParseReplicaGroups();
  SourceTargetPairs ParseSourceTargetPairs();
  bool ParseBool();
  Computation* ParseCalledComputation();
  std::vector<Computation*> ParseCalledList();
  Literal ParseLiteral(const Shape& shape, const Token& shape_token);
  void ParseLiteralLevel(const Shape& shape, int64_t level, std::vector<Token>& values);
  void TakeElement(const Shape& shape, std::vector<Token>& values);
};

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
    COLLECTIVE_RULES(kAllReduce),
    {Opcode::kAllReduce, "to_apply", true, CALLED_INTO(0)},
    COLLECTIVE_RULES(kAllGather),
    {Opcode::kAllGather, "dimensions", true, INTEGER_LIST_INTO(dimensions)},
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
  Computation* entry = nullptr;
  do {
    ParseComputation(&entry);
  } while (Peek().kind != TokenKind::kEnd);
  result->set_entry(entry ? entry : result->computations().back().get());
  Verify(*result);
  return result;
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
  Shape shape = ParseShape(0, false);
  if (!default_layouts) pc.non_default_layout.insert(name);
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
  if (bitcast) CheckBitcast(pc, shape, shape_default_layout, pending.operands, opcode_token);
  CustomCallText call;
  ParseAttributes(*inst, opcode_token, custom_call ? &call : nullptr);
  if (custom_call) {
    CheckCustomCall(call, pending.operands, opcode_token);
    if (call.target != "Sharding") {  // a manual-sharding boundary or fused attention
      auto op =
          std::make_unique<Instruction>(Opcode::kCustomCall, shape, std::vector<Instruction*>{});
      op->set_name(std::string(name));
      op->sharding = std::move(inst->sharding);
      op->custom_call_target = call.target;
      if (IsAttentionTarget(call.target)) op->backend_config = call.backend_config;
      inst = std::move(op);
    }
  }

  pending.instruction = pc.computation->AddInstruction(std::move(inst));
  pc.index_of[name] = pc.instructions.size();
  if (is_root) pc.root = pending.instruction;
  pc.instructions.push_back(std::move(pending));
}

// A bitcast strata reads as a reshape: one array operand of the same
// element type, every layout involved the default one.
void Parser::CheckBitcast(const PendingComputation& pc, const Shape& shape, bool default_layout,
                          const std::vector<OperandRef>& operands, const Token& at) {
  if (operands.size() != 1) FailAt(at, "bitcast takes one operand, found {}", operands.size());
  const OperandRef& operand = operands[0];
  const bool operand_default = operand.default_layout && !pc.non_default_layout.count(operand.name);
  if (!default_layout || !operand_default) {
    FailAt(at,
           "bitcast with a layout other than the default (row-major) one: strata stores arrays "
           "row-major and reads a bitcast as a reshape");
  }
  if (operand.declared && operand.declared->is_array() && shape.is_array() &&
      operand.declared->dtype() != shape.dtype()) {
    FailAt(at, "bitcast from {} to {} changes the element type: that is bitcast-convert",
           operand.declared->ToString(), shape.ToString());
  }
}

void Parser::CheckCustomCall(const CustomCallText& call, const std::vector<OperandRef>& operands,
                             const Token& at) {
  const std::string& target = call.target;
  if (target.empty()) FailAt(at, "custom-call is missing attribute 'custom_call_target'");
  if (IsAttentionTarget(target)) {
    const size_t expected = target == kAttentionTarget ? 3 : 6;
    if (operands.size() != expected) {
      FailAt(at, "custom-call target '{}' takes {} operands, found {}", target, expected,
             operands.size());
    }
    try {
      ParseAttentionConfig(call.backend_config);
    } catch (const Error& e) {
      FailAt(at, "{}", e.what());
    }
    return;
  }
  if (target != "Sharding" && target != "SPMDFullToShardShape" &&
      target != "SPMDShardToFullShape") {
    FailAt(at,
           "custom-call target '{}' is not supported: strata runs the targets JAX's sharding "
           "emits: \"Sharding\" (an annotation, read as a copy with its sharding), "
           "\"SPMDFullToShardShape\" and \"SPMDShardToFullShape\" (a manual region's "
           "boundaries), and its own fused attention (\"strata.attention\", "
           "\"strata.attention_grad\"); library calls are not implemented",
           target);
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
    ref.declared = ParseShape(0, false);
    ref.default_layout = default_layouts;
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

// "f32[2,3]", "f32[2,3]{1,0}", "(f32[2], (s32[], pred[]))". A layout is
// skipped; after a signature's result a '{' may instead open the body.
Shape Parser::ParseShape(int64_t depth, bool body_may_follow) {
  Token t = Take();
  if (depth > kMaxNesting) FailAt(t, "tuple shapes nested deeper than {} levels", kMaxNesting);
  if (t.Is('(')) {
    std::vector<Shape> elements;
    if (!Peek().Is(')')) {
      do {
        elements.push_back(ParseShape(depth + 1, false));
      } while (TakeIf(','));
    }
    Expect(')', "to close the tuple shape");
    return Shape::Tuple(std::move(elements));
  }
  if (t.kind != TokenKind::kName)
    FailAt(t, "expected a shape such as f32[2,3], found {}", Describe(t));
  std::optional<DType> dtype = DTypeFromName(t.text);
  if (!dtype) FailAt(t, "unknown element type '{}'", t.text);
  Expect('[', fmt::format("after element type '{}'", t.text));
  std::vector<int64_t> dims;
  int64_t bytes = DTypeSize(*dtype);
  if (!Peek().Is(']')) {
    do {
      Token d = Peek();
      if (d.Is('<') || d.Is('?')) {
        FailAt(d,
               "dynamic dimensions ('<=N' or '?') are not supported: strata compiles static "
               "shapes; pad to the bound and pass the size as a value");
      }
      int64_t size = ParseInteger("a dimension size");
      if (size < 0) FailAt(d, "dimension size must be non-negative, found {}", size);
      if (__builtin_mul_overflow(bytes, size, &bytes)) {
        FailAt(d, "shape is too large: its size in bytes does not fit in 64 bits");
      }
      dims.push_back(size);
    } while (TakeIf(','));
  }
  Expect(']', "after dimension sizes");
  if (*dtype == DType::kToken && !dims.empty()) FailAt(t, "a token has no dimensions: token[]");
  if (Peek().Is('{')) {
    // A layout starts with a number ({1,0}, {0:T(8)}) or is empty ({}); a
    // body starts with an instruction name or is empty and then nothing follows.
    bool is_layout = !body_may_follow || Peek(1).kind == TokenKind::kNumber ||
                     (Peek(1).Is('}') && Peek(2).Is('{'));
    if (is_layout) {
      default_layouts = default_layouts && IsDefaultLayout(static_cast<int64_t>(dims.size()));
      SkipBalanced();
    }
  }
  return Shape(*dtype, std::move(dims));
}

// Whether the layout at Peek() ('{' ...) is {rank-1, ..., 1, 0} with no
// tiling or memory space: the row-major order strata stores every array in.
bool Parser::IsDefaultLayout(int64_t rank) {
  size_t k = 1;
  for (int64_t d = rank - 1; d >= 0; --d) {
    Token n = Peek(k++);
    if (n.kind != TokenKind::kNumber || n.text != std::to_string(d)) return false;
    if (d > 0 && !Peek(k++).Is(',')) return false;
  }
  return Peek(k).Is('}');
}

int64_t Parser::ParseInteger(std::string_view what) {
  Token t = Take();
  int64_t value = 0;
  auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), value);
  if (t.kind != TokenKind::kNumber || ec == std::errc::invalid_argument ||
      end != t.text.data() + t.text.size()) {
    FailAt(t, "expected {}, found {}", what, Describe(t));
  }
  if (ec != std::errc()) FailAt(t, "integer {} does not fit in 64 bits", t.text);
  return value;
}

std::vector<int64_t> Parser::ParseIntegerList() {
  Expect('{', "to start a list of integers");
  std::vector<int64_t> values;
  if (!Peek().Is('}')) {
    do {
      values.push_back(ParseInteger("an integer"));
    } while (TakeIf(','));
  }
  Expect('}', "to close the list of integers");
  return values;
}

// {[0:2], [1:7:2]}
std::vector<SliceRange> Parser::ParseSlice() {
  Expect('{', "to start slice ranges");
  std::vector<SliceRange> ranges;
  if (!Peek().Is('}')) {
    do {
      Expect('[', "to start a slice range [start:limit] or [start:limit:stride]");
      SliceRange r;
      r.start = ParseInteger("a slice start");
      Expect(':', "after the slice start");
      r.limit = ParseInteger("a slice limit");
      if (TakeIf(':')) r.stride = ParseInteger("a slice stride");
      Expect(']', "to close the slice range");
      ranges.push_back(r);
    } while (TakeIf(','));
  }
  Expect('}', "to close the slice ranges");
  return ranges;
}

// low_high[_interior] per dimension joined by 'x' (0_1x2_3_1), or {} for rank 0.
std::vector<PadRange> Parser::ParsePadding() {
  if (TakeIf('{')) {
    Expect('}', "after '{' (only rank-0 padding is written {})");
    return {};
  }
  Token t = Take();
  auto fail = [&]() {
    FailAt(t,
           "expected padding low_high[_interior] per dimension joined by 'x' (e.g. 0_1x2_3_1), "
           "found {}",
           Describe(t));
  };
  if (t.kind != TokenKind::kNumber) fail();
  std::vector<PadRange> padding;
  std::string_view rest = t.text;
  while (true) {
    std::string_view dim = rest.substr(0, rest.find('x'));
    std::vector<int64_t> parts;
    while (true) {
      std::string_view part = dim.substr(0, dim.find('_'));
      int64_t v = 0;
      auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
      if (ec != std::errc() || end != part.data() + part.size() || parts.size() == 3) fail();
      parts.push_back(v);
      if (part.size() == dim.size()) break;
      dim.remove_prefix(part.size() + 1);
    }
    if (parts.size() < 2) fail();
    padding.push_back({parts[0], parts[1], parts.size() == 3 ? parts[2] : 0});
    size_t x = rest.find('x');
    if (x == std::string_view::npos) break;
    rest.remove_prefix(x + 1);
  }
  return padding;
}

Comparison Parser::ParseDirection() {
  Token t = Take();
  std::optional<Comparison> direction;
  if (t.kind == TokenKind::kName) direction = ComparisonFromName(t.text);
  if (!direction) {
    FailAt(t, "expected a comparison direction (EQ, NE, LT, LE, GT or GE), found {}", Describe(t));
  }
  return *direction;
}

// XLA's compare type: FLOAT, SIGNED and UNSIGNED name the element type's own
// order; TOTALORDER orders floats totally (NaNs and signed zeros included).
ComparisonType Parser::ParseComparisonType() {
  Token t = Take();
  if (t.IsName("TOTALORDER")) return ComparisonType::kTotalOrder;
  if (t.IsName("FLOAT") || t.IsName("SIGNED") || t.IsName("UNSIGNED")) {
    return ComparisonType::kDefault;
  }
  FailAt(t, "expected a comparison type (FLOAT, TOTALORDER, SIGNED or UNSIGNED), found {}",
         Describe(t));
}

std::string Parser::ParseRngAlgorithm() {
  Token t = Take();
  if (!t.IsName("rng_philox") && !t.IsName("rng_default")) {
    FailAt(t, "expected rng algorithm rng_philox or rng_default, found {}", Describe(t));
  }
  return std::string(t.text);
}

// XLA's fusion kinds. strata makes kLoop fusions (kept as ""); the runtime
// runs a fusion its loop cannot, any kind, as a call of the computation.
std::string Parser::ParseFusionKind() {
  Token t = Take();
  for (const char* kind : {"kInput", "kOutput", "kCustom"}) {
    if (t.IsName(kind)) return kind;
  }
  if (!t.IsName("kLoop")) {
    FailAt(t, "expected fusion kind kLoop, kInput, kOutput or kCustom, found {}", Describe(t));
  }
  return "";
}

// {size=3x3 stride=2x2 pad=1_1x1_1 ...}: hlo/convolution.h reads each field.
std::vector<WindowDim> Parser::ParseWindow() {
  Expect('{', "to start a window");
  std::vector<WindowDim> window;
  while (!TakeIf('}')) {
    Token key = ExpectName("a window field (size, stride, pad, ...) or '}'");
    Expect('=', fmt::format("after window field '{}'", key.text));
    Token value = Take();
    if (value.kind != TokenKind::kNumber) {
      FailAt(value, "expected dims joined by 'x' after '{}=', found {}", key.text, Describe(value));
    }
    try {
      SetWindowField(window, key.text, value.text);
    } catch (const Error& e) {
      FailAt(key, "{}", e.what());
    }
  }
  return window;
}

// b01f_01io->b01f
ConvolutionDims Parser::ParseDimLabels() {
  Token labels = Take();
  auto fail = [&]() {
    FailAt(labels, "expected dim_labels like b01f_01io->b01f, found {}", Describe(labels));
  };
  // A part may start with a spatial dim ("0bf1"), which lexes as a number.
  auto is_word = [](const Token& t) {
    return t.kind == TokenKind::kName || t.kind == TokenKind::kNumber;
  };
  if (!is_word(labels)) fail();
  const size_t split = labels.text.find('_');
  if (split == std::string_view::npos || Take().kind != TokenKind::kArrow) fail();
  Token output = Take();
  if (!is_word(output)) fail();
  try {
    return hlo::ParseDimLabels(labels.text.substr(0, split), labels.text.substr(split + 1),
                               output.text);
  } catch (const Error& e) {
    FailAt(labels, "{}", e.what());
  }
}

// Checked by hlo::Sharding and kept in its canonical text, braces
// included: "{devices=[2,1]0,1}".
std::string Parser::ParseSharding() {
  Token open = Peek();
  if (!open.Is('{')) FailAt(open, "expected '{{' to start a sharding, found {}", Describe(open));
  Token close = SkipBalanced();
  std::string_view text = lexer.text.substr(open.offset, close.offset + 1 - open.offset);
  try {
    return Sharding::Parse(text).ToText();
  } catch (const Error& e) {
    FailAt(open, "{}", e.what());
  }
}

// {{0,1},{2,3}}, {}, or XLA's iota form [groups,size]<=[dims]T(perm): the
// ids 0..n-1 laid out as `dims`, transposed by `perm`, read row-major into
// groups of `size`.
ReplicaGroups Parser::ParseReplicaGroups() {
  ReplicaGroups groups;
  if (Peek().Is('[')) {
    Token at = Peek();
    Take();
    std::vector<int64_t> shape;
    do {
      shape.push_back(ParseInteger("a replica group dimension"));
    } while (TakeIf(','));
    Expect(']', "after the replica groups' shape");
    Expect('<', "in '<=[...]' (iota replica groups)");
    Expect('=', "in '<=[...]' (iota replica groups)");
    Expect('[', "to start the iota dimensions");
    std::vector<int64_t> dims;
    do {
      dims.push_back(ParseInteger("an iota dimension"));
    } while (TakeIf(','));
    Expect(']', "after the iota dimensions");
    std::vector<int64_t> perm(dims.size());
    for (size_t k = 0; k < perm.size(); ++k) perm[k] = static_cast<int64_t>(k);
    if (Peek().IsName("T")) {
      Take();
      Expect('(', "after 'T'");
      perm.clear();
      do {
        perm.push_back(ParseInteger("a transpose dimension"));
      } while (TakeIf(','));
      Expect(')', "after the transpose permutation");
    }
    int64_t total = 1, grouped = 1;
    for (int64_t d : dims) {
      if (d < 1 || __builtin_mul_overflow(total, d, &total) || total > (1 << 24))
        FailAt(at, "iota replica groups: bad dimensions");
    }
    for (int64_t d : shape) {
      if (d < 1 || __builtin_mul_overflow(grouped, d, &grouped))
        FailAt(at, "iota replica groups: bad shape");
    }
    std::vector<int64_t> sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    bool is_perm = sorted.size() == dims.size();
    for (size_t k = 0; is_perm && k < sorted.size(); ++k) is_perm = sorted[k] == (int64_t)k;
    if (!is_perm) FailAt(at, "iota replica groups: T(...) is not a permutation of the iota dims");
    if (shape.size() != 2 || grouped != total) {
      FailAt(at, "iota replica groups: shape [groups,size] must hold the {} ids", total);
    }
    // Element at transposed position (row-major over permuted dims) is the id
    // whose original index is that position mapped back through perm.
    std::vector<int64_t> permuted(dims.size()), strides(dims.size(), 1);
    for (size_t k = 0; k < dims.size(); ++k) permuted[k] = dims[perm[k]];
    for (int64_t k = static_cast<int64_t>(dims.size()) - 2; k >= 0; --k)
      strides[k] = strides[k + 1] * dims[k + 1];
    std::vector<int64_t> ids, idx(dims.size(), 0);
    for (int64_t n = 0; n < total; ++n) {
      int64_t id = 0;
      for (size_t k = 0; k < dims.size(); ++k) id += idx[k] * strides[perm[k]];
      ids.push_back(id);
      for (int64_t k = static_cast<int64_t>(idx.size()) - 1; k >= 0; --k) {
        if (++idx[k] < permuted[k]) break;
        idx[k] = 0;
      }
    }
    for (int64_t g = 0; g < shape[0]; ++g)
      groups.emplace_back(ids.begin() + g * shape[1], ids.begin() + (g + 1) * shape[1]);
    return groups;
  }
  Expect('{', "to start replica_groups");
  if (!Peek().Is('}')) {
    do {
      groups.push_back(ParseIntegerList());
    } while (TakeIf(','));
  }
  Expect('}', "to close replica_groups");
  return groups;
}

// {{0,1},{1,0}}
SourceTargetPairs Parser::ParseSourceTargetPairs() {
  SourceTargetPairs pairs;
  Expect('{', "to start source_target_pairs");
  if (!Peek().Is('}')) {
    do {
      Token at = Peek();
      std::vector<int64_t> pair = ParseIntegerList();
      if (pair.size() != 2) FailAt(at, "a source-target pair has two ids, found {}", pair.size());
      pairs.emplace_back(pair[0], pair[1]);
    } while (TakeIf(','));
  }
  Expect('}', "to close source_target_pairs");
  return pairs;
}

bool Parser::ParseBool() {
  Token t = Take();
  if (t.IsName("true")) return true;
  if (t.IsName("false")) return false;
  FailAt(t, "expected true or false, found {}", Describe(t));
}

// "{%a, %b, %c}": a conditional's branch computations.
std::vector<Computation*> Parser::ParseCalledList() {
  Expect('{', "before the branch computations");
  std::vector<Computation*> called;
  if (!Peek().Is('}')) {
    called.push_back(ParseCalledComputation());
    while (TakeIf(',')) called.push_back(ParseCalledComputation());
  }
  Expect('}', "after the branch computations");
  return called;
}

Computation* Parser::ParseCalledComputation() {
  Token t = ExpectName("a computation name");
  std::string_view name = StripPercent(t.text);
  Computation* c = module->FindComputation(name);
  if (!c) {
    FailAt(t, "undefined computation '{}' (a called computation must be defined before its caller)",
           name);
  }
  return c;
}

// Stores one constant element from its text, refusing values the dtype cannot hold.
void SetElement(Literal& literal, int64_t i, const Token& t) {
  DType dtype = literal.shape().dtype();
  std::string_view s = t.text;
  const char* first = s.data();
  const char* last = s.data() + s.size();
  auto expected = [&]() {
    FailAt(t, "expected a {} value, found {}", DTypeName(dtype), Describe(t));
  };
  auto out_of_range = [&]() { FailAt(t, "value {} is out of range for {}", s, DTypeName(dtype)); };
  if (t.kind != TokenKind::kName && t.kind != TokenKind::kNumber) expected();
  if (dtype == DType::kPred) {
    if (s == "true" || s == "1") return literal.SetFromDouble(i, 1);
    if (s == "false" || s == "0") return literal.SetFromDouble(i, 0);
    expected();
  }
  if (dtype == DType::kU64) {
    uint64_t v = 0;
    if (t.kind == TokenKind::kNumber && s[0] == '-' && s.size() > 1 && IsDigit(s[1]))
      out_of_range();
    auto [end, ec] = std::from_chars(first, last, v);
    if (t.kind != TokenKind::kNumber || ec == std::errc::invalid_argument || end != last)
      expected();
    if (ec != std::errc()) out_of_range();
    std::memcpy(literal.mutable_data() + i * sizeof v, &v, sizeof v);
    return;
  }
  if (IsInteger(dtype)) {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(first, last, v);
    if (t.kind != TokenKind::kNumber || ec == std::errc::invalid_argument || end != last)
      expected();
    if (ec != std::errc()) out_of_range();
    if (dtype == DType::kS64) {
      std::memcpy(literal.mutable_data() + i * sizeof v, &v, sizeof v);
      return;
    }
    auto [lo, hi] = dtype == DType::kS8    ? std::pair<int64_t, int64_t>{INT8_MIN, INT8_MAX}
                    : dtype == DType::kU8  ? std::pair<int64_t, int64_t>{0, UINT8_MAX}
                    : dtype == DType::kS16 ? std::pair<int64_t, int64_t>{INT16_MIN, INT16_MAX}
                    : dtype == DType::kU16 ? std::pair<int64_t, int64_t>{0, UINT16_MAX}
                    : dtype == DType::kS32 ? std::pair<int64_t, int64_t>{INT32_MIN, INT32_MAX}
                                           : std::pair<int64_t, int64_t>{0, UINT32_MAX};
    if (v < lo || v > hi) out_of_range();
    return literal.SetFromDouble(i, static_cast<double>(v));
  }
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (s == "inf") return literal.SetFromDouble(i, kInf);
  if (s == "-inf") return literal.SetFromDouble(i, -kInf);
  if (s == "nan" || s == "-nan") return literal.SetFromDouble(i, std::nan(""));
  if (t.kind != TokenKind::kNumber) expected();
  // f32 and narrower parse as float directly so no double rounding occurs.
  double value = 0;
  std::from_chars_result result;
  if (dtype == DType::kF64) {
    result = std::from_chars(first, last, value);
  } else {
    float f = 0;
    result = std::from_chars(first, last, f);
    value = f;
  }
  auto [end, ec] = result;
  if (ec == std::errc::invalid_argument || end != last) expected();
  if (ec == std::errc::result_out_of_range) {
    // Underflow rounds to zero; overflow is an error.
    double wide = std::strtod(std::string(s).c_str(), nullptr);
    double max = dtype == DType::kF64 ? std::numeric_limits<double>::max()
                                      : std::numeric_limits<float>::max();
    if (!(std::fabs(wide) <= max)) out_of_range();
    value = dtype == DType::kF64 ? wide : static_cast<float>(wide);
  }
  if (dtype == DType::kF16 && std::isinf(HalfToFloat(FloatToHalf(static_cast<float>(value))))) {
    out_of_range();
  }
  if (dtype == DType::kBF16 &&
      std::isinf(BFloat16ToFloat(FloatToBFloat16(static_cast<float>(value))))) {
    out_of_range();
  }
  literal.SetFromDouble(i, value);
}

// A complex element "(re, im)": each part is stored as a scalar of the part
// type first, so range and syntax errors read as they do for floats.
void SetComplexElement(Literal& literal, int64_t i, const Token& real, const Token& imaginary) {
  Literal part(Shape::Scalar(ComplexPartType(literal.shape().dtype())));
  SetElement(part, 0, real);
  const double re = part.GetAsDouble(0);
  SetElement(part, 0, imaginary);
  literal.SetComplex(i, re, part.GetAsDouble(0));
}

// One element's tokens: one, or the two parts of a complex "(re, im)".
void Parser::TakeElement(const Shape& shape, std::vector<Token>& values) {
  if (!IsComplex(shape.dtype())) {
    values.push_back(Take());
    return;
  }
  Expect('(', fmt::format("to start a {} value (real, imaginary)", DTypeName(shape.dtype())));
  values.push_back(Take());
  Expect(',', "between the real and imaginary parts");
  values.push_back(Take());
  Expect(')', "after the imaginary part");
}

Literal Parser::ParseLiteral(const Shape& shape, const Token& shape_token) {
  if (shape.is_tuple()) {
    FailAt(shape_token, "tuple-shaped constants are not supported, found {}", shape.ToString());
  }
  if (shape.dtype() == DType::kToken) {
    FailAt(shape_token, "a token has no constant value (after-all makes one)");
  }
  if (shape.rank() > kMaxNesting) {
    FailAt(shape_token, "constants of rank above {} are not supported", kMaxNesting);
  }
  std::vector<Token> values;
  if (shape.rank() == 0) {
    TakeElement(shape, values);
  } else {
    ParseLiteralLevel(shape, 0, values);
  }
  // Every level matched its dimension, so the element count is that of the text.
  Literal literal(shape);
  if (IsComplex(shape.dtype())) {
    for (size_t i = 0; i < values.size(); i += 2)
      SetComplexElement(literal, i / 2, values[i], values[i + 1]);
  } else {
    for (size_t i = 0; i < values.size(); ++i) SetElement(literal, i, values[i]);
  }
  return literal;
}

// "{v, v}" at the innermost level, "{ {..}, {..} }" above it.
void Parser::ParseLiteralLevel(const Shape& shape, int64_t level, std::vector<Token>& values) {
  Expect('{', fmt::format("to start dimension {} of the {} constant", level, shape.ToString()));
  if (Peek().Is('.')) {
    FailAt(Peek(),
           "constant values were elided ('{{...}}'); print the module with large "
           "constants included");
  }
  int64_t count = 0;
  if (!Peek().Is('}')) {
    do {
      if (level + 1 < shape.rank()) {
        ParseLiteralLevel(shape, level + 1, values);
      } else {
        TakeElement(shape, values);
      }
      ++count;
    } while (TakeIf(','));
  }
  Token close = Take();
  if (!close.Is('}')) FailAt(close, "expected ',' or '}}' in constant, found {}", Describe(close));
  if (count != shape.dim(level)) {
    FailAt(close, "constant has {} values in dimension {} but shape {} needs {}", count, level,
           shape.ToString(), shape.dim(level));
  }
}

}  // namespace

std::unique_ptr<Module> ParseModule(std::string_view text) {
  Parser parser(text);
  return parser.ParseModule();
}

}  // namespace strata::hlo
