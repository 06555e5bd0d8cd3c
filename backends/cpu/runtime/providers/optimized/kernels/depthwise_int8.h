// Our own int8 depthwise convolution (groups == in channels == out channels) on channels-last
// u8 / s8 rows with per-channel s8 weight scales: the depthwise stage of a PT2E-quantized
// MobileNet (et_cpu_quant::conv2d.out, backends/cpu/quantized_ops.py). oneDNN 3.2 ran these at
// a third of MobileNetV2 int8's time (issue 46's profile); here 32 channels are widened to int16
// at once and each tap is two VNNI dot products (vpdpwssd) against weights that keep every other
// int16 lane zero, one for the even channels and one for the odd ones, so channels never mix and
// no shuffle is needed until the store. Several output pixels along a row share each input
// vector loaded; the requantization (scales, bias, clamp, rounding, zero point) runs in
// registers before the only store.
//
// Arithmetic (what the tests' numpy reference computes, bit for bit):
//   acc[c] = sum over taps of (x - input_zero_point) * w          (int32, exact; padding is 0)
//   y      = float(acc) * (input_scale * weight_scale[c]) + bias[c]        (float32, no FMA)
//   y      = clamp(y, output_min, output_max)
//   q      = clamp(rint(y * float(1 / output_scale)) + output_zero_point, quant_min, quant_max)
// with round half to even: the reference semantics of quantized_ops.py on the exact integer sum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/cpu/runtime/providers/optimized/kernels/depthwise_conv.h"

namespace et_cpu_plugin {
namespace onednn {

// The op's quantization scalars (quantized_ops.py's conv2d).
struct DepthwiseInt8Quant {
  float input_scale = 1.f;
  int32_t input_zero_point = 0;
  float output_scale = 1.f;
  int32_t output_zero_point = 0;
  int32_t quant_min = 0;
  int32_t quant_max = 255;
  double output_min = 0.0;  // +-inf: no clamp
  double output_max = 0.0;
  bool is_signed = false;  // s8 activations (else u8)
};

// What the int8 convolution kernels (this one, pointwise_int8.h) share: whether this CPU has
// AVX-512 BW / VL with VNNI; whether the zero points and the quant range lie inside the dtype
// with positive scales; and the requantization constants, float(1 / output_scale) and the clamps
// folded onto y / output_scale with the quant range minus the output zero point (for a
// non-decreasing rounding f, f(max(y, a)) = max(f(y), f(a)), and the range bounds are integers
// rint keeps, so the folded clamp gives the same bytes).
bool cpu_has_avx512_vnni();
bool int8_quant_valid(const DepthwiseInt8Quant& quant);
struct FoldedRequant {
  float inverse = 1.f;
  float low = 0.f;
  float high = 0.f;
};
FoldedRequant fold_requant(const DepthwiseInt8Quant& quant);

// Whether the kernel runs `shape` here: AVX-512 BW/VL with VNNI, square 3x3 or 5x5 kernels,
// column stride 1 or 2 (any row stride), positive extents, a zero point inside the dtype and
// ET_CPU_OWN_DEPTHWISE_INT8 not "0" (read at each call: "0" keeps oneDNN's kernels).
bool depthwise_int8_supports(const DepthwiseShape& shape, const DepthwiseInt8Quant& quant);

class DepthwiseInt8 {
 public:
  // `weight` is torch's s8 [C, 1, K, K], `weight_scales` [C], `bias` [C] float or null; all are
  // copied (repacked). Throws ProviderError unless depthwise_int8_supports.
  DepthwiseInt8(const DepthwiseShape& shape, const int8_t* weight, const float* weight_scales,
                const float* bias, const DepthwiseInt8Quant& quant);

  const DepthwiseShape& shape() const { return shape_; }

  // Output rows [row_begin, row_end) of one image: `input` is the whole image channels-last
  // ([in_h][in_w][C] bytes), `output` the whole output image ([out_h][out_w][C]).
  void run_rows(const uint8_t* input, uint8_t* output, int64_t row_begin, int64_t row_end) const;

 private:
  DepthwiseShape shape_;
  DepthwiseInt8Quant quant_;
  int64_t groups_ = 0;  // 32-channel groups
  // Per group: [K*K taps][even, odd][32 int16], the other lane of each pair zero.
  std::vector<int16_t> weights_;
  // Per group: [even, odd][16] of input_scale * weight_scale and of the bias.
  std::vector<float> scales_;
  std::vector<float> bias_;
  std::vector<uint8_t> zero_row_;  // [in_w][C] bytes of the input zero point: padding rows
  float inverse_output_scale_ = 1.f;
  float low_ = 0.f, high_ = 0.f;  // the clamps folded onto y / output_scale - zero point
};

}  // namespace onednn
}  // namespace et_cpu_plugin
