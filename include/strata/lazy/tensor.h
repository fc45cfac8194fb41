// strata::Tensor: a cheap value handle on a lazy IR value. Ops (lazy/ops.h)
// only build IR; sync(), to_vector() and item() compile and run what is
// pending. Copying a Tensor gives an independent handle on the same value:
// rebinding one (a += b, a.copy_(b)) never changes the other.
#pragma once

#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "strata/core/shape.h"
#include "strata/ir/node.h"

namespace strata {

namespace lazy {
struct TensorImpl;
}

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(ir::Value value);
  Tensor(const Tensor& other);
  Tensor(Tensor&& other) noexcept = default;
  Tensor& operator=(const Tensor& other);
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor();

  // Host data in, row-major.
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values, std::vector<int64_t> dims) {
    if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> packs bits: one byte per element
      std::vector<uint8_t> bytes(values.begin(), values.end());
      return FromBytes(Shape(DType::kPred, std::move(dims)), bytes);
    } else {
      return FromBytes(Shape(DTypeOf<T>::value, std::move(dims)),
                       std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values.data()),
                                                values.size() * sizeof(T)));
    }
  }
  static Tensor FromBytes(const Shape& shape, std::span<const uint8_t> bytes);

  bool defined() const { return impl_ != nullptr; }
  const ir::Value& value() const;
  const Shape& shape() const { return value().shape(); }
  DType dtype() const { return shape().dtype(); }
  int64_t rank() const { return shape().rank(); }
  int64_t dim(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape().num_elements(); }
  const std::optional<ir::Sharding>& sharding() const;
  // Whether the value is computed (device data) rather than pending IR.
  bool is_materialized() const;

  // Materialize: runs only the graph this tensor needs.
  Tensor& sync();
  template <typename T>
  std::vector<T> to_vector() const {
    auto bytes = ToBytes(DTypeOf<T>::value);
    if constexpr (std::is_same_v<T, bool>) {
      return std::vector<bool>(bytes.begin(), bytes.end());
    } else {
      std::vector<T> out(bytes.size() / sizeof(T));
      if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
      return out;
    }
  }
  // The raw bytes, row-major, in the tensor's own dtype (materializes it).
  std::vector<uint8_t> bytes() const { return ToBytes(dtype()); }
  template <typename T>
  T item() const {
    if (numel() != 1) Fail("[item] needs a tensor with one element, got {}", shape().ToString());
    return to_vector<T>()[0];
  }

  // In-place style updates rebind this handle only.
  Tensor& copy_(const Tensor& source);
  Tensor& operator+=(const Tensor& other);
  Tensor& operator-=(const Tensor& other);
  Tensor& operator*=(const Tensor& other);
  Tensor& operator/=(const Tensor& other);

  // Rebinds to `value` (used by ops that update in place and by sync).
  void Rebind(ir::Value value);
  lazy::TensorImpl* impl() const { return impl_.get(); }

 private:
  std::vector<uint8_t> ToBytes(DType expected) const;
  std::shared_ptr<lazy::TensorImpl> impl_;
};

// Runs the pending IR of every live tensor the calling thread made, as one
// graph (PyTorch/XLA's mark_step). Tensors other threads made are theirs to
// sync: a global sync never rebinds a tensor another thread is reading.
void sync();
// Runs the pending IR of `tensors` only.
void sync(std::span<Tensor* const> tensors);

// Sharding: records `spec` on the tensor and gives it a cloned, sharded IR
// value; device data keeps its buffer, so it stays the same parameter.
void mark_sharding(Tensor& tensor, const ir::Mesh& mesh, const ir::PartitionSpec& spec);
void clear_sharding(Tensor& tensor);
// Where the tensor's value lives: its own spec when it has one; else the
// sharding its value was computed with (a result or gradient of a sharded
// sync keeps the layout the partitioner chose); else, for a pending value
// of a sharded graph, the layout the partitioner gives it (this compiles the
// tensor's graph, cached for its sync). nullopt when nothing is sharded.
std::optional<ir::Sharding> sharding_of(const Tensor& tensor);

}  // namespace strata
