// The provider's one kind of owned, aligned memory: the plans' scratchpad, staging buffers and
// prepared weights (from the weight arena's huge-page slabs, weight_arena.h), and RowGemm's packed
// weight streams (which may ask for huge pages of their own when the arena is off).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "backends/cpu/runtime/providers/optimized/common/weight_arena.h"
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_provider.h"

namespace et_cpu_plugin {
namespace onednn {

// The size of a transparent huge page on x86-64.
constexpr size_t kHugePageBytes = size_t{2} << 20;

// Bytes on a cache line (64 bytes) that can grow (the shared scratchpad) or stay fixed (weights,
// staging, packed streams). Not zeroed.
class AlignedBuffer {
 public:
  // At least `bytes`; a buffer that grows is replaced (its contents are not kept). With
  // `huge_pages`, a buffer of kHugePageBytes or more starts on a huge page boundary and its whole
  // huge pages are advised as transparent huge pages (madvise, before the first write so they are
  // faulted in huge; a kernel that declines leaves ordinary pages). Throws ProviderError when
  // out of memory.
  void reserve(size_t bytes, bool huge_pages = false) {
    if (bytes <= size_) return;
    const bool huge = huge_pages && bytes >= kHugePageBytes;
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* memory = nullptr;
    if (posix_memalign(&memory, huge ? kHugePageBytes : 64, rounded) != 0) {
      throw ProviderError("oneDNN provider: out of memory allocating " + std::to_string(bytes));
    }
    data_ = std::unique_ptr<uint8_t, Free>(static_cast<uint8_t*>(memory), Free{false});
    size_ = bytes;
    if (huge) madvise(memory, rounded / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);
  }
  // Fixed weights of `bytes` from allocate_weight_bytes (huge-page slabs unless
  // ET_CPU_HUGE_WEIGHTS=0). Replaces any contents.
  void reserve_weights(size_t bytes) {
    data_ = std::unique_ptr<uint8_t, Free>(static_cast<uint8_t*>(allocate_weight_bytes(bytes)),
                                           Free{true});
    size_ = bytes;
  }
  void* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    bool weights = false;  // from allocate_weight_bytes
    void operator()(uint8_t* p) const {
      if (weights) {
        free_weight_bytes(p);
      } else {
        std::free(p);
      }
    }
  };
  std::unique_ptr<uint8_t, Free> data_{nullptr, Free{}};
  size_t size_ = 0;
};

}  // namespace onednn
}  // namespace et_cpu_plugin
