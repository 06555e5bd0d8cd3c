// The Optimized provider's int8 kernels: et_cpu_quant::conv2d.out and et_cpu_quant::linear.out
// (backends/cpu/quantized_ops.py) as oneDNN int8 convolution / matmul, with the input's and the
// output's scale and zero point and the per-channel weight scales as oneDNN runtime attributes and
// the fused clamp as an eltwise post-op; et_cpu_quant::max_pool2d.out as oneDNN's int8 pooling,
// et_cpu_quant::add.out on our own loops.
#pragma once

#include <memory>
#include <string>

#include <executorch/runtime/core/error.h>

#include "backends/cpu/runtime/kernel_provider.h"

namespace et_cpu_plugin {
namespace onednn {
class WorkPool;
}  // namespace onednn
namespace cpu {

// Binds `op` (its arguments already checked by quantized_op_check.cc). Error::NotSupported with
// *reason when oneDNN cannot take it; oneDNN errors are returned as NotSupported too.
// `input_channels_last` / `output_channels_last`: a convolution's int8 input / output buffer holds
// NHWC data (the session's layout chaining, optimized/session.h), not NCHW.
// `pool`: the provider's work-sharing pool; a convolution with NHWC activations then runs as bands
// of output rows on it, a linear as blocks of output columns (ET_CPU_ONEDNN_INT8_SPLIT=0: whole,
// on the calling thread). `second_input_channels_last`: the add's second operand's layout.
executorch::runtime::Error bind_quantized(const OpBinding& op, std::unique_ptr<BoundKernel>* out,
                                          std::string* reason, bool input_channels_last = false,
                                          bool output_channels_last = false,
                                          onednn::WorkPool* pool = nullptr,
                                          bool second_input_channels_last = false);

// What bind_quantized would answer for `op` with plain layouts, without building the kernel
// (no primitive, no weight reorder): the delegate's bind asks this, finalize binds for real.
executorch::runtime::Error check_quantized(const OpBinding& op, std::string* reason);

// Whether `kernel`'s output can be kept channels-last (the int8 convolution's).
bool quantized_output_chainable(const std::string& kernel);

// Whether `kernel` reads its inputs in either layout and can write its output in theirs (the int8
// max pool and add): the session keeps its output channels-last when all its inputs are.
bool quantized_layout_follows_input(const std::string& kernel);

// Which of our own kernels runs a bound int8 op: "depthwise_int8:avx512_vnni" for a depthwise
// convolution on kernels/depthwise_int8.h, else "" (oneDNN's).
std::string quantized_implementation(const BoundKernel& kernel);

// The argument index of `kernel`'s second activation input (the add's b), or -1.
int quantized_second_input(const std::string& kernel);

}  // namespace cpu
}  // namespace et_cpu_plugin
