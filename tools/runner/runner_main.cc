// `bazel run //tools/runner -- MODEL.pte [...]`: runs an ExecuTorch program with the CPU delegate
// in C++, no Python. --help (options.cc) documents the options, the output and the exit codes.
//
// The delegate (CpuBackend and its providers) is linked in statically: runtime_lib's static
// initializers register it with the executorch wheel's libexecutorch.so, the same runtime the
// Python bindings use; the kernels of ops outside the delegate and of the Reference provider
// come from the wheel's libexecutorch_kernels_optimized.so.

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include <executorch/devtools/etdump/etdump_flatcc.h>
#include <executorch/extension/module/module.h>
#include <executorch/runtime/platform/platform.h>
#include <executorch/runtime/platform/runtime.h>

#include "backends/cpu/runtime/error_report.h"
#include "tools/runner/options.h"
#include "tools/runner/tensor_io.h"

namespace et_cpu_runner {
namespace {

using executorch::extension::Module;
using executorch::runtime::Error;
using executorch::runtime::EValue;

// Names read from a damaged file can hold any bytes: control characters and bytes that are not
// UTF-8 are printed as \xNN, so every line stays one readable line.
std::string printable(const std::string& text) {
  return et_cpu_plugin::cpu::printable_text(text, et_cpu_plugin::cpu::TextSafety::kUtf8);
}

constexpr const char* kBackend = "CpuBackend";

// The runtime's log messages: shown with --verbose; the last error-level one joins the error line.
bool g_verbose = false;
std::string g_last_runtime_error;

void emit_log(
    et_timestamp_t /*timestamp*/,
    et_pal_log_level_t level,
    const char* filename,
    const char* /*function*/,
    size_t line,
    const char* message,
    size_t length) {
  std::string text(message, length);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (level == kError || level == kFatal) {
    g_last_runtime_error = text;
  }
  if (g_verbose) {
    std::fprintf(stderr, "[%c %s:%zu] %s\n", static_cast<char>(level), filename, line,
                 printable(text).c_str());
  }
}

int fail(ExitCode code, const std::string& message, bool with_runtime_message = false) {
  std::string line = "runner: error: " + message;
  if (with_runtime_message && !g_last_runtime_error.empty()) {
    line += " (runtime: " + g_last_runtime_error + ")";
  }
  std::fprintf(stderr, "%s\n", printable(line).c_str());
  return code;
}

std::string error_name(Error error) {
  char hex[16];
  std::snprintf(hex, sizeof(hex), "0x%x", static_cast<unsigned>(error));
  return std::string(executorch::runtime::to_string(error)) + ", error " + hex;
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string number(double value) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", value);
  return buf;
}

struct OutputReport {
  std::string dtype;
  std::vector<int32_t> sizes;
  Checksum sums;
};

struct Latency {
  double load_ms = 0;
  std::vector<double> runs_ms;
  double median() const {
    std::vector<double> sorted = runs_ms;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  }
  double min() const { return *std::min_element(runs_ms.begin(), runs_ms.end()); }
  double mean() const {
    return std::accumulate(runs_ms.begin(), runs_ms.end(), 0.0) / runs_ms.size();
  }
};

// What one invocation prints, as text or JSON.
struct Report {
  const Options& options;
  std::string backends;
  const std::vector<Input>& inputs;
  std::vector<OutputReport> outputs;
  Latency latency;
};

void print_text(const Report& report) {
  const auto& [options, backends, inputs, outputs, latency] = report;
  std::printf(
      "program: %s  method: %s  backends: %s\n",
      options.program.c_str(),
      options.method.c_str(),
      backends.c_str());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& t = *inputs[i].tensor;
    std::vector<int32_t> sizes(t.sizes().begin(), t.sizes().end());
    std::printf(
        "input %zu: %s %s\n",
        i,
        describe(t.scalar_type(), sizes).c_str(),
        inputs[i].source.c_str());
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::printf(
        "output %zu: %s[%s] sum=%.9g abs_sum=%.9g\n",
        i,
        outputs[i].dtype.c_str(),
        [&] {
          std::string s;
          for (size_t d = 0; d < outputs[i].sizes.size(); ++d) {
            s += (d ? ", " : "") + std::to_string(outputs[i].sizes[d]);
          }
          return s;
        }()
            .c_str(),
        outputs[i].sums.sum,
        outputs[i].sums.abs_sum);
  }
  std::printf(
      "latency: load %.3f ms; run median %.3f ms, min %.3f ms, mean %.3f ms over %zu "
      "iterations\n",
      latency.load_ms,
      latency.median(),
      latency.min(),
      latency.mean(),
      latency.runs_ms.size());
  if (!options.etdump.empty()) std::printf("etdump: %s\n", options.etdump.c_str());
}

void print_json(const Report& report) {
  const auto& [options, backends, inputs, outputs, latency] = report;
  std::ostringstream out;
  auto sizes_json = [](const std::vector<int32_t>& sizes) {
    std::string s = "[";
    for (size_t d = 0; d < sizes.size(); ++d) s += (d ? ", " : "") + std::to_string(sizes[d]);
    return s + "]";
  };
  out << "{\"program\": " << json_string(options.program)
      << ", \"method\": " << json_string(options.method) << ", \"backends\": " << json_string(backends)
      << ", \"inputs\": [";
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& t = *inputs[i].tensor;
    out << (i ? ", " : "") << "{\"dtype\": " << json_string(dtype_name(t.scalar_type()))
        << ", \"shape\": " << sizes_json({t.sizes().begin(), t.sizes().end()})
        << ", \"source\": " << json_string(inputs[i].source) << "}";
  }
  out << "], \"outputs\": [";
  for (size_t i = 0; i < outputs.size(); ++i) {
    out << (i ? ", " : "") << "{\"dtype\": " << json_string(outputs[i].dtype)
        << ", \"shape\": " << sizes_json(outputs[i].sizes)
        << ", \"sum\": " << number(outputs[i].sums.sum)
        << ", \"abs_sum\": " << number(outputs[i].sums.abs_sum) << "}";
  }
  out << "], \"latency_ms\": {\"load\": " << number(latency.load_ms)
      << ", \"median\": " << number(latency.median()) << ", \"min\": " << number(latency.min())
      << ", \"mean\": " << number(latency.mean()) << ", \"runs\": [";
  for (size_t i = 0; i < latency.runs_ms.size(); ++i) {
    out << (i ? ", " : "") << number(latency.runs_ms[i]);
  }
  out << "]}, \"etdump\": "
      << (options.etdump.empty() ? std::string("null") : json_string(options.etdump)) << "}";
  std::printf("%s\n", out.str().c_str());
}

bool write_file(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  return static_cast<bool>(out);
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

int run(const Options& options) {
  if (!is_regular_file(options.program)) {
    return fail(kBadInput, "no such program file: " + options.program);
  }
  for (const auto& file : options.inputs) {
    if (!is_regular_file(file)) return fail(kBadInput, "no such input file: " + file);
  }
  if (!options.outputs_dir.empty()) {
    struct stat st {};
    if (::stat(options.outputs_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return fail(kBadInput, "--outputs: no such directory: " + options.outputs_dir);
    }
  }
  if (!options.etdump.empty() && !write_file(options.etdump, "", 0)) {
    return fail(kBadInput, "--etdump: cannot write " + options.etdump);
  }

  std::unique_ptr<executorch::etdump::ETDumpGen> tracer;
  executorch::etdump::ETDumpGen* etdump = nullptr;
  if (!options.etdump.empty()) {
    tracer = std::make_unique<executorch::etdump::ETDumpGen>();
    etdump = tracer.get();
  }
  Module module(options.program, Module::LoadMode::Mmap, std::move(tracer));
  // Module's default checks only the file's identifier; a damaged file (issue 22) must be
  // refused with an error, so the flatbuffer verifier runs over the whole program first.
  const Error loaded =
      module.load(executorch::runtime::Program::Verification::InternalConsistency);
  if (loaded != Error::Ok) {
    return fail(
        kNotRunnable,
        options.program + " is not an ExecuTorch program (" + error_name(loaded) + ")",
        true);
  }
  auto meta = module.method_meta(options.method);
  if (!meta.ok()) {
    std::string names;
    if (auto all = module.method_names(); all.ok()) {
      for (const auto& name : *all) names += (names.empty() ? "" : ", ") + name;
    }
    return fail(
        kBadInput, options.program + " has no method '" + options.method + "' (it has: " + names +
            ")");
  }
  std::string backends;
  for (size_t i = 0; i < meta->num_backends(); ++i) {
    auto name = meta->get_backend_name(i);
    if (!name.ok()) continue;
    backends += (backends.empty() ? "" : ", ") + std::string(*name);
  }
  if (!meta->uses_backend(kBackend)) {
    return fail(
        kNotRunnable,
        options.program + ": method '" + options.method + "' has no " + kBackend +
            " delegate (backends: " + (backends.empty() ? "none" : backends) +
            "); lower it with CpuPartitioner");
  }

  const size_t num_inputs = meta->num_inputs();
  if (!options.inputs.empty() && options.inputs.size() != num_inputs) {
    return fail(
        kBadInput,
        "--inputs: " + std::to_string(options.inputs.size()) + " files for " +
            std::to_string(num_inputs) + " inputs of method '" + options.method + "'");
  }
  std::vector<Input> inputs(num_inputs);
  std::vector<EValue> values;
  for (size_t i = 0; i < num_inputs; ++i) {
    std::string error;
    const std::string file = options.inputs.empty() ? "" : options.inputs[i];
    if (!make_input(*meta, i, file, options.seed, inputs[i], error)) {
      return fail(kBadInput, error);
    }
    values.emplace_back(*inputs[i].tensor);
  }

  Latency latency;
  auto start = std::chrono::steady_clock::now();
  const Error method_loaded = module.load_method(options.method);
  latency.load_ms = ms_since(start);
  if (method_loaded != Error::Ok) {
    return fail(
        kRuntimeError,
        "loading method '" + options.method + "' failed (" + error_name(method_loaded) + ")",
        true);
  }
  std::vector<EValue> results;
  for (int i = 0; i < options.iterations; ++i) {
    start = std::chrono::steady_clock::now();
    auto outputs = module.execute(options.method, values);
    latency.runs_ms.push_back(ms_since(start));
    if (!outputs.ok()) {
      return fail(
          kRuntimeError,
          "running method '" + options.method + "' failed (" + error_name(outputs.error()) + ")",
          true);
    }
    results = std::move(*outputs);
  }

  std::vector<OutputReport> reports;
  for (size_t i = 0; i < results.size(); ++i) {
    OutputReport report;
    if (!results[i].isTensor()) {
      return fail(kRuntimeError, "output " + std::to_string(i) + " is not a tensor");
    }
    const auto& tensor = results[i].toTensor();
    report.dtype = dtype_name(tensor.scalar_type());
    report.sizes.assign(tensor.sizes().begin(), tensor.sizes().end());
    std::string error;
    if (!checksum(tensor, report.sums, error)) {
      return fail(kRuntimeError, "output " + std::to_string(i) + ": " + error);
    }
    if (!options.outputs_dir.empty()) {
      const std::string path = options.outputs_dir + "/output_" + std::to_string(i) + ".bin";
      if (!write_file(path, tensor.const_data_ptr(), tensor.nbytes())) {
        return fail(kBadInput, "--outputs: cannot write " + path);
      }
    }
    reports.push_back(std::move(report));
  }

  if (etdump != nullptr) {
    executorch::etdump::ETDumpResult dump = etdump->get_etdump_data();
    const bool written = dump.buf != nullptr && dump.size > 0 &&
        write_file(options.etdump, dump.buf, dump.size);
    std::free(dump.buf);
    if (!written) return fail(kBadInput, "--etdump: cannot write " + options.etdump);
  }

  const Report report{options, backends, inputs, std::move(reports), std::move(latency)};
  if (options.json) {
    print_json(report);
  } else {
    print_text(report);
  }
  return kOk;
}

}  // namespace
}  // namespace et_cpu_runner

int main(int argc, char** argv) {
  using namespace et_cpu_runner;
  Options options;
  std::string error;
  if (!parse_options(argc, argv, options, error)) return fail(kBadInput, error);
  if (options.help) {
    std::printf("%s", help_text().c_str());
    return kOk;
  }
  g_verbose = options.verbose;
  executorch::runtime::register_pal(
      executorch::runtime::PalImpl::create(emit_log, __FILE__));
  executorch::runtime::runtime_init();
  return run(options);
}
