// StemConv (see stem_conv.h): repacking, the register-blocked row kernel, the borders.
//
// One output row at a time. The row's output channels go in chunks of up to 4 vectors (64
// channels: MobileNetV3's 16 is one vector, MobileNetV2 / EfficientNet's 32 two), and its columns
// whose windows lie inside the input in blocks of P pixels (P x V accumulators, 24 at most); per
// kernel tap and input channel the block loads the V weight vectors once and multiplies each with
// one broadcast input value per pixel (an FMA with a broadcast memory operand), so the input is
// read straight from either layout without staging. Rows whose window crosses the top or bottom
// border skip the kernel rows outside; columns whose window crosses the left or right border,
// and the columns left over after the blocks, take a one-pixel loop that skips the taps outside.
// The common column steps (stride 2 on a plain input, stride 2 on 3 channels-last channels) are
// compile-time constants, so each broadcast's address is an immediate offset.
//
// Kernels of 5x5 and more (staged()) read staged rows instead: per band of 16 output rows the
// input rows it needs are copied channels-last with the padding columns as zeros (stage_rows;
// the next band's rows are prefetched into L2 meanwhile), so every column's window lies inside
// and each row is whole blocks of 14 pixels x up to 2 vectors (28 accumulators; the columns
// after the last whole block take one more block ending at the row's end). In place, ResNet's 7x7
// left 4 of its 112 columns a row to the one-pixel loop (one accumulator chain, latency-bound).
#include "backends/cpu/runtime/providers/optimized/kernels/stem_conv.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/runtime/providers/optimized/kernels/vector_epilogue.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {
namespace {

constexpr int64_t kLanes = 16;  // floats per AVX-512 vector
constexpr int kMaxVectors = 4;  // output-channel vectors per chunk

// What one output row's work needs.
struct RowArgs {
  const float* input;    // the image, pixel (0, 0), channel 0
  const float* weights;  // [kernel_h][kernel_w][in_channels][padded]
  const float* bias;     // [padded]
  const PostOps* post_ops;
  int64_t in_channels;
  int64_t out_channels;
  int64_t padded;
  int64_t in_w;
  int64_t kernel_w;
  int64_t stride_w;
  int64_t pad_left;
  int64_t pixel_step;    // floats from one input column to the next
  int64_t channel_step;  // floats from one input channel to the next
  int64_t row_step;      // floats from one input row to the next
  int64_t iy0;           // the row's first window row (may be < 0)
  int64_t ky_lo;         // kernel rows inside the input: [ky_lo, ky_hi)
  int64_t ky_hi;
  float lo;  // FusedEpilogue::kClamp's bounds
  float hi;
  float* output;  // output row, pixel 0, channel 0
};

// The mask of the output-channel vector starting at channel c (the tail: fewer lanes).
inline __mmask16 lanes_from(int64_t c, int64_t channels) {
  const int64_t left = channels - c;
  return left >= kLanes ? static_cast<__mmask16>(0xFFFF)
                        : static_cast<__mmask16>((1u << left) - 1u);
}

// One block of P pixels from column `ox` on (every window inside the input's columns), output
// channels [c, c + 16 V). kStep: the input column step between neighbouring pixels (stride x
// pixel_step) when constant, 0 when it is a.stride_w * a.pixel_step. Not inlined into the loop
// over blocks: there GCC hoists the epilogue's constants (SiLU's) out of it, and the registers
// they take push the weights onto the stack.
template <int V, int P, int kStep, FusedEpilogue E>
ET_AVX512 __attribute__((noinline)) void block_once(const RowArgs& a, int64_t ox, int64_t c) {
  const int64_t step = kStep > 0 ? kStep : a.stride_w * a.pixel_step;
  const int64_t taps_per_row = a.kernel_w * a.in_channels;
  {
    __m512 acc[P][V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const __m512 b = _mm512_loadu_ps(a.bias + c + v * kLanes);
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) acc[p][v] = b;
    }
    const int64_t ix0 = ox * a.stride_w - a.pad_left;
    for (int64_t ky = a.ky_lo; ky < a.ky_hi; ++ky) {
      const float* row = a.input + (a.iy0 + ky) * a.row_step + ix0 * a.pixel_step;
      const float* w = a.weights + ky * taps_per_row * a.padded + c;
      for (int64_t kx = 0; kx < a.kernel_w; ++kx) {
        for (int64_t ci = 0; ci < a.in_channels; ++ci, w += a.padded) {
          const float* src = row + kx * a.pixel_step + ci * a.channel_step;
          __m512 wv[V];
          load_pinned<V>(w, wv);
#pragma GCC unroll 16
          for (int p = 0; p < P; ++p) {
            const __m512 x = _mm512_set1_ps(src[p * step]);
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) acc[p][v] = _mm512_fmadd_ps(x, wv[v], acc[p][v]);
          }
        }
      }
    }
    // The clamp's bounds only now: live across the accumulation they would take two of the
    // registers the accumulators and weights need.
    const __m512 lo = _mm512_set1_ps(a.lo);
    const __m512 hi = _mm512_set1_ps(a.hi);
    float* out = a.output + ox * a.out_channels + c;
    const __mmask16 last = lanes_from(c + (V - 1) * kLanes, a.out_channels);
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) {
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) {
        const __m512 r = fused_epilogue<E>(*a.post_ops, acc[p][v], lo, hi);
        float* to = out + p * a.out_channels + v * kLanes;
        if (v == V - 1) {
          _mm512_mask_storeu_ps(to, last, r);
        } else {
          _mm512_storeu_ps(to, r);
        }
      }
    }
  }
}

// `count` single pixels from column `ox` on, anywhere in the row (taps outside the input's
// columns skipped), output channels [c_begin, c_end), one vector at a time.
ET_AVX512 void edge_pixels(const RowArgs& a, int64_t ox, int64_t count, int64_t c_begin,
                           int64_t c_end) {
  for (int64_t end = ox + count; ox < end; ++ox) {
    const int64_t ix0 = ox * a.stride_w - a.pad_left;
    const int64_t kx_lo = std::max<int64_t>(0, -ix0);
    const int64_t kx_hi = std::min<int64_t>(a.kernel_w, a.in_w - ix0);
    for (int64_t c = c_begin; c < c_end; c += kLanes) {
      __m512 acc = _mm512_loadu_ps(a.bias + c);
      for (int64_t ky = a.ky_lo; ky < a.ky_hi; ++ky) {
        const float* row = a.input + (a.iy0 + ky) * a.row_step + ix0 * a.pixel_step;
        for (int64_t kx = kx_lo; kx < kx_hi; ++kx) {
          const float* w =
              a.weights + ((ky * a.kernel_w + kx) * a.in_channels) * a.padded + c;
          for (int64_t ci = 0; ci < a.in_channels; ++ci) {
            const __m512 x = _mm512_set1_ps(row[kx * a.pixel_step + ci * a.channel_step]);
            acc = _mm512_fmadd_ps(x, _mm512_loadu_ps(w + ci * a.padded), acc);
          }
        }
      }
      const __mmask16 mask = lanes_from(c, c_end);
      acc = epilogue16(*a.post_ops, acc, nullptr, mask);
      _mm512_mask_storeu_ps(a.output + ox * a.out_channels + c, mask, acc);
    }
  }
}

// Output rows per staged band of input rows (StemConv::run_rows).
constexpr int64_t kBandRows = 16;

// Copies input rows [first, first + rows) of image `input` (the shape's layout) to `staged`,
// channels-last ([rows][staged_w][C]) with pad_left zero columns before each row's and zeros after
// them up to staged_w: every window of the rows then lies inside the staged columns, and a
// window row's taps (kx, ci) are consecutive floats.
void stage_rows(const StemShape& s, const float* input, int64_t first, int64_t rows,
                int64_t staged_w, std::vector<float>* staged) {
  const int64_t c = s.in_channels;
  staged->resize(static_cast<size_t>(std::max<int64_t>(1, rows * staged_w * c)));
  const int64_t before = s.pad_left * c;
  const int64_t inside = s.in_w * c;
  const int64_t after = (staged_w - s.pad_left - s.in_w) * c;
  for (int64_t r = 0; r < rows; ++r) {
    float* to = staged->data() + r * staged_w * c;
    std::fill(to, to + before, 0.0f);
    std::fill(to + before + inside, to + before + inside + after, 0.0f);
    to += before;
    if (s.input_channels_last) {
      std::memcpy(to, input + (first + r) * inside, static_cast<size_t>(inside) * sizeof(float));
      continue;
    }
    for (int64_t ci = 0; ci < c; ++ci) {
      const float* from = input + (ci * s.in_h + first + r) * s.in_w;
      for (int64_t x = 0; x < s.in_w; ++x) to[x * c + ci] = from[x];
    }
  }
}

// Asks input rows [first, last) of image `input` (the shape's layout) into L2.
void prefetch_rows(const StemShape& s, const float* input, int64_t first, int64_t last) {
  if (last <= first) return;
  const auto lines = [](const float* from, int64_t floats) {
    const char* p = reinterpret_cast<const char*>(from);
    for (int64_t b = 0; b < floats * static_cast<int64_t>(sizeof(float)); b += 64) {
      _mm_prefetch(p + b, _MM_HINT_T1);
    }
  };
  if (s.input_channels_last) {
    const int64_t row = s.in_w * s.in_channels;
    lines(input + first * row, (last - first) * row);
    return;
  }
  for (int64_t ci = 0; ci < s.in_channels; ++ci) {
    lines(input + (ci * s.in_h + first) * s.in_w, (last - first) * s.in_w);
  }
}

// `count` blocks of P pixels from column `ox` on.
template <int V, int P, int kStep, FusedEpilogue E>
ET_AVX512 void block_pixels(const RowArgs& a, int64_t ox, int64_t count, int64_t c) {
  for (int64_t n = 0; n < count; ++n, ox += P) block_once<V, P, kStep, E>(a, ox, c);
}

using BlockKernel = void (*)(const RowArgs&, int64_t ox, int64_t count, int64_t c);

// Pixels per block for V vectors when the input is read in place: 12, 12, 8, 6 (at most 24
// accumulators, the V weight vectors and the broadcasts in the 32 registers).
constexpr int pixels_for(int v) { return v <= 2 ? 12 : 24 / v; }

// From staged rows (run_rows): chunks of at most 2 vectors in blocks of 14 pixels (28
// accumulators, 2 weight vectors, the broadcast; 112 = 8 x 14, the 7x7 stems' row at 224).
// Measured against 4 vectors x 6 pixels on ResNet's 7x7 3 -> 64 (depthwise_bench, 1 thread):
// 1281 against 1305-1437 us.
constexpr int kStagedVectors = 2;
constexpr int kStagedPixels = 14;

template <int V, int kStep, int P>
BlockKernel with_epilogue(FusedEpilogue epi) {
  return with_fused_epilogue(
      epi, [](auto e) -> BlockKernel { return block_pixels<V, P, kStep, decltype(e)::value>; });
}

template <int kStep>
BlockKernel with_vectors(int v, FusedEpilogue epi) {
  switch (v) {
    case 1:
      return with_epilogue<1, kStep, pixels_for(1)>(epi);
    case 2:
      return with_epilogue<2, kStep, pixels_for(2)>(epi);
    case 3:
      return with_epilogue<3, kStep, pixels_for(3)>(epi);
    default:
      return with_epilogue<4, kStep, pixels_for(4)>(epi);
  }
}

// The in-place block kernel of `v` vectors for a column step of `step` floats.
BlockKernel block_kernel(int v, int64_t step, FusedEpilogue epi) {
  if (step == 2) return with_vectors<2>(v, epi);  // stride 2, plain input
  if (step == 6) return with_vectors<6>(v, epi);  // stride 2, 3 channels-last channels
  return with_vectors<0>(v, epi);
}

template <int kStep>
BlockKernel staged_with_vectors(int v, FusedEpilogue epi) {
  if (v == 1) return with_epilogue<1, kStep, kStagedPixels>(epi);
  return with_epilogue<2, kStep, kStagedPixels>(epi);
}

// The staged block kernel of `v` (1 or 2) vectors for a column step of `step` floats.
BlockKernel staged_block_kernel(int v, int64_t step, FusedEpilogue epi) {
  if (step == 6) return staged_with_vectors<6>(v, epi);  // stride 2, 3 channels
  return staged_with_vectors<0>(v, epi);
}

// Whether run_rows stages the input rows: kernels of 5x5 and more, whose padding leaves 2-3
// border columns a side on the one-pixel loop and whose windows are worth the copy (on the
// 3x3 stems the copy cost more than it saved: MobileNetV3's 3 -> 16 went from 0.9x oneDNN's
// time to 1.2x).
bool staged(const StemShape& s) { return s.kernel_h * s.kernel_w >= 25; }

}  // namespace

bool stem_supports(const StemShape& s, const PostOps& post_ops) {
  if (!kernel_switched_on("ET_CPU_OWN_STEM") || !cpu_has_avx512()) return false;
  if (s.in_channels < 1 || s.in_channels > 4 || s.out_channels < 1 || s.in_h < 1 ||
      s.in_w < 1 || s.out_h < 1 || s.out_w < 1 || s.kernel_h < 1 || s.kernel_w < 1 ||
      s.kernel_h > 7 || s.kernel_w > 7 || s.stride_h < 1 || s.stride_w < 1 || s.pad_top < 0 ||
      s.pad_left < 0) {
    return false;
  }
  return post_ops_in_registers_without_add(post_ops);
}

bool own_stem_wanted(const StemShape& shape, const PostOps& post_ops) {
  if (!stem_supports(shape, post_ops)) return false;
  if (switch_reach("ET_CPU_OWN_STEM") == SwitchReach::kEverywhere) return true;
  // Unset: 3x3 at stride 2 to at most 32 output channels, the stems of MobileNetV2 / V3 and
  // EfficientNet-B0: 0.86-0.89x of oneDNN 3.2's time on MobileNetV3's 3 -> 16 (hardswish),
  // 0.98-1.02x on the 3 -> 32 ones (ReLU6, SiLU). ResNet's 7x7 (staged rows) measured 0.88-0.99x
  // at batch 1 but 0.97-1.08x at batch 8 and no gain in the ResNet-50-style model (zoo_bench
  // A/B 0.97-1.01x): it stays on oneDNN (tools/bench/depthwise_bench.py --only stem, provider
  // README). Both run at about 0.8 of this CPU's FMA rate; ours also reads the plain graph
  // input without a reorder.
  return shape.kernel_h == 3 && shape.kernel_w == 3 && shape.stride_h == 2 &&
         shape.stride_w == 2 && shape.out_channels <= 32;
}

StemConv::StemConv(const StemShape& shape, const float* weight, const float* bias,
                   PostOps post_ops)
    : shape_(shape), post_ops_(std::move(post_ops)) {
  if (!stem_supports(shape_, post_ops_)) {
    throw ProviderError("stem conv: this shape or these post-ops are not supported here");
  }
  if (weight == nullptr) throw ProviderError("stem conv: weight is null");
  const int64_t oc = shape_.out_channels;
  const int64_t ic = shape_.in_channels;
  const int64_t kh = shape_.kernel_h;
  const int64_t kw = shape_.kernel_w;
  padded_out_ = (oc + kLanes - 1) / kLanes * kLanes;
  weights_.assign(static_cast<size_t>(kh * kw * ic * padded_out_), 0.0f);
  for (int64_t o = 0; o < oc; ++o) {
    for (int64_t ci = 0; ci < ic; ++ci) {
      for (int64_t ky = 0; ky < kh; ++ky) {
        for (int64_t kx = 0; kx < kw; ++kx) {
          weights_[static_cast<size_t>(((ky * kw + kx) * ic + ci) * padded_out_ + o)] =
              weight[((o * ic + ci) * kh + ky) * kw + kx];
        }
      }
    }
  }
  bias_.assign(static_cast<size_t>(padded_out_), 0.0f);
  if (bias) std::copy(bias, bias + oc, bias_.begin());
}

namespace {

// StemConv::run_rows on staged rows (staged(s)): `a` holds the weights, post-ops and channels.
void run_staged(const StemShape& s, int64_t padded_out, RowArgs& a, FusedEpilogue epi,
                const float* input, float* output, int64_t row_begin, int64_t row_end) {
  // Staged columns: the input's, with pad_left zero columns before them and as many after as
  // the last window reaches past the input; staged rows are channels-last.
  const int64_t pad_right =
      std::max<int64_t>(0, (s.out_w - 1) * s.stride_w + s.kernel_w - s.pad_left - s.in_w);
  const int64_t staged_w = s.pad_left + s.in_w + pad_right;
  a.in_w = staged_w;
  a.pad_left = 0;
  a.pixel_step = s.in_channels;
  a.channel_step = 1;
  a.row_step = staged_w * a.pixel_step;
  const int64_t vectors = padded_out / kLanes;
  const int64_t step = s.stride_w * a.pixel_step;
  // Every column's window lies inside the staged columns: each chunk's row is blocks of
  // kStagedPixels and, for the columns after the last whole one, one more block ending at the
  // row's end (recomputing a few columns, the same values); a row narrower than a block takes
  // the one-pixel loop.
  thread_local std::vector<float> rows_buffer;
  for (int64_t band = row_begin; band < row_end; band += kBandRows) {
    const int64_t band_end = std::min(row_end, band + kBandRows);
    const int64_t first = std::max<int64_t>(0, band * s.stride_h - s.pad_top);
    const int64_t last =
        std::min(s.in_h, (band_end - 1) * s.stride_h - s.pad_top + s.kernel_h);
    stage_rows(s, input, first, std::max<int64_t>(0, last - first), staged_w, &rows_buffer);
    a.input = rows_buffer.data();
    // The next band's input rows, asked into L2 a share per output row while this band
    // computes: staging them would otherwise wait on memory where the images do not stay in
    // L2 (batch 8: 736 us an image against 615 at batch 1, 1 thread, before the prefetch).
    const int64_t next_end = std::min(row_end, band_end + kBandRows);
    const int64_t next_first = std::min(s.in_h, last);
    const int64_t next_last =
        std::min(s.in_h, (next_end - 1) * s.stride_h - s.pad_top + s.kernel_h);
    const int64_t next_rows = std::max<int64_t>(0, next_last - next_first);
    const int64_t share = (next_rows + (band_end - band) - 1) / (band_end - band);
    for (int64_t oy = band; oy < band_end; ++oy) {
      const int64_t from = next_first + (oy - band) * share;
      prefetch_rows(s, input, from, std::min(next_last, from + share));
      const int64_t iy = oy * s.stride_h - s.pad_top;  // the window's first input row
      a.iy0 = iy - first;
      a.ky_lo = std::max<int64_t>(0, -iy);
      a.ky_hi = std::max(a.ky_lo, std::min<int64_t>(s.kernel_h, s.in_h - iy));
      a.output = output + (oy - row_begin) * s.out_w * s.out_channels;
      for (int64_t v = 0; v < vectors; v += kStagedVectors) {
        const int count = static_cast<int>(std::min<int64_t>(kStagedVectors, vectors - v));
        const int64_t c = v * kLanes;
        if (s.out_w < kStagedPixels) {
          edge_pixels(a, 0, s.out_w, c, std::min(s.out_channels, c + count * kLanes));
          continue;
        }
        const BlockKernel kernel = staged_block_kernel(count, step, epi);
        const int64_t blocks = s.out_w / kStagedPixels;
        kernel(a, 0, blocks, c);
        if (blocks * kStagedPixels < s.out_w) kernel(a, s.out_w - kStagedPixels, 1, c);
      }
    }
  }
}

}  // namespace

void StemConv::run_rows(const float* input, float* output, int64_t row_begin,
                        int64_t row_end) const {
  const StemShape& s = shape_;
  RowArgs a;
  const FusedEpilogue epi = fused_epilogue_of(post_ops_, &a.lo, &a.hi);
  a.weights = weights_.data();
  a.bias = bias_.data();
  a.post_ops = &post_ops_;
  a.in_channels = s.in_channels;
  a.out_channels = s.out_channels;
  a.padded = padded_out_;
  a.kernel_w = s.kernel_w;
  a.stride_w = s.stride_w;
  if (staged(s)) {
    run_staged(s, padded_out_, a, epi, input, output, row_begin, row_end);
    return;
  }
  a.input = input;
  a.in_w = s.in_w;
  a.pad_left = s.pad_left;
  a.pixel_step = s.input_channels_last ? s.in_channels : 1;
  a.channel_step = s.input_channels_last ? 1 : s.in_h * s.in_w;
  a.row_step = s.in_w * a.pixel_step;
  // The columns whose windows lie inside the input: [inner_lo, inner_hi).
  const int64_t inner_lo =
      std::min(s.out_w, (s.pad_left + s.stride_w - 1) / s.stride_w);
  const int64_t last_start = s.in_w - s.kernel_w + s.pad_left;  // the last window inside
  const int64_t inner_hi =
      last_start < 0 ? inner_lo
                     : std::max(inner_lo, std::min(s.out_w, last_start / s.stride_w + 1));
  // Output-channel chunks of up to kMaxVectors vectors, each with its block kernel.
  struct Chunk {
    int64_t c;
    int pixels;
    BlockKernel kernel;
  };
  std::vector<Chunk> chunks;
  const int64_t vectors = padded_out_ / kLanes;
  for (int64_t v = 0; v < vectors; v += kMaxVectors) {
    const int count = static_cast<int>(std::min<int64_t>(kMaxVectors, vectors - v));
    chunks.push_back(
        {v * kLanes, pixels_for(count), block_kernel(count, s.stride_w * a.pixel_step, epi)});
  }
  for (int64_t oy = row_begin; oy < row_end; ++oy) {
    a.iy0 = oy * s.stride_h - s.pad_top;
    a.ky_lo = std::max<int64_t>(0, -a.iy0);
    a.ky_hi = std::min<int64_t>(s.kernel_h, s.in_h - a.iy0);
    a.output = output + (oy - row_begin) * s.out_w * s.out_channels;
    edge_pixels(a, 0, inner_lo, 0, s.out_channels);
    int64_t done = inner_hi;
    for (const Chunk& chunk : chunks) {
      const int64_t blocks = (inner_hi - inner_lo) / chunk.pixels;
      chunk.kernel(a, inner_lo, blocks, chunk.c);
      done = std::min(done, inner_lo + blocks * chunk.pixels);
    }
    // Columns the blocks left (chunks of fewer vectors take wider blocks: each chunk's own
    // leftover is redone here for every chunk, the same values).
    edge_pixels(a, done, inner_hi - done, 0, s.out_channels);
    edge_pixels(a, inner_hi, s.out_w - inner_hi, 0, s.out_channels);
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
