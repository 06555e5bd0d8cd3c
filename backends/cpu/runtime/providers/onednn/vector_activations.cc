// Sigmoid and SiLU in AVX-512 (see vector_activations.h). Only this file's functions carry the
// avx512f target, and they run only after the CPU check, so the library still loads elsewhere.
#include "backends/cpu/runtime/providers/onednn/vector_activations.h"

#include <immintrin.h>

#include <cstdlib>
#include <cstring>

namespace et_cpu_plugin {
namespace onednn {
namespace {

#define ET_AVX512 __attribute__((target("avx512f")))

// sigmoid(x) for 16 floats. With z = -|x| (clamped where exp(z) would underflow), e = exp(z) is
// in (0, 1], so s = e / (1 + e) = sigmoid(-|x|) never overflows, and sigmoid(x) = 1 - s for
// x > 0. exp(z) = 2^n * exp(r): n = round(z / ln 2), r = z - n ln 2 in [-ln 2 / 2, ln 2 / 2]
// (ln 2 split in two so the reduction stays exact), exp(r) by its Taylor polynomial to r^5.
ET_AVX512 inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 z = _mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)),
                                 _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(z, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693145751953125f), z);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 120.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, one);
  p = _mm512_fmadd_ps(p, r, one);
  // 2^n from its exponent bits: n >= -126 after the clamp, so the result is a normal float.
  const __m512i exponent =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  const __m512 e = _mm512_mul_ps(p, _mm512_castsi512_ps(exponent));
  const __m512 s = _mm512_div_ps(e, _mm512_add_ps(e, one));
  const __mmask16 positive = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ);
  const __m512 result = _mm512_mask_sub_ps(s, positive, one, s);
  // max(NaN, -87) is -87: give NaN back as torch does.
  return _mm512_mask_mov_ps(result, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

ET_AVX512 inline __m512 silu16(__m512 x) {
  return _mm512_mul_ps(x, sigmoid16(x));
}

// Whole vectors, then the last partial one under a mask (no scalar tail with other numerics).
template <__m512 (*kOp)(__m512)>
ET_AVX512 void apply_avx512(const float* input, float* output, size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    _mm512_storeu_ps(output + i, kOp(_mm512_loadu_ps(input + i)));
  }
  if (i < count) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (count - i)) - 1u);
    _mm512_mask_storeu_ps(output + i, mask, kOp(_mm512_maskz_loadu_ps(mask, input + i)));
  }
}

bool cpu_has_avx512() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return has;
}

// Read at every call (plans ask at prepare, never per run), so a benchmark can compare both
// settings side by side in one process.
bool enabled() {
  const char* env = std::getenv("ET_CPU_VECTOR_ACTIVATIONS");
  return env == nullptr || std::strcmp(env, "0") != 0;
}

}  // namespace

bool has_vector_activation(const Activation& activation) {
  const bool kind_ok = activation.kind == Activation::Kind::kSigmoid ||
                       activation.kind == Activation::Kind::kSilu;
  return kind_ok && enabled() && cpu_has_avx512();
}

void apply_vector_activation(const Activation& activation, const float* input, float* output,
                             size_t count) {
  if (!has_vector_activation(activation)) {
    throw ProviderError("apply_vector_activation: no vector kernel for this activation here");
  }
  if (activation.kind == Activation::Kind::kSilu) {
    apply_avx512<silu16>(input, output, count);
  } else {
    apply_avx512<sigmoid16>(input, output, count);
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
