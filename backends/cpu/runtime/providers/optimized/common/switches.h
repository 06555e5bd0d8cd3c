// The one reading of an on/off environment switch (ET_CPU_ROW_GEMM, ET_CPU_ONEDNN_CHAIN and the
// like): every switch of the Optimized provider, its plans and its kernels goes through it.
#pragma once

#include <cstdlib>
#include <cstring>

namespace et_cpu_plugin {
namespace onednn {

// Whether the environment leaves a kernel or a behaviour on: `variable` unset or anything but
// "0" ("0" turns it off, for measuring). Read at each call, so a benchmark can prepare plans both
// ways in one process.
inline bool kernel_switched_on(const char* variable) {
  const char* value = std::getenv(variable);
  return value == nullptr || std::strcmp(value, "0") != 0;
}

// Whether the environment switches on a behaviour that is off by default: `variable` set to
// anything but "0" (or empty). Read at each call, like kernel_switched_on.
inline bool kernel_opted_in(const char* variable) {
  const char* value = std::getenv(variable);
  return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
}

// A three-valued switch (ET_CPU_SE_GATE_FOLD, ET_CPU_VARIABLE_ROWS, ET_CPU_OWN_DEPTHWISE /
// _EXPAND / _STEM): "0" never, "all" wherever the kernel can, unset / empty / "1" (or anything
// else) where its default rule says so. Every switch with a reach is spelled this way.
enum class SwitchReach { kNever, kDefault, kEverywhere };

// `variable`'s reach, read at each call like kernel_switched_on.
inline SwitchReach switch_reach(const char* variable) {
  const char* value = std::getenv(variable);
  if (value == nullptr) return SwitchReach::kDefault;
  if (std::strcmp(value, "0") == 0) return SwitchReach::kNever;
  if (std::strcmp(value, "all") == 0) return SwitchReach::kEverywhere;
  return SwitchReach::kDefault;
}

}  // namespace onednn
}  // namespace et_cpu_plugin
