// Our own squeeze-excite tail (MobileNetV3, EfficientNet) as one step: the global average of
// each channel of x, a 1x1 convolution (C -> S) with its activation, a 1x1 convolution (S -> C)
// and the gate activation (hardsigmoid, sigmoid), written as the [N, C] gate, and optionally the
// gate multiply with x (else the graph's broadcast multiply, channel_binary, does it). The
// runtime otherwise runs the pool, two oneDNN / row_gemm products and their post-ops as three
// kernels at a few microseconds of dispatch and reorder each (provider README, MobileNetV3).
//
// The pool reads x channels-last ([N][pixels][C], 16 channels a vector, the pixels streamed) or
// plain ([N][C][pixels]: row means); the two products are matrix-vector products per image with
// the weights packed once transposed ([C][S rounded up to 16], [S][C rounded up to 16]), one
// broadcast input value per FMA row, the accumulators in registers, the post-ops applied in
// registers before the only store (vector_epilogue.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/runtime/providers/optimized/common/weight_arena.h"
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_provider.h"

namespace et_cpu_plugin {
namespace onednn {

class WorkPool;
class WeightCache;

// A tail's two 1x1 convolutions packed transposed (see below): what the WeightCache shares
// between the graphs of one delegate (a dynamic-batch program's shape plans).
struct SqueezeExciteWeights {
  int64_t padded_channels = 0;
  int64_t padded_squeezed = 0;
  WeightVector<float> reduce;       // [channels][padded_squeezed]
  WeightVector<float> reduce_bias;  // [padded_squeezed]
  WeightVector<float> expand;       // [squeezed][padded_channels]
  WeightVector<float> expand_bias;  // [padded_channels]
  size_t bytes() const {
    return (reduce.size() + reduce_bias.size() + expand.size() + expand_bias.size()) *
           sizeof(float);
  }
};

// The packing of these constants that `cache` holds alive, or a new one remembered there
// (weight_cache.cc); packed anew when `cache` is null.
std::shared_ptr<const SqueezeExciteWeights> cached_squeeze_excite_weights(
    WeightCache* cache, int64_t channels, int64_t squeezed, const float* reduce,
    const float* reduce_bias, const float* expand, const float* expand_bias);
// The packing itself (biases may be null).
std::shared_ptr<const SqueezeExciteWeights> pack_squeeze_excite(int64_t channels,
                                                                int64_t squeezed,
                                                                const float* reduce,
                                                                const float* reduce_bias,
                                                                const float* expand,
                                                                const float* expand_bias);

// Whether the kernel runs these post-ops (after the first product: `act`, after the second:
// `gate`): AVX-512F, every post-op in registers and no add, and ET_CPU_OWN_SE is not "0" (on by
// default since its phases share the pool: it measured faster than the three kernels it
// replaces on MobileNetV3 and EfficientNet, provider README; read at bind).
bool squeeze_excite_supports(const PostOps& act, const PostOps& gate);

class SqueezeExcite {
 public:
  // `reduce` is torch's [squeezed, channels, 1, 1], `expand` [channels, squeezed, 1, 1], the
  // biases [squeezed] / [channels] or null; all are repacked, through `cache` when not null.
  // Throws ProviderError unless squeeze_excite_supports(act, gate) and the counts are positive.
  SqueezeExcite(int64_t channels, int64_t squeezed, const float* reduce, const float* reduce_bias,
                PostOps act, const float* expand, const float* expand_bias, PostOps gate,
                WeightCache* cache = nullptr);

  int64_t channels() const { return channels_; }
  size_t weights_bytes() const { return weights_->bytes(); }

  // The gates [batch][channels] of `batch` images x of `pixels` pixels each, channels-last
  // ([batch][pixels][channels]) or plain ([batch][channels][pixels]). With a `pool`, each phase
  // (the pool: channels-last over slices of pixels, plain over channels; each product over its
  // output vectors) that reads at least 256 KiB is shared out in one part per thread, the
  // images' parts as separate tasks (smaller ones: a pool job costs more than it saves,
  // measured on MobileNetV3's tails). The results do not depend on the split. ET_CPU_SE_SPLIT
  // (read when the kernel is made): N KiB instead of 256, "0" keeps every phase on the calling
  // thread, "all" splits every phase whatever its size, in two slices per thread (tests).
  //
  // With `scaled` (the graph's gate multiply taken as a fused step, ET_CPU_SE_FUSED_MUL), the
  // kernel then also writes x * gate there, in x's layout (`scaled_channels_last` the other:
  // a scalar transposing loop), per image and on the pool like the pool phase (rows of pixels
  // channels-last, of channels plain), right after the gate while x is still in cache.
  void run(const float* x, int64_t batch, int64_t pixels, bool channels_last, float* gate,
           WorkPool* pool = nullptr, float* scaled = nullptr,
           bool scaled_channels_last = true) const;

 private:
  // Bytes from which a phase is split (0: every phase, -1: none).
  static int64_t split_bytes_from_environment();

  int64_t channels_ = 0;
  int64_t squeezed_ = 0;
  int64_t padded_channels_ = 0;
  int64_t padded_squeezed_ = 0;
  std::shared_ptr<const SqueezeExciteWeights> weights_;
  PostOps act_;
  PostOps gate_;
  int64_t split_bytes_ = 0;
};

}  // namespace onednn
}  // namespace et_cpu_plugin
