// Argument values that ExecuTorch's kernels divide by or size their loops with, checked before
// the Reference provider binds the kernel: a damaged payload (a stride or groups of 0) must be an
// init error naming the argument, not a SIGFPE inside the kernel (issue 22).
#pragma once

#include <cstdint>
#include <initializer_list>

#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/evalue.h>

#include "backends/cpu/runtime/kernel_provider.h"

namespace et_cpu_plugin {
namespace cpu {

// Error::Ok, or Error::InvalidProgram (reported) naming the op, the argument and its value.
executorch::runtime::Error check_kernel_arguments(const OpBinding& op);

// Whether `t` has exactly these sizes (its rank included).
bool has_shape(const executorch::aten::Tensor& t, std::initializer_list<int64_t> sizes);

// Whether `a` and `b` have the same sizes (their ranks included).
bool same_sizes(const executorch::aten::Tensor& a, const executorch::aten::Tensor& b);

// The tensor of an optional tensor argument (`Tensor?`), or null when it is None.
const executorch::aten::Tensor* optional_tensor(const executorch::runtime::EValue* value);

}  // namespace cpu
}  // namespace et_cpu_plugin
