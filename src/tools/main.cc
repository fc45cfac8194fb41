// The `strata` command line.
#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include "commands.h"
#include "strata/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"strata: a lazy-tensor compiler for the CPU"};
  app.require_subcommand(1);

  auto* demo = app.add_subcommand("demo", "build a small program, print its HLO text and run it");
  auto* devices =
      app.add_subcommand("devices", "list the devices (STRATA_CPU_DEVICES sets how many)");

  strata::tools::RunOptions run_options;
  auto* run =
      app.add_subcommand("run", "run an HLO text program on tensors from a safetensors file");
  run->add_option("program", run_options.program, "HLO text file")->required();
  run->add_option("--inputs", run_options.inputs,
                  "safetensors file with one tensor per parameter, named like the parameter");
  run->add_option("--output", run_options.output, "safetensors file for the results")->required();
  run->add_flag("--quiet", run_options.quiet, "print nothing on success");

  strata::tools::LmOptions lm_options;
  auto* lm = app.add_subcommand(
      "lm", "run a Hugging Face Llama checkpoint: logits, and with labels the loss (and grads)");
  lm->add_option("--model", lm_options.model, "model directory (config.json + safetensors)")
      ->required();
  lm->add_option("--tokens", lm_options.tokens, "safetensors file with I64 [batch, seq] input_ids")
      ->required();
  lm->add_option("--labels", lm_options.labels, "safetensors file with I64 [batch, seq] labels");
  lm->add_option("--output", lm_options.output, "safetensors file for the results")->required();
  lm->add_flag("--grads", lm_options.grads, "also write grad.<name> for every parameter");
  lm->add_option("--layers", lm_options.layers, "scan (apply_layers, default) or unrolled")
      ->check(CLI::IsMember({"scan", "unrolled"}));
  lm->add_flag("--quiet", lm_options.quiet, "print nothing on success");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*demo) return strata::tools::RunDemo();
    if (*devices) return strata::tools::ListDevices();
    if (*run) return strata::tools::RunProgram(run_options);
    if (*lm) return strata::tools::RunLm(lm_options);
  } catch (const strata::Error& e) {
    fmt::print(stderr, "strata: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "strata: unexpected error: {}\n", e.what());
    return 2;
  }
  return 0;
}
