#include "strata/nn/tensor_files.h"

#include <vector>

#include "strata/core/error.h"
#include "strata/io/safetensors.h"

namespace strata {

std::map<std::string, Tensor> load_safetensors(const std::string& path) {
  io::ShardedCheckpoint checkpoint = io::ShardedCheckpoint::Open(path);
  std::map<std::string, Tensor> tensors;
  for (const std::string& name : checkpoint.names()) {
    const io::TensorView& view = checkpoint.Get(name);
    tensors.emplace(name, Tensor::FromBytes(Shape(view.dtype, view.shape), view.data));
  }
  return tensors;
}

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> values;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) Fail("[save_safetensors] tensor '{}' is undefined", name);
    values.push_back(t);
  }
  std::vector<Tensor*> pointers;
  for (Tensor& t : values) pointers.push_back(&t);
  sync(pointers);
  std::vector<io::TensorData> data;
  size_t i = 0;
  for (const auto& [name, t] : tensors) {
    const Tensor& value = values[i++];
    data.push_back({name, value.dtype(), value.shape().dims(), value.bytes()});
  }
  std::map<std::string, std::string> header = io::ChecksumMetadata(data);
  for (const auto& [key, value] : metadata) {
    if (header.count(key)) Fail("[save_safetensors] metadata key '{}' is strata's own", key);
    header[key] = value;
  }
  io::WriteSafetensors(path, data, header);
}

}  // namespace strata
