// The rotary kernel (see rotary.h).
#include "backends/cpu/runtime/providers/optimized/kernels/rotary.h"

#include <algorithm>

#include "backends/cpu/runtime/providers/optimized/common/work_pool.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {
namespace {

// out[i] = x[i] * c[i] -/+ y[i] * s[i] for `count` floats (y: the row's other half); the
// compiler may fuse a product into the sum (one rounding less than torch: within 1 ulp).
template <bool kSubtract>
ET_AVX512 void half16(const float* x, const float* y, const float* c, const float* s, float* out,
                      int64_t count) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 turned = _mm512_mul_ps(_mm512_loadu_ps(y + i), _mm512_loadu_ps(s + i));
    const __m512 plain = _mm512_mul_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(c + i));
    _mm512_storeu_ps(out + i,
                     kSubtract ? _mm512_sub_ps(plain, turned) : _mm512_add_ps(plain, turned));
  }
  if (i < count) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (count - i)) - 1u);
    const __m512 turned =
        _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, y + i), _mm512_maskz_loadu_ps(mask, s + i));
    const __m512 plain =
        _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, x + i), _mm512_maskz_loadu_ps(mask, c + i));
    _mm512_mask_storeu_ps(out + i, mask,
                          kSubtract ? _mm512_sub_ps(plain, turned) : _mm512_add_ps(plain, turned));
  }
}

ET_AVX512 void rows16(const cpu::RotaryShape& p, const float* x, const float* cos,
                      const float* sin, float* out, int64_t first, int64_t last) {
  const int64_t half = p.width / 2;
  cpu::for_rotary_rows(p, x, cos, sin, out, first, last,
                       [&](const float* in, const float* c, const float* s, float* o) {
                         half16<true>(in, in + half, c, s, o, half);
                         half16<false>(in + half, in, c + half, s + half, o + half, half);
                       });
}

void rows(const cpu::RotaryShape& p, const float* x, const float* cos, const float* sin,
          float* out, int64_t first, int64_t last) {
  if (cpu_has_avx512()) {
    rows16(p, x, cos, sin, out, first, last);
  } else {
    cpu::rotary_rows(p, x, cos, sin, out, first, last);
  }
}

}  // namespace

bool rotary_enabled() { return kernel_switched_on("ET_CPU_ROTARY"); }

void rotary(const cpu::RotaryShape& shape, const float* x, const float* cos, const float* sin,
            float* out, WorkPool* pool) {
  // Bands of at least ~16 KiB of x: below that a split costs more than it saves.
  const int64_t min_rows = std::max<int64_t>(1, 4096 / std::max<int64_t>(shape.width, 1));
  const int64_t threads = pool ? pool->size() : 1;
  const int64_t bands =
      std::max<int64_t>(1, std::min<int64_t>(threads * 2, shape.rows / min_rows));
  if (bands <= 1 || pool == nullptr) {
    rows(shape, x, cos, sin, out, 0, shape.rows);
    return;
  }
  pool->run(static_cast<size_t>(bands), [&](size_t band, int) {
    const int64_t b = static_cast<int64_t>(band);
    rows(shape, x, cos, sin, out, shape.rows * b / bands, shape.rows * (b + 1) / bands);
  });
}

}  // namespace onednn
}  // namespace et_cpu_plugin
