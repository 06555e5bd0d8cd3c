// WinogradConv (see winograd_conv.h): the weight transform, and the three steps of a run over a
// band of tiles: input transform, the 16 products, output transform.
//
// A task owns a range of tile groups (14 consecutive tiles of the batch, row after row, image
// after image) and a range of output-channel blocks. It walks its groups in bands whose
// transformed input V and products M fit a small per-thread scratch (kBandBytes: one group from
// 32 channels on, so the scratch stays in L2 from band to band and from one convolution to the
// next, instead of coming from memory after time away): V is computed once per band,
// then for each output-channel block and each of the 16 positions one register-blocked product
// per tile group (14 tiles x 2 vectors of output channels, each V value a broadcast FMA operand,
// like StreamConv's pixel block) reads the block's U rows for that position (L1 while the band's
// groups use them), and the block's output transform reads M back and stores the outputs.
//
// Layouts in the scratch: V [position][group][input chunk of 16][14 tiles][16 channels], so a
// product's broadcasts sit at fixed offsets from one pointer; M [position][tile][block width].
// Tiles past the output's edge (odd extents) read zeros beyond the input and store only their
// pixels inside the output.
#include "backends/cpu/runtime/providers/optimized/kernels/winograd_conv.h"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_epilogue.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {
namespace {

constexpr int64_t kLanes = 16;      // floats per AVX-512 vector
constexpr int64_t kPositions = 16;  // 4x4 transformed values per tile
constexpr int64_t kGroupTiles = WinogradConv::kGroupTiles;
constexpr int64_t kBlockChannels = 32;
// V and M of a band at most (ET_CPU_WINOGRAD_BAND_KIB, read at prepare, for measuring): one
// tile group from 32 channels on. Warm, 32 KiB to 1 MiB measured alike at 16 to 256 channels;
// after time away the scratch's lines come from memory at their first write, so a small band
// that the next band and the next convolution write again in L2 is faster (provider README).
constexpr int64_t kBandBytes = int64_t{64} << 10;
// The default rule's largest in_channels x out_channels (transformed weights of 2 MiB).
constexpr int64_t kDefaultMaxChannelProduct = 128 * 256;

// M[tile p][0, 16 V) = sum over the input channels of V[chunk][p][c] * U[chunk * 16 + c][...]
// for tiles [0, P) of one group at one position; `v` the group's [chunk][14][16] values, `u` the
// position's [chunks * 16][16 V] weights, `m` the group's first tile in M (16 V floats a tile).
template <int P, int V>
ET_AVX512 __attribute__((noinline)) void group_product(const float* v, const float* u,
                                                       int64_t chunks, float* m) {
  __m512 acc[P][V];
#pragma GCC unroll 14
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 2
    for (int j = 0; j < V; ++j) acc[p][j] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < chunks; ++k, v += kGroupTiles * kLanes, u += kLanes * V * kLanes) {
#pragma GCC unroll 16
    for (int c = 0; c < kLanes; ++c) {
      __m512 wv[V];
      load_pinned<V>(u + c * V * kLanes, wv);
#pragma GCC unroll 14
      for (int p = 0; p < P; ++p) {
        const __m512 xb = _mm512_set1_ps(v[p * kLanes + c]);
#pragma GCC unroll 2
        for (int j = 0; j < V; ++j) acc[p][j] = _mm512_fmadd_ps(xb, wv[j], acc[p][j]);
      }
    }
  }
#pragma GCC unroll 14
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 2
    for (int j = 0; j < V; ++j) _mm512_storeu_ps(m + (p * V + j) * kLanes, acc[p][j]);
  }
}

using GroupProduct = void (*)(const float*, const float*, int64_t, float*);

// [tiles - 1][vectors - 1] for 1 to 14 tiles and 1 or 2 vectors.
template <size_t... I>
constexpr std::array<std::array<GroupProduct, 2>, sizeof...(I)> product_table(
    std::index_sequence<I...>) {
  return {{{group_product<static_cast<int>(I) + 1, 1>,
            group_product<static_cast<int>(I) + 1, 2>}...}};
}
constexpr auto kProducts = product_table(std::make_index_sequence<kGroupTiles>{});

// Where a tile of the batch sits (its image and its top-left output pixel), walked tile after
// tile without a division per tile.
struct TileWalk {
  TileWalk(const WinogradShape& s, int64_t tile)
      : tiles_w((s.out_w + 1) / 2), tiles_h((s.out_h + 1) / 2) {
    image = tile / (tiles_h * tiles_w);
    const int64_t rest = tile - image * tiles_h * tiles_w;
    ty = rest / tiles_w;
    tx = rest - ty * tiles_w;
  }
  int64_t y() const { return 2 * ty; }
  int64_t x() const { return 2 * tx; }
  void next() {
    if (++tx < tiles_w) return;
    tx = 0;
    if (++ty < tiles_h) return;
    ty = 0;
    ++image;
  }
  int64_t tiles_w;
  int64_t tiles_h;
  int64_t image = 0;
  int64_t ty = 0;
  int64_t tx = 0;
};

// V for tiles [tile_begin, tile_begin + count) of the batch into `v` (a band of `groups` tile
// groups): each tile's 4x4 input patch from (y - 1, x - 1), zeros outside the input and past the
// input channels (masked loads: a masked-off lane reads nothing), as B^T d B.
ET_AVX512 void transform_input(const WinogradShape& s, const float* input, int64_t tile_begin,
                               int64_t count, int64_t padded_in, int64_t groups, float* v) {
  const int64_t chunks = padded_in / kLanes;
  const int64_t ic = s.in_channels;
  const int64_t position_stride = groups * kGroupTiles * padded_in;
  const __mmask16 tail = ic % kLanes == 0
                             ? static_cast<__mmask16>(0xFFFF)
                             : static_cast<__mmask16>((1u << (ic % kLanes)) - 1);
  TileWalk t(s, tile_begin);
  for (int64_t i = 0; i < count; ++i, t.next()) {
    const float* image = input + t.image * s.in_h * s.in_w * ic;
    // Each of the 16 patch pixels: its input (the image's first pixel when outside: never read)
    // and whether it is inside.
    const float* at[16];
    bool inside[16];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const int64_t iy = t.y() - 1 + r;
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const int64_t ix = t.x() - 1 + c;
        inside[r * 4 + c] = iy >= 0 && iy < s.in_h && ix >= 0 && ix < s.in_w;
        at[r * 4 + c] = inside[r * 4 + c] ? image + (iy * s.in_w + ix) * ic : image;
      }
    }
    float* to = v + (i / kGroupTiles) * kGroupTiles * padded_in + (i % kGroupTiles) * kLanes;
    for (int64_t k = 0; k < chunks; ++k, to += kGroupTiles * kLanes) {
      const __mmask16 channels = k == chunks - 1 ? tail : static_cast<__mmask16>(0xFFFF);
      __m512 d[4][4];
#pragma GCC unroll 16
      for (int q = 0; q < 16; ++q) {
        const __mmask16 mask = inside[q] ? channels : static_cast<__mmask16>(0);
        d[q / 4][q % 4] = _mm512_maskz_loadu_ps(mask, at[q] + k * kLanes);
      }
      // B^T d: rows d0 - d2, d1 + d2, d2 - d1, d1 - d3.
      __m512 e[4][4];
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        e[0][c] = _mm512_sub_ps(d[0][c], d[2][c]);
        e[1][c] = _mm512_add_ps(d[1][c], d[2][c]);
        e[2][c] = _mm512_sub_ps(d[2][c], d[1][c]);
        e[3][c] = _mm512_sub_ps(d[1][c], d[3][c]);
      }
      // (B^T d) B: the same on the columns.
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        float* row = to + r * 4 * position_stride;
        _mm512_storeu_ps(row, _mm512_sub_ps(e[r][0], e[r][2]));
        _mm512_storeu_ps(row + position_stride, _mm512_add_ps(e[r][1], e[r][2]));
        _mm512_storeu_ps(row + 2 * position_stride, _mm512_sub_ps(e[r][2], e[r][1]));
        _mm512_storeu_ps(row + 3 * position_stride, _mm512_sub_ps(e[r][1], e[r][3]));
      }
    }
  }
}

// One block's outputs from M (`m`: [position][tile][16 vectors] for `count` tiles of a band of
// `groups` groups): A^T M A, plus the bias, the post-ops of class E, stored where inside the
// output; `channel` is the block's first output channel.
template <FusedEpilogue E>
ET_AVX512 void transform_output(const WinogradShape& s, const PostOps& post_ops, float lo_value,
                                float hi_value, int64_t tile_begin, int64_t count, int64_t groups,
                                const float* m, int vectors, const float* bias, int64_t channel,
                                float* output, const float* residual) {
  const __m512 lo = _mm512_set1_ps(lo_value);
  const __m512 hi = _mm512_set1_ps(hi_value);
  const int64_t oc = s.out_channels;
  const int64_t width = vectors * kLanes;
  const int64_t position_stride = groups * kGroupTiles * width;
  TileWalk t(s, tile_begin);
  for (int64_t i = 0; i < count; ++i, t.next()) {
    const bool right = t.x() + 1 < s.out_w;
    const bool below = t.y() + 1 < s.out_h;
    const int64_t first = ((t.image * s.out_h + t.y()) * s.out_w + t.x()) * oc + channel;
    const int64_t offsets[4] = {first, first + oc, first + s.out_w * oc,
                                first + (s.out_w + 1) * oc};
    const bool stored[4] = {true, right, below, below && right};
    for (int j = 0; j < vectors; ++j) {
      const float* from = m + i * width + j * kLanes;
      __m512 x[4][4];
#pragma GCC unroll 16
      for (int p = 0; p < 16; ++p) x[p / 4][p % 4] = _mm512_loadu_ps(from + p * position_stride);
      // A^T M: rows m0 + m1 + m2, m1 - m2 - m3.
      __m512 a[2][4];
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        a[0][c] = _mm512_add_ps(_mm512_add_ps(x[0][c], x[1][c]), x[2][c]);
        a[1][c] = _mm512_sub_ps(_mm512_sub_ps(x[1][c], x[2][c]), x[3][c]);
      }
      const __m512 b = _mm512_loadu_ps(bias + j * kLanes);
      __m512 y[4];
#pragma GCC unroll 2
      for (int r = 0; r < 2; ++r) {
        y[2 * r] = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[r][0], a[r][1]), a[r][2]), b);
        y[2 * r + 1] = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(a[r][1], a[r][2]), a[r][3]), b);
      }
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        if (!stored[q]) continue;
        const int64_t at = offsets[q] + j * kLanes;
        __m512 out;
        if constexpr (E == FusedEpilogue::kGeneric) {
          out = epilogue16(post_ops, y[q], residual ? residual + at : nullptr,
                           static_cast<__mmask16>(0xFFFF));
        } else {
          out = fused_epilogue<E>(post_ops, y[q], lo, hi);
        }
        _mm512_storeu_ps(output + at, out);
      }
    }
  }
}

// U = G g G^T for one 3x3 kernel `g` (row-major) into `u` (4x4, row-major), in double.
void transform_kernel(const float* g, double u[4][4]) {
  // G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1].
  static constexpr double kG[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  double gk[4][3];
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 3; ++c) {
      gk[r][c] = 0;
      for (int k = 0; k < 3; ++k) gk[r][c] += kG[r][k] * g[k * 3 + c];
    }
  }
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 4; ++c) {
      u[r][c] = 0;
      for (int k = 0; k < 3; ++k) u[r][c] += gk[r][k] * kG[c][k];
    }
  }
}

}  // namespace

bool winograd_conv_supports(const WinogradShape& s, const PostOps& post_ops) {
  if (!kernel_switched_on("ET_CPU_WINOGRAD") || !cpu_has_avx512()) return false;
  if (s.kernel_h != 3 || s.kernel_w != 3 || s.pad_top != 1 || s.pad_left != 1 ||
      s.stride_h != 1 || s.stride_w != 1 || s.in_channels < 1 || s.out_channels < 1 ||
      s.in_h < 1 || s.in_w < 1) {
    return false;
  }
  // torch's output extents for padding 1 on both sides at stride 1: the input's.
  if (s.out_h != s.in_h || s.out_w != s.in_w) return false;
  if (s.out_channels % kLanes != 0) return false;
  return post_ops_in_registers(post_ops);
}

bool own_winograd_wanted(const WinogradShape& s, const PostOps& post_ops) {
  if (!winograd_conv_supports(s, post_ops)) return false;
  const SwitchReach reach = switch_reach("ET_CPU_WINOGRAD");
  if (reach == SwitchReach::kEverywhere) return true;
  // Unset: the shapes where it measured faster than oneDNN's brgconv (and StreamConv) both warm
  // and after 40 ms away (provider README): 16 or more input channels (8 -> 16 at 128x128 was
  // 1.9x slower: the transforms' memory traffic in front), and transformed weights of at most
  // 2 MiB (16 x 128 x 256 floats; 16/9 of the direct weights, and a call after 40 ms away streams
  // them from memory: 256 -> 256 at 14x14 1.0-1.1x, at 7x7 1.8x StreamConv's time there).
  return s.in_channels >= 16 && s.in_channels * s.out_channels <= kDefaultMaxChannelProduct;
}

WinogradConv::WinogradConv(const WinogradShape& shape, const float* weight, const float* bias,
                           PostOps post_ops)
    : shape_(shape), post_ops_(std::move(post_ops)) {
  if (!winograd_conv_supports(shape_, post_ops_)) {
    throw ProviderError("winograd conv: this shape or these post-ops are not supported here");
  }
  if (weight == nullptr) throw ProviderError("winograd conv: weight is null");
  const int64_t oc = shape_.out_channels;
  const int64_t ic = shape_.in_channels;
  padded_in_ = round_up(ic, kLanes);
  const int64_t band_tile_bytes =
      kPositions * static_cast<int64_t>(sizeof(float)) * (padded_in_ + kBlockChannels);
  const int64_t band_bytes =
      1024 * switch_number("ET_CPU_WINOGRAD_BAND_KIB", kBandBytes / 1024, 16, 65536);
  band_groups_ = std::max<int64_t>(1, band_bytes / (band_tile_bytes * kGroupTiles));
  weights_.assign(static_cast<size_t>(kPositions * padded_in_ * oc), 0.0f);
  for (int64_t o = 0; o < oc; ++o) {
    const int64_t block = o / kBlockChannels;
    const int64_t width = std::min(kBlockChannels, oc - block * kBlockChannels);
    const int64_t lane = o % kBlockChannels;
    float* block_weights = weights_.data() + block * kPositions * padded_in_ * kBlockChannels;
    for (int64_t ci = 0; ci < ic; ++ci) {
      double u[4][4];
      transform_kernel(weight + (o * ic + ci) * 9, u);
      for (int64_t pos = 0; pos < kPositions; ++pos) {
        block_weights[(pos * padded_in_ + ci) * width + lane] =
            static_cast<float>(u[pos / 4][pos % 4]);
      }
    }
  }
  bias_.assign(static_cast<size_t>(oc), 0.0f);
  if (bias) std::copy(bias, bias + oc, bias_.begin());
}

int64_t WinogradConv::tiles(int64_t images) const {
  return images * ((shape_.out_h + 1) / 2) * ((shape_.out_w + 1) / 2);
}

int64_t WinogradConv::groups(int64_t images) const {
  return (tiles(images) + kGroupTiles - 1) / kGroupTiles;
}

int64_t WinogradConv::transformed_input_floats(int64_t images) const {
  return kPositions * groups(images) * kGroupTiles * padded_in_;
}

int64_t WinogradConv::transformed_weight_floats() const {
  return kPositions * shape_.in_channels * shape_.out_channels;
}

void WinogradConv::run(const float* input, float* output, const float* residual, int64_t images,
                       int64_t group_begin, int64_t group_end, int64_t block_begin,
                       int64_t block_end) const {
  const WinogradShape& s = shape_;
  const int64_t oc = s.out_channels;
  const int64_t chunks = padded_in_ / kLanes;
  const int64_t all_tiles = tiles(images);
  thread_local std::vector<float> scratch;
  const int64_t band_tiles = band_groups_ * kGroupTiles;
  const size_t needed =
      static_cast<size_t>(kPositions * band_tiles * (padded_in_ + kBlockChannels));
  if (scratch.size() < needed) scratch.resize(needed);
  float lo = 0.0f;
  float hi = 0.0f;
  const FusedEpilogue epi = fused_epilogue_of(post_ops_, &lo, &hi);
  for (int64_t band = group_begin; band < group_end; band += band_groups_) {
    const int64_t groups = std::min(band_groups_, group_end - band);
    const int64_t tile_begin = band * kGroupTiles;
    const int64_t count = std::min(groups * kGroupTiles, all_tiles - tile_begin);
    if (count <= 0) break;
    float* v = scratch.data();
    float* m = v + kPositions * groups * kGroupTiles * padded_in_;
    transform_input(s, input, tile_begin, count, padded_in_, groups, v);
    for (int64_t block = block_begin; block < block_end; ++block) {
      const int64_t channel = block * kBlockChannels;
      const int64_t width = std::min(kBlockChannels, oc - channel);
      const int vectors = static_cast<int>(width / kLanes);
      const float* u = weights_.data() + block * kPositions * padded_in_ * kBlockChannels;
      for (int64_t pos = 0; pos < kPositions; ++pos) {
        const float* v_pos = v + pos * groups * kGroupTiles * padded_in_;
        const float* u_pos = u + pos * padded_in_ * width;
        float* m_pos = m + pos * groups * kGroupTiles * width;
        for (int64_t g = 0; g * kGroupTiles < count; ++g) {
          const int64_t p = std::min(kGroupTiles, count - g * kGroupTiles);
          kProducts[static_cast<size_t>(p - 1)][static_cast<size_t>(vectors - 1)](
              v_pos + g * kGroupTiles * padded_in_, u_pos, chunks,
              m_pos + g * kGroupTiles * width);
        }
      }
      with_fused_epilogue(epi, [&](auto e) {
        transform_output<decltype(e)::value>(s, post_ops_, lo, hi, tile_begin, count, groups, m,
                                             vectors, bias_.data() + channel, channel, output,
                                             residual);
      });
    }
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
