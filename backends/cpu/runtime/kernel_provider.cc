#include "backends/cpu/runtime/kernel_provider.h"

#include <array>

namespace et_cpu_plugin {
namespace cpu {
namespace {

// Function-local so registration from other libraries' static initializers is order-safe.
std::array<const KernelProvider*, 256>& providers() {
  static std::array<const KernelProvider*, 256> table{};
  return table;
}

}  // namespace

bool register_kernel_provider(uint8_t provider_id, const KernelProvider* provider) {
  auto& table = providers();
  if (provider == nullptr || table[provider_id] != nullptr) {
    return false;
  }
  table[provider_id] = provider;
  return true;
}

const KernelProvider* find_kernel_provider(uint8_t provider_id) {
  return providers()[provider_id];
}

}  // namespace cpu
}  // namespace et_cpu_plugin
