// The one reading of an environment switch of the delegate (ET_CPU_FOLD_PERMUTE,
// ET_CPU_ROW_GEMM, ET_CPU_ONEDNN_CHAIN and the like; numeric ones such as ET_CPU_SHAPE_PLANS
// through switch_number, a number or "all" such as ET_CPU_SE_SPLIT through switch_number_or_all):
// the runtime's and every provider's go through it. Header-only and with no dependencies (Bazel
// `:switches`), so the runtime library and the Optimized provider's plans, which do not depend on
// each other, both read it (providers/optimized/common/switches.h names it for the provider).
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

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
// else) where its default rule says so. Every switch with a reach is spelled this way (one that is
// off by default reads unset and empty as "0" too: opted_in_reach).
enum class SwitchReach { kNever, kDefault, kEverywhere };

// `variable`'s reach, read at each call like kernel_switched_on.
inline SwitchReach switch_reach(const char* variable) {
  const char* value = std::getenv(variable);
  if (value == nullptr) return SwitchReach::kDefault;
  if (std::strcmp(value, "0") == 0) return SwitchReach::kNever;
  if (std::strcmp(value, "all") == 0) return SwitchReach::kEverywhere;
  return SwitchReach::kDefault;
}

// The reach of a switch that is off by default (ET_CPU_OWN_GATED_1X1), in one reading: unset,
// empty or "0" never, "all" wherever the kernel can, anything else where its rule says so.
inline SwitchReach opted_in_reach(const char* variable) {
  const char* value = std::getenv(variable);
  if (value == nullptr || value[0] == '\0' || std::strcmp(value, "0") == 0) {
    return SwitchReach::kNever;
  }
  return std::strcmp(value, "all") == 0 ? SwitchReach::kEverywhere : SwitchReach::kDefault;
}

namespace switch_detail {

// switch_number's reading of `value`, `variable`'s value (null: unset).
inline int64_t number_from(const char* variable, const char* value, int64_t fallback,
                           int64_t lowest, int64_t highest) {
  if (value == nullptr || value[0] == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long long parsed = std::strtoll(value, &end, 10);
  if (end != value && *end == '\0' && errno == 0 && parsed >= lowest && parsed <= highest) {
    return static_cast<int64_t>(parsed);
  }
  // The value as printable ASCII (anything else as \xNN), cut at 64 characters.
  std::string shown;
  for (const char* c = value; *c != '\0' && shown.size() < 64; ++c) {
    const unsigned char byte = static_cast<unsigned char>(*c);
    if (byte >= 0x20 && byte < 0x7f && byte != '"' && byte != '\\') {
      shown += static_cast<char>(byte);
    } else {
      char escaped[5];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", byte);
      shown += escaped;
    }
  }
  char line[512];
  const int length = std::snprintf(
      line, sizeof(line),
      "CpuBackend: error: %s=\"%s\" is not an integer in [%lld, %lld]; using the default %lld\n",
      variable, shown.c_str(), static_cast<long long>(lowest), static_cast<long long>(highest),
      static_cast<long long>(fallback));
  if (length > 0) {
    std::fwrite(line, 1, std::min(static_cast<size_t>(length), sizeof(line) - 1), stderr);
  }
  return fallback;
}

}  // namespace switch_detail

// A numeric switch (ET_CPU_SHAPE_PLANS, ET_CPU_ONEDNN_THREADS and the like): `variable` unset or
// empty gives `fallback`; a decimal integer in [lowest, highest] gives itself. Anything else (not
// a whole integer, or out of the range) is the user's mistake, reported where it is read: one
// line on stderr naming the variable, its value and the accepted range, then `fallback`, as if it
// were unset. Like the other readers it never fails the caller (some read in a pool worker or a
// kernel's constructor, where an exception would end the process or only decline a kernel), and it
// writes stderr directly because the provider's plans have no logger (one write per line). Read
// at each call, like kernel_switched_on.
inline int64_t switch_number(const char* variable, int64_t fallback, int64_t lowest,
                             int64_t highest) {
  return switch_detail::number_from(variable, std::getenv(variable), fallback, lowest, highest);
}

// A numeric switch that also takes the word "all" (ET_CPU_SE_SPLIT), in one reading: "all" gives
// `all` (a value the caller keeps outside [lowest, highest]), anything else what switch_number
// gives for it.
inline int64_t switch_number_or_all(const char* variable, int64_t fallback, int64_t lowest,
                                    int64_t highest, int64_t all) {
  const char* value = std::getenv(variable);
  if (value != nullptr && std::strcmp(value, "all") == 0) return all;
  return switch_detail::number_from(variable, value, fallback, lowest, highest);
}

}  // namespace et_cpu_plugin
