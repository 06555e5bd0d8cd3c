// The CPU delegate's BackendInterface, registered with the ExecuTorch runtime as "CpuBackend" (the
// name of the AOT side's BackendDetails). Thin on purpose: init compiles the payload into a
// CompiledGraph, execute runs it, destroy frees it.
//
// Arena sizes are logged at init and queryable from C (and Python, through loader.py):
//   et_cpu_runtime_last_arena_bytes()  arena of the most recent successful init
//   et_cpu_runtime_live_arena_bytes()  arenas of all delegate handles currently alive
//   et_cpu_runtime_last_error()        message of the most recent init/execute error
//   et_cpu_runtime_kernel_status(name) whether a route's kernel can be bound (for route-table tests)
//   et_cpu_runtime_last_provider_bytes() bytes providers hold beside the arena (most recent init)
//   et_cpu_runtime_last_placement()    one line per op of the most recent init: provider, fusion,
//                                      or why the optimized provider declined it
//   et_cpu_runtime_shape_plan_hits() / _misses()  calls of graphs with symbolic dimensions that
//                                      found / compiled the graph for their sizes
//   et_cpu_runtime_max_fused_steps()   ops after an op a provider may fuse at most (the AOT
//                                      debug-handle map names groups up to that length)
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/kernel/operator_registry.h>
#include <executorch/runtime/platform/log.h>

#include "backends/cpu/runtime/builtin_kernels.h"
#include "backends/cpu/runtime/quantized_op_check.h"
#include "backends/cpu/runtime/compiled_graph.h"
#include "backends/cpu/runtime/error_report.h"
#include "backends/cpu/runtime/kernel_signature.h"

namespace et_cpu_plugin {
namespace cpu {
namespace {

using executorch::runtime::ArrayRef;
using executorch::runtime::Backend;
using executorch::runtime::BackendExecutionContext;
using executorch::runtime::BackendInitContext;
using executorch::runtime::BackendInterface;
using executorch::runtime::CompileSpec;
using executorch::runtime::DelegateHandle;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::Result;
using executorch::runtime::Span;

std::atomic<uint64_t> last_arena_bytes{0};
std::atomic<uint64_t> live_arena_bytes{0};
std::atomic<uint64_t> last_provider_bytes{0};
std::mutex placement_mutex;
std::string last_placement;

class CpuBackend final : public BackendInterface {
 public:
  bool is_available() const override { return true; }

  Result<DelegateHandle*> init(BackendInitContext& context, FreeableBuffer* processed,
                               ArrayRef<CompileSpec>) const override {
    if (processed == nullptr) {
      return report_error(Error::InvalidArgument, "init called without a payload");
    }
    std::unique_ptr<CompiledGraph> graph;
    Error error = CompiledGraph::compile(processed->data(), processed->size(),
                                         context.get_named_data_map(), &graph);
    // The graph copied what it needs from the payload: the program may drop the bytes now.
    processed->Free();
    if (error != Error::Ok) return error;
    log_line(LogLevel::kInfo,
             "compiled %zu ops (%zu on an optimized provider, %zu of them fused); intermediate "
             "arena %zu bytes (%zu without reuse); provider memory %zu bytes; state %zu bytes "
             "(%zu states updated in place)",
             graph->num_ops(), graph->num_ops_on_other_providers(), graph->num_fused_ops(),
             graph->arena_bytes(), graph->unplanned_bytes(), graph->provider_bytes(),
             graph->state_bytes(), graph->states_in_place());
    last_arena_bytes = graph->arena_bytes();
    last_provider_bytes = graph->provider_bytes();
    {
      std::lock_guard<std::mutex> lock(placement_mutex);
      last_placement = graph->placement();
    }
    live_arena_bytes += graph->arena_bytes();
    return graph.release();
  }

  Error execute(BackendExecutionContext& context, DelegateHandle* handle,
                Span<EValue*> args) const override {
    if (handle == nullptr) {
      return report_error(Error::InvalidState, "execute called without a compiled graph");
    }
    return static_cast<CompiledGraph*>(handle)->execute(args, context.get_temp_allocator(),
                                                        context.event_tracer());
  }

  void destroy(DelegateHandle* handle) const override {
    auto* graph = static_cast<CompiledGraph*>(handle);
    if (graph != nullptr) live_arena_bytes -= graph->arena_bytes();
    delete graph;
  }
};

CpuBackend backend;
const Backend registration{"CpuBackend", &backend};
const auto registered = executorch::runtime::register_backend(registration);

}  // namespace
}  // namespace cpu
}  // namespace et_cpu_plugin

extern "C" {

__attribute__((visibility("default"))) uint64_t et_cpu_runtime_last_arena_bytes() {
  return et_cpu_plugin::cpu::last_arena_bytes.load();
}

__attribute__((visibility("default"))) uint64_t et_cpu_runtime_live_arena_bytes() {
  return et_cpu_plugin::cpu::live_arena_bytes.load();
}

__attribute__((visibility("default"))) uint64_t et_cpu_runtime_last_provider_bytes() {
  return et_cpu_plugin::cpu::last_provider_bytes.load();
}

// Shape plans of graphs with symbolic dimensions over the process: calls that found the graph for
// their sizes compiled, and calls that compiled it (the first call at a new size).
__attribute__((visibility("default"))) uint64_t et_cpu_runtime_shape_plan_hits() {
  return et_cpu_plugin::cpu::CompiledGraph::total_shape_plan_hits();
}

__attribute__((visibility("default"))) uint64_t et_cpu_runtime_shape_plan_misses() {
  return et_cpu_plugin::cpu::CompiledGraph::total_shape_plan_misses();
}

__attribute__((visibility("default"))) uint64_t et_cpu_runtime_max_fused_steps() {
  return et_cpu_plugin::cpu::CompiledGraph::max_fused_steps();
}

// Copies the placement of the most recent init (NUL-terminated, truncated to `capacity`) into
// `buffer`; returns its full length.
__attribute__((visibility("default"))) size_t et_cpu_runtime_last_placement(char* buffer,
                                                                            size_t capacity) {
  std::string text;
  {
    std::lock_guard<std::mutex> lock(et_cpu_plugin::cpu::placement_mutex);
    text = et_cpu_plugin::cpu::last_placement;
  }
  if (buffer != nullptr && capacity > 0) {
    size_t n = text.size() < capacity - 1 ? text.size() : capacity - 1;
    std::memcpy(buffer, text.data(), n);
    buffer[n] = '\0';
  }
  return text.size();
}

// Copies the last error message (NUL-terminated, truncated to `capacity`) into `buffer`;
// returns its full length.
__attribute__((visibility("default"))) size_t et_cpu_runtime_last_error(char* buffer,
                                                                        size_t capacity) {
  std::string message = et_cpu_plugin::cpu::last_error_message();
  if (buffer != nullptr && capacity > 0) {
    size_t n = message.size() < capacity - 1 ? message.size() : capacity - 1;
    std::memcpy(buffer, message.data(), n);
    buffer[n] = '\0';
  }
  return message.size();
}

}  // extern "C"

extern "C" {

// Sends the runtime's log lines to stderr instead of ExecuTorch's PAL (error_report.h says why);
// the Python loader calls it.
__attribute__((visibility("default"))) void et_cpu_runtime_log_to_stderr() {
  et_cpu_plugin::cpu::log_to_stderr();
}

// 0: the runtime can bind `kernel`; 1: no out-variant schema for it is known to this runtime;
// 2: it is neither in ExecuTorch's operator registry of this process nor a built-in kernel.
__attribute__((visibility("default"))) int et_cpu_runtime_kernel_status(const char* kernel) {
  if (et_cpu_plugin::cpu::find_kernel_signature(kernel) == nullptr) return 1;
  if (et_cpu_plugin::cpu::is_builtin_kernel(kernel)) return 0;  // the runtime's own kernel
  // The int8 ops: bound by the Optimized provider only (routes.PROVIDER_KERNELS).
  if (et_cpu_plugin::cpu::is_quantized_kernel(kernel)) return 0;
  return executorch::runtime::get_op_function_from_registry(kernel).ok() ? 0 : 2;
}

}  // extern "C"
