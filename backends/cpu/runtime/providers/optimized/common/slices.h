// How an op's work is cut into near-equal pieces for the work pool and shared out on it: shared
// by the float plans and the int8 kernels, so both split the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "backends/cpu/runtime/providers/optimized/common/work_pool.h"

namespace et_cpu_plugin {
namespace onednn {

// [begin, end) of slice `index` when `units` are split into `count` near-equal slices.
std::pair<int64_t, int64_t> slice_of(int64_t units, size_t count, size_t index);
// [begin, end) of slice `index` of `count` over `total` items cut into blocks of `block` (the
// last slice also takes the remainder), e.g. output channels in blocks of 16.
std::pair<int64_t, int64_t> block_slice(int64_t total, int64_t block, size_t count, size_t index);

// run(first, last, worker) over `units` units: with fewer than 2 `tasks`, once over them all on
// the calling thread (worker 0); else once per slice_of(units, tasks, index) slice, shared out on
// `pool` (which must then exist). The callers choose `tasks` (ProviderState::pieces_for) and what
// a unit is (a column group, a row of images, a tile).
template <typename Run>
void run_in_slices(WorkPool* pool, size_t tasks, int64_t units, const Run& run) {
  if (tasks < 2) {
    run(int64_t{0}, units, 0);
    return;
  }
  pool->run(tasks, [&](size_t index, int worker) {
    const auto [first, last] = slice_of(units, tasks, index);
    run(first, last, worker);
  });
}

// Output columns per piece of a linear at least: narrower blocks starve oneDNN's GEMM kernels
// (float and int8 alike).
constexpr int64_t kLinearColumns = 64;

}  // namespace onednn
}  // namespace et_cpu_plugin
