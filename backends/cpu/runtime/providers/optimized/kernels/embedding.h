// Our own embedding lookup: rows of a [rows, width] float table gathered by integer ids.
// The ids come from the caller at run time, so each is checked against the table's rows before
// any row is read: an id out of range is an error naming it, never an out-of-bounds read.
// No ExecuTorch or oneDNN types.
#pragma once

#include <cstdint>

namespace et_cpu_plugin {
namespace onednn {

// Copies table[ids[j]] to out[j] for j < count; returns -1, or the position of the first id
// outside [0, rows) (then nothing is written). With `prefetch`, the rows a few ids ahead are
// fetched into cache while the current one is copied (the ids are known up front; the table's
// rows are scattered, which the hardware prefetcher cannot guess).
template <typename Id>
int64_t gather_rows(const float* table, int64_t rows, int64_t width, const Id* ids,
                    int64_t count, float* out, bool prefetch = true);

// Whether ET_CPU_EMBEDDING_PREFETCH leaves the prefetch on (unset or not "0"; read when a plan
// binds, so a benchmark can bind it both ways in one process).
bool embedding_prefetch_enabled();

}  // namespace onednn
}  // namespace et_cpu_plugin
