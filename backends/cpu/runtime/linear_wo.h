// The built-in kernels of torchao's weight-only ops (backends/cpu/torchao/weight_only.py):
//
//   et_cpu_quant::linear_wo.out     float32 input [.., K] times a packed weight [N, K], + bias
//   et_cpu_quant::embedding_wo.out  rows of a packed table [V, D] at int64 / int32 indices
//
// Both read the packed weight (packed_weight.h, checked there) as
// quantized_ops.dequantize_weight defines it: uint8 [rows, cols / 2] holding w + 8 two a byte
// (even column in the low nibble) for 4 bits, int8 [rows, cols] for 8, float32 scales and
// optional int8 zero points per (row, group of columns); a weight is (w - zero_point) * scale,
// computed exactly as torchao's dequantize_affine does. The linear
// dequantizes one output channel's row into a small float buffer, then takes its dot product with
// every input row (16-lane vector code compiled for AVX-512, AVX2 and plain x86-64, the CPU's
// widest picked at bind, or a narrower one named by ET_CPU_WEIGHT_ONLY_ISA=avx2|generic for
// tests); single-threaded. The embedding checks every index against V at run time.
#pragma once

#include <memory>

#include "backends/cpu/runtime/kernel_provider.h"

namespace et_cpu_plugin {
namespace cpu {

// Whether `kernel` is "et_cpu_quant::linear_wo.out" or "et_cpu_quant::embedding_wo.out".
bool is_weight_only_kernel(const char* kernel);

// Binds `op` (one of the two kernels) after checking every argument (dtypes, shapes, group size
// dividing the row, weight bits); Error::InvalidArgument naming the op and the problem otherwise.
executorch::runtime::Error bind_weight_only(const OpBinding& op, std::unique_ptr<BoundKernel>* out);

}  // namespace cpu
}  // namespace et_cpu_plugin
