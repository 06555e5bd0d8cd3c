// DepthwiseInt8 (see depthwise_int8.h): repacking, the register-blocked row kernel, borders.
//
// One output row at a time, its columns in blocks of 8, 4, 2 and 1 pixels, and for each block
// every group of 32 channels in turn (channels innermost: each load walks memory contiguously).
// Per kernel row, each input column of the block's span is loaded once (32 bytes, masked),
// widened to int16 and moved by the input zero point, then meets every tap weight that reaches
// it: two vpdpwssd per tap (even channels, odd channels), 2 x B int32 accumulators in registers.
// Padding reads as the input zero point (a row of it; columns outside the input through an empty
// load mask that keeps the zero-point fill), so it contributes exactly 0 and borders run the
// same code. The requantization follows the header's arithmetic; the clamps are folded onto
// y / output_scale: for a non-decreasing rounding f, f(max(y, a)) = max(f(y), f(a)), and the
// quant range bounds are integers that rint keeps, so the folded clamp gives the same bytes.
#include "backends/cpu/runtime/providers/optimized/kernels/depthwise_int8.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_provider.h"

// y = acc * scale, then + bias, as two roundings (the reference's), never one fused multiply-add.
#pragma GCC optimize("fp-contract=off")

namespace et_cpu_plugin {
namespace onednn {
namespace {

#define ET_DW_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

constexpr int64_t kGroup = 32;  // channels per group: 32 int16 lanes of one vector
constexpr int kMaxKernel = 5;


// What one output row's work needs.
struct RowArgs {
  const uint8_t* rows[kMaxKernel];  // the window's input rows (pixel 0); padding: zero-point row
  const int16_t* weights;           // group 0, see DepthwiseInt8::weights_
  const float* scales;              // group 0, [even 16][odd 16]
  const float* bias;
  int64_t channels;
  int64_t groups;
  int64_t in_w;
  int64_t pad_left;
  __mmask32 tail;  // the last group's channels
  int32_t input_zero_point;
  int32_t output_zero_point;
  float inverse_output_scale;
  float low;
  float high;
  uint8_t* output;  // output row, pixel 0
};

// B pixels from column `ox` on, kernel K x K, column stride S; kSigned: s8 activations.
template <int K, int S, int B, bool kSigned>
ET_DW_VNNI __attribute__((noinline)) void block(const RowArgs& a, int64_t ox) {
  constexpr int kSpan = (B - 1) * S + K;  // input columns the block's windows cover
  const int64_t ix0 = ox * S - a.pad_left;
  bool inside[kSpan];
#pragma GCC unroll 64
  for (int t = 0; t < kSpan; ++t) {
    inside[t] = static_cast<uint64_t>(ix0 + t) < static_cast<uint64_t>(a.in_w);
  }
  const __m512i zp_in = _mm512_set1_epi16(static_cast<int16_t>(a.input_zero_point));
  const __m256i fill = _mm256_set1_epi8(static_cast<char>(a.input_zero_point));
  const __m512i zp_out = _mm512_set1_epi16(static_cast<int16_t>(a.output_zero_point));
  const __m512 inverse = _mm512_set1_ps(a.inverse_output_scale);
  const __m512 low = _mm512_set1_ps(a.low), high = _mm512_set1_ps(a.high);
  for (int64_t g = 0; g < a.groups; ++g) {
    const __mmask32 group_mask = g + 1 == a.groups ? a.tail : static_cast<__mmask32>(~0u);
    const int64_t c = g * kGroup;
    __m512i even[B], odd[B];
#pragma GCC unroll 16
    for (int b = 0; b < B; ++b) {
      even[b] = _mm512_setzero_si512();
      odd[b] = _mm512_setzero_si512();
    }
    const int16_t* w = a.weights + g * (K * K * 2 * kGroup);
#pragma GCC unroll 8
    for (int r = 0; r < K; ++r) {
      __m512i we[K], wo[K];
#pragma GCC unroll 8
      for (int kx = 0; kx < K; ++kx) {
        we[kx] = _mm512_loadu_si512(w + ((r * K + kx) * 2 + 0) * kGroup);
        wo[kx] = _mm512_loadu_si512(w + ((r * K + kx) * 2 + 1) * kGroup);
      }
      const uint8_t* p = a.rows[r] + ix0 * a.channels + c;
#pragma GCC unroll 64
      for (int t = 0; t < kSpan; ++t, p += a.channels) {
        asm("" : "+r"(p));  // one add per column, not kSpan live offsets
        const __mmask32 m = inside[t] ? group_mask : static_cast<__mmask32>(0);
        const __m256i bytes = _mm256_mask_loadu_epi8(fill, m, p);
        __m512i x = kSigned ? _mm512_cvtepi8_epi16(bytes) : _mm512_cvtepu8_epi16(bytes);
        x = _mm512_sub_epi16(x, zp_in);
#pragma GCC unroll 8
        for (int kx = 0; kx < K; ++kx) {
          const int d = t - kx;  // S * (pixel of the block this tap serves)
          if (d < 0 || d % S != 0 || d / S >= B) continue;
          even[d / S] = _mm512_dpwssd_epi32(even[d / S], x, we[kx]);
          odd[d / S] = _mm512_dpwssd_epi32(odd[d / S], x, wo[kx]);
        }
      }
    }
    const float* sc = a.scales + c;
    const float* bi = a.bias + c;
    const __m512 scale_even = _mm512_loadu_ps(sc), scale_odd = _mm512_loadu_ps(sc + 16);
    const __m512 bias_even = _mm512_loadu_ps(bi), bias_odd = _mm512_loadu_ps(bi + 16);
    uint8_t* out = a.output + ox * a.channels + c;
#pragma GCC unroll 16
    for (int b = 0; b < B; ++b, out += a.channels) {
      __m512 fe = _mm512_mul_ps(_mm512_cvtepi32_ps(even[b]), scale_even);
      __m512 fo = _mm512_mul_ps(_mm512_cvtepi32_ps(odd[b]), scale_odd);
      asm("" : "+v"(fe), "+v"(fo));  // two roundings: no fused multiply-add
      fe = _mm512_mul_ps(_mm512_add_ps(fe, bias_even), inverse);
      fo = _mm512_mul_ps(_mm512_add_ps(fo, bias_odd), inverse);
      fe = _mm512_min_ps(_mm512_max_ps(fe, low), high);
      fo = _mm512_min_ps(_mm512_max_ps(fo, low), high);
      // Round half to even (MXCSR's default), then channels back in order as int16 pairs.
      const __m512i qe = _mm512_cvtps_epi32(fe), qo = _mm512_cvtps_epi32(fo);
      __m512i q = _mm512_mask_blend_epi16(0xAAAAAAAAu, qe, _mm512_slli_epi32(qo, 16));
      q = _mm512_add_epi16(q, zp_out);
      _mm256_mask_storeu_epi8(out, group_mask, _mm512_cvtepi16_epi8(q));
    }
  }
}

template <int K, int S, bool kSigned>
void row(const RowArgs& a, int64_t out_w) {
  int64_t ox = 0;
  for (; ox + 8 <= out_w; ox += 8) block<K, S, 8, kSigned>(a, ox);
  if (out_w - ox >= 4) {
    block<K, S, 4, kSigned>(a, ox);
    ox += 4;
  }
  if (out_w - ox >= 2) {
    block<K, S, 2, kSigned>(a, ox);
    ox += 2;
  }
  if (out_w - ox >= 1) block<K, S, 1, kSigned>(a, ox);
}

using RowKernel = void (*)(const RowArgs&, int64_t);

template <bool kSigned>
RowKernel row_kernel(int64_t k, int64_t s) {
  if (k == 3) return s == 1 ? row<3, 1, kSigned> : row<3, 2, kSigned>;
  return s == 1 ? row<5, 1, kSigned> : row<5, 2, kSigned>;
}

}  // namespace

bool cpu_has_avx512_vnni() {
  static const bool has = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
}

bool int8_quant_valid(const DepthwiseInt8Quant& q) {
  const int32_t low = q.is_signed ? -128 : 0, high = low + 255;
  auto in_range = [&](int64_t v) { return v >= low && v <= high; };
  return in_range(q.input_zero_point) && in_range(q.output_zero_point) &&
         in_range(q.quant_min) && in_range(q.quant_max) && q.quant_min <= q.quant_max &&
         q.input_scale > 0.f && q.output_scale > 0.f;
}

FoldedRequant fold_requant(const DepthwiseInt8Quant& q) {
  FoldedRequant r;
  r.inverse = static_cast<float>(1.0 / static_cast<double>(q.output_scale));
  const float inf = std::numeric_limits<float>::infinity();
  const float out_min = std::isfinite(q.output_min) ? static_cast<float>(q.output_min) : -inf;
  const float out_max = std::isfinite(q.output_max) ? static_cast<float>(q.output_max) : inf;
  r.low = std::max(out_min * r.inverse, static_cast<float>(q.quant_min - q.output_zero_point));
  r.high = std::min(out_max * r.inverse, static_cast<float>(q.quant_max - q.output_zero_point));
  return r;
}

bool depthwise_int8_supports(const DepthwiseShape& s, const DepthwiseInt8Quant& q) {
  if (!kernel_switched_on("ET_CPU_OWN_DEPTHWISE_INT8") || !cpu_has_avx512_vnni()) return false;
  if (s.channels < 1 || s.in_h < 1 || s.in_w < 1 || s.out_h < 1 || s.out_w < 1 ||
      s.stride_h < 1 || s.pad_top < 0 || s.pad_left < 0) {
    return false;
  }
  if (s.kernel_h != s.kernel_w || (s.kernel_w != 3 && s.kernel_w != 5)) return false;
  if (s.stride_w != 1 && s.stride_w != 2) return false;
  return int8_quant_valid(q);
}

DepthwiseInt8::DepthwiseInt8(const DepthwiseShape& shape, const int8_t* weight,
                             const float* weight_scales, const float* bias,
                             const DepthwiseInt8Quant& quant)
    : shape_(shape), quant_(quant) {
  if (!depthwise_int8_supports(shape_, quant_)) {
    throw ProviderError("int8 depthwise conv: this shape is not supported here");
  }
  if (weight == nullptr || weight_scales == nullptr) {
    throw ProviderError("int8 depthwise conv: weight or scales are null");
  }
  const int64_t channels = shape_.channels, taps = shape_.kernel_h * shape_.kernel_w;
  groups_ = (channels + kGroup - 1) / kGroup;
  weights_.assign(static_cast<size_t>(groups_ * taps * 2 * kGroup), 0);
  scales_.assign(static_cast<size_t>(groups_ * kGroup), 0.f);
  bias_.assign(static_cast<size_t>(groups_ * kGroup), 0.f);
  for (int64_t c = 0; c < channels; ++c) {
    const int64_t g = c / kGroup, lane = c % kGroup, half = lane % 2;
    for (int64_t t = 0; t < taps; ++t) {
      weights_[static_cast<size_t>(((g * taps + t) * 2 + half) * kGroup + lane)] =
          weight[c * taps + t];
    }
    // [even 16][odd 16] within the group: lane i of the even / odd accumulator is channel 2i / 2i+1.
    const size_t at = static_cast<size_t>(g * kGroup + half * 16 + lane / 2);
    scales_[at] = quant_.input_scale * weight_scales[c];
    bias_[at] = bias != nullptr ? bias[c] : 0.f;
  }
  zero_row_.assign(static_cast<size_t>(shape_.in_w * channels),
                   static_cast<uint8_t>(quant_.input_zero_point));
  const FoldedRequant folded = fold_requant(quant_);
  inverse_output_scale_ = folded.inverse;
  low_ = folded.low;
  high_ = folded.high;
}

void DepthwiseInt8::run_rows(const uint8_t* input, uint8_t* output, int64_t row_begin,
                             int64_t row_end) const {
  const DepthwiseShape& s = shape_;
  RowArgs a{};
  a.weights = weights_.data();
  a.scales = scales_.data();
  a.bias = bias_.data();
  a.channels = s.channels;
  a.groups = groups_;
  a.in_w = s.in_w;
  a.pad_left = s.pad_left;
  const int64_t rest = s.channels % kGroup;
  a.tail = rest == 0 ? static_cast<__mmask32>(~0u) : static_cast<__mmask32>((1u << rest) - 1);
  a.input_zero_point = quant_.input_zero_point;
  a.output_zero_point = quant_.output_zero_point;
  a.inverse_output_scale = inverse_output_scale_;
  a.low = low_;
  a.high = high_;
  const RowKernel kernel = quant_.is_signed ? row_kernel<true>(s.kernel_w, s.stride_w)
                                            : row_kernel<false>(s.kernel_w, s.stride_w);
  const int64_t row_bytes = s.in_w * s.channels;
  for (int64_t oy = row_begin; oy < row_end; ++oy) {
    for (int64_t r = 0; r < s.kernel_h; ++r) {
      const int64_t iy = oy * s.stride_h - s.pad_top + r;
      a.rows[r] = iy >= 0 && iy < s.in_h ? input + iy * row_bytes : zero_row_.data();
    }
    a.output = output + oy * s.out_w * s.channels;
    kernel(a, s.out_w);
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
