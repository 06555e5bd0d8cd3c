// Our own int8 residual add (et_cpu_quant::add.out, backends/cpu/quantized_ops.py) in one pass
// over the bytes: each 16 elements of a and b are widened, dequantized, added, clamped and
// requantized in registers before the only store, so nothing goes through float buffers; the
// caller splits the elements over its work pool (any slice of them is the same arithmetic).
//
// Arithmetic (the q/dq loops' of kernels/quantize_convert.h, so the bytes are those of the float
// island it replaces and of the previous chunked loop, ET_CPU_OWN_QUANTIZED_ADD=0):
//   y = float(a - a_zero_point) * a_scale + float(b - b_zero_point) * b_scale   (three roundings)
//   y = min(max(y, low), high)                                 (+-inf: no clamp on that side)
//   q = clamp(rint(y * (1.0f / out_scale)) + out_zero_point, quant_min, quant_max)
// with round half to even.
#pragma once

#include <cstdint>

namespace et_cpu_plugin {
namespace onednn {

struct QuantizedAddParams {
  float a_scale = 1.f;
  int32_t a_zero_point = 0;
  float b_scale = 1.f;
  int32_t b_zero_point = 0;
  float out_scale = 1.f;
  int32_t out_zero_point = 0;
  int32_t quant_min = -128;
  int32_t quant_max = 127;
  float low = 0.f;  // the clamp on the float sum; -inf / +inf: none
  float high = 0.f;
  bool is_signed = true;  // int8 operands and output (else uint8)
};

// Whether quantized_add runs here: AVX-512 BW/VL, and ET_CPU_OWN_QUANTIZED_ADD not "0" (read at
// each call; the int8 add kernel asks once, when it is bound).
bool quantized_add_supported();

// out[i] = the add of a[i] and b[i] for i in [0, n): `a`, `b`, `out` hold n bytes each.
void quantized_add(const QuantizedAddParams& p, const void* a, const void* b, void* out,
                   int64_t n);

}  // namespace onednn
}  // namespace et_cpu_plugin
