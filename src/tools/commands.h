// Subcommands of the `strata` program.
#pragma once

#include <string>

namespace strata::tools {

// Builds a small program, prints its HLO text and runs it.
int RunDemo();
// Prints one line per device of the default client.
int ListDevices();

struct RunOptions {
  std::string program;  // HLO text file
  std::string inputs;   // safetensors file (may be empty when no parameters)
  std::string output;   // safetensors file to write
  bool quiet = false;
};
// `strata run`: parses, compiles and runs an HLO program on named inputs.
int RunProgram(const RunOptions& options);

}  // namespace strata::tools
