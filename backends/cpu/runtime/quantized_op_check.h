// Semantic checks of the delegate's int8 ops (et_cpu_quant::conv2d.out, ::linear.out; see
// backends/cpu/quantized_ops.py) beyond their schema: dtypes, shapes, quantization parameters.
// A damaged payload is rejected at init with a message naming the op, never run.
#pragma once

#include <cstddef>

#include <executorch/runtime/core/error.h>

#include "backends/cpu/runtime/payload_reader.h"

namespace et_cpu_plugin {
namespace cpu {

// Whether `kernel` is one of the delegate's int8 ops.
bool is_quantized_kernel(const std::string& kernel);

// Checks op `index` of `graph` (its arguments already match the kernel's signature and refer to
// existing values). Error::InvalidProgram, reported with the op's name, when anything is off.
executorch::runtime::Error check_quantized_op(const GraphSpec& graph, size_t index);

}  // namespace cpu
}  // namespace et_cpu_plugin
