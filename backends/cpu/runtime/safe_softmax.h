// Softmax over the last dim with scaled_dot_product_attention's fully-masked-row guard
// (et_cpu_quant::safe_softmax.out, fused by backends/cpu/fuse_safe_softmax.py): per row of D
// floats softmax(x), except that a row of -inf only gives zeros; torch's _safe_softmax, which
// SDPA exports as softmax, eq(-inf), logical_not, any, logical_not, where(zeros).
//
// The Reference provider's built-in kernel (scalar, one thread) is here; the Optimized provider
// runs the op on its AVX-512 softmax rows (onednn::safe_softmax_rows) and uses these checks.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>

#include "backends/cpu/runtime/kernel_provider.h"

namespace et_cpu_plugin {
namespace cpu {

struct SafeSoftmaxShape {
  int64_t rows = 0;   // of x and out, D floats each
  int64_t width = 0;  // D, >= 1
};

// The sizes for the tensors' current shapes; false when they are not a last-dim softmax (a rank-0
// x or an empty last dim, `dim` not an int naming the last dim, out not x's shape). Dtypes are the
// caller's to check.
bool safe_softmax_shape(const executorch::aten::Tensor& x, const executorch::runtime::EValue& dim,
                        const executorch::aten::Tensor& out, SafeSoftmaxShape* shape);

// Whether all `n` floats are -inf (a NaN is not): the rows the guard zeroes.
inline bool all_minus_infinity(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!(x[i] == -std::numeric_limits<float>::infinity())) return false;
  }
  return true;
}

// Rows [first, last) of out, scalar.
void safe_softmax_rows(const SafeSoftmaxShape& shape, const float* x, float* out, int64_t first,
                       int64_t last);

// Whether `kernel` is "et_cpu_quant::safe_softmax.out".
bool is_safe_softmax_kernel(const char* kernel);

// Binds the built-in kernel after checking the arguments (float32, shapes as above);
// Error::InvalidArgument naming the op otherwise.
executorch::runtime::Error bind_safe_softmax_builtin(const OpBinding& op,
                                                     std::unique_ptr<BoundKernel>* out);

}  // namespace cpu
}  // namespace et_cpu_plugin
