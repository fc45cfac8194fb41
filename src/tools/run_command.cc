#include <fmt/core.h>

#include <fstream>
#include <sstream>

#include "commands.h"
#include "strata/compiler/compile.h"
#include "strata/core/error.h"
#include "strata/hlo/text.h"
#include "strata/io/safetensors.h"

namespace strata::tools {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail("[run] cannot open program file '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Result leaves are named "output" (one array) or "output.0", "output.1.2"
// (tuple paths).
void NameLeaves(const Shape& shape, const std::string& prefix, std::vector<std::string>& names) {
  if (!shape.is_tuple()) {
    names.push_back(prefix);
    return;
  }
  for (int64_t i = 0; i < shape.tuple_size(); ++i) {
    NameLeaves(shape.tuple_shape(i), fmt::format("{}.{}", prefix, i), names);
  }
}

}  // namespace

int RunProgram(const RunOptions& options) {
  std::unique_ptr<hlo::Module> module;
  try {
    module = hlo::ParseModule(ReadFile(options.program));
  } catch (const Error& e) {
    Fail("{}: {}", options.program, e.what());
  }
  auto exe = compiler::Compile(*module);
  const runtime::Device* device = runtime::Client::Default().device(0);
  std::vector<runtime::Buffer> arguments;
  auto parameters = module->entry()->parameters();
  std::optional<io::SafetensorsFile> inputs;
  if (!parameters.empty()) {
    if (options.inputs.empty()) {
      Fail("[run] the program takes {} parameter(s); pass them with --inputs FILE.safetensors",
           parameters.size());
    }
    inputs = io::SafetensorsFile::Open(options.inputs);
  }
  for (const hlo::Instruction* p : parameters) {
    if (!p->shape().is_array()) {
      Fail("[run] parameter {} has tuple shape {}; strata run feeds array parameters only",
           p->name(), p->shape().ToString());
    }
    if (!inputs->contains(p->name())) {
      std::string available;
      for (const std::string& n : inputs->names()) available += (available.empty() ? "" : ", ") + n;
      Fail("[run] {} has no tensor named '{}' for parameter {} ({}); it holds: {}", options.inputs,
           p->name(), p->parameter_number, p->shape().ToString(),
           available.empty() ? "nothing" : available);
    }
    const io::TensorView& t = inputs->Get(p->name());
    Shape given(t.dtype, t.shape);
    if (given != p->shape()) {
      Fail("[run] tensor '{}' in {} is {}, but parameter {} expects {}", p->name(), options.inputs,
           given.ToString(), p->parameter_number, p->shape().ToString());
    }
    arguments.push_back(runtime::Buffer::FromHost(given, t.data, device));
  }
  std::vector<runtime::Buffer> results = exe->Run(arguments, device);
  std::vector<std::string> names;
  NameLeaves(module->entry()->root()->shape(), "output", names);
  std::vector<io::TensorData> tensors;
  for (size_t i = 0; i < results.size(); ++i) {
    const runtime::Buffer& b = results[i];
    tensors.push_back({names[i], b.shape().dtype(), b.shape().dims(),
                       std::vector<uint8_t>(b.data(), b.data() + b.size_bytes())});
  }
  io::WriteSafetensors(options.output, tensors);
  if (!options.quiet) {
    for (size_t i = 0; i < results.size(); ++i) {
      fmt::print("{}: {}\n", names[i], results[i].shape().ToString());
    }
  }
  return 0;
}

}  // namespace strata::tools
