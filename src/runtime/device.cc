#include "strata/runtime/device.h"

#include <cstdlib>
#include <cstring>
#include <thread>

#include "strata/core/error.h"
#include "strata/runtime/thread_pool.h"

namespace strata::runtime {

std::shared_ptr<uint8_t> AllocateAligned(int64_t bytes) {
  size_t size = static_cast<size_t>((std::max<int64_t>(bytes, 1) + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, size);
  if (!p) Fail("[runtime] out of memory allocating {} bytes", bytes);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

Buffer Buffer::Allocate(const Shape& shape, const Device* device) {
  if (!shape.is_array()) Fail("[buffer] cannot allocate tuple shape {}", shape.ToString());
  Buffer b;
  b.shape_ = shape;
  b.device_ = device;
  b.data_ = AllocateAligned(shape.byte_size());
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

Client::Client(int num_devices, int num_threads) {
  if (num_devices < 1) Fail("[runtime] need at least one device, got {}", num_devices);
  for (int i = 0; i < num_devices; ++i) devices_.push_back(std::make_unique<Device>(i, "cpu"));
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  pool_ = std::make_unique<ThreadPool>(num_threads);
}

Client::~Client() = default;

Client& Client::Default() {
  static Client* client = [] {
    int devices = 1;
    if (const char* env = std::getenv("STRATA_CPU_DEVICES")) {
      char* end = nullptr;
      long n = std::strtol(env, &end, 10);
      if (end == env || *end != '\0' || n < 1 || n > 1024) {
        Fail("[runtime] STRATA_CPU_DEVICES must be an integer in [1, 1024], got '{}'", env);
      }
      devices = static_cast<int>(n);
    }
    return new Client(devices);
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
