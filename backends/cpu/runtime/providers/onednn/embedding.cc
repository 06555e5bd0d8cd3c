// Embedding lookup (see embedding.h).
#include "backends/cpu/runtime/providers/onednn/embedding.h"

#include <cstring>

namespace et_cpu_plugin {
namespace onednn {

template <typename Id>
int64_t gather_rows(const float* table, int64_t rows, int64_t width, const Id* ids,
                    int64_t count, float* out) {
  for (int64_t j = 0; j < count; ++j) {
    if (ids[j] < 0 || static_cast<int64_t>(ids[j]) >= rows) return j;
  }
  const size_t row_bytes = sizeof(float) * static_cast<size_t>(width);
  for (int64_t j = 0; j < count; ++j) {
    std::memcpy(out + j * width, table + static_cast<int64_t>(ids[j]) * width, row_bytes);
  }
  return -1;
}

template int64_t gather_rows<int64_t>(const float*, int64_t, int64_t, const int64_t*, int64_t,
                                      float*);
template int64_t gather_rows<int32_t>(const float*, int64_t, int64_t, const int32_t*, int64_t,
                                      float*);

}  // namespace onednn
}  // namespace et_cpu_plugin
