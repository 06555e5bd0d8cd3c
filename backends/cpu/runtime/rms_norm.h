// RMSNorm over the last dim (et_cpu_quant::rms_norm.out, fused by backends/cpu/fuse_rms_norm.py):
// out = x * rsqrt(mean(x^2) + eps) [* weight] per row of D floats, as torch computes that
// decomposition (the mean a sum divided by D, rsqrt as 1 / sqrt, x times the row's scale, then
// times weight[i]). weight is absent or a [D] tensor.
//
// The Reference provider's built-in kernel (scalar, one thread) is here; the Optimized provider
// runs the op on its AVX-512 kernel (providers/optimized/kernels/rms_norm.h) and uses these
// checks and this loop too.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>

#include "backends/cpu/runtime/kernel_provider.h"

namespace et_cpu_plugin {
namespace cpu {

struct RmsNormShape {
  int64_t rows = 0;   // of x and out, D floats each
  int64_t width = 0;  // D, >= 1
  float eps = 0.0f;
};

// The sizes for the tensors' current shapes; false when they are not an RMSNorm (a rank-0 x or an
// empty last dim, out not x's shape, a weight (null: none) that is not [D]). Dtypes are the
// caller's to check.
bool rms_norm_shape(const executorch::aten::Tensor& x, const executorch::aten::Tensor* weight,
                    const executorch::aten::Tensor& out, float eps, RmsNormShape* shape);

// eps from the op's argument (a float, or an int); false when it is neither or not finite.
bool rms_norm_eps(const executorch::runtime::EValue& value, float* eps);

// The scale of a row whose squares sum to `sum_of_squares`: 1 / sqrt(sum / D + eps).
inline float rms_norm_scale(const RmsNormShape& shape, float sum_of_squares) {
  const float mean = sum_of_squares / static_cast<float>(shape.width);
  return 1.0f / std::sqrt(mean + shape.eps);
}

// Rows [first, last) of out, scalar; `weight` null when there is none.
void rms_norm_rows(const RmsNormShape& shape, const float* x, const float* weight, float* out,
                   int64_t first, int64_t last);

// Whether `kernel` is "et_cpu_quant::rms_norm.out".
bool is_rms_norm_kernel(const char* kernel);

// Binds the built-in kernel after checking the arguments (float32, shapes as above, a finite
// eps); Error::InvalidArgument naming the op otherwise.
executorch::runtime::Error bind_rms_norm_builtin(const OpBinding& op,
                                                 std::unique_ptr<BoundKernel>* out);

}  // namespace cpu
}  // namespace et_cpu_plugin
