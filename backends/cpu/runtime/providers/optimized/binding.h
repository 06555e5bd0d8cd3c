// What every binder of the Optimized provider uses: reading an op's arguments (tensor_arg,
// int_list, ...), turning the offered fusable steps into post-ops, why an op is declined
// (Decline), preparing a kernel and handing it to the runtime (bind_prepared), and the two
// generic kernels: LayoutKernel (one activation to another through one plan) and LoopKernel (an
// op on our own loops). The binders themselves are declared in binders.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <executorch/runtime/core/evalue.h>

#include "backends/cpu/runtime/error_report.h"
#include "backends/cpu/runtime/kernel_provider.h"
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_provider.h"
#include "backends/cpu/runtime/providers/optimized/session.h"

namespace et_cpu_plugin {
namespace cpu {
namespace optimized {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::KernelRuntimeContext;
using executorch::runtime::Span;

// Why an op is declined; bind() copies it into the binding's decline_reason.
struct Decline {
  std::string reason;
};

// ---- Arguments ----

const Tensor* tensor_arg(Span<EValue*> args, size_t index);
const Tensor* tensor_arg(const OpBinding& op, size_t index);
bool is_f32(const Tensor* tensor);
bool has_dtype(const Tensor* tensor, ScalarType dtype);
bool is_constant(const OpBinding& op, size_t index);
std::vector<int64_t> dims_of(const Tensor& tensor);
// An int or a double argument as a double; false otherwise.
bool scalar_of(const EValue* value, double* out);
// An int list argument of length 1 or `rank`, broadcast to `rank`; false otherwise.
bool int_list(const EValue* value, size_t rank, std::vector<int64_t>* out);
// The out tensor: the last argument of the out-variant schema (the runtime appends one more
// slot, for the kernel wrapper's result, after it).
Tensor* out_arg(const OpBinding& op);
// The number of schema arguments, outs included (without the runtime's result slot).
size_t schema_args(const OpBinding& op);

// ---- Fusable steps as post-ops ----

// The provider's activation for an offered kEltwise step; false when it has none.
bool activation_of_step(const FusableStep& step, onednn::Activation* out);
// Appends the post-op of one offered step; an add also sets *residual (false if one is already
// set). False when the step cannot be expressed (a NaN clamp bound, a second add, a convolution).
bool append_post_op(const FusableStep& step, onednn::PostOps* post, const Tensor** residual);
// The post-ops for the first `count` offered steps, and the residual tensor if one is an add;
// false when the steps cannot be expressed.
bool post_ops_for(const OpBinding& op, size_t count, onednn::PostOps* post,
                  const Tensor** residual);
// The tensor the kernel writes: the op's out argument, or the last fused step's output.
Tensor* final_output(const OpBinding& op, size_t out_index, size_t fused);

// Tries the longest offered prefix of fusable steps the provider accepts, then fewer.
template <typename Check>
size_t longest_supported_prefix(const OpBinding& op, Check check, onednn::PostOps* post,
                                const Tensor** residual) {
  for (size_t count = op.fusable.size() + 1; count-- > 0;) {
    if (post_ops_for(op, count, post, residual) && check(*post).ok) return count;
  }
  post->clear();
  *residual = nullptr;
  return 0;
}

// ---- Kernels ----

// Runs a kernel's `body`; a provider exception becomes Error::Internal with a log line.
template <typename Body>
Error guarded(const char* what, Body body) {
  try {
    body();
  } catch (const std::exception& e) {
    log_line(LogLevel::kError, "oneDNN %s failed: %s", what, e.what());
    return Error::Internal;
  }
  return Error::Ok;
}

const executorch::aten::TensorImpl* impl_of(const Tensor* tensor);

// `t`'s layout as the session keeps it: channels-last or plain.
onednn::Layout session_layout(const OptimizedKernel::InChannelsLast& channels_last,
                              const Tensor* t);

// ---- Plans per image (a graph whose batch varies) ----

// Whether convolution-like kernels and the squeeze-excite tail bound now prepare their plans for
// one image and run them image by image over the batch read at each run, so that one plan fits
// every batch and a graph resized in place prepares nothing for them: in a graph whose sizes
// vary (OptimizedSession::sizes_vary) that resizes in place (resize_in_place_enabled), not in its
// shape plans (whole-batch plans: OptimizedSession::faster_as_shape_plan), unless
// ET_CPU_CONV_PER_IMAGE=0 (read at bind; their plans then take the whole batch, and the graph
// compiles shape plans).
bool plans_per_image(const OptimizedSession& session);

// The sizes of one image of a kernel's tensors (every dim but the first), as at bind: a plan
// prepared for one image serves any batch of those images, and no other image size.
class ImageSizes {
 public:
  ImageSizes() = default;
  explicit ImageSizes(std::vector<const Tensor*> tensors);
  // Whether every tensor's image still has the sizes it had at bind.
  bool current() const;
  // Throws onednn::ProviderError naming `what` when not current (a dim other than the batch
  // changed: the graph then takes shape plans).
  void check(const char* what) const;

 private:
  std::vector<const Tensor*> tensors_;
  std::vector<std::vector<int64_t>> sizes_;
};

// `dims` with the batch (its first dim) set to 1: one image's.
std::vector<int64_t> one_image(std::vector<int64_t> dims);

// Prepares `kernel` with plain activations (finalize may prepare it again with chained ones),
// adds it to the session and hands it to the runtime.
Error bind_prepared(std::unique_ptr<OptimizedKernel> kernel, OptimizedSession& session,
                    std::unique_ptr<BoundKernel>* out);

// Runs a one-input plan (`plan.run(in, out)`) once per image of `input`'s batch, read now, when
// `per_image` (plans prepared for one image in a graph whose batch varies), else once on the
// whole tensors. Channels-last keeps the batch outermost too: an image's elements are contiguous.
template <typename Plan>
void run_per_image(const Plan& plan, bool per_image, const Tensor* input, Tensor* output) {
  const int64_t images = per_image ? input->size(0) : 1;
  if (images < 1) return;
  const int64_t in_step = input->numel() / images;
  const int64_t out_step = output->numel() / images;
  for (int64_t n = 0; n < images; ++n) {
    plan.run(input->const_data_ptr<float>() + n * in_step,
             output->mutable_data_ptr<float>() + n * out_step);
  }
}

// One activation to another, each in the layout the session keeps it (plain or channels-last),
// its output chainable: max / average pooling and resampling. `make` prepares the plan. With
// `output_follows_input` the output stays channels-last only after a channels-last input
// (softmax: from a plain input a channels-last output would only cost a conversion).
template <typename Plan>
class LayoutKernel final : public OptimizedKernel {
 public:
  using Make = std::function<Plan(onednn::Provider&, const onednn::Layout& input,
                                  const onednn::Layout& output)>;
  // `resizable`: `make` reads every size from the layouts it is given (BoundKernel::resizable).
  // `per_image` (plans_per_image): `make` is given one image's layouts (and prepares for one
  // image), the plan runs once per image of the batch read at each run.
  LayoutKernel(const char* what, Make make, const Tensor* input, Tensor* output,
               bool output_follows_input = false, bool resizable = false,
               bool per_image = false)
      : what_(what),
        make_(std::move(make)),
        input_(input),
        output_(output),
        output_follows_input_(output_follows_input),
        resizable_(resizable || per_image),
        per_image_(per_image),
        image_(std::vector<const Tensor*>{input, output}) {}
  bool resizable() const override { return resizable_; }
  bool plan_fits_every_size() const override { return per_image_ && plan_ && image_.current(); }

  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    if (!per_image_) {
      plan_ = std::make_unique<Plan>(make_(provider, session_layout(channels_last, input_),
                                           session_layout(channels_last, output_)));
      return;
    }
    image_.check(what_);
    const auto layout = [&](const Tensor* t) {
      const std::vector<int64_t> dims = one_image(dims_of(*t));
      return channels_last(impl_of(t)) ? onednn::Layout::channels_last(dims)
                                       : onednn::Layout::plain(dims);
    };
    plan_ = std::make_unique<Plan>(make_(provider, layout(input_), layout(output_)));
  }
  const executorch::aten::TensorImpl* chainable_output() const override {
    return impl_of(output_);
  }
  const executorch::aten::TensorImpl* chainable_output_after(
      const Chained& chained) const override {
    if (output_follows_input_ && chained.count(impl_of(input_)) == 0) return nullptr;
    return chainable_output();
  }

  std::string implementation() const override { return plan_ ? plan_->implementation() : ""; }
  // Pooling splits into row bands or images on the pool (pooling_plan.cc); the others run whole.
  size_t pieces() const override {
    if constexpr (std::is_same_v<Plan, onednn::PoolPlan>) {
      return plan_ ? plan_->pieces() : 1;
    } else {
      return 1;
    }
  }

  Error run(KernelRuntimeContext&) override {
    return guarded(what_, [&] {
      run_per_image(*plan_, per_image_, input_, output_);
    });
  }

 private:
  const char* what_;
  Make make_;
  const Tensor* input_;
  Tensor* output_;
  bool output_follows_input_;
  bool resizable_;
  bool per_image_;
  ImageSizes image_;  // with per_image_: the image sizes its plan serves
  std::unique_ptr<Plan> plan_;
};

// An op on our own loops (mask_ops.h, reductions.h, embedding.h, quantize_convert.h): every
// tensor it reads plain; `body` runs it and returns an error for bad data (embedding ids).
// Resizing (BoundKernel::resizable): a body that reads its sizes at each run says so with
// `Sizes::kAtRun`; `Sizes::kReplan` gives a `replan` that prepare calls to work out again what
// the body uses of the sizes (throwing ProviderError when it cannot); by default neither.
class LoopKernel final : public OptimizedKernel {
 public:
  using Body = std::function<Error()>;
  using Replan = std::function<void()>;
  enum class Sizes { kAtBind, kAtRun, kReplan };
  LoopKernel(std::string what, std::vector<const Tensor*> reads, Body body,
             Sizes sizes = Sizes::kAtBind, Replan replan = nullptr)
      : what_(std::move(what)),
        reads_(std::move(reads)),
        body_(std::move(body)),
        sizes_(sizes),
        replan_(std::move(replan)) {}

  void prepare(onednn::Provider&, const InChannelsLast&) override {
    if (sizes_ == Sizes::kReplan && replan_) replan_();
  }
  std::vector<const executorch::aten::TensorImpl*> plain_reads() const override;
  std::string implementation() const override { return "loops:" + what_; }
  bool resizable() const override {
    return sizes_ == Sizes::kAtRun || (sizes_ == Sizes::kReplan && replan_);
  }
  Error run(KernelRuntimeContext&) override { return body_(); }

 private:
  std::string what_;
  std::vector<const Tensor*> reads_;
  Body body_;
  Sizes sizes_;
  Replan replan_;
};

// Binds a LoopKernel (see bind_prepared).
Error bind_loop(OptimizedSession& session, std::unique_ptr<BoundKernel>* out, std::string what,
                std::vector<const Tensor*> reads, LoopKernel::Body body,
                LoopKernel::Sizes sizes = LoopKernel::Sizes::kAtBind,
                LoopKernel::Replan replan = nullptr);

}  // namespace optimized
}  // namespace cpu
}  // namespace et_cpu_plugin
