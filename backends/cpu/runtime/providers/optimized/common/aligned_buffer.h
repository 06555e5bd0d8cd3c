// The provider's one kind of owned, aligned memory: the plans' scratchpad and staging buffers
// (heap), and prepared weights, RowGemm's packed streams among them (from the weight arena,
// weight_arena.h: its huge-page slabs are the one way weights get huge pages).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "backends/cpu/runtime/providers/optimized/common/weight_arena.h"
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_provider.h"

namespace et_cpu_plugin {
namespace onednn {

// Bytes on a cache line (64 bytes) that can grow (the shared scratchpad) or stay fixed (weights,
// staging, packed streams). Not zeroed.
class AlignedBuffer {
 public:
  // At least `bytes` of heap memory; a buffer that grows is replaced (its contents are not kept).
  // Throws ProviderError when out of memory.
  void reserve(size_t bytes) {
    if (bytes <= size_) return;
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* memory = nullptr;
    if (posix_memalign(&memory, 64, rounded) != 0) {
      throw ProviderError("oneDNN provider: out of memory allocating " + std::to_string(bytes));
    }
    data_ = std::unique_ptr<uint8_t, Free>(static_cast<uint8_t*>(memory), Free{false});
    size_ = bytes;
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
