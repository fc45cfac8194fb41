#include "strata/lazy/context.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "strata/core/config.h"
#include "strata/core/error.h"
#include "strata/hlo/builder.h"
#include "strata/hlo/text.h"
#include "strata/runtime/communicator.h"
#include "strata/runtime/sharded_buffer.h"
#include "strata/runtime/thread_pool.h"
#include "strata/runtime/trace.h"

namespace strata::lazy {
namespace {

constexpr char kVersion[] = "strata-0.1.0";

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// What a materialized value keeps for autodiff: the graph that computed it,
// when gradients could flow through it (a floating value built outside a
// StopGradientScope).
ir::Value OriginOf(const ir::Value& value) {
  if (!IsFloating(value.shape().dtype()) || value.node->stops_gradient()) return {};
  return value;
}

// A graph built from a materialized tensor's origin (a gradient taken after
// the sync) may read device data whose buffer a later sync donated.
void CheckNotOverwritten(const ir::Graph& graph) {
  for (const ir::Node* p : graph.parameters) {
    if (p->kind() != ir::NodeKind::kDeviceData || !p->overwritten()) continue;
    Fail(
        "[sync] this graph reads a {} whose buffer a sync has since reused for its results "
        "(the tensor was updated in place). It was reached through a tensor materialized "
        "before that update; take gradients before the sync that updates what they read",
        p->shape().ToString());
  }
}

// A node as the "explain the miss" diagnostic compares it.
struct NodeSignature {
  std::string op, shapes, sharding;
  ir::Hash128 node_hash;
};

std::vector<NodeSignature> Signature(const ir::Graph& graph) {
  std::vector<NodeSignature> sig;
  for (const ir::Node* n : graph.post_order) {
    std::string shapes;
    for (const Shape& s : n->shapes()) shapes += (shapes.empty() ? "" : ", ") + s.ToString();
    sig.push_back(
        {n->OpName(), shapes, n->sharding() ? n->sharding()->hlo_text() : "none", n->node_hash()});
  }
  return sig;
}

// The mesh a graph's shardings name, when it has more than one device.
std::optional<ir::Mesh> MeshOf(const ir::Graph& graph) {
  std::optional<ir::Mesh> mesh;
  auto visit = [&](const ir::Node* n) {
    if (!n->sharding()) return;
    const ir::Mesh& m = n->sharding()->mesh();
    if (mesh && !(*mesh == m)) {
      Fail("[sync] one graph uses two meshes: {} and {}; a program runs on one mesh",
           mesh->ToString(), m.ToString());
    }
    mesh = m;
  };
  for (const ir::Node* n : graph.post_order) visit(n);
  for (const ir::Node* n : graph.parameters) visit(n);
  if (mesh && mesh->size() == 1) return std::nullopt;
  return mesh;
}

// The spec of an axis sharding, with the mesh's axis names.
ir::PartitionSpec SpecOf(const ir::Mesh& mesh, const spmd::AxisSharding& s) {
  ir::PartitionSpec spec;
  for (const auto& axes : s.dims) {
    std::vector<std::string> names;
    for (int64_t a : axes) names.push_back(mesh.axis_names()[a]);
    spec.push_back(std::move(names));
  }
  return spec;
}

}  // namespace

struct Context::Entry {
  ir::Hash128 key;
  std::unique_ptr<runtime::Executable> executable;
  std::vector<NodeSignature> signature;
  std::vector<int64_t> parameter_sequence;
  // A graph over a mesh of several devices runs partitioned.
  std::optional<ir::Mesh> mesh;
  std::vector<spmd::AxisSharding> parameter_shardings, result_shardings;
  spmd::PartitionReport report;
};

TensorImpl::TensorImpl(ir::Value v) : value(std::move(v)), context(&Context::Get()) {
  context->Register(this);
}
TensorImpl::~TensorImpl() { context->Unregister(this); }

Context::Context() {
  const Config config = GetConfig();
  dump_dir_ = config.dump_dir;
  index_checks_ = config.index_checks;
  device_threads_ = config.device_threads;
}

void Context::ThrowOnIndexErrors(const ir::Graph& graph,
                                 const std::vector<runtime::Buffer>& results) {
  for (size_t k = 0; k < graph.checks.size(); ++k) {
    const std::vector<int64_t> found = results.at(graph.checks_from + k).ToVector<int64_t>();
    if (found[0] < 0) continue;
    const ir::IndexCheck& check = *graph.checks[k];
    // The position as coordinates of the index tensor.
    const std::vector<int64_t>& dims = check.index_shape.dims();
    std::vector<int64_t> at(dims.size());
    int64_t rest = found[0];
    for (size_t d = dims.size(); d-- > 0;) {
      at[d] = dims[d] > 0 ? rest % dims[d] : 0;
      rest = dims[d] > 0 ? rest / dims[d] : 0;
    }
    Fail("[{}] index {} is out of range {}, at [{}] of the index {}", check.op, found[1],
         check.range, fmt::join(at, ", "), check.index_shape.ToString());
  }
}

namespace {
thread_local Context* current_context = nullptr;
}  // namespace

Context& Context::Default() {
  static Context* context = new Context();  // never destroyed: tensors may outlive main's statics
  return *context;
}

Context& Context::Get() { return current_context ? *current_context : Default(); }

Context::~Context() {
  Context& fallback = Default();
  if (&fallback == this) return;
  std::vector<TensorImpl*> live;
  {
    std::lock_guard<std::mutex> lock(tensors_mutex_);
    for (TensorImpl* t = tensors_; t; t = t->next) live.push_back(t);
    tensors_ = nullptr;
  }
  for (TensorImpl* t : live) {
    t->context = &fallback;
    t->prev = t->next = nullptr;
    fallback.Register(t);
  }
}

ContextScope::ContextScope(Context& context) : previous_(current_context) {
  current_context = &context;
}
ContextScope::~ContextScope() { current_context = previous_; }

void Context::Register(TensorImpl* impl) {
  std::lock_guard<std::mutex> lock(tensors_mutex_);
  impl->next = tensors_;
  if (tensors_) tensors_->prev = impl;
  tensors_ = impl;
  // An address freed during a running sync may come back as a new tensor.
  if (syncs_in_flight_ > 0) in_flight_dead_.erase(impl);
}

void Context::Unregister(TensorImpl* impl) {
  std::lock_guard<std::mutex> lock(tensors_mutex_);
  if (impl->prev) impl->prev->next = impl->next;
  if (impl->next) impl->next->prev = impl->prev;
  if (tensors_ == impl) tensors_ = impl->next;
  if (syncs_in_flight_ > 0) in_flight_dead_.insert(impl);
}

ir::Hash128 Context::CacheKey(const ir::Graph& graph) const {
  return ir::HashBuilder()
      .AddHash(graph.hash)
      .Add<int64_t>(runtime::Client::Default().device_count())
      .Add<int64_t>(partition_options_.strict)
      .Add<int64_t>(runtime::EnvironmentDisablesFusion())
      .AddString(kVersion)
      .Finish();
}

std::shared_ptr<const runtime::Executable> Context::ProgramFor(const ir::Graph& graph,
                                                               bool* compiled) {
  CheckNotOverwritten(graph);
  const int64_t misses = metrics_.cache_misses.load();
  std::shared_ptr<const Entry> entry = LookupOrCompile(CacheKey(graph), graph);
  if (compiled) *compiled = metrics_.cache_misses.load() > misses;
  if (entry->mesh) {
    Fail("[compile] this graph is sharded over {}; a compiled graph runs on one device",
         entry->mesh->ToString());
  }
  return {entry, entry->executable.get()};
}

bool Context::IsCached(const ir::Graph& graph) { return Lookup(CacheKey(graph)) != nullptr; }

std::shared_ptr<const Context::Entry> Context::Lookup(const ir::Hash128& key) {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);  // most recently used first
  return *it->second;
}

std::shared_ptr<const Context::Entry> Context::LookupOrCompile(const ir::Hash128& key,
                                                               const ir::Graph& graph) {
  std::promise<std::shared_ptr<const Entry>> promise;
  std::shared_future<std::shared_ptr<const Entry>> pending;
  bool compiles_here = false;
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      metrics_.cache_hits++;
      return *it->second;
    }
    if (auto it = compiling_.find(key); it != compiling_.end()) {
      pending = it->second;
    } else {
      pending = promise.get_future().share();
      compiling_.emplace(key, pending);
      compiles_here = true;
    }
  }
  if (!compiles_here) {
    metrics_.cache_hits++;  // another thread's compile, shared
    return pending.get();   // its error, if it failed
  }
  metrics_.cache_misses++;
  auto done = [&] {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    compiling_.erase(key);
  };
  try {
    std::shared_ptr<const Entry> entry = CompileAndInsert(key, graph);
    promise.set_value(entry);
    done();
    return entry;
  } catch (...) {
    promise.set_exception(std::current_exception());
    done();
    throw;
  }
}

std::shared_ptr<const Context::Entry> Context::CompileAndInsert(const ir::Hash128& key,
                                                                const ir::Graph& graph) {
  // Instruction names count from 0 in every compile: dumps do not depend on
  // what the process compiled before.
  hlo::NameScope names;
  auto entry = std::make_shared<Entry>();
  entry->key = key;
  entry->signature = Signature(graph);
  entry->parameter_sequence = graph.parameter_sequence;
  int64_t t0 = NowNs();
  std::optional<trace::Span> lower_span(std::in_place, "lower", "lower");
  auto module = ir::LowerGraph(graph, fmt::format("graph_{}", key.ToString().substr(0, 12)));
  lower_span.reset();
  trace::Span compile_span("compile", "compile");
  int64_t t1 = NowNs();
  entry->mesh = MeshOf(graph);
  if (entry->mesh) {
    spmd::PartitionOptions partition_options = partition_options_;
    partition_options.propagated_text = !dump_dir_.empty();
    spmd::PartitionedModule partitioned = spmd::Partition(*module, *entry->mesh, partition_options);
    entry->parameter_shardings = std::move(partitioned.parameter_shardings);
    entry->result_shardings = std::move(partitioned.result_shardings);
    entry->report = std::move(partitioned.report);
    runtime::CompileOptions options;
    options.client = &ClientFor(entry->mesh->size());
    entry->executable = runtime::Executable::Compile(*partitioned.module, options);
    int64_t arguments = 0;
    for (const Shape& shape : entry->executable->parameter_shapes()) arguments += shape.byte_size();
    entry->report.peak_bytes_per_device = arguments + entry->executable->stats().planned_peak_bytes;
    if (!dump_dir_.empty()) {
      std::string base = (std::filesystem::path(dump_dir_) / graph.hash.ToString()).string();
      std::filesystem::create_directories(dump_dir_);
      std::ofstream(base + ".spmd.hlo.txt") << hlo::ToText(*partitioned.module);
      std::ofstream(base + ".collectives.txt") << entry->report.ToString();
      std::ofstream(base + ".propagated.hlo.txt") << partitioned.propagated_text;
    }
  } else {
    runtime::CompileOptions options;
    options.verify_input = false;  // every shape came from the shape rules, when its node was built
    entry->executable = runtime::Executable::Compile(*module, options);
  }
  int64_t t2 = NowNs();
  metrics_.lower_ns += t1 - t0;
  metrics_.compile_ns += t2 - t1;
  metrics_.compiles++;
  if (!dump_dir_.empty()) Dump(graph, *module, entry->executable->module());
  std::string explanation = ExplainMiss(*entry);
  std::lock_guard<std::mutex> lock(cache_mutex_);
  last_miss_explanation_ = explanation;
  if (auto it = index_.find(key); it != index_.end()) return *it->second;  // another thread won
  lru_.push_front(entry);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back()->key);
    lru_.pop_back();
  }
  return entry;
}

std::string Context::ExplainMiss(const Entry& fresh) const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  // The cached graph most like this one: same node count, longest common prefix.
  const Entry* best = nullptr;
  size_t best_prefix = 0;
  for (const auto& e : lru_) {
    if (e->signature.size() != fresh.signature.size()) continue;
    size_t prefix = 0;
    while (prefix < e->signature.size() &&
           e->signature[prefix].node_hash == fresh.signature[prefix].node_hash &&
           e->signature[prefix].op == fresh.signature[prefix].op) {
      ++prefix;
    }
    if (!best || prefix > best_prefix) {
      best = e.get();
      best_prefix = prefix;
    }
  }
  if (!best) return "";
  if (best_prefix == fresh.signature.size()) {
    if (best->parameter_sequence != fresh.parameter_sequence) {
      return fmt::format(
          "cache miss: same ops as cached graph {}, but the parameter mapping differs "
          "(each use of an input reads parameter [{}] here, [{}] there)",
          best->key.ToString(), fmt::join(fresh.parameter_sequence, ","),
          fmt::join(best->parameter_sequence, ","));
    }
    return fmt::format(
        "cache miss: the graph matches cached graph {} node for node, but the roots differ",
        best->key.ToString());
  }
  const NodeSignature& now = fresh.signature[best_prefix];
  const NodeSignature& then = best->signature[best_prefix];
  std::string what;
  if (now.op != then.op) {
    what = fmt::format("op {} where the cached graph has {}", now.op, then.op);
  } else if (now.shapes != then.shapes) {
    what = fmt::format("{} has shape {} where the cached graph has {}", now.op, now.shapes,
                       then.shapes);
  } else if (now.sharding != then.sharding) {
    what = fmt::format("{} has sharding {} where the cached graph has {}", now.op, now.sharding,
                       then.sharding);
  } else if (now.op == "constant") {
    what = fmt::format("a constant {} has a different value", now.shapes);
  } else {
    what = fmt::format("{} {} has different attributes", now.op, now.shapes);
  }
  return fmt::format("cache miss: differs from cached graph {} at node {} of {}: {}",
                     best->key.ToString(), best_prefix, fresh.signature.size(), what);
}

void Context::Dump(const ir::Graph& graph, const hlo::Module& module,
                   const hlo::Module& optimized) const {
  std::filesystem::create_directories(dump_dir_);
  std::string base = (std::filesystem::path(dump_dir_) / graph.hash.ToString()).string();
  std::ofstream(base + ".ir.txt") << ir::GraphToText(graph);
  std::ofstream(base + ".dot") << ir::GraphToDot(graph);
  std::ofstream(base + ".hlo.txt") << hlo::ToText(module);
  std::ofstream(base + ".optimized.hlo.txt") << hlo::ToText(optimized);  // passes, fusions
}

std::vector<TensorImpl*> Context::TensorsRequiringGrad() const {
  std::lock_guard<std::mutex> lock(tensors_mutex_);
  std::vector<TensorImpl*> out;
  for (TensorImpl* t = tensors_; t; t = t->next) {
    if (t->requires_grad) out.push_back(t);
  }
  return out;
}

std::vector<std::pair<TensorImpl*, ir::Value>> Context::LiveValues() const {
  std::lock_guard<std::mutex> lock(tensors_mutex_);
  std::vector<std::pair<TensorImpl*, ir::Value>> out;
  for (TensorImpl* t = tensors_; t; t = t->next) out.emplace_back(t, t->value);
  return out;
}

void Context::SetValue(TensorImpl* impl, ir::Value value) {
  std::lock_guard<std::mutex> lock(tensors_mutex_);
  impl->value = std::move(value);
}

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
      runtime::CompileOptions options;
      options.client = &client;
      slot = runtime::Executable::Compile(*partitioned.module, options);
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
std::string Context::MetricsReport() const {
  auto ms = [](int64_t ns) { return static_cast<double>(ns) / 1e6; };
  return fmt::format(
      "Metric: GraphsTraced {}\nMetric: Compiles {}\nMetric: CacheHits {}\nMetric: CacheMisses {}\n"
      "Metric: Executions {}\nMetric: TraceTime {:.3f} ms\nMetric: LowerTime {:.3f} ms\n"
      "Metric: CompileTime {:.3f} ms\nMetric: ExecuteTime {:.3f} ms\nMetric: BytesToDevice {}\n"
      "Metric: BytesFromDevice {}\nMetric: BytesDonated {}\nMetric: BytesCollective {}\n"
      "Metric: CachedGraphs {}\n",
      metrics_.graphs_traced.load(), metrics_.compiles.load(), metrics_.cache_hits.load(),
      metrics_.cache_misses.load(), metrics_.executions.load(), ms(metrics_.trace_ns),
      ms(metrics_.lower_ns), ms(metrics_.compile_ns), ms(metrics_.execute_ns),
      metrics_.bytes_to_device.load(), metrics_.bytes_from_device.load(),
      metrics_.bytes_donated.load(), metrics_.bytes_collective.load(), cache_size());
}

void Context::ResetMetrics() {
  for (auto* c :
       {&metrics_.graphs_traced, &metrics_.compiles, &metrics_.cache_hits, &metrics_.cache_misses,
        &metrics_.executions, &metrics_.trace_ns, &metrics_.lower_ns, &metrics_.compile_ns,
        &metrics_.execute_ns, &metrics_.bytes_to_device, &metrics_.bytes_from_device,
        &metrics_.bytes_donated, &metrics_.bytes_collective}) {
    c->store(0);
  }
}

int64_t Context::cache_size() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  return static_cast<int64_t>(lru_.size());
}

void Context::set_cache_capacity(size_t capacity) {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  capacity_ = std::max<size_t>(capacity, 1);
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back()->key);
    lru_.pop_back();
  }
}

void Context::ClearCache() {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  lru_.clear();
  index_.clear();
}

void Context::set_dump_dir(std::string dir) {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  dump_dir_ = std::move(dir);
}

Config Context::config() const {
  Config c = GetConfig();
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    c.dump_dir = dump_dir_;
  }
  c.index_checks = index_checks_;
  c.device_threads = device_threads_;
  return c;
}

void Context::set_config(const Config& config) {
  SetConfig(config);  // checks the values and the per-process settings
  set_dump_dir(config.dump_dir);
  index_checks_ = config.index_checks;
  device_threads_ = config.device_threads;
}

std::string Context::last_miss_explanation() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  return last_miss_explanation_;
}

LoweringContext::LoweringContext(const std::vector<Tensor>& roots) {
  std::vector<ir::Value> values;
  for (const Tensor& t : roots) values.push_back(t.value());
  graph_ = ir::BuildGraph(values);
  module_ = ir::LowerGraph(graph_);
}

std::string LoweringContext::hlo_text() const { return hlo::ToText(*module_); }

int64_t LoweringContext::tensor_parameter_id(const Tensor& tensor) const {
  const ir::Node* node = tensor.value().node.get();
  return node->is_leaf() ? graph_.ParameterIdOf(node) : -1;
}

}  // namespace strata::lazy
