// Our own kernel for one-row batched products on strided operands: decode attention's
// q @ k^T and softmax(scores) @ v, read straight from the KV cache with a folded permute's
// strides (StridedOperand, runtime README), out[i, j] = sum_k a[i, k] * b[i, k, j] for each
// batch i (batch x heads). oneDNN ran these ~3x below the memory bandwidth (issue 45's profile:
// q @ k^T ~6 GB/s over a cache whose rows hold every head). Two layouts of b:
// - k contiguous (k^T): per output a dot product over k, 16 outputs' sums at once;
// - j contiguous (v): per batch row an accumulation over k of a[i, k] times b's row k.
// The loops follow b's memory: when the batch rows (heads) are farthest apart (a [heads,
// positions, dim] cache, the bench's layout) batch rows outermost, each head's keys / values read
// front to back, batch rows shared out on the pool; else ([positions, heads, dim]) the other index
// outermost (positions for k^T, shared out; k for v, over the task's batch rows).
// Each output's sum runs over k in order on one thread, so the result does not depend on the
// split. AVX-512F only (elsewhere the binder keeps oneDNN). Plain types only, like kernels/.
#pragma once

#include <cstdint>

namespace et_cpu_plugin {
namespace onednn {

class WorkPool;

struct RowBmmParams {
  int64_t batch = 0;
  int64_t k = 0;
  int64_t n = 0;
  // Element strides: a (batch, k) and b (batch, k, n); the output is plain (batch, n).
  int64_t a_batch = 0, a_k = 0;
  int64_t b_batch = 0, b_k = 0, b_n = 0;
};

// Whether the kernel runs these: positive sizes, a's k contiguous, b's k or n contiguous, the
// CPU has AVX-512F; ET_CPU_ROW_BMM=0 (read at each call) says no.
bool row_bmm_supports(const RowBmmParams& params);

// out (batch, n) from a and b; shared out on `pool` (null: the calling thread alone).
void row_bmm(const RowBmmParams& params, const float* a, const float* b, float* out,
             WorkPool* pool);

}  // namespace onednn
}  // namespace et_cpu_plugin
