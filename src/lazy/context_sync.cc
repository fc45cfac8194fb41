// Running a graph: which buffers a sync may donate, the sync itself, and a
// partitioned run over a mesh (with the whole values read back).
#include "strata/lazy/context.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "context_entry.h"
#include "strata/compiler/compile.h"
#include "strata/core/config.h"
#include "strata/core/error.h"
#include "strata/hlo/builder.h"
#include "strata/hlo/text.h"
#include "strata/runtime/communicator.h"
#include "strata/runtime/sharded_buffer.h"
#include "strata/runtime/thread_pool.h"
#include "strata/runtime/trace.h"

#include "context_entry.h"

namespace strata::lazy {

using namespace context_detail;

// Which parameters' buffers nothing but this sync can still read: device
// data whose node (and every node of the graph above it) is referenced only
// from inside the graph, from the sync's own bookkeeping, or by the tensors
// being overwritten, and whose bytes no other buffer handle shares. Their
// bytes may then hold results.
std::vector<bool> Context::DonatableParameters(const ir::Graph& graph,
                                               const std::vector<ir::Value>& roots,
                                               const std::vector<TensorImpl*>& targets,
                                               const std::vector<runtime::Buffer>& arguments) {
  std::unordered_map<const ir::Node*, int64_t> internal;
  for (const ir::Node* n : graph.post_order) {
    for (const ir::Value& v : n->operands()) ++internal[v.node.get()];
  }
  for (const ir::Value& r : graph.roots) ++internal[r.node.get()];
  for (const ir::Value& r : roots) ++internal[r.node.get()];
  std::lock_guard<std::mutex> lock(tensors_mutex_);
  for (TensorImpl* t : targets) ++internal[t->value.node.get()];
  // Every node of the graph is an operand of another or a root: read its
  // reference count through one of those handles.
  std::unordered_map<const ir::Node*, long> use_count;
  for (const ir::Node* n : graph.post_order) {
    for (const ir::Value& v : n->operands()) use_count[v.node.get()] = v.node.use_count();
  }
  for (const ir::Value& r : roots) use_count[r.node.get()] = r.node.use_count();
  // Users come after their operands in post_order: walk it backwards and
  // taint everything below a node that something outside the graph holds.
  std::unordered_set<const ir::Node*> tainted;
  for (auto it = graph.post_order.rbegin(); it != graph.post_order.rend(); ++it) {
    const ir::Node* n = *it;
    auto count = use_count.find(n);
    const bool escapes = count == use_count.end() || count->second > internal[n];
    if (escapes || tainted.count(n)) {
      tainted.insert(n);
      for (const ir::Value& v : n->operands()) tainted.insert(v.node.get());
    }
  }
  std::vector<bool> donated(graph.parameters.size(), false);
  for (size_t i = 0; i < graph.parameters.size(); ++i) {
    const ir::Node* p = graph.parameters[i];
    // Held from inside the graph only (leaves may not be in post_order),
    // and its bytes by the node's buffer handle and the argument copy only.
    auto count = use_count.find(p);
    donated[i] = p->kind() == ir::NodeKind::kDeviceData && !tainted.count(p) &&
                 count != use_count.end() && count->second <= internal[p] &&
                 arguments[i].use_count() == 2 && !arguments[i].borrowed();
  }
  return donated;
}

// Whether `impl` still holds the value a sync ran (it was neither destroyed
// nor rebound meanwhile). Needs the tensor mutex.
bool Context::StillPending(TensorImpl* impl, const ir::Value& root) const {
  return !in_flight_dead_.count(impl) && impl->value.node == root.node &&
         impl->value.index == root.index;
}

void Context::Sync(const std::vector<TensorImpl*>& only) {
  std::vector<TensorImpl*> targets;
  std::vector<ir::Value> roots;
  std::vector<size_t> root_of_target;
  {
    std::lock_guard<std::mutex> lock(tensors_mutex_);
    std::vector<TensorImpl*> candidates = only;
    if (candidates.empty()) {
      const std::thread::id self = std::this_thread::get_id();
      for (TensorImpl* t = tensors_; t; t = t->next) {
        if (t->owner == self) candidates.push_back(t);
      }
    }
    std::unordered_map<const ir::Node*, std::vector<std::pair<int64_t, size_t>>> seen;
    for (TensorImpl* impl : candidates) {
      const ir::Value& v = impl->value;
      if (v.node->placeholder_level() > 0) {
        // A value inside a scan body being traced has no data yet.
        if (only.empty()) continue;
        Fail(
            "[sync] cannot materialize a {} computed inside a scan body: it stands for every "
            "step at once (return it as a carry or y instead)",
            v.shape().ToString());
      }
      if (v.node->kind() == ir::NodeKind::kScalar) {  // a host value: upload, nothing to compile
        const hlo::Literal& lit = v.node->scalar();
        auto buffer = runtime::Buffer::FromHost(lit.shape(),
                                                {lit.data(), static_cast<size_t>(lit.size_bytes())},
                                                runtime::Client::Default().device(0));
        impl->value = ir::Value{
            ir::Node::MakeDeviceData(std::move(buffer), impl->sharding, false, OriginOf(v))};
        continue;
      }
      if (v.node->is_leaf()) continue;
      size_t root = roots.size();
      auto& outputs = seen[v.node.get()];
      bool found = false;
      for (auto [index, r] : outputs) {
        if (index == v.index) {
          root = r;
          found = true;
        }
      }
      if (!found) {
        outputs.push_back({v.index, root});
        roots.push_back(v);
      }
      targets.push_back(impl);
      root_of_target.push_back(root);
    }
  }
  if (roots.empty()) return;
  {
    std::lock_guard<std::mutex> lock(tensors_mutex_);
    ++syncs_in_flight_;
  }
  struct InFlight {  // ends the in-flight window even if compile or run throws
    Context* context;
    ~InFlight() {
      std::lock_guard<std::mutex> lock(context->tensors_mutex_);
      if (--context->syncs_in_flight_ == 0) context->in_flight_dead_.clear();
    }
  } in_flight{this};
  trace::Span sync_span("sync", "sync");
  int64_t t0 = NowNs();
  std::optional<trace::Span> trace_span(std::in_place, "trace", "trace");
  ir::Graph graph = ir::BuildGraph(roots, /*with_index_checks=*/true);
  CheckNotOverwritten(graph);
  ir::Hash128 key = CacheKey(graph);
  if (trace_span->active()) {
    trace_span->set_args(fmt::format(R"("graph": "{}", "nodes": {}, "parameters": {})",
                                     key.ToString(), graph.post_order.size(),
                                     graph.parameters.size()));
  }
  trace_span.reset();
  metrics_.trace_ns += NowNs() - t0;
  metrics_.graphs_traced++;
  const int64_t misses = metrics_.cache_misses.load();
  std::shared_ptr<const Entry> entry = LookupOrCompile(key, graph);
  if (sync_span.active()) {
    sync_span.set_args(fmt::format(R"("graph": "{}", "cache": "{}", "outputs": {})", key.ToString(),
                                   metrics_.cache_misses.load() > misses ? "miss" : "hit",
                                   roots.size()));
  }
  if (entry->mesh) {
    RunPartitioned(*entry, graph, roots, targets, root_of_target);
    return;
  }
  const runtime::Device* device = runtime::Client::Default().device(0);
  std::vector<runtime::Buffer> arguments;
  for (const ir::Node* p : graph.parameters) {
    if (p->kind() == ir::NodeKind::kDeviceData) {
      arguments.push_back(p->buffer());
    } else {
      const hlo::Literal& lit = p->scalar();
      arguments.push_back(runtime::Buffer::FromHost(
          lit.shape(), {lit.data(), static_cast<size_t>(lit.size_bytes())}, device));
      metrics_.bytes_to_device += lit.size_bytes();
    }
  }
  std::vector<bool> donated;
  if (donate_buffers_) donated = DonatableParameters(graph, roots, targets, arguments);
  int64_t t1 = NowNs();
  std::optional<trace::Span> execute_span(std::in_place, "execute", "execute");
  std::vector<runtime::Buffer> outputs = entry->executable->Run(arguments, device, donated);
  execute_span.reset();
  for (size_t i = 0; i < donated.size(); ++i) {  // count the bytes results actually took
    if (!donated[i]) continue;
    for (const runtime::Buffer& out : outputs) {
      if (out.data() != arguments[i].data()) continue;
      metrics_.bytes_donated += out.size_bytes();
      graph.parameters[i]->MarkOverwritten();  // the results' origins may still name it
    }
  }
  metrics_.execute_ns += NowNs() - t1;
  metrics_.executions++;
  std::lock_guard<std::mutex> lock(tensors_mutex_);
  for (size_t i = 0; i < targets.size(); ++i) {
    TensorImpl* impl = targets[i];
    size_t r = root_of_target[i];
    if (!StillPending(impl, roots[r])) continue;
    impl->value =
        ir::Value{ir::Node::MakeDeviceData(outputs[r], impl->sharding, true, OriginOf(roots[r]))};
  }
  ThrowOnIndexErrors(graph, outputs);
}

// The devices a mesh of `devices` runs on: virtual CPU devices of a client
// of their own, each running its program on its share of the cores (the
// machine's threads divided among them; STRATA_DEVICE_THREADS overrides),
// profiled into the default client's profile.
runtime::Client& Context::ClientFor(int64_t devices) {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  auto& client = mesh_clients_[devices];
  if (!client) {
    int threads = std::max<int>(
        1, runtime::Client::Default().thread_pool().num_threads() / static_cast<int>(devices));
    if (device_threads_ > 0) threads = device_threads_;
    client = std::make_unique<runtime::Client>(static_cast<int>(devices), threads);
    client->set_profile(runtime::Client::Default().profile());  // STRATA_PROFILE counts meshes too
  }
  return *client;
}

// A graph over a mesh: each parameter is given to the partitions as the
// shards the program expects (sharded data already laid out that way is
// passed as it is; anything else is split here), the partitions run on
// their devices, and each result keeps its shards.
void Context::RunPartitioned(const Entry& entry, const ir::Graph& graph,
                             const std::vector<ir::Value>& roots,
                             const std::vector<TensorImpl*>& targets,
                             const std::vector<size_t>& root_of_target) {
  const ir::Mesh& mesh = *entry.mesh;
  const int64_t n = mesh.size();
  // This process's block of the mesh (all of it unless a job of several
  // processes shares the mesh).
  const int processes = process_group_ ? process_group_->size() : 1;
  if (n % processes != 0) {
    Fail("[sync] a mesh of {} devices does not split evenly over the job's {} processes", n,
         processes);
  }
  const int64_t local = n / processes, first = process_group_ ? process_group_->rank() * local : 0;
  runtime::Client& client = ClientFor(n);
  std::vector<const runtime::Device*> devices;
  for (int64_t p = 0; p < n; ++p) devices.push_back(client.device(static_cast<int>(p)));
  std::vector<std::vector<runtime::Buffer>> arguments(local);
  for (size_t i = 0; i < graph.parameters.size(); ++i) {
    const ir::Node* p = graph.parameters[i];
    const spmd::AxisSharding& want = entry.parameter_shardings.at(i);
    const ir::Node::ShardedData* data =
        p->kind() == ir::NodeKind::kDeviceData ? p->sharded_data() : nullptr;
    std::vector<runtime::Buffer> shards;
    if (data && data->mesh == mesh && data->layout == want && data->first == first &&
        static_cast<int64_t>(data->shards.size()) == local) {
      shards = data->shards;
    } else {
      runtime::Buffer whole;
      if (p->kind() == ir::NodeKind::kDeviceData) {
        whole = WholeOf(*p);
      } else {
        const hlo::Literal& lit = p->scalar();
        whole = runtime::Buffer::FromHost(
            lit.shape(), {lit.data(), static_cast<size_t>(lit.size_bytes())}, devices[0]);
      }
      metrics_.bytes_to_device += whole.size_bytes();
      std::vector<runtime::Buffer> all = runtime::SplitIntoShards(whole, mesh, want, devices);
      shards.assign(all.begin() + first, all.begin() + first + local);
    }
    for (int64_t d = 0; d < local; ++d) arguments[d].push_back(shards[d]);
  }
  // Donation as for one device, judged on the last partition's shard (the
  // node keeps partition 0's as its identity): the trainer's new weights and
  // moments take the old ones' shards.
  std::vector<bool> donated;
  if (donate_buffers_) {
    std::vector<runtime::Buffer> last;
    for (int64_t i = 0; i < static_cast<int64_t>(graph.parameters.size()); ++i)
      last.push_back(arguments[local - 1][i]);
    donated = DonatableParameters(graph, roots, targets, last);
  }
  int64_t t0 = NowNs();
  auto communicator =
      processes > 1 ? process_group_->MakeCommunicator(n) : runtime::MakeInProcessCommunicator(n);
  std::vector<const runtime::Device*> mine(devices.begin() + first,
                                           devices.begin() + first + local);
  std::optional<trace::Span> execute_span(std::in_place, "execute", "execute");
  auto outputs = entry.executable->RunPartitions(first, arguments, mine, *communicator, donated);
  execute_span.reset();
  for (size_t i = 0; i < donated.size(); ++i) {
    if (!donated[i]) continue;
    for (const runtime::Buffer& out : outputs[0]) {
      if (out.data() != arguments[0][i].data()) continue;
      metrics_.bytes_donated += n * out.size_bytes();
      // Data split here for the program was a copy: the node's own bytes stand.
      const ir::Node* p = graph.parameters[i];
      if (p->kind() == ir::NodeKind::kDeviceData && p->buffer().data() == out.data())
        p->MarkOverwritten();
    }
  }
  metrics_.execute_ns += NowNs() - t0;
  metrics_.executions++;
  metrics_.bytes_collective += communicator->bytes_sent(first);
  std::lock_guard<std::mutex> lock(tensors_mutex_);
  for (size_t i = 0; i < targets.size(); ++i) {
    TensorImpl* impl = targets[i];
    size_t r = root_of_target[i];
    if (!StillPending(impl, roots[r])) continue;
    const spmd::AxisSharding& layout = entry.result_shardings.at(r);
    std::vector<runtime::Buffer> shards;
    for (int64_t d = 0; d < local; ++d) shards.push_back(outputs[d][r]);
    // A result with no spec of its own keeps the layout propagation gave it.
    std::optional<ir::Sharding> sharding = impl->sharding;
    if (!sharding) sharding = ir::Sharding(mesh, SpecOf(mesh, layout), layout.rank());
    impl->value =
        ir::Value{ir::Node::MakeShardedDeviceData(std::move(shards), roots[r].shape(), mesh, layout,
                                                  sharding, true, first, OriginOf(roots[r]))};
  }
  ThrowOnIndexErrors(graph, outputs[0]);  // checks are replicated scalars
}

// Data whose shards live in several processes is gathered by a program of
// its own: the array in its layout, copied replicated (one all-gather per
// split dim), run by every process on its partitions.
runtime::Buffer Context::WholeOf(const ir::Node& data) {
  const ir::Node::ShardedData* sharded = data.sharded_data();
  if (!sharded || sharded->complete()) return data.WholeBuffer();
  STRATA_CHECK(process_group_, "sharded data spread over processes without a process group");
  const spmd::Mesh& mesh = sharded->mesh;
  const Shape& shape = data.shape(0);
  const std::string key =
      fmt::format("{} {} {}", mesh.ToString(), spmd::ToHloSharding(mesh, sharded->layout).ToText(),
                  shape.ToString());
  runtime::Client& client = ClientFor(mesh.size());
  runtime::Executable* gather = nullptr;
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto& slot = gatherers_[key];
    if (!slot) {
      auto module = hlo::ParseModule(
          fmt::format("HloModule gather\nENTRY main {{\n  p = {0} parameter(0), sharding={1}\n"
                      "  ROOT c = {0} copy(p), sharding={{replicated}}\n}}\n",
                      shape.ToString(), spmd::ToHloSharding(mesh, sharded->layout).ToText()));
      spmd::PartitionedModule partitioned = spmd::Partition(*module, mesh);
      compiler::CompileOptions options;
      options.client = &client;
      slot = compiler::Compile(*partitioned.module, options);
    }
    gather = slot.get();
  }
  std::vector<std::vector<runtime::Buffer>> arguments;
  std::vector<const runtime::Device*> devices;
  for (size_t k = 0; k < sharded->shards.size(); ++k) {
    arguments.push_back({sharded->shards[k]});
    devices.push_back(client.device(static_cast<int>(sharded->first + k)));
  }
  auto communicator = process_group_->MakeCommunicator(mesh.size());
  auto outputs = gather->RunPartitions(sharded->first, arguments, devices, *communicator);
  metrics_.bytes_collective += communicator->bytes_sent(sharded->first);
  return outputs.at(0).at(0);
}

std::optional<spmd::PartitionReport> Context::PartitionReportOf(
    const std::vector<Tensor>& tensors) {
  std::vector<ir::Value> roots;
  for (const Tensor& t : tensors) {
    if (!t.value().node->is_leaf()) roots.push_back(t.value());
  }
  if (roots.empty()) return std::nullopt;
  ir::Graph graph = ir::BuildGraph(roots, /*with_index_checks=*/true);
  CheckNotOverwritten(graph);
  ir::Hash128 key = CacheKey(graph);
  std::shared_ptr<const Entry> entry = LookupOrCompile(key, graph);
  if (!entry->mesh) return std::nullopt;
  return entry->report;
}

std::optional<ir::Sharding> Context::PendingShardingOf(const ir::Value& value) {
  ir::Graph graph = ir::BuildGraph({value}, /*with_index_checks=*/true);
  auto sharded = [](const ir::Node* n) { return n->sharding().has_value(); };
  if (std::none_of(graph.post_order.begin(), graph.post_order.end(), sharded) &&
      std::none_of(graph.parameters.begin(), graph.parameters.end(), sharded)) {
    return std::nullopt;  // nothing to partition: no compile to say so
  }
  CheckNotOverwritten(graph);
  std::shared_ptr<const Entry> entry = LookupOrCompile(CacheKey(graph), graph);
  if (!entry->mesh) return std::nullopt;
  const spmd::AxisSharding& layout = entry->result_shardings.at(0);
  return ir::Sharding(*entry->mesh, SpecOf(*entry->mesh, layout), layout.rank());
}

}  // namespace strata::lazy
