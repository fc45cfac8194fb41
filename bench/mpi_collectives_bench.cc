// strata's collectives between MPI processes (one participant each) against
// Open MPI's own calls on the same buffers and processes, as the OSU
// micro-benchmarks time them: all-reduce (MPI_Allreduce), all-gather
// (MPI_Allgather), reduce-scatter (MPI_Reduce_scatter_block) and all-to-all
// (MPI_Alltoall), 4 KiB to 256 MiB of f32. Run under mpirun
// (bench/run_mpi_bench.sh does, on one host and across network-namespace
// hosts):
//
//   mpirun -np 2 build/mpi_collectives_bench [max MiB]
//
// "bytes" is the larger buffer of a call on one process: all-reduce's input
// (and output), all-gather's output, reduce-scatter's input, all-to-all's
// input (and output). Every process runs the same sizes and iteration
// counts (fixed, not timed: the processes must make the same calls). Each
// iteration times strata's call and MPI's, in alternating order, each
// started after a barrier; process 0 prints the medians and MPI's time over
// strata's (above 1: strata is faster). Before timing, each size checks that
// strata's result equals MPI's.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "strata/distributed/mpi.h"

namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Seconds(const std::function<void()>& call) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = Clock::now();
  call();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace strata;
  const distributed::ProcessGroup& job = distributed::Processes();
  const int n = job.size, me = job.rank;
  const int64_t max_bytes = (argc > 1 ? std::atoll(argv[1]) : 256) << 20;
  auto comm = distributed::MakeMpiCommunicator(n);
  std::vector<int64_t> group(n);
  for (int i = 0; i < n; ++i) group[i] = i;
  if (me == 0) {
    char host[MPI_MAX_PROCESSOR_NAME] = {};
    int length = 0;
    MPI_Get_processor_name(host, &length);
    fmt::print("{} processes (process 0 on {}); medians; ratio = MPI's time / strata's\n", n, host);
    fmt::print("{:>14} {:>10} {:>6} {:>12} {:>12} {:>8} {:>12}\n", "collective", "bytes", "iters",
               "strata", "MPI", "ratio", "strata GB/s");
  }
  struct Op {
    const char* name;
    // strata's call and MPI's on `in` -> `out` (`bytes` as above).
    std::function<void(const float*, float*, int64_t)> strata, mpi;
    double bus;  // bytes moved per process over `bytes`, as NCCL counts busbw
  };
  const double f = static_cast<double>(n - 1) / n;
  const std::vector<Op> ops = {
      {"all-reduce",
       [&](const float* in, float* out, int64_t bytes) {
         comm->AllReduce(me, group, DType::kF32, runtime::ReduceKind::kSum, in, out, bytes / 4);
       },
       [&](const float* in, float* out, int64_t bytes) {
         MPI_Allreduce(in, out, static_cast<int>(bytes / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
       },
       2 * f},
      {"all-gather",
       [&](const float* in, float* out, int64_t bytes) {
         comm->AllGather(me, group, in, out, bytes / n);
       },
       [&](const float* in, float* out, int64_t bytes) {
         MPI_Allgather(in, static_cast<int>(bytes / n), MPI_BYTE, out, static_cast<int>(bytes / n),
                       MPI_BYTE, MPI_COMM_WORLD);
       },
       f},
      {"reduce-scatter",
       [&](const float* in, float* out, int64_t bytes) {
         comm->ReduceScatter(me, group, DType::kF32, runtime::ReduceKind::kSum, in, out,
                             bytes / 4 / n);
       },
       [&](const float* in, float* out, int64_t bytes) {
         MPI_Reduce_scatter_block(in, out, static_cast<int>(bytes / 4 / n), MPI_FLOAT, MPI_SUM,
                                  MPI_COMM_WORLD);
       },
       f},
      {"all-to-all",
       [&](const float* in, float* out, int64_t bytes) {
         comm->AllToAll(me, group, in, out, bytes / n);
       },
       [&](const float* in, float* out, int64_t bytes) {
         MPI_Alltoall(in, static_cast<int>(bytes / n), MPI_BYTE, out, static_cast<int>(bytes / n),
                      MPI_BYTE, MPI_COMM_WORLD);
       },
       f},
  };
  for (const Op& op : ops) {
    for (int64_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
      const int64_t count = bytes / 4;
      // Small integers: every sum is exact whatever order MPI adds in.
      std::vector<float> in(count), ours(count, -1.0f), theirs(count, -2.0f);
      for (int64_t i = 0; i < count; ++i) in[i] = static_cast<float>((i * 7 + me * 3) % 64);
      op.strata(in.data(), ours.data(), bytes);
      op.mpi(in.data(), theirs.data(), bytes);
      const int64_t written = std::string(op.name) == "reduce-scatter" ? count / n : count;
      if (std::memcmp(ours.data(), theirs.data(), written * 4) != 0) {
        fmt::print(stderr, "process {}: {} of {} bytes: strata's result is not MPI's\n", me,
                   op.name, bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      const int iterations = bytes <= (1 << 20) ? 100 : bytes <= (16 << 20) ? 20 : 5;
      std::vector<double> strata_s, mpi_s;
      for (int i = 0; i < iterations; ++i) {
        auto ours_call = [&] { op.strata(in.data(), ours.data(), bytes); };
        auto theirs_call = [&] { op.mpi(in.data(), theirs.data(), bytes); };
        if (i % 2) {
          strata_s.push_back(Seconds(ours_call));
          mpi_s.push_back(Seconds(theirs_call));
        } else {
          mpi_s.push_back(Seconds(theirs_call));
          strata_s.push_back(Seconds(ours_call));
        }
      }
      const double a = Median(strata_s), b = Median(mpi_s);
      if (me == 0) {
        fmt::print("{:>14} {:>10} {:>6} {:>10.1f}us {:>10.1f}us {:>8.2f} {:>12.2f}\n", op.name,
                   bytes, iterations, a * 1e6, b * 1e6, b / a,
                   op.bus * static_cast<double>(bytes) / a / 1e9);
      }
    }
  }
  return 0;
}
