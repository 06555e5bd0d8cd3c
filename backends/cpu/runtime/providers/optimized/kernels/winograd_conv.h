// Our own AVX-512 float32 Winograd F(2x2, 3x3) convolution: dense 3x3, stride 1, padding 1,
// channels-last in and out (the stride-1 3x3s of ResNets and UNets, for which neither oneDNN 3.2
// on x64 nor ONNX Runtime's MLAS has a float32 Winograd). Each 2x2 block of output pixels (a
// tile) reads a 4x4 input patch; with the weights transformed once at prepare (U = G g G^T, 4x4
// per channel pair) the tile costs 16 multiply-adds per channel pair instead of the direct 36:
// per call the input patches are transformed (V = B^T d B), the 16 positions are 16 independent
// products over the input channels (M = V U, tiles x output channels), and each
// tile's M is transformed back to its 2x2 outputs (A^T M A), where the bias and the post-ops are
// added in registers before the one store. The result stays within ~1e-5 relative of the direct
// convolution in float32 (the transforms only add and halve).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/runtime/providers/optimized/common/weight_arena.h"
#include "backends/cpu/runtime/providers/optimized/kernels/conv_window.h"
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_provider.h"

namespace et_cpu_plugin {
namespace onednn {

// One image's convolution (conv_window.h).
using WinogradShape = DenseConvShape;

// Whether the kernel runs this shape with these post-ops here: AVX-512F, a 3x3 kernel at stride
// 1 with padding 1 (output extents equal to the input's), any count of input channels, output
// channels a multiple of 16, every post-op in registers (a residual add too), and ET_CPU_WINOGRAD
// not "0" (read at each call, so it applies to plans prepared after it). The caller checks
// dilation 1 and groups 1.
bool winograd_conv_supports(const WinogradShape& shape, const PostOps& post_ops);

// Whether ConvPlan runs `shape` on this kernel rather than oneDNN's: winograd_conv_supports, and
// ET_CPU_WINOGRAD=all (every shape it covers) or, unset, the shapes where it measured faster
// (provider README, "Winograd F(2x2, 3x3)").
bool own_winograd_wanted(const WinogradShape& shape, const PostOps& post_ops);

class WinogradConv {
 public:
  // Tiles in one register block of the products (and in a tile group, the unit a run shares
  // out by tiles).
  static constexpr int64_t kGroupTiles = 14;

  // `weight` is torch's [out_channels, in_channels, 3, 3], `bias` [out_channels] or null; both
  // are copied (the weights transformed and stored per block of 32 output channels as
  // [position][in_channels rounded up to 16][32]). Throws ProviderError unless
  // winograd_conv_supports(shape, post_ops).
  WinogradConv(const WinogradShape& shape, const float* weight, const float* bias,
               PostOps post_ops);

  const WinogradShape& shape() const { return shape_; }
  size_t weights_bytes() const { return (weights_.size() + bias_.size()) * sizeof(float); }
  // Output-channel blocks of 32 (the last one 16 wide when out_channels is an odd multiple of 16).
  int64_t blocks() const { return (shape_.out_channels + 31) / 32; }
  // Tiles (2x2 output pixels; at an odd output extent the last of a row or column is partial)
  // over `images` images.
  int64_t tiles(int64_t images) const;
  // Tile groups of kGroupTiles tiles over `images` images (the last one maybe partial).
  int64_t groups(int64_t images) const;
  // Floats of the transformed input V of `images` images: 16 positions x groups(images) x
  // kGroupTiles tiles x in_channels rounded up to 16 (the scratch holds it a band at a time).
  int64_t transformed_input_floats(int64_t images) const;
  // Transformed weights U that hold weights: 16 positions x in_channels x out_channels (the
  // stored U, weights_bytes, also has zero rows up to a multiple of 16 input channels).
  int64_t transformed_weight_floats() const;

  // Tile groups [group_begin, group_end) x output-channel blocks [block_begin, block_end) of
  // `images` channels-last images: `input` [images][in_h][in_w][in_channels], `output` (and
  // `residual`, read by a residual add post-op: null without one)
  // [images][out_h][out_w][out_channels]; only the tiles' pixels and the blocks' channels are
  // written. On the calling thread, with a scratch of its own (thread_local).
  void run(const float* input, float* output, const float* residual, int64_t images,
           int64_t group_begin, int64_t group_end, int64_t block_begin, int64_t block_end) const;

 private:
  WinogradShape shape_;
  int64_t padded_in_ = 0;    // in_channels rounded up to 16 (the transformed input's and U's rows)
  int64_t band_groups_ = 1;  // tile groups per band (their V and M fit the L2 budget)
  WeightVector<float> weights_;  // [block][16 positions][padded_in_][block width]
  WeightVector<float> bias_;     // [out_channels] (zeros without a bias)
  PostOps post_ops_;
};

}  // namespace onednn
}  // namespace et_cpu_plugin
