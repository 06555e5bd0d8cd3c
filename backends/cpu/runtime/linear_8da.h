// The built-in kernel of `et_cpu_quant::linear_8da.out` (backends/cpu/torchao/linear_8da.py):
// torchao's 8da4w linear. Each row of the float32 input is quantized to int8 the way torchao's
// choose_qparams_affine / quantize_affine define it (asymmetric, per token), multiplied in int32
// with the int4 (two a byte) or int8 weights group by group, and dequantized with the row's scale
// and the group's weight scale; then the bias. A plain, single-threaded implementation: the
// Reference provider's (builtin_kernels.cc), which runs the op wherever the Optimized provider's
// VNNI / AVX2 kernel (providers/optimized/kernels/linear_8da_vnni.h, bit-identical outputs)
// declines, and the reference that kernel is tested against (test/linear_8da_kernel_test.py).
#pragma once

#include <memory>

#include "backends/cpu/runtime/kernel_provider.h"
#include "backends/cpu/runtime/packed_weight.h"

namespace et_cpu_plugin {
namespace cpu {

// Whether `kernel` is "et_cpu_quant::linear_8da.out".
bool is_linear_8da_kernel(const char* kernel);

// One linear_8da op's arguments, read and checked by `read_linear_8da_args`.
struct Linear8daArgs {
  const executorch::aten::Tensor* input;  // float32 [.., K]
  PackedWeight w;                         // [N, K]: rows N, cols K
  const executorch::aten::Tensor* bias;   // float32 [N] or null
  executorch::aten::Tensor* output;       // float32 [.., N]
};

// Fills `args` from `op` after checking every argument (dtypes, shapes, group size dividing K,
// weight bits); null when they are right, else what is wrong. The one check of the op's
// arguments: this file's kernel reports the reason as an error, the Optimized provider's
// kernel (providers/optimized/bind_quantized.cc) declines with it.
const char* read_linear_8da_args(const OpBinding& op, Linear8daArgs* args);

// Binds `op` after checking every argument (dtypes, shapes, group size dividing K, weight bits);
// Error::InvalidArgument naming the op and the problem otherwise.
executorch::runtime::Error bind_linear_8da(const OpBinding& op, std::unique_ptr<BoundKernel>* out);

}  // namespace cpu
}  // namespace et_cpu_plugin
