// Sigmoid and SiLU in AVX-512 (see vector_activations.h). Only the avx512f-targeted functions
// (here and in vector_math.h) use AVX-512, and they run only after the CPU check, so the library
// still loads elsewhere.
#include "backends/cpu/runtime/providers/optimized/kernels/vector_activations.h"

#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {
namespace {

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

}  // namespace

bool has_vector_activation(const Activation& activation) {
  const bool kind_ok = activation.kind == Activation::Kind::kSigmoid ||
                       activation.kind == Activation::Kind::kSilu;
  return kind_ok && kernel_switched_on("ET_CPU_VECTOR_ACTIVATIONS") && cpu_has_avx512();
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
