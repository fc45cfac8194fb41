// The lazy-tensor context: live tensors, the compile cache, metrics, dumps,
// the switches that shape programs. The process has a default one;
// Context::Get() is the calling thread's current context: the default, or
// the one a ContextScope made current. A test (or a library embedding
// strata) can create its own, with an empty cache and zero metrics, and
// destroy it: programs compile and dump the same in any context, whatever
// the process ran before.
#pragma once

#include <atomic>
#include <cstdint>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "strata/core/config.h"
#include "strata/ir/lowering.h"
#include "strata/lazy/tensor.h"
#include "strata/runtime/executable.h"
#include "strata/runtime/process_group.h"
#include "strata/spmd/partitioner.h"

namespace strata::lazy {

class Context;

struct TensorImpl {
  explicit TensorImpl(ir::Value v);
  ~TensorImpl();
  TensorImpl(const TensorImpl&) = delete;
  TensorImpl& operator=(const TensorImpl&) = delete;
  ir::Value value;                       // guarded by the context's tensor mutex
  std::optional<ir::Sharding> sharding;  // the tensor's own spec: the source of truth at sync
  // Autograd: whether backward() accumulates into `grad` for this tensor.
  bool requires_grad = false;
  std::unique_ptr<Tensor> grad;
  // Intrusive list of live tensors (no allocation per tensor).
  TensorImpl* prev = nullptr;
  TensorImpl* next = nullptr;
  bool alive = true;
  // The thread that made it: a global sync() on that thread materializes it.
  const std::thread::id owner = std::this_thread::get_id();
  // The context it was made in (its sync runs there); the default one once
  // that context is destroyed.
  Context* context;
};

struct Metrics {
  std::atomic<int64_t> graphs_traced{0}, compiles{0}, cache_hits{0}, cache_misses{0}, executions{0};
  std::atomic<int64_t> trace_ns{0}, lower_ns{0}, compile_ns{0}, execute_ns{0};
  std::atomic<int64_t> bytes_to_device{0}, bytes_from_device{0};
  std::atomic<int64_t> bytes_donated{0};     // argument bytes a sync let results reuse
  std::atomic<int64_t> bytes_collective{0};  // bytes partition 0 sent through collectives
  // Programs read from the persistent compile cache (Config::cache_dir)
  // instead of compiled: a miss of the in-memory cache that `compiles`
  // does not count.
  std::atomic<int64_t> disk_cache_hits{0};
};

// What the lowering of a set of tensors looks like, without running it
// (PyTorch/XLA's LoweringContext): the program text, its hash, and which
// parameter each input tensor became.
class LoweringContext {
 public:
  explicit LoweringContext(const std::vector<Tensor>& roots);
  const ir::Graph& graph() const { return graph_; }
  const hlo::Module& module() const { return *module_; }
  std::string hlo_text() const;
  // Parameter number of a materialized tensor in this program, or -1.
  int64_t tensor_parameter_id(const Tensor& tensor) const;
  int64_t parameter_count() const { return static_cast<int64_t>(graph_.parameters.size()); }

 private:
  ir::Graph graph_;
  std::unique_ptr<hlo::Module> module_;
};

class Context {
 public:
  // A context of its own: empty cache, zero metrics, the switches read from
  // the environment as the default context reads them.
  Context();
  // Tensors still alive move to the default context (their values stay).
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  // The calling thread's current context.
  static Context& Get();
  static Context& Default();

  void Register(TensorImpl* impl);
  void Unregister(TensorImpl* impl);
  // Live tensors marked requires_grad (for backward).
  std::vector<TensorImpl*> TensorsRequiringGrad() const;
  // Every live tensor with its current value (scan's leak check takes one
  // before tracing a body, to name and undo what the body rebinds).
  std::vector<std::pair<TensorImpl*, ir::Value>> LiveValues() const;
  void SetValue(TensorImpl* impl, ir::Value value);
  // Materializes the pending IR of `only` (when empty: every live tensor the
  // calling thread made; other threads' tensors are left to them, so a
  // global sync never rebinds a tensor another thread may be reading).
  void Sync(const std::vector<TensorImpl*>& only);

  Metrics& metrics() { return metrics_; }
  std::string MetricsReport() const;
  void ResetMetrics();
  int64_t cache_size() const;
  void set_cache_capacity(size_t capacity);
  void ClearCache();
  // Writes <hash>.ir.txt, .dot and .hlo.txt per compiled graph ("" = off;
  // the STRATA_DUMP_DIR environment variable sets it at start-up).
  void set_dump_dir(std::string dir);
  // This context's configuration: the process's (GetConfig) when it was
  // made, with its own dump_dir, index_checks and device_threads. set_config
  // sets those three here and the rest for the process (SetConfig).
  Config config() const;
  void set_config(const Config& config);
  // Why the last cache miss happened, when a cached graph looked alike.
  std::string last_miss_explanation() const;
  // Key parts other than the graph: device count, passes, strata version.
  ir::Hash128 CacheKey(const ir::Graph& graph) const;
  // Whether a compiled program for `graph` is cached (no metrics touched).
  bool IsCached(const ir::Graph& graph);
  // Buffer donation (off by default): a sync may write results into the
  // buffers of device data that nothing but the graph being run can still
  // read — an optimizer step's old weights and moments — instead of new
  // buffers, so a step does not hold two copies of them. The analysis
  // counts references at the start of the run: turn it on only where no
  // other thread builds on the tensors being synced while they sync (the
  // trainer's step).
  void set_buffer_donation(bool on) { donate_buffers_ = on; }
  // How graphs over a mesh are partitioned (strict: replicating a sharded
  // value whole is an error). Part of the program, so set it before syncing.
  void set_partition_options(spmd::PartitionOptions options) { partition_options_ = options; }
  // What syncing `tensors` would do on their mesh, before running it: the
  // partitioner's report (every collective, why, its bytes per device per
  // run, the planned peak memory per device). Compiles (and caches) the
  // program if needed; runs nothing. None when the graph is not partitioned.
  std::optional<spmd::PartitionReport> PartitionReportOf(const std::vector<Tensor>& tensors);
  // The sharding the partitioner gives a pending value (strata::sharding_of).
  std::optional<ir::Sharding> PendingShardingOf(const ir::Value& value);
  bool buffer_donation() const { return donate_buffers_; }
  // Checked indexing (on by default; STRATA_INDEX_CHECKS=0 turns it off):
  // index_select (and so nn::Embedding), take_along_dim, one_hot and
  // cross_entropy's labels check their indices inside the program that reads
  // them, and the sync that ran it throws an Error naming the op, the first
  // index out of range and the range, as PyTorch raises. The results of that
  // sync are kept (computed with indices clamped into range, XLA's gather
  // semantics), since its inputs may have been donated to them. Off, indices
  // clamp silently and the programs skip the check. Applies to ops built
  // after the call; ops inside a scan body are not checked.
  void set_index_checks(bool on) { index_checks_ = on; }
  bool index_checks() const { return index_checks_; }
  // The processes this one runs SPMD programs with (an MPI job:
  // distributed::MpiProcessGroup()). With more than one, a graph over a mesh
  // runs only this process's block of the mesh's devices, its results keep
  // only those shards, and reading one (to_vector) gathers the others. Every
  // process must then run the same graphs, in the same order. None (the
  // default): one process holds every device.
  void set_process_group(std::shared_ptr<const runtime::ProcessGroup> group) {
    process_group_ = std::move(group);
  }
  const runtime::ProcessGroup* process_group() const { return process_group_.get(); }
  // The whole array of device data, its shards gathered from the other
  // processes when this one holds only some (every process must ask).
  runtime::Buffer WholeOf(const ir::Node& data);
  // The virtual CPU devices a mesh of `devices` runs on (device p runs
  // partition p): where the shards of sharded device data must live.
  runtime::Client& ClientFor(int64_t devices);

 private:
  friend class CompiledGraph;  // ProgramFor, ThrowOnIndexErrors
  // The executable of `graph` (one device), compiled once through the cache
  // and kept alive with its entry; `compiled` says whether this call compiled it.
  std::shared_ptr<const runtime::Executable> ProgramFor(const ir::Graph& graph, bool* compiled);
  struct Entry;
  std::shared_ptr<const Entry> Lookup(const ir::Hash128& key);
  std::shared_ptr<const Entry> CompileAndInsert(const ir::Hash128& key, const ir::Graph& graph);
  // The cached program for `key`, or the one another thread is compiling
  // (waited for), or one compiled here: each distinct graph compiles once
  // however many threads sync it at the same time. Counts the hit or miss.
  std::shared_ptr<const Entry> LookupOrCompile(const ir::Hash128& key, const ir::Graph& graph);
  std::string ExplainMiss(const Entry& fresh) const;
  void Dump(const ir::Graph& graph, const hlo::Module& module, const hlo::Module& optimized) const;
  bool StillPending(TensorImpl* impl, const ir::Value& root) const;
  // Throws when one of the graph's index checks found an index out of range
  // (`results`: every root's output, the checks' from graph.checks_from on).
  static void ThrowOnIndexErrors(const ir::Graph& graph,
                                 const std::vector<runtime::Buffer>& results);
  void RunPartitioned(const Entry& entry, const ir::Graph& graph,
                      const std::vector<ir::Value>& roots, const std::vector<TensorImpl*>& targets,
                      const std::vector<size_t>& root_of_target);
  std::vector<bool> DonatableParameters(const ir::Graph& graph, const std::vector<ir::Value>& roots,
                                        const std::vector<TensorImpl*>& targets,
                                        const std::vector<runtime::Buffer>& arguments);

  mutable std::mutex tensors_mutex_;
  TensorImpl* tensors_ = nullptr;  // head of the live list
  // Impls handed to a running Sync are kept alive (by pointer identity) here
  // until it finishes, so a tensor destroyed meanwhile is recognized.
  std::unordered_set<TensorImpl*> in_flight_dead_;
  int64_t syncs_in_flight_ = 0;

  mutable std::mutex cache_mutex_;
  size_t capacity_ = 1024;
  std::list<std::shared_ptr<const Entry>> lru_;  // most recent first
  std::unordered_map<ir::Hash128, std::list<std::shared_ptr<const Entry>>::iterator,
                     ir::Hash128Hasher>
      index_;
  // Programs being compiled, by key: threads that miss on one wait for it.
  std::unordered_map<ir::Hash128, std::shared_future<std::shared_ptr<const Entry>>,
                     ir::Hash128Hasher>
      compiling_;
  std::string last_miss_explanation_;
  std::string dump_dir_;
  Metrics metrics_;
  std::atomic<bool> donate_buffers_{false};
  std::atomic<bool> index_checks_{true};
  std::atomic<int> device_threads_{0};  // 0: the default client's threads shared out
  spmd::PartitionOptions partition_options_;
  // Virtual devices for meshes larger than the default client's.
  std::map<int64_t, std::unique_ptr<runtime::Client>> mesh_clients_;
  std::shared_ptr<const runtime::ProcessGroup> process_group_;
  // The programs that gather sharded data whole, by (mesh, layout, shape).
  std::map<std::string, std::unique_ptr<runtime::Executable>> gatherers_;
};

// Makes `context` the calling thread's current context while alive (the
// previous one again after). Tensors made meanwhile belong to it.
class ContextScope {
 public:
  explicit ContextScope(Context& context);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  Context* previous_;
};

}  // namespace strata::lazy
