// DepthwiseConv (see depthwise_conv.h): repacking, the register-blocked row kernel, the borders.
//
// One output row at a time, one vector of 16 channels at a time (the channel tail masked): the
// row's columns split into near-equal blocks of up to kBlock pixels whose accumulators stay in
// registers while the kernel walks the window. Per kernel row, each input vector of the block's
// span is loaded once and multiplied with every weight that meets it (kernel_w weights held in
// registers), so a 3x3 stride-1 block of 8 pixels costs 10 input loads for 24 FMAs. A block whose
// windows cross the left or right border loads the columns outside through an empty mask
// (zeros), so borders run the same code; kernel rows outside the input rows the caller holds are
// skipped. Kernel widths other than 3 and 5 or strides other than 1 and 2 take a one-pixel loop.
#include "backends/cpu/runtime/providers/optimized/kernels/depthwise_conv.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
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

using BlockKernel = void (*)(const RowArgs&, int64_t ox, int64_t count, int64_t c,
                             __mmask16 mask);

// The post-ops on B accumulators: each post-op's dispatch once per block, its vector form on
// every accumulator (epilogue16 would dispatch once per vector).
template <int B>
ET_AVX512 inline __attribute__((always_inline)) void post_ops_on(const PostOps& post_ops, __m512 (&acc)[B]) {
  for (const PostOp& op : post_ops) {
    switch (op.kind) {
      case PostOp::Kind::kRelu:
#pragma GCC unroll 16
        for (int b = 0; b < B; ++b) acc[b] = _mm512_max_ps(acc[b], _mm512_setzero_ps());
        break;
      case PostOp::Kind::kClamp:
#pragma GCC unroll 16
        for (int b = 0; b < B; ++b) acc[b] = clamp16(acc[b], op.min, op.max);
        break;
      case PostOp::Kind::kActivation:
        switch (op.activation.kind) {
          case Activation::Kind::kRelu:
#pragma GCC unroll 16
            for (int b = 0; b < B; ++b) acc[b] = _mm512_max_ps(acc[b], _mm512_setzero_ps());
            break;
          case Activation::Kind::kClamp:
#pragma GCC unroll 16
            for (int b = 0; b < B; ++b) {
              acc[b] = clamp16(acc[b], op.activation.alpha, op.activation.beta);
            }
            break;
          case Activation::Kind::kHardswish:
#pragma GCC unroll 16
            for (int b = 0; b < B; ++b) acc[b] = _mm512_mul_ps(acc[b], hardsigmoid16(acc[b]));
            break;
          default:
            for (int b = 0; b < B; ++b) acc[b] = activation16(op.activation, acc[b]);
            break;
        }
        break;
      case PostOp::Kind::kAdd:
        break;  // excluded by depthwise_supports
    }
  }
}

// How a block of pixels reads its input: every window inside the input, all 16 channels
// (kFull) or the channel tail (kTail); or a window may cross the left or right border
// (kChecked: input columns outside read as zero, through an empty load mask).
enum class Reads { kFull, kTail, kChecked };

// B pixels from column `ox` on, channels [c, c + 16) under `mask`.
template <int KW, int S, int B, Reads kReads>
ET_AVX512 inline __attribute__((always_inline)) void block_once(const RowArgs& a, int64_t ox,
                                                                int64_t c, __mmask16 mask) {
  __m512 acc[B];
  const __m512 bias = _mm512_loadu_ps(a.bias + c);
#pragma GCC unroll 16
  for (int b = 0; b < B; ++b) acc[b] = bias;
  const int64_t ix0 = ox * S - a.pad_left;  // the block's first input column (may be < 0)
  constexpr int kSpan = (B - 1) * S + KW;   // input columns the block's windows cover
  __mmask16 masks[kReads == Reads::kChecked ? kSpan : 1];
  if constexpr (kReads == Reads::kChecked) {
#pragma GCC unroll 64
    for (int t = 0; t < kSpan; ++t) {
      const bool inside = static_cast<uint64_t>(ix0 + t) < static_cast<uint64_t>(a.in_w);
      masks[t] = inside ? mask : static_cast<__mmask16>(0);
    }
  }
  const float* in = a.input + ix0 * a.channels + c;
  const float* w = a.weights + c;
  for (int64_t r = 0; r < a.rows; ++r, in += a.row_stride, w += a.weight_row) {
    __m512 wv[KW];
#pragma GCC unroll 16
    for (int kx = 0; kx < KW; ++kx) wv[kx] = _mm512_loadu_ps(w + kx * a.padded);
#pragma GCC unroll 64
    for (int t = 0; t < kSpan; ++t) {
      const float* p = in + t * a.channels;
      __m512 x;
      if constexpr (kReads == Reads::kFull) {
        x = _mm512_loadu_ps(p);
      } else if constexpr (kReads == Reads::kTail) {
        x = _mm512_maskz_loadu_ps(mask, p);
      } else {
        x = _mm512_maskz_loadu_ps(masks[t], p);
      }
      // Keep x in a register: GCC would otherwise fold the load into each FMA that uses it,
      // loading the vector kernel_w times instead of once.
      asm("" : "+v"(x));
#pragma GCC unroll 16
      for (int kx = 0; kx < KW; ++kx) {
        const int d = t - kx;  // = b * S for the pixel b this weight meets here
        if (d >= 0 && d % S == 0 && d / S < B) {
          acc[d / S] = _mm512_fmadd_ps(x, wv[kx], acc[d / S]);
        }
      }
    }
  }
  post_ops_on<B>(*a.post_ops, acc);
  float* out = a.output + ox * a.channels + c;
#pragma GCC unroll 16
  for (int b = 0; b < B; ++b) {
    if constexpr (kReads == Reads::kFull) {
      _mm512_storeu_ps(out + b * a.channels, acc[b]);
    } else {
      _mm512_mask_storeu_ps(out + b * a.channels, mask, acc[b]);
    }
  }
}

// `count` blocks of B pixels from column `ox` on, channels [c, c + 16) under `mask`. KW and S
// are the kernel width and the column stride.
template <int KW, int S, int B, Reads kReads>
ET_AVX512 void block_pixels(const RowArgs& a, int64_t ox, int64_t count, int64_t c,
                            __mmask16 mask) {
  for (int64_t n = 0; n < count; ++n, ox += B) {
    block_once<KW, S, B, kReads>(a, ox, c, mask);
  }
}

// `count` single pixels from column `ox` on, anywhere in the row (any kernel width and
// stride), columns outside the input skipped.
ET_AVX512 void edge_pixels(const RowArgs& a, int64_t ox, int64_t count, int64_t c,
                           __mmask16 mask) {
  for (int64_t end = ox + count; ox < end; ++ox) {
    __m512 acc[1] = {_mm512_loadu_ps(a.bias + c)};
    const int64_t ix0 = ox * a.stride_w - a.pad_left;
    const int64_t kx_lo = std::max<int64_t>(0, -ix0);
    const int64_t kx_hi = std::min<int64_t>(a.kernel_w, a.in_w - ix0);
    const float* in = a.input + c;
    const float* w = a.weights + c;
    for (int64_t r = 0; r < a.rows; ++r, in += a.row_stride, w += a.weight_row) {
      for (int64_t kx = kx_lo; kx < kx_hi; ++kx) {
        const __m512 x = _mm512_maskz_loadu_ps(mask, in + (ix0 + kx) * a.channels);
        acc[0] = _mm512_fmadd_ps(x, _mm512_loadu_ps(w + kx * a.padded), acc[0]);
      }
    }
    post_ops_on<1>(*a.post_ops, acc);
    _mm512_mask_storeu_ps(a.output + ox * a.channels + c, mask, acc[0]);
  }
}

template <int KW, int S, Reads kReads>
BlockKernel block_kernel_of(int b) {
  switch (b) {
    case 1:
      return block_pixels<KW, S, 1, kReads>;
    case 2:
      return block_pixels<KW, S, 2, kReads>;
    case 3:
      return block_pixels<KW, S, 3, kReads>;
    case 4:
      return block_pixels<KW, S, 4, kReads>;
    case 5:
      return block_pixels<KW, S, 5, kReads>;
    case 6:
      return block_pixels<KW, S, 6, kReads>;
    case 7:
      return block_pixels<KW, S, 7, kReads>;
    default:
      return block_pixels<KW, S, 8, kReads>;
  }
}

template <int KW, int S>
BlockKernel specialized(int b, Reads reads) {
  switch (reads) {
    case Reads::kFull:
      return block_kernel_of<KW, S, Reads::kFull>(b);
    case Reads::kTail:
      return block_kernel_of<KW, S, Reads::kTail>(b);
    default:
      return block_kernel_of<KW, S, Reads::kChecked>(b);
  }
}

// The blocked kernel of `b` pixels (1 to kBlock) for kernel width `kw` and stride `s`, or null
// where none is specialized (then every pixel takes edge_pixels).
BlockKernel block_kernel(int64_t kw, int64_t s, int b, Reads reads) {
  if (kw == 3 && s == 1) return specialized<3, 1>(b, reads);
  if (kw == 3 && s == 2) return specialized<3, 2>(b, reads);
  if (kw == 5 && s == 1) return specialized<5, 1>(b, reads);
  if (kw == 5 && s == 2) return specialized<5, 2>(b, reads);
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
  const bool add = std::any_of(post_ops.begin(), post_ops.end(),
                               [](const PostOp& op) { return op.kind == PostOp::Kind::kAdd; });
  return !add && post_ops_in_registers(post_ops);
}

bool own_depthwise_wanted(const DepthwiseShape& shape, const PostOps& post_ops) {
  if (!depthwise_supports(shape, post_ops)) return false;
  const char* value = std::getenv("ET_CPU_OWN_DEPTHWISE");
  if (value != nullptr && std::strcmp(value, "1") == 0) return true;
  // No shape class measured clearly faster than oneDNN 3.2's brdgmm yet (README: 0.76-1.02x
  // of its time per shape, MobileNetV3 / EfficientNet end to end at parity or slower): oneDNN's
  // stays the default until the kernel wins somewhere.
  (void)shape;
  return false;
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
  // Near-equal blocks of at most kBlock pixels (14 columns: 7 + 7, not 8 + 6 or 8 + 4 + 2);
  // without a specialized kernel every pixel is its own block. Consecutive blocks alike (same
  // width, both inside the input) make one run, one call.
  const bool blocked = block_kernel(shape_.kernel_w, shape_.stride_w, 1, Reads::kFull) != nullptr;
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
  const DepthwiseShape& s = shape_;
  // Each block's kernels for whole vectors of channels and for the channel tail.
  std::vector<std::pair<BlockKernel, BlockKernel>> kernels;
  kernels.reserve(blocks_.size());
  for (const Block& block : blocks_) {
    const BlockKernel full = block_kernel(s.kernel_w, s.stride_w, block.pixels,
                                          block.checked ? Reads::kChecked : Reads::kFull);
    const BlockKernel tail = block_kernel(s.kernel_w, s.stride_w, block.pixels,
                                          block.checked ? Reads::kChecked : Reads::kTail);
    kernels.emplace_back(full ? full : edge_pixels, tail ? tail : edge_pixels);
  }
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
    // Row pointers of a window that reaches no held row are never read.
    a.input = input + (a.rows > 0 ? (iy0 + ky_lo - input_first) * a.row_stride : 0);
    a.weights = weights_.data() + ky_lo * a.weight_row;
    a.output = output + (oy - row_begin) * out_row;
    for (int64_t c = 0; c < s.channels; c += kLanes) {
      const int64_t left = s.channels - c;
      const bool tail = left < kLanes;
      const __mmask16 mask = tail ? static_cast<__mmask16>((1u << left) - 1u)
                                  : static_cast<__mmask16>(0xFFFF);
      for (size_t i = 0; i < blocks_.size(); ++i) {
        (tail ? kernels[i].second : kernels[i].first)(a, blocks_[i].ox, blocks_[i].count, c, mask);
      }
    }
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
