// Kernels the CPU runtime carries itself, for routes whose out-variant kernel ExecuTorch's operator
// registry lacks (aten::hardswish.out, aten::hardsigmoid.out, aten::silu.out: without a route to_edge
// decomposes these ops into several elementwise kernels, each a pass over memory). The Reference
// provider consults this table when the registry has no kernel of the route's name.
//
// Plain float32 loops with torch's definitions; any other dtype (or a shape mismatch) is a bind
// error naming the kernel and the dtype. The partitioner only keeps float32 nodes of these ops
// whole (Route.check_args), so a lowered program never asks for another dtype.
#pragma once

#include <memory>

#include "backends/cpu/runtime/kernel_provider.h"

namespace et_cpu_plugin {
namespace cpu {

// Whether `kernel` (e.g. "aten::hardswish.out") names a built-in kernel.
bool is_builtin_kernel(const char* kernel);

// Binds `op` to its built-in kernel. Error::OperatorMissing when there is none of op.kernel's
// name; Error::InvalidArgument (logged with the kernel and dtypes) when its arguments are not what
// the kernel takes.
executorch::runtime::Error bind_builtin_kernel(const OpBinding& op,
                                               std::unique_ptr<BoundKernel>* out);

}  // namespace cpu
}  // namespace et_cpu_plugin
