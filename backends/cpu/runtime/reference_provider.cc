#include "backends/cpu/runtime/reference_provider.h"

#include <vector>

#include <executorch/runtime/kernel/operator_registry.h>

#include "backends/cpu/runtime/argument_checks.h"
#include "backends/cpu/runtime/builtin_kernels.h"

namespace et_cpu_plugin {
namespace cpu {
namespace {

using executorch::aten::DimOrderType;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::KernelRuntimeContext;
using executorch::runtime::OpFunction;
using executorch::runtime::Span;
using executorch::runtime::TensorMeta;

class RegistryKernel final : public BoundKernel {
 public:
  RegistryKernel(OpFunction function, Span<EValue*> args) : function_(function), args_(args) {}

  Error run(KernelRuntimeContext& context) override {
    function_(context, args_);
    return context.failure_state();
  }
  // ExecuTorch's kernels read every size from their tensors at each call.
  bool resizable() const override { return true; }

 private:
  OpFunction function_;
  Span<EValue*> args_;
};

// Contiguous dim orders: every tensor the runtime builds is contiguous (dim order 0..rank-1).
DimOrderType kContiguousDimOrder[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

}  // namespace

Error ReferenceProvider::bind(const OpBinding& op, std::unique_ptr<BoundKernel>* out) const {
  Error checked = check_kernel_arguments(op);
  if (checked != Error::Ok) return checked;
  // The kernel key lists the dtype and dim order of each tensor argument, the way the ExecuTorch
  // method builds it; the registry falls back to the op's unspecialized kernel when no specialized
  // one matches.
  std::vector<TensorMeta> metas;
  for (EValue* arg : op.args) {
    if (arg->isTensor()) {
      const auto& tensor = arg->toTensor();
      size_t rank = static_cast<size_t>(tensor.dim());
      metas.emplace_back(tensor.scalar_type(), Span<DimOrderType>(kContiguousDimOrder, rank));
    }
  }
  auto specialized = executorch::runtime::get_op_function_from_registry(
      op.kernel, Span<const TensorMeta>(metas.data(), metas.size()));
  OpFunction function = specialized.ok() ? specialized.get() : nullptr;
  if (function == nullptr) {
    auto unspecialized = executorch::runtime::get_op_function_from_registry(op.kernel);
    function = unspecialized.ok() ? unspecialized.get() : nullptr;
  }
  if (function == nullptr) {
    // Not in the registry: one of the runtime's own kernels, or missing (OperatorMissing).
    return bind_builtin_kernel(op, out);
  }
  out->reset(new RegistryKernel(function, op.args));
  return Error::Ok;
}

const ReferenceProvider& reference_provider() {
  static const ReferenceProvider provider;
  return provider;
}

namespace {
const bool kReferenceRegistered =
    register_kernel_provider(kReferenceProviderId, &reference_provider());
}  // namespace

}  // namespace cpu
}  // namespace et_cpu_plugin
