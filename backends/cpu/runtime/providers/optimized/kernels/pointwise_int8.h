// Our own int8 1x1 convolution (stride 1, no padding, groups 1) on channels-last u8 / s8 pixels
// with per-output-channel s8 weight scales: the expand / project convolutions of a PT2E-quantized
// MobileNet (et_cpu_quant::conv2d.out). A [pixels, K] x [K, N] product on VNNI (vpdpbusd: 4 u8 x
// s8 products per int32 lane), s8 activations moved to u8 by flipping the sign bit (the zero point
// moves with them), the zero point's share folded into each channel's initial int32 sum, and the
// requantization in registers before the only store.
//
// Arithmetic (the depthwise_int8.h's, what the tests' numpy reference computes bit for bit):
//   acc[n] = sum over k of (x[k] - input_zero_point) * w[n][k]          (int32, exact)
//   y      = float(acc) * (input_scale * weight_scale[n]) + bias[n]      (float32, no FMA)
//   y      = clamp(y, output_min, output_max)
//   q      = clamp(rint(y * float(1 / output_scale)) + output_zero_point, quant_min, quant_max)
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/runtime/providers/optimized/kernels/depthwise_int8.h"

namespace et_cpu_plugin {
namespace onednn {

// Whether the kernel runs a product with `in_channels` -> `out_channels` here: AVX-512 BW / VL
// with VNNI, K a multiple of 4 up to 1024, zero points inside the dtype, and
// ET_CPU_OWN_POINTWISE_INT8 not "0" (read at each call). On by default for every shape it covers
// ("1" means the same): in one process, interleaved, it ran each of MobileNetV2 int8's 22 1x1
// layers (K 16-384, N 16-384, 196-12544 pixels) faster than oneDNN's brgconv_1x1 but the last
// projection (384 -> 96 at 14x14: 1.07x, within the noise), 0.8x of its 1x1 time in all.
bool pointwise_int8_supports(int64_t in_channels, int64_t out_channels,
                             const DepthwiseInt8Quant& quant);

class PointwiseInt8 {
 public:
  // Pixels a slice of the work should start at a multiple of (the kernel's pixel blocks are 6,
  // 8 or 12 wide, by the width of the output channel group).
  static constexpr int64_t kPixelBlock = 24;

  // `weight` is torch's s8 [N, K, 1, 1], `weight_scales` [N], `bias` [N] float or null; all are
  // copied (repacked). Throws ProviderError unless pointwise_int8_supports.
  PointwiseInt8(int64_t in_channels, int64_t out_channels, const int8_t* weight,
                const float* weight_scales, const float* bias, const DepthwiseInt8Quant& quant);

  // Pixels [begin, end): `input` is [pixels][K] bytes, `output` [pixels][N] bytes.
  void run(const uint8_t* input, uint8_t* output, int64_t begin, int64_t end) const;

 private:
  int64_t k_ = 0, n_ = 0;
  int64_t vectors_ = 0;  // 16-channel output vectors (the last may be partial)
  DepthwiseInt8Quant quant_;
  // [vector][K / 4][16 lanes][4 bytes]: the weights of 16 output channels for 4 input channels.
  std::vector<int8_t> weights_;
  std::vector<int32_t> initial_;  // [vectors * 16]: -(u8 zero point) * sum over k of w
  std::vector<float> scales_;     // [vectors * 16]: input_scale * weight_scale
  std::vector<float> bias_;       // [vectors * 16]
  uint8_t flip_ = 0;              // 0x80 for s8 activations (to u8), else 0
  float inverse_output_scale_ = 1.f;
  float low_ = 0.f, high_ = 0.f;  // the clamps folded onto y / output_scale - zero point
};

}  // namespace onednn
}  // namespace et_cpu_plugin
