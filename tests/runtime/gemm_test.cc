// strata's GEMM (kernels/gemm.h) against a plain triple loop in long double:
// every layout of A and B, sizes that cut micro-tiles, cache blocks of k and
// of columns at odd places, f32 and f64, every micro-kernel this CPU runs
// (AVX-512, AVX2, portable: each forced in turn); and C computed in pieces
// equals C computed whole, bit for bit.
#include "kernels/gemm.h"

#include <gtest/gtest.h>

#include "strata/core/config.h"
#include "strata/core/error.h"
#include "strata/hlo/literal.h"
#include "strata/runtime/cpu.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace strata::runtime {
namespace {

struct Case {
  int64_t m, n, k;
  bool a_transposed, b_transposed;
};

std::string Name(const Case& c) {
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
         (c.a_transposed ? " A^T" : "") + (c.b_transposed ? " B^T" : "");
}

template <typename T>
std::vector<T> Random(int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(gen));
  return v;
}

// A is [m, k] or stored [k, m]; B is [k, n] or stored [n, k].
template <typename T>
struct Operands {
  Case c;
  std::vector<T> a = Random<T>(c.m * c.k, 1), b = Random<T>(c.k * c.n, 2);
  MatrixView<const T> A() const {
    return {a.data(), c.a_transposed ? 1 : c.k, c.a_transposed ? c.m : 1};
  }
  MatrixView<const T> B() const {
    return {b.data(), c.b_transposed ? 1 : c.n, c.b_transposed ? c.k : 1};
  }
  T At(MatrixView<const T> v, int64_t i, int64_t j) const {
    return v.data[i * v.row_stride + j * v.col_stride];
  }
};

// Checks C (row stride ldc) against the triple loop, element by element,
// within the rounding a k-term sum may gather, and that C's padding columns
// were not touched.
template <typename T>
void ExpectMatchesLoop(const Operands<T>& ops, const std::vector<T>& c, int64_t ldc, T pad) {
  const Case& cs = ops.c;
  const long double eps = std::numeric_limits<T>::epsilon();
  for (int64_t i = 0; i < cs.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      T got = c[i * ldc + j];
      if (j >= cs.n) {
        ASSERT_EQ(got, pad) << Name(cs) << ": wrote outside C at (" << i << ", " << j << ")";
        continue;
      }
      long double sum = 0, magnitude = 0;
      for (int64_t p = 0; p < cs.k; ++p) {
        long double term = static_cast<long double>(ops.At(ops.A(), i, p)) * ops.At(ops.B(), p, j);
        sum += term;
        magnitude += std::fabs(term);
      }
      long double bound = 2 * cs.k * eps * magnitude + std::numeric_limits<T>::min();
      ASSERT_LE(std::fabs(got - sum), bound)
          << Name(cs) << " at (" << i << ", " << j << "): got " << got << ", loop " << sum;
    }
  }
}

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = [] {
    // Micro-tiles are 6 x 16 (f32) and 6 x 8 (f64) for AVX2 and portable,
    // 6 x 64 and 6 x 32 for AVX-512; k blocks are 512 (f32) and 256 (f64);
    // column blocks 3072 (f32) and 2048 (f64); row blocks 72.
    std::vector<std::vector<int64_t>> sizes = {
        {1, 1, 1},
        {5, 17, 3},
        {6, 16, 512},
        {7, 33, 513},
        {12, 8, 257},
        {12, 32, 256},
        {13, 47, 255},
        {24, 64, 700},
        {150, 40, 1100},
        {73, 31, 64},
        {13, 3100, 20},
        {2, 2050, 9},
        // every short last row tile (m mod 6 = 3, 4), full-width and not
        {9, 64, 30},
        {64, 130, 77},
        {3, 128, 5},
        {76, 64, 600}};
    std::vector<Case> out;
    for (const auto& s : sizes) {
      for (int layout = 0; layout < 4; ++layout) {
        out.push_back({s[0], s[1], s[2], (layout & 1) != 0, (layout & 2) != 0});
      }
    }
    return out;
  }();
  return cases;
}

template <typename T>
void CheckEveryCase() {
  for (const Case& c : Cases()) {
    Operands<T> ops{c};
    const T pad = T(12345);
    int64_t ldc = c.n + 3;  // C is a block of a wider matrix
    std::vector<T> out(c.m * ldc, pad);
    Gemm<T>(c.m, c.n, c.k, ops.A(), ops.B(), out.data(), ldc);
    ExpectMatchesLoop(ops, out, ldc, pad);
  }
}

// Runs `check` once under each micro-kernel this CPU runs. On an emulated
// CPU (STRATA_EMULATED_CPU, which CTest sets for its qemu runs) only under
// the CPU's own: the narrower variants are the same code the native run
// checks, and emulating each again costs minutes of CI.
template <typename F>
void UnderEveryIsa(F check) {
  std::vector<Isa> isas = SupportedIsas();
  if (std::getenv("STRATA_EMULATED_CPU")) isas = {isas.back()};
  for (Isa isa : isas) {
    SCOPED_TRACE(std::string(IsaName(isa)) + " micro-kernel");
    CapIsa(isa);
    // avx512bf16's own bf16 path, even on a CPU whose default widens.
    PairBf16Dots(isa == Isa::kAvx512Bf16 ? std::optional<bool>(true) : std::nullopt);
    EXPECT_EQ(KernelIsa(), isa);
    check(isa);
  }
  CapIsa(std::nullopt);
  PairBf16Dots(std::nullopt);
}

TEST(Gemm, F32MatchesATripleLoopInEveryLayoutUnderEveryIsa) {
  UnderEveryIsa([](Isa) { CheckEveryCase<float>(); });
}
TEST(Gemm, F64MatchesATripleLoopInEveryLayoutUnderEveryIsa) {
  UnderEveryIsa([](Isa) { CheckEveryCase<double>(); });
}

// The tile each variant uses (the dot kernel cuts C on its edges).
TEST(Gemm, EachIsaHasItsTile) {
  UnderEveryIsa([](Isa isa) {
    const GemmTile f32 = GemmTileFor<float>(), f64 = GemmTileFor<double>();
    if (isa >= Isa::kAvx512) {
      EXPECT_EQ(f32.rows, 6);
      EXPECT_EQ(f32.columns, 64);
      EXPECT_EQ(f64.columns, 32);
    } else {
      EXPECT_EQ(f32.rows, 6);
      EXPECT_EQ(f32.columns, 16);
      EXPECT_EQ(f64.columns, 8);
    }
  });
}

// The flags the kernel reports for this CPU in /proc/cpuinfo.
std::set<std::string> CpuinfoFlags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    return {std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
  }
  return {};
}

// What cpuid says agrees with the kernel's /proc/cpuinfo; the portable
// variant is the floor, and the widest is the default.
TEST(Gemm, TheDefaultIsTheWidestTheCpuRunsAndWiderIsAnError) {
  const std::set<std::string> flags = CpuinfoFlags();
  ASSERT_FALSE(flags.empty()) << "no flags line in /proc/cpuinfo";
  auto has = [&](std::initializer_list<const char*> names) {
    for (const char* n : names) {
      if (!flags.count(n)) return false;
    }
    return true;
  };
  const bool avx512 = has({"avx512f", "avx512bw", "avx512dq", "avx512vl", "fma"});
  const Isa expected = avx512 && has({"avx512_bf16"}) ? Isa::kAvx512Bf16
                       : avx512                       ? Isa::kAvx512
                       : has({"avx2", "fma"})         ? Isa::kAvx2
                                                      : Isa::kPortable;
  EXPECT_EQ(CpuIsa(), expected);
  CapIsa(std::nullopt);
  if (GetConfig().isa.empty()) {
    EXPECT_EQ(KernelIsa(), CpuIsa());
  }
  EXPECT_EQ(SupportedIsas().front(), Isa::kPortable);
  EXPECT_EQ(SupportedIsas().back(), CpuIsa());
  if (CpuIsa() != Isa::kAvx512Bf16) {  // a CPU without it cannot be made to run it
    try {
      CapIsa(Isa::kAvx512Bf16);
      ADD_FAILURE() << "capping above the CPU's ISA must be an Error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("this CPU runs at most"), std::string::npos) << e.what();
    }
  }
}

// bf16 dots pair on vdpbf16ps only under avx512bf16 and, by default, only
// off Intel CPUs (the vendor as /proc/cpuinfo names it), where it pays.
TEST(Gemm, Bf16DotsPairOnlyWhereTheCpuRunsThemFaster) {
  if (std::getenv("STRATA_EMULATED_CPU")) GTEST_SKIP() << "/proc/cpuinfo is the host's";
  std::ifstream in("/proc/cpuinfo");
  std::string line, vendor;
  while (std::getline(in, line) && vendor.empty()) {
    if (line.rfind("vendor_id", 0) == 0) vendor = line.substr(line.find(':') + 2);
  }
  ASSERT_FALSE(vendor.empty()) << "no vendor_id line in /proc/cpuinfo";
  for (Isa isa : SupportedIsas()) {
    CapIsa(isa);
    EXPECT_EQ(PairedBf16Dots(), isa == Isa::kAvx512Bf16 && vendor != "GenuineIntel")
        << IsaName(isa) << " on " << vendor;
    PairBf16Dots(true);
    EXPECT_EQ(PairedBf16Dots(), isa == Isa::kAvx512Bf16) << "forced, under " << IsaName(isa);
    PairBf16Dots(std::nullopt);
  }
  CapIsa(std::nullopt);
}

// The dot kernel splits C into row or column pieces, one per thread; each
// element must be summed the same way whatever piece it falls in, so a
// result never depends on the thread count. Piece edges here cut micro-tiles.
template <typename T>
void CheckPiecesEqualWhole() {
  for (Case c : {Case{151, 70, 700, false, true}, Case{40, 150, 600, true, false},
                 Case{33, 47, 1030, false, false}}) {
    Operands<T> ops{c};
    std::vector<T> whole(c.m * c.n), rows(c.m * c.n), columns(c.m * c.n);
    Gemm<T>(c.m, c.n, c.k, ops.A(), ops.B(), whole.data(), c.n);
    int64_t row_cuts[] = {0, 7, c.m / 2, c.m};
    for (int piece = 0; piece < 3; ++piece) {
      int64_t r0 = row_cuts[piece], r1 = row_cuts[piece + 1];
      MatrixView<const T> a = ops.A();
      a.data += r0 * a.row_stride;
      Gemm<T>(r1 - r0, c.n, c.k, a, ops.B(), rows.data() + r0 * c.n, c.n);
    }
    int64_t column_cuts[] = {0, 5, c.n / 2 + 1, c.n};
    for (int piece = 0; piece < 3; ++piece) {
      int64_t c0 = column_cuts[piece], c1 = column_cuts[piece + 1];
      MatrixView<const T> b = ops.B();
      b.data += c0 * b.col_stride;
      Gemm<T>(c.m, c1 - c0, c.k, ops.A(), b, columns.data() + c0, c.n);
    }
    for (int64_t i = 0; i < c.m * c.n; ++i) {
      ASSERT_EQ(rows[i], whole[i]) << Name(c) << " element " << i << " (row pieces)";
      ASSERT_EQ(columns[i], whole[i]) << Name(c) << " element " << i << " (column pieces)";
    }
  }
}

TEST(Gemm, PiecesEqualTheWholeBitForBitUnderEveryIsa) {
  UnderEveryIsa([](Isa) {
    CheckPiecesEqualWhole<float>();
    CheckPiecesEqualWhole<double>();
  });
}

// ---- bf16 x bf16 -> f32 (GemmBf16) ----

uint16_t ToBf16(float f) {  // round to nearest even (no NaNs here)
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

float FromBf16(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

struct Bf16Operands {
  Case c;
  std::vector<uint16_t> a = Round(Random<float>(c.m * c.k, 1)),
                        b = Round(Random<float>(c.k * c.n, 2));
  static std::vector<uint16_t> Round(const std::vector<float>& v) {
    std::vector<uint16_t> out;
    for (float x : v) out.push_back(ToBf16(x));
    return out;
  }
  MatrixView<const uint16_t> A() const {
    return {a.data(), c.a_transposed ? 1 : c.k, c.a_transposed ? c.m : 1};
  }
  MatrixView<const uint16_t> B() const {
    return {b.data(), c.b_transposed ? 1 : c.n, c.b_transposed ? c.k : 1};
  }
  static float At(MatrixView<const uint16_t> v, int64_t i, int64_t j) {
    return FromBf16(v.data[i * v.row_stride + j * v.col_stride]);
  }
  // C[i, j] by the triple loop in long double, and the sum of its terms'
  // magnitudes (for the f32 rounding bound).
  std::pair<long double, long double> LoopSum(int64_t i, int64_t j) const {
    long double sum = 0, magnitude = 0;
    for (int64_t p = 0; p < c.k; ++p) {
      long double term = static_cast<long double>(At(A(), i, p)) * At(B(), p, j);
      sum += term;
      magnitude += std::fabs(term);
    }
    return {sum, magnitude};
  }
};

// Each product of two bf16 values is exact in f32, so C is a k-term f32
// sum: within the same bound as the f32 GEMM's.
TEST(Gemm, Bf16MatchesATripleLoopInEveryLayoutUnderEveryIsa) {
  UnderEveryIsa([](Isa) {
    for (const Case& c : Cases()) {
      Bf16Operands ops{c};
      const float pad = 12345.0f;
      const int64_t ldc = c.n + 3;
      std::vector<float> out(c.m * ldc, pad);
      GemmBf16(c.m, c.n, c.k, ops.A(), ops.B(), out.data(), ldc);
      const long double eps = std::numeric_limits<float>::epsilon();
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t j = 0; j < ldc; ++j) {
          const float got = out[i * ldc + j];
          if (j >= c.n) {
            ASSERT_EQ(got, pad) << Name(c) << ": wrote outside C at (" << i << ", " << j << ")";
            continue;
          }
          const auto [sum, magnitude] = ops.LoopSum(i, j);
          ASSERT_LE(std::fabs(got - sum), 2 * c.k * eps * magnitude)
              << Name(c) << " at (" << i << ", " << j << "): got " << got << ", loop " << sum;
        }
      }
    }
  });
}

// Row and column pieces cut on GemmBf16Tile()'s edges and off them give the
// whole product's bits.
TEST(Gemm, Bf16PiecesEqualTheWholeBitForBitUnderEveryIsa) {
  UnderEveryIsa([](Isa) {
    for (Case c : {Case{151, 70, 701, false, true}, Case{40, 150, 600, true, false}}) {
      Bf16Operands ops{c};
      std::vector<float> whole(c.m * c.n), rows(c.m * c.n), columns(c.m * c.n);
      GemmBf16(c.m, c.n, c.k, ops.A(), ops.B(), whole.data(), c.n);
      const GemmTile tile = GemmBf16Tile();
      const int64_t row_cuts[] = {0, 7, tile.rows * 4, c.m};
      const int64_t column_cuts[] = {0, 5, tile.columns, c.n};
      for (int piece = 0; piece < 3; ++piece) {
        MatrixView<const uint16_t> a = ops.A(), b = ops.B();
        a.data += row_cuts[piece] * a.row_stride;
        GemmBf16(row_cuts[piece + 1] - row_cuts[piece], c.n, c.k, a, ops.B(),
                 rows.data() + row_cuts[piece] * c.n, c.n);
        b.data += column_cuts[piece] * b.col_stride;
        GemmBf16(c.m, column_cuts[piece + 1] - column_cuts[piece], c.k, ops.A(), b,
                 columns.data() + column_cuts[piece], c.n);
      }
      for (int64_t i = 0; i < c.m * c.n; ++i) {
        ASSERT_EQ(rows[i], whole[i]) << Name(c) << " element " << i << " (row pieces)";
        ASSERT_EQ(columns[i], whole[i]) << Name(c) << " element " << i << " (column pieces)";
      }
    }
  });
}

// Without vdpbf16ps a bf16 product is the f32 one of the widened operands,
// summed in Gemm<float>'s order: its bits, in every layout and at every
// block edge of the cases (k over several blocks, rows and columns over
// several).
TEST(Gemm, Bf16WithoutBf16InstructionsIsTheF32ProductBitForBit) {
  UnderEveryIsa([](Isa isa) {
    // avx512bf16 without its pairs (an Intel CPU's default) widens too.
    if (isa == Isa::kAvx512Bf16) PairBf16Dots(false);
    EXPECT_FALSE(PairedBf16Dots());
    for (const Case& c : Cases()) {
      Bf16Operands ops{c};
      Operands<float> wide{c};
      for (size_t i = 0; i < ops.a.size(); ++i) wide.a[i] = FromBf16(ops.a[i]);
      for (size_t i = 0; i < ops.b.size(); ++i) wide.b[i] = FromBf16(ops.b[i]);
      std::vector<float> f32(c.m * c.n), bf16(c.m * c.n);
      Gemm<float>(c.m, c.n, c.k, wide.A(), wide.B(), f32.data(), c.n);
      GemmBf16(c.m, c.n, c.k, ops.A(), ops.B(), bf16.data(), c.n);
      for (int64_t i = 0; i < c.m * c.n; ++i) {
        ASSERT_EQ(bf16[i], f32[i]) << Name(c) << " element " << i;
      }
    }
  });
}

// A bf16 result (rounded as the tiles leave the registers where vdpbf16ps
// runs): each element is the scalar rounding of the f32 product (checked
// against the triple loop above), hence within half a bf16 ulp of that
// product's bound from the loop; nothing outside C's columns is written;
// the f32 sums' space is needed only where GemmBf16NeedsSums says, and a
// null one is made up for where it is.
TEST(Gemm, Bf16NarrowedResultIsTheRoundedProductUnderEveryIsa) {
  UnderEveryIsa([](Isa) {
    for (const Case& c : Cases()) {
      Bf16Operands ops{c};
      std::vector<float> wide(c.m * c.n);
      GemmBf16(c.m, c.n, c.k, ops.A(), ops.B(), wide.data(), c.n);
      const uint16_t pad = 0x1234;
      const int64_t ldn = c.n + 5;
      const bool needs_sums = GemmBf16NeedsSums(c.k);
      std::vector<float> sums(needs_sums ? c.m * c.n : 0);
      std::vector<uint16_t> out(c.m * ldn, pad), unaided(c.m * ldn, pad);
      GemmBf16(c.m, c.n, c.k, ops.A(), ops.B(), needs_sums ? sums.data() : nullptr, c.n, out.data(),
               ldn);
      GemmBf16(c.m, c.n, c.k, ops.A(), ops.B(), nullptr, c.n, unaided.data(), ldn);
      const long double eps = std::numeric_limits<float>::epsilon();
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t j = 0; j < ldn; ++j) {
          const uint16_t got = out[i * ldn + j];
          ASSERT_EQ(unaided[i * ldn + j], got) << Name(c) << " at (" << i << ", " << j << ")";
          if (j >= c.n) {
            ASSERT_EQ(got, pad) << Name(c) << ": wrote outside C at (" << i << ", " << j << ")";
            continue;
          }
          ASSERT_EQ(got, hlo::FloatToBFloat16(wide[i * c.n + j]))
              << Name(c) << " at (" << i << ", " << j << ")";
          const auto [sum, magnitude] = ops.LoopSum(i, j);
          const long double bound = 2 * c.k * eps * magnitude + std::ldexp(std::fabs(sum), -8);
          ASSERT_LE(std::fabs(FromBf16(got) - sum), bound * (1 + 1e-6L))
              << Name(c) << " at (" << i << ", " << j << "): got " << FromBf16(got) << ", loop "
              << sum;
        }
      }
    }
  });
}

// The vectorized rounding of f32 to bf16 (the dot's bf16 results, the
// convert kernel) against the literals' scalar one, under every variant:
// ties, just past ties, subnormals (not flushed), the largest floats
// (rounding to infinity), infinities, NaNs whose top bits are zero, and a
// length that leaves a scalar tail.
TEST(Gemm, Bf16NarrowingIsTheScalarRoundingUnderEveryIsa) {
  std::vector<float> x;
  for (uint32_t bits :
       {0x3f808000u, 0x3f818000u, 0x3f808001u, 0xbf808000u, 0x00000001u, 0x00008000u, 0x00018000u,
        0x807fffffu, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u, 0xff800001u,
        0x7fc00000u, 0u, 0x80000000u}) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    x.push_back(f);
  }
  std::mt19937 gen(7);
  for (int i = 0; i < 1000; ++i) {
    uint32_t bits = gen();
    float f;
    std::memcpy(&f, &bits, sizeof f);
    x.push_back(f);
  }
  UnderEveryIsa([&](Isa) {
    for (size_t length : {x.size(), x.size() - 5, size_t{7}}) {
      std::vector<uint16_t> out(length, 0x1234);
      NarrowToBf16(x.data(), out.data(), static_cast<int64_t>(length));
      for (size_t i = 0; i < length; ++i) {
        ASSERT_EQ(out[i], hlo::FloatToBFloat16(x[i])) << "element " << i << " of " << length;
      }
    }
  });
}

}  // namespace
}  // namespace strata::runtime
