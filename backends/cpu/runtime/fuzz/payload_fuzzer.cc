// libFuzzer target for the payload read path: bytes -> read_payload (flatbuffers verifier and our
// checks) -> CompiledGraph::compile (arena plan, constants, kernel binding) -> execute on buffers
// of the serialized shapes (a graph with symbolic dimensions also at its lower bounds). Any crash,
// sanitizer report or abort is a bug: a bad payload must only ever produce an error.
//
// Built two ways: with clang -fsanitize=fuzzer (run_libfuzzer.sh) for real fuzzing, and with the
// default toolchain plus fuzz_smoke_main.cc for the Bazel smoke test.
//
// The process has no portable kernels (they live in portable_lib's Python extension), so the
// fuzzer registers no-op kernels under the names of the routes' kernels: binding succeeds and
// execute runs, without any kernel's own arithmetic in the way.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include <executorch/runtime/core/named_data_map.h>
#include <executorch/runtime/kernel/operator_registry.h>
#include <executorch/runtime/platform/runtime.h>

#include "backends/cpu/runtime/compiled_graph.h"
#include "backends/cpu/runtime/dynamic_shapes.h"

namespace {

using executorch::aten::ScalarType;
using executorch::aten::TensorImpl;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::Kernel;
using executorch::runtime::KernelRuntimeContext;
using executorch::runtime::NamedDataMap;
using executorch::runtime::Result;
using executorch::runtime::Span;
using executorch::runtime::TensorLayout;
using et_cpu_plugin::cpu::CompiledGraph;

// Every key resolves to the same zero bytes; keys starting with "missing" do not exist.
class ZeroDataMap final : public NamedDataMap {
 public:
  Result<const TensorLayout> get_tensor_layout(std::string_view) const override {
    return Error::NotImplemented;
  }
  Result<FreeableBuffer> get_data(std::string_view key) const override {
    if (key.substr(0, 7) == "missing") return Error::NotFound;
    return FreeableBuffer(zeros_, sizeof(zeros_), nullptr);
  }
  Error load_data_into(std::string_view, void*, size_t) const override {
    return Error::NotImplemented;
  }
  Result<uint32_t> get_num_keys() const override { return 0; }
  Result<const char*> get_key(uint32_t) const override { return Error::NotFound; }

 private:
  alignas(64) static inline uint8_t zeros_[1 << 16] = {};
};

void noop_kernel(KernelRuntimeContext&, Span<EValue*>) {}

const char* const kKernelNames[] = {
    "aten::add.out",
    "aten::mul.out",
    "aten::neg.out",
    "aten::relu.out",
    "aten::convolution.out",
    "aten::linear.out",
    "aten::addmm.out",
    "aten::mean.out",
    "aten::cat.out",
    "aten::index.Tensor_out",
    "aten::index_put.out",
    "aten::where.self_out",
    "aten::max_pool2d_with_indices.out",
    "aten::_native_batch_norm_legit_no_training.out",
    "aten::_to_copy.out",
    "aten::view_copy.out",
    "aten::split_copy.Tensor_out",
    "aten::full.out",
    "aten::clamp.out",
    "dim_order_ops::_to_dim_order_copy.out",
    "et_cpu_quant::conv2d.out",
    "et_cpu_quant::linear.out",
};

bool register_noop_kernels() {
  executorch::runtime::runtime_init();
  static std::vector<Kernel> kernels;
  for (const char* name : kKernelNames) {
    kernels.emplace_back(name, noop_kernel);  // nothing else registers kernels in this process
  }
  return executorch::runtime::register_kernels({kernels.data(), kernels.size()}) == Error::Ok;
}

// A value's bytes at its recorded (upper) size, what ExecuTorch plans a program's buffers for:
// its `nbytes` is the current size's once the graph resized in place.
size_t recorded_bytes(const et_cpu_plugin::cpu::ValueSpec& value) {
  if (!value.is_dynamic()) return value.nbytes;
  size_t bytes = et_cpu_plugin::cpu::element_size(value.dtype);
  for (int64_t size : value.dim_max) bytes *= static_cast<size_t>(size);
  return bytes;
}

// Inputs and outputs of the shapes at `symbols` (the serialized shapes for a static graph), when
// they are small enough to allocate. Buffers have the upper-bound size.
void execute_if_small(CompiledGraph& graph, const et_cpu_plugin::cpu::GraphSpec& spec,
                      const std::vector<int64_t>& symbols) {
  constexpr size_t kMaxIoBytes = 1 << 20;
  size_t total = 0;
  std::vector<int32_t> ids(spec.inputs);
  ids.insert(ids.end(), spec.outputs.begin(), spec.outputs.end());
  for (int32_t id : ids) total += recorded_bytes(spec.values[id]);
  if (total > kMaxIoBytes) return;
  std::vector<std::vector<int32_t>> sizes;
  std::vector<std::vector<uint8_t>> dim_orders;
  std::vector<std::vector<int32_t>> strides;
  std::vector<std::unique_ptr<uint8_t[]>> buffers;
  std::vector<std::unique_ptr<TensorImpl>> impls;
  std::vector<EValue> evalues;
  evalues.reserve(ids.size());
  for (int32_t id : ids) {
    const auto& value = spec.values[id];
    const std::vector<int64_t> shape =
        value.is_dynamic() ? et_cpu_plugin::cpu::concrete_shape(value, symbols) : value.shape;
    size_t rank = shape.size();
    sizes.emplace_back(shape.begin(), shape.end());
    sizes.back().reserve(rank + 1);
    dim_orders.emplace_back(rank + 1);
    strides.emplace_back(rank + 1);
    int32_t stride = 1;
    for (size_t d = rank; d-- > 0;) {
      dim_orders.back()[d] = static_cast<uint8_t>(d);
      strides.back()[d] = stride;
      stride *= shape[d] == 0 ? 1 : static_cast<int32_t>(shape[d]);
    }
    buffers.emplace_back(new uint8_t[recorded_bytes(value) + 1]());
    impls.emplace_back(new TensorImpl(value.dtype, static_cast<ssize_t>(rank), sizes.back().data(),
                                      buffers.back().get(), dim_orders.back().data(),
                                      strides.back().data()));
    evalues.emplace_back(executorch::aten::Tensor(impls.back().get()));
  }
  std::vector<EValue*> args;
  for (auto& evalue : evalues) args.push_back(&evalue);
  (void)graph.execute(Span<EValue*>(args.data(), args.size()), nullptr);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool registered = register_noop_kernels();
  (void)registered;
  static const ZeroDataMap constants;
  // A copy of exactly `size` bytes, so reading past the end is caught by the sanitizer.
  std::unique_ptr<uint8_t[]> copy(new uint8_t[size ? size : 1]);
  if (size) std::memcpy(copy.get(), data, size);
  std::unique_ptr<CompiledGraph> graph;
  if (CompiledGraph::compile(copy.get(), size, &constants, &graph) == Error::Ok) {
    const auto& spec = graph->spec();
    const std::vector<int64_t> upper = et_cpu_plugin::cpu::upper_bounds(spec);
    execute_if_small(*graph, spec, upper);
    if (spec.is_dynamic()) {
      // Again at the lower bounds and back at the upper ones: re-planning per size both ways.
      std::vector<int64_t> lower;
      for (const auto& symbol : spec.symbols) lower.push_back(symbol.min);
      execute_if_small(*graph, spec, lower);
      execute_if_small(*graph, spec, upper);
    }
  }
  return 0;
}
