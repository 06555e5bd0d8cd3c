// The Reference provider: every route, through ExecuTorch's own kernels in the operator registry.
#pragma once

#include "backends/cpu/runtime/kernel_provider.h"

namespace et_cpu_plugin {
namespace cpu {

class ReferenceProvider final : public KernelProvider {
 public:
  const char* name() const override { return "Reference"; }
  executorch::runtime::Error bind(const OpBinding& op,
                                 std::unique_ptr<BoundKernel>* out) const override;
};

// The process-wide instance, also registered under kReferenceProviderId.
const ReferenceProvider& reference_provider();

}  // namespace cpu
}  // namespace et_cpu_plugin
