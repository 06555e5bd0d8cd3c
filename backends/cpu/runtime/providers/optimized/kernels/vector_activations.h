// Sigmoid and SiLU over float arrays in AVX-512, for the plans to run after a primitive instead of
// oneDNN's eltwise post-op. On these machines oneDNN 3.2's jit swish costs ~0.7 ns per element on
// one core, about as much as the 1x1 convolution it follows in EfficientNet's MBConv expansions;
// this kernel costs ~0.27 (see the provider README).
#pragma once

#include <cstddef>

#include "backends/cpu/runtime/providers/optimized/onednn/onednn_provider.h"

namespace et_cpu_plugin {
namespace onednn {

// Whether `activation` has a vector kernel on this CPU: sigmoid or SiLU with AVX-512F, and
// ET_CPU_VECTOR_ACTIVATIONS is not "0" ("0" keeps oneDNN's kernels, for measuring; read at each
// call, so it applies to the plans prepared after it is set).
bool has_vector_activation(const Activation& activation);

// output[i] = activation(input[i]) for `count` floats (input == output: in place); throws
// ProviderError when has_vector_activation(activation) is false. Agrees with torch's float32
// definitions within 4e-6 relative (5-term polynomial exp); NaN stays NaN.
void apply_vector_activation(const Activation& activation, const float* input, float* output,
                             size_t count);

}  // namespace onednn
}  // namespace et_cpu_plugin
