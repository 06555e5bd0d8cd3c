// Batched products in register tiles, sized at each call (see tile_bmm.h).
#include "backends/cpu/runtime/providers/optimized/kernels/tile_bmm.h"

#include <algorithm>

#include "backends/cpu/runtime/providers/optimized/common/slices.h"
#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/common/work_pool.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {
namespace {

constexpr int64_t kColumns = 32;     // two vectors of output columns per tile
constexpr int64_t kBlockRows = 32;   // rows of one batch item per unit of work

ET_AVX512 inline __mmask16 lanes(int64_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xFFFF)
                     : count <= 0 ? static_cast<__mmask16>(0)
                                  : static_cast<__mmask16>((1u << count) - 1u);
}

// R rows of a (row stride k) times b's columns [j, j + 32) (masks m0, m1), into out (stride n).
template <int R>
ET_AVX512 void tile(const float* a, const float* b, float* out, int64_t k, int64_t n, int64_t j,
                    __mmask16 m0, __mmask16 m1) {
  __m512 acc[R][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const float* column = b + j;
  for (int64_t q = 0; q < k; ++q, column += n) {
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, column);
    const __m512 b1 = _mm512_maskz_loadu_ps(m1, column + 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * k + q]);
      acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(out + r * n + j, m0, acc[r][0]);
    _mm512_mask_storeu_ps(out + r * n + j + 16, m1, acc[r][1]);
  }
}

// Rows [r0, r1) of one batch item: column panels outermost, 8 rows at a time (then 4, 2, 1).
ET_AVX512 void rows(const float* a, const float* b, float* out, int64_t k, int64_t n, int64_t r0,
                    int64_t r1) {
  for (int64_t j = 0; j < n; j += kColumns) {
    const __mmask16 m0 = lanes(n - j);
    const __mmask16 m1 = lanes(n - j - 16);
    int64_t r = r0;
    for (; r + 8 <= r1; r += 8) tile<8>(a + r * k, b, out + r * n, k, n, j, m0, m1);
    if (r + 4 <= r1) {
      tile<4>(a + r * k, b, out + r * n, k, n, j, m0, m1);
      r += 4;
    }
    if (r + 2 <= r1) {
      tile<2>(a + r * k, b, out + r * n, k, n, j, m0, m1);
      r += 2;
    }
    if (r < r1) tile<1>(a + r * k, b, out + r * n, k, n, j, m0, m1);
  }
}

}  // namespace

bool tile_bmm_supported() { return kernel_switched_on("ET_CPU_TILE_BMM") && cpu_has_avx512(); }

void tile_bmm(const TileBmmShape& s, const float* a, const float* b, float* out, WorkPool* pool) {
  if (s.batch <= 0 || s.m <= 0 || s.n <= 0) return;
  if (s.k <= 0) {
    std::fill(out, out + s.batch * s.m * s.n, 0.0f);
    return;
  }
  const int64_t blocks = (s.m + kBlockRows - 1) / kBlockRows;
  const int64_t units = s.batch * blocks;
  // At least ~128 KFLOP a task (a decode step's products run on the calling thread), up to 4
  // tasks a thread (work_pool.h).
  const int64_t threads = pool != nullptr ? pool->size() : 1;
  const int64_t flops = 2 * s.batch * s.m * s.k * s.n;
  const int64_t tasks = std::max<int64_t>(1, std::min({units, 4 * threads, flops / (128 * 1024)}));
  auto task = [&](size_t index, int) {
    const auto [begin, end] = slice_of(units, static_cast<size_t>(tasks), index);
    for (int64_t u = begin; u < end; ++u) {
      const int64_t item = u / blocks;
      const int64_t r0 = (u % blocks) * kBlockRows;
      const int64_t r1 = std::min(s.m, r0 + kBlockRows);
      rows(a + item * s.m * s.k, b + item * s.k * s.n, out + item * s.m * s.n, s.k, s.n, r0, r1);
    }
  };
  run_tasks(pool, static_cast<size_t>(tasks), task);
}

}  // namespace onednn
}  // namespace et_cpu_plugin
