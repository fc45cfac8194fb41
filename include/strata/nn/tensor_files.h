// Tensors by name to and from safetensors files, as
// safetensors.torch.load_file / save_file and mx.load / mx.save give them.
#pragma once

#include <map>
#include <string>

#include "strata/lazy/tensor.h"

namespace strata {

// Every tensor of a safetensors file, or of a sharded checkpoint (its
// model.safetensors.index.json, or a directory holding one or a
// model.safetensors), in the file's dtype and shape. Checksums strata wrote
// are verified; errors name the file and the tensor.
std::map<std::string, Tensor> load_safetensors(const std::string& path);

// Writes `tensors` to `path` atomically (materializing them in one run), with
// a checksum per tensor that load_safetensors verifies, and `metadata` in the
// header's "__metadata__".
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace strata
