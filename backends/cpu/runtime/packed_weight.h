// The packed grouped weight of torchao's fused ops (backends/cpu/torchao/graph.py, pack_weight):
// linear_8da, linear_wo and embedding_wo all take it as the same five arguments, checked here
// once. uint8 [rows, cols / 2] holding w + 8 two a byte (even column in the low nibble) for 4
// bits, int8 [rows, cols] for 8; float32 scales and optional int8 zero points per (row, group of
// columns); a weight is (w - zero_point) * scale (quantized_ops.dequantize_weight).
#pragma once

#include <cstdint>

#include <executorch/runtime/core/evalue.h>

namespace et_cpu_plugin {
namespace cpu {

struct PackedWeight {
  const uint8_t* data;
  const float* scales;  // [rows, cols / group]
  const int8_t* zeros;  // [rows, cols / group] or null
  int64_t rows, cols, group, bits;

  int64_t row_bytes() const { return bits == 4 ? cols / 2 : cols; }
};

// Checks the packed weight's arguments (weight, scales, zero points or None, group size, bits:
// dtypes, shapes, bits 4 or 8, group size dividing the row) and fills `w`; null when they are
// right, else what is wrong.
const char* read_packed_weight(const executorch::runtime::EValue* weight,
                               const executorch::runtime::EValue* scales,
                               const executorch::runtime::EValue* zeros,
                               const executorch::runtime::EValue* group,
                               const executorch::runtime::EValue* bits, PackedWeight* w);

}  // namespace cpu
}  // namespace et_cpu_plugin
