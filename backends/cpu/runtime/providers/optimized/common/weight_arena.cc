// Huge-page slabs for prepared weights (weight_arena.h). Allocation and freeing happen at prepare
// and teardown only, under one mutex; the blocks are found again by address when freed.
#include "backends/cpu/runtime/providers/optimized/common/weight_arena.h"

#include <sys/mman.h>

#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <string>

#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_provider.h"

namespace et_cpu_plugin {
namespace onednn {

namespace {

constexpr size_t kSlabBytes = size_t{2} << 20;  // a transparent huge page on x86-64
constexpr size_t kBlockAlignment = 64;           // a cache line

// `bytes` (whole huge pages) of fresh anonymous memory on a huge page boundary, advised as huge
// pages before anything touches it, or null. Not from the heap: memory malloc hands out again is
// often already faulted in on 4 KiB pages, which the advice does not change.
void* map_slab(size_t bytes) {
  const size_t span = bytes + kSlabBytes;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = round_up(start, kSlabBytes);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = aligned + bytes;
  if (start + span > end) munmap(reinterpret_cast<void*>(end), start + span - end);
  madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);  // a refusal is harmless
  return reinterpret_cast<void*>(aligned);
}

struct Slab {
  size_t bytes = 0;  // whole huge pages
  size_t used = 0;   // blocks are carved from the front
  size_t live = 0;   // blocks not yet freed
};

class Arena {
 public:
  void* allocate(size_t bytes) {
    const size_t rounded = round_up(bytes == 0 ? 1 : bytes, kBlockAlignment);
    std::lock_guard<std::mutex> lock(mutex_);
    Slab* slab = current_ == 0 ? nullptr : &slabs_.at(current_);
    uintptr_t base = current_;
    if (slab == nullptr || slab->bytes - slab->used < rounded) {
      // A new slab; one for a large block is its own size, and its tail serves the small blocks
      // that follow when it is longer than what the current slab has left.
      const size_t slab_bytes = round_up(rounded, kSlabBytes);
      void* memory = map_slab(slab_bytes);
      if (memory == nullptr) {
        throw ProviderError("weight arena: out of memory allocating " + std::to_string(bytes) +
                            " bytes of weights");
      }
      base = reinterpret_cast<uintptr_t>(memory);
      slab = &slabs_[base];
      slab->bytes = slab_bytes;
      slab_total_ += slab_bytes;
      const size_t left = current_ == 0 ? 0 : slabs_.at(current_).bytes - slabs_.at(current_).used;
      if (slab_bytes - rounded > left) current_ = base;
    }
    const uintptr_t block = base + slab->used;
    slab->used += rounded;
    ++slab->live;
    blocks_[block] = rounded;
    block_total_ += rounded;
    return reinterpret_cast<void*>(block);
  }

  // False when `memory` is no block of the arena (heap memory).
  bool free(void* memory) {
    const uintptr_t block = reinterpret_cast<uintptr_t>(memory);
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = blocks_.find(block);
    if (found == blocks_.end()) return false;
    block_total_ -= found->second;
    blocks_.erase(found);
    auto slab = std::prev(slabs_.upper_bound(block));
    if (--slab->second.live > 0) return true;
    if (slab->first == current_) {
      slab->second.used = 0;  // kept for the next blocks: at most one empty slab stays
      return true;
    }
    slab_total_ -= slab->second.bytes;
    munmap(reinterpret_cast<void*>(slab->first), slab->second.bytes);
    slabs_.erase(slab);
    return true;
  }

  WeightArenaStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return WeightArenaStats{slab_total_, block_total_, blocks_.size()};
  }

 private:
  std::mutex mutex_;
  std::map<uintptr_t, Slab> slabs_;     // by base address
  std::map<uintptr_t, size_t> blocks_;  // live blocks' rounded sizes, by address
  uintptr_t current_ = 0;               // the slab new small blocks come from (0: none yet)
  size_t slab_total_ = 0;
  size_t block_total_ = 0;
};

Arena& arena() {
  static Arena* const instance = new Arena();  // never destroyed: plans may outlive statics
  return *instance;
}

}  // namespace

bool huge_weights_enabled() {
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer fences each heap block with redzones; blocks carved from a slab sit side by
  // side with none, so a sanitized build keeps weights on the heap unless asked for the slabs
  // (ET_CPU_HUGE_WEIGHTS=1): a kernel reading past its weights is then still reported.
  return kernel_opted_in("ET_CPU_HUGE_WEIGHTS");
#else
  return kernel_switched_on("ET_CPU_HUGE_WEIGHTS");
#endif
}

void* allocate_weight_bytes(size_t bytes) {
  if (huge_weights_enabled()) return arena().allocate(bytes);
  void* memory = nullptr;
  if (posix_memalign(&memory, kBlockAlignment, round_up(bytes, kBlockAlignment)) != 0) {
    throw ProviderError("weight arena: out of memory allocating " + std::to_string(bytes) +
                        " bytes of weights");
  }
  return memory;
}

void free_weight_bytes(void* memory) {
  if (memory != nullptr && !arena().free(memory)) std::free(memory);
}

WeightArenaStats weight_arena_stats() {
  return arena().stats();
}

}  // namespace onednn
}  // namespace et_cpu_plugin
