// The 8da4w linear kernel (see linear_8da_vnni.h): packing, per-token quantization of the rows,
// the AVX-512 VNNI and AVX2 tiles and how rows and blocks are shared out on the pool.
#include "backends/cpu/runtime/providers/optimized/kernels/linear_8da_vnni.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "backends/cpu/runtime/providers/optimized/common/slices.h"
#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/common/work_pool.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

// The float epilogue multiplies and adds as the scalar reference does (no fused multiply-add),
// so outputs match it bit for bit: the integer parts are exact, the float steps the same.
#pragma GCC optimize("fp-contract=off")

namespace et_cpu_plugin {
namespace onednn {
namespace {

#define ET_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define ET_AVX2 __attribute__((target("avx2,fma")))

constexpr int64_t kBlock = 16;      // output channels per block (one int32 vector of AVX-512)
constexpr int64_t kVector = 64;     // bytes per packed weight vector
constexpr int64_t kStepK = 8;       // k per step of the tiles (one 4-bit vector, two 8-bit ones)
constexpr int64_t kMaxGroup = 32768;  // int32 bound of a group's products (see linear_8da.cc)

using Rows = Linear8daGemm::Rows;

// ---- Per-token quantization (torchao's choose_qparams_affine / quantize_affine) ----

// The row's scale and zero point from min(min(x), 0) and max(max(x), 0), as linear_8da.cc.
inline void row_qparams(float low, float high, float* scale, float* zero) {
  float s = (high - low) / 255.0f;
  s = std::max(s, FLT_MIN);
  float z = -128.0f - std::nearbyint(low / s);
  *zero = std::min(std::max(z, -128.0f), 127.0f);
  *scale = s;
}

inline int8_t quantize_one(float x, float inverse, float zero) {
  float q = std::nearbyint(x * inverse) + zero;
  q = std::min(std::max(q, -128.0f), 127.0f);
  return static_cast<int8_t>(static_cast<int32_t>(q));
}

void finish_row(const int8_t* q, int64_t k, int64_t group, float scale, float zero, Rows& rows,
                int64_t m) {
  const int64_t groups = k / group;
  rows.scale[static_cast<size_t>(m)] = scale;
  rows.zero_point[static_cast<size_t>(m)] = static_cast<int32_t>(zero);
  int32_t* sums = rows.sums.data() + m * groups;
  int32_t* offset_sums = rows.offset_sums.data() + m * groups;
  for (int64_t g = 0; g < groups; ++g) {
    int32_t s = 0;
    for (int64_t i = g * group; i < (g + 1) * group; ++i) s += q[i];
    sums[g] = s;
    offset_sums[g] = static_cast<int32_t>(0u - static_cast<uint32_t>(rows.offset) *
                                                   static_cast<uint32_t>(s));  // wraps
  }
}

ET_VNNI void quantize_row_avx512(const float* x, int64_t k, int64_t group, Rows& rows,
                                 int64_t m) {
  // min(x, low) / max(x, high) pick as std::min(low, x) / std::max(high, x) do.
  __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    lo = _mm512_min_ps(v, lo);
    hi = _mm512_max_ps(v, hi);
  }
  const __mmask16 tail = static_cast<__mmask16>((1u << (k - i)) - 1u);
  if (i < k) {  // the zero-filled lanes change neither (both bounds include 0)
    const __m512 v = _mm512_maskz_loadu_ps(tail, x + i);
    lo = _mm512_min_ps(v, lo);
    hi = _mm512_max_ps(v, hi);
  }
  alignas(64) float los[16], his[16];
  _mm512_store_ps(los, lo);
  _mm512_store_ps(his, hi);
  float low = 0.0f, high = 0.0f;
  for (int j = 0; j < 16; ++j) {
    low = std::min(low, los[j]);
    high = std::max(high, his[j]);
  }
  float scale, zero;
  row_qparams(low, high, &scale, &zero);
  const float inverse = 1.0f / scale;
  const __m512 vinverse = _mm512_set1_ps(inverse), vzero = _mm512_set1_ps(zero);
  const __m512 vlow = _mm512_set1_ps(-128.0f), vhigh = _mm512_set1_ps(127.0f);
  int8_t* q = rows.q.data() + m * rows.stride;
  for (i = 0; i < k; i += 16) {
    const __mmask16 mask = i + 16 <= k ? static_cast<__mmask16>(0xFFFF) : tail;
    // The product rounded to float, then to the nearest integer (ties to even) as nearbyint.
    __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, x + i), vinverse);
    v = _mm512_add_ps(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                      vzero);
    v = _mm512_min_ps(_mm512_max_ps(v, vlow), vhigh);
    _mm_mask_storeu_epi8(q + i, mask, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
  }
  finish_row(q, k, group, scale, zero, rows, m);
}

ET_AVX2 void quantize_row_avx2(const float* x, int64_t k, int64_t group, Rows& rows, int64_t m) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    lo = _mm256_min_ps(v, lo);
    hi = _mm256_max_ps(v, hi);
  }
  alignas(32) float los[8], his[8];
  _mm256_store_ps(los, lo);
  _mm256_store_ps(his, hi);
  float low = 0.0f, high = 0.0f;
  for (int j = 0; j < 8; ++j) {
    low = std::min(low, los[j]);
    high = std::max(high, his[j]);
  }
  for (; i < k; ++i) {
    low = std::min(low, x[i]);
    high = std::max(high, x[i]);
  }
  float scale, zero;
  row_qparams(low, high, &scale, &zero);
  const float inverse = 1.0f / scale;
  const __m256 vinverse = _mm256_set1_ps(inverse), vzero = _mm256_set1_ps(zero);
  const __m256 vlow = _mm256_set1_ps(-128.0f), vhigh = _mm256_set1_ps(127.0f);
  int8_t* q = rows.q.data() + m * rows.stride;
  alignas(32) int32_t values[8];
  for (i = 0; i + 8 <= k; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vinverse);
    v = _mm256_add_ps(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), vzero);
    v = _mm256_min_ps(_mm256_max_ps(v, vlow), vhigh);
    _mm256_store_si256(reinterpret_cast<__m256i*>(values), _mm256_cvtps_epi32(v));
    for (int j = 0; j < 8; ++j) q[i + j] = static_cast<int8_t>(values[j]);
  }
  for (; i < k; ++i) q[i] = quantize_one(x[i], inverse, zero);
  finish_row(q, k, group, scale, zero, rows, m);
}

inline int32_t load_quad(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// ---- Tiles: R rows x NB blocks of 16 channels, all k ----

// A tile reads block block0 + b's weights from weights + b * stride: the packed weights
// (stride block_bytes) or, for the many-row path, a chunk of blocks unpacked to bytes.
using TileFn = void (*)(const Linear8daPacked& p, const Rows& a, int64_t row0, int64_t block0,
                        const uint8_t* weights, size_t stride, float* y);

// A row's outputs of block `block` (y_row[16 block + c], c < 16 and below n): the sum over
// groups times the row's scale, plus the bias (the reference's operations, in its order).
ET_VNNI inline void store_block(const Linear8daPacked& p, int64_t block, __m512 total,
                                float row_scale, float* y_row) {
  const int64_t c0 = block * kBlock;
  const int64_t width = std::min<int64_t>(kBlock, p.params.n - c0);
  const __mmask16 mask = static_cast<__mmask16>((1u << width) - 1u);
  const __m512 out = _mm512_add_ps(_mm512_mul_ps(total, _mm512_set1_ps(row_scale)),
                                   _mm512_loadu_ps(p.bias.data() + c0));
  _mm512_mask_storeu_ps(y_row + c0, mask, out);
}

// y[row0 + r, 16 (block0 + b) + c] for r < R, b < NB, on AVX-512 VNNI. Bits is the layout of
// the weights: 4, one vector of nibbles per step; 8, two vectors of bytes per step (8-bit
// weights as packed, or 4-bit ones unpacked by unpack_blocks: the epilogue's offsets and sums
// come from `p` either way).
// Steps: group / 8 when known at compile time (the step loop unrolled), else 0.
template <int R, int NB, int Bits, int Steps = 0>
ET_VNNI void tile_vnni(const Linear8daPacked& p, const Rows& a, int64_t row0, int64_t block0,
                       const uint8_t* weights, size_t stride, float* y) {
  const int64_t group = p.params.group, groups = p.groups, n = p.params.n;
  const int64_t steps = Steps != 0 ? Steps : group / kStepK;
  const uint8_t* w[NB];
  #pragma GCC unroll 16
  for (int b = 0; b < NB; ++b) w[b] = weights + b * stride;
  const int8_t* x[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) x[r] = a.q.data() + (row0 + r) * a.stride;
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  // The float sums over groups: in registers for small tiles; for larger ones in an L1 buffer
  // (read and written once per group), leaving the registers to the int32 accumulators.
  constexpr bool kSumsInMemory = R * NB > 8;
  __m512 sum[kSumsInMemory ? 1 : R][kSumsInMemory ? 1 : NB];
  alignas(64) float totals[kSumsInMemory ? R : 1][kSumsInMemory ? NB : 1][kBlock];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) {
      if constexpr (kSumsInMemory) {
        _mm512_store_ps(totals[r][b], _mm512_setzero_ps());
      } else {
        sum[r][b] = _mm512_setzero_ps();
      }
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    // Without zero points the accumulators start at -offset * sum(q) (precomputed per row and
    // group; int32 arithmetic wraps alike in any order, so the result is the same integer).
    __m512i acc[R][NB];
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512i start = p.has_zero_points
                                ? _mm512_setzero_si512()
                                : _mm512_set1_epi32(a.offset_sums[(row0 + r) * groups + g]);
      #pragma GCC unroll 16
      for (int b = 0; b < NB; ++b) acc[r][b] = start;
    }
#pragma GCC unroll 8
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t k = g * group + s * kStepK;
      __m512i lo[NB], hi[NB];
      #pragma GCC unroll 16
      for (int b = 0; b < NB; ++b) {
        if constexpr (Bits == 4) {
          const __m512i raw = _mm512_loadu_si512(w[b]);
          lo[b] = _mm512_and_si512(raw, nibble);
          hi[b] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble);
          w[b] += kVector;
        } else {
          lo[b] = _mm512_loadu_si512(w[b]);
          hi[b] = _mm512_loadu_si512(w[b] + kVector);
          w[b] += 2 * kVector;
        }
      }
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m512i xa = _mm512_set1_epi32(load_quad(x[r] + k));
        const __m512i xb = _mm512_set1_epi32(load_quad(x[r] + k + 4));
        #pragma GCC unroll 16
        for (int b = 0; b < NB; ++b) {
          acc[r][b] = _mm512_dpbusd_epi32(acc[r][b], lo[b], xa);
          acc[r][b] = _mm512_dpbusd_epi32(acc[r][b], hi[b], xb);
        }
      }
    }
    #pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) {
      const size_t meta = static_cast<size_t>(((block0 + b) * groups + g) * kBlock);
      const __m512 scale = _mm512_loadu_ps(p.scales.data() + meta);
      const __m512i sums = _mm512_loadu_si512(p.weight_sums.data() + meta);
      const __m512i offset = p.has_zero_points ? _mm512_loadu_si512(p.offsets.data() + meta)
                                               : _mm512_setzero_si512();
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const int64_t row = row0 + r;
        __m512i dot = _mm512_sub_epi32(
            acc[r][b], _mm512_mullo_epi32(sums, _mm512_set1_epi32(a.zero_point[row])));
        if (p.has_zero_points) {
          dot = _mm512_sub_epi32(
              dot, _mm512_mullo_epi32(offset, _mm512_set1_epi32(a.sums[row * groups + g])));
        }
        const __m512 value = _mm512_cvtepi32_ps(dot);
        if constexpr (kSumsInMemory) {
          _mm512_store_ps(totals[r][b], _mm512_add_ps(_mm512_load_ps(totals[r][b]),
                                                      _mm512_mul_ps(value, scale)));
        } else {
          sum[r][b] = _mm512_add_ps(sum[r][b], _mm512_mul_ps(value, scale));
        }
      }
    }
  }
  #pragma GCC unroll 16
  for (int b = 0; b < NB; ++b) {
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      store_block(p, block0 + b, kSumsInMemory ? _mm512_load_ps(totals[r][b]) : sum[r][b],
                  a.scale[row0 + r], y + (row0 + r) * n);
    }
  }
}

// Decode on AVX-512 VNNI, 4-bit weights, one row: NB blocks from block0 streamed once, straight
// from the packed nibbles (no unpacking to memory). Unlike tile_vnni it reads no weight sums:
// the activation zero point's term zq * sum(w - zw) comes from the weights in registers, one
// more vpdpbusd per vector (low + high nibbles, at most 30 per byte, times zq as int8), so the
// stream is the int4 weights and their scales only (the sums were 64 more bytes per block and
// group beside 256 + 64: a fifth of the traffic). With wrapping int32 arithmetic
//   dot = acc - zq * (sum(u) - (offset + zw) * group) - (offset + zw) * sum(q)
// is the same integer tile_vnni's epilogue forms, so the outputs are bit for bit the same.
// Row `row` of `a` into row `row` of y. `prefetch`: how many bytes ahead on each weight stream
// to prefetch (the scales ahead by as many groups), 0 for none.
template <int NB, int Steps = 0>
ET_VNNI void gemv_vnni4(const Linear8daPacked& p, const Rows& a, int64_t row, int64_t block0,
                        float* y, int64_t prefetch) {
  const int64_t group = p.params.group, groups = p.groups, n = p.params.n;
  const int64_t steps = Steps != 0 ? Steps : group / kStepK;
  const uint8_t* w[NB];
  #pragma GCC unroll 16
  for (int b = 0; b < NB; ++b) w[b] = p.weights() + (block0 + b) * p.block_bytes;
  const int8_t* x = a.q.data() + row * a.stride;
  const int32_t* offset_sums = a.offset_sums.data() + row * groups;
  const int32_t* q_sums = a.sums.data() + row * groups;
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const int32_t zq = a.zero_point[static_cast<size_t>(row)];
  const __m512i zq_bytes = _mm512_set1_epi8(static_cast<int8_t>(zq));
  // zq * group (wrapping): with zero points, per group (offset + zw) * (zq * group - sum(q));
  // without, the accumulators start at -offset * sum(q) + offset * zq * group.
  const uint32_t zq_group = static_cast<uint32_t>(zq) * static_cast<uint32_t>(group);
  const uint32_t offset_zq_group = static_cast<uint32_t>(p.offset) * zq_group;
  // Scales are 16 floats (64 bytes) per block and group; groups ahead of the weights' prefetch.
  const int64_t scale_ahead =
      prefetch > 0 ? kBlock * std::max<int64_t>(1, prefetch / (steps * kVector)) : 0;
  __m512 sum[NB];
  #pragma GCC unroll 16
  for (int b = 0; b < NB; ++b) sum[b] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    const __m512i start =
        p.has_zero_points
            ? _mm512_setzero_si512()
            : _mm512_set1_epi32(static_cast<int32_t>(
                  static_cast<uint32_t>(offset_sums[g]) + offset_zq_group));
    __m512i acc[NB], zacc[NB];
    #pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) {
      acc[b] = start;
      zacc[b] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t k = g * group + s * kStepK;
      const __m512i xa = _mm512_set1_epi32(load_quad(x + k));
      const __m512i xb = _mm512_set1_epi32(load_quad(x + k + 4));
      #pragma GCC unroll 16
      for (int b = 0; b < NB; ++b) {
        if (prefetch > 0) _mm_prefetch(reinterpret_cast<const char*>(w[b] + prefetch), _MM_HINT_T0);
        const __m512i raw = _mm512_load_si512(w[b]);
        const __m512i lo = _mm512_and_si512(raw, nibble);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble);
        acc[b] = _mm512_dpbusd_epi32(acc[b], lo, xa);
        acc[b] = _mm512_dpbusd_epi32(acc[b], hi, xb);
        zacc[b] = _mm512_dpbusd_epi32(zacc[b], _mm512_add_epi8(lo, hi), zq_bytes);
        w[b] += kVector;
      }
    }
    #pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) {
      const size_t meta = static_cast<size_t>(((block0 + b) * groups + g) * kBlock);
      if (scale_ahead > 0) {
        _mm_prefetch(reinterpret_cast<const char*>(p.scales.data() + meta + scale_ahead),
                     _MM_HINT_T0);
      }
      __m512i dot = _mm512_sub_epi32(acc[b], zacc[b]);
      if (p.has_zero_points) {
        const uint32_t factor =
            zq_group - static_cast<uint32_t>(q_sums[g]);  // wraps
        dot = _mm512_add_epi32(
            dot, _mm512_mullo_epi32(_mm512_loadu_si512(p.offsets.data() + meta),
                                    _mm512_set1_epi32(static_cast<int32_t>(factor))));
      }
      const __m512 scale = _mm512_loadu_ps(p.scales.data() + meta);
      sum[b] = _mm512_add_ps(sum[b], _mm512_mul_ps(_mm512_cvtepi32_ps(dot), scale));
    }
  }
  #pragma GCC unroll 16
  for (int b = 0; b < NB; ++b) {
    store_block(p, block0 + b, sum[b], a.scale[static_cast<size_t>(row)], y + row * n);
  }
}

using GemvFn = void (*)(const Linear8daPacked& p, const Rows& a, int64_t row, int64_t block0,
                        float* y, int64_t prefetch);

// The decode kernel for `blocks` (1 or kDecodeBlocks) blocks; group 32's 4 steps unrolled.
constexpr int kDecodeBlocks = 4;
// Software prefetch distance on each weight stream by default (Linear8daDecodeOptions): 4 cache
// lines ahead. Indicative (Zen 4, 2 threads, machine under load, one run each,
// tools/bench/linear_8da_bench.py): 256 bytes 28-38 GB/s of weight bytes over the four decode
// shapes of the large decoder, none 19-32, 1024 21-35, 4096 24-31.
constexpr int64_t kDefaultPrefetch = 256;
GemvFn gemv_vnni4_for(int blocks, int64_t group) {
  if (group == 4 * kStepK) return blocks == 1 ? &gemv_vnni4<1, 4> : &gemv_vnni4<kDecodeBlocks, 4>;
  return blocks == 1 ? &gemv_vnni4<1> : &gemv_vnni4<kDecodeBlocks>;
}

// The same on AVX2: each block is two halves of 8 channels (bytes 0-31, 32-63 of a vector).
// 4 bits: vpmaddubsw (u8 x s8 pairs into int16: at most 2 x 15 x 128 each, two steps summed
// before widening) then vpmaddwd by ones. 8 bits: the weights widened to 16 bits first (u8 x s8
// pairs could saturate int16), vpmaddwd with the activations as int16, and the pairs of partial
// sums added once per group.
template <int R, int NB, int Bits>
ET_AVX2 void tile_avx2(const Linear8daPacked& p, const Rows& a, int64_t row0, int64_t block0,
                       const uint8_t* weights, size_t stride, float* y) {
  const int64_t group = p.params.group, groups = p.groups, n = p.params.n;
  const int64_t steps = group / kStepK;
  const uint8_t* w[NB];
  #pragma GCC unroll 16
  for (int b = 0; b < NB; ++b) w[b] = weights + b * stride;
  const int8_t* x[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) x[r] = a.q.data() + (row0 + r) * a.stride;
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  // 4 bits: [half]; 8 bits: [quarter] of 4 channels, each 4 channels x 2 partial sums.
  constexpr int kParts = Bits == 4 ? 2 : 4;
  alignas(32) float sum[R][NB][kBlock] = {};
  for (int64_t g = 0; g < groups; ++g) {
    __m256i acc[R][NB][kParts];
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      #pragma GCC unroll 16
      for (int b = 0; b < NB; ++b) {
        #pragma GCC unroll 16
        for (int h = 0; h < kParts; ++h) acc[r][b][h] = _mm256_setzero_si256();
      }
    }
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t k = g * group + s * kStepK;
      if constexpr (Bits == 4) {
        __m256i lo[NB][2], hi[NB][2];
        #pragma GCC unroll 16
        for (int b = 0; b < NB; ++b) {
          #pragma GCC unroll 16
          for (int h = 0; h < 2; ++h) {
            const __m256i raw =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b] + 32 * h));
            lo[b][h] = _mm256_and_si256(raw, nibble);
            hi[b][h] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), nibble);
          }
          w[b] += kVector;
        }
        #pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const __m256i xa = _mm256_set1_epi32(load_quad(x[r] + k));
          const __m256i xb = _mm256_set1_epi32(load_quad(x[r] + k + 4));
          #pragma GCC unroll 16
          for (int b = 0; b < NB; ++b) {
            #pragma GCC unroll 16
            for (int h = 0; h < 2; ++h) {
              const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo[b][h], xa),
                                                     _mm256_maddubs_epi16(hi[b][h], xb));
              acc[r][b][h] = _mm256_add_epi32(acc[r][b][h], _mm256_madd_epi16(pairs, ones));
            }
          }
        }
      } else {
        for (int half = 0; half < 2; ++half) {  // k..k+3, then k+4..k+7
          __m256i wide[NB][4];
          #pragma GCC unroll 16
          for (int b = 0; b < NB; ++b) {
            #pragma GCC unroll 16
            for (int h = 0; h < 4; ++h) {
              wide[b][h] = _mm256_cvtepu8_epi16(
                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b] + 16 * h)));
            }
            w[b] += kVector;
          }
          #pragma GCC unroll 16
          for (int r = 0; r < R; ++r) {
            const int8_t* q = x[r] + k + 4 * half;
            const __m256i xq = _mm256_setr_epi16(q[0], q[1], q[2], q[3], q[0], q[1], q[2], q[3],
                                                 q[0], q[1], q[2], q[3], q[0], q[1], q[2], q[3]);
            #pragma GCC unroll 16
            for (int b = 0; b < NB; ++b) {
              #pragma GCC unroll 16
              for (int h = 0; h < 4; ++h) {
                acc[r][b][h] = _mm256_add_epi32(acc[r][b][h], _mm256_madd_epi16(wide[b][h], xq));
              }
            }
          }
        }
      }
    }
    #pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) {
      const size_t meta = static_cast<size_t>(((block0 + b) * groups + g) * kBlock);
      #pragma GCC unroll 16
      for (int h = 0; h < 2; ++h) {
        const __m256 scale = _mm256_loadu_ps(p.scales.data() + meta + 8 * h);
        const __m256i sums = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(p.weight_sums.data() + meta + 8 * h));
        const __m256i offset =
            p.has_zero_points
                ? _mm256_loadu_si256(
                      reinterpret_cast<const __m256i*>(p.offsets.data() + meta + 8 * h))
                : _mm256_set1_epi32(p.offset);
        #pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const int64_t row = row0 + r;
          __m256i dot;
          if constexpr (Bits == 4) {
            dot = acc[r][b][h];
          } else {
            // hadd gives channels [0 1 4 5 | 2 3 6 7] of the two quarters: 64-bit lanes 0 2 1 3.
            dot = _mm256_permute4x64_epi64(
                _mm256_hadd_epi32(acc[r][b][2 * h], acc[r][b][2 * h + 1]),
                _MM_SHUFFLE(3, 1, 2, 0));
          }
          const __m256i correction = _mm256_add_epi32(
              _mm256_mullo_epi32(offset, _mm256_set1_epi32(a.sums[row * groups + g])),
              _mm256_mullo_epi32(sums, _mm256_set1_epi32(a.zero_point[row])));
          const __m256 value = _mm256_cvtepi32_ps(_mm256_sub_epi32(dot, correction));
          float* s = sum[r][b] + 8 * h;
          _mm256_store_ps(s, _mm256_add_ps(_mm256_load_ps(s), _mm256_mul_ps(value, scale)));
        }
      }
    }
  }
  #pragma GCC unroll 16
  for (int b = 0; b < NB; ++b) {
    const int64_t c0 = (block0 + b) * kBlock;
    const int64_t width = std::min<int64_t>(kBlock, n - c0);
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const float scale = a.scale[row0 + r];
      float* out = y + (row0 + r) * n + c0;
      for (int64_t c = 0; c < width; ++c) out[c] = sum[r][b][c] * scale + p.bias[c0 + c];
    }
  }
}

template <Linear8daIsa Isa, int R, int NB>
TileFn tile_for(int bits) {
  if constexpr (Isa == Linear8daIsa::kAvx512Vnni) {
    return bits == 4 ? &tile_vnni<R, NB, 4> : &tile_vnni<R, NB, 8>;
  } else {
    return bits == 4 ? &tile_avx2<R, NB, 4> : &tile_avx2<R, NB, 8>;
  }
}

template <Linear8daIsa Isa, int NB>
TileFn tile_rows(int rows, int bits) {
  switch (rows) {
    case 1:
      return tile_for<Isa, 1, NB>(bits);
    case 2:
      return tile_for<Isa, 2, NB>(bits);
    case 3:
      return tile_for<Isa, 3, NB>(bits);
    default:
      return tile_for<Isa, 4, NB>(bits);
  }
}

template <Linear8daIsa Isa>
TileFn tile_shape(int rows, int blocks, int bits) {
  switch (blocks) {
    case 1:
      return tile_rows<Isa, 1>(rows, bits);
    case 2:
      return tile_rows<Isa, 2>(rows, bits);
    default:
      return tile_rows<Isa, 4>(rows, bits);
  }
}

TileFn tile(Linear8daIsa isa, int rows, int blocks, int bits) {
  return isa == Linear8daIsa::kAvx512Vnni
             ? tile_shape<Linear8daIsa::kAvx512Vnni>(rows, blocks, bits)
             : tile_shape<Linear8daIsa::kAvx2>(rows, blocks, bits);
}

// Tile shapes per path: blocks per tile for one row (decode: independent accumulators while the
// weights stream), rows and blocks per tile for many rows.
struct Shape {
  int decode_blocks;
  int rows;
  int blocks;
};

Shape shape_of(Linear8daIsa isa, int64_t bits) {
  if (isa == Linear8daIsa::kAvx512Vnni) return {4, 4, 2};
  if (bits == 4) return {2, 2, 1};
  return {1, 1, 1};  // AVX2, 8 bits: 4 accumulators per block already
}

// Rows [row_begin, row_end) x blocks [block_begin, block_end): block chunks outside, row tiles
// inside, so a chunk's weights stay in cache while every row passes over them.
void compute(const Linear8daPacked& p, const Rows& a, Linear8daIsa isa, const Shape& shape,
             int64_t row_begin, int64_t row_end, int64_t block_begin, int64_t block_end,
             float* y, const Linear8daDecodeOptions& decode) {
  const int bits = static_cast<int>(p.params.bits);
  const int64_t rows = row_end - row_begin;
  const int chunk = rows == 1 ? shape.decode_blocks : shape.blocks;
  if (rows == 1 && isa == Linear8daIsa::kAvx512Vnni && bits == 4 && decode.gemv) {
    static_assert(kDecodeBlocks == 4, "shape_of's decode_blocks on AVX-512 VNNI");
    const GemvFn full = gemv_vnni4_for(kDecodeBlocks, p.params.group);
    const GemvFn one = gemv_vnni4_for(1, p.params.group);
    int64_t b = block_begin;
    for (; b + kDecodeBlocks <= block_end; b += kDecodeBlocks) {
      full(p, a, row_begin, b, y, decode.prefetch);
    }
    for (; b < block_end; ++b) one(p, a, row_begin, b, y, decode.prefetch);
    return;
  }
  for (int64_t b = block_begin; b < block_end; b += chunk) {
    const int nb = static_cast<int>(std::min<int64_t>(chunk, block_end - b));
    const uint8_t* w = p.weights() + b * p.block_bytes;
    for (int64_t r = row_begin; r < row_end; r += shape.rows) {
      const int nr = static_cast<int>(std::min<int64_t>(shape.rows, row_end - r));
      if (nb == chunk) {
        tile(isa, nr, nb, bits)(p, a, r, b, w, p.block_bytes, y);
      } else {
        for (int i = 0; i < nb; ++i) {
          tile(isa, nr, 1, bits)(p, a, r, b + i, w + i * p.block_bytes, p.block_bytes, y);
        }
      }
    }
  }
}

// ---- Many rows on AVX-512 VNNI (prefill): larger tiles over weights unpacked once ----

// At least this many rows take the many-row path.
constexpr int64_t kGemmMinRows = 8;
constexpr int kGemmMaxRows = 8;
constexpr int kGemmMaxBlocks = 4;

}  // namespace

Linear8daGemm::GemmShape linear_8da_gemm_shape() {
  // 4 x 3 measured best on Zen 4 (128 rows; K, N of 512 to 5632; one core): ~5% above 4 x 2
  // and 8 x 2; the 12 int32 accumulators in registers, the float sums in L1 (tile_vnni).
  Linear8daGemm::GemmShape shape{4, 3};
  const char* tile = std::getenv("ET_CPU_LINEAR_8DA_TILE");
  int r = 0, b = 0;
  if (tile != nullptr && std::sscanf(tile, "%dx%d", &r, &b) == 2 && r >= 1 &&
      r <= kGemmMaxRows && b >= 1 && b <= kGemmMaxBlocks) {
    shape = {r, b};
  }
  return shape;
}

namespace {

using GemmShape = Linear8daGemm::GemmShape;

template <int R, int Steps>
TileFn gemm_tile_blocks(int blocks) {
  switch (blocks) {
    case 1:
      return &tile_vnni<R, 1, 8, Steps>;
    case 2:
      return &tile_vnni<R, 2, 8, Steps>;
    case 3:
      return &tile_vnni<R, 3, 8, Steps>;
    default:
      return &tile_vnni<R, 4, 8, Steps>;
  }
}

template <int Steps>
TileFn gemm_tile_steps(int64_t rows, int blocks) {
  switch (rows) {
    case 1:
      return gemm_tile_blocks<1, Steps>(blocks);
    case 2:
      return gemm_tile_blocks<2, Steps>(blocks);
    case 3:
      return gemm_tile_blocks<3, Steps>(blocks);
    case 4:
      return gemm_tile_blocks<4, Steps>(blocks);
    case 5:
      return gemm_tile_blocks<5, Steps>(blocks);
    case 6:
      return gemm_tile_blocks<6, Steps>(blocks);
    case 7:
      return gemm_tile_blocks<7, Steps>(blocks);
    default:
      return gemm_tile_blocks<8, Steps>(blocks);
  }
}

// The many-row tile of `rows` x `blocks` over byte-layout weights; group 32 (torchao's 8da4w
// default) with its 4 steps unrolled.
TileFn gemm_tile(int64_t rows, int blocks, int64_t group) {
  return group == 4 * kStepK ? gemm_tile_steps<4>(rows, blocks)
                             : gemm_tile_steps<0>(rows, blocks);
}

// Blocks [block0, block0 + count) of 4-bit weights in the byte layout, at `out` (64-byte
// aligned, 2 block_bytes per block): per step the vector of low nibbles (k..k+3), then the one
// of high nibbles (k+4..k+7), so the tiles of every row read them without unpacking again.
ET_VNNI void unpack_blocks(const Linear8daPacked& p, int64_t block0, int64_t count,
                           uint8_t* out) {
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const uint8_t* in = p.weights() + block0 * p.block_bytes;
  const size_t vectors = static_cast<size_t>(count) * p.block_bytes / kVector;
  for (size_t v = 0; v < vectors; ++v) {
    const __m512i raw = _mm512_load_si512(in + v * kVector);
    _mm512_store_si512(out + 2 * v * kVector, _mm512_and_si512(raw, nibble));
    _mm512_store_si512(out + (2 * v + 1) * kVector,
                       _mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble));
  }
}

// `bytes` of 64-byte aligned scratch for the many-row path's unpacked weights, owned by the
// calling thread (the pool's workers, a caller running tasks itself) and grown to the largest
// chunk any kernel asked for: one buffer per thread instead of one per kernel and worker (a
// decoder's 57 linears held ~264 KiB each per worker). Tasks never nest, so a thread's buffer
// serves one chunk at a time.
uint8_t* unpack_scratch(size_t bytes) {
  thread_local std::vector<uint8_t> buffer;
  if (buffer.size() < bytes + kVector) buffer.resize(bytes + kVector);
  uint8_t* base = buffer.data();
  return base + (kVector - reinterpret_cast<uintptr_t>(base) % kVector) % kVector;
}

// Rows [row_begin, row_end) x blocks [block_begin, block_end) on the many-row path: per chunk
// of shape.blocks blocks, the weights unpacked once into `scratch` (4 bits; 8-bit weights are
// read as packed), then every row tile over them.
void compute_gemm(const Linear8daPacked& p, const Rows& a, const GemmShape& shape,
                  int64_t row_begin, int64_t row_end, int64_t block_begin, int64_t block_end,
                  uint8_t* scratch, float* y) {
  const bool unpack = p.params.bits == 4;
  const size_t stride = unpack ? 2 * p.block_bytes : p.block_bytes;
  for (int64_t b = block_begin; b < block_end; b += shape.blocks) {
    const int nb = static_cast<int>(std::min<int64_t>(shape.blocks, block_end - b));
    const uint8_t* w = p.weights() + b * p.block_bytes;
    if (unpack) {
      unpack_blocks(p, b, nb, scratch);
      w = scratch;
    }
    const TileFn full = gemm_tile(shape.rows, nb, p.params.group);
    int64_t r = row_begin;
    for (; r + shape.rows <= row_end; r += shape.rows) full(p, a, r, b, w, stride, y);
    if (r < row_end) gemm_tile(row_end - r, nb, p.params.group)(p, a, r, b, w, stride, y);
  }
}

}  // namespace

Linear8daIsa linear_8da_cpu_isa() {
  static const Linear8daIsa isa = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")) {
      return Linear8daIsa::kAvx512Vnni;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      return Linear8daIsa::kAvx2;
    }
    return Linear8daIsa::kNone;
  }();
  return isa;
}

Linear8daIsa linear_8da_isa() {
  if (!kernel_switched_on("ET_CPU_LINEAR_8DA")) return Linear8daIsa::kNone;
  Linear8daIsa isa = linear_8da_cpu_isa();
  const char* cap = std::getenv("ET_CPU_LINEAR_8DA_ISA");
  if (cap != nullptr && std::strcmp(cap, "avx2") == 0) {
    isa = std::min(isa, Linear8daIsa::kAvx2);
  } else if (cap != nullptr && std::strcmp(cap, "none") == 0) {
    isa = Linear8daIsa::kNone;
  }
  return isa;
}

const char* linear_8da_isa_name(Linear8daIsa isa) {
  switch (isa) {
    case Linear8daIsa::kAvx512Vnni:
      return "avx512_vnni";
    case Linear8daIsa::kAvx2:
      return "avx2";
    default:
      return "none";
  }
}

bool linear_8da_supports(const Linear8daParams& params, std::string* reason) {
  const int64_t step = params.bits == 4 ? 8 : 4;
  const char* why = nullptr;
  if (params.bits != 4 && params.bits != 8) {
    why = "weight bits other than 4 or 8";
  } else if (params.k <= 0 || params.n <= 0 || params.group <= 0 || params.k % params.group) {
    why = "empty shapes or a group size not dividing K";
  } else if (params.group % kStepK != 0 || params.group % step != 0) {
    why = "group size not a multiple of 8";
  } else if (params.group > kMaxGroup) {
    why = "group size above 32768";
  }
  if (why != nullptr && reason != nullptr) *reason = std::string("linear_8da: ") + why;
  return why == nullptr;
}

const uint8_t* Linear8daPacked::weights() const {
  const uintptr_t base = reinterpret_cast<uintptr_t>(storage.data());
  return storage.data() + ((kVector - base % kVector) % kVector);
}

size_t Linear8daPacked::bytes() const {
  return storage.size() + (scales.size() + bias.size()) * sizeof(float) +
         (weight_sums.size() + offsets.size()) * sizeof(int32_t);
}

std::shared_ptr<const Linear8daPacked> pack_linear_8da(const Linear8daParams& params,
                                                       const void* weight, const float* scales,
                                                       const int8_t* zero_points,
                                                       const float* bias) {
  std::string reason;
  if (!linear_8da_supports(params, &reason) || weight == nullptr || scales == nullptr) {
    throw std::invalid_argument(reason.empty() ? "linear_8da: no weight" : reason);
  }
  auto p = std::make_shared<Linear8daPacked>();
  const int64_t k = params.k, n = params.n, group = params.group;
  p->params = params;
  p->groups = k / group;
  p->blocks = (n + kBlock - 1) / kBlock;
  p->vectors_per_group = params.bits == 4 ? group / 8 : group / 4;
  p->offset = params.bits == 4 ? 8 : 128;
  p->has_zero_points = zero_points != nullptr;
  p->block_bytes = static_cast<size_t>(p->groups * p->vectors_per_group * kVector);
  const size_t metas = static_cast<size_t>(p->blocks * p->groups * kBlock);
  p->scales.assign(metas, 0.0f);
  p->weight_sums.assign(metas, 0);
  if (p->has_zero_points) p->offsets.assign(metas, p->offset);
  p->bias.assign(static_cast<size_t>(p->blocks * kBlock), 0.0f);
  if (bias != nullptr) std::copy(bias, bias + n, p->bias.begin());
  p->storage.assign(static_cast<size_t>(p->blocks) * p->block_bytes + kVector, 0);
  uint8_t* out = const_cast<uint8_t*>(p->weights());

  const auto* bytes = static_cast<const uint8_t*>(weight);
  // The signed weight of channel c (< n) at k.
  auto value = [&](int64_t c, int64_t i) -> int32_t {
    if (params.bits == 4) {
      const uint8_t byte = bytes[c * (k / 2) + (i >> 1)];
      return static_cast<int32_t>((i & 1) ? (byte >> 4) : (byte & 0xF)) - 8;
    }
    return static_cast<int8_t>(bytes[c * k + i]);
  };
  // The stored unsigned weight; padding channels hold w = 0 (their scales are 0).
  auto stored = [&](int64_t c, int64_t i) -> uint32_t {
    return static_cast<uint32_t>((c < n ? value(c, i) : 0) + p->offset);
  };
  for (int64_t b = 0; b < p->blocks; ++b) {
    for (int64_t g = 0; g < p->groups; ++g) {
      const size_t meta = static_cast<size_t>((b * p->groups + g) * kBlock);
      for (int64_t j = 0; j < kBlock; ++j) {
        const int64_t c = b * kBlock + j;
        if (c >= n) continue;
        const int32_t zero = zero_points ? zero_points[c * p->groups + g] : 0;
        int32_t sum = 0;
        for (int64_t i = g * group; i < (g + 1) * group; ++i) sum += value(c, i) - zero;
        p->scales[meta + j] = scales[c * p->groups + g];
        p->weight_sums[meta + j] = sum;
        if (p->has_zero_points) p->offsets[meta + j] = p->offset + zero;
      }
      uint8_t* v = out + b * p->block_bytes + g * p->vectors_per_group * kVector;
      for (int64_t s = 0; s < group / kStepK; ++s) {
        const int64_t k0 = g * group + s * kStepK;
        for (int64_t j = 0; j < kBlock; ++j) {
          const int64_t c = b * kBlock + j;
          for (int64_t t = 0; t < 4; ++t) {
            if (params.bits == 4) {
              v[4 * j + t] = static_cast<uint8_t>(stored(c, k0 + t) | (stored(c, k0 + 4 + t) << 4));
            } else {
              v[4 * j + t] = static_cast<uint8_t>(stored(c, k0 + t));
              v[kVector + 4 * j + t] = static_cast<uint8_t>(stored(c, k0 + 4 + t));
            }
          }
        }
        v += params.bits == 4 ? kVector : 2 * kVector;
      }
    }
  }
  return p;
}

Linear8daDecodeOptions linear_8da_decode_options() {
  Linear8daDecodeOptions options;
  options.gemv = kernel_switched_on("ET_CPU_LINEAR_8DA_GEMV");
  options.prefetch = switch_number("ET_CPU_LINEAR_8DA_PREFETCH", kDefaultPrefetch, 0, 65536);
  return options;
}

Linear8daGemm::Linear8daGemm(std::shared_ptr<const Linear8daPacked> packed, Linear8daIsa isa)
    : packed_(std::move(packed)),
      isa_(isa),
      gemm_shape_(linear_8da_gemm_shape()),
      decode_(linear_8da_decode_options()) {
  if (!packed_ || isa_ == Linear8daIsa::kNone || isa_ > linear_8da_cpu_isa()) {
    throw std::invalid_argument("linear_8da: no packed weights or an ISA this CPU lacks");
  }
}

void Linear8daGemm::run(const float* x, int64_t rows, float* y, WorkPool* pool) {
  const Linear8daPacked& p = *packed_;
  const int64_t k = p.params.k, group = p.params.group;
  if (rows <= 0) return;
  rows_.stride = (k + kVector - 1) / kVector * kVector;
  rows_.q.resize(static_cast<size_t>(rows * rows_.stride));
  rows_.scale.resize(static_cast<size_t>(rows));
  rows_.zero_point.resize(static_cast<size_t>(rows));
  rows_.sums.resize(static_cast<size_t>(rows * p.groups));
  rows_.offset_sums.resize(static_cast<size_t>(rows * p.groups));
  rows_.offset = p.offset;
  const int threads = pool != nullptr ? pool->size() : 1;
  auto quantize = [&](int64_t first, int64_t last) {
    for (int64_t m = first; m < last; ++m) {
      if (isa_ == Linear8daIsa::kAvx512Vnni) {
        quantize_row_avx512(x + m * k, k, group, rows_, m);
      } else {
        quantize_row_avx2(x + m * k, k, group, rows_, m);
      }
    }
  };
  if (threads > 1 && rows >= 8) {
    const size_t parts = static_cast<size_t>(std::min<int64_t>(rows / 4, 4 * threads));
    pool->run(parts, [&](size_t task, int) {
      const auto [first, last] = slice_of(rows, parts, task);
      quantize(first, last);
    });
  } else {
    quantize(0, rows);
  }

  const bool gemm = isa_ == Linear8daIsa::kAvx512Vnni && rows >= kGemmMinRows;
  const Shape shape = shape_of(isa_, p.params.bits);
  const GemmShape gemm_tiles = gemm_shape_;
  const int64_t chunk =
      gemm ? gemm_tiles.blocks : (rows == 1 ? shape.decode_blocks : shape.blocks);
  const int64_t tile_rows = gemm ? gemm_tiles.rows : shape.rows;
  const int64_t chunks = (p.blocks + chunk - 1) / chunk;
  const int64_t tiles = (rows + tile_rows - 1) / tile_rows;
  // About 0.5M multiply-adds per task at least; up to 4 tasks a thread so a descheduled thread
  // delays little (work_pool.h).
  const int64_t work = rows * k * p.params.n;
  const int64_t wanted =
      threads == 1 ? 1 : std::max<int64_t>(1, std::min<int64_t>(4 * threads, work >> 19));
  int64_t block_parts = std::min(chunks, wanted);
  int64_t row_parts = std::min(tiles, (wanted + block_parts - 1) / block_parts);
  if (gemm && wanted > 1 && chunks < 2 * wanted && chunks % wanted != 0) {
    // Few chunks that do not split evenly (11 chunks of N = 512 in 8 parts: 1 or 2 each, one
    // thread ~10% behind): one chunk per task and the rows in parts, tasks of equal size.
    block_parts = chunks;
    row_parts = std::min(tiles, (2 * wanted + chunks - 1) / chunks);
  }
  const size_t tasks = static_cast<size_t>(block_parts * row_parts);
  // The many-row path's unpacked chunk (2 bytes per packed byte), in the running thread's buffer.
  const size_t scratch_bytes = 2 * p.block_bytes * static_cast<size_t>(chunk);
  auto task = [&](size_t index, int) {
    const int64_t bp = static_cast<int64_t>(index) % block_parts;
    const int64_t rp = static_cast<int64_t>(index) / block_parts;
    const auto [c0, c1] =
        slice_of(chunks, static_cast<size_t>(block_parts), static_cast<size_t>(bp));
    const auto [t0, t1] =
        slice_of(tiles, static_cast<size_t>(row_parts), static_cast<size_t>(rp));
    const int64_t r0 = t0 * tile_rows, r1 = std::min(rows, t1 * tile_rows);
    const int64_t b0 = c0 * chunk, b1 = std::min(p.blocks, c1 * chunk);
    if (gemm) {
      uint8_t* scratch = p.params.bits == 4 ? unpack_scratch(scratch_bytes) : nullptr;
      compute_gemm(p, rows_, gemm_tiles, r0, r1, b0, b1, scratch, y);
    } else {
      compute(p, rows_, isa_, shape, r0, r1, b0, b1, y, decode_);
    }
  };
  if (tasks <= 1) {
    task(0, 0);
  } else {
    pool->run(tasks, task);
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
