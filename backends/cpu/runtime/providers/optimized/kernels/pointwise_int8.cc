// PointwiseInt8 (see pointwise_int8.h): output channels in column groups of 4 vectors (3 when 3,
// 6 or 9 are left, the last 2 or 1), each over blocks of 6 / 8 / 12 / 12 pixels with up to 24
// int32 accumulators in registers; per 4 input channels, one broadcast of each pixel's 4 bytes
// (sign bits flipped for s8) meets the group's weight vectors through vpdpbusd. The epilogue is
// depthwise_int8.cc's: two roundings, the clamps folded onto y / output_scale, vcvtps2dq (half
// to even), plus the zero point, narrowed, one (masked) store per vector.
#include "backends/cpu/runtime/providers/optimized/kernels/pointwise_int8.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_provider.h"

#pragma GCC optimize("fp-contract=off")

namespace et_cpu_plugin {
namespace onednn {
namespace {

#define ET_PW_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define ET_PW_INLINE __attribute__((always_inline))

// The kernel's code (and the lambdas in it, which take no target attribute of their own) is
// compiled for AVX-512 VNNI; it only runs when pointwise_int8_supports saw the CPU has it.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni")

template <int N>
using Seq = std::make_integer_sequence<int, N>;

// f(std::integral_constant<int, I>) for I in [0, N), unrolled by the compiler's front end.
template <class F, int... I>
__attribute__((always_inline)) inline void each(std::integer_sequence<int, I...>, F&& f) {
  (f(std::integral_constant<int, I>{}), ...);
}

constexpr int64_t kMaxK = 1024;  // input channels (the int32 sums stay far from overflow)


struct Args {
  const uint8_t* input;   // pixel 0 of the block
  uint8_t* output;        // pixel 0 of the block
  const int8_t* weights;  // vector 0 of the block
  const int32_t* initial;
  const float* scales;
  const float* bias;
  int64_t k, n;
  int64_t vector;      // index of the block's first output vector
  int64_t vectors;     // total output vectors
  uint32_t flip;       // 0x80808080 or 0
  int32_t output_zero_point;
  float inverse, low, high;
};

// acc += the products of x's u8 and w's s8, 4 per lane. In asm: GCC 12's register allocator
// copied each accumulator of the intrinsic's form through a scratch register and stored it to
// the stack on every step of the K loop.
__attribute__((always_inline)) inline void dpbusd(__m512i& acc, __m512i x, __m512i w) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
}

// P pixels x V output vectors from `a.vector` on. The accumulators are indexed only by template
// constants (`each` below), so the compiler keeps all P * V of them in registers: with indices
// from plain loops (even unrolled ones) GCC kept the array on the stack and stored every
// accumulator back on each step of the K loop.
template <int P, int V>
ET_PW_VNNI __attribute__((noinline)) void block(const Args& a) {
  constexpr Seq<P> pixels{};
  constexpr Seq<V> vectors{};
  __m512i acc[P * V];
  each(vectors, [&](auto v) ET_PW_INLINE {
    const __m512i init = _mm512_loadu_si512(a.initial + (a.vector + v) * 16);
    each(pixels, [&](auto p) ET_PW_INLINE { acc[p * V + v] = init; });
  });
  const __m512i flip = _mm512_set1_epi32(static_cast<int>(a.flip));
  const int64_t groups = a.k / 4;
  const int8_t* w = a.weights + a.vector * groups * 64;
  const uint8_t* in = a.input;
  const int64_t k = a.k;
  for (int64_t g = 0; g < groups; ++g, w += 64, in += 4) {
    __m512i wv[V];
    each(vectors, [&](auto v) ET_PW_INLINE { wv[v] = _mm512_loadu_si512(w + v * groups * 64); });
    each(pixels, [&](auto p) ET_PW_INLINE {
      int32_t bytes;
      __builtin_memcpy(&bytes, in + p * k, 4);
      const __m512i x = _mm512_xor_si512(_mm512_set1_epi32(bytes), flip);  // s8 -> u8
      each(vectors, [&](auto v) ET_PW_INLINE {
        dpbusd(acc[p * V + v], x, wv[v]);
      });
    });
  }
  const __m512 inverse = _mm512_set1_ps(a.inverse);
  const __m512 low = _mm512_set1_ps(a.low), high = _mm512_set1_ps(a.high);
  const __m512i zp = _mm512_set1_epi32(a.output_zero_point);
  each(vectors, [&](auto v) ET_PW_INLINE {
    const int64_t c = (a.vector + v) * 16;
    const __m512 scale = _mm512_loadu_ps(a.scales + c), bias = _mm512_loadu_ps(a.bias + c);
    const int64_t rest = a.n - c;
    const __mmask16 mask =
        rest >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << rest) - 1u);
    each(pixels, [&](auto p) ET_PW_INLINE {
      __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[p * V + v]), scale);
      asm("" : "+v"(f));  // two roundings: no fused multiply-add
      f = _mm512_mul_ps(_mm512_add_ps(f, bias), inverse);
      f = _mm512_min_ps(_mm512_max_ps(f, low), high);
      const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(f), zp);
      _mm_mask_storeu_epi8(a.output + p * a.n + c, mask, _mm512_cvtepi32_epi8(q));
    });
  });
}

#pragma GCC pop_options

// Output vectors [a.vector, a.vector + V) for pixels [begin, end): blocks of P pixels, then
// the rest one at a time.
template <int P, int V>
void columns(Args a, const uint8_t* input, uint8_t* output, int64_t begin, int64_t end) {
  int64_t p = begin;
  for (; p + P <= end; p += P) {
    a.input = input + p * a.k;
    a.output = output + p * a.n;
    block<P, V>(a);
  }
  for (; p < end; ++p) {
    a.input = input + p * a.k;
    a.output = output + p * a.n;
    block<1, V>(a);
  }
}

// How many output vectors the column group at `first` of `vectors` takes: 4, but 3 when the
// rest is 3, 6 or 9 (144 channels: three groups of 3 with 24 accumulators each instead of two
// of 4 and a lone vector with 6), and the last 2 or 1.
int64_t group_width(int64_t first, int64_t vectors) {
  const int64_t rest = vectors - first;
  if (rest == 3 || rest == 6 || rest == 9) return 3;
  return std::min<int64_t>(rest, 4);
}

}  // namespace

bool pointwise_int8_supports(int64_t in_channels, int64_t out_channels,
                             const DepthwiseInt8Quant& q) {
  if (!kernel_switched_on("ET_CPU_OWN_POINTWISE_INT8") || !cpu_has_avx512_vnni()) return false;
  if (in_channels < 4 || in_channels % 4 != 0 || out_channels < 1) return false;
  // The int32 sum cannot overflow: K * 255 * 128 < 2^31 for K <= kMaxK.
  if (in_channels > kMaxK) return false;
  return int8_quant_valid(q);
}

PointwiseInt8::PointwiseInt8(int64_t in_channels, int64_t out_channels, const int8_t* weight,
                             const float* weight_scales, const float* bias,
                             const DepthwiseInt8Quant& quant)
    : k_(in_channels), n_(out_channels), quant_(quant) {
  if (!pointwise_int8_supports(k_, n_, quant_)) {
    throw ProviderError("int8 1x1 conv: this shape is not supported here");
  }
  if (weight == nullptr || weight_scales == nullptr) {
    throw ProviderError("int8 1x1 conv: weight or scales are null");
  }
  vectors_ = (n_ + 15) / 16;
  const int64_t groups = k_ / 4;
  weights_.assign(static_cast<size_t>(vectors_ * groups * 64), 0);
  initial_.assign(static_cast<size_t>(vectors_ * 16), 0);
  scales_.assign(static_cast<size_t>(vectors_ * 16), 0.f);
  bias_.assign(static_cast<size_t>(vectors_ * 16), 0.f);
  flip_ = quant_.is_signed ? 0x80 : 0;
  // In u8 terms: x_u8 = x + 128 for s8, so (x - zp) = x_u8 - (zp + 128).
  const int32_t zero_u8 = quant_.input_zero_point + (quant_.is_signed ? 128 : 0);
  for (int64_t n = 0; n < n_; ++n) {
    const int64_t v = n / 16, lane = n % 16;
    int32_t sum = 0;
    for (int64_t k = 0; k < k_; ++k) {
      const int8_t value = weight[n * k_ + k];
      sum += value;
      weights_[static_cast<size_t>(((v * groups + k / 4) * 16 + lane) * 4 + k % 4)] = value;
    }
    initial_[static_cast<size_t>(n)] = -zero_u8 * sum;
    scales_[static_cast<size_t>(n)] = quant_.input_scale * weight_scales[n];
    bias_[static_cast<size_t>(n)] = bias != nullptr ? bias[n] : 0.f;
  }
  const FoldedRequant folded = fold_requant(quant_);
  inverse_output_scale_ = folded.inverse;
  low_ = folded.low;
  high_ = folded.high;
}

void PointwiseInt8::run(const uint8_t* input, uint8_t* output, int64_t begin, int64_t end) const {
  Args a{};
  a.weights = weights_.data();
  a.initial = initial_.data();
  a.scales = scales_.data();
  a.bias = bias_.data();
  a.k = k_;
  a.n = n_;
  a.vectors = vectors_;
  a.flip = flip_ != 0 ? 0x80808080u : 0u;
  a.output_zero_point = quant_.output_zero_point;
  a.inverse = inverse_output_scale_;
  a.low = low_;
  a.high = high_;
  // Column groups outside: each group's weights stay in L1 while its pixels stream past.
  for (int64_t v = 0; v < vectors_; ) {
    const int64_t width = group_width(v, vectors_);
    a.vector = v;
    switch (width) {
      case 4: columns<6, 4>(a, input, output, begin, end); break;
      case 3: columns<8, 3>(a, input, output, begin, end); break;
      case 2: columns<12, 2>(a, input, output, begin, end); break;
      default: columns<12, 1>(a, input, output, begin, end); break;
    }
    v += width;
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
