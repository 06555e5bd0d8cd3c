// Vector math shared by the provider's own AVX-512 kernels (vector_activations.cc, row_gemm.cc,
// softmax_plan.cc, reductions.cc), and the CPU check they need; the on/off switches they read
// come from common/switches.h.
// Every function here carries the avx512f target: call them only from code that checked
// cpu_has_avx512(), so the library still loads on CPUs without AVX-512.
#pragma once

// GCC 12 reports the self-initialised `__Y` inside its own AVX-512 intrinsics (_mm512_max_ps
// and the like) as maybe uninitialized once they are inlined (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "backends/cpu/runtime/providers/optimized/common/switches.h"

namespace et_cpu_plugin {
namespace onednn {

#define ET_AVX512 __attribute__((target("avx512f")))

// V weight vectors from `w` (16 floats apart; `w` on a cache line when `kAligned`) into
// registers, and kept there: GCC would otherwise fold the load into every FMA that uses the
// vector (one load per pixel of a register block instead of one per block). The direct
// convolution kernels' inner step (stem, pointwise, StreamConv).
template <int V, bool kAligned = false>
ET_AVX512 __attribute__((always_inline)) inline void load_pinned(const float* w, __m512 (&wv)[V]) {
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) {
    wv[v] = kAligned ? _mm512_load_ps(w + v * 16) : _mm512_loadu_ps(w + v * 16);
    asm("" : "+v"(wv[v]));
  }
}

// exp(z) for 16 floats z in [-87, 0] (NaN gives NaN): 2^n * exp(r) with n = round(z / ln 2),
// r = z - n ln 2 in [-ln 2 / 2, ln 2 / 2] (ln 2 split in two so the reduction stays exact),
// exp(r) by its Taylor polynomial to r^5; n >= -126, so 2^n is a normal float.
// exp(r) for |r| <= ln 2 / 2 by its Taylor polynomial to r^5.
ET_AVX512 inline __m512 exp_reduced16(__m512 r) {
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 p = _mm512_set1_ps(1.0f / 120.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, one);
  return _mm512_fmadd_ps(p, r, one);
}

ET_AVX512 inline __m512 exp_nonpositive16(__m512 z) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(z, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693145751953125f), z);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-1.428606765330187e-06f), r);
  const __m512 p = exp_reduced16(r);
  const __m512i exponent =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(exponent));
}

// sigmoid(x) for 16 floats. With z = -|x| (clamped where exp(z) would underflow), e = exp(z) is
// in (0, 1], so s = e / (1 + e) = sigmoid(-|x|) never overflows, and sigmoid(x) = 1 - s for
// x > 0.
ET_AVX512 inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 z = _mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)),
                                 _mm512_set1_ps(-87.0f));
  const __m512 e = exp_nonpositive16(z);
  const __m512 s = _mm512_div_ps(e, _mm512_add_ps(e, one));
  const __mmask16 positive = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ);
  const __m512 result = _mm512_mask_sub_ps(s, positive, one, s);
  // max(NaN, -87) is -87: give NaN back as torch does.
  return _mm512_mask_mov_ps(result, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

ET_AVX512 inline __m512 silu16(__m512 x) {
  return _mm512_mul_ps(x, sigmoid16(x));
}

// x * sigmoid(x) for 16 floats in fewer instructions than silu16 (~17 against ~27), for a kernel
// with little arithmetic per output (a 1x1 convolution over 16 input channels), where silu16's
// cost equals the product's: sigmoid(x) = 1 / (1 + exp(-t)), t = x clamped to [-87, 87] (so
// exp(-t) and 1 / (1 + exp(-t)) stay normal floats), exp(r) by exp_reduced16 with
// 2^n applied by scalef, and the reciprocal as rcp14 and one Newton step (relative error ~2^-28
// before rounding) instead of the 512-bit division (one per ~10 cycles). Within 4e-6 relative
// of torch's like silu16; NaN stays NaN (the clamp's operand order keeps it).
ET_AVX512 inline __m512 silu16_fast(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 t =
      _mm512_min_ps(_mm512_set1_ps(87.0f), _mm512_max_ps(_mm512_set1_ps(-87.0f), x));
  // exp(-t) = 2^n exp(r), n = round(-t / ln 2), r = -t - n ln 2.
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(-1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmsub_ps(n, _mm512_set1_ps(0.693145751953125f), t);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  const __m512 d = _mm512_add_ps(_mm512_scalef_ps(exp_reduced16(r), n), one);
  __m512 inverse = _mm512_rcp14_ps(d);
  inverse = _mm512_mul_ps(inverse, _mm512_fnmadd_ps(d, inverse, _mm512_set1_ps(2.0f)));
  return _mm512_mul_ps(x, inverse);
}

enum class Horizontal { kMax, kMin, kSum };

// The max, min or sum of the 16 lanes of `v`, as a tree in registers (halves, quarters, pairs,
// neighbours). The zero-masked shuffles on purpose: GCC 12's _mm512_reduce_* and unmasked
// shuffles read a self-initialised undefined vector that -Wuninitialized reports. A sum may
// differ from a left-to-right one in the last bit.
template <Horizontal kind>
ET_AVX512 inline __m512 combine16(__m512 a, __m512 b) {
  if constexpr (kind == Horizontal::kMax) return _mm512_max_ps(a, b);
  if constexpr (kind == Horizontal::kMin) return _mm512_min_ps(a, b);
  return _mm512_add_ps(a, b);
}

template <Horizontal kind>
ET_AVX512 inline float horizontal16(__m512 v) {
  constexpr __mmask16 kAll = 0xFFFF;
  v = combine16<kind>(v, _mm512_maskz_shuffle_f32x4(kAll, v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = combine16<kind>(v, _mm512_maskz_shuffle_f32x4(kAll, v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  v = combine16<kind>(v, _mm512_maskz_permute_ps(kAll, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = combine16<kind>(v, _mm512_maskz_permute_ps(kAll, v, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_cvtss_f32(v);
}

// Whether this CPU runs AVX-512F (checked once).
inline bool cpu_has_avx512() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return has;
}

}  // namespace onednn
}  // namespace et_cpu_plugin
