// Plans the arena that holds a graph's intermediate tensors: buffers whose lifetimes (the span of
// op indices from producer to last reader) do not overlap may share bytes.
#pragma once

#include <cstddef>
#include <vector>

namespace et_cpu_plugin {
namespace cpu {

struct BufferRequest {
  size_t bytes;
  size_t first_op;  // index of the op that writes it
  size_t last_op;   // index of the last op that reads it (>= first_op)
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // one per request, into the arena, each a multiple of alignment
  size_t arena_bytes = 0;       // total arena size the plan needs
};

// Greedy best-known heuristic: place the largest buffers first, each at the lowest aligned offset
// where it overlaps no already-placed buffer that is alive at the same time.
MemoryPlan plan_memory(const std::vector<BufferRequest>& requests, size_t alignment);

}  // namespace cpu
}  // namespace et_cpu_plugin
