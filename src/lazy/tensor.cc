#include "strata/lazy/tensor.h"

#include <algorithm>

#include "strata/core/error.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"

namespace strata {

using lazy::Context;
using lazy::TensorImpl;

Tensor::Tensor(ir::Value value) {
  if (!value) Fail("[tensor] cannot make a tensor from an empty IR value");
  impl_ = std::make_shared<TensorImpl>(std::move(value));
}

Tensor::Tensor(const Tensor& other) {
  if (other.impl_) {
    impl_ = std::make_shared<TensorImpl>(other.value());
    impl_->sharding = other.impl_->sharding;
    impl_->requires_grad = other.impl_->requires_grad;  // a copy is a leaf too (not its grad)
  }
}

// Assignment keeps this handle's impl and gives it everything of the source
// (value, sharding spec, requires_grad; no accumulated grad): the same as a
// fresh copy to every observer, but the live-tensor list still knows the
// handle, so scan can undo an assignment its body must not make.
Tensor& Tensor::operator=(const Tensor& other) {
  if (this == &other) return *this;
  if (!impl_ || !other.impl_) {
    impl_ = other.impl_ ? Tensor(other).impl_ : nullptr;
    return *this;
  }
  impl_->sharding = other.impl_->sharding;
  impl_->requires_grad = other.impl_->requires_grad;
  impl_->grad.reset();
  impl_->context->SetValue(impl_.get(), other.value());
  return *this;
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this == &other) return *this;
  if (!impl_ || !other.impl_) {
    impl_ = std::move(other.impl_);
    return *this;
  }
  impl_->sharding = std::move(other.impl_->sharding);
  impl_->requires_grad = other.impl_->requires_grad;
  impl_->grad.reset();
  impl_->context->SetValue(impl_.get(), other.impl_->value);
  other.impl_.reset();
  return *this;
}

Tensor::~Tensor() = default;

Tensor Tensor::FromBytes(const Shape& shape, std::span<const uint8_t> bytes) {
  auto buffer = runtime::Buffer::FromHost(shape, bytes, runtime::Client::Default().device(0));
  Context::Get().metrics().bytes_to_device += static_cast<int64_t>(bytes.size());
  return Tensor(ir::Value{ir::Node::MakeDeviceData(std::move(buffer))});
}

const ir::Value& Tensor::value() const {
  if (!impl_) Fail("[tensor] use of an undefined (default-constructed or moved-from) tensor");
  return impl_->value;
}

int64_t Tensor::dim(int64_t d) const {
  int64_t r = rank();
  if (d < -r || d >= r) Fail("[dim] dimension {} out of range for {}", d, shape().ToString());
  return shape().dim(d < 0 ? d + r : d);
}

const std::optional<ir::Sharding>& Tensor::sharding() const {
  if (!impl_) Fail("[tensor] use of an undefined tensor");
  return impl_->sharding;
}

bool Tensor::is_materialized() const { return value().node->kind() == ir::NodeKind::kDeviceData; }

Tensor& Tensor::sync() {
  if (!is_materialized()) impl_->context->Sync({impl_.get()});
  return *this;
}

std::vector<uint8_t> Tensor::ToBytes(DType expected) const {
  if (dtype() != expected) {
    Fail("[to_vector] the tensor is {}, but {} was requested; convert it with astype first",
         shape().ToString(), DTypeName(expected));
  }
  const_cast<Tensor*>(this)->sync();
  runtime::Buffer b = impl_->context->WholeOf(*value().node);
  impl_->context->metrics().bytes_from_device += b.size_bytes();
  return std::vector<uint8_t>(b.data(), b.data() + b.size_bytes());
}

void Tensor::Rebind(ir::Value value) {
  if (!impl_) {
    impl_ = std::make_shared<TensorImpl>(std::move(value));
    return;
  }
  // A handle's own spec stays with it: the new value carries it too.
  if (impl_->sharding &&
      (!value.node->sharding() || !(*value.node->sharding() == *impl_->sharding))) {
    value = ir::Value{value.node->CloneWithSharding(impl_->sharding), value.index};
  }
  impl_->value = std::move(value);
}

Tensor& Tensor::copy_(const Tensor& source) {
  if (source.shape() != shape()) {
    Fail("[copy_] source {} does not match destination {}", source.shape().ToString(),
         shape().ToString());
  }
  Rebind(source.value());
  return *this;
}

Tensor& Tensor::operator+=(const Tensor& other) { return copy_(*this + other); }
Tensor& Tensor::operator-=(const Tensor& other) { return copy_(*this - other); }
Tensor& Tensor::operator*=(const Tensor& other) { return copy_(*this * other); }
Tensor& Tensor::operator/=(const Tensor& other) { return copy_(*this / other); }

void sync() { Context::Get().Sync({}); }

void sync(std::span<Tensor* const> tensors) {
  // One graph per context the tensors were made in (one, almost always).
  std::vector<std::pair<Context*, std::vector<TensorImpl*>>> by_context;
  for (Tensor* t : tensors) {
    TensorImpl* impl = t->impl();
    if (!impl) Fail("[sync] an undefined (default-constructed or moved-from) tensor");
    auto it = std::find_if(by_context.begin(), by_context.end(),
                           [&](const auto& group) { return group.first == impl->context; });
    if (it == by_context.end()) {
      by_context.push_back({impl->context, {impl}});
    } else {
      it->second.push_back(impl);
    }
  }
  for (auto& [context, impls] : by_context) context->Sync(impls);
}

void mark_sharding(Tensor& tensor, const ir::Mesh& mesh, const ir::PartitionSpec& spec) {
  ir::Sharding sharding(mesh, spec, tensor.rank());
  lazy::TensorImpl* impl = tensor.impl();
  impl->sharding = sharding;
  tensor.Rebind(ir::Value{tensor.value().node->CloneWithSharding(sharding), tensor.value().index});
}

std::optional<ir::Sharding> sharding_of(const Tensor& tensor) {
  if (tensor.sharding()) return tensor.sharding();
  const ir::Value& v = tensor.value();
  if (v.node->is_leaf()) return v.node->sharding();  // device data: the layout it was made in
  return lazy::Context::Get().PendingShardingOf(v);
}

void clear_sharding(Tensor& tensor) {
  lazy::TensorImpl* impl = tensor.impl();
  if (!impl) Fail("[clear_sharding] undefined tensor");
  impl->sharding.reset();
  const ir::Value& v = tensor.value();
  if (v.node->sharding())
    tensor.Rebind(ir::Value{v.node->CloneWithSharding(std::nullopt), v.index});
}

}  // namespace strata
