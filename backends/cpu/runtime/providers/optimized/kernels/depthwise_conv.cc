// DepthwiseConv (see depthwise_conv.h): repacking, the register-blocked row kernel, the borders.
//
// One output row at a time: the row's columns split into near-equal blocks of up to kBlock
// pixels, and for each block every vector of 16 channels in turn (the tail masked; channels
// innermost, so each load walks memory contiguously from one vector to the next). The block's
// accumulators stay in registers from the bias to the only store: the K x K window is unrolled
// over K row pointers (a row outside the input rows the caller holds points at a zero row), and
// per kernel row each input vector of the block's span is loaded once and multiplied with every
// weight that meets it, so a 3x3 stride-1 block of 8 pixels costs 10 input loads for 24 FMAs.
// The post-ops the mobile networks fuse (clamp / ReLU, hardswish, SiLU: silu16_fast unless
// ET_CPU_DEPTHWISE_FAST_SILU=0) are inlined per kernel; others go through epilogue16. A block
// whose windows cross the left or right border loads the columns outside through an empty mask
// (zeros), so borders run the same code. Kernels other than square 3x3 / 5x5, or column strides
// other than 1 and 2, take a one-pixel loop.
#include "backends/cpu/runtime/providers/optimized/kernels/depthwise_conv.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "backends/cpu/runtime/providers/optimized/kernels/vector_epilogue.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {
namespace {

constexpr int64_t kLanes = 16;  // floats per AVX-512 vector
constexpr int kBlock = 8;       // output pixels per register block

// How the post-ops are applied to each output vector (vector_epilogue.h).
using Epi = FusedEpilogue;

// What one output row's work needs: its window's input rows, the weights and the geometry.
struct RowArgs {
  const float* const* rows;  // kernel_h input rows (pixel 0, channel 0); padding: a zero row
  const float* weights;      // [kernel_h][kernel_w][padded]
  int64_t channels;
  int64_t padded;
  int64_t in_w;
  int64_t kernel_h;
  int64_t kernel_w;
  int64_t stride_w;
  int64_t pad_left;
  const float* bias;
  const PostOps* post_ops;
  float lo;  // Epi::kClamp's bounds
  float hi;
  float* output;        // output row, pixel 0, channel 0
  int64_t out_pixel;    // floats from one output pixel to the next (>= channels)
};

using BlockKernel = void (*)(const RowArgs&, int64_t ox, int64_t count, __mmask16 tail_mask);

// How a block of pixels reads its input: every window inside the input and all 16 channels
// (kFull), or through a load mask per input column (kChecked: a window may cross the left or
// right border, whose columns read as zero through an empty mask; or the channel tail).
enum class Reads { kFull, kChecked };

// B pixels from column `ox` on, channels [c, c + 16) under `mask`, kernel K x K, column stride S.
// The kernel rows are unrolled (K is a constant): every accumulator stays in a register from the
// bias to the store.
template <int K, int S, int B, Reads kReads, Epi E>
ET_AVX512 inline __attribute__((always_inline)) void block_once(const RowArgs& a, int64_t ox,
                                                                int64_t c, __mmask16 mask,
                                                                __m512 lo, __m512 hi) {
  __m512 acc[B];
  const __m512 bias = _mm512_loadu_ps(a.bias + c);
#pragma GCC unroll 16
  for (int b = 0; b < B; ++b) acc[b] = bias;
  const int64_t ix0 = ox * S - a.pad_left;  // the block's first input column (may be < 0)
  constexpr int kSpan = (B - 1) * S + K;    // input columns the block's windows cover
  __mmask16 masks[kReads == Reads::kChecked ? kSpan : 1];
  if constexpr (kReads == Reads::kChecked) {
#pragma GCC unroll 64
    for (int t = 0; t < kSpan; ++t) {
      const bool inside = static_cast<uint64_t>(ix0 + t) < static_cast<uint64_t>(a.in_w);
      masks[t] = inside ? mask : static_cast<__mmask16>(0);
    }
  }
  const float* w = a.weights + c;
#pragma GCC unroll 8
  for (int r = 0; r < K; ++r) {
    const float* in = a.rows[r] + ix0 * a.channels + c;
    __m512 wv[K];
#pragma GCC unroll 16
    for (int kx = 0; kx < K; ++kx) wv[kx] = _mm512_loadu_ps(w + (r * K + kx) * a.padded);
    const float* p = in;
#pragma GCC unroll 64
    for (int t = 0; t < kSpan; ++t, p += a.channels) {
      // One add per column instead of an offset register per column (GCC keeps kSpan offsets
      // live across the channel loop otherwise, and spills them to vector registers).
      asm("" : "+r"(p));
      __m512 x;
      if constexpr (kReads == Reads::kFull) {
        x = _mm512_loadu_ps(p);
      } else {
        x = _mm512_maskz_loadu_ps(masks[t], p);
      }
      // Keep x in a register: GCC would otherwise fold the load into each FMA that uses it,
      // loading the vector K times instead of once.
      asm("" : "+v"(x));
#pragma GCC unroll 16
      for (int kx = 0; kx < K; ++kx) {
        const int d = t - kx;  // = b * S for the pixel b this weight meets here
        if (d >= 0 && d % S == 0 && d / S < B) {
          acc[d / S] = _mm512_fmadd_ps(x, wv[kx], acc[d / S]);
        }
      }
    }
  }
  float* out = a.output + ox * a.out_pixel + c;
#pragma GCC unroll 16
  for (int b = 0; b < B; ++b) {
    const __m512 v = fused_epilogue<E>(*a.post_ops, acc[b], lo, hi);
    if constexpr (kReads == Reads::kFull) {
      _mm512_storeu_ps(out + b * a.out_pixel, v);
    } else {
      _mm512_mask_storeu_ps(out + b * a.out_pixel, mask, v);
    }
  }
}

// `count` blocks of B pixels from column `ox` on, every channel (the channels innermost, so
// each load walks memory contiguously from one block to the next): whole vectors, then the
// tail under `tail_mask`.
template <int K, int S, int B, Reads kReads, Epi E>
ET_AVX512 void block_pixels(const RowArgs& a, int64_t ox, int64_t count, __mmask16 tail_mask) {
  const __m512 lo = _mm512_set1_ps(a.lo);
  const __m512 hi = _mm512_set1_ps(a.hi);
  const int64_t full = a.channels / kLanes * kLanes;
  for (int64_t n = 0; n < count; ++n, ox += B) {
    for (int64_t c = 0; c < full; c += kLanes) {
      block_once<K, S, B, kReads, E>(a, ox, c, static_cast<__mmask16>(0xFFFF), lo, hi);
    }
    if (full < a.channels) block_once<K, S, B, Reads::kChecked, E>(a, ox, full, tail_mask, lo, hi);
  }
}

// `count` single pixels from column `ox` on, anywhere in the row (any kernel size and stride),
// columns outside the input skipped, the post-ops through epilogue16.
ET_AVX512 void edge_pixels(const RowArgs& a, int64_t ox, int64_t count, __mmask16 tail_mask) {
  for (int64_t end = ox + count; ox < end; ++ox) {
    const int64_t ix0 = ox * a.stride_w - a.pad_left;
    const int64_t kx_lo = std::max<int64_t>(0, -ix0);
    const int64_t kx_hi = std::min<int64_t>(a.kernel_w, a.in_w - ix0);
    for (int64_t c = 0; c < a.channels; c += kLanes) {
      const __mmask16 mask =
          a.channels - c < kLanes ? tail_mask : static_cast<__mmask16>(0xFFFF);
      __m512 acc = _mm512_loadu_ps(a.bias + c);
      for (int64_t r = 0; r < a.kernel_h; ++r) {
        const float* in = a.rows[r] + c;
        const float* w = a.weights + r * a.kernel_w * a.padded + c;
        for (int64_t kx = kx_lo; kx < kx_hi; ++kx) {
          const __m512 x = _mm512_maskz_loadu_ps(mask, in + (ix0 + kx) * a.channels);
          acc = _mm512_fmadd_ps(x, _mm512_loadu_ps(w + kx * a.padded), acc);
        }
      }
      acc = epilogue16(*a.post_ops, acc, nullptr, mask);
      _mm512_mask_storeu_ps(a.output + ox * a.out_pixel + c, mask, acc);
    }
  }
}

template <int K, int S, Reads kReads, Epi E>
BlockKernel block_kernel_of(int b) {
  switch (b) {
    case 1:
      return block_pixels<K, S, 1, kReads, E>;
    case 2:
      return block_pixels<K, S, 2, kReads, E>;
    case 3:
      return block_pixels<K, S, 3, kReads, E>;
    case 4:
      return block_pixels<K, S, 4, kReads, E>;
    case 5:
      return block_pixels<K, S, 5, kReads, E>;
    case 6:
      return block_pixels<K, S, 6, kReads, E>;
    case 7:
      return block_pixels<K, S, 7, kReads, E>;
    default:
      return block_pixels<K, S, 8, kReads, E>;
  }
}

template <int K, int S, Reads kReads>
BlockKernel with_epilogue(int b, Epi epi) {
  return with_fused_epilogue</*kWithSiluFast=*/true>(
      epi, [b](auto e) { return block_kernel_of<K, S, kReads, decltype(e)::value>(b); });
}

template <int K, int S>
BlockKernel specialized(int b, Reads reads, Epi epi) {
  return reads == Reads::kFull ? with_epilogue<K, S, Reads::kFull>(b, epi)
                               : with_epilogue<K, S, Reads::kChecked>(b, epi);
}

// The blocked kernel of `b` pixels (1 to kBlock) for a square kernel of `k` and column stride
// `s`, or null where none is specialized (then every pixel takes edge_pixels).
BlockKernel block_kernel(const DepthwiseShape& shape, int b, Reads reads, Epi epi) {
  if (shape.kernel_h != shape.kernel_w) return nullptr;
  const int64_t k = shape.kernel_w;
  const int64_t s = shape.stride_w;
  if (k == 3 && s == 1) return specialized<3, 1>(b, reads, epi);
  if (k == 3 && s == 2) return specialized<3, 2>(b, reads, epi);
  if (k == 5 && s == 1) return specialized<5, 1>(b, reads, epi);
  if (k == 5 && s == 2) return specialized<5, 2>(b, reads, epi);
  return nullptr;
}

}  // namespace

bool depthwise_supports(const DepthwiseShape& s, const PostOps& post_ops) {
  if (!kernel_switched_on("ET_CPU_OWN_DEPTHWISE") || !cpu_has_avx512()) return false;
  if (s.channels < 1 || s.in_h < 1 || s.in_w < 1 || s.out_h < 1 || s.out_w < 1 ||
      s.kernel_h < 1 || s.kernel_w < 1 || s.stride_h < 1 || s.stride_w < 1 || s.pad_top < 0 ||
      s.pad_left < 0) {
    return false;
  }
  return post_ops_in_registers_without_add(post_ops);
}

bool own_depthwise_wanted(const DepthwiseShape& shape, const PostOps& post_ops) {
  if (!depthwise_supports(shape, post_ops)) return false;
  if (switch_reach("ET_CPU_OWN_DEPTHWISE") == SwitchReach::kEverywhere) return true;
  // Unset: the register-blocked classes (square 3x3 / 5x5, stride 1 or 2 both ways), which
  // measured 0.58-0.99x of oneDNN 3.2's brdgmm time on every MobileNetV2 / V3 / EfficientNet-B0
  // layer (tools/bench/depthwise_bench.py, provider README). Other kernels and strides run
  // the one-pixel loop here and stay on oneDNN.
  const bool square = shape.kernel_h == shape.kernel_w && (shape.kernel_w == 3 || shape.kernel_w == 5);
  const bool strides = (shape.stride_h == 1 || shape.stride_h == 2) &&
                       (shape.stride_w == 1 || shape.stride_w == 2);
  return square && strides;
}

DepthwiseConv::DepthwiseConv(const DepthwiseShape& shape, const float* weight, const float* bias,
                             PostOps post_ops)
    : shape_(shape),
      post_ops_(std::move(post_ops)),
      fast_silu_(kernel_switched_on("ET_CPU_DEPTHWISE_FAST_SILU")) {
  if (!depthwise_supports(shape_, post_ops_)) {
    throw ProviderError("depthwise conv: this shape or these post-ops are not supported here");
  }
  if (weight == nullptr) throw ProviderError("depthwise conv: weight is null");
  const int64_t c = shape_.channels;
  padded_channels_ = (c + kLanes - 1) / kLanes * kLanes;
  const int64_t taps = shape_.kernel_h * shape_.kernel_w;
  weights_.assign(static_cast<size_t>(taps * padded_channels_), 0.0f);
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t t = 0; t < taps; ++t) {
      weights_[static_cast<size_t>(t * padded_channels_ + ch)] = weight[ch * taps + t];
    }
  }
  bias_.assign(static_cast<size_t>(padded_channels_), 0.0f);
  if (bias) std::copy(bias, bias + c, bias_.begin());
  zero_row_.assign(static_cast<size_t>(shape_.in_w * c), 0.0f);
  // Near-equal blocks of at most kBlock pixels (14 columns: 7 + 7, not 8 + 6 or 8 + 4 + 2);
  // without a specialized kernel every pixel is its own block. Consecutive blocks alike (same
  // width, both inside the input) make one run, one call.
  const bool blocked = block_kernel(shape_, 1, Reads::kFull, Epi::kGeneric) != nullptr;
  const int64_t count = blocked ? (shape_.out_w + kBlock - 1) / kBlock : shape_.out_w;
  for (int64_t i = 0; i < count; ++i) {
    Block block;
    block.ox = shape_.out_w * i / count;
    block.pixels = static_cast<int>(shape_.out_w * (i + 1) / count - block.ox);
    const int64_t first = block.ox * shape_.stride_w - shape_.pad_left;
    const int64_t last = (block.ox + block.pixels - 1) * shape_.stride_w - shape_.pad_left +
                         shape_.kernel_w - 1;
    block.checked = first < 0 || last >= shape_.in_w;
    if (!blocks_.empty() && !block.checked && !blocks_.back().checked &&
        blocks_.back().pixels == block.pixels) {
      ++blocks_.back().count;
    } else {
      blocks_.push_back(block);
    }
  }
}

void DepthwiseConv::run_rows(const float* input, int64_t input_first, int64_t input_rows,
                             float* output, int64_t row_begin, int64_t row_end) const {
  run_rows(input, input_first, input_rows, output, row_begin, row_end, shape_.channels);
}

void DepthwiseConv::run_rows(const float* input, int64_t input_first, int64_t input_rows,
                             float* output, int64_t row_begin, int64_t row_end,
                             int64_t output_pixel_stride) const {
  const DepthwiseShape& s = shape_;
  if (output_pixel_stride < s.channels) {
    throw ProviderError("depthwise conv: output pixel stride " +
                        std::to_string(output_pixel_stride) + " is below the " +
                        std::to_string(s.channels) + " channels");
  }
  RowArgs a;
  Epi epi = fused_epilogue_of(post_ops_, &a.lo, &a.hi);
  if (epi == Epi::kSilu && fast_silu_) epi = Epi::kSiluFast;
  // Each block's kernel (borders: through the load masks; unspecialized sizes: one pixel).
  std::vector<BlockKernel> kernels;
  kernels.reserve(blocks_.size());
  for (const Block& block : blocks_) {
    const BlockKernel kernel =
        block_kernel(s, block.pixels, block.checked ? Reads::kChecked : Reads::kFull, epi);
    kernels.push_back(kernel ? kernel : edge_pixels);
  }
  std::vector<const float*> rows(static_cast<size_t>(s.kernel_h));
  const int64_t row_stride = s.in_w * s.channels;
  a.rows = rows.data();
  a.weights = weights_.data();
  a.channels = s.channels;
  a.padded = padded_channels_;
  a.in_w = s.in_w;
  a.kernel_h = s.kernel_h;
  a.kernel_w = s.kernel_w;
  a.stride_w = s.stride_w;
  a.pad_left = s.pad_left;
  a.bias = bias_.data();
  a.post_ops = &post_ops_;
  a.out_pixel = output_pixel_stride;
  const int64_t out_row = s.out_w * output_pixel_stride;
  const int64_t left = s.channels % kLanes;
  const __mmask16 tail_mask =
      left ? static_cast<__mmask16>((1u << left) - 1u) : static_cast<__mmask16>(0xFFFF);
  const int64_t input_last = input_first + input_rows;
  for (int64_t oy = row_begin; oy < row_end; ++oy) {
    // The window's rows: held ones, else the zero row (padding, or rows only padding reaches).
    const int64_t iy0 = oy * s.stride_h - s.pad_top;
    for (int64_t ky = 0; ky < s.kernel_h; ++ky) {
      const int64_t iy = iy0 + ky;
      const bool held = iy >= input_first && iy < input_last;
      rows[static_cast<size_t>(ky)] =
          held ? input + (iy - input_first) * row_stride : zero_row_.data();
    }
    a.output = output + (oy - row_begin) * out_row;
    for (size_t i = 0; i < blocks_.size(); ++i) {
      kernels[i](a, blocks_[i].ox, blocks_[i].count, tail_mask);
    }
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
