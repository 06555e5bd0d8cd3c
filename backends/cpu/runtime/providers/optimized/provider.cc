// The CPU delegate's Optimized provider (Provider.Optimized = 1 in schema.fbs), registered with
// the runtime by a static initializer. It binds each op the partitioner routed to it through the
// table in bind_table.cc: the op family's binder (bind_*.cc) makes a kernel on a oneDNN plan
// (onednn/) or on our own loops (kernels/), or declines with a reason so the runtime falls back
// to the Reference provider (ExecuTorch's kernels). Offered ReLU / clamp / activation /
// residual-add steps after an op become post-ops of its kernel where oneDNN takes them.
//
// Everything that can be done once happens in bind (the delegate's init): constants are
// reordered into oneDNN's layout and the primitives created there; run() only reads the current
// data pointers. The session (session.h) prepares the kernels again at finalize with the
// activations only its convolution-like kernels read kept channels-last.
//
// Threads: ET_CPU_ONEDNN_THREADS, default the CPUs this process may run on. Large ops are split
// into pieces that the calling thread and the provider's pool share (common/work_pool.h);
// ET_CPU_ONEDNN_WORK_SHARING=0 goes back to oneDNN's OpenMP team. See README.md.
#include <memory>
#include <stdexcept>
#include <string>

#include "backends/cpu/runtime/kernel_provider.h"
#include "backends/cpu/runtime/providers/optimized/bind_table.h"

namespace et_cpu_plugin {
namespace cpu {
namespace optimized {
namespace {

constexpr uint8_t kOptimizedProviderId = 1;

class OptimizedProvider final : public KernelProvider {
 public:
  const char* name() const override { return "Optimized(oneDNN)"; }

  std::unique_ptr<ProviderSession> open_session(const ProviderSession* base,
                                                bool sizes_vary) const override {
    return std::make_unique<OptimizedSession>(static_cast<const OptimizedSession*>(base),
                                              sizes_vary);
  }

  Error bind(const OpBinding& op, std::unique_ptr<BoundKernel>* out) const override {
    Decline decline;
    size_t fused = 0;
    Error error = Error::NotSupported;
    auto* session = static_cast<OptimizedSession*>(op.session);
    const std::string kernel = op.kernel;
    if (session == nullptr) {
      decline.reason = "no provider session";
    } else {
      try {
        const BindRow* row = find_binder(kernel);
        if (row != nullptr) {
          session->begin_bind(op.bound_in_base);
          error = row->bind(BindRequest{op, *session, out, &decline, &fused});
        } else {
          decline.reason = "no oneDNN kernel for " + kernel;
        }
      } catch (const std::exception& e) {
        // prepare_* throw with the reason supports_* did not foresee: fall back, don't fail.
        decline.reason = e.what();
        error = Error::NotSupported;
        out->reset();
        fused = 0;
      }
    }
    if (error == Error::NotSupported && op.decline_reason != nullptr) {
      *op.decline_reason = decline.reason;
    }
    if (error == Error::Ok && op.fused_steps != nullptr) *op.fused_steps = fused;
    return error;
  }
};

const OptimizedProvider kProvider;
const bool kRegistered = register_kernel_provider(kOptimizedProviderId, &kProvider);

}  // namespace
}  // namespace optimized
}  // namespace cpu
}  // namespace et_cpu_plugin
