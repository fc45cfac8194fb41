#include "strata/io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "strata/core/error.h"

namespace strata::io {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

// The 8-byte little-endian length prefix, assembled byte by byte.
Bytes LengthPrefix(uint64_t n) {
  Bytes out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  return out;
}

Bytes Concat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Bytes FromString(std::string_view s) { return Bytes(s.begin(), s.end()); }

Bytes FileOf(std::string_view header, const Bytes& data = {}) {
  return Concat({LengthPrefix(header.size()), FromString(header), data});
}

// The message of the strata::Error `body` throws, or "<no error>".
std::string ErrorOf(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

Bytes ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const fs::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

std::set<std::string> Listing(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename());
  return names;
}

Bytes ToBytes(std::span<const uint8_t> span) { return Bytes(span.begin(), span.end()); }

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("strata_safetensors_" + std::to_string(::getpid()) + "_" +
                                        info->name() + "_" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// One tensor per dtype, with little-endian bytes written out by hand.
struct DTypeCase {
  DType dtype;
  const char* name;
  std::vector<int64_t> shape;
  Bytes bytes;
};
const std::vector<DTypeCase>& DTypeCases() {
  static const std::vector<DTypeCase> cases = {
      {DType::kF32, "F32", {2}, {0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x20, 0xC0}},  // 1, -2.5
      {DType::kF16, "F16", {2}, {0x00, 0x3C, 0x00, 0xC0}},                          // 1, -2
      {DType::kBF16, "BF16", {2}, {0x80, 0x3F, 0x00, 0xC0}},                        // 1, -2
      {DType::kF64, "F64", {1}, {0, 0, 0, 0, 0, 0, 0xF0, 0x3F}},                    // 1
      {DType::kS64, "I64", {1}, {0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},  // -2
      {DType::kS32, "I32", {2}, {0x01, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF}},           // 1, -1
      {DType::kS8, "I8", {3}, {0x01, 0xFF, 0x7F}},                                  // 1, -1, 127
      {DType::kU8, "U8", {2, 2}, {0, 1, 254, 255}},
      {DType::kPred, "BOOL", {3}, {1, 0, 1}},
      {DType::kU32, "U32", {1}, {0xEF, 0xBE, 0xAD, 0xDE}},  // 0xDEADBEEF
      {DType::kU64, "U64", {1}, {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},
      {DType::kS16, "I16", {2}, {0x00, 0x80, 0xFF, 0x7F}},  // -32768, 32767
      {DType::kU16, "U16", {1}, {0x00, 0x3C}},              // 15360 (f16's 1.0 bits)
  };
  return cases;
}

TEST(SafetensorsDType, NamesMapBothWays) {
  std::set<DType> seen;
  for (const DTypeCase& c : DTypeCases()) {
    EXPECT_EQ(SafetensorsName(c.dtype), c.name);
    EXPECT_EQ(DTypeFromSafetensorsName(c.name), c.dtype) << c.name;
    seen.insert(c.dtype);
  }
  // Every tensor dtype: all but c64, c128 and token, which lazy tensors never hold.
  EXPECT_EQ(seen.size(), static_cast<size_t>(kNumDTypes - 3));
  for (DType t : {DType::kC64, DType::kC128, DType::kToken}) {
    EXPECT_THROW(SafetensorsName(t), Error);
  }
  EXPECT_EQ(DTypeFromSafetensorsName("f32"), std::nullopt);
  EXPECT_EQ(DTypeFromSafetensorsName("F8_E4M3"), std::nullopt);
  EXPECT_EQ(DTypeFromSafetensorsName(""), std::nullopt);
}

TEST(SafetensorsDType, HandWrittenBytesMeanWhatTheCommentsSay) {
  float f[2];
  std::memcpy(f, DTypeCases()[0].bytes.data(), 8);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.5f);
  double d;
  std::memcpy(&d, DTypeCases()[3].bytes.data(), 8);
  EXPECT_EQ(d, 1.0);
}

TEST(SafetensorsRead, HandAssembledFile) {
  // 149 bytes of header, deliberately not padded to a multiple of 8.
  const std::string header = R"({"__metadata__":{"format":"pt","step":"7"},)"
                             R"("b":{"dtype":"I8","shape":[3],"data_offsets":[0,3]},)"
                             R"("a":{"dtype":"F32","shape":[2],"data_offsets":[3,11]}})";
  ASSERT_EQ(header.size(), 149u);
  Bytes file = Concat({{0x95, 0, 0, 0, 0, 0, 0, 0},
                       FromString(header),
                       {0x01, 0xFF, 0x7F},
                       {0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x20, 0xC0}});

  SafetensorsFile st = SafetensorsFile::FromBytes(file, "hand.safetensors");
  EXPECT_EQ(st.names(), (std::vector<std::string>{"b", "a"}));  // offset order, not alphabetical
  EXPECT_EQ(st.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"step", "7"}}));
  EXPECT_TRUE(st.contains("a"));
  EXPECT_FALSE(st.contains("__metadata__"));

  const TensorView& a = st.Get("a");
  EXPECT_EQ(a.dtype, DType::kF32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(ToBytes(a.data), (Bytes{0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x20, 0xC0}));
  const TensorView& b = st.Get("b");
  EXPECT_EQ(b.dtype, DType::kS8);
  EXPECT_EQ(b.shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(ToBytes(b.data), (Bytes{0x01, 0xFF, 0x7F}));

  std::string message = ErrorOf([&] { st.Get("c"); });
  EXPECT_EQ(message.rfind("[safetensors] hand.safetensors: ", 0), 0u) << message;
  EXPECT_NE(message.find("no tensor named 'c'; it has 2 tensors: b, a"), std::string::npos)
      << message;
}

TEST(SafetensorsRead, EdgeCasesThatAreValid) {
  SafetensorsFile empty = SafetensorsFile::FromBytes(FileOf("{}"));
  EXPECT_TRUE(empty.names().empty());
  EXPECT_TRUE(empty.metadata().empty());

  // A scalar, a zero-size tensor at the end, surrounding whitespace in the header.
  SafetensorsFile st = SafetensorsFile::FromBytes(
      FileOf(R"( {"s":{"data_offsets":[0,4],"shape":[],"dtype":"F32"},)"
             R"("z":{"dtype":"U8","shape":[0,5],"data_offsets":[4,4]}}   )",
             {1, 2, 3, 4}));
  EXPECT_EQ(st.names(), (std::vector<std::string>{"s", "z"}));
  EXPECT_TRUE(st.Get("s").shape.empty());
  EXPECT_EQ(ToBytes(st.Get("s").data), (Bytes{1, 2, 3, 4}));
  EXPECT_EQ(st.Get("z").shape, (std::vector<int64_t>{0, 5}));
  EXPECT_TRUE(st.Get("z").data.empty());
}

// The format's own canonical example: one F32[1,2,3] tensor of zeros.
TEST(SafetensorsWrite, CanonicalSingleTensorBytes) {
  const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(header.size(), 64u);  // already a multiple of 8: no padding
  Bytes expected = Concat({{64, 0, 0, 0, 0, 0, 0, 0}, FromString(header), Bytes(24, 0)});
  EXPECT_EQ(SerializeSafetensors({{"attn.0", DType::kF32, {1, 2, 3}, Bytes(24, 0)}}), expected);
}

TEST_F(TempDir, WriterOutputMatchesHandComputedBytes) {
  std::vector<TensorData> tensors = {
      {"x", DType::kF32, {2}, {0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0x40}},  // 1, 2
      {"a", DType::kU8, {1, 3}, {1, 2, 3}},
  };
  // Metadata first, then tensors in the given order; keys dtype, shape, data_offsets.
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("a":{"dtype":"U8","shape":[1,3],"data_offsets":[8,11]}})";
  ASSERT_EQ(header.size(), 140u);  // + 4 spaces = 144 = 0x90
  Bytes expected = Concat({{0x90, 0, 0, 0, 0, 0, 0, 0},
                           FromString(header + "    "),
                           {0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0x40, 1, 2, 3}});

  EXPECT_EQ(SerializeSafetensors(tensors, {{"format", "pt"}}), expected);
  WriteSafetensors(dir_ / "out.safetensors", tensors, {{"format", "pt"}});
  EXPECT_EQ(ReadFile(dir_ / "out.safetensors"), expected);
}

TEST_F(TempDir, RoundTripEveryDType) {
  std::vector<TensorData> tensors;
  for (const DTypeCase& c : DTypeCases()) {
    tensors.push_back({std::string("t_") + c.name, c.dtype, c.shape, c.bytes});
  }
  Bytes serialized = SerializeSafetensors(tensors, {{"k", "v"}});
  uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) header_size |= uint64_t{serialized[i]} << (8 * i);
  EXPECT_EQ(header_size % 8, 0u);
  // The data section is the tensors' bytes back to back, in the given order.
  Bytes data;
  for (const DTypeCase& c : DTypeCases()) data.insert(data.end(), c.bytes.begin(), c.bytes.end());
  EXPECT_EQ(Bytes(serialized.begin() + 8 + header_size, serialized.end()), data);

  WriteSafetensors(dir_ / "all.safetensors", tensors, {{"k", "v"}});
  SafetensorsFile from_memory = SafetensorsFile::FromBytes(serialized);
  SafetensorsFile from_disk = SafetensorsFile::Open(dir_ / "all.safetensors");
  for (const SafetensorsFile* st : {&from_memory, &from_disk}) {
    ASSERT_EQ(st->names().size(), DTypeCases().size());
    EXPECT_EQ(st->metadata(), (std::map<std::string, std::string>{{"k", "v"}}));
    for (size_t i = 0; i < DTypeCases().size(); ++i) {
      const DTypeCase& c = DTypeCases()[i];
      EXPECT_EQ(st->names()[i], std::string("t_") + c.name);
      const TensorView& view = st->Get(std::string("t_") + c.name);
      EXPECT_EQ(view.dtype, c.dtype) << c.name;
      EXPECT_EQ(view.shape, c.shape) << c.name;
      EXPECT_EQ(ToBytes(view.data), c.bytes) << c.name;
    }
  }
  // Moving keeps the views valid: the bytes live with the storage, not the object.
  SafetensorsFile moved = std::move(from_disk);
  EXPECT_EQ(ToBytes(moved.Get("t_U32").data), (Bytes{0xEF, 0xBE, 0xAD, 0xDE}));
}

TEST(SafetensorsWrite, RejectsInconsistentTensors) {
  struct Row {
    std::vector<TensorData> tensors;
    std::string expected;
  };
  std::vector<Row> rows = {
      {{{"w", DType::kF32, {2}, Bytes(7)}}, "tensor 'w': F32 [2] needs 8 bytes, got 7"},
      {{{"w", DType::kU8, {1}, {1}}, {"w", DType::kU8, {1}, {2}}}, "duplicate tensor name 'w'"},
      {{{"w", DType::kU8, {-1}, {}}}, "tensor 'w': negative dimension in shape [-1]"},
      {{{"__metadata__", DType::kU8, {1}, {1}}}, "'__metadata__' is reserved"},
      {{{"w", DType::kU8, {int64_t{1} << 62, 8}, {}}}, "needs more than 2^63 bytes"},
      {{{"\xff", DType::kU8, {1}, {1}}}, "must be valid UTF-8"},
  };
  for (const Row& row : rows) {
    std::string message = ErrorOf([&] { SerializeSafetensors(row.tensors); });
    EXPECT_EQ(message.rfind("[safetensors] <memory>: ", 0), 0u) << message;
    EXPECT_NE(message.find(row.expected), std::string::npos) << message;
  }
}

struct CorruptCase {
  const char* what;
  Bytes bytes;
  const char* expected;
};

const std::string kU8Pair = R"("a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]})";

std::string Entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + R"(":{"dtype":)" + dtype + R"(,"shape":)" + shape + R"(,"data_offsets":)" +
         offsets + "}";
}

TEST(SafetensorsRead, RejectsCorruptInputs) {
  const std::vector<CorruptCase> cases = {
      {"empty file", {}, "file is 0 bytes, shorter than the 8-byte header length"},
      {"truncated length", {0x02, 0, 0}, "file is 3 bytes, shorter than the 8-byte"},
      {"header length beyond file", Concat({LengthPrefix(1000), FromString("{}")}),
       "header length 1000 but only 2 bytes follow"},
      {"absurd header length", Concat({LengthPrefix(uint64_t{1} << 40), FromString("{}")}),
       "header length 1099511627776 exceeds the limit of 100000000 bytes"},
      {"max u64 header length", LengthPrefix(~uint64_t{0}), "exceeds the limit"},
      {"empty header", FileOf(""), "header is not valid JSON"},
      {"header cut mid-JSON", FileOf(R"({"a":{"dty)"), "header is not valid JSON"},
      {"not JSON", FileOf("safetensors?"), "header is not valid JSON"},
      {"NUL padding", FileOf(std::string("{}\0\0", 4)),
       "header is not valid JSON: NUL byte at offset 2"},
      {"NUL then garbage", FileOf(std::string("{}\0{\"x\"", 6)), "NUL byte at offset 2"},
      {"invalid UTF-8", FileOf("{\"\xff\":{}}"), "header is not valid JSON"},
      {"deeply nested header", FileOf(std::string(1'000'000, '[') + std::string(1'000'000, ']')),
       "header nests deeper than 64 levels"},
      {"deeply nested, unclosed", FileOf(std::string(1'000'000, '[')),
       "header nests deeper than 64 levels"},
      {"header is an array", FileOf("[1,2]"), "expected the header to be a JSON object, got array"},
      {"duplicate tensor", FileOf("{" + kU8Pair + "," + kU8Pair + "}", {1, 2}),
       "header has duplicate key 'a'"},
      {"entry not an object", FileOf(R"({"a":5})"), "tensor 'a': expected an object"},
      {"missing key", FileOf(R"({"a":{"dtype":"U8","shape":[0]}})"),
       "tensor 'a': missing key 'data_offsets'"},
      {"extra key", FileOf(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"o":1}})"),
       "tensor 'a': unexpected key 'o'"},
      {"dtype not a string", FileOf("{" + Entry("a", "4", "[0]", "[0,0]") + "}"),
       "tensor 'a': expected dtype to be a string, got 4"},
      {"unknown dtype", FileOf("{" + Entry("a", "\"F8_E4M3\"", "[0]", "[0,0]") + "}"),
       "tensor 'a': unknown dtype \"F8_E4M3\" (supported: F32,"},
      {"lowercase dtype", FileOf("{" + Entry("a", "\"f32\"", "[0]", "[0,0]") + "}"),
       "unknown dtype \"f32\""},
      {"shape not an array", FileOf("{" + Entry("a", "\"U8\"", "2", "[0,2]") + "}", {1, 2}),
       "tensor 'a': expected shape to be an array of non-negative integers, got 2"},
      {"negative dim", FileOf("{" + Entry("a", "\"U8\"", "[-2]", "[0,2]") + "}", {1, 2}),
       "tensor 'a': expected shape[0] to be a non-negative integer, got -2"},
      {"fractional dim", FileOf("{" + Entry("a", "\"U8\"", "[1,2.0]", "[0,2]") + "}", {1, 2}),
       "expected shape[1] to be a non-negative integer, got 2.0"},
      {"dim beyond int64",
       FileOf("{" + Entry("a", "\"U8\"", "[18446744073709551615]", "[0,0]") + "}"),
       "expected shape[0] to be a non-negative integer"},
      {"product overflows",
       FileOf("{" + Entry("a", "\"U8\"", "[4294967296,4294967296]", "[0,0]") + "}"),
       "tensor 'a': shape [4294967296,4294967296] of U8 has a byte size that overflows 64 bits"},
      // 4 bytes * 2^62 wraps to exactly 0 in 64-bit arithmetic, matching [0,0] if unchecked.
      {"product wraps to the offsets",
       FileOf("{" + Entry("a", "\"F32\"", "[4611686018427387904]", "[0,0]") + "}"),
       "overflows 64 bits"},
      {"three offsets", FileOf("{" + Entry("a", "\"U8\"", "[2]", "[0,1,2]") + "}", {1, 2}),
       "tensor 'a': expected data_offsets to be [begin, end] of non-negative integers, got "
       "[0,1,2]"},
      {"negative offset", FileOf("{" + Entry("a", "\"U8\"", "[2]", "[-1,1]") + "}", {1, 2}),
       "expected data_offsets to be [begin, end]"},
      {"offsets not an array", FileOf("{" + Entry("a", "\"U8\"", "[2]", "\"0-2\"") + "}", {1, 2}),
       "expected data_offsets to be [begin, end] of non-negative integers, got \"0-2\""},
      {"begin after end", FileOf("{" + Entry("a", "\"U8\"", "[2]", "[2,0]") + "}", {1, 2}),
       "tensor 'a': data_offsets [2, 0] has begin > end"},
      {"size mismatch", FileOf("{" + Entry("a", "\"U8\"", "[3]", "[0,2]") + "}", {1, 2}),
       "tensor 'a': data_offsets [0, 2] span 2 bytes, but U8 [3] needs 3"},
      {"F32 size mismatch", FileOf("{" + Entry("a", "\"F32\"", "[2]", "[0,4]") + "}", {1, 2, 3, 4}),
       "span 4 bytes, but F32 [2] needs 8"},
      {"end beyond data", FileOf("{" + Entry("a", "\"U8\"", "[4]", "[0,4]") + "}", {1, 2}),
       "tensor 'a': data_offsets [0, 4] end beyond the data section of 2 bytes"},
      {"huge offsets",
       FileOf("{" + Entry("a", "\"U8\"", "[1]", "[9223372036854775806,9223372036854775807]") + "}"),
       "end beyond the data section of 0 bytes"},
      {"overlap",
       FileOf("{" + Entry("a", "\"U8\"", "[2]", "[0,2]") + "," +
                  Entry("b", "\"U8\"", "[2]", "[1,3]") + "}",
              {1, 2, 3}),
       "tensors 'a' [0, 2] and 'b' [1, 3] overlap"},
      {"same range twice",
       FileOf("{" + Entry("a", "\"U8\"", "[2]", "[0,2]") + "," +
                  Entry("b", "\"U8\"", "[2]", "[0,2]") + "}",
              {1, 2}),
       "overlap"},
      {"empty tensor inside another",
       FileOf("{" + Entry("a", "\"U8\"", "[2]", "[0,2]") + "," +
                  Entry("z", "\"U8\"", "[0]", "[1,1]") + "}",
              {1, 2}),
       "tensors 'a' [0, 2] and 'z' [1, 1] overlap"},
      {"gap between tensors",
       FileOf("{" + Entry("a", "\"U8\"", "[1]", "[0,1]") + "," +
                  Entry("b", "\"U8\"", "[1]", "[2,3]") + "}",
              {1, 2, 3}),
       "data bytes [1, 2) before tensor 'b' belong to no tensor (gap)"},
      {"gap at start", FileOf("{" + Entry("a", "\"U8\"", "[2]", "[1,3]") + "}", {1, 2, 3}),
       "data bytes [0, 1) before tensor 'a'"},
      {"trailing bytes", FileOf("{" + kU8Pair + "}", {1, 2, 3}),
       "data section is 3 bytes but the tensors cover only 2 (trailing bytes)"},
      {"data but no tensors", FileOf("{}", {0}),
       "data section is 1 bytes but the tensors cover only 0"},
      {"metadata not an object", FileOf(R"({"__metadata__":"x"})"),
       "expected __metadata__ to be an object of strings, got string"},
      {"metadata value not a string", FileOf(R"({"__metadata__":{"n":1}})"),
       "expected __metadata__['n'] to be a string, got 1"},
      {"metadata duplicate key", FileOf(R"({"__metadata__":{"n":"1","n":"2"}})"),
       "header has duplicate key 'n'"},
  };
  for (const CorruptCase& c : cases) {
    std::string message =
        ErrorOf([&] { SafetensorsFile::FromBytes(c.bytes, "corrupt.safetensors"); });
    EXPECT_EQ(message.rfind("[safetensors] corrupt.safetensors: ", 0), 0u)
        << c.what << ": " << message;
    EXPECT_NE(message.find(c.expected), std::string::npos)
        << c.what << ": expected \"" << c.expected << "\" in: " << message;
  }
}

Bytes ValidFile() {
  return SerializeSafetensors({{"w", DType::kF32, {2}, {0, 0, 0x80, 0x3F, 0, 0, 0, 0x40}},
                               {"b", DType::kS8, {3}, {1, 2, 3}}},
                              {{"format", "pt"}});
}

TEST(SafetensorsRead, EveryTruncationIsAnError) {
  const Bytes file = ValidFile();
  for (size_t length = 0; length < file.size(); ++length) {
    Bytes prefix(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(length));
    EXPECT_THROW(SafetensorsFile::FromBytes(prefix), Error) << "length " << length;
  }
  EXPECT_EQ(SafetensorsFile::FromBytes(file).names(), (std::vector<std::string>{"w", "b"}));
}

// Every single-byte corruption is either rejected with strata::Error or reads
// as a file whose views lie inside the buffer.
TEST(SafetensorsRead, SingleByteCorruptionsNeverEscapeTheBuffer) {
  const Bytes file = ValidFile();
  int accepted = 0;
  for (size_t i = 0; i < file.size(); ++i) {
    for (uint8_t value : {0x00, 0x01, 0x20, 0x22, 0x2C, 0x30, 0x39, 0x5B, 0x7D, 0x80, 0xFF}) {
      Bytes corrupt = file;
      corrupt[i] = value;
      const uint8_t* begin = corrupt.data();  // vector moves keep their buffer
      const uint8_t* end = begin + corrupt.size();
      try {
        SafetensorsFile st = SafetensorsFile::FromBytes(std::move(corrupt));
        ++accepted;
        for (const std::string& name : st.names()) {
          const TensorView& v = st.Get(name);
          EXPECT_GE(v.data.data(), begin);
          EXPECT_LE(v.data.data() + v.data.size(), end);
        }
      } catch (const Error&) {
      }
    }
  }
  EXPECT_GT(accepted, 0);  // e.g. changed tensor values
}

TEST_F(TempDir, AtomicWriteReplacesExistingFile) {
  const fs::path path = dir_ / "model.safetensors";
  WriteSafetensors(path, {{"old", DType::kU8, {1}, {7}}});
  WriteSafetensors(path, {{"new", DType::kU8, {2}, {8, 9}}});
  SafetensorsFile st = SafetensorsFile::Open(path);
  EXPECT_EQ(st.names(), (std::vector<std::string>{"new"}));
  EXPECT_EQ(ToBytes(st.Get("new").data), (Bytes{8, 9}));
  EXPECT_EQ(Listing(dir_), (std::set<std::string>{"model.safetensors"}));
}

TEST_F(TempDir, FailedWriteLeavesOldFileAndNoTempFile) {
  const fs::path path = dir_ / "model.safetensors";
  WriteSafetensors(path, {{"old", DType::kU8, {1}, {7}}});
  const Bytes before = ReadFile(path);

  std::string message = ErrorOf([&] {
    WriteSafetensors(path, {{"bad", DType::kF32, {2}, Bytes(5)}});
  });
  EXPECT_NE(message.find("[safetensors] " + path.string() + ": tensor 'bad'"), std::string::npos)
      << message;
  EXPECT_EQ(ReadFile(path), before);
  EXPECT_EQ(Listing(dir_), (std::set<std::string>{"model.safetensors"}));
}

TEST_F(TempDir, FailureAfterTheTempFileExistsRemovesIt) {
  // Renaming a file over a non-empty directory fails after the data is written.
  const fs::path target = dir_ / "occupied";
  fs::create_directories(target / "child");
  std::string message = ErrorOf([&] { WriteSafetensors(target, {{"w", DType::kU8, {1}, {1}}}); });
  EXPECT_NE(message.find("renaming"), std::string::npos) << message;
  EXPECT_EQ(Listing(dir_), (std::set<std::string>{"occupied"}));
  EXPECT_TRUE(fs::is_directory(target / "child"));
}

TEST_F(TempDir, WriteIntoMissingDirectoryFails) {
  std::string message = ErrorOf([&] { WriteSafetensors(dir_ / "missing" / "x.safetensors", {}); });
  EXPECT_NE(message.find("creating temporary file"), std::string::npos) << message;
}

TEST_F(TempDir, OpenReportsMissingFilesAndDirectories) {
  EXPECT_NE(ErrorOf([&] {
              SafetensorsFile::Open(dir_ / "nope.safetensors");
            }).find("nope.safetensors: cannot open: No such file"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { SafetensorsFile::Open(dir_); }).find("expected a regular file"),
            std::string::npos);
  WriteFile(dir_ / "empty.safetensors", {});
  EXPECT_NE(
      ErrorOf([&] { SafetensorsFile::Open(dir_ / "empty.safetensors"); }).find("file is 0 bytes"),
      std::string::npos);
}

TEST_F(TempDir, ShardedCheckpointReadsTensorsFromTheirShards) {
  const std::string shard1 = "model-00001-of-00002.safetensors";
  const std::string shard2 = "model-00002-of-00002.safetensors";
  WriteSafetensors(dir_ / shard1,
                   {{"layer.0.w", DType::kU8, {2}, {1, 2}}, {"embed", DType::kS8, {1}, {0xFF}}});
  WriteSafetensors(dir_ / shard2, {{"head", DType::kU32, {1}, {0xEF, 0xBE, 0xAD, 0xDE}}});
  WriteFile(
      dir_ / "model.safetensors.index.json",
      FromString(R"({"metadata":{"total_size":7,"format":"pt"},"weight_map":{)"
                 R"("embed":")" +
                 shard1 + R"(","layer.0.w":")" + shard1 + R"(","head":")" + shard2 + R"("}})"));

  for (const fs::path& path : {dir_, dir_ / "model.safetensors.index.json"}) {
    ShardedCheckpoint ckpt = ShardedCheckpoint::Open(path);
    EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"layer.0.w", "embed", "head"}));
    EXPECT_EQ(ckpt.metadata(),
              (std::map<std::string, std::string>{{"total_size", "7"}, {"format", "pt"}}));
    EXPECT_EQ(ToBytes(ckpt.Get("head").data), (Bytes{0xEF, 0xBE, 0xAD, 0xDE}));
    EXPECT_EQ(ckpt.Get("head").dtype, DType::kU32);
    EXPECT_EQ(ToBytes(ckpt.Get("embed").data), (Bytes{0xFF}));
    EXPECT_EQ(ToBytes(ckpt.Get("layer.0.w").data), (Bytes{1, 2}));
    EXPECT_TRUE(ckpt.contains("embed"));
    EXPECT_NE(ErrorOf([&] { ckpt.Get("lm_head"); }).find("no tensor named 'lm_head'"),
              std::string::npos);
  }
}

TEST_F(TempDir, ShardedCheckpointRejectsBadIndexes) {
  WriteSafetensors(dir_ / "s.safetensors", {{"a", DType::kU8, {1}, {1}}});
  struct Row {
    std::string index;
    std::string expected;
  };
  std::vector<Row> rows = {
      {R"({"weight_map":{"a":"s.safetensors","b":"s.safetensors"}})",
       "weight_map puts 'b' in 's.safetensors', but that shard has no such tensor"},
      {R"({"weight_map":{"a":"missing.safetensors"}})", "missing.safetensors: cannot open"},
      {R"({"weight_map":{"a":"../s.safetensors"}})", "must be a file name inside"},
      {R"({"weight_map":{"a":"/etc/passwd"}})", "must be a file name inside"},
      {R"({"weight_map":{"a":3}})", "weight_map['a']: expected a file name, got 3"},
      {R"({"metadata":{}})", "expected \"weight_map\" to be an object"},
      {R"({"weight_map":{"a":"s.safetensors","a":"s.safetensors"}})",
       "index has duplicate key 'a'"},
      {R"({"weight_map":)", "index is not valid JSON"},
      {R"([])", "expected the index to be a JSON object"},
  };
  const fs::path index = dir_ / "model.safetensors.index.json";
  for (const Row& row : rows) {
    WriteFile(index, FromString(row.index));
    std::string message = ErrorOf([&] { ShardedCheckpoint::Open(index); });
    EXPECT_EQ(message.rfind("[safetensors] ", 0), 0u) << message;
    EXPECT_NE(message.find(row.expected), std::string::npos) << row.index << " -> " << message;
  }
}

TEST_F(TempDir, ShardedCheckpointFallsBackToSingleFile) {
  EXPECT_NE(ErrorOf([&] {
              ShardedCheckpoint::Open(dir_);
            }).find("neither model.safetensors.index.json nor model.safetensors"),
            std::string::npos);
  WriteSafetensors(dir_ / "model.safetensors",
                   {{"b", DType::kU8, {1}, {5}}, {"a", DType::kU8, {1}, {6}}});
  ShardedCheckpoint ckpt = ShardedCheckpoint::Open(dir_);
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(ToBytes(ckpt.Get("a").data), (Bytes{6}));
  EXPECT_TRUE(ckpt.metadata().empty());
}

TEST(SafetensorsRead, DeeplyNestedHeaderIsAnErrorNotACrash) {
  // Issue 14: 65,000 levels of nesting overflowed the stack in copies and
  // error messages; the parser now stops at kMaxJsonDepth.
  std::string header = "{\"m\":" + std::string(65000, '[') + std::string(65000, ']') + "}";
  std::string error =
      ErrorOf([&] { SafetensorsFile::FromBytes(FileOf(header), "deep.safetensors"); });
  EXPECT_NE(error.find("nests deeper than 64 levels"), std::string::npos) << error;
  EXPECT_NE(error.find("deep.safetensors"), std::string::npos) << error;
}

TEST(SafetensorsChecksums, AFlippedByteIsAnErrorNamingTheTensor) {
  std::vector<TensorData> tensors = {{"w", DType::kF32, {2}, {0, 0, 128, 63, 0, 0, 0, 64}},
                                     {"b", DType::kU8, {3}, {1, 2, 3}}};
  auto metadata = ChecksumMetadata(tensors);
  ASSERT_EQ(metadata.size(), 2u);
  Bytes file = SerializeSafetensors(tensors, metadata);
  {
    SafetensorsFile st = SafetensorsFile::FromBytes(file, "good.safetensors");
    EXPECT_EQ(ToBytes(st.Get("w").data), tensors[0].bytes);  // verified and read
  }
  file[file.size() - 4] ^= 0x01;  // a bit of "w"'s second float (data: w then b)
  SafetensorsFile st = SafetensorsFile::FromBytes(file, "flipped.safetensors");
  EXPECT_EQ(ToBytes(st.Get("b").data), tensors[1].bytes);  // untouched tensors still read
  std::string error = ErrorOf([&] { st.Get("w"); });
  EXPECT_NE(error.find("flipped.safetensors"), std::string::npos) << error;
  EXPECT_NE(error.find("tensor 'w' does not match its checksum"), std::string::npos) << error;
}

}  // namespace
}  // namespace strata::io
