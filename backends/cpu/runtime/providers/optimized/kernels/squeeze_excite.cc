// SqueezeExcite (see squeeze_excite.h): repacking, the pool and the two matrix-vector products.
#include "backends/cpu/runtime/providers/optimized/kernels/squeeze_excite.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/runtime/providers/optimized/kernels/vector_epilogue.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {
namespace {

constexpr int64_t kLanes = 16;  // floats per AVX-512 vector
constexpr int kChunk = 4;       // output vectors per pass of a product (accumulators)

inline __mmask16 lanes_from(int64_t c, int64_t count) {
  const int64_t left = count - c;
  return left >= kLanes ? static_cast<__mmask16>(0xFFFF)
                        : static_cast<__mmask16>((1u << left) - 1u);
}

// The channel means of one channels-last image ([pixels][channels]) into `out` (padded to a
// whole vector), 4 vectors of channels per pass over the pixels.
ET_AVX512 void channel_means(const float* x, int64_t pixels, int64_t channels, float* out) {
  const __m512 scale = _mm512_set1_ps(1.0f / static_cast<float>(pixels));
  for (int64_t c = 0; c < channels; c += kChunk * kLanes) {
    __m512 acc[kChunk];
    __mmask16 mask[kChunk];
#pragma GCC unroll 4
    for (int v = 0; v < kChunk; ++v) {
      acc[v] = _mm512_setzero_ps();
      const int64_t at = c + v * kLanes;
      mask[v] = at < channels ? lanes_from(at, channels) : static_cast<__mmask16>(0);
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

// The row means of one plain image ([channels][pixels]) into `out`.
ET_AVX512 void row_means16(const float* x, int64_t pixels, int64_t channels, float* out) {
  const float scale = 1.0f / static_cast<float>(pixels);
  for (int64_t c = 0; c < channels; ++c) {
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
  for (int64_t i = 0; i < k; ++i, row += padded) {
    const __m512 xi = _mm512_set1_ps(x[i]);
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
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

ET_AVX512 void product(const float* x, int64_t k, const float* w, int64_t padded,
                       const float* bias, const PostOps& post, int64_t n, float* y) {
  const int64_t vectors = padded / kLanes;
  int64_t v = 0;
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

bool no_add(const PostOps& post_ops) {
  return std::none_of(post_ops.begin(), post_ops.end(),
                      [](const PostOp& op) { return op.kind == PostOp::Kind::kAdd; });
}

// torch's [rows, cols, 1, 1] transposed to [cols][rows rounded up to 16], zero-padded.
std::vector<float> transposed(const float* w, int64_t rows, int64_t cols, int64_t padded) {
  std::vector<float> out(static_cast<size_t>(cols * padded), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      out[static_cast<size_t>(c * padded + r)] = w[r * cols + c];
    }
  }
  return out;
}

std::vector<float> padded_bias(const float* bias, int64_t count, int64_t padded) {
  std::vector<float> out(static_cast<size_t>(padded), 0.0f);
  if (bias) std::copy(bias, bias + count, out.begin());
  return out;
}

}  // namespace

bool squeeze_excite_supports(const PostOps& act, const PostOps& gate) {
  // Opt-in: single-threaded, it measured slower than the pool and the two row_gemm products it
  // replaces (provider README), which run on the pool's threads.
  const char* value = std::getenv("ET_CPU_OWN_SE");
  const bool on = value != nullptr && std::strcmp(value, "1") == 0;
  return on && cpu_has_avx512() && no_add(act) &&
         no_add(gate) && post_ops_in_registers(act) && post_ops_in_registers(gate);
}

SqueezeExcite::SqueezeExcite(int64_t channels, int64_t squeezed, const float* reduce,
                             const float* reduce_bias, PostOps act, const float* expand,
                             const float* expand_bias, PostOps gate)
    : channels_(channels), squeezed_(squeezed), act_(std::move(act)), gate_(std::move(gate)) {
  if (!squeeze_excite_supports(act_, gate_) || channels < 1 || squeezed < 1) {
    throw ProviderError("squeeze-excite: these counts or post-ops are not supported here");
  }
  if (reduce == nullptr || expand == nullptr) throw ProviderError("squeeze-excite: no weight");
  padded_channels_ = (channels + kLanes - 1) / kLanes * kLanes;
  padded_squeezed_ = (squeezed + kLanes - 1) / kLanes * kLanes;
  reduce_ = transposed(reduce, squeezed, channels, padded_squeezed_);
  reduce_bias_ = padded_bias(reduce_bias, squeezed, padded_squeezed_);
  expand_ = transposed(expand, channels, squeezed, padded_channels_);
  expand_bias_ = padded_bias(expand_bias, channels, padded_channels_);
}

void SqueezeExcite::run(const float* x, int64_t batch, int64_t pixels, bool channels_last,
                        float* gate) const {
  std::vector<float> pooled(static_cast<size_t>(padded_channels_));
  std::vector<float> hidden(static_cast<size_t>(padded_squeezed_));
  const int64_t image = pixels * channels_;
  for (int64_t n = 0; n < batch; ++n) {
    if (channels_last) {
      channel_means(x + n * image, pixels, channels_, pooled.data());
    } else {
      row_means16(x + n * image, pixels, channels_, pooled.data());
    }
    product(pooled.data(), channels_, reduce_.data(), padded_squeezed_, reduce_bias_.data(), act_,
            squeezed_, hidden.data());
    product(hidden.data(), squeezed_, expand_.data(), padded_channels_, expand_bias_.data(),
            gate_, channels_, gate + n * channels_);
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
