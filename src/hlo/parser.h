// The HLO text parser's pieces, shared by parser.cc (modules, computations,
// instructions, attributes) and parser_values.cc (shapes, integers, windows,
// shardings, replica groups, literals). Private to src/hlo.
#pragma once

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
#include "strata/hlo/library_calls.h"
#include "strata/hlo/shape_inference.h"
#include "strata/hlo/sharding.h"
#include "strata/hlo/text.h"
#include "strata/hlo/verifier.h"

namespace strata::hlo::text_parser {

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

[[noreturn]] inline void FailAt(int64_t line, int64_t column, std::string_view message) {
  throw Error(fmt::format("line {}, column {}: {}", line, column, message));
}

template <typename... Args>
[[noreturn]] void FailAt(const Token& at, fmt::format_string<Args...> format, Args&&... args) {
  FailAt(at.line, at.column, fmt::format(format, std::forward<Args>(args)...));
}

// How a token appears in messages: quoted, shortened, non-printable bytes escaped.
inline std::string Describe(const Token& t) {
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

inline bool IsLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }
inline bool IsNameStart(char c) { return IsLetter(c) || c == '_'; }
inline bool IsNameChar(char c) {
  return IsLetter(c) || IsDigit(c) || c == '_' || c == '.' || c == '-';
}

inline std::string_view StripPercent(std::string_view name) {
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
  bool default_layout = true;                  // of the declared shape
  std::optional<std::vector<int64_t>> layout;  // its minor-to-major order, when plain
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
  // Their minor-to-major orders, where the layout is a plain permutation (no tiles).
  std::unordered_map<std::string_view, std::vector<int64_t>> layouts;
  Instruction* root = nullptr;
};

// A bitcast across layouts, read as what it does to the logical array: the
// operand in its memory order (a transpose), those bytes in the result's
// memory order (a reshape), and back to the result's dims (a transpose).
struct LayoutBitcast {
  std::vector<int64_t> to_memory_order, memory_dims, from_memory_order;
};

struct Parser {
  Lexer lexer;
  std::deque<Token> lookahead;
  Module* module = nullptr;
  // Whether every layout of the shapes ParseShape read since this was last
  // set held the default (row-major, {rank-1, ..., 0}) order.
  bool default_layouts = true;
  // The minor-to-major order of the last array layout ParseShape read, when
  // it is a plain permutation; nullopt for a tiled one or none written.
  std::optional<std::vector<int64_t>> last_layout;
  // Names of the instructions the parser adds (a bitcast across layouts is three).
  std::deque<std::string> made_names;

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
  void SkipStackFrameTables();
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
  std::optional<std::vector<int64_t>> PlainLayout(int64_t rank);
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
  bool CheckBitcast(const PendingComputation& pc, const Shape& shape, bool default_layout,
                    const std::vector<OperandRef>& operands, const Token& at);
  std::optional<LayoutBitcast> PlanLayoutBitcast(const PendingComputation& pc, const Shape& shape,
                                                 bool to_default,
                                                 const std::optional<std::vector<int64_t>>& layout,
                                                 const OperandRef& operand);
  void AddLayoutBitcast(PendingComputation& pc, const LayoutBitcast& plan, const Shape& shape,
                        const OperandRef& operand, std::string_view name, const Token& at);
  std::string ParseSharding();
  ReplicaGroups ParseReplicaGroups();
  SourceTargetPairs ParseSourceTargetPairs();
  bool ParseBool();
  float ParseFloat();
  bool ParseTranspose();  // transpose_a=: whether a is transposed
  Computation* ParseCalledComputation();
  std::vector<Computation*> ParseCalledList();
  Literal ParseLiteral(const Shape& shape, const Token& shape_token);
  void ParseLiteralLevel(const Shape& shape, int64_t level, std::vector<Token>& values);
  void TakeElement(const Shape& shape, std::vector<Token>& values);
};

}  // namespace strata::hlo::text_parser
