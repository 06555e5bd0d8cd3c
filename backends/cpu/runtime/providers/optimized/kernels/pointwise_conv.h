// Our own AVX-512 float32 1x1 convolution (stride 1, no padding, groups 1) on channels-last
// pixels with few input channels: the expand stage of MobileNet / EfficientNet inverted residual
// blocks (16 -> 96, 24 -> 144, 40 -> 240), run by BlockPlan on its bands of rows and channel
// slices. With K <= 64 oneDNN 3.2's brgconv_1x1 on a band of rows reaches ~44 GFLOP/s of thread
// time at K = 16, and a SiLU then needs a second pass over the expanded rows (a vector tail);
// here a [pixels, K] x [K, N] product keeps a few pixels x up to 4 vectors of 16 output channels
// (5 when a last group of one vector joins the full group before it) in registers over all of
// K, and adds the bias and applies the block's activation (clamp / ReLU, hardswish, SiLU or any
// in-register post-op, vector_epilogue.h) before the only store.
//
// Weights are RowGemm's packing (row_gemm.h: groups of 64 columns, [K][64] each, zero-padded to
// whole vectors), shared through the WeightCache.
//
// run_stream is the other loop order, for the weight-heavy 1x1 convolutions of deep CNN stages
// (ResNet-50's 256 -> 1024 and 1024 -> 256 at 7x7: 1 MiB of weights, 49 pixels), whose weights
// come from memory at every call: each column group's panel is walked once, every pixel computed
// from it while it sits in L2, the next panel prefetched meanwhile, and a residual add applied
// in registers too.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "backends/cpu/runtime/providers/optimized/kernels/row_gemm.h"
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_provider.h"

namespace et_cpu_plugin {
namespace onednn {

// Whether the kernel runs a K -> N 1x1 convolution with these post-ops here: AVX-512F, positive
// K and N, every post-op in registers and no residual add, ET_CPU_OWN_EXPAND not "0" (read at
// each call, so it applies to the plans prepared after it is set).
bool pointwise_conv_supports(int64_t in_channels, int64_t out_channels, const PostOps& post_ops);

// Whether BlockPlan's expand stage runs on this kernel rather than oneDNN's brgconv_1x1:
// pointwise_conv_supports, and ET_CPU_OWN_EXPAND=all (any K) or, unset, K <= kOwnExpandMaxK
// (where it measured faster; provider README).
constexpr int64_t kOwnExpandMaxK = 64;
bool own_expand_wanted(int64_t in_channels, int64_t out_channels, const PostOps& post_ops);

// Whether run_stream runs a K -> N 1x1 convolution with these post-ops here: AVX-512F, positive
// K and N, every post-op in registers (a residual add too), ET_CPU_STREAM_1X1 not "0" (read at
// each call).
bool pointwise_stream_supports(int64_t in_channels, int64_t out_channels,
                               const PostOps& post_ops);

// Column groups of RowGemm's packing (64 output channels each): run_stream's unit of work.
constexpr int64_t kPointwiseGroupColumns = 64;
int64_t pointwise_groups(int64_t out_channels);

class PointwiseConv {
 public:
  // `packed`: the weights [N, K] and bias packed by RowGemm::pack (cached_row_gemm_weights).
  // Throws ProviderError unless pointwise_conv_supports(K, N, post_ops) or, for run_stream only,
  // pointwise_stream_supports(K, N, post_ops).
  PointwiseConv(std::shared_ptr<const RowGemm::Packed> packed, PostOps post_ops);

  int64_t in_channels() const { return packed_->k; }
  int64_t out_channels() const { return packed_->n; }
  size_t weights_bytes() const { return packed_->bytes(); }
  const RowGemm::Packed& packed() const { return *packed_; }

  // y[p, c] = post_ops(sum_k x[p, k] * w[c, k] + bias[c]) for `pixels` pixels, x [pixels][K]
  // and y [pixels][N] dense (channels-last rows); on the calling thread.
  // Throws ProviderError when the post-ops hold an add (run_stream takes those).
  void run(const float* x, int64_t pixels, float* y) const;

  // The same for the output channels of column groups [first, last) (pointwise_groups), group by
  // group: all pixels from one weight panel before the next. `residual` ([pixels][N], may be
  // `y`) is required iff the post-ops hold an add. `weights`: floats in packed().stream()'s
  // layout (on a cache line: a squeeze-excite gate folded in per call), or null for the packed
  // ones.
  void run_stream(const float* x, int64_t pixels, float* y, const float* residual,
                  int64_t first, int64_t last, const float* weights = nullptr) const;

 private:
  std::shared_ptr<const RowGemm::Packed> packed_;
  PostOps post_ops_;
  bool has_add_;
  // run_stream inlines hardswish and SiLU too (not only ReLU / clamp): stream_tile_fit().
  bool inline_activations_;
  // run joins a one-vector last group to the full group before it (5-vector tiles):
  // ET_CPU_POINTWISE_WIDE_TAIL unset or not "0" (read at construction).
  bool wide_tail_;
};

// Pixels a by-pixels slice of run_stream starts on a multiple of (the least common multiple of
// the tiles' 6, 8 and 12 pixels), so only the last slice runs leftover pixels one at a time.
constexpr int64_t kPointwiseTileMultiple = 24;
// Pixels of run_stream's register tile for a column group of `vectors` 16-column vectors:
// vectors x pixels <= 24 accumulators.
constexpr int64_t pointwise_tile_pixels(int64_t vectors) {
  return vectors == 4 ? 6 : vectors == 3 ? 8 : 12;
}
// 16-float vectors in column group `g` (pointwise_groups) of N = `out_channels` output channels:
// its columns rounded up to whole vectors (4, fewer in a last group of under 64 columns).
constexpr int64_t pointwise_group_vectors(int64_t out_channels, int64_t g) {
  return (std::min(kPointwiseGroupColumns, out_channels - g * kPointwiseGroupColumns) + 15) / 16;
}

// ET_CPU_STREAM_TILE_FIT not "0" (read where a plan or kernel is made): run_stream inlines
// hardswish and SiLU in its epilogue, and by-pixels slices start on kPointwiseTileMultiple.
// "0": only ReLU / clamp inlined (other activations through epilogue16's per-vector dispatch)
// and slices cut at any pixel, as before (for A/B).
bool stream_tile_fit();

}  // namespace onednn
}  // namespace et_cpu_plugin
