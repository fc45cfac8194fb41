#include "strata/hlo/sharding.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <numeric>
#include <optional>
#include <unordered_set>

#include "strata/core/error.h"
#include "strata/core/shape.h"

namespace strata::hlo {
namespace {

// No real system comes near this; it keeps text like devices=[1000000000000]<=[...]
// from asking for terabytes.
constexpr int64_t kMaxDevices = int64_t{1} << 20;

const char* SubgroupName(SubgroupType type) {
  return type == SubgroupType::kReplicated ? "replicated" : "manual";
}

// Product of positive dims, or nullopt past kMaxDevices (so never overflows).
std::optional<int64_t> BoundedProduct(const std::vector<int64_t>& dims) {
  int64_t product = 1;
  for (int64_t d : dims) {
    if (d > kMaxDevices / product) return std::nullopt;
    product *= d;
  }
  return product;
}

// What is wrong with a tiled sharding's parts, or "" if nothing. `devices` is
// checked only for an explicit list (empty iota_reshape_dims): an iota list
// can hold neither duplicates nor negative ids.
std::string TiledProblem(const std::vector<int64_t>& tile_dims, const std::vector<int64_t>& devices,
                         const std::vector<SubgroupType>& last_tile_dims,
                         const std::vector<int64_t>& iota_reshape_dims,
                         const std::vector<int64_t>& iota_transpose, bool iota) {
  if (tile_dims.empty()) return "a tiled sharding needs at least one tile dim, found devices=[]";
  for (int64_t d : tile_dims) {
    if (d < 1) return fmt::format("tile dim {} in {} is not positive", d, DimsToString(tile_dims));
  }
  std::optional<int64_t> count = BoundedProduct(tile_dims);
  if (!count) {
    return fmt::format("tile dims {} name more than {} devices", DimsToString(tile_dims),
                       kMaxDevices);
  }
  if (last_tile_dims.size() > tile_dims.size()) {
    return fmt::format("{} subgroup dims in last_tile_dims but only {} tile dims {}",
                       last_tile_dims.size(), tile_dims.size(), DimsToString(tile_dims));
  }
  for (size_t i = 0; i < last_tile_dims.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (last_tile_dims[i] == last_tile_dims[j]) {
        return fmt::format("subgroup type {} appears twice in last_tile_dims",
                           SubgroupName(last_tile_dims[i]));
      }
    }
  }
  if (iota) {
    if (iota_reshape_dims.empty()) return "an iota device list needs at least one dim, found <=[]";
    for (int64_t d : iota_reshape_dims) {
      if (d < 1) {
        return fmt::format("iota reshape dim {} in <={} is not positive", d,
                           DimsToString(iota_reshape_dims));
      }
    }
    std::optional<int64_t> iota_count = BoundedProduct(iota_reshape_dims);
    if (iota_count != count) {
      return fmt::format("iota device list <={} holds {} devices but tile dims {} need {}",
                         DimsToString(iota_reshape_dims),
                         iota_count ? std::to_string(*iota_count) : "too many",
                         DimsToString(tile_dims), *count);
    }
    if (!iota_transpose.empty()) {
      std::vector<bool> seen(iota_reshape_dims.size(), false);
      bool permutation = iota_transpose.size() == iota_reshape_dims.size();
      for (int64_t p : iota_transpose) {
        if (!permutation) break;
        permutation = p >= 0 && p < static_cast<int64_t>(seen.size()) && !seen[p];
        if (permutation) seen[p] = true;
      }
      if (!permutation) {
        return fmt::format("transpose T({}) is not a permutation of the {} iota reshape dims",
                           fmt::join(iota_transpose, ","), iota_reshape_dims.size());
      }
    }
    return "";
  }
  if (static_cast<int64_t>(devices.size()) != *count) {
    return fmt::format("{} devices listed but tile dims {} need {}", devices.size(),
                       DimsToString(tile_dims), *count);
  }
  std::unordered_set<int64_t> seen;
  for (int64_t d : devices) {
    if (d < 0) return fmt::format("negative device id {}", d);
    if (!seen.insert(d).second) return fmt::format("duplicate device {} in the device list", d);
  }
  return "";
}

// iota(product(dims)) reshaped to `dims`, transposed by `perm`, flattened.
std::vector<int64_t> ExpandIota(const std::vector<int64_t>& dims,
                                const std::vector<int64_t>& perm) {
  int64_t count = Product(dims);
  std::vector<int64_t> out(count);
  if (perm.empty()) {
    std::iota(out.begin(), out.end(), int64_t{0});
    return out;
  }
  // Walk the transposed array row-major; its dim k is the source's dim perm[k].
  std::vector<int64_t> source_strides = RowMajorStrides(dims);
  std::vector<int64_t> index(perm.size(), 0);
  for (int64_t n = 0; n < count; ++n) {
    int64_t value = 0;
    for (size_t k = 0; k < perm.size(); ++k) value += index[k] * source_strides[perm[k]];
    out[n] = value;
    for (int64_t k = static_cast<int64_t>(perm.size()) - 1; k >= 0; --k) {
      if (++index[k] < dims[perm[k]]) break;
      index[k] = 0;
    }
  }
  return out;
}

bool IsIdentity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------
// Parsing.

enum class TokenKind { kPunct, kName, kNumber, kString, kEnd };

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string_view text;
  int64_t column = 0;  // 1-based
  bool Is(std::string_view punct) const { return kind == TokenKind::kPunct && text == punct; }
  bool IsName(std::string_view name) const { return kind == TokenKind::kName && text == name; }
};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

class ShardingParser {
 public:
  explicit ShardingParser(std::string_view text) : text_(text) {}

  Sharding ParseWhole() {
    Sharding sharding = ParseSharding(/*in_tuple=*/false);
    Token t = Take();
    if (t.kind != TokenKind::kEnd) FailExpected(t, "end of input after the sharding");
    return sharding;
  }

 private:
  // "... at column N of "<text>"", quoting only a window of long text.
  std::string Where(int64_t column) const {
    constexpr int64_t kWindow = 80;
    std::string_view shown = text_;
    std::string before, after;
    if (static_cast<int64_t>(text_.size()) > 2 * kWindow) {
      int64_t start = std::max<int64_t>(0, column - 1 - kWindow);
      shown = text_.substr(start, 2 * kWindow);
      if (start > 0) before = "...";
      if (start + 2 * kWindow < static_cast<int64_t>(text_.size())) after = "...";
    }
    return fmt::format("at column {} of \"{}{}{}\"", column, before, shown, after);
  }
  [[noreturn]] void FailAt(int64_t column, const std::string& message) const {
    Fail("[sharding] {} {}", message, Where(column));
  }
  [[noreturn]] void FailExpected(const Token& found, std::string_view what) const {
    std::string described = "end of input";
    if (found.kind != TokenKind::kEnd) {
      described = found.text.size() <= 40 ? fmt::format("'{}'", found.text)
                                          : fmt::format("'{}...'", found.text.substr(0, 40));
    }
    Fail("[sharding] expected {} {}, found {}", what, Where(found.column), described);
  }

  Token Lex() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
    Token t;
    t.column = static_cast<int64_t>(pos_) + 1;
    if (pos_ >= text_.size()) return t;
    size_t start = pos_;
    char c = text_[pos_];
    if (IsNameStart(c)) {
      t.kind = TokenKind::kName;
      while (pos_ < text_.size() && IsNameChar(text_[pos_])) ++pos_;
    } else if (IsDigit(c) || (c == '-' && pos_ + 1 < text_.size() && IsDigit(text_[pos_ + 1]))) {
      t.kind = TokenKind::kNumber;
      ++pos_;
      while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
    } else if (c == '"') {
      t.kind = TokenKind::kString;
      ++pos_;
      while (pos_ < text_.size() && text_[pos_] != '"') pos_ += text_[pos_] == '\\' ? 2 : 1;
      if (pos_ >= text_.size()) FailAt(t.column, "unterminated string");
      ++pos_;
    } else {
      t.kind = TokenKind::kPunct;
      pos_ += text_.substr(pos_, 2) == "<=" ? 2 : 1;
    }
    t.text = text_.substr(start, pos_ - start);
    return t;
  }
  Token Peek() {
    if (!peeked_) peeked_ = Lex();
    return *peeked_;
  }
  Token Take() {
    Token t = Peek();
    peeked_.reset();
    return t;
  }
  Token Expect(std::string_view punct, std::string_view what) {
    Token t = Take();
    if (!t.Is(punct)) FailExpected(t, what);
    return t;
  }
  void ExpectName(std::string_view name) {
    Token t = Take();
    if (!t.IsName(name)) FailExpected(t, fmt::format("'{}'", name));
  }
  int64_t ParseNumber(std::string_view what) {
    Token t = Take();
    if (t.kind != TokenKind::kNumber) FailExpected(t, what);
    int64_t value = 0;
    auto [end, error] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), value);
    if (error != std::errc() || end != t.text.data() + t.text.size()) {
      FailAt(t.column, fmt::format("number {} is out of range", t.text));
    }
    return value;
  }
  // Numbers separated by commas up to `close`, which is consumed.
  std::vector<int64_t> ParseNumberList(std::string_view close, std::string_view what) {
    std::vector<int64_t> values;
    if (Peek().Is(close)) {
      Take();
      return values;
    }
    while (true) {
      values.push_back(ParseNumber(what));
      Token t = Take();
      if (t.Is(close)) return values;
      if (!t.Is(",")) FailExpected(t, fmt::format("',' or '{}' in a list of {}s", close, what));
    }
  }

  Sharding ParseSharding(bool in_tuple) {
    Token open = Expect("{", "'{' to start a sharding");
    Token first = Peek();
    if ((first.Is("{") || first.Is("}")) && in_tuple) {
      FailExpected(first, "replicated, manual, maximal or devices (tuple shardings do not nest)");
    }
    if (first.Is("}")) {
      Take();
      return Sharding::Tuple({});
    }
    if (first.Is("{")) {
      std::vector<Sharding> elements;
      while (true) {
        elements.push_back(ParseSharding(/*in_tuple=*/true));
        Token t = Take();
        if (t.Is("}")) return Sharding::Tuple(std::move(elements));
        if (!t.Is(",")) FailExpected(t, "',' or '}' after a tuple sharding's element");
      }
    }
    Token keyword = Take();
    std::optional<Sharding> sharding;
    std::vector<int64_t> tile_dims, devices, reshape_dims, transpose;
    bool iota = false;
    if (keyword.IsName("replicated")) {
      sharding = Sharding::Replicated();
    } else if (keyword.IsName("manual")) {
      sharding = Sharding::Manual();
    } else if (keyword.IsName("maximal")) {
      ExpectName("device");
      Expect("=", "'=' after 'device'");
      int64_t column = Peek().column;
      int64_t device = ParseNumber("a device id");
      if (device < 0) FailAt(column, fmt::format("negative device id {}", device));
      sharding = Sharding::Maximal(device);
    } else if (keyword.IsName("devices")) {
      Expect("=", "'=' after 'devices'");
      Expect("[", "'[' to start the tile dims");
      tile_dims = ParseNumberList("]", "tile dim");
      if (Peek().Is("<=")) {
        Take();
        iota = true;
        Expect("[", "'[' to start the iota reshape dims");
        reshape_dims = ParseNumberList("]", "iota reshape dim");
        if (Peek().IsName("T")) {
          Take();
          Expect("(", "'(' after 'T'");
          transpose = ParseNumberList(")", "transpose dim");
        }
      } else {
        devices.push_back(ParseNumber("a device id or '<=' after the tile dims"));
        while (Peek().Is(",")) {
          Take();
          devices.push_back(ParseNumber("a device id"));
        }
      }
    } else if (keyword.kind == TokenKind::kName) {
      FailAt(keyword.column, fmt::format("unknown keyword '{}' (expected replicated, manual, "
                                         "maximal or devices)",
                                         keyword.text));
    } else {
      FailExpected(keyword, "a sharding: replicated, manual, maximal, devices or '{'");
    }

    // Trailing attributes: subgroups (tiled only) and metadata (dropped).
    std::vector<SubgroupType> subgroups;
    std::optional<Token> subgroup_keyword;
    while (Peek().kind == TokenKind::kName) {
      Token t = Take();
      if (t.IsName("metadata")) {
        SkipMetadata();
        continue;
      }
      bool replicate = t.IsName("last_tile_dim_replicate");
      if (!replicate && !t.IsName("last_tile_dims")) {
        FailAt(t.column, fmt::format("unknown keyword '{}'", t.text));
      }
      if (!keyword.IsName("devices")) {
        FailAt(t.column, fmt::format("{} only follows a devices= list", t.text));
      }
      if (subgroup_keyword) {
        FailAt(t.column,
               fmt::format("{} cannot be given together with {}", t.text, subgroup_keyword->text));
      }
      subgroup_keyword = t;
      if (replicate) {
        subgroups = {SubgroupType::kReplicated};
      } else {
        subgroups = ParseSubgroupTypes();
      }
    }
    Expect("}", fmt::format("'}}' to close the sharding opened at column {}", open.column));
    if (!keyword.IsName("devices")) return *sharding;

    std::string problem =
        TiledProblem(tile_dims, devices, subgroups, reshape_dims, transpose, iota);
    if (!problem.empty()) FailAt(keyword.column, problem);
    if (iota) {
      return Sharding::TiledIota(std::move(tile_dims), std::move(reshape_dims),
                                 std::move(transpose), std::move(subgroups));
    }
    return Sharding::Tiled(std::move(tile_dims), std::move(devices), std::move(subgroups));
  }

  // `={manual, replicated}` after last_tile_dims.
  std::vector<SubgroupType> ParseSubgroupTypes() {
    Expect("=", "'=' after 'last_tile_dims'");
    Expect("{", "'{' to start the last_tile_dims list");
    std::vector<SubgroupType> types;
    while (true) {
      Token t = Take();
      if (t.IsName("replicated")) {
        types.push_back(SubgroupType::kReplicated);
      } else if (t.IsName("manual")) {
        types.push_back(SubgroupType::kManual);
      } else if (t.kind == TokenKind::kName) {
        FailAt(t.column,
               fmt::format("unknown subgroup type '{}' (expected manual or replicated)", t.text));
      } else {
        FailExpected(t, "a subgroup type: manual or replicated");
      }
      Token next = Take();
      if (next.Is("}")) return types;
      if (!next.Is(",")) FailExpected(next, "',' or '}' in last_tile_dims");
    }
  }

  // `={op_name="..." ...}`: skipped with its nested braces; strings may hold braces.
  void SkipMetadata() {
    Expect("=", "'=' after 'metadata'");
    Token open = Expect("{", "'{' to start the metadata");
    int64_t depth = 1;
    while (depth > 0) {
      Token t = Take();
      if (t.kind == TokenKind::kEnd) {
        FailExpected(t, fmt::format("'}}' to close the metadata opened at column {}", open.column));
      }
      if (t.Is("{")) ++depth;
      if (t.Is("}")) --depth;
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::optional<Token> peeked_;
};

}  // namespace

// ---------------------------------------------------------------------------
// Construction.

Sharding Sharding::Replicated() { return Sharding(Kind::kReplicated); }
Sharding Sharding::Manual() { return Sharding(Kind::kManual); }

Sharding Sharding::Maximal(int64_t device) {
  if (device < 0) Fail("[sharding] negative device id {} in a maximal sharding", device);
  Sharding s(Kind::kMaximal);
  s.maximal_device_ = device;
  return s;
}

Sharding Sharding::Tiled(std::vector<int64_t> tile_dims, std::vector<int64_t> devices,
                         std::vector<SubgroupType> last_tile_dims) {
  return MakeTiled(std::move(tile_dims), std::move(devices), std::move(last_tile_dims), {}, {});
}

Sharding Sharding::TiledIota(std::vector<int64_t> tile_dims, std::vector<int64_t> reshape_dims,
                             std::vector<int64_t> transpose,
                             std::vector<SubgroupType> last_tile_dims) {
  if (reshape_dims.empty()) Fail("[sharding] an iota device list needs at least one dim");
  return MakeTiled(std::move(tile_dims), {}, std::move(last_tile_dims), std::move(reshape_dims),
                   std::move(transpose));
}

Sharding Sharding::MakeTiled(std::vector<int64_t> tile_dims, std::vector<int64_t> devices,
                             std::vector<SubgroupType> last_tile_dims,
                             std::vector<int64_t> iota_reshape_dims,
                             std::vector<int64_t> iota_transpose) {
  bool iota = !iota_reshape_dims.empty();
  std::string problem =
      TiledProblem(tile_dims, devices, last_tile_dims, iota_reshape_dims, iota_transpose, iota);
  if (!problem.empty()) Fail("[sharding] {}", problem);
  Sharding s(Kind::kTiled);
  if (iota) {
    if (IsIdentity(iota_transpose)) iota_transpose.clear();
    devices = ExpandIota(iota_reshape_dims, iota_transpose);
  }
  s.tile_dims_ = std::move(tile_dims);
  s.devices_ = std::move(devices);
  s.subgroup_types_ = std::move(last_tile_dims);
  s.iota_reshape_dims_ = std::move(iota_reshape_dims);
  s.iota_transpose_ = std::move(iota_transpose);
  return s;
}

Sharding Sharding::Tuple(std::vector<Sharding> elements) {
  for (const Sharding& e : elements) {
    if (e.IsTuple()) {
      Fail("[sharding] a tuple sharding's element {} is a tuple; give one sharding per leaf",
           e.ToText());
    }
  }
  Sharding s(Kind::kTuple);
  s.tuple_elements_ = std::move(elements);
  return s;
}

Sharding Sharding::Parse(std::string_view text) { return ShardingParser(text).ParseWhole(); }

std::string Sharding::ToText() const {
  switch (kind_) {
    case Kind::kReplicated:
      return "{replicated}";
    case Kind::kManual:
      return "{manual}";
    case Kind::kMaximal:
      return fmt::format("{{maximal device={}}}", maximal_device_);
    case Kind::kTuple: {
      std::vector<std::string> parts;
      for (const Sharding& e : tuple_elements_) parts.push_back(e.ToText());
      return fmt::format("{{{}}}", fmt::join(parts, ", "));
    }
    case Kind::kTiled:
      break;
  }
  std::string out = fmt::format("{{devices=[{}]", fmt::join(tile_dims_, ","));
  if (iota_reshape_dims_.empty()) {
    out += fmt::format("{}", fmt::join(devices_, ","));
  } else {
    out += fmt::format("<=[{}]", fmt::join(iota_reshape_dims_, ","));
    if (!iota_transpose_.empty()) out += fmt::format("T({})", fmt::join(iota_transpose_, ","));
  }
  if (subgroup_types_ == std::vector<SubgroupType>{SubgroupType::kReplicated}) {
    out += " last_tile_dim_replicate";
  } else if (!subgroup_types_.empty()) {
    std::vector<const char*> names;
    for (SubgroupType t : subgroup_types_) names.push_back(SubgroupName(t));
    out += fmt::format(" last_tile_dims={{{}}}", fmt::join(names, ", "));
  }
  return out + "}";
}

// ---------------------------------------------------------------------------
// Queries.

bool Sharding::IsReplicated() const {
  switch (kind_) {
    case Kind::kReplicated:
      return true;
    case Kind::kTuple:
      for (const Sharding& e : tuple_elements_) {
        if (!e.IsReplicated()) return false;
      }
      return true;
    case Kind::kTiled:
      for (int64_t d = 0; d < data_rank(); ++d) {
        if (tile_dims_[d] != 1) return false;
      }
      for (SubgroupType t : subgroup_types_) {
        if (t == SubgroupType::kManual) return false;
      }
      return true;
    default:
      return false;
  }
}

bool Sharding::IsMaximal() const {
  if (kind_ != Kind::kTuple) return kind_ == Kind::kMaximal;
  for (const Sharding& e : tuple_elements_) {
    if (!e.IsMaximal()) return false;
  }
  return true;
}

bool Sharding::IsManual() const {
  if (kind_ != Kind::kTuple) return kind_ == Kind::kManual;
  for (const Sharding& e : tuple_elements_) {
    if (!e.IsManual()) return false;
  }
  return true;
}

int64_t Sharding::maximal_device() const {
  if (kind_ != Kind::kMaximal)
    Fail("[sharding] maximal_device of {}, which is not maximal", ToText());
  return maximal_device_;
}

const std::vector<Sharding>& Sharding::tuple_elements() const {
  if (kind_ != Kind::kTuple)
    Fail("[sharding] tuple_elements of {}, which is not a tuple", ToText());
  return tuple_elements_;
}

void Sharding::RequireTiled(std::string_view query) const {
  if (kind_ != Kind::kTiled)
    Fail("[sharding] {} needs a tiled sharding, found {}", query, ToText());
}

int64_t Sharding::data_rank() const {
  RequireTiled("data_rank");
  return static_cast<int64_t>(tile_dims_.size() - subgroup_types_.size());
}

int64_t Sharding::TileCount(int64_t data_dim) const {
  if (kind_ == Kind::kTuple) Fail("[sharding] TileCount of the tuple sharding {}", ToText());
  int64_t rank = kind_ == Kind::kTiled ? data_rank() : std::numeric_limits<int64_t>::max();
  if (data_dim < 0 || data_dim >= rank) {
    Fail("[sharding] array dim {} is out of range for {}", data_dim, ToText());
  }
  return kind_ == Kind::kTiled ? tile_dims_[data_dim] : 1;
}

int64_t Sharding::replication() const {
  RequireTiled("replication");
  int64_t product = 1;
  for (size_t i = 0; i < subgroup_types_.size(); ++i) {
    if (subgroup_types_[i] == SubgroupType::kReplicated) product *= tile_dims_[data_rank() + i];
  }
  return product;
}

int64_t Sharding::device_count() const {
  if (kind_ == Kind::kMaximal) return 1;
  RequireTiled("device_count");
  return static_cast<int64_t>(devices_.size());
}

std::vector<int64_t> Sharding::TileIndexOf(int64_t device) const {
  RequireTiled("TileIndexOf");
  auto it = std::find(devices_.begin(), devices_.end(), device);
  if (it == devices_.end()) Fail("[sharding] device {} is not in {}", device, ToText());
  int64_t position = it - devices_.begin();
  std::vector<int64_t> index(tile_dims_.size());
  for (int64_t k = static_cast<int64_t>(tile_dims_.size()) - 1; k >= 0; --k) {
    index[k] = position % tile_dims_[k];
    position /= tile_dims_[k];
  }
  return index;
}

int64_t Sharding::ShardSize(int64_t dim_size, int64_t tiles) {
  if (dim_size < 0 || tiles < 1) {
    Fail("[sharding] ShardSize needs a dim size >= 0 and tiles >= 1, found {} and {}", dim_size,
         tiles);
  }
  return dim_size / tiles + (dim_size % tiles != 0);
}

std::vector<std::vector<int64_t>> Sharding::GroupsAlong(const std::vector<int64_t>& dims) const {
  RequireTiled("GroupsAlong");
  std::vector<bool> along(tile_dims_.size(), false);
  for (int64_t d : dims) {
    if (d < 0 || d >= data_rank()) {
      Fail("[sharding] GroupsAlong: array dim {} is out of range for {}", d, ToText());
    }
    if (along[d]) Fail("[sharding] GroupsAlong: array dim {} is given twice", d);
    along[d] = true;
  }
  // A device's group is its tile index with the `dims` coordinates zeroed.
  // Walking devices in row-major order puts each group in row-major order
  // over `dims` and creates the groups in the order of their first device.
  std::vector<int64_t> strides = RowMajorStrides(tile_dims_);
  std::vector<int64_t> group_of_key(devices_.size(), -1);
  std::vector<std::vector<int64_t>> groups;
  for (int64_t position = 0; position < static_cast<int64_t>(devices_.size()); ++position) {
    int64_t key = 0;
    for (size_t k = 0; k < tile_dims_.size(); ++k) {
      if (!along[k]) key += (position / strides[k] % tile_dims_[k]) * strides[k];
    }
    if (group_of_key[key] < 0) {
      group_of_key[key] = static_cast<int64_t>(groups.size());
      groups.emplace_back();
    }
    groups[group_of_key[key]].push_back(devices_[position]);
  }
  return groups;
}

bool Sharding::operator==(const Sharding& other) const {
  return kind_ == other.kind_ && maximal_device_ == other.maximal_device_ &&
         tile_dims_ == other.tile_dims_ && devices_ == other.devices_ &&
         subgroup_types_ == other.subgroup_types_ && tuple_elements_ == other.tuple_elements_;
}

}  // namespace strata::hlo
