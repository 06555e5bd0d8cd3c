// Rotary position embeddings in the "rotate half" form (et_cpu_quant::rotary.out, fused by
// backends/cpu/fuse_rotary.py; semantics and shape checks in backends/cpu/runtime/rotary.h) on
// AVX-512: one pass over x, 16 lanes with a masked tail per half row, rows shared out on the pool
// (the runtime's scalar loop on CPUs without AVX-512). Replaces seven small ops (two slices, neg,
// cat, two muls, add) per tensor.
#pragma once

#include "backends/cpu/runtime/rotary.h"

namespace et_cpu_plugin {
namespace onednn {

class WorkPool;

// Whether the Optimized provider takes the rotary op (ET_CPU_ROTARY=0 leaves it to the
// Reference provider's built-in scalar loop, for measuring; read at bind).
bool rotary_enabled();

// Every row of out, shared out on `pool` (null: the calling thread alone).
void rotary(const cpu::RotaryShape& shape, const float* x, const float* cos, const float* sin,
            float* out, WorkPool* pool);

}  // namespace onednn
}  // namespace et_cpu_plugin
