// How an op's work is cut into near-equal pieces for the work pool: shared by the float plans and
// the int8 kernels, so both split the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

namespace et_cpu_plugin {
namespace onednn {

// [begin, end) of slice `index` when `units` are split into `count` near-equal slices.
std::pair<int64_t, int64_t> slice_of(int64_t units, size_t count, size_t index);
// [begin, end) of slice `index` of `count` over `total` items cut into blocks of `block` (the
// last slice also takes the remainder), e.g. output channels in blocks of 16.
std::pair<int64_t, int64_t> block_slice(int64_t total, int64_t block, size_t count, size_t index);

// Output columns per piece of a linear at least: narrower blocks starve oneDNN's GEMM kernels
// (float and int8 alike).
constexpr int64_t kLinearColumns = 64;

}  // namespace onednn
}  // namespace et_cpu_plugin
