// Devices and buffers. Every buffer belongs to a device. The CPU backend
// offers N virtual devices (STRATA_CPU_DEVICES, default 1) so that SPMD
// programs can be partitioned across them; today they share one process and
// one memory.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/core/shape.h"

namespace strata::runtime {

class ThreadPool;
class KernelProfile;

class Device {
 public:
  Device(int id, std::string kind);
  ~Device();
  int id() const { return id_; }
  const std::string& kind() const { return kind_; }
  std::string ToString() const { return kind_ + ":" + std::to_string(id_); }

  // 64-byte aligned memory of this device. Large blocks are cached after
  // they are freed and handed out again for the same size, so a program's
  // result buffers are not page-faulted in anew on every run.
  std::shared_ptr<uint8_t> Allocate(int64_t bytes) const;
  int64_t cached_bytes() const;

 private:
  struct BlockCache;
  int id_;
  std::string kind_;
  std::shared_ptr<BlockCache> cache_;
};

// A dense row-major array in a device's memory. A cheap handle: copies share
// the bytes. Allocations are 64-byte aligned.
class Buffer {
 public:
  Buffer() = default;
  static Buffer Allocate(const Shape& shape, const Device* device);
  static Buffer FromHost(const Shape& shape, std::span<const uint8_t> bytes, const Device* device);
  // `storage`'s bytes seen as `shape` (the same byte size), shared.
  static Buffer Alias(const Shape& shape, const Buffer& storage);
  template <typename T>
  static Buffer FromVector(const std::vector<T>& values, std::vector<int64_t> dims,
                           const Device* device);
  // Memory another owner lends (a NumPy or PyTorch array through DLPack),
  // seen as `shape` without a copy; `data`'s deleter hands it back. It must
  // be 64-byte aligned, as the kernels expect. Borrowed bytes are never
  // donated to a run's results: their owner may still read them.
  static Buffer Borrow(const Shape& shape, std::shared_ptr<uint8_t> data, const Device* device);

  bool defined() const { return data_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Device* device() const { return device_; }
  uint8_t* data() const { return data_.get(); }
  int64_t size_bytes() const { return shape_.byte_size(); }
  // Handles sharing these bytes (this one included).
  int64_t use_count() const { return data_.use_count(); }
  bool borrowed() const { return borrowed_; }
  template <typename T>
  T* data_as() const {
    return reinterpret_cast<T*>(data_.get());
  }
  template <typename T>
  std::vector<T> ToVector() const;

 private:
  Shape shape_;
  const Device* device_ = nullptr;
  std::shared_ptr<uint8_t> data_;
  bool borrowed_ = false;
};

// The runtime context: devices, the compute thread pool and the profile its
// runs add to. Client::Default() serves the process; tests and meshes
// construct their own.
class Client {
 public:
  explicit Client(int num_devices, int num_threads = 0);
  ~Client();
  static Client& Default();

  int device_count() const { return static_cast<int>(devices_.size()); }
  const Device* device(int i) const;
  ThreadPool& thread_pool() const { return *pool_; }

  // The profile every program compiled for this client adds its kernel
  // times to while it runs (not owned; null, the default, profiles nothing).
  // The default client's is the one STRATA_PROFILE=1 makes, printed at exit.
  KernelProfile* profile() const { return profile_.load(std::memory_order_acquire); }
  void set_profile(KernelProfile* profile) { profile_.store(profile, std::memory_order_release); }

  // Scratch memory of at least `bytes` for one run of a program (its arena),
  // back in this client's pool when the last handle drops. Every program
  // compiled for the client draws from one pool: a run takes the smallest
  // idle arena that fits, else a new one, and then gives the idle arenas
  // too small to serve it back to the OS. So the pool holds about the
  // largest arena its programs need at once (a training step's), with its
  // pages kept (not faulted in on every run), not one arena per compiled
  // program: an initializer's or an evaluation's arena does not stay
  // resident beside the step's.
  std::shared_ptr<uint8_t> Arena(int64_t bytes) const;
  // What the pool holds while no run uses it, and how many arenas it has
  // allocated in all.
  int64_t idle_arena_bytes() const;
  int64_t arenas_allocated() const;

 private:
  struct ArenaPool;
  std::vector<std::unique_ptr<Device>> devices_;
  std::unique_ptr<ThreadPool> pool_;
  std::atomic<KernelProfile*> profile_{nullptr};
  std::shared_ptr<ArenaPool> arenas_;
};

// 64-byte aligned allocation owned by a shared_ptr.
std::shared_ptr<uint8_t> AllocateAligned(int64_t bytes);

template <typename T>
Buffer Buffer::FromVector(const std::vector<T>& values, std::vector<int64_t> dims,
                          const Device* device) {
  Shape shape(DTypeOf<T>::value, std::move(dims));
  if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> packs bits: one byte per element
    std::vector<uint8_t> bytes(values.begin(), values.end());
    return FromHost(shape, bytes, device);
  } else {
    return FromHost(shape,
                    std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values.data()),
                                             values.size() * sizeof(T)),
                    device);
  }
}

template <typename T>
std::vector<T> Buffer::ToVector() const {
  if constexpr (std::is_same_v<T, bool>) {
    const uint8_t* p = data();
    return std::vector<bool>(p, p + shape_.num_elements());
  } else {
    std::vector<T> out(shape_.num_elements());
    if (!out.empty()) std::copy_n(data_as<const T>(), out.size(), out.data());
    return out;
  }
}

}  // namespace strata::runtime
