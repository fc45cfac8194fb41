// All-reduce and reduce-scatter between MPI processes (one participant
// each) through strata's MPI communicator, 1 KiB to 256 MiB of f32 per
// participant, against a plain memcpy of the same bytes in one process.
// Run under mpirun (bench/run_mpi_bench.sh does, after the training
// comparison):
//
//   mpirun -np 2 build/mpi_collectives_bench
//
// Every process runs the same sizes and iteration counts (fixed, not timed:
// the processes must make the same calls). Process 0 prints, per size, the
// median seconds of a call, the bus bandwidth as NCCL counts it (all-reduce
// 2(n-1)/n bytes / time, reduce-scatter (n-1)/n), and the memcpy rate.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "strata/distributed/mpi.h"

namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  using namespace strata;
  const distributed::ProcessGroup& job = distributed::Processes();
  const int64_t n = job.size;
  auto comm = distributed::MakeMpiCommunicator(n);
  std::vector<int64_t> group(n);
  for (int64_t i = 0; i < n; ++i) group[i] = i;
  if (job.rank == 0) {
    fmt::print(
        "{} processes; medians of the iterations; busbw = bytes x 2(n-1)/n / time "
        "(all-reduce), x (n-1)/n (reduce-scatter)\n",
        n);
    fmt::print("{:>10} {:>6} {:>12} {:>12} {:>12} {:>12} {:>12}\n", "bytes", "iters", "all-reduce",
               "busbw GB/s", "red-scatter", "busbw GB/s", "memcpy GB/s");
  }
  for (int64_t bytes = 1024; bytes <= (int64_t{256} << 20); bytes *= 4) {
    const int64_t count = bytes / 4;
    const int iterations = bytes <= (1 << 20) ? 50 : bytes <= (16 << 20) ? 10 : 3;
    std::vector<float> in(count, 1.0f), out(count), rs_out(count / n + 1);
    std::vector<double> ar, rs, copy;
    for (int i = 0; i < iterations + 1; ++i) {  // the first is a warm-up
      auto t0 = Clock::now();
      comm->AllReduce(job.rank, group, DType::kF32, runtime::ReduceKind::kSum, in.data(),
                      out.data(), count);
      auto t1 = Clock::now();
      comm->ReduceScatter(job.rank, group, DType::kF32, runtime::ReduceKind::kSum, in.data(),
                          rs_out.data(), count / n);
      auto t2 = Clock::now();
      std::memcpy(out.data(), in.data(), bytes);
      auto t3 = Clock::now();
      if (i == 0) continue;
      ar.push_back(std::chrono::duration<double>(t1 - t0).count());
      rs.push_back(std::chrono::duration<double>(t2 - t1).count());
      copy.push_back(std::chrono::duration<double>(t3 - t2).count());
    }
    const double b = static_cast<double>(bytes), f = static_cast<double>(n - 1) / n;
    if (job.rank == 0) {
      fmt::print("{:>10} {:>6} {:>10.1f}us {:>12.2f} {:>10.1f}us {:>12.2f} {:>12.2f}\n", bytes,
                 iterations, Median(ar) * 1e6, 2 * f * b / Median(ar) / 1e9, Median(rs) * 1e6,
                 f * b / Median(rs) / 1e9, b / Median(copy) / 1e9);
    }
  }
  return 0;
}
