// Our own AVX-512 depthwise convolution (groups == in channels == out channels, one filter per
// channel) on channels-last float32 rows: the depthwise stage of MobileNet / EfficientNet blocks.
// oneDNN 3.2 runs these on its brdgmm kernels at a small fraction of its GEMM rate (EfficientNet:
// a third of the model's time); here 16 channels are one vector, several output pixels along a
// row are accumulated in registers so each weight vector loaded serves all of them, and bias and
// the post-ops are applied in registers before the only store (vector_epilogue.h).
//
// The kernel computes a range of output rows of one image, from whatever input rows the caller
// holds (rows outside them read as zero padding): a standalone convolution shares rows and images
// out on the pool (ConvLikePlan, conv_plan.cc), a BlockPlan step runs it on its band of expanded
// rows (block_plan.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/cpu/runtime/providers/optimized/common/weight_arena.h"
#include "backends/cpu/runtime/providers/optimized/kernels/conv_window.h"
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_provider.h"

namespace et_cpu_plugin {
namespace onednn {

// One image's depthwise convolution: its window (conv_window.h) over `channels` channels.
struct DepthwiseShape : ConvWindow {
  int64_t channels = 0;
};

// Whether the kernel runs this shape with these post-ops here: AVX-512F, positive extents, every
// post-op in registers and no residual add, and ET_CPU_OWN_DEPTHWISE is not "0" ("0" keeps
// oneDNN's kernels, for measuring; read at each call, so it applies to plans prepared after it).
bool depthwise_supports(const DepthwiseShape& shape, const PostOps& post_ops);

// Whether the plans (a depthwise ConvLikePlan, BlockPlan's depthwise stage) run `shape` on this
// kernel rather than oneDNN's: depthwise_supports, and ET_CPU_OWN_DEPTHWISE=all (every shape it
// covers) or, with the variable unset, a shape of a class where it measured faster than
// oneDNN 3.2's brdgmm here: square 3x3 and 5x5 kernels at stride 1 or 2 (provider README).
bool own_depthwise_wanted(const DepthwiseShape& shape, const PostOps& post_ops);

class DepthwiseConv {
 public:
  // `weight` is torch's [C, 1, kernel_h, kernel_w], `bias` [C] or null; both are copied
  // (repacked to [kernel_h][kernel_w][C rounded up to 16]). Throws ProviderError unless
  // depthwise_supports(shape, post_ops).
  DepthwiseConv(const DepthwiseShape& shape, const float* weight, const float* bias,
                PostOps post_ops);

  const DepthwiseShape& shape() const { return shape_; }
  // The repacked weights and bias, and the zero row padding reads.
  size_t weights_bytes() const {
    return (weights_.size() + bias_.size() + zero_row_.size()) * sizeof(float);
  }

  // Output rows [row_begin, row_end) of one image, channels-last ([rows][out_w][C]), written
  // from `output` on (output row row_begin). `input` holds the image's input rows
  // [input_first, input_first + input_rows), channels-last ([rows][in_w][C]); every other row
  // reads as zero (padding, or rows the caller knows only padding reaches).
  void run_rows(const float* input, int64_t input_first, int64_t input_rows, float* output,
                int64_t row_begin, int64_t row_end) const;
  // The same with the output pixels `output_pixel_stride` floats apart (>= C; ProviderError
  // otherwise): the C channels written into a wider channels-last buffer, e.g. BlockPlan's
  // channel slice straight into the block's output ([rows][out_w][output_pixel_stride]).
  void run_rows(const float* input, int64_t input_first, int64_t input_rows, float* output,
                int64_t row_begin, int64_t row_end, int64_t output_pixel_stride) const;

 private:
  // `count` register blocks of `pixels` output columns each (near-equal, at most 8) from `ox`
  // on; `checked` when a window of the block crosses the left or right border.
  struct Block {
    int64_t ox = 0;
    int64_t count = 1;
    int pixels = 1;
    bool checked = false;
  };

  DepthwiseShape shape_;
  int64_t padded_channels_ = 0;
  std::vector<Block> blocks_;
  WeightVector<float> weights_;  // [kernel_h][kernel_w][padded_channels_]
  WeightVector<float> bias_;     // [padded_channels_] (zeros without a bias)
  WeightVector<float> zero_row_;  // [in_w][C] zeros: what rows outside the held input read
  PostOps post_ops_;
  // A SiLU epilogue by silu16_fast (~17 instructions per vector) instead of silu16 (~27, a
  // 512-bit division): ET_CPU_DEPTHWISE_FAST_SILU=0 (read at construction) keeps silu16.
  bool fast_silu_ = true;
};

}  // namespace onednn
}  // namespace et_cpu_plugin
