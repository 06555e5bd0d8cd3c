// The one reading of an environment switch of the delegate (ET_CPU_FOLD_PERMUTE,
// ET_CPU_ROW_GEMM, ET_CPU_ONEDNN_CHAIN and the like): the runtime's and every provider's go
// through it. Header-only and with no dependencies (Bazel `:switches`), so the runtime library
// and the Optimized provider's plans, which do not depend on each other, both read it
// (providers/optimized/common/switches.h names it for the provider).
#pragma once

#include <cstdlib>
#include <cstring>

namespace et_cpu_plugin {

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

}  // namespace et_cpu_plugin
