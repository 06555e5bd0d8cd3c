// Embedding lookup (see embedding.h).
#include "backends/cpu/runtime/providers/optimized/kernels/embedding.h"

#include <algorithm>

#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {

namespace {

// How many ids ahead the prefetch runs: enough rows in flight to cover a memory latency
// (~100 ns) behind the copy of a typical row (128-512 floats: 512 B-2 KiB).
constexpr int64_t kPrefetchAhead = 4;
constexpr size_t kCacheLine = 64;

void prefetch_row(const float* row, size_t row_bytes) {
  const char* bytes = reinterpret_cast<const char*>(row);
  for (size_t at = 0; at < row_bytes; at += kCacheLine) {
    __builtin_prefetch(bytes + at, /*rw=*/0, /*locality=*/3);
  }
}

}  // namespace

bool embedding_prefetch_enabled() {
  return kernel_switched_on("ET_CPU_EMBEDDING_PREFETCH");
}

template <typename Id>
int64_t gather_rows(const float* table, int64_t rows, int64_t width, const Id* ids,
                    int64_t count, float* out, bool prefetch) {
  for (int64_t j = 0; j < count; ++j) {
    if (ids[j] < 0 || static_cast<int64_t>(ids[j]) >= rows) return j;
  }
  const size_t row_bytes = sizeof(float) * static_cast<size_t>(width);
  const auto row = [&](int64_t j) { return table + static_cast<int64_t>(ids[j]) * width; };
  if (prefetch) {
    for (int64_t j = 0; j < std::min(count, kPrefetchAhead); ++j) prefetch_row(row(j), row_bytes);
  }
  for (int64_t j = 0; j < count; ++j) {
    if (prefetch && j + kPrefetchAhead < count) prefetch_row(row(j + kPrefetchAhead), row_bytes);
    std::memcpy(out + j * width, row(j), row_bytes);
  }
  return -1;
}

template int64_t gather_rows<int64_t>(const float*, int64_t, int64_t, const int64_t*, int64_t,
                                      float*, bool);
template int64_t gather_rows<int32_t>(const float*, int64_t, int64_t, const int32_t*, int64_t,
                                      float*, bool);

}  // namespace onednn
}  // namespace et_cpu_plugin
