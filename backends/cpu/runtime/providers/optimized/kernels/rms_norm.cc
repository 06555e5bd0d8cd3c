// The RMSNorm kernel (see rms_norm.h).
#include "backends/cpu/runtime/providers/optimized/kernels/rms_norm.h"

#include <algorithm>

#include "backends/cpu/runtime/providers/optimized/common/work_pool.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {
namespace {

ET_AVX512 float sum_of_squares16(const float* in, int64_t width) {
  __m512 even = _mm512_setzero_ps();
  __m512 odd = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= width; i += 32) {
    const __m512 a = _mm512_loadu_ps(in + i);
    const __m512 b = _mm512_loadu_ps(in + i + 16);
    even = _mm512_fmadd_ps(a, a, even);
    odd = _mm512_fmadd_ps(b, b, odd);
  }
  for (; i + 16 <= width; i += 16) {
    const __m512 a = _mm512_loadu_ps(in + i);
    even = _mm512_fmadd_ps(a, a, even);
  }
  if (i < width) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (width - i)) - 1u);
    const __m512 a = _mm512_maskz_loadu_ps(mask, in + i);
    odd = _mm512_fmadd_ps(a, a, odd);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(even, odd));
}

// out = in * scale [* weight]: two roundings, as torch's two muls.
ET_AVX512 void scale_row16(const float* in, const float* weight, float scale, float* out,
                           int64_t width) {
  const __m512 s = _mm512_set1_ps(scale);
  int64_t i = 0;
  for (; i + 16 <= width; i += 16) {
    __m512 v = _mm512_mul_ps(_mm512_loadu_ps(in + i), s);
    if (weight) v = _mm512_mul_ps(v, _mm512_loadu_ps(weight + i));
    _mm512_storeu_ps(out + i, v);
  }
  if (i < width) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (width - i)) - 1u);
    __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, in + i), s);
    if (weight) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mask, weight + i));
    _mm512_mask_storeu_ps(out + i, mask, v);
  }
}

ET_AVX512 void rows16(const cpu::RmsNormShape& p, const float* x, const float* weight,
                      float* out, int64_t first, int64_t last) {
  for (int64_t r = first; r < last; ++r) {
    const float* in = x + r * p.width;
    const float scale = cpu::rms_norm_scale(p, sum_of_squares16(in, p.width));
    scale_row16(in, weight, scale, out + r * p.width, p.width);
  }
}

void rows(const cpu::RmsNormShape& p, const float* x, const float* weight, float* out,
          int64_t first, int64_t last) {
  if (cpu_has_avx512()) {
    rows16(p, x, weight, out, first, last);
  } else {
    cpu::rms_norm_rows(p, x, weight, out, first, last);
  }
}

}  // namespace

bool rms_norm_enabled() { return kernel_switched_on("ET_CPU_RMS_NORM"); }

void rms_norm(const cpu::RmsNormShape& shape, const float* x, const float* weight, float* out,
              WorkPool* pool) {
  // Bands of at least ~16 KiB of x: below that a split costs more than it saves.
  const int64_t min_rows = std::max<int64_t>(1, 4096 / std::max<int64_t>(shape.width, 1));
  const int64_t threads = pool ? pool->size() : 1;
  const int64_t bands =
      std::max<int64_t>(1, std::min<int64_t>(threads * 2, shape.rows / min_rows));
  if (bands <= 1 || pool == nullptr) {
    rows(shape, x, weight, out, 0, shape.rows);
    return;
  }
  pool->run(static_cast<size_t>(bands), [&](size_t band, int) {
    const int64_t b = static_cast<int64_t>(band);
    rows(shape, x, weight, out, shape.rows * b / bands, shape.rows * (b + 1) / bands);
  });
}

}  // namespace onednn
}  // namespace et_cpu_plugin
