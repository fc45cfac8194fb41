// Lazy tensors over a mesh whose devices are spread over the job's
// processes: each process runs its own partitions and keeps their shards,
// the next graph takes them as they are, and reading a result gathers it.
// Numbers (a forward, a gradient, a chained graph) against the same graph
// without shardings on one device, computed in the same process.
#include <gtest/gtest.h>

#include <cmath>

#include "strata/autograd/grad.h"
#include "strata/distributed/mpi.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/runtime/process_group.h"
#include "strata/train/data.h"

namespace strata::distributed {
namespace {

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance * std::max(1.0f, std::abs(want[i]))) << "element " << i;
  }
}

class ProcessGroupScope {
 public:
  ProcessGroupScope() { lazy::Context::Get().set_process_group(MpiProcessGroup()); }
  ~ProcessGroupScope() { lazy::Context::Get().set_process_group(nullptr); }
};

TEST(MpiLazy, ShardedGraphsOverProcessesMatchOneDevice) {
  const ProcessGroup& job = Processes();
  for (int64_t per : {1, 2}) {
    const int64_t n = per * job.size;
    if (n == 1) continue;  // one device: nothing is partitioned
    SCOPED_TRACE(::testing::Message() << n << " devices over " << job.size << " processes");
    // The reference: no shardings, one device.
    Tensor x = normal(1, {8, 16}), w1 = normal(2, {16, 32}), w2 = normal(3, {32, 8});
    x.sync();
    w1.sync();
    w2.sync();
    Tensor h_ref = tanh(matmul(x, w1));
    Tensor y_ref = matmul(h_ref, w2);
    std::vector<float> y_want = y_ref.to_vector<float>();
    std::vector<float> z_want = (y_ref * 2.0 + 1.0).to_vector<float>();
    Tensor y_fresh = matmul(tanh(matmul(x, w1)), w2);  // y_ref's history was cut by its sync
    std::vector<float> g_want = gradients(sum(y_fresh * y_fresh), {w1})[0].to_vector<float>();

    ProcessGroupScope scope;
    std::vector<int64_t> ids(n);
    for (int64_t i = 0; i < n; ++i) ids[i] = i;
    ir::Mesh mesh = n % 2 == 0 && n >= 4 ? ir::Mesh(ids, {2, n / 2}, {"data", "model"})
                                         : ir::Mesh(ids, {n}, {"data"});
    const bool two_d = mesh.rank() == 2;
    Tensor xs = x, w1s = w1, w2s = w2;
    mark_sharding(xs, mesh, {{"data"}, {}});
    mark_sharding(w1s, mesh, {{}, {two_d ? "model" : "data"}});
    mark_sharding(w2s, mesh, {{two_d ? "model" : "data"}, {}});
    Tensor y = matmul(tanh(matmul(xs, w1s)), w2s);
    y.sync();
    const ir::Node::ShardedData* shards = y.value().node->sharded_data();
    ASSERT_NE(shards, nullptr);
    EXPECT_EQ(static_cast<int64_t>(shards->shards.size()), per);  // this process's only
    EXPECT_EQ(shards->first, job.rank * per);
    Tensor z = y * 2.0 + 1.0;  // the next graph reads the shards where they are
    {
      SCOPED_TRACE("z");
      ExpectNear(z.to_vector<float>(), z_want, 1e-5);
    }
    {
      SCOPED_TRACE("y");
      ExpectNear(y.to_vector<float>(), y_want, 1e-5);
    }
    Tensor ys = matmul(tanh(matmul(xs, w1s)), w2s);
    SCOPED_TRACE("gradient");
    ExpectNear(gradients(sum(ys * ys), {w1s})[0].to_vector<float>(), g_want, 1e-4);
  }
}

// Each process reads only the windows of its own devices' rows; the rows
// are those of the whole batch (built the plain way), and the batch reads
// back whole.
TEST(MpiLazy, EachProcessReadsItsOwnRowsOfABatch) {
  const ProcessGroup& job = Processes();
  std::vector<int64_t> tokens(200);
  for (int64_t i = 0; i < 200; ++i) tokens[i] = (i * 37) % 256;
  const std::vector<int64_t> starts = {3, 50, 7, 120, 64, 9, 180, 33, 1, 77};  // 10 rows
  const int64_t seq = 8;
  std::vector<int64_t> whole = train::MakeBatch(tokens, starts, seq).to_vector<int64_t>();
  ProcessGroupScope scope;
  for (int64_t per : {1, 2}) {
    const int64_t n = per * job.size;
    std::vector<int64_t> ids(n);
    for (int64_t i = 0; i < n; ++i) ids[i] = i;
    ir::Mesh mesh(ids, {n}, {"data"});
    Tensor batch = train::MakeShardedBatch(tokens, starts, seq, mesh, {{"data"}, {}});
    if (job.size > 1) {
      const ir::Node::ShardedData* data = batch.value().node->sharded_data();
      ASSERT_NE(data, nullptr);
      EXPECT_EQ(static_cast<int64_t>(data->shards.size()), per);
      const int64_t rows = (10 + n - 1) / n;  // a shard's rows (padded when uneven)
      for (int64_t k = 0; k < per; ++k) {
        const int64_t p = data->first + k;
        std::vector<int64_t> got = data->shards[k].ToVector<int64_t>();
        for (int64_t r = 0; r < rows && p * rows + r < 10; ++r) {
          for (int64_t c = 0; c < seq; ++c) {
            EXPECT_EQ(got[r * seq + c], whole[(p * rows + r) * seq + c]) << "partition " << p;
          }
        }
      }
    }
    EXPECT_EQ(batch.to_vector<int64_t>(), whole) << n << " devices";
    // And a graph over it gives one device's numbers.
    EXPECT_EQ((batch * 2).to_vector<int64_t>()[11], whole[11] * 2);
  }
}

TEST(MpiProcessGroup, ProcessesLearnEachOthersValuesAndFailures) {
  const ProcessGroup& job = Processes();
  const auto group = MpiProcessGroup();
  std::vector<int64_t> want(job.size);
  for (int r = 0; r < job.size; ++r) want[r] = 10 * r + 7;
  EXPECT_EQ(runtime::AllGatherFromProcesses(*group, 10 * job.rank + 7), want);
  // Every process succeeds: nobody throws.
  EXPECT_NO_THROW(runtime::AgreeAcrossProcesses(*group, nullptr, "test"));
  // The last process fails: it rethrows its own error; the others learn
  // which process failed.
  std::exception_ptr error;
  if (job.rank == job.size - 1) {
    try {
      Fail("[test] process {} cannot go on", job.rank);
    } catch (...) {
      error = std::current_exception();
    }
  }
  try {
    runtime::AgreeAcrossProcesses(*group, error, "test");
    ADD_FAILURE() << "no error on process " << job.rank;
  } catch (const Error& e) {
    const std::string own = fmt::format("process {} cannot go on", job.size - 1);
    const std::string named =
        fmt::format("process(es) {} of the job's {} failed", job.size - 1, job.size);
    EXPECT_NE(std::string(e.what()).find(job.rank == job.size - 1 ? own : named), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strata::distributed
