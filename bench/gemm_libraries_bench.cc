// Which GEMM for f32 dots: strata's own (kernels/gemm.h), oneDNN's
// dnnl_sgemm, Eigen and OpenBLAS on C[1024,1024] = A[1024,1024] B[1024,1024],
// in one process, 2 threads each. Only oneDNN is linked (the benchmarks'
// GEMM peer): Eigen is
// header-only and compiled in only when its headers are installed
// (libeigen3-dev), else it registers no benchmark; OpenBLAS is dlopen'ed at
// run time (libopenblas0), else its benchmark reports itself skipped.
// Run without --benchmark_enable_random_interleaving: see BM_SgemmOpenBlas.
// Results: bench/RESULTS.md.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <dnnl.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "kernels/gemm.h"
#include "strata/runtime/device.h"

// Debian installs Eigen under /usr/include/eigen3, which is not on the
// include path; its headers include each other relatively, so both work.
#if __has_include(<Eigen/Dense>)
#include <Eigen/Dense>
#define STRATA_BENCH_HAVE_EIGEN 1
#elif __has_include(<eigen3/Eigen/Dense>)
#include <eigen3/Eigen/Dense>
#define STRATA_BENCH_HAVE_EIGEN 1
#endif

namespace strata::runtime {
namespace {

constexpr int64_t kSize = 1024;
constexpr int kThreads = 2;

// Row-major A, B and C, 64-byte aligned, inputs filled.
struct GemmOperands {
  std::shared_ptr<uint8_t> a_owner = AllocateAligned(kSize * kSize * 4);
  std::shared_ptr<uint8_t> b_owner = AllocateAligned(kSize * kSize * 4);
  std::shared_ptr<uint8_t> c_owner = AllocateAligned(kSize * kSize * 4);
  float* a = reinterpret_cast<float*>(a_owner.get());
  float* b = reinterpret_cast<float*>(b_owner.get());
  float* c = reinterpret_cast<float*>(c_owner.get());
  GemmOperands() {
    for (int64_t i = 0; i < kSize * kSize; ++i) {
      a[i] = static_cast<float>(i % 7) * 0.25f;
      b[i] = static_cast<float>(i % 5) * 0.5f;
    }
    std::fill_n(c, kSize * kSize, 0.0f);
  }
};

// Spot-checks C against plain dot products, so a library that did nothing
// cannot pass for a fast one.
bool ProductIsRight(const GemmOperands& g) {
  for (int64_t i : {int64_t{0}, int64_t{517}, kSize - 1}) {
    for (int64_t j : {int64_t{0}, int64_t{300}, kSize - 1}) {
      double expected = 0;
      for (int64_t p = 0; p < kSize; ++p)
        expected += double{g.a[i * kSize + p]} * g.b[p * kSize + j];
      if (std::abs(g.c[i * kSize + j] - expected) > 1e-4 * std::abs(expected) + 1e-3) return false;
    }
  }
  return true;
}

void Finish(benchmark::State& state, const GemmOperands& g) {
  if (!ProductIsRight(g)) state.SkipWithError("wrong product");
  double flops = 2.0 * kSize * kSize * kSize;
  state.counters["GFLOPS"] = benchmark::Counter(
      flops * static_cast<double>(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
}

// oneDNN threads through OpenMP and uses every core (2 here) by default.
void BM_SgemmDnnl(benchmark::State& state) {
  GemmOperands g;
  for (auto _ : state) {
    if (dnnl_sgemm('N', 'N', kSize, kSize, kSize, 1.0f, g.a, kSize, g.b, kSize, 0.0f, g.c, kSize) !=
        dnnl_success) {
      state.SkipWithError("dnnl_sgemm failed");
      return;
    }
    benchmark::ClobberMemory();
  }
  Finish(state, g);
}
BENCHMARK(BM_SgemmDnnl)->UseRealTime()->Unit(benchmark::kMillisecond);

// Each of 2 std::threads multiplies half the rows of C[1024, N] = A[1024, K]
// B[K, N] with a single-threaded GEMM (`half`), as strata's pool splits a
// dot, at the model's shapes: strata's own (kernels/gemm.h), or oneDNN's
// sgemm with each caller's OpenMP team pinned to one thread (how strata
// called it until 2026-11-30, when its two calls turned out slow at N = 512).
template <typename Half>
void RunHalves(benchmark::State& state, Half half) {
  const int64_t m = 1024, k = state.range(0), n = state.range(1);
  std::vector<float> a(m * k), b(k * n), c(m * n);
  for (int64_t i = 0; i < m * k; ++i) a[i] = static_cast<float>(i % 7) * 0.25f;
  for (int64_t i = 0; i < k * n; ++i) b[i] = static_cast<float>(i % 5) * 0.5f;
  auto rows = [&](int64_t r0) {
    half(m / 2, n, k, a.data() + r0 * k, b.data(), c.data() + r0 * n);
  };
  for (auto _ : state) {
    std::thread helper(rows, m / 2);
    rows(0);
    helper.join();
    benchmark::ClobberMemory();
  }
  for (int64_t i : {int64_t{0}, m / 2 + 3, m - 1}) {
    for (int64_t j : {int64_t{0}, n - 1}) {
      double expected = 0;
      for (int64_t p = 0; p < k; ++p) expected += double{a[i * k + p]} * b[p * n + j];
      if (std::abs(c[i * n + j] - expected) > 1e-4 * std::abs(expected) + 1e-3)
        state.SkipWithError("wrong product");
    }
  }
  state.counters["GFLOPS"] =
      benchmark::Counter(2.0 * m * n * k * static_cast<double>(state.iterations()) * 1e-9,
                         benchmark::Counter::kIsRate);
}

void HalvesShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"K", "N"});
  for (auto [k, n] : {std::pair{512, 512}, {512, 1536}, {1536, 512}, {1024, 1024}}) b->Args({k, n});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

void BM_SgemmStrataHalves(benchmark::State& state) {
  RunHalves(state, [](int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c) {
    Gemm<float>(m, n, k, {a, k, 1}, {b, n, 1}, c, n);
  });
}
BENCHMARK(BM_SgemmStrataHalves)->Apply(HalvesShapes);

void BM_SgemmDnnlHalves(benchmark::State& state) {
  // libdnnl brings GNU OpenMP; each caller's team size is set through it.
  using SetThreads = void (*)(int);
  static auto set_threads =
      reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (!set_threads) {
    state.SkipWithError("omp_set_num_threads not found");
    return;
  }
  RunHalves(state, [](int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c) {
    set_threads(1);
    dnnl_sgemm('N', 'N', m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
  });
}
BENCHMARK(BM_SgemmDnnlHalves)->Apply(HalvesShapes);

#ifdef STRATA_BENCH_HAVE_EIGEN
// Eigen parallelizes its GEMM only under OpenMP, which this build does not
// enable; instead each of `threads` std::threads multiplies a band of rows
// (a simple stand-in for that path, which also splits the rows of C).
void BM_SgemmEigen(benchmark::State& state) {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Map = Eigen::Map<RowMajor, Eigen::Aligned64>;
  int threads = static_cast<int>(state.range(0));
  GemmOperands g;
  Map a(g.a, kSize, kSize), b(g.b, kSize, kSize), c(g.c, kSize, kSize);
  int64_t band = kSize / threads;
  auto multiply_band = [&](int t) {
    c.middleRows(t * band, band).noalias() = a.middleRows(t * band, band) * b;
  };
  for (auto _ : state) {
    std::vector<std::thread> helpers;
    for (int t = 1; t < threads; ++t) helpers.emplace_back(multiply_band, t);
    multiply_band(0);
    for (auto& h : helpers) h.join();
    benchmark::ClobberMemory();
  }
  Finish(state, g);
}
BENCHMARK(BM_SgemmEigen)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(kThreads)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
#endif

// OpenBLAS through dlopen, so that no build needs it. Loading starts its
// thread pool, whose idle workers spin for a while, so it is loaded only
// when its benchmark runs (registered last: nothing runs after it).
using CblasSgemm = void (*)(int layout, int trans_a, int trans_b, int m, int n, int k, float alpha,
                            const float* a, int lda, const float* b, int ldb, float beta, float* c,
                            int ldc);
constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111;

struct OpenBlas {
  CblasSgemm sgemm = nullptr;
  const char* config =
      nullptr;  // e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64"
};

const OpenBlas& LoadOpenBlas() {
  static OpenBlas blas = [] {
    OpenBlas b;
    void* lib = nullptr;
    for (const char* name : {"libopenblas.so.0", "libopenblas.so"}) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    }
    if (!lib) return b;
    b.sgemm = reinterpret_cast<CblasSgemm>(dlsym(lib, "cblas_sgemm"));
    if (auto set_threads =
            reinterpret_cast<void (*)(int)>(dlsym(lib, "openblas_set_num_threads"))) {
      set_threads(kThreads);
    }
    if (auto get_config = reinterpret_cast<const char* (*)()>(dlsym(lib, "openblas_get_config"))) {
      b.config = get_config();
    }
    return b;
  }();
  return blas;
}

void BM_SgemmOpenBlas(benchmark::State& state) {
  const OpenBlas& blas = LoadOpenBlas();
  if (!blas.sgemm) {
    state.SkipWithError("OpenBLAS not installed (libopenblas.so.0 with cblas_sgemm)");
    for (auto _ : state) {
    }
    return;
  }
  if (blas.config) state.SetLabel(blas.config);
  GemmOperands g;
  for (auto _ : state) {
    blas.sgemm(kCblasRowMajor, kCblasNoTrans, kCblasNoTrans, kSize, kSize, kSize, 1.0f, g.a, kSize,
               g.b, kSize, 0.0f, g.c, kSize);
    benchmark::ClobberMemory();
  }
  Finish(state, g);
}
BENCHMARK(BM_SgemmOpenBlas)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace strata::runtime

BENCHMARK_MAIN();
