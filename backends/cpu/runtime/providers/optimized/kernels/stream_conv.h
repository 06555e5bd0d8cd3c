// Our own AVX-512 float32 3x3 convolution for weight-heavy layers (the 3x3s of ResNet-50's
// stages 3 and 4: 128@14, 256@7, and their stride-2 first blocks), channels-last in and out.
// There the weights (0.6-2.4 MB) outweigh the activations and come from L3 at every call;
// oneDNN 3.2's brgconv computes one output row per weight pass, so its first row reads them from
// L3 with one row's reuse and waits on the stream (cold 3x3 256@7: ~260 us against ~190 warm).
// Here a thread owns a range of output-channel blocks and walks each block's weights once, in
// chunks of one kernel tap by up to kChunk input channels; every chunk is used for all output
// rows of the batch while it sits in L1/L2 (partial sums kept in the output, which the first
// pass fills with the bias and the last finishes with the post-ops), so the stream from L3 runs
// under the arithmetic. A row's 7 pixels (or 14 at a time) x 2 vectors of output channels are
// the register block, each input value one broadcast FMA operand; the taps outside the input
// (the padding) are skipped, no staging.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/cpu/runtime/providers/optimized/common/weight_arena.h"
#include "backends/cpu/runtime/providers/optimized/kernels/conv_window.h"
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_provider.h"

namespace et_cpu_plugin {
namespace onednn {

// One image's convolution (conv_window.h).
using StreamConvShape = DenseConvShape;

// Whether the kernel runs this shape with these post-ops here: AVX-512F, a 3x3 kernel with
// padding 1 at stride 1 or 2 (both dims alike), output rows of 7 or a multiple of 14 pixels,
// output channels a multiple of the block's 32, every post-op in registers and no residual add,
// and ET_CPU_OWN_STREAM_CONV not "0" (read at each call, so it applies to plans prepared after
// it).
bool stream_conv_supports(const StreamConvShape& shape, const PostOps& post_ops);

// Whether ConvPlan runs `shape` on this kernel rather than oneDNN's: stream_conv_supports, and
// ET_CPU_OWN_STREAM_CONV=all (every shape it covers) or, unset, output rows of 7 pixels with
// weights larger than one image's input and output (ResNet-style stage 4, where it measured
// faster; provider README).
bool own_stream_conv_wanted(const StreamConvShape& shape, const PostOps& post_ops);

class StreamConv {
 public:
  // `weight` is torch's [out_channels, in_channels, 3, 3], `bias` [out_channels] or null; both
  // are copied (weights repacked per block of 32 output channels to [tap][in_channels][32]).
  // Throws ProviderError unless stream_conv_supports(shape, post_ops).
  StreamConv(const StreamConvShape& shape, const float* weight, const float* bias,
             PostOps post_ops);

  const StreamConvShape& shape() const { return shape_; }
  size_t weights_bytes() const { return (weights_.size() + bias_.size()) * sizeof(float); }
  // Output-channel blocks (the units a run shares out).
  int64_t blocks() const { return shape_.out_channels / block_channels_; }

  // Output-channel blocks [block_begin, block_end) of `images` channels-last images: `input`
  // [images][in_h][in_w][in_channels], `output` [images][out_h][out_w][out_channels] (only the
  // blocks' channels are written); on the calling thread.
  void run_blocks(const float* input, float* output, int64_t images, int64_t block_begin,
                  int64_t block_end) const;

 private:
  StreamConvShape shape_;
  int64_t block_channels_ = 0;  // 32
  WeightVector<float> weights_;  // [block][tap][in_channels][block_channels_]
  WeightVector<float> bias_;     // [out_channels] (zeros without a bias)
  PostOps post_ops_;
};

}  // namespace onednn
}  // namespace et_cpu_plugin
