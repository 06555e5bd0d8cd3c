// DepthwiseConv (see depthwise_conv.h): repacking, the register-blocked row kernel, the borders.
//
// One output row at a time, one vector of 16 channels at a time (the channel tail masked): the
// columns whose window lies inside the input run in blocks of kBlock pixels whose accumulators
// stay in registers while the kernel walks the window. Per kernel row, each input vector of the
// block's span is loaded once and multiplied with every weight that meets it (kernel_w weights
// held in registers), so a 3x3 stride-1 block of 8 pixels costs 10 input loads for 24 FMAs. The
// columns whose window crosses the left or right border take a one-pixel path with bounds
// checks; kernel rows outside the input rows the caller holds are skipped.
#include "backends/cpu/runtime/providers/optimized/kernels/depthwise_conv.h"

#include <algorithm>
#include <string>

#include "backends/cpu/runtime/providers/optimized/kernels/vector_epilogue.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {
namespace {

constexpr int64_t kLanes = 16;  // floats per AVX-512 vector
constexpr int kBlock = 8;       // output pixels per register block

// What one output row's work needs: its window's first kernel row in the input and the weights,
// how many kernel rows are inside the input, and the geometry.
struct RowArgs {
  const float* input;    // input row of the first kernel row inside, pixel 0, channel 0
  const float* weights;  // weights of that kernel row, kx 0, channel 0
  int64_t rows;          // kernel rows inside the input
  int64_t row_stride;    // floats per input row (in_w * C)
  int64_t weight_row;    // floats per kernel row of weights (kernel_w * padded C)
  int64_t channels;
  int64_t padded;
  int64_t in_w;
  int64_t out_w;
  int64_t kernel_w;
  int64_t stride_w;
  int64_t pad_left;
  const float* bias;
  const PostOps* post_ops;
  float* output;  // output row, pixel 0, channel 0
};

// B pixels from column `ox` on (their windows inside the input), channels [c, c + 16) under
// `mask`. KW and S are the kernel width and the column stride (both known here).
template <int KW, int S, int B, bool kMasked>
ET_AVX512 inline void block_pixels(const RowArgs& a, int64_t ox, int64_t c, __mmask16 mask) {
  __m512 acc[B];
  const __m512 bias = _mm512_loadu_ps(a.bias + c);
#pragma GCC unroll 16
  for (int b = 0; b < B; ++b) acc[b] = bias;
  const float* in = a.input + (ox * S - a.pad_left) * a.channels + c;
  const float* w = a.weights + c;
  constexpr int kSpan = (B - 1) * S + KW;  // input columns the block's windows cover
  for (int64_t r = 0; r < a.rows; ++r, in += a.row_stride, w += a.weight_row) {
    __m512 wv[KW];
#pragma GCC unroll 16
    for (int kx = 0; kx < KW; ++kx) wv[kx] = _mm512_loadu_ps(w + kx * a.padded);
#pragma GCC unroll 64
    for (int t = 0; t < kSpan; ++t) {
      const float* p = in + t * a.channels;
      const __m512 x = kMasked ? _mm512_maskz_loadu_ps(mask, p) : _mm512_loadu_ps(p);
#pragma GCC unroll 16
      for (int kx = 0; kx < KW; ++kx) {
        const int d = t - kx;  // = b * S for the pixel b this weight meets here
        if (d >= 0 && d % S == 0 && d / S < B) {
          acc[d / S] = _mm512_fmadd_ps(x, wv[kx], acc[d / S]);
        }
      }
    }
  }
  float* out = a.output + ox * a.channels + c;
#pragma GCC unroll 16
  for (int b = 0; b < B; ++b) {
    const __m512 v = epilogue16(*a.post_ops, acc[b], nullptr, mask);
    if (kMasked) {
      _mm512_mask_storeu_ps(out + b * a.channels, mask, v);
    } else {
      _mm512_storeu_ps(out + b * a.channels, v);
    }
  }
}

// One pixel anywhere in the row (any kernel width and stride), columns outside the input skipped.
ET_AVX512 inline void edge_pixel(const RowArgs& a, int64_t ox, int64_t c, __mmask16 mask) {
  __m512 acc = _mm512_loadu_ps(a.bias + c);
  const int64_t ix0 = ox * a.stride_w - a.pad_left;
  const int64_t kx_lo = std::max<int64_t>(0, -ix0);
  const int64_t kx_hi = std::min<int64_t>(a.kernel_w, a.in_w - ix0);
  const float* in = a.input + c;
  const float* w = a.weights + c;
  for (int64_t r = 0; r < a.rows; ++r, in += a.row_stride, w += a.weight_row) {
    for (int64_t kx = kx_lo; kx < kx_hi; ++kx) {
      const __m512 x = _mm512_maskz_loadu_ps(mask, in + (ix0 + kx) * a.channels);
      acc = _mm512_fmadd_ps(x, _mm512_loadu_ps(w + kx * a.padded), acc);
    }
  }
  _mm512_mask_storeu_ps(a.output + ox * a.channels + c, mask,
                        epilogue16(*a.post_ops, acc, nullptr, mask));
}

// Columns [ox_lo, ox_hi) (windows inside the input) of one vector of channels, in blocks.
template <int KW, int S, bool kMasked>
ET_AVX512 inline void interior(const RowArgs& a, int64_t ox_lo, int64_t ox_hi, int64_t c,
                               __mmask16 mask) {
  int64_t ox = ox_lo;
  for (; ox + kBlock <= ox_hi; ox += kBlock) block_pixels<KW, S, kBlock, kMasked>(a, ox, c, mask);
  if (ox + 4 <= ox_hi) {
    block_pixels<KW, S, 4, kMasked>(a, ox, c, mask);
    ox += 4;
  }
  for (; ox < ox_hi; ++ox) block_pixels<KW, S, 1, kMasked>(a, ox, c, mask);
}

using RowKernel = void (*)(const RowArgs&);

// One output row. KW, S > 0: the blocked kernel for the interior columns; 0: every column on
// the one-pixel path (kernel widths and strides without a specialization).
template <int KW, int S>
ET_AVX512 void conv_row(const RowArgs& a) {
  int64_t ox_lo = a.out_w;
  int64_t ox_hi = a.out_w;
  if constexpr (KW > 0) {
    // First column whose window starts inside, and one past the last whose window ends inside.
    ox_lo = std::min<int64_t>(a.out_w, (a.pad_left + S - 1) / S);
    const int64_t last_start = a.in_w - KW + a.pad_left;  // ox * S <= last_start
    ox_hi = last_start < 0 ? ox_lo : std::clamp<int64_t>(last_start / S + 1, ox_lo, a.out_w);
  }
  for (int64_t c = 0; c < a.channels; c += kLanes) {
    const int64_t left = a.channels - c;
    const bool tail = left < kLanes;
    const __mmask16 mask = tail ? static_cast<__mmask16>((1u << left) - 1u)
                                : static_cast<__mmask16>(0xFFFF);
    for (int64_t ox = 0; ox < ox_lo; ++ox) edge_pixel(a, ox, c, mask);
    if constexpr (KW > 0) {
      if (tail) {
        interior<KW, S, true>(a, ox_lo, ox_hi, c, mask);
      } else {
        interior<KW, S, false>(a, ox_lo, ox_hi, c, mask);
      }
    }
    for (int64_t ox = ox_hi; ox < a.out_w; ++ox) edge_pixel(a, ox, c, mask);
  }
}

RowKernel row_kernel_for(int64_t kernel_w, int64_t stride_w) {
  if (kernel_w == 3 && stride_w == 1) return conv_row<3, 1>;
  if (kernel_w == 3 && stride_w == 2) return conv_row<3, 2>;
  if (kernel_w == 5 && stride_w == 1) return conv_row<5, 1>;
  if (kernel_w == 5 && stride_w == 2) return conv_row<5, 2>;
  if (kernel_w == 7 && stride_w == 1) return conv_row<7, 1>;
  if (kernel_w == 7 && stride_w == 2) return conv_row<7, 2>;
  return conv_row<0, 0>;
}

}  // namespace

bool depthwise_supports(const DepthwiseShape& s, const PostOps& post_ops) {
  if (!kernel_switched_on("ET_CPU_OWN_DEPTHWISE") || !cpu_has_avx512()) return false;
  if (s.channels < 1 || s.in_h < 1 || s.in_w < 1 || s.out_h < 1 || s.out_w < 1 ||
      s.kernel_h < 1 || s.kernel_w < 1 || s.stride_h < 1 || s.stride_w < 1 || s.pad_top < 0 ||
      s.pad_left < 0) {
    return false;
  }
  const bool add = std::any_of(post_ops.begin(), post_ops.end(),
                               [](const PostOp& op) { return op.kind == PostOp::Kind::kAdd; });
  return !add && post_ops_in_registers(post_ops);
}

DepthwiseConv::DepthwiseConv(const DepthwiseShape& shape, const float* weight, const float* bias,
                             PostOps post_ops)
    : shape_(shape), post_ops_(std::move(post_ops)) {
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
}

void DepthwiseConv::run_rows(const float* input, int64_t input_first, int64_t input_rows,
                             float* output, int64_t row_begin, int64_t row_end) const {
  const DepthwiseShape& s = shape_;
  const RowKernel kernel = row_kernel_for(s.kernel_w, s.stride_w);
  RowArgs a;
  a.row_stride = s.in_w * s.channels;
  a.weight_row = s.kernel_w * padded_channels_;
  a.channels = s.channels;
  a.padded = padded_channels_;
  a.in_w = s.in_w;
  a.out_w = s.out_w;
  a.kernel_w = s.kernel_w;
  a.stride_w = s.stride_w;
  a.pad_left = s.pad_left;
  a.bias = bias_.data();
  a.post_ops = &post_ops_;
  const int64_t out_row = s.out_w * s.channels;
  const int64_t input_last = input_first + input_rows;
  for (int64_t oy = row_begin; oy < row_end; ++oy) {
    const int64_t iy0 = oy * s.stride_h - s.pad_top;  // the window's first input row
    const int64_t ky_lo = std::max<int64_t>(0, input_first - iy0);
    const int64_t ky_hi = std::min<int64_t>(s.kernel_h, input_last - iy0);
    a.rows = std::max<int64_t>(0, ky_hi - ky_lo);
    a.input = input + (iy0 + ky_lo - input_first) * a.row_stride;
    a.weights = weights_.data() + ky_lo * a.weight_row;
    if (a.rows == 0) a.input = input;  // never read; keeps the pointer inside the buffer
    a.output = output + (oy - row_begin) * out_row;
    kernel(a);
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
