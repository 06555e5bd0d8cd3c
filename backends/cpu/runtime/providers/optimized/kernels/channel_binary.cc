// ChannelBinary (see channel_binary.h).
#include "backends/cpu/runtime/providers/optimized/kernels/channel_binary.h"

#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {
namespace {

template <BinaryOp kOp>
ET_AVX512 inline __m512 apply16(__m512 x, __m512 y) {
  switch (kOp) {
    case BinaryOp::kAdd:
      return _mm512_add_ps(x, y);
    case BinaryOp::kSub:
      return _mm512_sub_ps(x, y);
    case BinaryOp::kMul:
      return _mm512_mul_ps(x, y);
    case BinaryOp::kDiv:
      return _mm512_div_ps(x, y);
  }
  return x;
}

// out[i] = a[i] op v[i] (kVectorFirst: v[i] op a[i]) for `count` floats; `v_step` 0 broadcasts
// v[0] (a plain layout's row of pixels shares one channel's value).
template <BinaryOp kOp, bool kVectorFirst>
ET_AVX512 void row16(const float* a, const float* v, int64_t v_step, float* out, int64_t count) {
  const __m512 shared = _mm512_set1_ps(v[0]);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 x = _mm512_loadu_ps(a + i);
    const __m512 y = v_step ? _mm512_loadu_ps(v + i) : shared;
    _mm512_storeu_ps(out + i, kVectorFirst ? apply16<kOp>(y, x) : apply16<kOp>(x, y));
  }
  if (i < count) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (count - i)) - 1u);
    const __m512 x = _mm512_maskz_loadu_ps(mask, a + i);
    const __m512 y = v_step ? _mm512_maskz_loadu_ps(mask, v + i) : shared;
    _mm512_mask_storeu_ps(out + i, mask, kVectorFirst ? apply16<kOp>(y, x) : apply16<kOp>(x, y));
  }
}

template <BinaryOp kOp, bool kVectorFirst>
void run_rows(const ChannelBinary& p, const float* a, const float* v, float* out, int64_t first,
              int64_t last) {
  const int64_t per_image = p.channels_last ? p.pixels : p.channels;
  const int64_t width = p.channels_last ? p.channels : p.pixels;
  for (int64_t row = first; row < last; ++row) {
    const int64_t image = p.shared_vector ? 0 : row / per_image;
    const float* vector = v + image * p.channels;
    const int64_t at = row * width;
    if (p.channels_last) {
      row16<kOp, kVectorFirst>(a + at, vector, 1, out + at, width);
    } else {
      row16<kOp, kVectorFirst>(a + at, vector + row % per_image, 0, out + at, width);
    }
  }
}

template <BinaryOp kOp>
void run_op(const ChannelBinary& p, const float* a, const float* v, float* out, int64_t first,
            int64_t last) {
  if (p.vector_first) {
    run_rows<kOp, true>(p, a, v, out, first, last);
  } else {
    run_rows<kOp, false>(p, a, v, out, first, last);
  }
}

}  // namespace

bool channel_binary_enabled() {
  return kernel_switched_on("ET_CPU_CHANNEL_BINARY") && cpu_has_avx512();
}

void ChannelBinary::run(const float* a, const float* v, float* out, int64_t first_row,
                        int64_t last_row) const {
  switch (op) {
    case BinaryOp::kAdd:
      return run_op<BinaryOp::kAdd>(*this, a, v, out, first_row, last_row);
    case BinaryOp::kSub:
      return run_op<BinaryOp::kSub>(*this, a, v, out, first_row, last_row);
    case BinaryOp::kMul:
      return run_op<BinaryOp::kMul>(*this, a, v, out, first_row, last_row);
    case BinaryOp::kDiv:
      return run_op<BinaryOp::kDiv>(*this, a, v, out, first_row, last_row);
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
