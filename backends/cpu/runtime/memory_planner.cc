#include "backends/cpu/runtime/memory_planner.h"

#include <algorithm>
#include <numeric>

namespace et_cpu_plugin {
namespace cpu {
namespace {

size_t align_up(size_t value, size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

bool lifetimes_overlap(const BufferRequest& a, const BufferRequest& b) {
  return a.first_op <= b.last_op && b.first_op <= a.last_op;
}

}  // namespace

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests, size_t alignment) {
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first (ties by producer order) keeps fragmentation low and the result deterministic.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return requests[a].bytes > requests[b].bytes;
  });

  std::vector<size_t> placed;
  for (size_t index : order) {
    const BufferRequest& request = requests[index];
    // Byte ranges of placed buffers alive at the same time, by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t other : placed) {
      if (lifetimes_overlap(request, requests[other])) {
        busy.emplace_back(plan.offsets[other], plan.offsets[other] + requests[other].bytes);
      }
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& range : busy) {
      if (offset + request.bytes <= range.first) {
        break;  // fits in the gap before this range
      }
      offset = std::max(offset, align_up(range.second, alignment));
    }
    plan.offsets[index] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, align_up(offset + request.bytes, alignment));
    placed.push_back(index);
  }
  return plan;
}

}  // namespace cpu
}  // namespace et_cpu_plugin
