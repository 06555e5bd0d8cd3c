// Rotary position embeddings, "rotate half" form (et_cpu_quant::rotary.out, fused by
// backends/cpu/fuse_rotary.py): out = x * cos + rotate_half(x) * sin over the last dim D of x,
// rotate_half(x)[i] = -x[i + D/2] for i < D/2, x[i - D/2] after, as torch computes it (two
// products, then their sum). cos and sin have one shape whose dims (leading 1s dropped) are x's
// trailing dims, so row r of x (D floats) reads their row r % table_rows.
//
// The Reference provider's built-in kernel (scalar, one thread) is here; the Optimized provider
// runs the op on its AVX-512 kernel (providers/optimized/kernels/rotary.h) and uses these
// checks and this loop too.
#pragma once

#include <cstdint>
#include <memory>

#include "backends/cpu/runtime/kernel_provider.h"

namespace et_cpu_plugin {
namespace cpu {

struct RotaryShape {
  int64_t rows = 0;        // of x and out, D floats each
  int64_t width = 0;       // D, even
  int64_t table_rows = 1;  // of cos and sin
};

// The sizes for the tensors' current shapes; false when they are not a rotary (an odd or < 2 last
// dim, cos and sin of other shapes, tables that do not match x's trailing dims, out not x's shape).
// Dtypes are the caller's to check.
bool rotary_shape(const executorch::aten::Tensor& x, const executorch::aten::Tensor& cos,
                  const executorch::aten::Tensor& sin, const executorch::aten::Tensor& out,
                  RotaryShape* shape);

// Calls row(x_row, cos_row, sin_row, out_row) for rows [first, last) of x and out, each with the
// table row it reads (the loop the scalar and the vector kernels share).
template <typename Row>
void for_rotary_rows(const RotaryShape& shape, const float* x, const float* cos, const float* sin,
                     float* out, int64_t first, int64_t last, Row row) {
  for (int64_t r = first; r < last; ++r) {
    const int64_t t = (r % shape.table_rows) * shape.width;
    row(x + r * shape.width, cos + t, sin + t, out + r * shape.width);
  }
}

// Rows [first, last) of out, scalar.
void rotary_rows(const RotaryShape& shape, const float* x, const float* cos, const float* sin,
                 float* out, int64_t first, int64_t last);

// Whether `kernel` is "et_cpu_quant::rotary.out".
bool is_rotary_kernel(const char* kernel);

// Binds the built-in kernel after checking the arguments (float32, shapes as above);
// Error::InvalidArgument naming the op otherwise.
executorch::runtime::Error bind_rotary_builtin(const OpBinding& op,
                                               std::unique_ptr<BoundKernel>* out);

}  // namespace cpu
}  // namespace et_cpu_plugin
