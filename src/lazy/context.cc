#include "strata/lazy/context.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "compile_cache.h"
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

namespace strata::lazy {
namespace context_detail {

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
}  // namespace context_detail

using namespace context_detail;

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
    if (check.divisor) {
      Fail("[{}] integer division by zero (torch's ZeroDivisionError), at [{}] of the divisor {}",
           check.op, fmt::join(at, ", "), check.index_shape.ToString());
    }
    Fail("[{}] index {} is out of range {}, at [{}] of the index {}", check.op, found[1],
         check.range, fmt::join(at, ", "), check.index_shape.ToString());
  }
}

namespace {
thread_local Context* current_context = nullptr;

// The dump directory (STRATA_DUMP_DIR) made if missing: an Error naming it
// when it cannot be, not the standard library's filesystem_error.
void MakeDumpDirectory(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) Fail("[dump] STRATA_DUMP_DIR: cannot make '{}': {}", dir, error.message());
}
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
      .Add<int64_t>(compiler::EnvironmentDisablesFusion())
      .Add<int64_t>(GetConfig().overlap_collectives)
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
    for (const spmd::AxisSharding& layout : entry->result_shardings) {
      entry->report.result_layouts.push_back(
          ir::Sharding(*entry->mesh, SpecOf(*entry->mesh, layout), layout.rank()).ToString());
    }
    compiler::CompileOptions options;
    options.client = &ClientFor(entry->mesh->size());
    entry->executable = compiler::Compile(*partitioned.module, options);
    int64_t arguments = 0;
    for (const Shape& shape : entry->executable->parameter_shapes()) arguments += shape.byte_size();
    entry->report.peak_bytes_per_device = arguments + entry->executable->stats().planned_peak_bytes;
    if (!dump_dir_.empty()) {
      std::string base = (std::filesystem::path(dump_dir_) / graph.hash.ToString()).string();
      MakeDumpDirectory(dump_dir_);
      std::ofstream(base + ".spmd.hlo.txt") << hlo::ToText(*partitioned.module);
      std::ofstream(base + ".collectives.txt") << entry->report.ToString();
      std::ofstream(base + ".propagated.hlo.txt") << partitioned.propagated_text;
    }
  } else {
    const std::string cache_dir = GetConfig().cache_dir;
    const ir::Hash128 disk_key = DiskCacheKey(key);
    if (!cache_dir.empty()) entry->executable = LoadCompiled(cache_dir, disk_key);
    if (entry->executable) {
      metrics_.disk_cache_hits++;
    } else {
      compiler::CompileOptions options;
      options.verify_input = false;  // every shape came from the shape rules at its node
      entry->executable = compiler::Compile(*module, options);
      metrics_.compiles++;
      if (!cache_dir.empty()) StoreCompiled(cache_dir, disk_key, *entry->executable);
    }
  }
  int64_t t2 = NowNs();
  metrics_.lower_ns += t1 - t0;
  metrics_.compile_ns += t2 - t1;
  if (entry->mesh) metrics_.compiles++;
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
  MakeDumpDirectory(dump_dir_);
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

std::string Context::MetricsReport() const {
  auto ms = [](int64_t ns) { return static_cast<double>(ns) / 1e6; };
  return fmt::format(
      "Metric: GraphsTraced {}\nMetric: Compiles {}\nMetric: CacheHits {}\nMetric: CacheMisses {}\n"
      "Metric: Executions {}\nMetric: TraceTime {:.3f} ms\nMetric: LowerTime {:.3f} ms\n"
      "Metric: CompileTime {:.3f} ms\nMetric: ExecuteTime {:.3f} ms\nMetric: BytesToDevice {}\n"
      "Metric: BytesFromDevice {}\nMetric: BytesDonated {}\nMetric: BytesCollective {}\n"
      "Metric: CachedGraphs {}\nMetric: DiskCacheHits {}\n",
      metrics_.graphs_traced.load(), metrics_.compiles.load(), metrics_.cache_hits.load(),
      metrics_.cache_misses.load(), metrics_.executions.load(), ms(metrics_.trace_ns),
      ms(metrics_.lower_ns), ms(metrics_.compile_ns), ms(metrics_.execute_ns),
      metrics_.bytes_to_device.load(), metrics_.bytes_from_device.load(),
      metrics_.bytes_donated.load(), metrics_.bytes_collective.load(), cache_size(),
      metrics_.disk_cache_hits.load());
}

void Context::ResetMetrics() {
  for (auto* c :
       {&metrics_.graphs_traced, &metrics_.compiles, &metrics_.cache_hits, &metrics_.cache_misses,
        &metrics_.executions, &metrics_.trace_ns, &metrics_.lower_ns, &metrics_.compile_ns,
        &metrics_.execute_ns, &metrics_.bytes_to_device, &metrics_.bytes_from_device,
        &metrics_.bytes_donated, &metrics_.bytes_collective, &metrics_.disk_cache_hits}) {
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
