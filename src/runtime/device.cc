#include "strata/runtime/device.h"

#include <fmt/core.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "strata/core/config.h"
#include "strata/core/error.h"
#include "strata/runtime/cpu.h"
#include "strata/runtime/profile.h"
#include "strata/runtime/thread_pool.h"

namespace strata::runtime {

namespace {

// Blocks at least this large are mapped from the OS, not taken from malloc's
// heap. Left to glibc, large blocks raise its dynamic mmap threshold and then
// land in the heap among the IR's and compiler's small objects; once a deep
// model's weights have come and gone, that heap's fragmented free lists made
// every later small allocation slower (a 1-layer step compiled 2-3x slower in
// a process that had built a 64-layer model; bench/RESULTS.md).
constexpr int64_t kMapped = 256 << 10;

uint8_t* MapPages(int64_t bytes) {
  void* p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

void UnmapPages(uint8_t* p, int64_t bytes) { munmap(p, static_cast<size_t>(bytes)); }

}  // namespace

std::shared_ptr<uint8_t> AllocateAligned(int64_t bytes) {
  size_t size = static_cast<size_t>((std::max<int64_t>(bytes, 1) + 63) / 64 * 64);
  if (static_cast<int64_t>(size) >= kMapped) {  // page-aligned, so 64-byte aligned
    uint8_t* p = MapPages(static_cast<int64_t>(size));
    if (!p) Fail("[runtime] out of memory allocating {} bytes", bytes);
    return std::shared_ptr<uint8_t>(p, [size](uint8_t* q) { UnmapPages(q, size); });
  }
  void* p = std::aligned_alloc(64, size);
  if (!p) Fail("[runtime] out of memory allocating {} bytes", bytes);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

// Freed blocks of at least kMinCached bytes wait here (up to kMaxCached in
// all) for an allocation of the same rounded size.
struct Device::BlockCache {
  static constexpr int64_t kMinCached = kMapped;
  static constexpr int64_t kMaxCached = int64_t{1} << 30;
  static constexpr int64_t kGranule = 1 << 16;
  std::mutex mutex;
  std::multimap<int64_t, uint8_t*> free;
  int64_t cached = 0;

  ~BlockCache() {
    for (auto& [size, p] : free) UnmapPages(p, size);
  }
};

Device::Device(int id, std::string kind)
    : id_(id), kind_(std::move(kind)), cache_(std::make_shared<BlockCache>()) {}

Device::~Device() = default;

std::shared_ptr<uint8_t> Device::Allocate(int64_t bytes) const {
  if (bytes < BlockCache::kMinCached) return AllocateAligned(bytes);
  int64_t size = (bytes + BlockCache::kGranule - 1) / BlockCache::kGranule * BlockCache::kGranule;
  uint8_t* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    if (auto it = cache_->free.find(size); it != cache_->free.end()) {
      block = it->second;
      cache_->free.erase(it);
      cache_->cached -= size;
    }
  }
  if (!block) {
    block = MapPages(size);
    if (!block) Fail("[runtime] out of memory allocating {} bytes on {}", bytes, ToString());
  }
  // The deleter holds the cache, so buffers may outlive their device.
  return std::shared_ptr<uint8_t>(block, [cache = cache_, size](uint8_t* p) {
    std::lock_guard<std::mutex> lock(cache->mutex);
    if (cache->cached + size > BlockCache::kMaxCached) {
      UnmapPages(p, size);
      return;
    }
    cache->free.emplace(size, p);
    cache->cached += size;
  });
}

int64_t Device::cached_bytes() const {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  return cache_->cached;
}

Buffer Buffer::Alias(const Shape& shape, const Buffer& storage) {
  if (!shape.is_array() || shape.byte_size() != storage.size_bytes()) {
    Fail("[buffer] cannot view {} bytes as {}", storage.size_bytes(), shape.ToString());
  }
  Buffer b = storage;
  b.shape_ = shape;
  return b;
}

Buffer Buffer::Borrow(const Shape& shape, std::shared_ptr<uint8_t> data, const Device* device) {
  if (!shape.is_array()) Fail("[buffer] cannot borrow memory as tuple shape {}", shape.ToString());
  if (reinterpret_cast<uintptr_t>(data.get()) % 64 != 0)
    Fail("[buffer] borrowed memory for {} is not 64-byte aligned", shape.ToString());
  Buffer b;
  b.shape_ = shape;
  b.device_ = device;
  b.data_ = std::move(data);
  b.borrowed_ = true;
  return b;
}

Buffer Buffer::Allocate(const Shape& shape, const Device* device) {
  if (!shape.is_array()) Fail("[buffer] cannot allocate tuple shape {}", shape.ToString());
  Buffer b;
  b.shape_ = shape;
  b.device_ = device;
  b.data_ = device ? device->Allocate(shape.byte_size()) : AllocateAligned(shape.byte_size());
  return b;
}

Buffer Buffer::FromHost(const Shape& shape, std::span<const uint8_t> bytes, const Device* device) {
  Buffer b = Allocate(shape, device);
  if (static_cast<int64_t>(bytes.size()) != shape.byte_size()) {
    Fail("[buffer] {} needs {} bytes, got {}", shape.ToString(), shape.byte_size(), bytes.size());
  }
  if (!bytes.empty()) std::memcpy(b.data(), bytes.data(), bytes.size());
  return b;
}

struct Client::ArenaPool {
  std::mutex mutex;
  std::multimap<int64_t, std::shared_ptr<uint8_t>> idle;  // by capacity
  int64_t idle_bytes = 0;
  int64_t allocated = 0;
};

std::shared_ptr<uint8_t> Client::Arena(int64_t bytes) const {
  std::shared_ptr<uint8_t> arena;
  int64_t capacity = 0;
  std::vector<std::shared_ptr<uint8_t>> too_small;  // unmapped after the lock is released
  {
    std::lock_guard<std::mutex> lock(arenas_->mutex);
    if (auto it = arenas_->idle.lower_bound(bytes); it != arenas_->idle.end()) {
      capacity = it->first;
      arena = std::move(it->second);
      arenas_->idle.erase(it);
      arenas_->idle_bytes -= capacity;
    } else {
      for (auto& entry : arenas_->idle) too_small.push_back(std::move(entry.second));
      arenas_->idle.clear();
      arenas_->idle_bytes = 0;
      arenas_->allocated++;
    }
  }
  too_small.clear();
  if (!arena) {
    capacity = std::max<int64_t>(bytes, 1);
    arena = AllocateAligned(capacity);
  }
  // The handle the run holds; its deleter puts the arena back (the pool
  // outlives the client while a run still holds one of its arenas).
  uint8_t* data = arena.get();
  return std::shared_ptr<uint8_t>(
      data, [pool = arenas_, arena = std::move(arena), capacity](uint8_t*) mutable {
        std::lock_guard<std::mutex> lock(pool->mutex);
        pool->idle.emplace(capacity, std::move(arena));
        pool->idle_bytes += capacity;
      });
}

int64_t Client::idle_arena_bytes() const {
  std::lock_guard<std::mutex> lock(arenas_->mutex);
  return arenas_->idle_bytes;
}

int64_t Client::arenas_allocated() const {
  std::lock_guard<std::mutex> lock(arenas_->mutex);
  return arenas_->allocated;
}

Client::Client(int num_devices, int num_threads) : arenas_(std::make_shared<ArenaPool>()) {
  if (num_devices < 1) Fail("[runtime] need at least one device, got {}", num_devices);
  for (int i = 0; i < num_devices; ++i) devices_.push_back(std::make_unique<Device>(i, "cpu"));
  if (num_threads <= 0)
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  pool_ = std::make_unique<ThreadPool>(num_threads);
}

Client::~Client() = default;

// Per process: the default client owns this machine's cores (its thread
// pool) and its CPU devices, which every context shares (a mesh larger than
// it gets virtual devices of its own).
Client& Client::Default() {
  static Client* client = [] {
    KernelIsa();  // a bad STRATA_ISA fails here, before any kernel runs
    const Config config = GetConfig();
    MarkProcessSettingsRead();
    auto* client = new Client(config.cpu_devices);
    if (config.profile) {
      static KernelProfile profile;
      client->set_profile(&profile);
      std::atexit([] { fmt::print(stderr, "{}", profile.Report()); });
    }
    return client;
  }();
  return *client;
}

const Device* Client::device(int i) const {
  if (i < 0 || i >= device_count()) {
    Fail("[runtime] device {} out of range: this client has {} device(s)", i, device_count());
  }
  return devices_[i].get();
}

}  // namespace strata::runtime
