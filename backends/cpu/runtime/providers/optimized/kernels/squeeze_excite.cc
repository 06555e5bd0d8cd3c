// SqueezeExcite (see squeeze_excite.h): repacking, the pool and the two matrix-vector products.
#include "backends/cpu/runtime/providers/optimized/kernels/squeeze_excite.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/runtime/providers/optimized/common/slices.h"
#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/common/work_pool.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_epilogue.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {
namespace {

constexpr int64_t kLanes = 16;  // floats per AVX-512 vector
constexpr int kChunk = 4;       // output vectors per pass of a product (accumulators)
constexpr int64_t kAhead = 8;   // weight rows a product prefetches ahead of its loads
// Channels-last input of an image is pooled in pixel slices of at least this many bytes (1 to
// kMostSlices, whatever the threads: the sums do not depend on where they run). The layer
// before wrote the image in row bands over the pool's threads, so slice t is mostly in thread
// t's own cache (splitting over channels instead measured slower: half of every row from the
// other core).
constexpr int64_t kSliceBytes = 128 * 1024;
constexpr int64_t kMostSlices = 4;
// KiB a phase reads (per call) before it is split over the pool by default: a pool job costs a
// few us here, a single-threaded phase reads ~20-40 GB/s from L2 / L3 (ET_CPU_SE_SPLIT).
constexpr int64_t kSplitKiB = 256;
constexpr int64_t kMultiplySplitKiB = 64;  // the fused gate multiply's (bytes read + written)

inline __mmask16 lanes_from(int64_t c, int64_t count) {
  const int64_t left = count - c;
  return left >= kLanes ? static_cast<__mmask16>(0xFFFF)
                        : static_cast<__mmask16>((1u << left) - 1u);
}

// The sums of channels [begin, end) over `pixels` pixels of a channels-last image
// ([pixels][channels]) times `factor` into `out` (indexed by channel, padded to a whole
// vector), 4 vectors of channels per pass over the pixels.
ET_AVX512 void channel_sums(const float* x, int64_t pixels, int64_t channels, int64_t begin,
                            int64_t end, float factor, float* out) {
  const __m512 scale = _mm512_set1_ps(factor);
  for (int64_t c = begin; c < end; c += kChunk * kLanes) {
    __m512 acc[kChunk];
    __mmask16 mask[kChunk];
#pragma GCC unroll 4
    for (int v = 0; v < kChunk; ++v) {
      acc[v] = _mm512_setzero_ps();
      const int64_t at = c + v * kLanes;
      mask[v] = at < end ? lanes_from(at, std::min(end, channels)) : static_cast<__mmask16>(0);
    }
    const float* p = x + c;
    for (int64_t i = 0; i < pixels; ++i, p += channels) {
#pragma GCC unroll 4
      for (int v = 0; v < kChunk; ++v) {
        acc[v] = _mm512_add_ps(acc[v], _mm512_maskz_loadu_ps(mask[v], p + v * kLanes));
      }
    }
#pragma GCC unroll 4
    for (int v = 0; v < kChunk; ++v) {
      if (mask[v] != 0) _mm512_storeu_ps(out + c + v * kLanes, _mm512_mul_ps(acc[v], scale));
    }
  }
}

// The means of rows [begin, end) of one plain image ([channels][pixels]) into `out`.
ET_AVX512 void row_means16(const float* x, int64_t pixels, int64_t begin, int64_t end,
                           float* out) {
  const float scale = 1.0f / static_cast<float>(pixels);
  for (int64_t c = begin; c < end; ++c) {
    const float* row = x + c * pixels;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < pixels; i += kLanes) {
      acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(lanes_from(i, pixels), row + i));
    }
    out[c] = horizontal16<Horizontal::kSum>(acc) * scale;
  }
}

// y[0, n) = post(bias + x[0, k) . w) with w [k][padded n], V vectors of outputs from `j`.
template <int V>
ET_AVX512 void product_chunk(const float* x, int64_t k, const float* w, int64_t padded,
                             const float* bias, const PostOps& post, int64_t n, int64_t j,
                             float* y) {
  __m512 acc[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) acc[v] = _mm512_loadu_ps(bias + j + v * kLanes);
  const float* row = w + j;
  // The weights come from L3 or memory (the convolutions before evicted them): each row's
  // vectors are requested kAhead rows before they are read (rows are `padded` floats apart).
  const int64_t ahead = kAhead * padded;
  for (int64_t i = 0; i < k; ++i, row += padded) {
    const __m512 xi = _mm512_set1_ps(x[i]);
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      _mm_prefetch(reinterpret_cast<const char*>(row + ahead + v * kLanes), _MM_HINT_T0);
      acc[v] = _mm512_fmadd_ps(xi, _mm512_loadu_ps(row + v * kLanes), acc[v]);
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) {
    const int64_t at = j + v * kLanes;
    const __mmask16 mask = lanes_from(at, n);
    _mm512_mask_storeu_ps(y + at, mask, epilogue16(post, acc[v], nullptr, mask));
  }
}

// product_chunk over output vectors [first, vectors).
ET_AVX512 void product(const float* x, int64_t k, const float* w, int64_t padded,
                       const float* bias, const PostOps& post, int64_t n, int64_t first,
                       int64_t vectors, float* y) {
  int64_t v = first;
  for (; v + kChunk <= vectors; v += kChunk) {
    product_chunk<kChunk>(x, k, w, padded, bias, post, n, v * kLanes, y);
  }
  switch (vectors - v) {
    case 3:
      product_chunk<3>(x, k, w, padded, bias, post, n, v * kLanes, y);
      break;
    case 2:
      product_chunk<2>(x, k, w, padded, bias, post, n, v * kLanes, y);
      break;
    case 1:
      product_chunk<1>(x, k, w, padded, bias, post, n, v * kLanes, y);
      break;
    default:
      break;
  }
}

// out[r][i] = x[r][i] * g[i] (channels-last rows of `width` channels) or x[r][i] * g[r] (plain
// rows of `width` pixels) for rows [begin, end) of one image.
ET_AVX512 void scale_rows(const float* x, const float* g, bool channels_last, int64_t width,
                          int64_t begin, int64_t end, float* out) {
  for (int64_t r = begin; r < end; ++r) {
    const float* in = x + r * width;
    float* to = out + r * width;
    const __m512 shared = _mm512_set1_ps(channels_last ? 0.0f : g[r]);
    for (int64_t i = 0; i < width; i += kLanes) {
      const __mmask16 mask = lanes_from(i, width);
      const __m512 scale = channels_last ? _mm512_maskz_loadu_ps(mask, g + i) : shared;
      _mm512_mask_storeu_ps(to + i, mask,
                            _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, in + i), scale));
    }
  }
}

// torch's [rows, cols, 1, 1] transposed to [cols][rows rounded up to 16], zero-padded.
WeightVector<float> transposed(const float* w, int64_t rows, int64_t cols, int64_t padded) {
  WeightVector<float> out(static_cast<size_t>(cols * padded), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      out[static_cast<size_t>(c * padded + r)] = w[r * cols + c];
    }
  }
  return out;
}

WeightVector<float> padded_bias(const float* bias, int64_t count, int64_t padded) {
  WeightVector<float> out(static_cast<size_t>(padded), 0.0f);
  if (bias) std::copy(bias, bias + count, out.begin());
  return out;
}

}  // namespace

bool squeeze_excite_supports(const PostOps& act, const PostOps& gate) {
  // On by default since its phases share the pool (ET_CPU_OWN_SE=0: the mean and the two
  // row_gemm products as before; provider README).
  return kernel_switched_on("ET_CPU_OWN_SE") && cpu_has_avx512() &&
         post_ops_in_registers_without_add(act) && post_ops_in_registers_without_add(gate);
}

std::shared_ptr<const SqueezeExciteWeights> pack_squeeze_excite(int64_t channels,
                                                                int64_t squeezed,
                                                                const float* reduce,
                                                                const float* reduce_bias,
                                                                const float* expand,
                                                                const float* expand_bias) {
  auto packed = std::make_shared<SqueezeExciteWeights>();
  packed->padded_channels = (channels + kLanes - 1) / kLanes * kLanes;
  packed->padded_squeezed = (squeezed + kLanes - 1) / kLanes * kLanes;
  packed->reduce = transposed(reduce, squeezed, channels, packed->padded_squeezed);
  packed->reduce_bias = padded_bias(reduce_bias, squeezed, packed->padded_squeezed);
  packed->expand = transposed(expand, channels, squeezed, packed->padded_channels);
  packed->expand_bias = padded_bias(expand_bias, channels, packed->padded_channels);
  return packed;
}

SqueezeExcite::SqueezeExcite(int64_t channels, int64_t squeezed, const float* reduce,
                             const float* reduce_bias, PostOps act, const float* expand,
                             const float* expand_bias, PostOps gate, WeightCache* cache)
    : channels_(channels),
      squeezed_(squeezed),
      act_(std::move(act)),
      gate_(std::move(gate)),
      split_bytes_(split_bytes_from_environment()) {
  if (!squeeze_excite_supports(act_, gate_) || channels < 1 || squeezed < 1) {
    throw ProviderError("squeeze-excite: these counts or post-ops are not supported here");
  }
  if (reduce == nullptr || expand == nullptr) throw ProviderError("squeeze-excite: no weight");
  weights_ = cached_squeeze_excite_weights(cache, channels, squeezed, reduce, reduce_bias, expand,
                                           expand_bias);
  padded_channels_ = weights_->padded_channels;
  padded_squeezed_ = weights_->padded_squeezed;
}

int64_t SqueezeExcite::split_bytes_from_environment() {
  constexpr int64_t kAll = -1;  // "all": always
  const int64_t kib =
      switch_number_or_all("ET_CPU_SE_SPLIT", kSplitKiB, 0, int64_t{1} << 20, kAll);
  if (kib == kAll) return 0;
  return kib > 0 ? kib * 1024 : -1;  // "0": never
}

void SqueezeExcite::run(const float* x, int64_t batch, int64_t pixels, bool channels_last,
                        float* gate, WorkPool* pool, float* scaled,
                        bool scaled_channels_last) const {
  if (batch < 1 || pixels < 1) return;
  const int64_t threads = pool != nullptr && split_bytes_ >= 0 ? pool->size() : 1;
  // pooled [batch][padded_channels_], then hidden [batch][padded_squeezed_]; the caller's
  // thread owns it, the pool's tasks write their parts through the pointers.
  thread_local std::vector<float> scratch;
  const size_t need = static_cast<size_t>(batch * (padded_channels_ + padded_squeezed_));
  if (scratch.size() < need) scratch.resize(need);
  float* pooled = scratch.data();
  float* hidden = pooled + batch * padded_channels_;
  // Runs fn(image, begin, end) over [0, units) of every image: in one piece per image, or, when
  // the phase reads enough (`bytes` per image, split_bytes_ in all) to pay for a pool job, in
  // one slice per thread (ET_CPU_SE_SPLIT=all: always, and two per thread), the images'
  // slices as the pool's tasks.
  auto phase = [&](int64_t units, int64_t bytes, auto&& fn, int64_t from = -1) {
    int64_t parts = 1;
    if (threads > 1 && batch * bytes >= std::min(split_bytes_, from < 0 ? split_bytes_ : from)) {
      parts = std::min<int64_t>(units, split_bytes_ == 0 ? 2 * threads : threads);
    }
    const int64_t tasks = batch * parts;
    auto task = [&](size_t index, int) {
      const size_t count = static_cast<size_t>(parts);
      const int64_t n = static_cast<int64_t>(index / count);
      const auto [begin, end] = slice_of(units, count, index % count);
      if (begin < end) fn(n, begin, end);
    };
    if (tasks == 1 || threads == 1) {
      for (int64_t t = 0; t < tasks; ++t) task(static_cast<size_t>(t), 0);
    } else {
      pool->run(static_cast<size_t>(tasks), task);
    }
  };
  const int64_t image = pixels * channels_;
  const int64_t image_bytes = image * static_cast<int64_t>(sizeof(float));
  if (channels_last) {
    const int64_t slices =
        std::clamp<int64_t>(image_bytes / kSliceBytes, 1, std::min(kMostSlices, pixels));
    const float inverse = 1.0f / static_cast<float>(pixels);
    if (slices == 1) {
      phase(1, image_bytes, [&](int64_t n, int64_t, int64_t) {
        channel_sums(x + n * image, pixels, channels_, 0, channels_, inverse,
                     pooled + n * padded_channels_);
      });
    } else {
      // Each slice's sums into sums [batch][slices][padded channels], then added in order.
      thread_local std::vector<float> partial;
      const int64_t row = padded_channels_;
      const size_t partial_size = static_cast<size_t>(batch * slices * row);
      if (partial.size() < partial_size) partial.resize(partial_size);
      float* sums = partial.data();
      phase(slices, image_bytes, [&](int64_t n, int64_t begin, int64_t end) {
        for (int64_t slice = begin; slice < end; ++slice) {
          const auto [first, last] = slice_of(pixels, static_cast<size_t>(slices),
                                              static_cast<size_t>(slice));
          channel_sums(x + n * image + first * channels_, last - first, channels_, 0,
                       channels_, 1.0f, sums + (n * slices + slice) * row);
        }
      });
      for (int64_t n = 0; n < batch; ++n) {
        float* out = pooled + n * row;
        const float* first = sums + n * slices * row;
        for (int64_t c = 0; c < channels_; ++c) {
          float total = first[c];
          for (int64_t slice = 1; slice < slices; ++slice) total += first[slice * row + c];
          out[c] = total * inverse;
        }
      }
    }
  } else {
    phase(channels_, image_bytes, [&](int64_t n, int64_t begin, int64_t end) {
      row_means16(x + n * image, pixels, begin, end, pooled + n * padded_channels_);
    });
  }
  const auto weight_bytes = [](const WeightVector<float>& w) {
    return static_cast<int64_t>(w.size() * sizeof(float));
  };
  const WeightVector<float>& reduce_ = weights_->reduce;
  const WeightVector<float>& reduce_bias_ = weights_->reduce_bias;
  const WeightVector<float>& expand_ = weights_->expand;
  const WeightVector<float>& expand_bias_ = weights_->expand_bias;
  phase(padded_squeezed_ / kLanes, weight_bytes(reduce_),
        [&](int64_t n, int64_t begin, int64_t end) {
          product(pooled + n * padded_channels_, channels_, reduce_.data(), padded_squeezed_,
                  reduce_bias_.data(), act_, squeezed_, begin, end,
                  hidden + n * padded_squeezed_);
        });
  phase(padded_channels_ / kLanes, weight_bytes(expand_),
        [&](int64_t n, int64_t begin, int64_t end) {
          product(hidden + n * padded_squeezed_, squeezed_, expand_.data(), padded_channels_,
                  expand_bias_.data(), gate_, channels_, begin, end, gate + n * channels_);
        });
  if (scaled == nullptr) return;
  if (scaled_channels_last != channels_last) {
    // Consumers wanted the other layout (rare): one scalar pass that also transposes.
    for (int64_t n = 0; n < batch; ++n) {
      const float* g = gate + n * channels_;
      for (int64_t p = 0; p < pixels; ++p) {
        for (int64_t c = 0; c < channels_; ++c) {
          const int64_t nhwc = n * image + p * channels_ + c;
          const int64_t nchw = n * image + c * pixels + p;
          if (channels_last) {
            scaled[nchw] = x[nhwc] * g[c];
          } else {
            scaled[nhwc] = x[nchw] * g[c];
          }
        }
      }
    }
    return;
  }
  // Reads and writes an image each: rows of pixels (or channels) over the threads from
  // kMultiplySplitKiB (a lower bar than the other phases: on the calling thread, MobileNetV3's
  // 7x7x576 products cost as much as the separate multiply on the pool).
  const int64_t rows = channels_last ? pixels : channels_;
  const int64_t width = channels_last ? channels_ : pixels;
  phase(
      rows, 2 * image_bytes,
      [&](int64_t n, int64_t begin, int64_t end) {
        scale_rows(x + n * image, gate + n * channels_, channels_last, width, begin, end,
                   scaled + n * image);
      },
      kMultiplySplitKiB * 1024);
}

}  // namespace onednn
}  // namespace et_cpu_plugin
