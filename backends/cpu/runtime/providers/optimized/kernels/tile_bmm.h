// Our own batched product of plain operands whose plan does not depend on the sizes (issue 47):
// out[i] = a[i] @ b[i], a (batch, m, k), b (batch, k, n), out (batch, m, n), all contiguous, the
// sizes read at each call. A graph resized in place (runtime README, ET_CPU_RESIZE_IN_PLACE)
// then prepares nothing for its attention products at a new size, where oneDNN generated a
// kernel per new shape (~0.2-1 ms each; 3.2's run-time dims fall back to a slower kernel).
// Register tiles of up to 8 rows by 32 columns (b's 32-column panel read once per 8 rows),
// each output's sum over k in order on one thread: the result does not depend on the split.
// Blocks of 32 rows of one batch item are shared out on the pool. AVX-512F only.
#pragma once

#include <cstdint>

namespace et_cpu_plugin {
namespace onednn {

class WorkPool;

struct TileBmmShape {
  int64_t batch = 0;
  int64_t m = 0;
  int64_t k = 0;
  int64_t n = 0;
};

// Whether the kernel runs here: the CPU has AVX-512F and ET_CPU_TILE_BMM is not 0.
bool tile_bmm_supported();

// out from a and b (shapes above); shared out on `pool` (null: the calling thread alone).
void tile_bmm(const TileBmmShape& shape, const float* a, const float* b, float* out,
              WorkPool* pool);

}  // namespace onednn
}  // namespace et_cpu_plugin
