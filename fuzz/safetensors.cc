// A safetensors file, as `strata run --inputs`, `strata lm` and checkpoints
// read it: the header, every tensor's layout and bytes (checksums verified
// where the file has them), then the tensors written back and read again.
#include <fmt/core.h>

#include <map>
#include <vector>

#include "harnesses.h"
#include "strata/core/error.h"
#include "strata/core/shape.h"
#include "strata/io/safetensors.h"

namespace strata::fuzz {

void Safetensors(Bytes input) {
  io::SafetensorsFile file =
      io::SafetensorsFile::FromBytes(std::vector<uint8_t>(input.begin(), input.end()), "fuzz");
  std::vector<io::TensorData> tensors;
  bool all_read = true;
  for (const std::string& name : file.names()) {
    const io::TensorView& layout = file.Layout(name);
    const int64_t bytes = Shape(layout.dtype, layout.shape).byte_size();
    if (static_cast<int64_t>(layout.data.size()) != bytes) {
      throw Finding(fmt::format("tensor '{}' is {} but spans {} bytes", name,
                                Shape(layout.dtype, layout.shape).ToString(), layout.data.size()));
    }
    try {
      const io::TensorView& view = file.Get(name);
      tensors.push_back({name, view.dtype, view.shape, {view.data.begin(), view.data.end()}});
    } catch (const InternalError&) {
      throw;
    } catch (const Error&) {
      all_read = false;  // a checksum that fails; the others still read
    }
  }
  if (!all_read) return;

  // What strata reads it can write, and reads back the same.
  std::vector<uint8_t> written;
  try {
    written = io::SerializeSafetensors(tensors, file.metadata());
  } catch (const Error& e) {
    throw Finding(fmt::format("a file that reads does not write back: {}", e.what()));
  }
  io::SafetensorsFile again = io::SafetensorsFile::FromBytes(std::move(written), "written back");
  if (again.names().size() != tensors.size() || again.metadata() != file.metadata()) {
    throw Finding("writing back changes the tensor names or the metadata");
  }
  for (const io::TensorData& t : tensors) {
    const io::TensorView& view = again.Get(t.name);
    if (view.dtype != t.dtype || view.shape != t.shape ||
        !std::equal(view.data.begin(), view.data.end(), t.bytes.begin(), t.bytes.end())) {
      throw Finding(fmt::format("tensor '{}' changes when written back", t.name));
    }
  }
}

}  // namespace strata::fuzz
