// PointwiseConv (see pointwise_conv.h): the register-blocked [pixels, K] x [K, N] kernel.
//
// The pixels go in chunks of kChunk (their K inputs stay in L1 while every column group of the
// output is computed from them); per chunk, each group of up to 4 vectors (64 output channels,
// RowGemm's packing: [K][V * 16] contiguous per group) runs in tiles of P pixels x V vectors of
// accumulators: per input channel, V weight vectors loaded once and P broadcasts, P x V FMAs
// (6 x 4, 8 x 3, 12 x 2, 12 x 1: at most 24 accumulators, plus the V weights and one broadcast,
// so nothing spills out of the 32 registers). The bias starts the accumulators and the post-ops
// run on each before its only store; the channel tail (N not a multiple of 16) is the last
// vector's store mask (the packed weights are zero there). A last group of one vector after a
// full one (N = 72, 144: 64 g + 1 to 16) joins it in tiles of 4 pixels x 5 vectors (20
// accumulators; ET_CPU_POINTWISE_WIDE_TAIL=0: its own 12 x 1 tiles). The chunk's last pixels
// that make no whole tile run one at a time.
//
// run_stream swaps the loops: per column group, every pixel in the same tiles (the group's panel
// of K x 64 weights read from L2 by each tile after the first), while the first tiles each ask
// for K cache lines of the next group's panel (prefetcht1), so that panel arrives from memory
// while this one is computed. Its epilogue adds the residual in registers: a leading add, then
// ReLU / clamp inlined, or any other in-register chain through epilogue16.
#include "backends/cpu/runtime/providers/optimized/kernels/pointwise_conv.h"

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
constexpr int64_t kChunk = 48;  // pixels per chunk: a multiple of every tile's 6, 8, 12
// run_stream's prefetch distance in its first panel (as RowGemm's: ~4 KB ahead of the loads).
constexpr int64_t kAheadFloats = 1024;

using Epi = FusedEpilogue;

// Pixels per tile for V vectors (pointwise_tile_pixels).
constexpr int tile_pixels(int vectors) { return static_cast<int>(pointwise_tile_pixels(vectors)); }

struct TileArgs {
  const float* x;     // the first pixel's K inputs; pixel p at x + p * k
  int64_t k;
  const float* w;     // the group's packed weights, [k][V * 16], on a cache line
  const float* w2 = nullptr;  // run_wide_tiles: the next (one-vector) group's, [k][16]
  const float* bias;  // the group's bias, [V * 16]
  float* y;           // the first pixel's first output channel of the group; pixel p at + p * n
  int64_t n;
  __mmask16 last_mask;  // the group's last vector's store mask
  const PostOps* post_ops;
  float lo;  // Epi::kClamp's bounds
  float hi;
  // run_stream only: the residual at y's offset (or null), the post-ops after a leading add
  // (kClamp with kAdd), and the next group's panel (or null) with its size in cache lines.
  const float* residual = nullptr;
  const PostOps* rest = nullptr;
  const float* next = nullptr;
  int64_t next_lines = 0;
  bool cold = false;  // the group is the first of run_stream's range
};

using TileKernel = void (*)(const TileArgs&, int64_t tiles);

// Every pixel's accumulators start at the bias: acc[p][v] = a.bias[v * 16, v * 16 + 16).
template <int V, int P>
ET_AVX512 inline __attribute__((always_inline)) void init_accumulators(const TileArgs& a,
                                                                       __m512 (&acc)[P][V]) {
#pragma GCC unroll 5
  for (int v = 0; v < V; ++v) {
    const __m512 b = _mm512_loadu_ps(a.bias + v * kLanes);
#pragma GCC unroll 12
    for (int p = 0; p < P; ++p) acc[p][v] = b;
  }
}

// One input channel's step: acc[p][v] += x[p * k] * wv[v] for the tile's P pixels.
template <int V, int P>
ET_AVX512 inline __attribute__((always_inline)) void input_channel_fmas(const float* x, int64_t k,
                                                                        const __m512 (&wv)[V],
                                                                        __m512 (&acc)[P][V]) {
#pragma GCC unroll 12
  for (int p = 0; p < P; ++p) {
    __m512 xb = _mm512_set1_ps(x[p * k]);
    // One broadcast into a register, not an embedded {1to16} load per FMA.
    asm("" : "+v"(xb));
#pragma GCC unroll 5
    for (int v = 0; v < V; ++v) acc[p][v] = _mm512_fmadd_ps(xb, wv[v], acc[p][v]);
  }
}

// One tile's products: acc[p][v] = bias + sum_i x[p * k + i] * w[i][v] over the group's panel
// a.w. kPrefetch (run_stream): each step i also asks for line i of `ahead` (prefetcht1, when not
// null) and, when `cold`, for the panel's own V lines kAheadFloats ahead (prefetcht0).
template <int V, int P, bool kPrefetch>
ET_AVX512 inline __attribute__((always_inline)) void tile_products(const TileArgs& a,
                                                                   const float* x,
                                                                   __m512 (&acc)[P][V],
                                                                   const char* ahead, bool cold) {
  const int64_t k = a.k;
  init_accumulators<V, P>(a, acc);
  const float* w = a.w;
  for (int64_t i = 0; i < k; ++i, w += V * kLanes) {
    if constexpr (kPrefetch) {
      if (ahead != nullptr) _mm_prefetch(ahead + i * 64, _MM_HINT_T1);
      if (cold) {
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) {
          _mm_prefetch(reinterpret_cast<const char*>(w + kAheadFloats + v * kLanes), _MM_HINT_T0);
        }
      }
    }
    __m512 wv[V];
    load_pinned<V, /*kAligned=*/true>(w, wv);
    input_channel_fmas<V, P>(x + i, k, wv, acc);
  }
}

// A tile's epilogue and stores: E on each accumulator (SiLU by silu16_fast), pixel p at
// y + p * a.n, the last vector by a.last_mask.
template <int V, int P, Epi E>
ET_AVX512 inline __attribute__((always_inline)) void store_tile(const TileArgs& a,
                                                                __m512 (&acc)[P][V], float* y) {
  const __m512 lo = _mm512_set1_ps(a.lo);
  const __m512 hi = _mm512_set1_ps(a.hi);
#pragma GCC unroll 12
  for (int p = 0; p < P; ++p) {
    float* out = y + p * a.n;
#pragma GCC unroll 5
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

// `tiles` tiles of P pixels x V vectors from a.x / a.y on.
template <int V, int P, Epi E>
ET_AVX512 void run_tiles(const TileArgs& a, int64_t tiles) {
  const int64_t k = a.k;
  const float* x = a.x;
  float* y = a.y;
  for (int64_t t = 0; t < tiles; ++t, x += P * k, y += P * a.n) {
    __m512 acc[P][V];
    tile_products<V, P, false>(a, x, acc, nullptr, false);
    store_tile<V, P, E>(a, acc, y);
  }
}

// `tiles` tiles of P pixels x 5 vectors: a 4-vector group (a.w, [k][64]) and the one-vector
// group after it (a.w2, [k][16]; N = 64 g + 1 to 16, e.g. 72, 144) as one tile, so the tail's
// 16 columns reuse the pixels' broadcasts instead of a 12 x 1 tile of its own (one weight load
// and 12 broadcasts per 12 FMAs). The groups' biases are contiguous (a.bias, 80 floats).
template <int P, Epi E>
ET_AVX512 void run_wide_tiles(const TileArgs& a, int64_t tiles) {
  constexpr int V = 5;
  const int64_t k = a.k;
  const float* x = a.x;
  float* y = a.y;
  for (int64_t t = 0; t < tiles; ++t, x += P * k, y += P * a.n) {
    __m512 acc[P][V];
    init_accumulators<V, P>(a, acc);
    const float* w = a.w;
    const float* w2 = a.w2;
    for (int64_t i = 0; i < k; ++i, w += 4 * kLanes, w2 += kLanes) {
      __m512 wv[V];
#pragma GCC unroll 5
      for (int v = 0; v < V; ++v) {
        wv[v] = _mm512_load_ps(v < 4 ? w + v * kLanes : w2);
        asm("" : "+v"(wv[v]));
      }
      input_channel_fmas<V, P>(x + i, k, wv, acc);
    }
    store_tile<V, P, E>(a, acc, y);
  }
}

// Pixels per wide tile: 4 x 5 = 20 accumulators.
constexpr int64_t kWideTilePixels = 4;

TileKernel wide_tile_kernel(bool single, Epi epi) {
  return with_fused_epilogue(epi, [single](auto e) -> TileKernel {
    constexpr Epi E = decltype(e)::value;
    return single ? run_wide_tiles<1, E> : run_wide_tiles<4, E>;
  });
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
  return with_fused_epilogue(
      epi, [&](auto e) { return tile_kernel_for<decltype(e)::value>(vectors, single); });
}

// run_stream's `tiles` tiles of P pixels x V vectors, the first being the group's tile number
// `first_tile`. Tile t prefetches lines [t * k, (t + 1) * k) of the next panel. kAdd: the
// residual added before E (kClamp) on a.rest; E == kGeneric: epilogue16 on all post-ops.
template <int V, int P, Epi E, bool kAdd>
ET_AVX512 void stream_tiles(const TileArgs& a, int64_t tiles, int64_t first_tile) {
  const int64_t k = a.k;
  const float* x = a.x;
  float* y = a.y;
  const float* residual = a.residual;
  for (int64_t t = 0; t < tiles; ++t, x += P * k, y += P * a.n) {
    __m512 acc[P][V];
    const int64_t line = (first_tile + t) * k;
    const char* ahead = a.next != nullptr && line < a.next_lines
                            ? reinterpret_cast<const char*>(a.next) + line * 64
                            : nullptr;
    // The thread's first panel, which no earlier group prefetched: its own lines ahead of the
    // loads in the first tile.
    tile_products<V, P, true>(a, x, acc, ahead, a.cold && first_tile + t == 0);
    const __m512 lo = _mm512_set1_ps(a.lo);
    const __m512 hi = _mm512_set1_ps(a.hi);
#pragma GCC unroll 12
    for (int p = 0; p < P; ++p) {
      float* out = y + p * a.n;
      const float* res = residual != nullptr ? residual + p * a.n : nullptr;
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) {
        const __mmask16 mask = v + 1 < V ? static_cast<__mmask16>(0xFFFF) : a.last_mask;
        __m512 r = acc[p][v];
        if constexpr (E == Epi::kGeneric) {
          r = epilogue16(*a.post_ops, r, res != nullptr ? res + v * kLanes : nullptr, mask);
        } else {
          if constexpr (kAdd) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(mask, res + v * kLanes));
          r = fused_epilogue<E>(*a.rest, r, lo, hi);
        }
        _mm512_mask_storeu_ps(out + v * kLanes, mask, r);
      }
    }
    if (residual != nullptr) residual += P * a.n;
  }
}

using StreamKernel = void (*)(const TileArgs&, int64_t tiles, int64_t first_tile);

// run_stream's epilogue: E inlined (ReLU / clamp, hardswish, SiLU), with or without a leading
// add; kGeneric: epilogue16 on all post-ops (a dispatch per vector).
template <int V, int P>
StreamKernel stream_kernel_of(Epi epi, bool add) {
  return with_fused_epilogue(epi, [add](auto e) -> StreamKernel {
    constexpr Epi E = decltype(e)::value;
    if constexpr (E == Epi::kGeneric) {
      return stream_tiles<V, P, E, false>;
    } else {
      return add ? stream_tiles<V, P, E, true> : stream_tiles<V, P, E, false>;
    }
  });
}

template <int V>
StreamKernel stream_kernel_for(bool single, Epi epi, bool add) {
  return single ? stream_kernel_of<V, 1>(epi, add)
                : stream_kernel_of<V, tile_pixels(V)>(epi, add);
}

StreamKernel stream_kernel(int vectors, bool single, Epi epi, bool add) {
  switch (vectors) {
    case 1:
      return stream_kernel_for<1>(single, epi, add);
    case 2:
      return stream_kernel_for<2>(single, epi, add);
    case 3:
      return stream_kernel_for<3>(single, epi, add);
    default:
      return stream_kernel_for<4>(single, epi, add);
  }
}

bool holds_add(const PostOps& post_ops) {
  return std::any_of(post_ops.begin(), post_ops.end(),
                     [](const PostOp& op) { return op.kind == PostOp::Kind::kAdd; });
}

}  // namespace

bool pointwise_stream_supports(int64_t in_channels, int64_t out_channels,
                               const PostOps& post_ops) {
  if (!kernel_switched_on("ET_CPU_STREAM_1X1") || !cpu_has_avx512()) return false;
  if (in_channels < 1 || out_channels < 1) return false;
  return post_ops_in_registers(post_ops);
}

bool stream_tile_fit() { return kernel_switched_on("ET_CPU_STREAM_TILE_FIT"); }

int64_t pointwise_groups(int64_t out_channels) {
  return (out_channels + kPointwiseGroupColumns - 1) / kPointwiseGroupColumns;
}

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
    : packed_(std::move(packed)),
      post_ops_(std::move(post_ops)),
      has_add_(holds_add(post_ops_)),
      inline_activations_(stream_tile_fit()),
      wide_tail_(kernel_switched_on("ET_CPU_POINTWISE_WIDE_TAIL")) {
  if (packed_ == nullptr) throw ProviderError("pointwise conv: no packed weights");
  if (!pointwise_conv_supports(packed_->k, packed_->n, post_ops_) &&
      !pointwise_stream_supports(packed_->k, packed_->n, post_ops_)) {
    throw ProviderError("pointwise conv: these channels or post-ops are not supported here");
  }
}

void PointwiseConv::run(const float* x, int64_t pixels, float* y) const {
  if (has_add_) throw ProviderError("pointwise conv: a residual add runs on run_stream only");
  const RowGemm::Packed& packed = *packed_;
  const int64_t k = packed.k;
  const int64_t n = packed.n;
  const int64_t groups = pointwise_groups(n);
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
      const int vectors = static_cast<int>(pointwise_group_vectors(n, g));
      // The last two groups as one of 5 vectors (a full group, then 1 to 16 columns).
      const bool wide = wide_tail_ && vectors == 4 && g + 2 == groups &&
                        n - (g + 1) * kPointwiseGroupColumns <= kLanes;
      const int64_t tile = wide ? kWideTilePixels : tile_pixels(vectors);
      const int64_t whole = chunk / tile;
      a.w = packed.stream() + packed.group_offset[static_cast<size_t>(g)];
      a.w2 = wide ? packed.stream() + packed.group_offset[static_cast<size_t>(g + 1)] : nullptr;
      a.bias = packed.bias.data() + g * kPointwiseGroupColumns;
      a.last_mask = g + 1 == groups || wide ? tail_mask : static_cast<__mmask16>(0xFFFF);
      a.x = x + p0 * k;
      a.y = y + p0 * n + g * kPointwiseGroupColumns;
      const auto kernel = [&](bool single) {
        return wide ? wide_tile_kernel(single, epi) : tile_kernel(vectors, single, epi);
      };
      if (whole > 0) kernel(false)(a, whole);
      if (chunk > whole * tile) {
        a.x += whole * tile * k;
        a.y += whole * tile * n;
        kernel(true)(a, chunk - whole * tile);
      }
      if (wide) break;
    }
  }
}

void PointwiseConv::run_stream(const float* x, int64_t pixels, float* y, const float* residual,
                               int64_t first, int64_t last, const float* weights) const {
  if (has_add_ && residual == nullptr) {
    throw ProviderError("pointwise conv: post-op add needs a residual tensor, got null");
  }
  const RowGemm::Packed& packed = *packed_;
  const float* stream = weights != nullptr ? weights : packed.stream();
  const int64_t k = packed.k;
  const int64_t n = packed.n;
  const int64_t groups = pointwise_groups(n);
  if (first < 0 || last > groups || first > last) {
    throw ProviderError("pointwise conv: column groups [" + std::to_string(first) + ", " +
                        std::to_string(last) + ") outside [0, " + std::to_string(groups) + ")");
  }
  PostOps rest;
  TileArgs a;
  a.k = k;
  a.n = n;
  a.post_ops = &post_ops_;
  a.rest = &rest;
  // The inlined epilogue (E after a leading add, or E alone), else the generic one. Without
  // stream_tile_fit only ReLU / clamp are inlined (the earlier way).
  Epi epi = Epi::kGeneric;
  bool add = false;
  const auto inlined = [&](Epi e) {
    return e == Epi::kClamp || (inline_activations_ && (e == Epi::kHardswish || e == Epi::kSilu));
  };
  if (!has_add_) {
    const Epi e = fused_epilogue_of(post_ops_, &a.lo, &a.hi);
    if (inlined(e)) {
      epi = e;
      rest = post_ops_;
    }
  } else if (post_ops_.front().kind == PostOp::Kind::kAdd) {
    rest.assign(post_ops_.begin() + 1, post_ops_.end());
    if (!holds_add(rest)) {
      const Epi e = fused_epilogue_of(rest, &a.lo, &a.hi);
      if (inlined(e)) {
        epi = e;
        add = true;
      }
    }
  }
  const int64_t left = n % kLanes;
  const __mmask16 tail_mask =
      left ? static_cast<__mmask16>((1u << left) - 1u) : static_cast<__mmask16>(0xFFFF);
  for (int64_t g = first; g < last; ++g) {
    const int vectors = static_cast<int>(pointwise_group_vectors(n, g));
    const int64_t tile = tile_pixels(vectors);
    const int64_t whole = pixels / tile;
    a.w = stream + packed.group_offset[static_cast<size_t>(g)];
    a.bias = packed.bias.data() + g * kPointwiseGroupColumns;
    a.last_mask = g + 1 == groups ? tail_mask : static_cast<__mmask16>(0xFFFF);
    a.next = g + 1 < last ? stream + packed.group_offset[static_cast<size_t>(g + 1)] : nullptr;
    a.next_lines = a.next != nullptr ? k * pointwise_group_vectors(n, g + 1) : 0;
    a.cold = g == first;
    a.x = x;
    a.y = y + g * kPointwiseGroupColumns;
    a.residual = has_add_ ? residual + g * kPointwiseGroupColumns : nullptr;
    if (whole > 0) stream_kernel(vectors, false, epi, add)(a, whole, 0);
    if (pixels > whole * tile) {
      a.x += whole * tile * k;
      a.y += whole * tile * n;
      if (a.residual != nullptr) a.residual += whole * tile * n;
      stream_kernel(vectors, true, epi, add)(a, pixels - whole * tile, whole);
    }
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
