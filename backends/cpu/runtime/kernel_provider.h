// The seam between the compiled graph and whoever executes an op. A route names a provider in the
// payload (Provider.Reference, Provider.Optimized, ...); at init the runtime asks that provider to
// bind the op and falls back to the Reference provider (ExecuTorch's own kernels) when it declines.
//
// An optimized provider (e.g. providers/optimized/) implements KernelProvider and registers itself
// from a static initializer in a library linked into the runtime (`alwayslink = True`):
//
//   const bool registered = register_kernel_provider(/*Provider.Optimized*/ 1, &my_provider);
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/span.h>
#include <executorch/runtime/kernel/kernel_runtime_context.h>

#include "backends/cpu/runtime/switches.h"

namespace et_cpu_plugin {
namespace cpu {

// Whether a graph with symbolic dimensions resizes in place at a new size (issue 47; runtime
// README): on unless ET_CPU_RESIZE_IN_PLACE is "0" (shape plans then). The one reading of the
// switch, by the compiled graph (at init) and by the providers whose choices depend on it.
inline bool resize_in_place_enabled() { return kernel_switched_on("ET_CPU_RESIZE_IN_PLACE"); }

// A provider's state shared by the ops of one compiled graph (one delegate instance), e.g. a
// oneDNN engine and the scratchpad its plans share. Created by KernelProvider::open_session at
// init, destroyed with the graph; ops of one graph run one after another on one thread.
class ProviderSession {
 public:
  virtual ~ProviderSession() = default;
  // Bytes the provider holds for this graph beside the runtime's arena (reordered weights,
  // scratchpads, conversion buffers), for the delegate's memory report.
  virtual size_t held_bytes() const { return 0; }
  // One line for the placement log (e.g. how many activations stay in the provider's layout).
  virtual std::string summary() const { return ""; }
  // Called once after every op of the graph is bound. `read_outside(tensor)` is true when an op
  // bound to another provider reads `tensor`, or it is a graph output: a tensor only this
  // provider's kernels read may stay in the provider's own layout between them (the runtime
  // never looks at its bytes). Any error fails init.
  virtual executorch::runtime::Error finalize(
      const std::function<bool(const executorch::aten::TensorImpl*)>& read_outside) {
    (void)read_outside;
    return executorch::runtime::Error::Ok;
  }
  // Resizing in place (resize_in_place_enabled(), CompiledGraph): the graph's tensors took new
  // sizes within their bounds (the same tensors, arena and layouts; every kernel of this session
  // said resizable()). Prepares again what depends on the sizes. NotSupported: this session's
  // kernels cannot run at these sizes in place (the graph then compiles a shape plan instead).
  virtual executorch::runtime::Error resize() { return executorch::runtime::Error::NotSupported; }
  // Around each call of the graph (every call_started() is followed by one call_finished(),
  // errors included): a provider may keep its threads ready between the call's kernels.
  virtual void call_started() {}
  virtual void call_finished() {}
  // Resized in place: whether a shape plan of the current sizes would run them faster than its
  // kernels do in place (plans prepared per image, run over a batch of several). The graph then
  // compiles one when the same sizes are called again in a row (the first call stays cheap).
  virtual bool faster_as_shape_plan() const { return false; }
  // Resized in place: whether some kernel's plan only stands in at the current sizes (made
  // cheaply for the first call at them). The graph then calls prepare_standing_in when they are
  // called again in a row.
  virtual bool plans_stand_in() const { return false; }
  // At the same sizes: the kernels whose plans stand in prepare the faster plans they keep (the
  // others as they are). NotSupported as resize's.
  virtual executorch::runtime::Error prepare_standing_in() { return resize(); }
};

// An op the runtime offers to fuse after the op being bound: an elementwise step, or a
// convolution of the previous result (a provider may run a chain of them as one kernel, e.g. an
// inverted residual block). Offered only when the graph allows it: the steps follow the op
// directly in execution order, each reads the previous result as its only reader, an add's other
// operand is ready before the op runs, and a convolution has the op's provider in the route
// table. Results the provider skips over are never materialized (no arena bytes).
struct FusableStep {
  // kBroadcastMul: aten.mul.Tensor of the previous result, broadcast ([N or 1, C, 1, ..., 1]),
  // with a ready tensor of the product's shape (`residual`): a squeeze-excite gate times x.
  enum class Kind { kRelu, kClamp, kAdd, kConv, kEltwise, kBroadcastMul };
  Kind kind = Kind::kRelu;
  double min = 0.0;                                // kClamp: bounds (+-infinity when absent)
  double max = 0.0;
  // kAdd: the other operand (same shape); kBroadcastMul: the full-size operand.
  executorch::runtime::EValue* residual = nullptr;
  executorch::runtime::EValue* output = nullptr;    // the step's result tensor
  const char* op_name = nullptr;                    // FX node name of the step
  // kConv: the convolution's arguments in aten::convolution.out order (args[0] is the previous
  // result, the out tensor last) and, parallel to them, which are constant tensors.
  executorch::runtime::Span<executorch::runtime::EValue*> args;
  const bool* arg_is_constant = nullptr;
  // kEltwise: the activation, with torch's definition, and its parameter.
  enum class Eltwise {
    kSigmoid,
    kTanh,
    kHardswish,
    kHardsigmoid,
    kSilu,
    kGelu,      // approximate='none' (erf)
    kGeluTanh,  // approximate='tanh'
    kLeakyRelu,  // alpha: the negative slope
    kElu,        // alpha (scale and input_scale are 1)
  };
  Eltwise eltwise = Eltwise::kSigmoid;
  double alpha = 0.0;
};

// An operand of a matrix product (bmm / mm) that the runtime offers to read in place: it is the
// output of a permute_copy (through views only) whose single reader is this op, so its bytes can
// be the permute's input's, read with `strides` (in elements, one per dim of the argument's
// shape). A provider that takes the offer (OpBinding::strided_taken) reads that argument with
// these strides; the permute then never runs (its output shares its input's bytes, like a view).
struct StridedOperand {
  size_t arg = 0;                   // index into OpBinding::args
  std::vector<int64_t> strides;     // of the argument's logical shape
  const char* permute = nullptr;    // FX node name of the permute folded into the op
  // The permute's input (whose bytes the argument then is) and every value between it and the
  // argument: a provider that keeps activations in layouts of its own must keep these plain.
  std::vector<const executorch::runtime::EValue*> keep_plain;
};

// What a provider sees of one op at bind time. `args` point into storage the compiled graph owns
// for its whole life, in the kernel's out-variant schema order (out tensors last), followed by one
// result slot (ExecuTorch's kernel wrappers expect it and may write it). Tensor data pointers are
// final at bind for constants only: intermediates get theirs after every op is bound (the arena
// is planned from the fusions the providers took), graph inputs and outputs before every run. So
// a provider reads activation data pointers in run(), never at bind or in finalize().
struct OpBinding {
  const char* op_name;  // FX node name, for messages
  const char* route;    // route-table key, e.g. "aten.convolution.default"
  const char* kernel;   // out-variant kernel name, e.g. "aten::convolution.out"
  uint32_t flags;       // RouteFlags bits
  executorch::runtime::Span<executorch::runtime::EValue*> args;
  // Parallel to `args` (valid for the graph's life): true where the argument is a constant
  // tensor (weights: data final at bind time, so a provider may reorder it once).
  const bool* arg_is_constant = nullptr;
  // Parallel to `args`: true where the argument is a tensor no op reads and the graph does not
  // output (e.g. max pooling's indices), which a provider may leave unwritten.
  const bool* arg_is_unread = nullptr;
  // The provider's per-graph state (KernelProvider::open_session), or null.
  ProviderSession* session = nullptr;
  // Steps the provider may fuse, a prefix of which it takes by setting *fused_steps; the kernel
  // then writes the last taken step's output and the runtime skips those ops.
  executorch::runtime::Span<const FusableStep> fusable;
  size_t* fused_steps = nullptr;
  // A provider that declines (Error::NotSupported) says why here, for the kernel placement log.
  std::string* decline_reason = nullptr;
  // Operands the provider may read with other strides (see StridedOperand): all or none. It
  // sets *strided_taken when its kernel reads them so.
  executorch::runtime::Span<const StridedOperand> strided;
  bool* strided_taken = nullptr;
  // A shape plan's op that its base graph (the upper bounds) bound on this same provider: the
  // provider may leave preparing its plans to ProviderSession::finalize (prepared once, with the
  // final layouts) instead of preparing them now to check that it can.
  bool bound_in_base = false;
  // With bound_in_base: how many of the offered steps the base's kernel took (a provider defers
  // a fused kernel, e.g. a whole inverted residual block, only when the base fused the same).
  size_t base_fused_steps = 0;
};

// One op bound to an implementation; run() is called once per execute.
class BoundKernel {
 public:
  virtual ~BoundKernel() = default;
  virtual executorch::runtime::Error run(executorch::runtime::KernelRuntimeContext& context) = 0;
  // True when the kernel runs at other sizes of its tensors (a graph with symbolic dimensions
  // resized in place, within the bounds it was bound at) once its session's resize() returned:
  // it reads every size from its tensors, at run or when its session prepares it again.
  virtual bool resizable() const { return false; }
  // True when a fused residual add (FusableStep::Kind::kAdd) of this kernel may write its result
  // into the residual's own bytes: the kernel reads each residual element only before it writes
  // the output element at the same place (never another one). The runtime then plans the op's
  // result into the residual's slot when nothing reads the residual afterwards, and the kernel
  // finds the residual already in its output buffer (no copy).
  virtual bool adds_in_place() const { return false; }
};

class KernelProvider {
 public:
  virtual ~KernelProvider() = default;
  virtual const char* name() const = 0;
  // The per-graph state handed to every bind of one graph; null when the provider needs none.
  // `base` is this provider's session of the graph the new one is a shape plan of (the same
  // constants, other sizes), or null: a session may share with it what depends only on the
  // constants (prepared weights). `sizes_vary`: the graph has symbolic dimensions, or is a shape
  // plan of one: the provider may prefer plans every size can reuse (e.g. kernels whose shape
  // does not depend on the size) over the fastest plan for this one size.
  virtual std::unique_ptr<ProviderSession> open_session(const ProviderSession* base,
                                                        bool sizes_vary) const {
    (void)base;
    (void)sizes_vary;
    return nullptr;
  }
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
