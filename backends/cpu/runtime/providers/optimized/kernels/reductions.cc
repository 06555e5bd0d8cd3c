// Reductions over adjacent dims on our own loops (see reductions.h).
#include "backends/cpu/runtime/providers/optimized/kernels/reductions.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {

ReductionShape ReductionShape::over(const std::vector<int64_t>& sizes, std::vector<int64_t> dims,
                                    std::string* error) {
  ReductionShape shape;
  const int64_t rank = static_cast<int64_t>(sizes.size());
  if (dims.empty()) {
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
  }
  for (int64_t& d : dims) {
    if (d < -std::max<int64_t>(rank, 1) || d >= std::max<int64_t>(rank, 1)) {
      *error = "reduction dim " + std::to_string(d) + " out of range for rank " +
               std::to_string(rank);
      return shape;
    }
    if (d < 0) d += std::max<int64_t>(rank, 1);
  }
  std::sort(dims.begin(), dims.end());
  for (size_t i = 1; i < dims.size(); ++i) {
    if (dims[i] != dims[i - 1] + 1) {
      *error = "reduction dims must be distinct and adjacent";
      return shape;
    }
  }
  if (rank == 0) return shape;  // a 0-dim tensor: one element, reduced to itself
  for (int64_t d = 0; d < rank; ++d) {
    if (d < dims.front()) {
      shape.outer *= sizes[d];
    } else if (d <= dims.back()) {
      shape.extent *= sizes[d];
    } else {
      shape.inner *= sizes[d];
    }
  }
  if (shape.extent == 0 && shape.outputs() > 0) {
    *error = "reduction over an empty dim has no identity here";
  }
  return shape;
}

namespace {

// max / min of `count` floats ignoring NaN, and whether one was seen (the caller returns NaN).
float row_max_loops(const float* p, int64_t count, bool minimum, bool* nan) {
  float best = p[0];
  bool seen = p[0] != p[0];
  for (int64_t k = 1; k < count; ++k) {
    const float v = p[k];
    seen |= v != v;
    best = minimum ? (v < best ? v : best) : (v > best ? v : best);
  }
  *nan = seen;
  return best;
}

// The same on 16 lanes: GCC 12 keeps the loop above scalar at -O2 (6.5 ns per element measured,
// slower than ExecuTorch's kernel).
ET_AVX512 float row_max16(const float* p, int64_t count, bool minimum, bool* nan) {
  __m512 best = _mm512_set1_ps(p[0]);
  __mmask16 unordered = 0;
  int64_t k = 0;
  for (; k + 16 <= count; k += 16) {
    const __m512 v = _mm512_loadu_ps(p + k);
    unordered |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    best = minimum ? _mm512_min_ps(best, v) : _mm512_max_ps(best, v);
  }
  if (k < count) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (count - k)) - 1u);
    const __m512 v = _mm512_mask_loadu_ps(best, tail, p + k);  // unused lanes keep `best`
    unordered |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    best = minimum ? _mm512_min_ps(best, v) : _mm512_max_ps(best, v);
  }
  *nan = unordered != 0;
  return minimum ? horizontal16<Horizontal::kMin>(best) : horizontal16<Horizontal::kMax>(best);
}

// out[i] = max (min) over k of block[k * inner + i]; NaN where any was NaN (a lane's unordered
// compare, blended in last). A channels-last activation's max over its spatial dims, `inner` its
// channel count: up to 128 channels (8 vectors, the last masked) at a time, each row of them read
// in one contiguous run per k.
ET_AVX512 void column_max16(const float* block, int64_t extent, int64_t inner, bool minimum,
                            float* out) {
  constexpr int kVectors = 8;
  for (int64_t i0 = 0; i0 < inner; i0 += 16 * kVectors) {
    __mmask16 m[kVectors];
    __m512 best[kVectors];
    __mmask16 unordered[kVectors];
    for (int v = 0; v < kVectors; ++v) {
      const int64_t lanes = std::max<int64_t>(0, std::min<int64_t>(16, inner - i0 - 16 * v));
      m[v] = static_cast<__mmask16>((1u << lanes) - 1u);
      best[v] = _mm512_maskz_loadu_ps(m[v], block + i0 + 16 * v);
      unordered[v] = _mm512_cmp_ps_mask(best[v], best[v], _CMP_UNORD_Q);
    }
    for (int64_t k = 1; k < extent; ++k) {
      const float* row = block + k * inner + i0;
      for (int v = 0; v < kVectors; ++v) {
        const __m512 x = _mm512_maskz_loadu_ps(m[v], row + 16 * v);
        unordered[v] |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        best[v] = minimum ? _mm512_min_ps(best[v], x) : _mm512_max_ps(best[v], x);
      }
    }
    const __m512 nan = _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN());
    for (int v = 0; v < kVectors; ++v) {
      _mm512_mask_storeu_ps(out + i0 + 16 * v, m[v],
                            _mm512_mask_blend_ps(unordered[v], best[v], nan));
    }
  }
}

}  // namespace

void reduce_max(const ReductionShape& s, bool minimum, const float* x, float* out) {
  if (s.inner == 1) {  // max over time, a row at a time: contiguous
    const bool vector = cpu_has_avx512();
    for (int64_t o = 0; o < s.outer; ++o) {
      bool nan = false;
      const float* row = x + o * s.extent;
      const float best = vector ? row_max16(row, s.extent, minimum, &nan)
                                : row_max_loops(row, s.extent, minimum, &nan);
      out[o] = nan ? std::numeric_limits<float>::quiet_NaN() : best;
    }
    return;
  }
  if (cpu_has_avx512()) {
    for (int64_t o = 0; o < s.outer; ++o) {
      column_max16(x + o * s.extent * s.inner, s.extent, s.inner, minimum, out + o * s.inner);
    }
    return;
  }
  for (int64_t o = 0; o < s.outer; ++o) {
    const float* block = x + o * s.extent * s.inner;
    float* row = out + o * s.inner;
    std::memcpy(row, block, sizeof(float) * static_cast<size_t>(s.inner));
    for (int64_t k = 1; k < s.extent; ++k) {
      const float* slice = block + k * s.inner;
      for (int64_t i = 0; i < s.inner; ++i) {
        const float v = slice[i];
        // NaN wins and stays: a NaN in `row` compares false, one in `v` replaces it.
        const bool take = minimum ? (v < row[i]) : (v > row[i]);
        if (take || std::isnan(v)) row[i] = std::isnan(row[i]) ? row[i] : v;
      }
    }
  }
}

void reduce_argmax(const ReductionShape& s, bool minimum, const float* x, int64_t* out) {
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      const float* p = x + o * s.extent * s.inner + i;
      int64_t best = 0;
      float value = p[0];
      if (!std::isnan(value)) {
        for (int64_t k = 1; k < s.extent; ++k) {
          const float v = p[k * s.inner];
          if (std::isnan(v)) {
            best = k;
            break;
          }
          if (minimum ? (v < value) : (v > value)) {
            value = v;
            best = k;
          }
        }
      }
      out[o * s.inner + i] = best;
    }
  }
}

void reduce_any(const ReductionShape& s, const bool* x, bool* out) {
  const uint8_t* in = reinterpret_cast<const uint8_t*>(x);
  for (int64_t o = 0; o < s.outer; ++o) {
    const uint8_t* block = in + o * s.extent * s.inner;
    bool* row = out + o * s.inner;
    if (s.inner == 1) {  // the attention guard: one row of scores per output
      uint64_t seen = 0;  // eight bools at a time
      int64_t k = 0;
      for (; k + 8 <= s.extent; k += 8) {
        uint64_t word;
        std::memcpy(&word, block + k, 8);
        seen |= word;
      }
      for (; k < s.extent; ++k) seen |= block[k];
      row[0] = seen != 0;
      continue;
    }
    for (int64_t i = 0; i < s.inner; ++i) row[i] = false;
    for (int64_t k = 0; k < s.extent; ++k) {
      for (int64_t i = 0; i < s.inner; ++i) row[i] = row[i] || block[k * s.inner + i] != 0;
    }
  }
}

void row_means(int64_t rows, int64_t length, const float* x, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * length;
    float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= length; i += 8) {
      for (int lane = 0; lane < 8; ++lane) partial[lane] += row[i + lane];
    }
    float sum = ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
                ((partial[4] + partial[5]) + (partial[6] + partial[7]));
    for (; i < length; ++i) sum += row[i];
    out[r] = length > 0 ? sum / static_cast<float>(length) : std::nanf("");
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
