// The seam between the compiled graph and whoever executes an op. A route names a provider in the
// payload (Provider.Reference, Provider.Optimized, ...); at init the runtime asks that provider to
// bind the op and falls back to the Reference provider (ExecuTorch's own kernels) when it declines.
//
// An optimized provider (e.g. providers/onednn/) implements KernelProvider and registers itself
// from a static initializer in a library linked into the runtime (`alwayslink = True`):
//
//   const bool registered = register_kernel_provider(/*Provider.Optimized*/ 1, &my_provider);
#pragma once

#include <cstdint>
#include <memory>

#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/span.h>
#include <executorch/runtime/kernel/kernel_runtime_context.h>

namespace et_cpu_plugin {
namespace cpu {

// What a provider sees of one op at bind time. `args` point into storage the compiled graph owns
// for its whole life, in the kernel's out-variant schema order (out tensors last), followed by one
// result slot (ExecuTorch's kernel wrappers expect it and may write it); tensor data
// pointers are final for intermediates and constants and rebound before every run for graph
// inputs and outputs, so a provider must read data pointers in run(), never cache them.
struct OpBinding {
  const char* op_name;  // FX node name, for messages
  const char* route;    // route-table key, e.g. "aten.convolution.default"
  const char* kernel;   // out-variant kernel name, e.g. "aten::convolution.out"
  uint32_t flags;       // RouteFlags bits
  executorch::runtime::Span<executorch::runtime::EValue*> args;
};

// One op bound to an implementation; run() is called once per execute.
class BoundKernel {
 public:
  virtual ~BoundKernel() = default;
  virtual executorch::runtime::Error run(executorch::runtime::KernelRuntimeContext& context) = 0;
};

class KernelProvider {
 public:
  virtual ~KernelProvider() = default;
  virtual const char* name() const = 0;
  // Binds `op` into *out. Error::NotSupported declines the op (the runtime then uses Reference);
  // any other error fails init.
  virtual executorch::runtime::Error bind(const OpBinding& op,
                                          std::unique_ptr<BoundKernel>* out) const = 0;
};

// Provider ids are the schema's `Provider` enum values.
constexpr uint8_t kReferenceProviderId = 0;

// Registers `provider` for `provider_id`; returns false when the id is taken or out of range.
bool register_kernel_provider(uint8_t provider_id, const KernelProvider* provider);

// The provider registered for `provider_id`, or nullptr.
const KernelProvider* find_kernel_provider(uint8_t provider_id);

}  // namespace cpu
}  // namespace et_cpu_plugin
