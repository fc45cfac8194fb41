// The values in HLO text: shapes, integers and their lists, slices,
// paddings, windows, convolution dims, shardings, replica groups, literals.
#include "parser.h"

namespace strata::hlo::text_parser {

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
      last_layout = PlainLayout(static_cast<int64_t>(dims.size()));
      SkipBalanced();
    }
  }
  return Shape(*dtype, std::move(dims));
}

// The layout at Peek() ('{' ...) as its minor-to-major dims when it is a
// permutation of the rank's dims and nothing else (no tiles, no memory space).
std::optional<std::vector<int64_t>> Parser::PlainLayout(int64_t rank) {
  std::vector<int64_t> order;
  size_t k = 1;
  for (int64_t i = 0; i < rank; ++i) {
    Token n = Peek(k++);
    int64_t d = -1;
    if (n.kind != TokenKind::kNumber) return std::nullopt;
    std::from_chars(n.text.data(), n.text.data() + n.text.size(), d);
    if (d < 0 || d >= rank || std::find(order.begin(), order.end(), d) != order.end())
      return std::nullopt;
    order.push_back(d);
    if (i + 1 < rank && !Peek(k++).Is(',')) return std::nullopt;
  }
  if (!Peek(k).Is('}')) return std::nullopt;
  return order;
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
  if (!t.IsName("rng_philox") && !t.IsName("rng_default") && !t.IsName("rng_three_fry")) {
    FailAt(t, "expected rng algorithm rng_philox, rng_three_fry or rng_default, found {}",
           Describe(t));
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

// A batch norm's epsilon: a decimal number.
float Parser::ParseFloat() {
  Token t = Take();
  if (t.kind == TokenKind::kNumber) {
    std::string text(t.text);
    char* end = nullptr;
    float value = std::strtof(text.c_str(), &end);
    if (end == text.c_str() + text.size()) return value;
  }
  FailAt(t, "expected a number, found {}", Describe(t));
}

// triangular-solve's transpose_a: NO_TRANSPOSE, TRANSPOSE or ADJOINT (the
// transpose on the real numbers strata solves over).
bool Parser::ParseTranspose() {
  Token t = Take();
  if (t.IsName("NO_TRANSPOSE")) return false;
  if (t.IsName("TRANSPOSE") || t.IsName("ADJOINT")) return true;
  FailAt(t, "expected NO_TRANSPOSE, TRANSPOSE or ADJOINT, found {}", Describe(t));
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

}  // namespace strata::hlo::text_parser
