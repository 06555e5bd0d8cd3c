// The Optimized provider's switch readers (ET_CPU_ROW_GEMM, ET_CPU_ONEDNN_THREADS and the like):
// the delegate's one reading of an environment switch (backends/cpu/runtime/switches.h), named in
// the provider's namespace. Every switch of the provider, its plans and its kernels goes through
// them.
#pragma once

#include "backends/cpu/runtime/switches.h"

namespace et_cpu_plugin {
namespace onednn {

using ::et_cpu_plugin::kernel_opted_in;
using ::et_cpu_plugin::kernel_switched_on;
using ::et_cpu_plugin::opted_in_reach;
using ::et_cpu_plugin::switch_number;
using ::et_cpu_plugin::switch_number_or_all;
using ::et_cpu_plugin::switch_reach;
using ::et_cpu_plugin::SwitchReach;

}  // namespace onednn
}  // namespace et_cpu_plugin
