// The per-tensor quantize / dequantize loops (see quantize_convert.h): AVX-512 where the CPU has
// it, the same arithmetic in scalar code otherwise.
#include "backends/cpu/runtime/providers/optimized/kernels/quantize_convert.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {

namespace {

// One element the portable kernels' way (also the vector loops' tail).
inline int32_t quantize_one(float inverse, float zero_point, float low, float high, float x) {
  const float q = std::nearbyint(x * inverse) + zero_point;
  return static_cast<int32_t>(std::min(std::max(q, low), high));
}

ET_AVX512 void quantize_avx512(const TensorQuantization& q, const float* x, int64_t n,
                               void* out) {
  const float inverse = 1.0f / q.scale;
  const float zero_point = static_cast<float>(q.zero_point);
  const float low = static_cast<float>(q.quant_min), high = static_cast<float>(q.quant_max);
  const __m512 vinverse = _mm512_set1_ps(inverse), vzero = _mm512_set1_ps(zero_point);
  const __m512 vlow = _mm512_set1_ps(low), vhigh = _mm512_set1_ps(high);
  auto* bytes = static_cast<int8_t*>(out);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // The product rounded to float first, then to the nearest integer (ties to even), as
    // nearbyint does in the default rounding mode.
    __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), vinverse);
    v = _mm512_add_ps(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                      vzero);
    v = _mm512_min_ps(_mm512_max_ps(v, vlow), vhigh);
    // In range now: the low byte of the int32 is the int8 or uint8 value.
    _mm_storeu_si128(reinterpret_cast<__m128i*>(bytes + i),
                     _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
  }
  for (; i < n; ++i) {
    bytes[i] = static_cast<int8_t>(quantize_one(inverse, zero_point, low, high, x[i]));
  }
}

ET_AVX512 void dequantize_avx512(const TensorQuantization& q, const void* in, int64_t n,
                                 float* out) {
  const __m512i vzero = _mm512_set1_epi32(q.zero_point);
  const __m512 vscale = _mm512_set1_ps(q.scale);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(
        static_cast<const uint8_t*>(in) + i));
    const __m512i wide = q.is_signed ? _mm512_cvtepi8_epi32(raw) : _mm512_cvtepu8_epi32(raw);
    _mm512_storeu_ps(out + i,
                     _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(wide, vzero)), vscale));
  }
  for (; i < n; ++i) {
    const int32_t value = q.is_signed ? static_cast<const int8_t*>(in)[i]
                                      : static_cast<const uint8_t*>(in)[i];
    out[i] = static_cast<float>(value - q.zero_point) * q.scale;
  }
}

}  // namespace

void quantize_per_tensor(const TensorQuantization& q, const float* x, int64_t n, void* out) {
  if (cpu_has_avx512()) return quantize_avx512(q, x, n, out);
  const float inverse = 1.0f / q.scale;
  const float zero_point = static_cast<float>(q.zero_point);
  const float low = static_cast<float>(q.quant_min), high = static_cast<float>(q.quant_max);
  auto* bytes = static_cast<int8_t*>(out);
  for (int64_t i = 0; i < n; ++i) {
    bytes[i] = static_cast<int8_t>(quantize_one(inverse, zero_point, low, high, x[i]));
  }
}

void dequantize_per_tensor(const TensorQuantization& q, const void* in, int64_t n, float* out) {
  if (cpu_has_avx512()) return dequantize_avx512(q, in, n, out);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t value = q.is_signed ? static_cast<const int8_t*>(in)[i]
                                      : static_cast<const uint8_t*>(in)[i];
    out[i] = static_cast<float>(value - q.zero_point) * q.scale;
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
