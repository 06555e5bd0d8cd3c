// quantized_add (see quantized_add.h): 64 elements per iteration as four independent 16-lane
// chains, the tail through masked loads and stores (the same instructions, so the same bytes).
#include "backends/cpu/runtime/providers/optimized/kernels/quantized_add.h"

#include <immintrin.h>

#include <cmath>

#include "backends/cpu/runtime/providers/optimized/common/switches.h"

// Each product rounded before the sum (the reference's dequantize, then add): no fused
// multiply-add may be formed from the intrinsics.
#pragma GCC optimize("fp-contract=off")

namespace et_cpu_plugin {
namespace onednn {
namespace {

#define ET_QADD_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

bool cpu_has_avx512bw() {
  static const bool has = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return has;
}

struct Constants {
  __m512i a_zero, b_zero;
  __m512 a_scale, b_scale, low, high, inverse, out_zero, quant_low, quant_high;
};

template <bool kSigned>
ET_QADD_AVX512 inline __m512i widen(__m128i bytes) {
  return kSigned ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes);
}

// 16 elements: the bytes of a and b in, the 16 result bytes out.
template <bool kSigned>
ET_QADD_AVX512 inline __m128i add16(const Constants& k, __m128i a, __m128i b) {
  __m512 x = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(widen<kSigned>(a), k.a_zero)),
                           k.a_scale);
  __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(widen<kSigned>(b), k.b_zero)),
                           k.b_scale);
  asm("" : "+v"(x), "+v"(y));  // both products rounded: no fused multiply-add
  __m512 v = _mm512_add_ps(x, y);
  v = _mm512_min_ps(_mm512_max_ps(v, k.low), k.high);
  v = _mm512_mul_ps(v, k.inverse);
  v = _mm512_add_ps(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                    k.out_zero);
  v = _mm512_min_ps(_mm512_max_ps(v, k.quant_low), k.quant_high);
  // In the quant range now: the low byte of the int32 is the int8 or uint8 value.
  return _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v));
}

template <bool kSigned>
ET_QADD_AVX512 void add_loop(const Constants& k, const uint8_t* a, const uint8_t* b, uint8_t* out,
                             int64_t n) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m128i r[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      r[j] = add16<kSigned>(k, _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i + 16 * j)),
                            _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i + 16 * j)));
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 16 * j), r[j]);
    }
  }
  for (; i < n; i += 16) {
    const int64_t rest = n - i < 16 ? n - i : 16;
    const __mmask16 m = static_cast<__mmask16>((1u << rest) - 1u);
    const __m128i r = add16<kSigned>(k, _mm_maskz_loadu_epi8(m, a + i),
                                     _mm_maskz_loadu_epi8(m, b + i));
    _mm_mask_storeu_epi8(out + i, m, r);
  }
}

ET_QADD_AVX512 void add_avx512(const QuantizedAddParams& p, const uint8_t* a, const uint8_t* b,
                               uint8_t* out, int64_t n) {
  Constants k;
  k.a_zero = _mm512_set1_epi32(p.a_zero_point);
  k.b_zero = _mm512_set1_epi32(p.b_zero_point);
  k.a_scale = _mm512_set1_ps(p.a_scale);
  k.b_scale = _mm512_set1_ps(p.b_scale);
  const float inf = INFINITY;
  k.low = _mm512_set1_ps(std::isfinite(p.low) ? p.low : -inf);
  k.high = _mm512_set1_ps(std::isfinite(p.high) ? p.high : inf);
  k.inverse = _mm512_set1_ps(1.0f / p.out_scale);
  k.out_zero = _mm512_set1_ps(static_cast<float>(p.out_zero_point));
  k.quant_low = _mm512_set1_ps(static_cast<float>(p.quant_min));
  k.quant_high = _mm512_set1_ps(static_cast<float>(p.quant_max));
  if (p.is_signed) {
    add_loop<true>(k, a, b, out, n);
  } else {
    add_loop<false>(k, a, b, out, n);
  }
}

}  // namespace

bool quantized_add_supported() {
  return kernel_switched_on("ET_CPU_OWN_QUANTIZED_ADD") && cpu_has_avx512bw();
}

void quantized_add(const QuantizedAddParams& p, const void* a, const void* b, void* out,
                   int64_t n) {
  if (n <= 0) return;
  add_avx512(p, static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b),
             static_cast<uint8_t*>(out), n);
}

}  // namespace onednn
}  // namespace et_cpu_plugin
