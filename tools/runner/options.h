// Command line of the program runner (tools/runner): what to run and how, parsed and checked
// before anything is loaded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace et_cpu_runner {

// Exit codes (documented in --help and tools/runner/README.md).
enum ExitCode : int {
  kOk = 0,
  kBadInput = 2,      // bad command line, missing/unreadable file, wrong input, unwritable output
  kNotRunnable = 3,   // not an ExecuTorch program, or no CpuBackend delegate in the method
  kRuntimeError = 4,  // loading or running the method failed in the runtime
};

struct Options {
  std::string program;              // the .pte, resolved against BUILD_WORKING_DIRECTORY
  std::vector<std::string> inputs;  // raw input files, one per method input (empty: random)
  std::string method = "forward";
  int iterations = 10;
  uint64_t seed = 0;
  std::string etdump;       // where to write the ETDump ("" = no tracer)
  std::string outputs_dir;  // where to write each output's raw bytes ("" = nowhere)
  bool json = false;
  bool verbose = false;
  bool help = false;
};

// Parses argv; on a bad command line returns false and sets `error` to one line.
bool parse_options(int argc, char** argv, Options& options, std::string& error);

// The complete --help text.
std::string help_text();

// `path` as given if absolute, else relative to $BUILD_WORKING_DIRECTORY (the directory
// `bazel run` was started from) when set, else to the current directory.
std::string resolve_path(const std::string& path);

}  // namespace et_cpu_runner
