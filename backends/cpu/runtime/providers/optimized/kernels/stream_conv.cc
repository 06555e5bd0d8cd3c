// StreamConv (see stream_conv.h): repacking, the register-blocked tap kernel, the walk over a
// block's weights.
//
// For each output-channel block the weights are walked in order, one chunk (one tap, up to
// kChunk input channels: [kc][16 V] floats) at a time; each chunk is applied to every output row
// of the batch: per row, blocks of P pixels (the row's width, or 14 at a time) load their P x V
// partial sums from the output, add the chunk's products and store them back. A row whose tap
// falls outside the input (the top / bottom padding) skips the chunk; the first / last pixel of
// a row whose tap falls outside (the left / right padding: with padding 1 and a 3x3 kernel only
// those) skip it by a variant of the block kernel without that pixel.
#include "backends/cpu/runtime/providers/optimized/kernels/stream_conv.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_epilogue.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {
namespace {

constexpr int64_t kLanes = 16;  // floats per AVX-512 vector
constexpr int64_t kTaps = 9;    // 3x3
// Input channels per weight chunk: 64 x 2 vectors, 8 KB, L1-resident beside the partial sums
// while every row uses it.
constexpr int64_t kChunk = 64;

// Output-channel vectors per block: 2 (7 x 4 would need 33 registers with the broadcast).
constexpr int kVectors = 2;
constexpr int64_t kBlockChannels = kVectors * kLanes;
// Pixels per register block: the row's 7, else 14 (28 accumulators, the 2 weight vectors and
// the broadcast in the 32 registers).
constexpr int pixels_of(int64_t out_w) { return out_w == 7 ? 7 : 14; }

// One block of P pixels of one output row for one weight chunk.
struct TapArgs {
  const float* x;    // the first pixel's input value the block reads (the first it does not skip)
  int64_t step;      // floats between neighbouring pixels' input (stride x in_channels)
  const float* w;    // the chunk's weights, [kc][16 V]
  int64_t kc;        // input channels in the chunk
  float* out;        // the block's partial sums: pixel 0, its first channel
  int64_t out_step;  // floats between neighbouring output pixels (out_channels)
};

// Adds the chunk's products to pixels [kLo, kHi) of the block (the others' taps are padding).
template <int P, int V, int kLo, int kHi>
ET_AVX512 __attribute__((noinline)) void tap_block(const TapArgs& a) {
  __m512 acc[P][V];
#pragma GCC unroll 16
  for (int p = kLo; p < kHi; ++p) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[p][v] = _mm512_loadu_ps(a.out + p * a.out_step + v * kLanes);
  }
  const float* x = a.x;
  const float* w = a.w;
  const int64_t step = a.step;
  for (int64_t ci = 0; ci < a.kc; ++ci, ++x, w += V * kLanes) {
    __m512 wv[V];
    load_pinned<V>(w, wv);
#pragma GCC unroll 16
    for (int p = kLo; p < kHi; ++p) {
      const float* xp = x + (p - kLo) * step;
      const __m512 xb = _mm512_set1_ps(*xp);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[p][v] = _mm512_fmadd_ps(xb, wv[v], acc[p][v]);
    }
  }
#pragma GCC unroll 16
  for (int p = kLo; p < kHi; ++p) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(a.out + p * a.out_step + v * kLanes, acc[p][v]);
  }
}

using TapKernel = void (*)(const TapArgs&);

// [skip first][skip last] for P pixels.
template <int P>
struct TapKernels {
  static constexpr int V = kVectors;
  TapKernel at[2][2] = {{tap_block<P, V, 0, P>, tap_block<P, V, 0, P - 1>},
                        {tap_block<P, V, 1, P>, tap_block<P, V, 1, P - 1>}};
};

// out[pixel][0, 16 V) = post_ops(out[...]) for `pixels` pixels `step` floats apart.
template <FusedEpilogue E>
ET_AVX512 void finish_pixels(const PostOps& post_ops, float lo_value, float hi_value, float* out,
                             int64_t pixels, int64_t step, int vectors) {
  const __m512 lo = _mm512_set1_ps(lo_value);
  const __m512 hi = _mm512_set1_ps(hi_value);
  for (int64_t p = 0; p < pixels; ++p, out += step) {
    for (int v = 0; v < vectors; ++v) {
      float* to = out + v * kLanes;
      _mm512_storeu_ps(to, fused_epilogue<E>(post_ops, _mm512_loadu_ps(to), lo, hi));
    }
  }
}

ET_AVX512 void fill_bias(const float* bias, float* out, int64_t pixels, int64_t step,
                         int vectors) {
  for (int64_t p = 0; p < pixels; ++p, out += step) {
    for (int v = 0; v < vectors; ++v) {
      _mm512_storeu_ps(out + v * kLanes, _mm512_loadu_ps(bias + v * kLanes));
    }
  }
}

}  // namespace

bool stream_conv_supports(const StreamConvShape& s, const PostOps& post_ops) {
  if (!kernel_switched_on("ET_CPU_OWN_STREAM_CONV") || !cpu_has_avx512()) return false;
  if (s.kernel_h != 3 || s.kernel_w != 3 || s.pad_top != 1 || s.pad_left != 1 ||
      s.stride_h != s.stride_w || (s.stride_h != 1 && s.stride_h != 2) || s.in_channels < 1 ||
      s.out_channels < 1 || s.in_h < 1 || s.in_w < 1 || s.out_h < 1 ||
      (s.out_w != 7 && (s.out_w < 14 || s.out_w % 14 != 0))) {
    return false;
  }
  // torch's output extents for padding 1 on both sides (the last pixel's taps reach at most one
  // past the input, which the kernel skips as padding).
  if (s.out_h != (s.in_h - 1) / s.stride_h + 1 || s.out_w != (s.in_w - 1) / s.stride_w + 1) {
    return false;
  }
  if (s.out_channels % kBlockChannels != 0) return false;
  return post_ops_in_registers_without_add(post_ops);
}

bool own_stream_conv_wanted(const StreamConvShape& s, const PostOps& post_ops) {
  if (!stream_conv_supports(s, post_ops)) return false;
  if (switch_reach("ET_CPU_OWN_STREAM_CONV") == SwitchReach::kEverywhere) return true;
  // Unset: output rows of 7 pixels with weights outweighing one image's activations (the
  // 3x3s of ResNet-style stage 4 and their stride-2 first blocks), where oneDNN's brgconv
  // reuses each weight pass for 7 pixels only. Cold weights, 2 threads, us ours / oneDNN's:
  // 256@7 246 / 278, 256@14 s2 272 / 299, 512@7 866 / 988, 256->512@14 s2 473 / 518; at 14
  // pixels a row brgconv stayed ahead (128@14 214 / 198, 256@14 786 / 728: provider README).
  const int64_t weights = kTaps * s.in_channels * s.out_channels;
  const int64_t activations = s.in_h * s.in_w * s.in_channels + s.out_h * s.out_w * s.out_channels;
  return s.out_w == 7 && weights > activations;
}

StreamConv::StreamConv(const StreamConvShape& shape, const float* weight, const float* bias,
                       PostOps post_ops)
    : shape_(shape), post_ops_(std::move(post_ops)) {
  if (!stream_conv_supports(shape_, post_ops_)) {
    throw ProviderError("stream conv: this shape or these post-ops are not supported here");
  }
  if (weight == nullptr) throw ProviderError("stream conv: weight is null");
  const int64_t oc = shape_.out_channels;
  const int64_t ic = shape_.in_channels;
  block_channels_ = kBlockChannels;
  weights_.assign(static_cast<size_t>(kTaps * ic * oc), 0.0f);
  for (int64_t o = 0; o < oc; ++o) {
    const int64_t block = o / block_channels_;
    const int64_t lane = o % block_channels_;
    for (int64_t ci = 0; ci < ic; ++ci) {
      for (int64_t tap = 0; tap < kTaps; ++tap) {
        weights_[static_cast<size_t>(((block * kTaps + tap) * ic + ci) * block_channels_ +
                                     lane)] = weight[(o * ic + ci) * kTaps + tap];
      }
    }
  }
  bias_.assign(static_cast<size_t>(oc), 0.0f);
  if (bias) std::copy(bias, bias + oc, bias_.begin());
}

void StreamConv::run_blocks(const float* input, float* output, int64_t images,
                            int64_t block_begin, int64_t block_end) const {
  const StreamConvShape& s = shape_;
  const int64_t ic = s.in_channels;
  const int64_t oc = s.out_channels;
  const int64_t bc = block_channels_;
  const int vectors = static_cast<int>(bc / kLanes);
  const int pixels = pixels_of(s.out_w);
  const int64_t in_image = s.in_h * s.in_w * ic;
  const int64_t out_pixels = s.out_h * s.out_w;
  const int64_t all_pixels = images * out_pixels;
  static const TapKernels<7> kernels7;
  static const TapKernels<14> kernels14;
  const auto& kernels = pixels == 7 ? kernels7.at : kernels14.at;
  float lo = 0.0f;
  float hi = 0.0f;
  const FusedEpilogue epi = fused_epilogue_of(post_ops_, &lo, &hi);
  // Where the range's weights end: the prefetches of the next chunk stop there.
  const float* weights_end = weights_.data() + block_end * kTaps * ic * bc;
  const int64_t rows = images * s.out_h;
  for (int64_t block = block_begin; block < block_end; ++block) {
    const int64_t c = block * bc;
    const float* block_weights = weights_.data() + block * kTaps * ic * bc;
    fill_bias(bias_.data() + c, output + c, all_pixels, oc, vectors);
    for (int64_t tap = 0; tap < kTaps; ++tap) {
      const int64_t ky = tap / 3;
      const int64_t kx = tap % 3;
      for (int64_t ci0 = 0; ci0 < ic; ci0 += kChunk) {
        TapArgs a;
        a.kc = std::min(kChunk, ic - ci0);
        a.w = block_weights + (tap * ic + ci0) * bc;
        a.step = s.stride_w * ic;
        a.out_step = oc;
        // The next chunk (the weights right after this one) into L2, a share before each row:
        // its stream from L3 runs while this chunk is reused, not when the next starts.
        const float* next_chunk = a.w + a.kc * bc;
        const char* next = reinterpret_cast<const char*>(next_chunk);
        const char* next_end =
            next + std::min(kChunk * bc, weights_end - next_chunk) * sizeof(float);
        const int64_t share = ((next_end - next) / 64 + rows - 1) / rows * 64;
        for (int64_t image = 0; image < images; ++image) {
          for (int64_t oy = 0; oy < s.out_h; ++oy) {
            for (const char* end = std::min(next_end, next + share); next < end; next += 64) {
              _mm_prefetch(next, _MM_HINT_T1);
            }
            const int64_t iy = oy * s.stride_h + ky - s.pad_top;
            if (iy < 0 || iy >= s.in_h) continue;
            const float* row = input + image * in_image + iy * s.in_w * ic + ci0;
            for (int64_t ox0 = 0; ox0 < s.out_w; ox0 += pixels) {
              const int64_t ix0 = ox0 * s.stride_w + kx - s.pad_left;
              const int skip_first = ix0 < 0 ? 1 : 0;
              const int skip_last = ix0 + (pixels - 1) * s.stride_w >= s.in_w ? 1 : 0;
              a.x = row + (ix0 + skip_first * s.stride_w) * ic;
              a.out = output + (image * out_pixels + oy * s.out_w + ox0) * oc + c;
              kernels[skip_first][skip_last](a);
            }
          }
        }
      }
    }
    with_fused_epilogue(epi, [&](auto e) {
      constexpr FusedEpilogue E = decltype(e)::value;
      if (E == FusedEpilogue::kGeneric && post_ops_.empty()) return;
      finish_pixels<E>(post_ops_, lo, hi, output + c, all_pixels, oc, vectors);
    });
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
