// HLO text, as `strata run` reads it: parse and verify, print and parse again
// (the printer's round trip), compile twice (with the optimizing passes and
// fusion, and without), run both on the same small inputs, compare.
//
// A program is run only when it is small (every array at most kMaxElements,
// so a fuzzed f32[1000000000] is a compile, not an allocation of gigabytes)
// and has no while loop: a loop's trip count is whatever the fuzzed condition
// makes it, and a loop that never ends is a correct run of a wrong program,
// not a finding. Such programs are still parsed, verified and compiled.
#include <fmt/core.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "harnesses.h"
#include "strata/compiler/compile.h"
#include "strata/core/error.h"
#include "strata/hlo/text.h"
#include "strata/runtime/communicator.h"

namespace strata::fuzz {
namespace {

constexpr int64_t kMaxElements = 1 << 14;
constexpr int64_t kMaxTotalElements = 1 << 18;
constexpr int64_t kMaxPartitions = 4;

// Why a verified program is not run, or "" when it is.
std::string WhyNotRun(const hlo::Module& module) {
  if (module.num_partitions() > kMaxPartitions) return "too many partitions";
  int64_t total = 0;
  for (const auto& computation : module.computations()) {
    for (const auto& instruction : computation->instructions()) {
      if (instruction->opcode() == hlo::Opcode::kWhile) return "a while loop";
      for (const Shape& leaf : instruction->shape().Leaves()) {
        int64_t n = leaf.num_elements();
        if (n > kMaxElements) return "a large array";
        total += n;
      }
    }
  }
  return total > kMaxTotalElements ? "large arrays" : "";
}

uint64_t Mix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Small values that every dtype holds exactly: integers in [-3, 8] (indices
// inside and outside small arrays), floats in multiples of 1/2 in [-2, 2].
std::vector<uint8_t> InputBytes(const Shape& shape, uint64_t& state) {
  std::vector<uint8_t> bytes(shape.byte_size());
  // The same nine values as f16 and bf16 bit patterns: -2, -1.5, ..., 2.
  static constexpr uint16_t kF16[] = {0xC000, 0xBE00, 0xBC00, 0xB800, 0x0000,
                                      0x3800, 0x3C00, 0x3E00, 0x4000};
  static constexpr uint16_t kBF16[] = {0xC000, 0xBFC0, 0xBF80, 0xBF00, 0x0000,
                                       0x3F00, 0x3F80, 0x3FC0, 0x4000};
  const int64_t size = DTypeSize(shape.dtype());
  for (int64_t i = 0; i < shape.num_elements(); ++i) {
    uint64_t r = Mix(state);
    uint8_t* out = bytes.data() + i * size;
    auto put = [&](auto value) { std::memcpy(out, &value, sizeof(value)); };
    int64_t small = static_cast<int64_t>(r % 12) - 3;
    double half = (static_cast<double>(r % 9) - 4) / 2;
    switch (shape.dtype()) {
      case DType::kPred:
        put(static_cast<uint8_t>(r & 1));
        break;
      case DType::kS8:
        put(static_cast<int8_t>(small));
        break;
      case DType::kS32:
        put(static_cast<int32_t>(small));
        break;
      case DType::kS64:
        put(small);
        break;
      case DType::kU8:
        put(static_cast<uint8_t>(r % 9));
        break;
      case DType::kU32:
        put(static_cast<uint32_t>(r % 9));
        break;
      case DType::kU64:
        put(static_cast<uint64_t>(r % 9));
        break;
      case DType::kF16:
        put(kF16[r % 9]);
        break;
      case DType::kBF16:
        put(kBF16[r % 9]);
        break;
      case DType::kF32:
        put(static_cast<float>(half));
        break;
      case DType::kF64:
        put(half);
        break;
      case DType::kS16:
        put(static_cast<int16_t>(small));
        break;
      case DType::kU16:
        put(static_cast<uint16_t>(r % 9));
        break;
      case DType::kC64: {
        const float parts[2] = {static_cast<float>(half), static_cast<float>((r >> 8) % 5) - 2};
        std::memcpy(out, parts, sizeof parts);
        break;
      }
      case DType::kC128: {
        const double parts[2] = {half, static_cast<double>((r >> 8) % 5) - 2};
        std::memcpy(out, parts, sizeof parts);
        break;
      }
      case DType::kToken:
        break;
    }
  }
  return bytes;
}

double AsDouble(const uint8_t* p, DType dtype) {
  switch (dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kF64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
    }
    default:
      return 0;  // f16 is compared bit for bit
  }
}

// The optimized program may reassociate, fuse and fold, so floats agree to a
// relative 1e-4 (1e-2 in bf16); NaN matches NaN; integers match exactly.
void Compare(const std::vector<runtime::Buffer>& optimized,
             const std::vector<runtime::Buffer>& reference, int64_t partition) {
  if (optimized.size() != reference.size()) {
    throw Finding(fmt::format("partition {}: {} results with the passes, {} without", partition,
                              optimized.size(), reference.size()));
  }
  for (size_t leaf = 0; leaf < optimized.size(); ++leaf) {
    const Shape& shape = reference[leaf].shape();
    if (optimized[leaf].shape() != shape) {
      throw Finding(fmt::format("partition {} result {}: {} with the passes, {} without", partition,
                                leaf, optimized[leaf].shape().ToString(), shape.ToString()));
    }
    const DType dtype = shape.dtype();
    const int64_t size = DTypeSize(dtype);
    for (int64_t i = 0; i < shape.num_elements(); ++i) {
      const uint8_t* a = optimized[leaf].data() + i * size;
      const uint8_t* b = reference[leaf].data() + i * size;
      if (std::memcmp(a, b, size) == 0) continue;
      // A complex element is compared part by part, as two floats.
      const DType part = IsComplex(dtype) ? ComplexPartType(dtype) : dtype;
      if (part == DType::kF32 || part == DType::kF64 || part == DType::kBF16) {
        for (int64_t offset = 0; offset < size; offset += DTypeSize(part)) {
          double x = AsDouble(a + offset, part), y = AsDouble(b + offset, part);
          double tolerance =
              (part == DType::kBF16 ? 1e-2 : 1e-4) * std::max({1.0, std::abs(x), std::abs(y)});
          if ((std::isnan(x) && std::isnan(y)) || std::abs(x - y) <= tolerance) continue;
          throw Finding(
              fmt::format("partition {} result {} ({}) element {}: {} with the passes, "
                          "{} without",
                          partition, leaf, shape.ToString(), i, x, y));
        }
        continue;
      }
      throw Finding(fmt::format("partition {} result {} ({}) element {} differs with the passes",
                                partition, leaf, shape.ToString(), i));
    }
  }
}

const runtime::Client& FuzzClient() {
  static runtime::Client client(kMaxPartitions, 1);
  return client;
}

std::vector<std::vector<runtime::Buffer>> RunAll(
    const runtime::Executable& exe, const std::vector<std::vector<runtime::Buffer>>& args) {
  const int64_t n = static_cast<int64_t>(args.size());
  if (n == 1) return {exe.Run(args[0], FuzzClient().device(0))};
  std::vector<const runtime::Device*> devices;
  for (int64_t p = 0; p < n; ++p) devices.push_back(FuzzClient().device(p));
  auto communicator = runtime::MakeInProcessCommunicator(n, std::chrono::milliseconds(5000));
  return exe.RunPartitioned(args, devices, *communicator);
}

}  // namespace

void HloText(Bytes input) {
  std::string_view text(reinterpret_cast<const char*>(input.data()), input.size());
  std::unique_ptr<hlo::Module> module = hlo::ParseModule(text);

  std::string printed = hlo::ToText(*module);
  std::unique_ptr<hlo::Module> reparsed;
  try {
    reparsed = hlo::ParseModule(printed);
  } catch (const Error& e) {
    throw Finding(fmt::format("the printed module does not parse: {}\n{}", e.what(), printed));
  }
  if (hlo::ToText(*reparsed) != printed) {
    throw Finding(fmt::format("printing the reparsed module changes it:\n{}\n---\n{}", printed,
                              hlo::ToText(*reparsed)));
  }

  compiler::CompileOptions optimizing;
  optimizing.client = &FuzzClient();
  compiler::CompileOptions plain = optimizing;
  plain.run_passes = false;
  plain.fuse = false;
  auto optimized = compiler::Compile(*module, optimizing);
  std::unique_ptr<runtime::Executable> reference;
  try {
    reference = compiler::Compile(*module, plain);
  } catch (const InternalError&) {
    throw;
  } catch (const Error& e) {
    throw Finding(fmt::format("compiles with the passes but not without: {}", e.what()));
  }
  if (!WhyNotRun(*module).empty()) return;

  uint64_t state = std::hash<std::string_view>()(text);
  std::vector<std::vector<runtime::Buffer>> args(module->num_partitions());
  for (size_t p = 0; p < args.size(); ++p) {
    for (const Shape& shape : optimized->parameter_shapes()) {
      args[p].push_back(
          runtime::Buffer::FromHost(shape, InputBytes(shape, state), FuzzClient().device(p)));
    }
  }
  std::vector<std::vector<runtime::Buffer>> with_passes;
  try {
    with_passes = RunAll(*optimized, args);
  } catch (const InternalError&) {
    throw;
  } catch (const Error& e) {
    // A run-time error (an index check, a collective's mismatch) must be the
    // same without the passes.
    try {
      RunAll(*reference, args);
    } catch (const Error&) {
      return;
    }
    throw Finding(fmt::format("fails with the passes but runs without: {}", e.what()));
  }
  std::vector<std::vector<runtime::Buffer>> without = RunAll(*reference, args);
  for (size_t p = 0; p < args.size(); ++p) Compare(with_passes[p], without[p], p);
}

}  // namespace strata::fuzz
