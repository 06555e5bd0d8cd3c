// Our own AVX-512 "stem" convolution: a dense 2D convolution (groups 1, dilation 1) from 1 to 4
// input channels (the image: the first layer of MobileNet / EfficientNet, 3 -> 16 or 32 channels,
// 3x3 stride 2) to a channels-last output. oneDNN 3.2 has no brgconv for so few input channels
// and runs these on its jit "first convolution" kernel; here 16 output channels are one vector,
// a block of output pixels along a row is accumulated in registers (each weight vector loaded
// once per block, each input value one broadcast FMA operand), and bias and the post-ops are
// applied in registers before the only store (vector_epilogue.h).
//
// The input is plain ([C][H][W]) or channels-last ([H][W][C]) per image; the kernel computes a
// range of output rows of one image (ConvLikePlan shares rows and images out on the pool,
// conv_common.cc). Kernels of 5x5 and more (ResNet's 7x7) first copy each band of input rows
// channels-last with the padding columns in place, so that every column runs the register
// block (stem_conv.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/cpu/runtime/providers/optimized/common/weight_arena.h"
#include "backends/cpu/runtime/providers/optimized/kernels/conv_window.h"
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_provider.h"

namespace et_cpu_plugin {
namespace onednn {

// One image's convolution: its window (conv_window.h) from `in_channels` to `out_channels`.
struct StemShape : ConvWindow {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  bool input_channels_last = true;  // false: plain [C][H][W]
};

// Whether the kernel runs this shape with these post-ops here: AVX-512F, 1 to 4 input channels,
// kernels up to 7x7, positive extents, every post-op in registers and no residual add, and
// ET_CPU_OWN_STEM is not "0" ("0" keeps oneDNN's kernel, for measuring; read at each call, so it
// applies to plans prepared after it).
bool stem_supports(const StemShape& shape, const PostOps& post_ops);

// Whether ConvPlan runs `shape` on this kernel rather than oneDNN's: stem_supports, and
// ET_CPU_OWN_STEM=all (every shape it covers) or, with the variable unset, the class where it
// measured at least as fast as oneDNN 3.2 here (3x3 stride 2, up to 32 output channels; provider
// README, tools/bench/depthwise_bench.py --only stem).
bool own_stem_wanted(const StemShape& shape, const PostOps& post_ops);

class StemConv {
 public:
  // `weight` is torch's [out_channels, in_channels, kernel_h, kernel_w], `bias` [out_channels]
  // or null; both are copied (repacked to [kernel_h][kernel_w][in_channels][out rounded up to
  // 16]). Throws ProviderError unless stem_supports(shape, post_ops).
  StemConv(const StemShape& shape, const float* weight, const float* bias, PostOps post_ops);

  const StemShape& shape() const { return shape_; }
  size_t weights_bytes() const { return (weights_.size() + bias_.size()) * sizeof(float); }

  // Output rows [row_begin, row_end) of one image, channels-last ([rows][out_w][out_channels]),
  // written from `output` on (output row row_begin); `input` is the whole image in the shape's
  // input layout.
  void run_rows(const float* input, float* output, int64_t row_begin, int64_t row_end) const;

 private:
  StemShape shape_;
  int64_t padded_out_ = 0;
  WeightVector<float> weights_;  // [kernel_h][kernel_w][in_channels][padded_out_]
  WeightVector<float> bias_;     // [padded_out_] (zeros without a bias)
  PostOps post_ops_;
};

}  // namespace onednn
}  // namespace et_cpu_plugin
