// One-row batched products on strided operands (see row_bmm.h).
#include "backends/cpu/runtime/providers/optimized/kernels/row_bmm.h"

#include <algorithm>

#include "backends/cpu/runtime/providers/optimized/common/slices.h"
#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/common/work_pool.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {
namespace {

// 16 lanes of partial sums of a[k] * b[k] over k, both contiguous (masked tail).
ET_AVX512 inline __m512 partial_dot(const float* a, const float* b, int64_t k) {
  __m512 s = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; i += 16) {
    const __mmask16 mask = i + 16 <= k ? static_cast<__mmask16>(0xFFFF)
                                       : static_cast<__mmask16>((1u << (k - i)) - 1u);
    s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a + i), _mm512_maskz_loadu_ps(mask, b + i),
                        s);
  }
  return s;
}

// [x's 128-bit lanes 0 + 1, 2 + 3, y's 0 + 1, 2 + 3].
ET_AVX512 inline __m512 fold_lanes(__m512 x, __m512 y) {
  constexpr __mmask16 kAll = 0xFFFF;
  return _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAll, x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_maskz_shuffle_f32x4(kAll, x, y, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Lane t of the result: the sum of v[t]'s 16 lanes, for 16 vectors at once (a transposing tree
// of pairwise sums: within 128-bit lanes by unpack and shuffle, then across them), instead of
// 16 separate horizontal sums. Zero-masked shuffles, as vector_math.h's horizontal16 (GCC 12).
ET_AVX512 inline __m512 sums_of_16(const __m512 (&v)[16]) {
  constexpr __mmask16 kAll = 0xFFFF;
  __m512 t[8], u[4];
  #pragma GCC unroll 8
  for (int p = 0; p < 8; ++p) {  // per 128-bit lane: v[2p] at 0 and 2, v[2p+1] at 1 and 3
    t[p] = _mm512_add_ps(_mm512_maskz_unpacklo_ps(kAll, v[2 * p], v[2 * p + 1]),
                         _mm512_maskz_unpackhi_ps(kAll, v[2 * p], v[2 * p + 1]));
  }
  #pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {  // per 128-bit lane: v[4q .. 4q+3] at 0 .. 3
    u[q] = _mm512_add_ps(
        _mm512_maskz_shuffle_ps(kAll, t[2 * q], t[2 * q + 1], _MM_SHUFFLE(1, 0, 1, 0)),
        _mm512_maskz_shuffle_ps(kAll, t[2 * q], t[2 * q + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // Across the 128-bit lanes: pairs of lanes, then pairs of pairs.
  return fold_lanes(fold_lanes(u[0], u[1]), fold_lanes(u[2], u[3]));
}

// b's k contiguous: outputs j in [j0, j1), every batch row each; 16 batch rows at a time.
ET_AVX512 void dot_columns(const RowBmmParams& p, const float* a, const float* b, float* out,
                           int64_t j0, int64_t j1) {
  alignas(64) float sums[16];
  for (int64_t j = j0; j < j1; ++j) {
    int64_t i = 0;
    for (; i + 16 <= p.batch; i += 16) {
      __m512 v[16];
      #pragma GCC unroll 16
      for (int t = 0; t < 16; ++t) {
        v[t] = partial_dot(a + (i + t) * p.a_batch, b + (i + t) * p.b_batch + j * p.b_n, p.k);
      }
      _mm512_store_ps(sums, sums_of_16(v));
      for (int t = 0; t < 16; ++t) out[(i + t) * p.n + j] = sums[t];
    }
    for (; i < p.batch; ++i) {
      out[i * p.n + j] = horizontal16<Horizontal::kSum>(
          partial_dot(a + i * p.a_batch, b + i * p.b_batch + j * p.b_n, p.k));
    }
  }
}

// b's k contiguous, batch rows far apart ([heads, positions, dim] caches): batch rows [i0, i1)
// outermost, each row's outputs j 16 at a time, so each batch row's part of b is read front to
// back.
ET_AVX512 void dot_rows(const RowBmmParams& p, const float* a, const float* b, float* out,
                        int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) {
    const float* x = a + i * p.a_batch;
    const float* w = b + i * p.b_batch;
    int64_t j = 0;
    for (; j + 16 <= p.n; j += 16) {
      __m512 v[16];
      #pragma GCC unroll 16
      for (int t = 0; t < 16; ++t) v[t] = partial_dot(x, w + (j + t) * p.b_n, p.k);
      _mm512_storeu_ps(out + i * p.n + j, sums_of_16(v));
    }
    for (; j < p.n; ++j) {
      out[i * p.n + j] = horizontal16<Horizontal::kSum>(partial_dot(x, w + j * p.b_n, p.k));
    }
  }
}

// b's n contiguous, batch rows far apart ([heads, positions, dim] caches): batch rows [i0, i1)
// outermost, per row 64 outputs at a time in registers over every k in order, so each batch
// row's part of b is read front to back. Each output's sum runs over k in the same order as in
// accumulate_rows: the same floats.
ET_AVX512 void accumulate_by_row(const RowBmmParams& p, const float* a, const float* b,
                                 float* out, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t j0 = 0; j0 < p.n; j0 += 64) {
      __mmask16 mask[4];
      __m512 acc[4];
      #pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        const int64_t j = j0 + 16 * v;
        const int64_t width = std::max<int64_t>(0, std::min<int64_t>(16, p.n - j));
        mask[v] = static_cast<__mmask16>((1u << width) - 1u);
        acc[v] = _mm512_setzero_ps();
      }
      for (int64_t kk = 0; kk < p.k; ++kk) {
        const __m512 scale = _mm512_set1_ps(a[i * p.a_batch + kk * p.a_k]);
        const float* row = b + i * p.b_batch + kk * p.b_k + j0;
        #pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
          acc[v] = _mm512_fmadd_ps(scale, _mm512_maskz_loadu_ps(mask[v], row + 16 * v), acc[v]);
        }
      }
      #pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) _mm512_mask_storeu_ps(out + i * p.n + j0 + 16 * v, mask[v], acc[v]);
    }
  }
}

// b's n contiguous: batch rows [i0, i1), out[i, :] = sum over k in order of a[i, k] * b[i, k, :]
// (accumulated in out, k outermost so b's rows are read in memory order).
ET_AVX512 void accumulate_rows(const RowBmmParams& p, const float* a, const float* b, float* out,
                               int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) std::fill(out + i * p.n, out + (i + 1) * p.n, 0.0f);
  for (int64_t kk = 0; kk < p.k; ++kk) {
    for (int64_t i = i0; i < i1; ++i) {
      const __m512 scale = _mm512_set1_ps(a[i * p.a_batch + kk * p.a_k]);
      const float* row = b + i * p.b_batch + kk * p.b_k;
      float* o = out + i * p.n;
      for (int64_t j = 0; j < p.n; j += 16) {
        const __mmask16 mask = j + 16 <= p.n ? static_cast<__mmask16>(0xFFFF)
                                             : static_cast<__mmask16>((1u << (p.n - j)) - 1u);
        _mm512_mask_storeu_ps(o + j, mask,
                              _mm512_fmadd_ps(scale, _mm512_maskz_loadu_ps(mask, row + j),
                                              _mm512_maskz_loadu_ps(mask, o + j)));
      }
    }
  }
}

}  // namespace

bool row_bmm_supports(const RowBmmParams& p) {
  return kernel_switched_on("ET_CPU_ROW_BMM") && cpu_has_avx512() && p.batch > 0 && p.k > 0 &&
         p.n > 0 && p.a_k == 1 && (p.b_k == 1 || p.b_n == 1);
}

void row_bmm(const RowBmmParams& p, const float* a, const float* b, float* out, WorkPool* pool) {
  const bool dots = p.b_k == 1;
  // Batch rows outermost when b's batch stride is the largest (each row's part of b contiguous),
  // else the other index (positions of a [positions, heads, dim] cache) outermost.
  const bool by_row = dots ? p.b_batch >= p.b_n : p.b_batch >= p.b_k;
  const bool by_columns = dots && !by_row;
  const int64_t units = by_columns ? p.n : p.batch;
  // About 64 KiB of b per task at least; up to 4 tasks a thread (work_pool.h).
  const int64_t threads = pool != nullptr ? pool->size() : 1;
  const int64_t bytes = p.batch * p.k * p.n * static_cast<int64_t>(sizeof(float));
  const int64_t tasks =
      std::max<int64_t>(1, std::min({units, 4 * threads, bytes / (64 * 1024)}));
  auto task = [&](size_t index, int) {
    const auto [begin, end] = slice_of(units, static_cast<size_t>(tasks), index);
    if (dots) {
      (by_row ? dot_rows : dot_columns)(p, a, b, out, begin, end);
    } else {
      (by_row ? accumulate_by_row : accumulate_rows)(p, a, b, out, begin, end);
    }
  };
  run_tasks(pool, static_cast<size_t>(tasks), task);
}

}  // namespace onednn
}  // namespace et_cpu_plugin
