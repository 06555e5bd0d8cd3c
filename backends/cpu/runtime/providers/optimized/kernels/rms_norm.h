// RMSNorm over the last dim (et_cpu_quant::rms_norm.out, fused by
// backends/cpu/fuse_rms_norm.py; semantics and shape checks in backends/cpu/runtime/rms_norm.h)
// on AVX-512: per row one pass summing the squares (16 lanes, a masked tail), the row's scale,
// one pass writing x * scale [* weight]; rows shared out on the pool (the runtime's scalar loop
// on CPUs without AVX-512). Replaces six small ops (pow, mean, add, rsqrt, mul, mul).
#pragma once

#include "backends/cpu/runtime/rms_norm.h"

namespace et_cpu_plugin {
namespace onednn {

class WorkPool;

// Whether the Optimized provider takes the RMSNorm op (ET_CPU_RMS_NORM=0 leaves it to the
// Reference provider's built-in scalar loop, for measuring; read at bind).
bool rms_norm_enabled();

// Every row of out, shared out on `pool` (null: the calling thread alone); `weight` null when
// there is none.
void rms_norm(const cpu::RmsNormShape& shape, const float* x, const float* weight, float* out,
              WorkPool* pool);

}  // namespace onednn
}  // namespace et_cpu_plugin
