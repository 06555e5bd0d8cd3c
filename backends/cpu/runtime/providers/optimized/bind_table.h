// The Optimized provider's one table from routed kernel name to binder (bind_table.cc). Every
// route of backends/cpu/routes.py with provider=OPTIMIZED has a row here and every row has such a
// route; test/bind_table_test.py holds the two against each other through
// et_cpu_optimized_kernels(). Adding an op: one route row, one row here, its binder and kernel.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "backends/cpu/runtime/providers/optimized/binding.h"

namespace et_cpu_plugin {
namespace cpu {
namespace optimized {

// One bind call: the op, the session it binds on, where the kernel goes, why it is declined,
// and how many offered fusable steps the kernel took.
struct BindRequest {
  const OpBinding& op;
  OptimizedSession& session;
  std::unique_ptr<BoundKernel>* out;
  Decline* decline;
  size_t* fused;
};

using Binder = Error (*)(const BindRequest& request);

struct BindRow {
  const char* kernel;  // the out-variant kernel name of the route, e.g. "aten::add.out"
  Binder bind;
};

// The row of `kernel`, or null when the provider has no binder for it.
const BindRow* find_binder(const std::string& kernel);

}  // namespace optimized
}  // namespace cpu
}  // namespace et_cpu_plugin

extern "C" {
// The table's kernel names, one per line, into `buffer` (NUL-terminated, cut at `capacity`);
// returns the length of the whole list (call again with a larger buffer when it is >= capacity).
size_t et_cpu_optimized_kernels(char* buffer, size_t capacity);
}
