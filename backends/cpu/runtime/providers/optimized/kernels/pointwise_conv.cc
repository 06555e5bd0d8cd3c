// PointwiseConv (see pointwise_conv.h): the register-blocked [pixels, K] x [K, N] kernel.
//
// The pixels go in chunks of kChunk (their K inputs stay in L1 while every column group of the
// output is computed from them); per chunk, each group of up to 4 vectors (64 output channels,
// RowGemm's packing: [K][V * 16] contiguous per group) runs in tiles of P pixels x V vectors of
// accumulators: per input channel, V weight vectors loaded once and P broadcasts, P x V FMAs
// (6 x 4, 8 x 3, 12 x 2, 12 x 1: at most 24 accumulators, plus the V weights and one broadcast,
// so nothing spills out of the 32 registers). The bias starts the accumulators and the post-ops
// run on each before its only store; the channel tail (N not a multiple of 16) is the last
// vector's store mask (the packed weights are zero there). The chunk's last pixels that make no
// whole tile run one at a time.
#include "backends/cpu/runtime/providers/optimized/kernels/pointwise_conv.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/runtime/providers/optimized/kernels/vector_epilogue.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {
namespace {

constexpr int64_t kLanes = 16;         // floats per AVX-512 vector
constexpr int64_t kGroupColumns = 64;  // RowGemm's column groups: 4 vectors
constexpr int64_t kChunk = 48;         // pixels per chunk: a multiple of every tile's 6, 8, 12

using Epi = FusedEpilogue;

// Pixels per tile for V vectors: V x P <= 24 accumulators.
constexpr int tile_pixels(int vectors) {
  return vectors == 4 ? 6 : vectors == 3 ? 8 : 12;
}

struct TileArgs {
  const float* x;     // the first pixel's K inputs; pixel p at x + p * k
  int64_t k;
  const float* w;     // the group's packed weights, [k][V * 16], on a cache line
  const float* bias;  // the group's bias, [V * 16]
  float* y;           // the first pixel's first output channel of the group; pixel p at + p * n
  int64_t n;
  __mmask16 last_mask;  // the group's last vector's store mask
  const PostOps* post_ops;
  float lo;  // Epi::kClamp's bounds
  float hi;
};

using TileKernel = void (*)(const TileArgs&, int64_t tiles);

// `tiles` tiles of P pixels x V vectors from a.x / a.y on.
template <int V, int P, Epi E>
ET_AVX512 void run_tiles(const TileArgs& a, int64_t tiles) {
  const int64_t k = a.k;
  const float* x = a.x;
  float* y = a.y;
  for (int64_t t = 0; t < tiles; ++t, x += P * k, y += P * a.n) {
    __m512 acc[P][V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const __m512 b = _mm512_loadu_ps(a.bias + v * kLanes);
#pragma GCC unroll 12
      for (int p = 0; p < P; ++p) acc[p][v] = b;
    }
    const float* w = a.w;
    for (int64_t i = 0; i < k; ++i, w += V * kLanes) {
      __m512 wv[V];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) {
        wv[v] = _mm512_load_ps(w + v * kLanes);
        // Keep each weight vector in a register: GCC would otherwise fold the load into every
        // FMA that uses it (P loads instead of one).
        asm("" : "+v"(wv[v]));
      }
#pragma GCC unroll 12
      for (int p = 0; p < P; ++p) {
        __m512 xb = _mm512_set1_ps(x[p * k + i]);
        // One broadcast into a register, not an embedded {1to16} load per FMA.
        asm("" : "+v"(xb));
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[p][v] = _mm512_fmadd_ps(xb, wv[v], acc[p][v]);
      }
    }
    const __m512 lo = _mm512_set1_ps(a.lo);
    const __m512 hi = _mm512_set1_ps(a.hi);
#pragma GCC unroll 12
    for (int p = 0; p < P; ++p) {
      float* out = y + p * a.n;
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) {
        __m512 r;
        if constexpr (E == Epi::kSilu) {
          r = silu16_fast(acc[p][v]);
        } else {
          r = fused_epilogue<E>(*a.post_ops, acc[p][v], lo, hi);
        }
        if (v + 1 < V) {
          _mm512_storeu_ps(out + v * kLanes, r);
        } else {
          _mm512_mask_storeu_ps(out + v * kLanes, a.last_mask, r);
        }
      }
    }
  }
}

template <int V, Epi E>
TileKernel tile_kernel_of(bool single) {
  return single ? run_tiles<V, 1, E> : run_tiles<V, tile_pixels(V), E>;
}

template <Epi E>
TileKernel tile_kernel_for(int vectors, bool single) {
  switch (vectors) {
    case 1:
      return tile_kernel_of<1, E>(single);
    case 2:
      return tile_kernel_of<2, E>(single);
    case 3:
      return tile_kernel_of<3, E>(single);
    default:
      return tile_kernel_of<4, E>(single);
  }
}

TileKernel tile_kernel(int vectors, bool single, Epi epi) {
  switch (epi) {
    case Epi::kClamp:
      return tile_kernel_for<Epi::kClamp>(vectors, single);
    case Epi::kHardswish:
      return tile_kernel_for<Epi::kHardswish>(vectors, single);
    case Epi::kSilu:
      return tile_kernel_for<Epi::kSilu>(vectors, single);
    default:
      return tile_kernel_for<Epi::kGeneric>(vectors, single);
  }
}

}  // namespace

bool pointwise_conv_supports(int64_t in_channels, int64_t out_channels, const PostOps& post_ops) {
  if (!kernel_switched_on("ET_CPU_OWN_EXPAND") || !cpu_has_avx512()) return false;
  if (in_channels < 1 || out_channels < 1) return false;
  return post_ops_in_registers_without_add(post_ops);
}

bool own_expand_wanted(int64_t in_channels, int64_t out_channels, const PostOps& post_ops) {
  if (!pointwise_conv_supports(in_channels, out_channels, post_ops)) return false;
  const SwitchReach reach = switch_reach("ET_CPU_OWN_EXPAND");
  return reach == SwitchReach::kEverywhere || in_channels <= kOwnExpandMaxK;
}

PointwiseConv::PointwiseConv(std::shared_ptr<const RowGemm::Packed> packed, PostOps post_ops)
    : packed_(std::move(packed)), post_ops_(std::move(post_ops)) {
  if (packed_ == nullptr) throw ProviderError("pointwise conv: no packed weights");
  if (!pointwise_conv_supports(packed_->k, packed_->n, post_ops_)) {
    throw ProviderError("pointwise conv: these channels or post-ops are not supported here");
  }
}

void PointwiseConv::run(const float* x, int64_t pixels, float* y) const {
  const RowGemm::Packed& packed = *packed_;
  const int64_t k = packed.k;
  const int64_t n = packed.n;
  const int64_t groups = (n + kGroupColumns - 1) / kGroupColumns;
  TileArgs a;
  a.k = k;
  a.n = n;
  a.post_ops = &post_ops_;
  const Epi epi = fused_epilogue_of(post_ops_, &a.lo, &a.hi);
  const int64_t left = n % kLanes;
  const __mmask16 tail_mask =
      left ? static_cast<__mmask16>((1u << left) - 1u) : static_cast<__mmask16>(0xFFFF);
  for (int64_t p0 = 0; p0 < pixels; p0 += kChunk) {
    const int64_t chunk = std::min(kChunk, pixels - p0);
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t columns = std::min(kGroupColumns, n - g * kGroupColumns);
      const int vectors = static_cast<int>((columns + kLanes - 1) / kLanes);
      const int64_t tile = tile_pixels(vectors);
      const int64_t whole = chunk / tile;
      a.w = packed.weights.data() + packed.group_offset[static_cast<size_t>(g)];
      a.bias = packed.bias.data() + g * kGroupColumns;
      a.last_mask = g + 1 == groups ? tail_mask : static_cast<__mmask16>(0xFFFF);
      a.x = x + p0 * k;
      a.y = y + p0 * n + g * kGroupColumns;
      if (whole > 0) tile_kernel(vectors, false, epi)(a, whole);
      if (chunk > whole * tile) {
        a.x += whole * tile * k;
        a.y += whole * tile * n;
        tile_kernel(vectors, true, epi)(a, chunk - whole * tile);
      }
    }
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
