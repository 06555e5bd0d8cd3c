// Attention-mask ops on our own loops (see mask_ops.h).
#include "backends/cpu/runtime/providers/optimized/kernels/mask_ops.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {
namespace {

template <typename Op>
void compare_loop(const float* x, float scalar, bool* out, int64_t count, Op op) {
  for (int64_t i = 0; i < count; ++i) out[i] = op(x[i], scalar);
}

void compare_scalar_loops(Compare op, const float* x, float s, bool* out, int64_t count) {
  switch (op) {
    case Compare::kEq:
      return compare_loop(x, s, out, count, [](float a, float b) { return a == b; });
    case Compare::kNe:
      return compare_loop(x, s, out, count, [](float a, float b) { return a != b; });
    case Compare::kLt:
      return compare_loop(x, s, out, count, [](float a, float b) { return a < b; });
    case Compare::kLe:
      return compare_loop(x, s, out, count, [](float a, float b) { return a <= b; });
    case Compare::kGt:
      return compare_loop(x, s, out, count, [](float a, float b) { return a > b; });
    case Compare::kGe:
      return compare_loop(x, s, out, count, [](float a, float b) { return a >= b; });
  }
}

// 16 floats compared at once, the mask widened to 16 bytes of 0 / 1 (AVX-512F only: vpmovdb).
// GCC 12 does not vectorize the loops above at -O2 (a compare and a setcc per element).
template <int kPredicate>
ET_AVX512 void compare16(const float* x, float scalar, bool* out, int64_t count) {
  const __m512 s = _mm512_set1_ps(scalar);
  const __m512i one = _mm512_set1_epi32(1);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __mmask16 m = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), s, kPredicate);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm512_cvtepi32_epi8(_mm512_maskz_mov_epi32(m, one)));
  }
  for (; i < count; ++i) {
    const __mmask16 m = _mm512_cmp_ps_mask(_mm512_set1_ps(x[i]), s, kPredicate);
    out[i] = (m & 1u) != 0;
  }
}

void compare_scalar_avx512(Compare op, const float* x, float s, bool* out, int64_t count) {
  switch (op) {
    case Compare::kEq:
      return compare16<_CMP_EQ_OQ>(x, s, out, count);
    case Compare::kNe:
      return compare16<_CMP_NEQ_UQ>(x, s, out, count);  // NaN != anything
    case Compare::kLt:
      return compare16<_CMP_LT_OQ>(x, s, out, count);
    case Compare::kLe:
      return compare16<_CMP_LE_OQ>(x, s, out, count);
    case Compare::kGt:
      return compare16<_CMP_GT_OQ>(x, s, out, count);
    case Compare::kGe:
      return compare16<_CMP_GE_OQ>(x, s, out, count);
  }
}

// A row whose condition is one value (the attention guard's per-row flag): a copy or a fill.
void select_row(bool take_a, const float* a, int64_t a_step, const float* b, int64_t b_step,
                float* out, int64_t count) {
  const float* from = take_a ? a : b;
  const int64_t step = take_a ? a_step : b_step;
  if (step == 1) {
    std::memcpy(out, from, sizeof(float) * static_cast<size_t>(count));
  } else if (step == 0) {
    std::fill(out, out + count, from[0]);
  } else {
    for (int64_t i = 0; i < count; ++i) out[i] = from[i * step];
  }
}

}  // namespace

void compare_scalar(Compare op, const float* x, float s, bool* out, int64_t count) {
  if (cpu_has_avx512()) return compare_scalar_avx512(op, x, s, out, count);
  compare_scalar_loops(op, x, s, out, count);
}

void logical_not(const bool* x, bool* out, int64_t count) {
  // A bool is one byte holding 0 or 1: flip eight at a time with one xor.
  const uint8_t* in = reinterpret_cast<const uint8_t*>(x);
  uint8_t* to = reinterpret_cast<uint8_t*>(out);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    uint64_t word;
    std::memcpy(&word, in + i, 8);
    word ^= 0x0101010101010101ull;
    std::memcpy(to + i, &word, 8);
  }
  for (; i < count; ++i) to[i] = static_cast<uint8_t>((in[i] != 0) ^ 1u);
}

std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& dims,
                                       const std::vector<int64_t>& out_dims) {
  if (dims.size() > out_dims.size()) return {};
  std::vector<int64_t> strides(out_dims.size(), 0);
  int64_t stride = 1;
  const size_t offset = out_dims.size() - dims.size();
  for (size_t i = dims.size(); i-- > 0;) {
    const int64_t size = dims[i];
    const int64_t out_size = out_dims[offset + i];
    if (size != out_size && size != 1) return {};
    strides[offset + i] = size == 1 ? 0 : stride;
    stride *= size;
  }
  return strides;
}

WherePlan WherePlan::make(const std::vector<int64_t>& condition_dims,
                          const std::vector<int64_t>& a_dims, const std::vector<int64_t>& b_dims,
                          const std::vector<int64_t>& out_dims, std::string* error) {
  WherePlan plan;
  const std::vector<int64_t> strides[3] = {broadcast_strides(condition_dims, out_dims),
                                           broadcast_strides(a_dims, out_dims),
                                           broadcast_strides(b_dims, out_dims)};
  for (const auto& s : strides) {
    if (s.size() != out_dims.size()) {
      *error = "where: an operand does not broadcast to the output's shape";
      return plan;
    }
  }
  // Merge a dim into the one inside it when every operand steps through both as through one
  // (the innermost loop gets as long as possible); drop size-1 dims.
  for (size_t d = 0; d < out_dims.size(); ++d) {
    if (out_dims[d] == 1) continue;
    if (!plan.dims.empty()) {
      const int64_t size = out_dims[d];
      bool mergeable = true;
      const std::vector<int64_t>* mine[3] = {&plan.condition, &plan.a, &plan.b};
      for (int k = 0; k < 3; ++k) {
        if (mine[k]->back() != strides[k][d] * size) mergeable = false;
      }
      if (mergeable) {
        plan.dims.back() *= size;
        plan.condition.back() = strides[0][d];
        plan.a.back() = strides[1][d];
        plan.b.back() = strides[2][d];
        continue;
      }
    }
    plan.dims.push_back(out_dims[d]);
    plan.condition.push_back(strides[0][d]);
    plan.a.push_back(strides[1][d]);
    plan.b.push_back(strides[2][d]);
  }
  if (plan.dims.empty()) {  // one element
    plan.dims = {1};
    plan.condition = plan.a = plan.b = {0};
  }
  return plan;
}

void WherePlan::run(const bool* condition_data, const float* a_data, const float* b_data,
                    float* out) const {
  const size_t rank = dims.size();
  const int64_t inner = dims[rank - 1];
  const int64_t cs = condition[rank - 1], as = a[rank - 1], bs = b[rank - 1];
  std::vector<int64_t> index(rank, 0);
  int64_t co = 0, ao = 0, bo = 0;  // offsets of the current row
  for (;;) {
    const bool* cr = condition_data + co;
    const float* ar = a_data + ao;
    const float* br = b_data + bo;
    if (cs == 0) {
      select_row(cr[0], ar, as, br, bs, out, inner);
    } else {
      for (int64_t i = 0; i < inner; ++i) out[i] = cr[i * cs] ? ar[i * as] : br[i * bs];
    }
    out += inner;
    // Next row: an odometer over the outer dims.
    size_t d = rank - 1;
    for (;;) {
      if (d == 0) return;
      --d;
      co += condition[d];
      ao += a[d];
      bo += b[d];
      if (++index[d] < dims[d]) break;
      co -= condition[d] * dims[d];
      ao -= a[d] * dims[d];
      bo -= b[d] * dims[d];
      index[d] = 0;
    }
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
