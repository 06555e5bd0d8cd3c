// Our own loops for the int8 world's edges: quantized_decomposed::quantize_per_tensor (float32 to
// int8 / uint8) and dequantize_per_tensor (back), the ops around everything PT2E leaves in float
// between int8 kernels (residual adds, pooling). ExecuTorch's portable kernels take ~0.2 us per
// 1,000 elements here; these run 16 per instruction, with the portable kernels' arithmetic:
//   quantize:   clamp(nearbyint(x * (1.0f / float(scale))) + zero_point, quant_min, quant_max)
//   dequantize: float(q - zero_point) * float(scale)
// so the bytes and floats are theirs exactly (quantize_convert_test). No ExecuTorch types.
#pragma once

#include <cstdint>

namespace et_cpu_plugin {
namespace onednn {

// The quantization of one tensor: per-tensor scale and zero point, the quantized range, and
// whether the quantized values are int8 (else uint8).
struct TensorQuantization {
  float scale = 1.0f;
  int32_t zero_point = 0;
  int32_t quant_min = -128;
  int32_t quant_max = 127;
  bool is_signed = true;
};

// out[i] = quantize(x[i]) into int8 or uint8 (`out` holds n bytes).
void quantize_per_tensor(const TensorQuantization& q, const float* x, int64_t n, void* out);

// out[i] = dequantize(in[i]) from int8 or uint8 (`in` holds n bytes).
void dequantize_per_tensor(const TensorQuantization& q, const void* in, int64_t n, float* out);

}  // namespace onednn
}  // namespace et_cpu_plugin
