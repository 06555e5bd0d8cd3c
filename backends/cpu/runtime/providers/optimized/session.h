// The Optimized provider's session and the kernels it holds: OptimizedKernel, the base of every
// kernel a binder makes (a plan it can prepare again on another onednn::Provider), and
// OptimizedSession, one per delegate instance, which owns the onednn::Provider the kernels are
// prepared on and, at finalize, keeps the activations only its convolution-like kernels read
// channels-last (layout chaining).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>

#include "backends/cpu/runtime/kernel_provider.h"
#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/common/weight_cache.h"
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_provider.h"

namespace et_cpu_plugin {
namespace cpu {
namespace optimized {

// A kernel the session can prepare again on another Provider (see OptimizedSession::finalize).
class OptimizedKernel : public BoundKernel {
 public:
  using InChannelsLast = std::function<bool(const executorch::aten::TensorImpl*)>;
  // Prepares the plan on `provider`; `channels_last(t)` says which activations stay NHWC.
  virtual void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) = 0;
  // Tensors this kernel reads as plain data whatever their producer (matmul operands...).
  virtual std::vector<const executorch::aten::TensorImpl*> plain_reads() const { return {}; }
  // The activation it writes in its own layout when allowed (convolutions), or null.
  virtual const executorch::aten::TensorImpl* chainable_output() const { return nullptr; }
  // The same, knowing which activations of the kernels before it (in execution order) stay
  // channels-last: elementwise kernels keep theirs plain when all their inputs are.
  using Chained = std::unordered_set<const executorch::aten::TensorImpl*>;
  virtual const executorch::aten::TensorImpl* chainable_output_after(const Chained&) const {
    return chainable_output();
  }
  // Pieces its plan runs on the work-sharing pool (1: one oneDNN call).
  virtual size_t pieces() const { return 1; }
  // Conversion buffers it holds itself (beside the provider's), for the memory report.
  virtual size_t staging_bytes() const { return 0; }
  // Its plan's implementation() ("" where the summary does not ask): which kernel runs it.
  virtual std::string implementation() const { return ""; }
  // Whether its plan serves every size within the bounds as it is (a convolution prepared for
  // one image and run image by image over the batch at each run): OptimizedSession::resize
  // leaves it be (the plan keeps the Provider state it was prepared on alive).
  virtual bool plan_fits_every_size() const { return false; }
  // Forgets the plans it keeps for other sizes (a linear's, OptimizedSession::resize): finalize
  // prepares every kernel again on a fresh Provider, and a plan kept from bind would keep the
  // bind Provider's scratchpads alive.
  virtual void drop_kept_plans() {}
  // Whether it runs its plan once per image, one round of the pool each, over several images
  // now (plans_per_image, batch above 1; not a kernel that runs a batch's images together or in
  // tiles): a plan of the whole batch runs faster (OptimizedSession::faster_as_shape_plan).
  virtual bool runs_images_apart() const { return false; }
  // Whether its plan stands in at the current size: made cheaply for a first call at it (a
  // linear's small tiles), a call again at this size prepares the faster one it keeps
  // (OptimizedSession::plans_stand_in).
  virtual bool stands_in() const { return false; }
};

// One per delegate instance. Binding prepares each kernel with plain activations (so a kernel
// oneDNN cannot prepare is declined while the runtime can still fall back); finalize, knowing who
// reads what, prepares them all again on a fresh Provider with activations that only its
// convolutions read kept channels-last (oneDNN's fp32 layout here: no conversion between them).
class OptimizedSession final : public ProviderSession {
 public:
  // `base`: the session of the graph this one is a shape plan of, whose prepared weights it
  // shares (weight_cache.h), or null. `sizes_vary`: the graph is one size of a program with
  // symbolic dimensions (KernelProvider::open_session): its plans prefer size-independent kernels.
  OptimizedSession(const OptimizedSession* base, bool sizes_vary);

  size_t held_bytes() const override;
  std::string summary() const override;
  onednn::Provider& provider() { return *provider_; }
  // The graph has symbolic dimensions or is a shape plan of one (KernelProvider::open_session).
  bool sizes_vary() const { return sizes_vary_; }
  // A kernel bind prepared on provider() with plain activations.
  void add(OptimizedKernel* kernel) { kernels_.push_back(kernel); }
  // Called before each bind: whether the op's base graph bound it here (OpBinding::bound_in_base).
  void begin_bind(bool bound_in_base) { bound_in_base_ = bound_in_base; }
  // A kernel bind checked: prepared now with plain activations, or, in a shape plan whose base
  // bound the op here (prepared at the upper bounds), left to finalize, which prepares every
  // kernel once with its final layouts (a CNN's re-plan used to prepare them twice).
  // ET_CPU_SHAPE_PLAN_DEFER=0: prepared now, as in the base.
  void add_checked(OptimizedKernel* kernel);
  // Whether the op being bound may leave preparing to finalize (add_checked's rule): a shape
  // plan whose base bound it here, ET_CPU_SHAPE_PLAN_DEFER not 0.
  bool defers_prepare() const;
  // A kernel bind only checked: finalize prepares it (the int8 ops).
  void add_unprepared(OptimizedKernel* kernel) {
    kernels_.push_back(kernel);
    unprepared_ = true;
  }
  void count_block() { ++blocks_; }
  // Kernels whose plan runs on the implementation named `prefix` (our own kernels).
  size_t count_implementation(const std::string& prefix) const;
  // Kernels whose implementation() contains `part` (a block names its stages).
  size_t count_containing(const std::string& part) const;
  // Kernels whose plan is split into pieces for the work-sharing pool.
  size_t split_count() const;

  executorch::runtime::Error finalize(
      const std::function<bool(const executorch::aten::TensorImpl*)>& read_outside) override;
  // Every kernel prepared again, on a fresh Provider, for the tensors' new sizes, with the
  // layouts finalize settled (ProviderSession::resize); those whose plan fits every size
  // (OptimizedKernel::plan_fits_every_size) are left as they are.
  executorch::runtime::Error resize() override;
  // While the graph's call runs, the provider's work pool is held (WorkPool::hold): its workers
  // spin between the call's ops instead of sleeping. Only when the graph's previous call took at
  // least kHoldFromUs: waking the worker at the start costs tens of microseconds on a VM, which a
  // decoder's 0.1 ms step cannot pay back. ET_CPU_POOL_HOLD (switch_reach, read when the session
  // opens): "0" never (the workers sleep after their brief wait, as between calls), "all" every
  // call. A call not held wakes the pool's blocked workers at its start when some op is split
  // (WorkPool::wake; ET_CPU_POOL_WAKE, on unless "0", read when the session opens): after time
  // away (gc.collect(), another runtime) the futex wake is paid before the first ops instead of
  // inside the first split op, which the worker then joins on time.
  void call_started() override;
  void call_finished() override;
  // Some kernel runs images apart (OptimizedKernel::runs_images_apart) and
  // ET_CPU_CONV_PER_IMAGE is not "all" (read here).
  bool faster_as_shape_plan() const override;
  // Some kernel's plan stands in at the current sizes (OptimizedKernel::stands_in).
  bool plans_stand_in() const override;
  // Only those kernels, on a fresh Provider of their own (standing_in_provider_).
  executorch::runtime::Error prepare_standing_in() override;
  // Opened with a base session: a shape plan's.
  bool is_shape_plan() const { return shape_plan_; }

 private:
  onednn::ProviderOptions options() const;
  // resize() and prepare_standing_in()'s work: the kernels `which` picks prepared again, in order,
  // on a fresh Provider of `fresh_options` with the layouts finalize settled (each counted in
  // resize_prepares), which it returns. `test_fails` (the test hook ET_CPU_TEST_FAIL_RESIZE_AT):
  // throws on reaching the middle kernel, the ones before it prepared, the rest not.
  std::unique_ptr<onednn::Provider> prepare_again(
      const onednn::ProviderOptions& fresh_options,
      const std::function<bool(const OptimizedKernel&)>& which, bool test_fails);

  bool sizes_vary_ = false;  // see the constructor; declared before provider_, which reads it
  size_t fail_resize_at_ = 0;  // the test hook ET_CPU_TEST_FAIL_RESIZE_AT (session.cc)
  size_t resizes_ = 0;         // resize() calls so far
  std::shared_ptr<onednn::WeightCache> weights_;  // shared with the graph's shape plans
  std::unique_ptr<onednn::Provider> provider_;
  // The Provider of the kernels whose plans fit every size, once resize() moved the others to
  // a fresh one (their plans keep its state alive; kept here for held_bytes), else null.
  std::unique_ptr<onednn::Provider> fitting_provider_;
  // The Provider prepare_standing_in prepared the kernels that stood in on, until the next
  // resize (kept for held_bytes), else null.
  std::unique_ptr<onednn::Provider> standing_in_provider_;
  std::vector<OptimizedKernel*> kernels_;  // owned by the graph, which outlives the session's use
  size_t chained_ = 0;
  std::unordered_set<const executorch::aten::TensorImpl*> chained_set_;  // finalize's choice
  size_t blocks_ = 0;
  bool unprepared_ = false;  // some kernel waits for finalize to prepare it
  bool shape_plan_ = false;  // opened with a base session
  bool bound_in_base_ = false;  // the op being bound (begin_bind)
  static constexpr int64_t kHoldFromUs = 1000;
  onednn::SwitchReach hold_pool_ = onednn::SwitchReach::kDefault;  // ET_CPU_POOL_HOLD
  bool wake_pool_ = true;  // ET_CPU_POOL_WAKE
  bool splits_ = false;  // some kernel of split_provider_'s plans is split
  const onednn::Provider* split_provider_ = nullptr;
  onednn::WorkPool* held_ = nullptr;  // the pool held during the current call
  std::chrono::steady_clock::time_point call_start_;
  int64_t last_call_us_ = 0;  // the graph's previous call, start to finish (0: none yet)
};

}  // namespace optimized
}  // namespace cpu
}  // namespace et_cpu_plugin
