#include "backends/cpu/runtime/kernel_signature.h"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace et_cpu_plugin {
namespace cpu {
namespace {

struct SignatureEntry {
  const char* name;
  const char* code;
};

// Sorted by name (byte order) by the generator.
constexpr SignatureEntry kSignatures[] = {
#include "backends/cpu/runtime/kernel_signatures.inc"
};

}  // namespace

const char* find_kernel_signature(const char* kernel_name) {
  if (kernel_name == nullptr) {
    return nullptr;
  }
  const auto* end = std::end(kSignatures);
  const auto* found = std::lower_bound(
      std::begin(kSignatures), end, kernel_name,
      [](const SignatureEntry& entry, const char* name) { return std::strcmp(entry.name, name) < 0; });
  if (found == end || std::strcmp(found->name, kernel_name) != 0) {
    return nullptr;
  }
  return found->code;
}

std::vector<ArgSpec> parse_signature(const char* code) {
  std::vector<ArgSpec> specs;
  for (const char* c = code; c != nullptr && *c != '\0'; ++c) {
    if (*c == '?') {
      if (!specs.empty()) specs.back().optional = true;
      continue;
    }
    specs.push_back(ArgSpec{*c, false});
  }
  return specs;
}

}  // namespace cpu
}  // namespace et_cpu_plugin
