#include "tools/runner/options.h"

#include <cerrno>
#include <cstdlib>

namespace et_cpu_runner {
namespace {

bool parse_count(const std::string& text, long min, long& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long parsed = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || parsed < min) return false;
  value = parsed;
  return true;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::string::size_type start = 0;
  while (true) {
    const auto comma = text.find(',', start);
    parts.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return parts;
}

}  // namespace

std::string help_text() {
  return R"(usage: runner MODEL.pte [--inputs FILE[,FILE...]] [--iterations N] [--etdump OUT.etdp]
              [--outputs DIR] [--method NAME] [--seed N] [--json] [-v] [-h]

Runs an ExecuTorch program with the CPU delegate (CpuBackend) registered, in C++ with no Python:
loads the program, fills the method's inputs, runs it, prints each output's shape and checksum
and the latency. The delegate is linked in statically; ExecuTorch's runtime and kernels are the
executorch wheel's libexecutorch.so and libexecutorch_kernels_optimized.so.

arguments:
  MODEL.pte              the program (e.g. written by `bazel run //tools/lower -- -o MODEL.pte`)
  --inputs F1,F2,...     one raw file per method input, in order: the tensor's bytes in its
                         declared dtype and shape, contiguous, native byte order (what numpy's
                         tensor.numpy().tofile(F) writes). Default: seeded random values of the
                         declared shapes (floats uniform in [-1, 1), integers and bools in
                         [0, 2), as tools/lower samples them)
  --iterations N         timed runs after loading (default 10; at least 1)
  --etdump OUT.etdp      load the method with an ETDump tracer and write the ETDump after the
                         runs (per-op CpuBackend events; read it with executorch.devtools)
  --outputs DIR          also write output I of the last run to DIR/output_I.bin (raw bytes,
                         the --inputs format); DIR must exist
  --method NAME          the method to run (default forward)
  --seed N               seed of the random inputs (default 0)
  --json                 print the report as one JSON object instead of text
  -v, --verbose          also show the runtime's log messages (hidden by default; an error's
                         last message is part of the error line)
  -h, --help             this text

output:
  One line per input (its dtype and shape, and where it came from), one per output
  (`output I: DTYPE[SHAPE] sum=S abs_sum=A`, sums in double precision; for bool the count of
  true elements), then the latency: the method's load time (the delegate's init) and the
  median, minimum and mean of the timed runs in milliseconds.

exit codes:
  0  the method ran --iterations times
  2  bad command line or input: a missing or unreadable file, a wrong number of input files or
     a file whose size is not the input's, an input that is not a tensor or whose dtype cannot
     be sampled, an --etdump or --outputs path that cannot be written
  3  the file is not an ExecuTorch program, or the method has no CpuBackend delegate
  4  loading or running the method failed in the runtime

Errors are one line on stderr starting with "runner: error: ". Relative paths are resolved
against the directory `bazel run` was started from (BUILD_WORKING_DIRECTORY).
)";
}

std::string resolve_path(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  const char* base = std::getenv("BUILD_WORKING_DIRECTORY");
  if (base == nullptr || *base == '\0') return path;
  return std::string(base) + "/" + path;
}

bool parse_options(int argc, char** argv, Options& options, std::string& error) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&](std::string& out) {
      const auto eq = arg.find('=');
      if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
        out = arg.substr(eq + 1);
        return true;
      }
      if (i + 1 >= args.size()) {
        error = arg + " needs a value";
        return false;
      }
      out = args[++i];
      return true;
    };
    auto is = [&](const char* name) {
      return arg == name || arg.rfind(std::string(name) + "=", 0) == 0;
    };
    std::string text;
    if (arg == "-h" || arg == "--help") {
      options.help = true;
    } else if (arg == "-v" || arg == "--verbose") {
      options.verbose = true;
    } else if (arg == "--json") {
      options.json = true;
    } else if (is("--inputs")) {
      if (!value(text)) return false;
      for (const auto& file : split_commas(text)) {
        if (file.empty()) {
          error = "--inputs: empty file name in '" + text + "'";
          return false;
        }
        options.inputs.push_back(resolve_path(file));
      }
    } else if (is("--iterations")) {
      long n = 0;
      if (!value(text)) return false;
      if (!parse_count(text, 1, n) || n > 1000000) {
        error = "--iterations: expected a whole number in [1, 1000000], got '" + text + "'";
        return false;
      }
      options.iterations = static_cast<int>(n);
    } else if (is("--seed")) {
      long n = 0;
      if (!value(text)) return false;
      if (!parse_count(text, 0, n)) {
        error = "--seed: expected a whole number >= 0, got '" + text + "'";
        return false;
      }
      options.seed = static_cast<uint64_t>(n);
    } else if (is("--etdump")) {
      if (!value(text)) return false;
      options.etdump = resolve_path(text);
    } else if (is("--outputs")) {
      if (!value(text)) return false;
      options.outputs_dir = resolve_path(text);
    } else if (is("--method")) {
      if (!value(options.method)) return false;
    } else if (arg.rfind("-", 0) == 0 && arg != "-") {
      error = "unknown option " + arg + " (see --help)";
      return false;
    } else if (options.program.empty()) {
      options.program = resolve_path(arg);
    } else {
      error = "more than one program given: '" + arg + "' (see --help)";
      return false;
    }
  }
  if (!options.help && options.program.empty()) {
    error = "no program given: runner MODEL.pte [options] (see --help)";
    return false;
  }
  return true;
}

}  // namespace et_cpu_runner
