// The process's memory for prepared weights on transparent huge pages: small blocks carved out of
// 2 MiB-aligned slabs (fresh mappings, advised MADV_HUGEPAGE before their first write), so a call
// that reads a program's weights from a cold cache walks a few huge pages instead of thousands of
// 4 KiB ones (this machine's THP mode is `madvise`: nothing else gets huge pages). A slab is freed
// when its last block is; a block of a slab or more gets slabs of its own.
// ET_CPU_HUGE_WEIGHTS=0 (read at each allocation, i.e. at prepare) takes ordinary 64-byte-aligned
// heap memory instead, as before; so does an AddressSanitizer build unless the switch is 1 (heap
// blocks have redzones, slab blocks none).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace et_cpu_plugin {
namespace onednn {

// `x` rounded up to a multiple of `to` (> 0): the arena's block and slab sizes, and the kernels'
// padded weight extents.
template <typename T>
constexpr T round_up(T x, T to) {
  return (x + to - 1) / to * to;
}

// Whether weights prepared now go on huge-page slabs (ET_CPU_HUGE_WEIGHTS, on unless "0").
bool huge_weights_enabled();

// At least `bytes` (> 0) on a 64-byte boundary: from the slabs when huge_weights_enabled(), else
// from the heap. Throws ProviderError when out of memory.
void* allocate_weight_bytes(size_t bytes);
// Frees what allocate_weight_bytes returned (either kind); null is ignored.
void free_weight_bytes(void* memory);

// The slabs now held and the bytes of live blocks in them, for tests and reports.
struct WeightArenaStats {
  size_t slab_bytes = 0;
  size_t block_bytes = 0;
  size_t blocks = 0;
};
WeightArenaStats weight_arena_stats();

// A std::vector allocator for prepared weights (depthwise taps, squeeze-excite matrices, biases).
template <class T>
struct WeightAllocator {
  using value_type = T;
  WeightAllocator() = default;
  template <class U>
  WeightAllocator(const WeightAllocator<U>&) {}  // NOLINT: rebinding converts implicitly
  T* allocate(size_t n) {
    if (n > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_alloc();
    return static_cast<T*>(allocate_weight_bytes(n == 0 ? sizeof(T) : n * sizeof(T)));
  }
  void deallocate(T* p, size_t) { free_weight_bytes(p); }
  template <class U>
  bool operator==(const WeightAllocator<U>&) const { return true; }
  template <class U>
  bool operator!=(const WeightAllocator<U>&) const { return false; }
};

template <class T>
using WeightVector = std::vector<T, WeightAllocator<T>>;

}  // namespace onednn
}  // namespace et_cpu_plugin
