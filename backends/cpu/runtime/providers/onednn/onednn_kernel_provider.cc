// The CPU delegate's Optimized provider (Provider.Optimized = 1 in schema.fbs): binds
// convolution, linear, addmm, mm and bmm on float32 to oneDNN plans (onednn_provider.h) and
// declines everything else, with a reason, so the runtime falls back to ExecuTorch's kernels.
//
// Everything that can be done once happens in bind (i.e. the delegate's init): the weights are
// constants, reordered into oneDNN's layout and the primitive created there; run() only reads
// the current data pointers (graph inputs and outputs are rebound before every execute).
// Elementwise ops the runtime offers (ReLU, clamp/hardtanh, a residual add) become oneDNN
// post-ops of the plan.
//
// Threads: one setting, ET_CPU_ONEDNN_THREADS, default the CPUs this process may run on (2
// here). Large convolutions, linears and matmuls are split into pieces that the calling thread
// and the provider's pool take one at a time (work_pool.h): a thread the OS deschedules on a busy
// machine delays one piece, not the op, which is what made oneDNN's OpenMP team (static split)
// 3-44x slower under load. ET_CPU_ONEDNN_WORK_SHARING=0 goes back to the OpenMP team (for
// measurement). See README.md.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/platform/log.h>

#include "backends/cpu/runtime/error_report.h"
#include "backends/cpu/runtime/kernel_provider.h"
#include "backends/cpu/runtime/providers/onednn/embedding.h"
#include "backends/cpu/runtime/providers/onednn/mask_ops.h"
#include "backends/cpu/runtime/providers/onednn/quantize_convert.h"
#include "backends/cpu/runtime/providers/onednn/quantized_kernels.h"
#include "backends/cpu/runtime/providers/onednn/reductions.h"
#include "backends/cpu/runtime/providers/onednn/vector_math.h"
#include "backends/cpu/runtime/providers/onednn/onednn_provider.h"
#include "backends/cpu/runtime/providers/onednn/weight_cache.h"

namespace et_cpu_plugin {
namespace cpu {
namespace {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::Span;
using executorch::runtime::KernelRuntimeContext;

constexpr uint8_t kOptimizedProviderId = 1;

// ET_CPU_ONEDNN_WORK_SHARING=0 runs each op whole on oneDNN's OpenMP team instead.
bool work_sharing_enabled() {
  const char* env = std::getenv("ET_CPU_ONEDNN_WORK_SHARING");
  return env == nullptr || std::string(env) != "0";
}

// Why an op is declined; bind() copies it into the binding's decline_reason.
struct Decline {
  std::string reason;
};

const Tensor* tensor_arg(Span<EValue*> args, size_t index) {
  if (index >= args.size() || !args[index]->isTensor()) return nullptr;
  return &args[index]->toTensor();
}

const Tensor* tensor_arg(const OpBinding& op, size_t index) {
  return tensor_arg(op.args, index);
}

bool is_f32(const Tensor* tensor) {
  return tensor != nullptr && tensor->scalar_type() == ScalarType::Float;
}

bool is_constant(const OpBinding& op, size_t index) {
  return op.arg_is_constant != nullptr && op.arg_is_constant[index];
}

std::vector<int64_t> dims_of(const Tensor& tensor) {
  std::vector<int64_t> dims;
  for (ssize_t d = 0; d < tensor.dim(); ++d) dims.push_back(tensor.size(d));
  return dims;
}

bool scalar_of(const EValue* value, double* out) {
  if (value->isInt()) {
    *out = static_cast<double>(value->toInt());
    return true;
  }
  if (value->isDouble()) {
    *out = value->toDouble();
    return true;
  }
  return false;
}

// An int list argument of length 1 or `rank`, broadcast to `rank`; false otherwise.
bool int_list(const EValue* value, size_t rank, std::vector<int64_t>* out) {
  if (!value->isIntList()) return false;
  auto list = value->toIntList();
  if (list.size() != 1 && list.size() != rank) return false;
  out->clear();
  for (size_t i = 0; i < rank; ++i) out->push_back(list[list.size() == 1 ? 0 : i]);
  return true;
}

// The provider's activation for an offered kEltwise step; false when it has none.
bool activation_of_step(const FusableStep& step, onednn::Activation* out) {
  using E = FusableStep::Eltwise;
  using K = onednn::Activation::Kind;
  onednn::Activation a;
  switch (step.eltwise) {
    case E::kSigmoid:
      a.kind = K::kSigmoid;
      break;
    case E::kTanh:
      a.kind = K::kTanh;
      break;
    case E::kHardswish:
      a.kind = K::kHardswish;
      break;
    case E::kHardsigmoid:
      a.kind = K::kHardsigmoid;
      break;
    case E::kSilu:
      a.kind = K::kSilu;
      break;
    case E::kGelu:
      a.kind = K::kGeluErf;
      break;
    case E::kGeluTanh:
      a.kind = K::kGeluTanh;
      break;
    case E::kLeakyRelu:
      a.kind = K::kLeakyRelu;
      a.alpha = static_cast<float>(step.alpha);
      break;
    case E::kElu:
      a.kind = K::kElu;
      a.alpha = static_cast<float>(step.alpha);
      break;
    default:
      return false;
  }
  if (!onednn::supports_activation(a).ok) return false;
  *out = a;
  return true;
}

// Appends the post-op of one offered step; an add also sets *residual (false if one is already
// set). False when the step cannot be expressed (a NaN clamp bound, a second add, a convolution).
bool append_post_op(const FusableStep& step, onednn::PostOps* post, const Tensor** residual) {
  switch (step.kind) {
    case FusableStep::Kind::kRelu:
      post->push_back(onednn::PostOp::relu());
      return true;
    case FusableStep::Kind::kClamp: {
      if (std::isnan(step.min) || std::isnan(step.max)) return false;
      const float lo = step.min < -FLT_MAX ? -FLT_MAX : static_cast<float>(step.min);
      const float hi = step.max > FLT_MAX ? FLT_MAX : static_cast<float>(step.max);
      if (lo == 0.0f && hi == FLT_MAX) {
        post->push_back(onednn::PostOp::relu());
      } else {
        post->push_back(onednn::PostOp::clamp(lo, hi));
      }
      return true;
    }
    case FusableStep::Kind::kAdd:
      if (*residual != nullptr || step.residual == nullptr || !step.residual->isTensor()) {
        return false;
      }
      *residual = &step.residual->toTensor();
      post->push_back(onednn::PostOp::add());
      return true;
    case FusableStep::Kind::kConv:
      return false;  // a convolution is no post-op (see bind_block)
    case FusableStep::Kind::kEltwise: {
      onednn::Activation activation;
      if (!activation_of_step(step, &activation)) return false;
      post->push_back(onednn::PostOp::act(activation));
      return true;
    }
  }
  return false;
}

// The post-ops for the first `count` offered steps, and the residual tensor if one is an add;
// false when the steps cannot be expressed.
bool post_ops_for(const OpBinding& op, size_t count, onednn::PostOps* post,
                  const Tensor** residual) {
  post->clear();
  *residual = nullptr;
  for (size_t s = 0; s < count; ++s) {
    if (!append_post_op(op.fusable[s], post, residual)) return false;
  }
  return true;
}

// The tensor the kernel writes: the op's out argument, or the last fused step's output.
Tensor* final_output(const OpBinding& op, size_t out_index, size_t fused) {
  if (fused > 0) return &op.fusable[fused - 1].output->toTensor();
  return &op.args[out_index]->toTensor();
}

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

// A kernel the session can prepare again on another Provider (see OnednnSession::finalize).
class OnednnKernel : public BoundKernel {
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
};

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

const executorch::aten::TensorImpl* impl_of(const Tensor* tensor) {
  return tensor ? tensor->unsafeGetTensorImpl() : nullptr;
}

// `t`'s layout as the session keeps it: channels-last or plain.
onednn::Layout session_layout(const OnednnKernel::InChannelsLast& channels_last,
                              const Tensor* t) {
  return channels_last(impl_of(t)) ? onednn::Layout::channels_last(dims_of(*t))
                                   : onednn::Layout::plain(dims_of(*t));
}

// A convolution-like op's constants and post-ops (`Params`: ConvParams or DeconvParams).
template <typename Params>
struct ConvLikeRecipe {
  Params params;
  const float* weight = nullptr;  // the graph's constants: alive as long as the graph
  const float* bias = nullptr;
  onednn::PostOps post;
};
using ConvRecipe = ConvLikeRecipe<onednn::ConvParams>;
using DeconvRecipe = ConvLikeRecipe<onednn::DeconvParams>;

// What ConvLikeKernel needs to know of each op: its plan, how to prepare it, its name in errors.
struct ConvOp {
  using Recipe = ConvRecipe;
  using Plan = onednn::ConvPlan;
  static constexpr const char* kName = "convolution";
  static Plan prepare(onednn::Provider& provider, const Recipe& recipe,
                      const onednn::ConvLayouts& layouts) {
    return provider.prepare_conv(recipe.params, recipe.weight, recipe.bias, recipe.post,
                                 layouts);
  }
};
struct DeconvOp {
  using Recipe = DeconvRecipe;
  using Plan = onednn::DeconvPlan;
  static constexpr const char* kName = "transposed convolution";
  static Plan prepare(onednn::Provider& provider, const Recipe& recipe,
                      const onednn::ConvLayouts& layouts) {
    return provider.prepare_deconv(recipe.params, recipe.weight, recipe.bias, recipe.post,
                                   layouts);
  }
};

// A convolution or transposed convolution; both take part in layout chaining the same way.
template <typename Op>
class ConvLikeKernel final : public OnednnKernel {
 public:
  using Recipe = typename Op::Recipe;
  using Plan = typename Op::Plan;

  ConvLikeKernel(Recipe recipe, const Tensor* input, Tensor* output, const Tensor* residual)
      : recipe_(std::move(recipe)), input_(input), output_(output), residual_(residual) {}

  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    onednn::ConvLayouts layouts;
    if (channels_last(impl_of(input_))) {
      layouts.input =
          std::make_shared<onednn::Layout>(onednn::Layout::channels_last(dims_of(*input_)));
    }
    layouts.output = channels_last(impl_of(output_)) ? onednn::OutputLayout::kChannelsLast
                                                     : onednn::OutputLayout::kPlain;
    plan_ = std::make_unique<Plan>(Op::prepare(provider, recipe_, layouts));
    residual_fix_.reset();
    if (residual_ != nullptr) {
      // The residual must arrive in the output's layout: convert it into the output buffer
      // and add in place when its producer left it in the other one.
      const std::vector<int64_t> dims = dims_of(*residual_);
      const onednn::Layout given = channels_last(impl_of(residual_))
                                       ? onednn::Layout::channels_last(dims)
                                       : onednn::Layout::plain(dims);
      if (given != plan_->output_layout()) {
        residual_fix_ = std::make_unique<onednn::ReorderPlan>(
            provider.prepare_reorder(given, plan_->output_layout()));
      }
    }
  }

  const executorch::aten::TensorImpl* chainable_output() const override {
    return impl_of(output_);
  }
  size_t pieces() const override { return plan_ ? plan_->pieces() : 1; }
  std::string implementation() const override { return plan_ ? plan_->implementation() : ""; }

  Error run(KernelRuntimeContext&) override {
    return guarded(Op::kName, [&] {
      float* out = output_->mutable_data_ptr<float>();
      const float* residual = residual_ ? residual_->const_data_ptr<float>() : nullptr;
      if (residual_fix_) {
        residual_fix_->run(residual, out);
        residual = out;
      }
      plan_->run(input_->const_data_ptr<float>(), out, residual);
    });
  }

 private:
  Recipe recipe_;
  const Tensor* input_;
  Tensor* output_;
  const Tensor* residual_;
  std::unique_ptr<Plan> plan_;
  std::unique_ptr<onednn::ReorderPlan> residual_fix_;
};
using ConvKernel = ConvLikeKernel<ConvOp>;
using DeconvKernel = ConvLikeKernel<DeconvOp>;

class LinearKernel final : public OnednnKernel {
 public:
  LinearKernel(onednn::LinearParams params, const float* weight, const float* bias,
               onednn::PostOps post, const Tensor* input, Tensor* output, const Tensor* residual)
      : params_(params), weight_(weight), bias_(bias), post_(std::move(post)), input_(input),
        output_(output), residual_(residual) {}

  void prepare(onednn::Provider& provider, const InChannelsLast&) override {
    plan_ = std::make_unique<onednn::LinearPlan>(
        provider.prepare_linear(params_, weight_, bias_, post_));
  }
  std::vector<const executorch::aten::TensorImpl*> plain_reads() const override {
    return {impl_of(input_), impl_of(residual_)};
  }
  size_t pieces() const override { return plan_ ? plan_->pieces() : 1; }
  std::string implementation() const override { return plan_ ? plan_->implementation() : ""; }

  Error run(KernelRuntimeContext&) override {
    return guarded("linear", [&] {
      plan_->run(input_->const_data_ptr<float>(), output_->mutable_data_ptr<float>(),
                 residual_ ? residual_->const_data_ptr<float>() : nullptr);
    });
  }

 private:
  onednn::LinearParams params_;
  const float* weight_;
  const float* bias_;
  onednn::PostOps post_;
  const Tensor* input_;
  Tensor* output_;
  const Tensor* residual_;
  std::unique_ptr<onednn::LinearPlan> plan_;
};

class MatmulKernel final : public OnednnKernel {
 public:
  MatmulKernel(onednn::MatmulParams params, onednn::PostOps post, const Tensor* a,
               const Tensor* b, Tensor* output, const Tensor* residual)
      : params_(params), post_(std::move(post)), a_(a), b_(b), output_(output),
        residual_(residual) {}

  void prepare(onednn::Provider& provider, const InChannelsLast&) override {
    plan_ = std::make_unique<onednn::MatmulPlan>(provider.prepare_matmul(params_, post_));
  }
  std::vector<const executorch::aten::TensorImpl*> plain_reads() const override {
    return {impl_of(a_), impl_of(b_), impl_of(residual_)};
  }
  size_t pieces() const override { return plan_ ? plan_->pieces() : 1; }

  Error run(KernelRuntimeContext&) override {
    return guarded("matmul", [&] {
      plan_->run(a_->const_data_ptr<float>(), b_->const_data_ptr<float>(),
                 output_->mutable_data_ptr<float>(),
                 residual_ ? residual_->const_data_ptr<float>() : nullptr);
    });
  }

 private:
  onednn::MatmulParams params_;
  onednn::PostOps post_;
  const Tensor* a_;
  const Tensor* b_;
  Tensor* output_;
  const Tensor* residual_;
  std::unique_ptr<onednn::MatmulPlan> plan_;
};

// One activation to another, each in the layout the session keeps it (plain or channels-last),
// its output chainable: max / average pooling and resampling. `make` prepares the plan. With
// `output_follows_input` the output stays channels-last only after a channels-last input
// (softmax: from a plain input a channels-last output would only cost a conversion).
template <typename Plan>
class LayoutKernel final : public OnednnKernel {
 public:
  using Make = std::function<Plan(onednn::Provider&, const onednn::Layout& input,
                                  const onednn::Layout& output)>;
  LayoutKernel(const char* what, Make make, const Tensor* input, Tensor* output,
               bool output_follows_input = false)
      : what_(what),
        make_(std::move(make)),
        input_(input),
        output_(output),
        output_follows_input_(output_follows_input) {}

  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    plan_ = std::make_unique<Plan>(make_(provider, session_layout(channels_last, input_),
                                         session_layout(channels_last, output_)));
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

  Error run(KernelRuntimeContext&) override {
    return guarded(what_, [&] {
      plan_->run(input_->const_data_ptr<float>(), output_->mutable_data_ptr<float>());
    });
  }

 private:
  const char* what_;
  Make make_;
  const Tensor* input_;
  Tensor* output_;
  bool output_follows_input_;
  std::unique_ptr<Plan> plan_;
};

std::unique_ptr<OnednnKernel> max_pool_kernel(onednn::PoolParams params, const Tensor* input,
                                              Tensor* output) {
  return std::make_unique<LayoutKernel<onednn::PoolPlan>>(
      "max pooling",
      [params](onednn::Provider& provider, const onednn::Layout& in, const onednn::Layout& out) {
        return provider.prepare_max_pool(params, in, out);
      },
      input, output);
}

// Average pooling (avg_pool2d, an adaptive pooling whose windows tile the input).
std::unique_ptr<OnednnKernel> avg_pool_kernel(onednn::PoolParams params, bool count_include_pad,
                                              const Tensor* input, Tensor* output) {
  return std::make_unique<LayoutKernel<onednn::PoolPlan>>(
      "average pooling",
      [params, count_include_pad](onednn::Provider& provider, const onednn::Layout& in,
                                  const onednn::Layout& out) {
        return provider.prepare_avg_pool(params, count_include_pad, in, out);
      },
      input, output);
}

// Nearest / bilinear resampling (align_corners=False).
std::unique_ptr<OnednnKernel> resample_kernel(bool linear, const Tensor* input, Tensor* output) {
  return std::make_unique<LayoutKernel<onednn::ResamplePlan>>(
      "resampling",
      [linear](onednn::Provider& provider, const onednn::Layout& in, const onednn::Layout& out) {
        return provider.prepare_resampling(linear, in, out);
      },
      input, output);
}

// Mean over the spatial dims (global average pooling) of an activation that may be channels-last;
// writes plain (for a 1x1 spatial output the same bytes as channels-last).
class MeanKernel final : public OnednnKernel {
 public:
  MeanKernel(const Tensor* input, Tensor* output) : input_(input), output_(output) {}

  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    const std::vector<int64_t> in = dims_of(*input_);
    std::vector<int64_t> out(in.size(), 1);
    out[0] = in[0];
    out[1] = in[1];
    plan_ = std::make_unique<onednn::PoolPlan>(provider.prepare_global_average_pool(
        channels_last(impl_of(input_)) ? onednn::Layout::channels_last(in)
                                       : onednn::Layout::plain(in),
        onednn::Layout::plain(out)));
  }

  Error run(KernelRuntimeContext&) override {
    return guarded("mean", [&] {
      plan_->run(input_->const_data_ptr<float>(), output_->mutable_data_ptr<float>());
    });
  }

 private:
  const Tensor* input_;
  Tensor* output_;
  std::unique_ptr<onednn::PoolPlan> plan_;
};

// torch.cat: each input and the output plain or channels-last (inputs of rank 3-5 that the
// session keeps channels-last stay so: a UNet decoder's skip concatenation along channels).
class ConcatKernel final : public OnednnKernel {
 public:
  ConcatKernel(std::vector<const Tensor*> inputs, int64_t axis, Tensor* output)
      : inputs_(std::move(inputs)), axis_(axis), output_(output) {}

  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    std::vector<onednn::Layout> layouts;
    for (const Tensor* input : inputs_) layouts.push_back(session_layout(channels_last, input));
    plan_ = std::make_unique<onednn::ConcatPlan>(
        provider.prepare_concat(layouts, axis_, session_layout(channels_last, output_)));
    pointers_.assign(inputs_.size(), nullptr);
  }
  // Inputs below rank 3 cannot be channels-last.
  std::vector<const executorch::aten::TensorImpl*> plain_reads() const override {
    std::vector<const executorch::aten::TensorImpl*> plain;
    for (const Tensor* t : inputs_) {
      if (t->dim() < 3) plain.push_back(impl_of(t));
    }
    return plain;
  }
  const executorch::aten::TensorImpl* chainable_output() const override {
    return output_->dim() >= 3 && output_->dim() <= 5 ? impl_of(output_) : nullptr;
  }
  // Channels-last only when an input is (else plain inputs would be converted one by one).
  const executorch::aten::TensorImpl* chainable_output_after(
      const Chained& chained) const override {
    for (const Tensor* t : inputs_) {
      if (chained.count(impl_of(t)) > 0) return chainable_output();
    }
    return nullptr;
  }
  size_t pieces() const override { return plan_ ? plan_->pieces() : 1; }

  Error run(KernelRuntimeContext&) override {
    return guarded("concatenation", [&] {
      for (size_t i = 0; i < inputs_.size(); ++i) {
        pointers_[i] = inputs_[i]->const_data_ptr<float>();
      }
      plan_->run(pointers_, output_->mutable_data_ptr<float>());
    });
  }

 private:
  std::vector<const Tensor*> inputs_;  // the graph's list storage: alive as long as the graph
  int64_t axis_;
  Tensor* output_;
  std::unique_ptr<onednn::ConcatPlan> plan_;
  std::vector<const float*> pointers_;
};

// a (op) b with broadcasting (add/sub with alpha 1, mul, div): reads an operand of the
// output's rank channels-last when the session keeps it so (a convolution's output times an
// (N, C, 1, 1) gate stays channels-last) and writes channels-last when its output is kept so.
class BinaryKernel final : public OnednnKernel {
 public:
  BinaryKernel(onednn::BinaryOp op, const Tensor* a, const Tensor* b, Tensor* output)
      : op_(op), a_(a), b_(b), output_(output) {}

  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    const std::vector<int64_t> out = dims_of(*output_);
    auto layout = [&](const Tensor* t) {
      std::vector<int64_t> dims = dims_of(*t);
      if (dims.size() == out.size() && channels_last(impl_of(t))) {
        return onednn::Layout::channels_last(dims);
      }
      dims.insert(dims.begin(), out.size() - dims.size(), 1);  // numpy: leading 1s
      return onednn::Layout::plain(dims);
    };
    plan_ = std::make_unique<onednn::BinaryPlan>(
        provider.prepare_binary(op_, layout(a_), layout(b_), layout(output_)));
  }
  // Operands of another rank than the output (or below 3) are read plain.
  std::vector<const executorch::aten::TensorImpl*> plain_reads() const override {
    std::vector<const executorch::aten::TensorImpl*> plain;
    for (const Tensor* t : {a_, b_}) {
      if (t->dim() != output_->dim() || t->dim() < 3) plain.push_back(impl_of(t));
    }
    return plain;
  }
  const executorch::aten::TensorImpl* chainable_output() const override {
    return output_->dim() >= 3 && output_->dim() <= 5 ? impl_of(output_) : nullptr;
  }
  // Channels-last only when an output-sized operand is: from plain operands (SiLU's x *
  // sigmoid(x) after a reference sigmoid) a channels-last output would cost converting both.
  const executorch::aten::TensorImpl* chainable_output_after(
      const Chained& chained) const override {
    for (const Tensor* t : {a_, b_}) {
      if (t->dim() == output_->dim() && t->numel() == output_->numel() &&
          chained.count(impl_of(t)) > 0) {
        return chainable_output();
      }
    }
    return nullptr;
  }
  size_t pieces() const override { return plan_ ? plan_->pieces() : 1; }
  std::string implementation() const override { return plan_ ? plan_->implementation() : ""; }

  Error run(KernelRuntimeContext&) override {
    return guarded("binary", [&] {
      plan_->run(a_->const_data_ptr<float>(), b_->const_data_ptr<float>(),
                 output_->mutable_data_ptr<float>());
    });
  }

 private:
  onednn::BinaryOp op_;
  const Tensor* a_;
  const Tensor* b_;
  Tensor* output_;
  std::unique_ptr<onednn::BinaryPlan> plan_;
};

// An inverted residual block (1x1 expand, depthwise, 1x1 project, optionally + its input) as one
// kernel: see onednn::BlockParams. It reads and writes channels-last; where the graph keeps its
// input or output plain (a graph input, a tensor a reference op reads) it converts through its
// own buffer.
class BlockKernel final : public OnednnKernel {
 public:
  BlockKernel(onednn::BlockParams params, const onednn::BlockWeights& weights,
              onednn::BlockPostOps post, const Tensor* input, Tensor* output)
      : params_(std::move(params)), weights_(weights), post_(std::move(post)), input_(input),
        output_(output) {}

  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    plan_ = std::make_unique<onednn::BlockPlan>(provider.prepare_block(params_, weights_, post_));
    const std::vector<int64_t> in_dims = dims_of(*input_);
    const std::vector<int64_t> out_dims = plan_->output_dims();
    input_fix_.reset();
    output_fix_.reset();
    // Fresh vectors: clear() would keep the capacity of the bind-time (all plain) prepare.
    staged_input_ = std::vector<float>();
    staged_output_ = std::vector<float>();
    if (!channels_last(impl_of(input_))) {
      input_fix_ = std::make_unique<onednn::ReorderPlan>(provider.prepare_reorder(
          onednn::Layout::plain(in_dims), onednn::Layout::channels_last(in_dims)));
      staged_input_.resize(static_cast<size_t>(input_->numel()));
    }
    if (!channels_last(impl_of(output_))) {
      output_fix_ = std::make_unique<onednn::ReorderPlan>(provider.prepare_reorder(
          onednn::Layout::channels_last(out_dims), onednn::Layout::plain(out_dims)));
      staged_output_.resize(static_cast<size_t>(output_->numel()));
    }
  }
  const executorch::aten::TensorImpl* chainable_output() const override {
    return impl_of(output_);
  }
  size_t pieces() const override { return plan_ ? plan_->pieces() : 1; }
  size_t staging_bytes() const override {
    return (staged_input_.size() + staged_output_.size()) * sizeof(float);
  }

  Error run(KernelRuntimeContext&) override {
    return guarded("block", [&] {
      const float* in = input_->const_data_ptr<float>();
      if (input_fix_) {
        input_fix_->run(in, staged_input_.data());
        in = staged_input_.data();
      }
      float* out = output_fix_ ? staged_output_.data() : output_->mutable_data_ptr<float>();
      plan_->run(in, out);
      if (output_fix_) output_fix_->run(out, output_->mutable_data_ptr<float>());
    });
  }

 private:
  onednn::BlockParams params_;
  onednn::BlockWeights weights_;  // the graph's constants: alive as long as the graph
  onednn::BlockPostOps post_;
  const Tensor* input_;
  Tensor* output_;
  std::unique_ptr<onednn::BlockPlan> plan_;
  std::unique_ptr<onednn::ReorderPlan> input_fix_;
  std::unique_ptr<onednn::ReorderPlan> output_fix_;
  std::vector<float> staged_input_;
  std::vector<float> staged_output_;
};

// An elementwise activation on its input's layout (channels-last when its producer is a oneDNN
// convolution that keeps it so): see onednn::EltwisePlan.
class EltwiseKernel final : public OnednnKernel {
 public:
  EltwiseKernel(onednn::Activation activation, const Tensor* input, Tensor* output)
      : activation_(activation), input_(input), output_(output) {}

  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    plan_ = std::make_unique<onednn::EltwisePlan>(
        provider.prepare_eltwise(activation_, session_layout(channels_last, input_),
                                 session_layout(channels_last, output_)));
  }
  // Channels-last output only when the input is (rank 3 to 5): chaining an activation of a plain
  // producer would add a conversion, not save one (and would start chains in transformers,
  // which have no convolution to feed).
  const executorch::aten::TensorImpl* chainable_output() const override {
    return input_->dim() >= 3 && input_->dim() <= 5 ? impl_of(output_) : nullptr;
  }
  const executorch::aten::TensorImpl* chainable_output_after(
      const Chained& chained) const override {
    return chained.count(impl_of(input_)) > 0 ? chainable_output() : nullptr;
  }
  size_t pieces() const override { return plan_ ? plan_->pieces() : 1; }

  Error run(KernelRuntimeContext&) override {
    return guarded("activation", [&] {
      plan_->run(input_->const_data_ptr<float>(), output_->mutable_data_ptr<float>());
    });
  }

 private:
  onednn::Activation activation_;
  const Tensor* input_;
  Tensor* output_;
  std::unique_ptr<onednn::EltwisePlan> plan_;
};

// native_layer_norm on oneDNN's layer normalization; reads everything plain.
class LayerNormKernel final : public OnednnKernel {
 public:
  LayerNormKernel(onednn::LayerNormParams params, const Tensor* input, const Tensor* weight,
                  const Tensor* bias, Tensor* output, Tensor* mean, Tensor* rstd)
      : params_(params), input_(input), weight_(weight), bias_(bias), output_(output),
        mean_(mean), rstd_(rstd) {}

  void prepare(onednn::Provider& provider, const InChannelsLast&) override {
    plan_ = std::make_unique<onednn::LayerNormPlan>(provider.prepare_layer_norm(params_));
  }
  std::vector<const executorch::aten::TensorImpl*> plain_reads() const override {
    return {impl_of(input_), impl_of(weight_), impl_of(bias_)};
  }
  std::string implementation() const override { return plan_ ? plan_->implementation() : ""; }

  Error run(KernelRuntimeContext&) override {
    return guarded("layer_norm", [&] {
      plan_->run(input_->const_data_ptr<float>(),
                 weight_ ? weight_->const_data_ptr<float>() : nullptr,
                 bias_ ? bias_->const_data_ptr<float>() : nullptr,
                 output_->mutable_data_ptr<float>(), mean_->mutable_data_ptr<float>(),
                 rstd_->mutable_data_ptr<float>());
    });
  }

 private:
  onednn::LayerNormParams params_;
  const Tensor* input_;
  const Tensor* weight_;
  const Tensor* bias_;
  Tensor* output_;
  Tensor* mean_;
  Tensor* rstd_;
  std::unique_ptr<onednn::LayerNormPlan> plan_;
};

// permute_copy on our own copy loops (PermutePlan): reads its input in whatever layout the
// session keeps it (a channels-last producer's NLC output permuted to torch's NLC is one
// contiguous copy), writes plain.
class PermuteKernel final : public OnednnKernel {
 public:
  PermuteKernel(std::vector<int64_t> perm, const Tensor* input, Tensor* output)
      : perm_(std::move(perm)), input_(input), output_(output) {}

  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    plan_ = std::make_unique<onednn::PermutePlan>(provider.prepare_permute(
        perm_, session_layout(channels_last, input_), session_layout(channels_last, output_)));
  }
  // Its output may stay channels-last for convolutions that read it: the text CNN's NLC
  // embedding transposed to NCL is then a contiguous copy, not a transpose (rank 3-5: the
  // layouts oneDNN's convolutions have).
  const executorch::aten::TensorImpl* chainable_output() const override {
    return output_->dim() >= 3 && output_->dim() <= 5 ? impl_of(output_) : nullptr;
  }
  // Only that case (channels-last to channels-first: (0, r-1, 1, ..., r-2)) or a channels-last
  // input: any other permute's output held channels-last is a layout no kernel asked for (the
  // attention heads' (0, 2, 1, 3) in a transformer).
  const executorch::aten::TensorImpl* chainable_output_after(
      const Chained& chained) const override {
    return to_channels_first() || chained.count(impl_of(input_)) > 0 ? chainable_output()
                                                                     : nullptr;
  }
  size_t pieces() const override { return plan_ ? plan_->pieces() : 1; }
  std::string implementation() const override { return plan_ ? plan_->implementation() : ""; }

  Error run(KernelRuntimeContext&) override {
    return guarded("permute", [&] {
      plan_->run(input_->const_data_ptr<float>(), output_->mutable_data_ptr<float>());
    });
  }

 private:
  bool to_channels_first() const {
    const size_t rank = perm_.size();
    if (rank < 3 || perm_[0] != 0 || perm_[1] != static_cast<int64_t>(rank) - 1) return false;
    for (size_t d = 2; d < rank; ++d) {
      if (perm_[d] != static_cast<int64_t>(d) - 1) return false;
    }
    return true;
  }

  std::vector<int64_t> perm_;
  const Tensor* input_;
  Tensor* output_;
  std::unique_ptr<onednn::PermutePlan> plan_;
};

// One per delegate instance. Binding prepares each kernel with plain activations (so a kernel
// oneDNN cannot prepare is declined while the runtime can still fall back); finalize, knowing who
// reads what, prepares them all again on a fresh Provider with activations that only its
// convolutions read kept channels-last (oneDNN's fp32 layout here: no conversion between them).
class OnednnSession final : public ProviderSession {
 public:
  // `base`: the session of the graph this one is a shape plan of, whose prepared weights it
  // shares (weight_cache.h), or null.
  explicit OnednnSession(const OnednnSession* base)
      : weights_(base != nullptr                   ? base->weights_
                 : onednn::weight_cache_enabled() ? std::make_shared<onednn::WeightCache>()
                                                  : nullptr),
        provider_(std::make_unique<onednn::Provider>(options())) {}

  size_t held_bytes() const override {
    size_t kernels = 0;
    for (const OnednnKernel* kernel : kernels_) kernels += kernel->staging_bytes();
    return provider_->weights_bytes() + provider_->scratchpad_bytes() +
           provider_->staging_bytes() + kernels;
  }
  std::string summary() const override {
    return "Optimized(oneDNN): " + std::to_string(kernels_.size()) + " kernels, " +
           std::to_string(chained_) + " activations kept channels-last, " +
           std::to_string(blocks_) + " inverted residual blocks fused, " +
           std::to_string(provider_->num_threads()) + " threads (" +
           (provider_->work_sharing() ? "work sharing, " + std::to_string(split_count()) +
                                            " ops split"
                                      : provider_->num_threads() == 1 ? std::string("no pool")
                                                                      : std::string("OpenMP")) +
           "), isa " + provider_->isa() + "; our own kernels: " +
           std::to_string(count_implementation("row_gemm")) + " row_gemm, " +
           std::to_string(count_implementation("channel_binary")) + " channel_binary, " +
           std::to_string(count_implementation("flat_binary")) + " flat_binary, " +
           std::to_string(count_implementation("row_binary")) + " row_binary, " +
           std::to_string(count_implementation("permute")) + " permute (" +
           std::to_string(count_implementation("permute:runs")) + " as contiguous runs), " +
           std::to_string(count_implementation("softmax:avx512")) + " softmax";
  }
  onednn::Provider& provider() { return *provider_; }
  // A kernel bind prepared on provider() with plain activations.
  void add(OnednnKernel* kernel) { kernels_.push_back(kernel); }
  // A kernel bind only checked: finalize prepares it (the int8 ops).
  void add_unprepared(OnednnKernel* kernel) {
    kernels_.push_back(kernel);
    unprepared_ = true;
  }
  void count_block() { ++blocks_; }
  // Kernels whose plan runs on the implementation named `prefix` (our own kernels).
  size_t count_implementation(const std::string& prefix) const {
    return static_cast<size_t>(
        std::count_if(kernels_.begin(), kernels_.end(), [&](const OnednnKernel* k) {
          return k->implementation().rfind(prefix, 0) == 0;
        }));
  }
  // Kernels whose plan is split into pieces for the work-sharing pool.
  size_t split_count() const {
    return static_cast<size_t>(std::count_if(
        kernels_.begin(), kernels_.end(), [](const OnednnKernel* k) { return k->pieces() > 1; }));
  }

  Error finalize(const std::function<bool(const executorch::aten::TensorImpl*)>& read_outside)
      override {
    std::unordered_set<const executorch::aten::TensorImpl*> plain;
    for (OnednnKernel* kernel : kernels_) {
      for (const auto* tensor : kernel->plain_reads()) plain.insert(tensor);
    }
    std::unordered_set<const executorch::aten::TensorImpl*> chained;
    if (chaining_enabled()) {
      for (OnednnKernel* kernel : kernels_) {
        const auto* out = kernel->chainable_output_after(chained);
        if (out != nullptr && !read_outside(out) && plain.count(out) == 0) chained.insert(out);
      }
    }
    // Nothing kept channels-last and every kernel prepared at bind: the bind-time plans are
    // already the plain-layout ones, and preparing them again would double the compile (most
    // of a new size's re-plan in a transformer, which has no convolutions to chain).
    if (chained.empty() && !unprepared_) {
      chained_ = 0;
      return Error::Ok;
    }
    auto attempt = [&](const OnednnKernel::InChannelsLast& channels_last) {
      auto fresh = std::make_unique<onednn::Provider>(options());
      for (OnednnKernel* kernel : kernels_) kernel->prepare(*fresh, channels_last);
      provider_ = std::move(fresh);
    };
    try {
      attempt([&](const executorch::aten::TensorImpl* t) { return chained.count(t) > 0; });
      chained_ = chained.size();
      return Error::Ok;
    } catch (const std::exception& e) {
      log_line(LogLevel::kInfo, "oneDNN layout chaining failed (%s); plain layouts", e.what());
    }
    try {
      attempt([](const executorch::aten::TensorImpl*) { return false; });
      chained_ = 0;
      return Error::Ok;
    } catch (const std::exception& e) {
      log_line(LogLevel::kError, "oneDNN kernels could not be prepared again: %s", e.what());
      return Error::Internal;
    }
  }

 private:
  onednn::ProviderOptions options() const {
    onednn::ProviderOptions options;
    options.num_threads = 0;  // the provider's default: ET_CPU_ONEDNN_THREADS, capped at the CPUs
    options.work_sharing = work_sharing_enabled();
    options.weight_cache = weights_;
    return options;
  }
  // ET_CPU_ONEDNN_CHAIN=0 keeps every activation plain (for measuring what chaining saves).
  static bool chaining_enabled() {
    const char* env = std::getenv("ET_CPU_ONEDNN_CHAIN");
    return env == nullptr || std::string(env) != "0";
  }

  std::shared_ptr<onednn::WeightCache> weights_;  // shared with the graph's shape plans
  std::unique_ptr<onednn::Provider> provider_;
  std::vector<OnednnKernel*> kernels_;  // owned by the graph, which outlives the session's use
  size_t chained_ = 0;
  size_t blocks_ = 0;
  bool unprepared_ = false;  // some kernel waits for finalize to prepare it
};

// An int8 op (quantized_kernels.cc) taking part in the layout chaining: bind only checks it,
// finalize binds it with its int8 input / output NHWC where only layout-aware int8 kernels touch
// them, so the reorders between oneDNN's NHWC int8 kernels and NCHW buffers go away.
class QuantizedChainKernel final : public OnednnKernel {
 public:
  explicit QuantizedChainKernel(const OpBinding& op)
      : args_(op.args.begin(), op.args.end()), kernel_name_(op.kernel), op_(op) {
    op_.args = Span<EValue*>(args_.data(), args_.size());
    op_.kernel = kernel_name_.c_str();
    op_.decline_reason = nullptr;
    op_.fused_steps = nullptr;
    op_.session = nullptr;
    input_ = &args_[0]->toTensor();
    output_ = &args_[args_.size() - 2]->toTensor();
    const int second = quantized_second_input(kernel_name_);
    if (second >= 0) second_ = &args_[static_cast<size_t>(second)]->toTensor();
  }
  Error run(KernelRuntimeContext& context) override {
    if (!kernel_) {  // finalize did not prepare it (never expected)
      context.fail(Error::Internal);
      return Error::Internal;
    }
    return kernel_->run(context);
  }
  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    std::string reason;
    std::unique_ptr<BoundKernel> fresh;
    if (bind_quantized(op_, &fresh, &reason, channels_last(impl_of(input_)),
                       channels_last(impl_of(output_)), provider.work_pool(),
                       second_ != nullptr && channels_last(impl_of(second_))) != Error::Ok) {
      throw std::runtime_error("int8 kernel: " + reason);
    }
    kernel_ = std::move(fresh);
  }
  std::vector<const executorch::aten::TensorImpl*> plain_reads() const override {
    if (quantized_output_chainable(kernel_name_) || quantized_layout_follows_input(kernel_name_)) {
      return {};
    }
    return {impl_of(input_)};  // the linear reads its 2-D input plain
  }
  const executorch::aten::TensorImpl* chainable_output() const override {
    return quantized_output_chainable(kernel_name_) ? impl_of(output_) : nullptr;
  }
  // The int8 max pool's / add's output may be channels-last when all its inputs are.
  const executorch::aten::TensorImpl* chainable_output_after(const Chained& chained) const override {
    if (quantized_layout_follows_input(kernel_name_)) {
      const bool inputs = chained.count(impl_of(input_)) > 0 &&
                          (second_ == nullptr || chained.count(impl_of(second_)) > 0);
      return inputs ? impl_of(output_) : nullptr;
    }
    return chainable_output();
  }

 private:
  std::vector<EValue*> args_;
  std::string kernel_name_;
  OpBinding op_;
  std::unique_ptr<BoundKernel> kernel_;
  const Tensor* input_ = nullptr;
  const Tensor* second_ = nullptr;  // the add's second operand
  const Tensor* output_ = nullptr;
};

bool parse_conv(Span<EValue*> args, const bool* constant, ConvRecipe* recipe,
                const Tensor** input_out, Tensor** output_out, Decline* decline);

// ET_CPU_ONEDNN_BLOCKS=0 runs inverted residual blocks as three convolutions (for measuring).
bool blocks_enabled() {
  const char* env = std::getenv("ET_CPU_ONEDNN_BLOCKS");
  return env == nullptr || std::string(env) != "0";
}

// ET_CPU_ONEDNN_SE_BLOCKS=0 leaves an expand + depthwise pair whose chain ends there (the
// squeeze-excite blocks of MobileNetV3 and EfficientNet) as two convolutions (for measuring).
bool se_blocks_enabled() { return onednn::kernel_switched_on("ET_CPU_ONEDNN_SE_BLOCKS"); }

bool is_pointwise(const onednn::ConvParams& p) {
  return p.input_size.size() == 2 && p.groups == 1 && p.kernel_size == std::vector<int64_t>{1, 1} &&
         p.stride == std::vector<int64_t>{1, 1} && p.padding == std::vector<int64_t>{0, 0};
}

// Elementwise steps from `*index` on as post-ops, up to the next convolution or the end; false
// on an add when `allow_add` is false (or a second add).
bool block_post_ops(const OpBinding& op, size_t* index, bool allow_add, const Tensor* block_input,
                    onednn::PostOps* post) {
  for (; *index < op.fusable.size(); ++*index) {
    const FusableStep& step = op.fusable[*index];
    if (step.kind == FusableStep::Kind::kConv) return true;
    if (step.kind == FusableStep::Kind::kAdd) {
      // Only the block's own input, and nothing after it (the plan adds it last).
      if (!allow_add || step.residual == nullptr || !step.residual->isTensor() ||
          impl_of(&step.residual->toTensor()) != impl_of(block_input)) {
        return false;
      }
      post->push_back(onednn::PostOp::add());
      ++*index;
      return true;
    }
    const Tensor* no_residual = nullptr;  // adds are handled above
    if (!append_post_op(step, post, &no_residual)) return false;
  }
  return true;
}

// The convolution offered as step `*index` (then the next), or false.
bool conv_step(const OpBinding& op, size_t* index, ConvRecipe* recipe) {
  if (*index >= op.fusable.size() || op.fusable[*index].kind != FusableStep::Kind::kConv) {
    return false;
  }
  const FusableStep& step = op.fusable[(*index)++];
  const Tensor* input = nullptr;
  Tensor* output = nullptr;
  Decline ignored;
  return parse_conv(step.args, step.arg_is_constant, recipe, &input, &output, &ignored);
}

// Takes this convolution and the steps after it as one inverted residual block when they are
// one: pointwise [eltwise...] depthwise [eltwise...] pointwise [add of the block's input], the
// same without the expand (this convolution is the depthwise), or without the project when the
// offered steps end after the depthwise's activations (squeeze-excite: the depthwise output
// feeds the pool and the gate multiply). False (nothing bound, nothing changed) otherwise; the
// caller then binds the convolution alone.
bool bind_block(const OpBinding& op, const ConvRecipe& head, const Tensor* input,
                OnednnSession& session, std::unique_ptr<BoundKernel>* out, size_t* fused) {
  if (!blocks_enabled() || op.fusable.empty()) return false;
  onednn::BlockPostOps post;
  size_t index = 0;
  const bool has_expand = is_pointwise(head.params);
  ConvRecipe depthwise = head;
  if (has_expand && (head.params.dilation != std::vector<int64_t>{1, 1} ||
                     !block_post_ops(op, &index, false, input, &post.expand) ||
                     !conv_step(op, &index, &depthwise))) {
    return false;
  }
  const onednn::ConvParams& d = depthwise.params;
  const int64_t hidden = has_expand ? head.params.out_channels : head.params.in_channels;
  if (d.input_size.size() != 2 || d.groups != hidden || d.in_channels != hidden ||
      d.out_channels != hidden || d.kernel_size[0] != d.kernel_size[1] ||
      d.stride[0] != d.stride[1] || d.padding[0] != d.padding[1] || d.dilation[0] != 1 ||
      d.dilation[1] != 1) {
    return false;
  }
  if (!block_post_ops(op, &index, false, input, &post.depthwise)) return false;
  ConvRecipe project;
  const bool has_project = index < op.fusable.size();
  if (!has_project && (!has_expand || !se_blocks_enabled())) return false;
  if (has_project &&
      (!conv_step(op, &index, &project) || !is_pointwise(project.params) ||
       project.params.in_channels != hidden ||
       project.params.dilation != std::vector<int64_t>{1, 1} ||
       !block_post_ops(op, &index, true, input, &post.project))) {
    return false;
  }
  onednn::BlockParams params;
  params.batch = head.params.batch;
  params.in_channels = head.params.in_channels;
  params.expand = has_expand;
  params.hidden_channels = hidden;
  params.project = has_project;
  params.out_channels = has_project ? project.params.out_channels : hidden;
  params.input_size = head.params.input_size;
  params.kernel = d.kernel_size[0];
  params.stride = d.stride[0];
  params.padding = d.padding[0];
  if (!onednn::supports_block(params, post).ok) return false;
  const onednn::BlockWeights weights{has_expand ? head.weight : nullptr,
                                     has_expand ? head.bias : nullptr,
                                     depthwise.weight,
                                     depthwise.bias,
                                     has_project ? project.weight : nullptr,
                                     has_project ? project.bias : nullptr};
  auto kernel = std::make_unique<BlockKernel>(params, weights, post, input,
                                              &op.fusable[index - 1].output->toTensor());
  try {
    kernel->prepare(session.provider(), [](const executorch::aten::TensorImpl*) { return false; });
  } catch (const std::exception& e) {
    log_line(LogLevel::kInfo, "oneDNN block at %s not fused: %s", op.op_name, e.what());
    return false;
  }
  session.add(kernel.get());
  session.count_block();
  *out = std::move(kernel);
  *fused = index;
  return true;
}

// aten::convolution.out(input, weight, bias?, stride, padding, dilation, transposed,
// output_padding, groups, *, out), from `args` (an op's or a fused step's) with `constant`
// flags parallel to them. False with the reason in `decline` when oneDNN cannot take it.
bool parse_conv(Span<EValue*> args, const bool* constant, ConvRecipe* recipe,
                const Tensor** input_out, Tensor** output_out, Decline* decline) {
  const Tensor* input = tensor_arg(args, 0);
  const Tensor* weight = tensor_arg(args, 1);
  const Tensor* bias = tensor_arg(args, 2);
  if (args.size() < 10 || !is_f32(input) || !is_f32(weight) || !is_f32(tensor_arg(args, 9)) ||
      (bias != nullptr && !is_f32(bias))) {
    decline->reason = "convolution: only float32 input, weight, bias and output";
    return false;
  }
  if (constant == nullptr || !constant[1] || (bias != nullptr && !constant[2])) {
    decline->reason = "convolution: weight and bias must be constants (reordered once at init)";
    return false;
  }
  if (!args[6]->isBool() || args[6]->toBool()) {
    decline->reason = "convolution: transposed convolution is not supported by the provider";
    return false;
  }
  const ssize_t rank = input->dim();
  if (rank < 3 || rank > 5 || weight->dim() != rank) {
    decline->reason = "convolution: input must be 3D, 4D or 5D (conv1d/2d/3d)";
    return false;
  }
  const size_t spatial = static_cast<size_t>(rank - 2);
  onednn::ConvParams params;
  params.batch = input->size(0);
  params.in_channels = input->size(1);
  params.out_channels = weight->size(0);
  if (!args[8]->isInt()) {
    decline->reason = "convolution: groups is not an int";
    return false;
  }
  params.groups = args[8]->toInt();
  // oneDNN lays the weights out from these numbers: they must be the weight tensor's own
  // (issue 22: a damaged input shape made the weight reorder read far past the weights).
  if (params.groups < 1 || params.in_channels % params.groups != 0 ||
      params.out_channels % params.groups != 0 ||
      weight->size(1) * params.groups != params.in_channels) {
    decline->reason = "convolution: weight channels do not match the input's and groups";
    return false;
  }
  if (bias != nullptr && (bias->dim() != 1 || bias->size(0) != params.out_channels)) {
    decline->reason = "convolution: bias is not [out_channels]";
    return false;
  }
  for (size_t d = 0; d < spatial; ++d) {
    params.input_size.push_back(input->size(static_cast<ssize_t>(d + 2)));
    params.kernel_size.push_back(weight->size(static_cast<ssize_t>(d + 2)));
  }
  if (!int_list(args[3], spatial, &params.stride) ||
      !int_list(args[4], spatial, &params.padding) ||
      !int_list(args[5], spatial, &params.dilation)) {
    decline->reason = "convolution: stride, padding and dilation must have 1 or " +
                      std::to_string(spatial) + " entries";
    return false;
  }
  // conv_output_size divides by the strides (issue 22, pte_fuzz cnn:0:9440: a stride of 0);
  // Reference's argument checks then refuse the op with a message naming the argument.
  for (size_t d = 0; d < spatial; ++d) {
    if (params.stride[d] < 1 || params.dilation[d] < 1 || params.padding[d] < 0) {
      decline->reason = "convolution: stride and dilation must be >= 1, padding >= 0";
      return false;
    }
  }
  // The output shape the graph planned must be the one oneDNN computes.
  const Tensor* planned = tensor_arg(args, 9);
  std::vector<int64_t> expected{params.batch, params.out_channels};
  for (int64_t size : onednn::conv_output_size(params)) expected.push_back(size);
  if (dims_of(*planned) != expected) {
    decline->reason = "convolution: output shape differs from the convolution's";
    return false;
  }
  onednn::Support base = onednn::supports_conv(params, {});
  if (!base.ok) {
    decline->reason = base.reason;
    return false;
  }
  recipe->params = std::move(params);
  recipe->weight = weight->const_data_ptr<float>();
  recipe->bias = bias ? bias->const_data_ptr<float>() : nullptr;
  *input_out = input;
  *output_out = &args[9]->toTensor();
  return true;
}

// ET_CPU_ONEDNN_DECONV=0 leaves transposed convolutions to the Reference provider (for measuring).
bool deconv_enabled() {
  const char* env = std::getenv("ET_CPU_ONEDNN_DECONV");
  return env == nullptr || std::string(env) != "0";
}

// Prepares `kernel` with plain activations (finalize may prepare it again with chained ones),
// adds it to the session and hands it to the runtime.
Error bind_prepared(std::unique_ptr<OnednnKernel> kernel, OnednnSession& session,
                    std::unique_ptr<BoundKernel>* out) {
  kernel->prepare(session.provider(), [](const executorch::aten::TensorImpl*) { return false; });
  session.add(kernel.get());
  *out = std::move(kernel);
  return Error::Ok;
}

// aten::convolution.out with transposed=True: oneDNN's deconvolution, with the offered ReLU /
// clamp / residual-add steps as post-ops.
Error bind_deconv(const OpBinding& op, OnednnSession& session, std::unique_ptr<BoundKernel>* out,
                  Decline* decline, size_t* fused) {
  Span<EValue*> args = op.args;
  const Tensor* input = tensor_arg(args, 0);
  const Tensor* weight = tensor_arg(args, 1);
  const Tensor* bias = tensor_arg(args, 2);
  if (args.size() < 10 || !is_f32(input) || !is_f32(weight) || !is_f32(tensor_arg(args, 9)) ||
      (bias != nullptr && !is_f32(bias))) {
    decline->reason = "transposed convolution: only float32 input, weight, bias and output";
    return Error::NotSupported;
  }
  if (!is_constant(op, 1) || (bias != nullptr && !is_constant(op, 2))) {
    decline->reason =
        "transposed convolution: weight and bias must be constants (reordered once at init)";
    return Error::NotSupported;
  }
  const ssize_t rank = input->dim();
  if (rank < 3 || rank > 5 || weight->dim() != rank) {
    decline->reason = "transposed convolution: input must be 3D, 4D or 5D";
    return Error::NotSupported;
  }
  if (!args[8]->isInt()) {
    decline->reason = "transposed convolution: groups is not an int";
    return Error::NotSupported;
  }
  const size_t spatial = static_cast<size_t>(rank - 2);
  DeconvRecipe recipe;
  onednn::DeconvParams& params = recipe.params;
  params.batch = input->size(0);
  params.in_channels = input->size(1);
  params.groups = args[8]->toInt();
  // Checked before the product below: a hostile groups overflowed it or divided by zero later.
  if (params.in_channels < 1 || params.groups < 1 || params.in_channels % params.groups != 0) {
    decline->reason = "transposed convolution: groups does not divide the input channels";
    return Error::NotSupported;
  }
  // torch's transposed weight: [C_in, C_out / groups, *kernel].
  params.out_channels = weight->size(1) * params.groups;
  if (weight->size(0) != params.in_channels) {
    decline->reason = "transposed convolution: weight's first dim differs from input channels";
    return Error::NotSupported;
  }
  if (bias != nullptr && (bias->dim() != 1 || bias->size(0) != params.out_channels)) {
    decline->reason = "transposed convolution: bias is not a vector of the output channels";
    return Error::NotSupported;
  }
  for (size_t d = 0; d < spatial; ++d) {
    params.input_size.push_back(input->size(static_cast<ssize_t>(d + 2)));
    params.kernel_size.push_back(weight->size(static_cast<ssize_t>(d + 2)));
  }
  if (!int_list(args[3], spatial, &params.stride) ||
      !int_list(args[4], spatial, &params.padding) ||
      !int_list(args[5], spatial, &params.dilation) ||
      !int_list(args[7], spatial, &params.output_padding)) {
    decline->reason = "transposed convolution: stride, padding, dilation and output_padding "
                      "must have 1 or " + std::to_string(spatial) + " entries";
    return Error::NotSupported;
  }
  const onednn::Support base = onednn::supports_deconv(params, {});
  if (!base.ok) {
    decline->reason = base.reason;
    return Error::NotSupported;
  }
  const Tensor* planned = tensor_arg(args, 9);
  std::vector<int64_t> expected{params.batch, params.out_channels};
  for (int64_t size : onednn::deconv_output_size(params)) expected.push_back(size);
  if (dims_of(*planned) != expected) {
    decline->reason = "transposed convolution: output shape differs from the op's";
    return Error::NotSupported;
  }
  recipe.weight = weight->const_data_ptr<float>();
  recipe.bias = bias ? bias->const_data_ptr<float>() : nullptr;
  const Tensor* residual = nullptr;
  *fused = longest_supported_prefix(
      op, [&](const onednn::PostOps& p) { return onednn::supports_deconv(params, p); },
      &recipe.post, &residual);
  auto kernel = std::make_unique<DeconvKernel>(std::move(recipe), input,
                                               final_output(op, 9, *fused), residual);
  return bind_prepared(std::move(kernel), session, out);
}

Error bind_conv(const OpBinding& op, OnednnSession& session, std::unique_ptr<BoundKernel>* out,
                Decline* decline, size_t* fused) {
  if (op.args.size() > 6 && op.args[6]->isBool() && op.args[6]->toBool()) {
    if (!deconv_enabled()) {
      decline->reason = "transposed convolution: off (ET_CPU_ONEDNN_DECONV=0)";
      return Error::NotSupported;
    }
    return bind_deconv(op, session, out, decline, fused);
  }
  ConvRecipe recipe;
  const Tensor* input = nullptr;
  Tensor* output = nullptr;
  if (!parse_conv(op.args, op.arg_is_constant, &recipe, &input, &output, decline)) {
    return Error::NotSupported;
  }
  if (bind_block(op, recipe, input, session, out, fused)) return Error::Ok;
  const Tensor* residual = nullptr;
  const onednn::ConvParams& params = recipe.params;
  *fused = longest_supported_prefix(
      op, [&](const onednn::PostOps& p) { return onednn::supports_conv(params, p); },
      &recipe.post, &residual);
  auto kernel = std::make_unique<ConvKernel>(std::move(recipe), input,
                                             final_output(op, 9, *fused), residual);
  return bind_prepared(std::move(kernel), session, out);
}

bool bias_is_vector(const Tensor* bias, int64_t n) {
  if (bias == nullptr) return true;
  if (bias->dim() == 1) return bias->size(0) == n;
  return bias->dim() == 2 && bias->size(0) == 1 && bias->size(1) == n;
}

// aten::linear.out(input, weight, bias?, *, out) and
// aten::addmm.out(self, mat1, mat2, *, beta, alpha, out) with a constant [K, N] mat2.
Error bind_linear(const OpBinding& op, bool is_addmm, OnednnSession& session,
                  std::unique_ptr<BoundKernel>* out, Decline* decline, size_t* fused) {
  const size_t input_index = is_addmm ? 1 : 0;
  const size_t weight_index = is_addmm ? 2 : 1;
  const size_t bias_index = is_addmm ? 0 : 2;
  const size_t out_index = is_addmm ? 5 : 3;
  const char* what = is_addmm ? "addmm" : "linear";
  if (op.args.size() <= out_index) {
    decline->reason = std::string(what) + ": unexpected argument count";
    return Error::NotSupported;
  }
  const Tensor* input = tensor_arg(op, input_index);
  const Tensor* weight = tensor_arg(op, weight_index);
  const Tensor* bias = tensor_arg(op, bias_index);
  const Tensor* output = tensor_arg(op, out_index);
  if (!is_f32(input) || !is_f32(weight) || !is_f32(output) || (bias && !is_f32(bias))) {
    decline->reason = std::string(what) + ": only float32 tensors";
    return Error::NotSupported;
  }
  if (!is_constant(op, weight_index) || (bias != nullptr && !is_constant(op, bias_index))) {
    decline->reason = std::string(what) + ": weight and bias must be constants";
    return Error::NotSupported;
  }
  if (is_addmm) {
    double beta = 0.0;
    double alpha = 0.0;
    if (!scalar_of(op.args[3], &beta) || !scalar_of(op.args[4], &alpha) || beta != 1.0 ||
        alpha != 1.0) {
      decline->reason = "addmm: beta and alpha must be 1";
      return Error::NotSupported;
    }
  }
  if (weight->dim() != 2 || input->dim() < 1 || (is_addmm && input->dim() != 2)) {
    decline->reason = std::string(what) + ": weight must be 2D" + (is_addmm ? ", mat1 2D" : "");
    return Error::NotSupported;
  }
  onednn::LinearParams params;
  params.weight_is_k_by_n = is_addmm;
  params.in_features = input->size(input->dim() - 1);
  params.out_features = is_addmm ? weight->size(1) : weight->size(0);
  if ((is_addmm ? weight->size(0) : weight->size(1)) != params.in_features ||
      !bias_is_vector(bias, params.out_features)) {
    decline->reason = std::string(what) + ": shapes are not [M, K] x weight + bias[N]";
    return Error::NotSupported;
  }
  params.rows = params.in_features > 0 ? input->numel() / params.in_features : 0;
  if (static_cast<int64_t>(output->numel()) != params.rows * params.out_features) {
    decline->reason = std::string(what) + ": output size differs from M x N";
    return Error::NotSupported;
  }
  onednn::Support base = onednn::supports_linear(params, {});
  if (!base.ok) {
    decline->reason = base.reason;
    return Error::NotSupported;
  }
  onednn::PostOps post;
  const Tensor* residual = nullptr;
  *fused = longest_supported_prefix(
      op, [&](const onednn::PostOps& p) { return onednn::supports_linear(params, p); }, &post,
      &residual);
  auto kernel = std::make_unique<LinearKernel>(
      params, weight->const_data_ptr<float>(), bias ? bias->const_data_ptr<float>() : nullptr,
      post, input, final_output(op, out_index, *fused), residual);
  kernel->prepare(session.provider(), {});
  session.add(kernel.get());
  *out = std::move(kernel);
  return Error::Ok;
}

// aten::mm.out(self, mat2, *, out) and aten::bmm.out(self, mat2, *, out).
Error bind_matmul(const OpBinding& op, bool batched, OnednnSession& session,
                  std::unique_ptr<BoundKernel>* out, Decline* decline, size_t* fused) {
  const Tensor* a = tensor_arg(op, 0);
  const Tensor* b = tensor_arg(op, 1);
  const Tensor* output = tensor_arg(op, 2);
  const ssize_t rank = batched ? 3 : 2;
  if (!is_f32(a) || !is_f32(b) || !is_f32(output) || a->dim() != rank || b->dim() != rank) {
    decline->reason = std::string(batched ? "bmm" : "mm") + ": only float32 operands of rank " +
                      std::to_string(rank);
    return Error::NotSupported;
  }
  onednn::MatmulParams params;
  params.batch = batched ? a->size(0) : 1;
  params.m = a->size(rank - 2);
  params.k = a->size(rank - 1);
  params.n = b->size(rank - 1);
  if (b->size(rank - 2) != params.k || (batched && b->size(0) != params.batch)) {
    decline->reason = std::string(batched ? "bmm" : "mm") + ": operand shapes do not match";
    return Error::NotSupported;
  }
  onednn::Support base = onednn::supports_matmul(params, {});
  if (!base.ok) {
    decline->reason = base.reason;
    return Error::NotSupported;
  }
  onednn::PostOps post;
  const Tensor* residual = nullptr;
  *fused = longest_supported_prefix(
      op, [&](const onednn::PostOps& p) { return onednn::supports_matmul(params, p); }, &post,
      &residual);
  auto kernel =
      std::make_unique<MatmulKernel>(params, post, a, b, final_output(op, 2, *fused), residual);
  kernel->prepare(session.provider(), {});
  session.add(kernel.get());
  *out = std::move(kernel);
  return Error::Ok;
}

// aten::max_pool2d_with_indices.out(self, kernel_size, stride, padding, dilation, ceil_mode, *,
// out, indices): taken when nobody reads the indices (inference graphs), which it leaves unwritten.
Error bind_max_pool(const OpBinding& op, OnednnSession& session,
                    std::unique_ptr<BoundKernel>* out, Decline* decline) {
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = op.args.size() > 7 && op.args[6]->isTensor() ? &op.args[6]->toTensor() : nullptr;
  if (!is_f32(input) || !is_f32(output) || input->dim() != 4) {
    decline->reason = "max_pool2d: only float32 NCHW (4D) tensors";
    return Error::NotSupported;
  }
  if (op.arg_is_unread == nullptr || !op.arg_is_unread[7]) {
    decline->reason = "max_pool2d: its indices are read (the provider does not compute them)";
    return Error::NotSupported;
  }
  onednn::PoolParams params;
  params.batch = input->size(0);
  params.channels = input->size(1);
  params.input_size = {input->size(2), input->size(3)};
  params.output_size = {output->size(2), output->size(3)};
  std::vector<int64_t> dilation;
  if (!int_list(op.args[1], 2, &params.kernel_size) || !int_list(op.args[3], 2, &params.padding) ||
      !int_list(op.args[4], 2, &dilation)) {
    decline->reason = "max_pool2d: kernel_size, padding and dilation need 1 or 2 entries";
    return Error::NotSupported;
  }
  if (op.args[2]->isIntList() && op.args[2]->toIntList().size() == 0) {
    params.stride = params.kernel_size;  // torch: stride defaults to the kernel size
  } else if (!int_list(op.args[2], 2, &params.stride)) {
    decline->reason = "max_pool2d: stride needs 0, 1 or 2 entries";
    return Error::NotSupported;
  }
  if (dilation[0] != 1 || dilation[1] != 1) {
    decline->reason = "max_pool2d: dilation is not supported by the provider";
    return Error::NotSupported;
  }
  onednn::Support support = onednn::supports_max_pool(params);
  if (!support.ok) {
    decline->reason = support.reason;
    return Error::NotSupported;
  }
  auto kernel = max_pool_kernel(params, input, output);
  return bind_prepared(std::move(kernel), session, out);
}

// aten::mean.out(self, dim[]?, keepdim, *, dtype?, out): taken for float32 over exactly the
// spatial dims of a 3D-5D tensor (global average pooling), keepdim or not.
Error bind_mean(const OpBinding& op, OnednnSession& session, std::unique_ptr<BoundKernel>* out,
                Decline* decline) {
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = op.args.size() > 4 && op.args[4]->isTensor() ? &op.args[4]->toTensor() : nullptr;
  if (!is_f32(input) || !is_f32(output) || input->dim() < 3 || input->dim() > 5 ||
      !op.args[3]->isNone()) {
    decline->reason = "mean: only float32 3D-5D input, no dtype argument";
    return Error::NotSupported;
  }
  const int64_t rank = input->dim();
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  if (!op.args[1]->isIntList()) {
    decline->reason = "mean: only over a list of dims";
    return Error::NotSupported;
  }
  for (int64_t d : op.args[1]->toIntList()) {
    const int64_t dim = d < 0 ? d + rank : d;
    if (dim < 0 || dim >= rank || reduced[static_cast<size_t>(dim)]) {
      decline->reason = "mean: dim out of range or repeated";
      return Error::NotSupported;
    }
    reduced[static_cast<size_t>(dim)] = true;
  }
  if (reduced[0] || reduced[1] ||
      std::count(reduced.begin(), reduced.end(), true) != rank - 2) {
    decline->reason = "mean: only over all spatial dims (global average pooling)";
    return Error::NotSupported;
  }
  if (output->numel() != input->size(0) * input->size(1)) {
    decline->reason = "mean: output size differs from N x C";
    return Error::NotSupported;
  }
  auto kernel = std::make_unique<MeanKernel>(input, output);
  return bind_prepared(std::move(kernel), session, out);
}

// The activation a routed elementwise kernel computes from its arguments (self first, out last);
// false with the reason in `decline` when oneDNN has no such activation or the arguments differ.
bool parse_activation(const OpBinding& op, onednn::Activation* a, Decline* decline) {
  using K = onednn::Activation::Kind;
  const std::string kernel = op.kernel;
  const size_t n = op.args.size() - 1;  // without the result slot
  auto scalar = [&](size_t index, double fallback, double* value) {
    if (op.args[index]->isNone()) {
      *value = fallback;
      return true;
    }
    return scalar_of(op.args[index], value);
  };
  static const std::pair<const char*, K> kUnary[] = {
      {"aten::relu.out", K::kRelu},           {"aten::sigmoid.out", K::kSigmoid},
      {"aten::tanh.out", K::kTanh},           {"aten::hardswish.out", K::kHardswish},
      {"aten::hardsigmoid.out", K::kHardsigmoid}, {"aten::silu.out", K::kSilu},
      {"aten::sqrt.out", K::kSqrt},           {"aten::exp.out", K::kExp},
      {"aten::log.out", K::kLog},             {"aten::abs.out", K::kAbs},
  };
  for (const auto& [name, kind] : kUnary) {
    if (kernel == name && n == 2) {
      a->kind = kind;
      return true;
    }
  }
  double lo = 0.0;
  double hi = 0.0;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if ((kernel == "aten::clamp.out" || kernel == "aten::hardtanh.out") && n == 4) {
    if (!scalar(1, -kInf, &lo) || !scalar(2, kInf, &hi)) {
      decline->reason = kernel + ": bounds are not numbers";
      return false;
    }
    a->kind = K::kClamp;
    a->alpha = static_cast<float>(lo);
    a->beta = static_cast<float>(hi);
  } else if (kernel == "aten::gelu.out" && n == 3 && op.args[1]->isString()) {
    const auto text = op.args[1]->toString();
    const std::string approximate(text.data(), text.size());
    if (approximate != "none" && approximate != "tanh") {
      decline->reason = "gelu: approximate='" + approximate + "'";
      return false;
    }
    a->kind = approximate == "none" ? K::kGeluErf : K::kGeluTanh;
  } else if (kernel == "aten::leaky_relu.out" && n == 3 && scalar(1, 0.01, &lo)) {
    a->kind = K::kLeakyRelu;
    a->alpha = static_cast<float>(lo);
  } else if (kernel == "aten::elu.out" && n == 5 && scalar(1, 1.0, &lo)) {
    double scale = 0.0;
    double input_scale = 0.0;
    if (!scalar(2, 1.0, &scale) || !scalar(3, 1.0, &input_scale) || scale != 1.0 ||
        input_scale != 1.0) {
      decline->reason = "elu: only scale = input_scale = 1";
      return false;
    }
    a->kind = K::kElu;
    a->alpha = static_cast<float>(lo);
  } else if (kernel == "aten::neg.out" && n == 2) {
    a->kind = K::kLinear;
    a->alpha = -1.0f;
  } else if (kernel == "aten::rsqrt.out" && n == 2) {
    a->kind = K::kPow;
    a->alpha = -0.5f;
  } else if (kernel == "aten::pow.Tensor_Scalar_out" && n == 3 && scalar(1, 1.0, &lo)) {
    // Exact forms for the exponents models use; x ** 2 is x * x in torch too.
    a->kind = lo == 2.0 ? K::kSquare : lo == 0.5 ? K::kSqrt : lo == 1.0 ? K::kLinear : K::kPow;
    a->alpha = lo == 1.0 ? 1.0f : static_cast<float>(lo);
  } else if ((kernel == "aten::mul.Scalar_out" || kernel == "aten::div.Scalar_out") && n == 3 &&
             scalar(1, 1.0, &lo)) {
    a->kind = K::kLinear;
    a->alpha = static_cast<float>(kernel == "aten::mul.Scalar_out" ? lo : 1.0 / lo);
  } else if ((kernel == "aten::add.Scalar_out" || kernel == "aten::sub.Scalar_out") && n == 4 &&
             scalar(1, 0.0, &lo) && scalar(2, 1.0, &hi)) {
    a->kind = K::kLinear;
    a->alpha = 1.0f;
    a->beta = static_cast<float>((kernel == "aten::add.Scalar_out" ? lo : -lo) * hi);
  } else if (kernel == "aten::rsub.Scalar_out" && n == 4 && scalar(1, 0.0, &lo) &&
             scalar(2, 1.0, &hi)) {  // other - alpha * self
    a->kind = K::kLinear;
    a->alpha = static_cast<float>(-hi);
    a->beta = static_cast<float>(lo);
  } else {
    decline->reason = "no oneDNN activation for " + kernel + " with these arguments";
    return false;
  }
  const onednn::Support support = onednn::supports_activation(*a);
  if (!support.ok) {
    decline->reason = support.reason;
    return false;
  }
  return true;
}

bool is_activation_kernel(const std::string& kernel) {
  static const char* const kKernels[] = {
      "aten::relu.out",     "aten::clamp.out",       "aten::hardtanh.out",
      "aten::sigmoid.out",  "aten::tanh.out",        "aten::hardswish.out",
      "aten::hardsigmoid.out", "aten::silu.out",     "aten::gelu.out",
      "aten::leaky_relu.out",  "aten::elu.out",          "aten::neg.out",
      "aten::abs.out",         "aten::sqrt.out",         "aten::rsqrt.out",
      "aten::exp.out",         "aten::log.out",          "aten::pow.Tensor_Scalar_out",
      "aten::mul.Scalar_out",  "aten::div.Scalar_out",   "aten::add.Scalar_out",
      "aten::sub.Scalar_out",  "aten::rsub.Scalar_out",
  };
  return std::any_of(std::begin(kKernels), std::end(kKernels),
                     [&](const char* name) { return kernel == name; });
}

Error bind_eltwise(const OpBinding& op, OnednnSession& session,
                   std::unique_ptr<BoundKernel>* out, Decline* decline) {
  if (op.args.size() < 3) {
    decline->reason = std::string(op.kernel) + ": unexpected arguments";
    return Error::NotSupported;
  }
  const Tensor* input = tensor_arg(op, 0);
  const Tensor* output = tensor_arg(op, op.args.size() - 2);
  if (!is_f32(input) || !is_f32(output)) {
    decline->reason = std::string(op.kernel) + ": only float32 input and output";
    return Error::NotSupported;
  }
  if (dims_of(*input) != dims_of(*output) || input->numel() == 0) {
    decline->reason = std::string(op.kernel) + ": input and output of one non-empty shape only";
    return Error::NotSupported;
  }
  onednn::Activation activation;
  if (!parse_activation(op, &activation, decline)) return Error::NotSupported;
  auto kernel = std::make_unique<EltwiseKernel>(activation, input,
                                                &op.args[op.args.size() - 2]->toTensor());
  return bind_prepared(std::move(kernel), session, out);
}

// aten::native_layer_norm.out(input, normalized_shape, weight?, bias?, eps, *, out0, out1, out2):
// float32, normalized_shape the input's trailing dims, weight and bias (when given) of that many
// elements, the statistics outputs one value per row.
Error bind_layer_norm(const OpBinding& op, OnednnSession& session,
                      std::unique_ptr<BoundKernel>* out, Decline* decline) {
  Span<EValue*> args = op.args;
  const Tensor* input = tensor_arg(args, 0);
  const Tensor* weight = tensor_arg(args, 2);
  const Tensor* bias = tensor_arg(args, 3);
  Tensor* outputs[3] = {nullptr, nullptr, nullptr};
  for (size_t i = 0; i < 3; ++i) {
    if (args.size() > 5 + i && args[5 + i]->isTensor()) outputs[i] = &args[5 + i]->toTensor();
  }
  if (!is_f32(input) || !is_f32(outputs[0]) || !is_f32(outputs[1]) || !is_f32(outputs[2]) ||
      (weight != nullptr && !is_f32(weight)) || (bias != nullptr && !is_f32(bias))) {
    decline->reason = "layer_norm: only float32 input, weight, bias and outputs";
    return Error::NotSupported;
  }
  double eps = 0.0;
  if (!args[1]->isIntList() || !scalar_of(args[4], &eps)) {
    decline->reason = "layer_norm: needs an int list normalized_shape and a number eps";
    return Error::NotSupported;
  }
  const auto shape = args[1]->toIntList();
  const int64_t rank = input->dim();
  const auto normalized = static_cast<int64_t>(shape.size());
  int64_t features = 1;
  bool trailing = normalized >= 1 && normalized <= rank;
  for (int64_t i = 0; trailing && i < normalized; ++i) {
    trailing = shape[static_cast<size_t>(i)] == input->size(rank - normalized + i);
    features *= shape[static_cast<size_t>(i)];
  }
  if (!trailing || input->numel() == 0) {
    decline->reason = "layer_norm: normalized_shape must be the non-empty input's trailing dims";
    return Error::NotSupported;
  }
  onednn::LayerNormParams params;
  params.rows = input->numel() / features;
  params.features = features;
  params.eps = static_cast<float>(eps);
  params.has_weight = weight != nullptr;
  params.has_bias = bias != nullptr;
  if (dims_of(*outputs[0]) != dims_of(*input) || outputs[1]->numel() != params.rows ||
      outputs[2]->numel() != params.rows || (weight && weight->numel() != features) ||
      (bias && bias->numel() != features)) {
    decline->reason = "layer_norm: output, statistics, weight or bias sizes do not match";
    return Error::NotSupported;
  }
  const onednn::Support support = onednn::supports_layer_norm(params);
  if (!support.ok) {
    decline->reason = support.reason;
    return Error::NotSupported;
  }
  return bind_prepared(std::make_unique<LayerNormKernel>(params, input, weight, bias, outputs[0],
                                                         outputs[1], outputs[2]),
                       session, out);
}

// aten::permute_copy.out(self, dims, *, out): float32, dims a permutation (negative dims count
// from the end).
Error bind_permute(const OpBinding& op, OnednnSession& session, std::unique_ptr<BoundKernel>* out,
                   Decline* decline) {
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = op.args.size() > 2 && op.args[2]->isTensor() ? &op.args[2]->toTensor() : nullptr;
  if (!is_f32(input) || !is_f32(output)) {
    decline->reason = "permute: only float32 input and output";
    return Error::NotSupported;
  }
  const size_t rank = static_cast<size_t>(input->dim());
  std::vector<int64_t> perm;
  if (!op.args[1]->isIntList() || !int_list(op.args[1], rank, &perm) || perm.size() != rank) {
    decline->reason = "permute: dims must be a list of " + std::to_string(rank) + " ints";
    return Error::NotSupported;
  }
  for (int64_t& d : perm) {
    if (d < 0) d += static_cast<int64_t>(rank);
  }
  const onednn::Support support =
      onednn::supports_permute(perm, dims_of(*input), dims_of(*output));
  if (!support.ok) {
    decline->reason = support.reason;
    return Error::NotSupported;
  }
  return bind_prepared(std::make_unique<PermuteKernel>(std::move(perm), input, output), session,
                       out);
}

// aten::add.out / sub.out (self, other, *, alpha, out), aten::mul.out / div.out (self, other,
// *, out): float32 tensors with numpy broadcasting, alpha 1.
Error bind_binary(const OpBinding& op, onednn::BinaryOp kind, const char* what,
                  OnednnSession& session, std::unique_ptr<BoundKernel>* out, Decline* decline) {
  const bool has_alpha = kind == onednn::BinaryOp::kAdd || kind == onednn::BinaryOp::kSub;
  const size_t out_index = has_alpha ? 3 : 2;
  const Tensor* a = tensor_arg(op, 0);
  const Tensor* b = tensor_arg(op, 1);
  Tensor* output = op.args.size() > out_index && op.args[out_index]->isTensor()
                       ? &op.args[out_index]->toTensor()
                       : nullptr;
  if (!is_f32(a) || !is_f32(b) || !is_f32(output)) {
    decline->reason = std::string(what) + ": only float32 tensors";
    return Error::NotSupported;
  }
  if (has_alpha) {
    double alpha = 0.0;
    if (!scalar_of(op.args[2], &alpha) || alpha != 1.0) {
      decline->reason = std::string(what) + ": alpha must be 1";
      return Error::NotSupported;
    }
  }
  std::vector<int64_t> out_dims = dims_of(*output);
  if (a->dim() > output->dim() || b->dim() > output->dim()) {
    decline->reason = std::string(what) + ": an operand has a higher rank than the output";
    return Error::NotSupported;
  }
  auto extended = [&](const Tensor* t) {
    std::vector<int64_t> dims = dims_of(*t);
    dims.insert(dims.begin(), out_dims.size() - dims.size(), 1);
    return dims;
  };
  onednn::Support support = onednn::supports_binary(kind, extended(a), extended(b), out_dims);
  if (!support.ok) {
    decline->reason = support.reason;
    return Error::NotSupported;
  }
  auto kernel = std::make_unique<BinaryKernel>(kind, a, b, output);
  return bind_prepared(std::move(kernel), session, out);
}

// aten::avg_pool2d.out(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
// divisor_override?, *, out): float32 NCHW without divisor_override.
Error bind_avg_pool(const OpBinding& op, OnednnSession& session,
                    std::unique_ptr<BoundKernel>* out, Decline* decline) {
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = op.args.size() > 7 && op.args[7]->isTensor() ? &op.args[7]->toTensor() : nullptr;
  if (!is_f32(input) || !is_f32(output) || input->dim() != 4 || output->dim() != 4) {
    decline->reason = "avg_pool2d: only float32 NCHW (4D) tensors";
    return Error::NotSupported;
  }
  if (!op.args[6]->isNone()) {
    decline->reason = "avg_pool2d: divisor_override is not supported by the provider";
    return Error::NotSupported;
  }
  if (!op.args[5]->isBool()) {
    decline->reason = "avg_pool2d: count_include_pad is not a bool";
    return Error::NotSupported;
  }
  onednn::PoolParams params;
  params.batch = input->size(0);
  params.channels = input->size(1);
  params.input_size = {input->size(2), input->size(3)};
  params.output_size = {output->size(2), output->size(3)};
  if (output->size(0) != params.batch || output->size(1) != params.channels ||
      !int_list(op.args[1], 2, &params.kernel_size) || !int_list(op.args[3], 2, &params.padding)) {
    decline->reason = "avg_pool2d: kernel_size and padding need 1 or 2 entries";
    return Error::NotSupported;
  }
  if (op.args[2]->isIntList() && op.args[2]->toIntList().size() == 0) {
    params.stride = params.kernel_size;  // torch: stride defaults to the kernel size
  } else if (!int_list(op.args[2], 2, &params.stride)) {
    decline->reason = "avg_pool2d: stride needs 0, 1 or 2 entries";
    return Error::NotSupported;
  }
  const bool include = op.args[5]->toBool();
  onednn::Support support = onednn::supports_avg_pool(params, include);
  if (!support.ok) {
    decline->reason = support.reason;
    return Error::NotSupported;
  }
  return bind_prepared(avg_pool_kernel(params, include, input, output), session, out);
}

// aten::_adaptive_avg_pool2d.out(self, output_size, *, out): taken when the output size divides
// the input size (every window then has the same size and stride: a plain average pooling).
Error bind_adaptive_avg_pool(const OpBinding& op, OnednnSession& session,
                             std::unique_ptr<BoundKernel>* out, Decline* decline) {
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = op.args.size() > 2 && op.args[2]->isTensor() ? &op.args[2]->toTensor() : nullptr;
  if (!is_f32(input) || !is_f32(output) || input->dim() != 4 || output->dim() != 4 ||
      output->size(0) != input->size(0) || output->size(1) != input->size(1)) {
    decline->reason = "adaptive_avg_pool2d: only float32 NCHW (4D) tensors";
    return Error::NotSupported;
  }
  onednn::PoolParams params;
  params.batch = input->size(0);
  params.channels = input->size(1);
  for (ssize_t d = 2; d < 4; ++d) {
    const int64_t in = input->size(d);
    const int64_t size = output->size(d);
    if (size < 1 || in < 1 || in % size != 0) {
      decline->reason = "adaptive_avg_pool2d: output size " + std::to_string(size) +
                        " does not divide input size " + std::to_string(in) +
                        " (windows of different sizes)";
      return Error::NotSupported;
    }
    params.input_size.push_back(in);
    params.output_size.push_back(size);
    params.kernel_size.push_back(in / size);
    params.stride.push_back(in / size);
    params.padding.push_back(0);
  }
  onednn::Support support = onednn::supports_avg_pool(params, false);
  if (!support.ok) {
    decline->reason = support.reason;
    return Error::NotSupported;
  }
  return bind_prepared(avg_pool_kernel(params, false, input, output), session, out);
}

// aten::_softmax.out / aten::_log_softmax.out(self, dim, half_to_float, *, out): float32, the
// input's layout kept (a channels-last activation softmaxed over its channels stays so).
Error bind_softmax(const OpBinding& op, bool log, OnednnSession& session,
                   std::unique_ptr<BoundKernel>* out, Decline* decline) {
  const char* what = log ? "log_softmax" : "softmax";
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = op.args.size() > 3 && op.args[3]->isTensor() ? &op.args[3]->toTensor() : nullptr;
  if (!is_f32(input) || !is_f32(output) || dims_of(*input) != dims_of(*output)) {
    decline->reason = std::string(what) + ": only float32 input and output of one shape";
    return Error::NotSupported;
  }
  if (!op.args[1]->isInt() || !op.args[2]->isBool() || op.args[2]->toBool()) {
    decline->reason = std::string(what) + ": needs an int dim and half_to_float=False";
    return Error::NotSupported;
  }
  int64_t axis = op.args[1]->toInt();
  if (axis < 0) axis += input->dim();
  const onednn::Support support = onednn::supports_softmax(dims_of(*input), axis);
  if (!support.ok) {
    decline->reason = support.reason;
    return Error::NotSupported;
  }
  auto kernel = std::make_unique<LayoutKernel<onednn::SoftmaxPlan>>(
      what,
      [log, axis](onednn::Provider& provider, const onednn::Layout& in,
                  const onednn::Layout& out_layout) {
        return provider.prepare_softmax(log, axis, in, out_layout);
      },
      input, output, /*output_follows_input=*/true);
  return bind_prepared(std::move(kernel), session, out);
}

// aten::upsample_nearest2d.vec_out(input, output_size?, scale_factors?, *, out) and
// aten::upsample_bilinear2d.vec_out(input, output_size?, align_corners, scale_factors?, *, out):
// float32 NCHW, align_corners=False, scale factors (when given) equal to output / input size.
Error bind_upsample(const OpBinding& op, bool linear, OnednnSession& session,
                    std::unique_ptr<BoundKernel>* out, Decline* decline) {
  const std::string what = linear ? "upsample_bilinear2d" : "upsample_nearest2d";
  const size_t scales_index = linear ? 3 : 2;
  const size_t out_index = linear ? 4 : 3;
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = op.args.size() > out_index && op.args[out_index]->isTensor()
                       ? &op.args[out_index]->toTensor()
                       : nullptr;
  if (!is_f32(input) || !is_f32(output) || input->dim() != 4 || output->dim() != 4) {
    decline->reason = what + ": only float32 NCHW (4D) tensors";
    return Error::NotSupported;
  }
  if (linear && (!op.args[2]->isBool() || op.args[2]->toBool())) {
    decline->reason = what +
                      ": align_corners=True is not supported (oneDNN's linear resampling maps "
                      "coordinates as align_corners=False)";
    return Error::NotSupported;
  }
  const EValue* scales = op.args[scales_index];
  if (!scales->isNone()) {
    if (!scales->isDoubleList() || scales->toDoubleList().size() != 2) {
      decline->reason = what + ": scale_factors must be 2 floats";
      return Error::NotSupported;
    }
    auto factors = scales->toDoubleList();
    for (size_t i = 0; i < 2; ++i) {
      const double in = static_cast<double>(input->size(static_cast<ssize_t>(i + 2)));
      const double size = static_cast<double>(output->size(static_cast<ssize_t>(i + 2)));
      if (factors[i] * in != size) {
        decline->reason = what + ": scale factor " + std::to_string(factors[i]) +
                          " is not output / input size (torch then maps coordinates with "
                          "1 / scale, oneDNN with input / output)";
        return Error::NotSupported;
      }
    }
  }
  onednn::Support support = onednn::supports_resampling(linear, dims_of(*input), dims_of(*output));
  if (!support.ok) {
    decline->reason = support.reason;
    return Error::NotSupported;
  }
  return bind_prepared(resample_kernel(linear, input, output), session, out);
}

// aten::cat.out(tensors, dim, *, out): float32 tensors of one rank.
Error bind_cat(const OpBinding& op, OnednnSession& session, std::unique_ptr<BoundKernel>* out,
               Decline* decline) {
  Tensor* output = op.args.size() > 2 && op.args[2]->isTensor() ? &op.args[2]->toTensor() : nullptr;
  if (op.args.size() < 3 || !op.args[0]->isTensorList() || !op.args[1]->isInt() ||
      !is_f32(output)) {
    decline->reason = "cat: only a list of float32 tensors and an int dim";
    return Error::NotSupported;
  }
  auto list = op.args[0]->toTensorList();
  std::vector<const Tensor*> inputs;
  std::vector<std::vector<int64_t>> dims;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!is_f32(&list[i])) {
      decline->reason = "cat: only float32 tensors";
      return Error::NotSupported;
    }
    inputs.push_back(&list[i]);
    dims.push_back(dims_of(list[i]));
  }
  const int64_t rank = output->dim();
  int64_t axis = op.args[1]->toInt();
  if (axis < 0) axis += rank;
  onednn::Support support = onednn::supports_concat(dims, axis, dims_of(*output));
  if (!support.ok) {
    decline->reason = support.reason;
    return Error::NotSupported;
  }
  return bind_prepared(std::make_unique<ConcatKernel>(std::move(inputs), axis, output),
                          session, out);
}

// An op on our own loops (mask_ops.h, reductions.h, embedding.h): nothing to prepare, every
// tensor it reads plain; `body` runs it and returns an error for bad data (embedding ids).
class LoopKernel final : public OnednnKernel {
 public:
  using Body = std::function<Error()>;
  LoopKernel(std::string what, std::vector<const Tensor*> reads, Body body)
      : what_(std::move(what)), reads_(std::move(reads)), body_(std::move(body)) {}

  void prepare(onednn::Provider&, const InChannelsLast&) override {}
  std::vector<const executorch::aten::TensorImpl*> plain_reads() const override {
    std::vector<const executorch::aten::TensorImpl*> reads;
    for (const Tensor* t : reads_) reads.push_back(impl_of(t));
    return reads;
  }
  std::string implementation() const override { return "loops:" + what_; }
  Error run(KernelRuntimeContext&) override { return body_(); }

 private:
  std::string what_;
  std::vector<const Tensor*> reads_;
  Body body_;
};

Error bind_loop(OnednnSession& session, std::unique_ptr<BoundKernel>* out, std::string what,
                std::vector<const Tensor*> reads, LoopKernel::Body body) {
  return bind_prepared(std::make_unique<LoopKernel>(std::move(what), std::move(reads),
                                                    std::move(body)),
                       session, out);
}

bool has_dtype(const Tensor* tensor, ScalarType dtype) {
  return tensor != nullptr && tensor->scalar_type() == dtype;
}

// The out tensor: the last argument of the out-variant schema (the runtime appends one more
// slot, for the kernel wrapper's result, after it).
Tensor* out_arg(const OpBinding& op) {
  if (op.args.size() < 2) return nullptr;
  EValue* out = op.args[op.args.size() - 2];
  return out->isTensor() ? &out->toTensor() : nullptr;
}

// The number of schema arguments, outs included (without the runtime's result slot).
size_t schema_args(const OpBinding& op) { return op.args.empty() ? 0 : op.args.size() - 1; }

// aten::{eq,ne,lt,le,gt,ge}.Scalar_out (self, other, *, out): float32 self, bool out.
Error bind_compare_scalar(const OpBinding& op, onednn::Compare compare, OnednnSession& session,
                          std::unique_ptr<BoundKernel>* out, Decline* decline) {
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = out_arg(op);
  double scalar = 0.0;
  if (schema_args(op) != 3 || !is_f32(input) || !has_dtype(output, ScalarType::Bool) ||
      !scalar_of(op.args[1], &scalar) || output->numel() != input->numel()) {
    decline->reason = "compare: only float32 self with a number, bool out of the same size";
    return Error::NotSupported;
  }
  // torch compares in the tensor's dtype: the scalar rounded to float first.
  const float value = static_cast<float>(scalar);
  return bind_loop(session, out, "compare", {input}, [=] {
    onednn::compare_scalar(compare, input->const_data_ptr<float>(), value,
                           output->mutable_data_ptr<bool>(), input->numel());
    return Error::Ok;
  });
}

// aten::logical_not.out (self, *, out): bool to bool.
Error bind_logical_not(const OpBinding& op, OnednnSession& session,
                       std::unique_ptr<BoundKernel>* out, Decline* decline) {
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = out_arg(op);
  if (schema_args(op) != 2 || !has_dtype(input, ScalarType::Bool) ||
      !has_dtype(output, ScalarType::Bool) || output->numel() != input->numel()) {
    decline->reason = "logical_not: only bool to bool of the same size";
    return Error::NotSupported;
  }
  return bind_loop(session, out, "logical_not", {input}, [=] {
    onednn::logical_not(input->const_data_ptr<bool>(), output->mutable_data_ptr<bool>(),
                        input->numel());
    return Error::Ok;
  });
}

// aten::where.self_out (condition, self, other, *, out): bool condition, float32 operands and
// out, numpy broadcasting.
Error bind_where(const OpBinding& op, OnednnSession& session, std::unique_ptr<BoundKernel>* out,
                 Decline* decline) {
  const Tensor* condition = tensor_arg(op, 0);
  const Tensor* a = tensor_arg(op, 1);
  const Tensor* b = tensor_arg(op, 2);
  Tensor* output = out_arg(op);
  if (schema_args(op) != 4 || !has_dtype(condition, ScalarType::Bool) || !is_f32(a) ||
      !is_f32(b) || !is_f32(output) || output->numel() == 0) {
    decline->reason = "where: only a bool condition and float32 operands, a non-empty output";
    return Error::NotSupported;
  }
  std::string error;
  onednn::WherePlan plan = onednn::WherePlan::make(dims_of(*condition), dims_of(*a), dims_of(*b),
                                                   dims_of(*output), &error);
  if (!error.empty()) {
    decline->reason = error;
    return Error::NotSupported;
  }
  return bind_loop(session, out, "where", {condition, a, b}, [=] {
    plan.run(condition->const_data_ptr<bool>(), a->const_data_ptr<float>(),
             b->const_data_ptr<float>(), output->mutable_data_ptr<float>());
    return Error::Ok;
  });
}

// The dims a reduction's `dim` argument names: an int, an int list, or None (every dim).
bool reduction_dims(const EValue* value, std::vector<int64_t>* dims) {
  dims->clear();
  if (value->isNone()) return true;
  if (value->isInt()) {
    dims->push_back(value->toInt());
    return true;
  }
  if (!value->isIntList()) return false;
  for (int64_t d : value->toIntList()) dims->push_back(d);
  return true;
}

// amax / amin (self, dim[], keepdim, *, out), argmax / argmin (self, dim?, keepdim, *, out),
// any (self, dim, keepdim, *, out), any.dims (self, dim[]?, keepdim, *, out), any.all_out
// (self, *, out): over adjacent dims; keepdim does not change the output's bytes.
enum class Reduction { kMax, kMin, kArgmax, kArgmin, kAny };

// quantized_decomposed::quantize_per_tensor.out (input, scale, zero_point, quant_min, quant_max,
// dtype, *, out) and dequantize_per_tensor.out (the same, *, out_dtype, out) on our own loops
// (quantize_convert.h): float32 <-> int8 / uint8 over a range within the dtype, a scale that is
// a float32 (the loops multiply in float32, as the portable kernels do).
// ET_CPU_ONEDNN_QUANTIZE_LOOPS=0 declines them (the portable kernels run: the A/B).
Error bind_quantize_convert(const OpBinding& op, bool quantize, OnednnSession& session,
                            std::unique_ptr<BoundKernel>* out, Decline* decline) {
  if (!onednn::kernel_switched_on("ET_CPU_ONEDNN_QUANTIZE_LOOPS")) {
    decline->reason = "quantize/dequantize loops switched off (ET_CPU_ONEDNN_QUANTIZE_LOOPS=0)";
    return Error::NotSupported;
  }
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = out_arg(op);
  const Tensor* quantized = quantize ? output : input;
  const Tensor* real = quantize ? input : output;
  double scale = 0.0, zero_point = 0.0, low = 0.0, high = 0.0;
  const bool scalars = schema_args(op) >= 7 && scalar_of(op.args[1], &scale) &&
                       scalar_of(op.args[2], &zero_point) && scalar_of(op.args[3], &low) &&
                       scalar_of(op.args[4], &high);
  const bool is_signed = has_dtype(quantized, ScalarType::Char);
  const double type_low = is_signed ? -128 : 0, type_high = is_signed ? 127 : 255;
  if (!scalars || !has_dtype(real, ScalarType::Float) ||
      !(is_signed || has_dtype(quantized, ScalarType::Byte)) ||
      input->numel() != output->numel() || !(type_low <= low && low <= high && high <= type_high) ||
      !(scale > 0.0) || static_cast<double>(static_cast<float>(scale)) != scale ||
      std::abs(zero_point) > 1e6 || zero_point != std::floor(zero_point)) {
    decline->reason = "quantize/dequantize: float32 <-> int8/uint8 within the dtype's range, a "
                      "float32 scale, an integer zero point";
    return Error::NotSupported;
  }
  onednn::TensorQuantization q;
  q.scale = static_cast<float>(scale);
  q.zero_point = static_cast<int32_t>(zero_point);
  q.quant_min = static_cast<int32_t>(low);
  q.quant_max = static_cast<int32_t>(high);
  q.is_signed = is_signed;
  const int64_t n = input->numel();
  if (quantize) {
    return bind_loop(session, out, "quantize", {input}, [=] {
      onednn::quantize_per_tensor(q, input->const_data_ptr<float>(), n,
                                  output->mutable_data_ptr());
      return Error::Ok;
    });
  }
  return bind_loop(session, out, "dequantize", {input}, [=] {
    onednn::dequantize_per_tensor(q, input->const_data_ptr(), n,
                                  output->mutable_data_ptr<float>());
    return Error::Ok;
  });
}

Error bind_reduction(const OpBinding& op, Reduction kind, OnednnSession& session,
                     std::unique_ptr<BoundKernel>* out, Decline* decline) {
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = out_arg(op);
  const bool any = kind == Reduction::kAny;
  const bool arg = kind == Reduction::kArgmax || kind == Reduction::kArgmin;
  const ScalarType in_type = any ? ScalarType::Bool : ScalarType::Float;
  const ScalarType out_type = any ? ScalarType::Bool : arg ? ScalarType::Long : ScalarType::Float;
  std::vector<int64_t> dims;
  const bool dims_ok = schema_args(op) == 2 || (schema_args(op) == 4 &&
                                                 reduction_dims(op.args[1], &dims));
  if (!has_dtype(input, in_type) || !has_dtype(output, out_type) || !dims_ok) {
    decline->reason = any ? "any: only bool to bool" : arg ? "argmax/argmin: only float32 in"
                                                           : "amax/amin: only float32";
    return Error::NotSupported;
  }
  if (arg && dims.empty() && !op.args[1]->isNone()) {
    decline->reason = "argmax/argmin: one dim or None";
    return Error::NotSupported;
  }
  std::string error;
  const onednn::ReductionShape shape =
      onednn::ReductionShape::over(dims_of(*input), dims, &error);
  if (error.empty() && output->numel() != shape.outputs()) {
    error = "reduction: output size differs from the reduced input's";
  }
  if (!error.empty()) {
    decline->reason = error;
    return Error::NotSupported;
  }
  if (any) {
    return bind_loop(session, out, "any", {input}, [=] {
      onednn::reduce_any(shape, input->const_data_ptr<bool>(), output->mutable_data_ptr<bool>());
      return Error::Ok;
    });
  }
  const bool minimum = kind == Reduction::kMin || kind == Reduction::kArgmin;
  if (arg) {
    return bind_loop(session, out, "argmax", {input}, [=] {
      onednn::reduce_argmax(shape, minimum, input->const_data_ptr<float>(),
                            output->mutable_data_ptr<int64_t>());
      return Error::Ok;
    });
  }
  return bind_loop(session, out, "amax", {input}, [=] {
    onednn::reduce_max(shape, minimum, input->const_data_ptr<float>(),
                       output->mutable_data_ptr<float>());
    return Error::Ok;
  });
}

// aten::embedding.out (weight, indices, padding_idx, scale_grad_by_freq, sparse, *, out):
// float32 [rows, width] table, int64 or int32 ids of any shape; the other arguments only
// matter for gradients. Every id is checked against the rows before any is read.
Error bind_embedding(const OpBinding& op, OnednnSession& session,
                     std::unique_ptr<BoundKernel>* out, Decline* decline) {
  const Tensor* table = tensor_arg(op, 0);
  const Tensor* ids = tensor_arg(op, 1);
  Tensor* output = out_arg(op);
  const bool long_ids = has_dtype(ids, ScalarType::Long);
  if (schema_args(op) != 6 || !is_f32(table) || table->dim() != 2 ||
      !(long_ids || has_dtype(ids, ScalarType::Int)) || !is_f32(output) ||
      output->numel() != ids->numel() * table->size(1)) {
    decline->reason = "embedding: only a float32 [rows, width] table, int64/int32 ids";
    return Error::NotSupported;
  }
  const std::string name = op.op_name != nullptr ? op.op_name : "embedding";
  const int64_t rows = table->size(0);
  const int64_t width = table->size(1);
  const bool prefetch = onednn::embedding_prefetch_enabled();
  return bind_loop(session, out, "embedding", {table, ids}, [=] {
    const float* data = table->const_data_ptr<float>();
    float* to = output->mutable_data_ptr<float>();
    const int64_t count = ids->numel();
    const int64_t bad =
        long_ids ? onednn::gather_rows(data, rows, width, ids->const_data_ptr<int64_t>(), count,
                                       to, prefetch)
                 : onednn::gather_rows(data, rows, width, ids->const_data_ptr<int32_t>(), count,
                                       to, prefetch);
    if (bad < 0) return Error::Ok;
    const long long id = long_ids ? static_cast<long long>(ids->const_data_ptr<int64_t>()[bad])
                                  : static_cast<long long>(ids->const_data_ptr<int32_t>()[bad]);
    return report_error(Error::InvalidArgument,
                        "CpuBackend: %s: token id %lld at position %lld is outside the "
                        "embedding table's %lld rows",
                        printable_text(name.c_str()).c_str(), id, static_cast<long long>(bad),
                        static_cast<long long>(rows));
  });
}

bool compare_of(const std::string& kernel, onednn::Compare* compare) {
  using C = onednn::Compare;
  static const std::pair<const char*, C> kKernels[] = {
      {"aten::eq.Scalar_out", C::kEq}, {"aten::ne.Scalar_out", C::kNe},
      {"aten::lt.Scalar_out", C::kLt}, {"aten::le.Scalar_out", C::kLe},
      {"aten::gt.Scalar_out", C::kGt}, {"aten::ge.Scalar_out", C::kGe}};
  for (const auto& entry : kKernels) {
    if (kernel == entry.first) {
      *compare = entry.second;
      return true;
    }
  }
  return false;
}

bool reduction_of(const std::string& kernel, Reduction* reduction) {
  static const std::pair<const char*, Reduction> kKernels[] = {
      {"aten::amax.out", Reduction::kMax},       {"aten::amin.out", Reduction::kMin},
      {"aten::argmax.out", Reduction::kArgmax},  {"aten::argmin.out", Reduction::kArgmin},
      {"aten::any.out", Reduction::kAny},        {"aten::any.dims_out", Reduction::kAny},
      {"aten::any.all_out", Reduction::kAny}};
  for (const auto& entry : kKernels) {
    if (kernel == entry.first) {
      *reduction = entry.second;
      return true;
    }
  }
  return false;
}

class OnednnKernelProvider final : public KernelProvider {
 public:
  const char* name() const override { return "Optimized(oneDNN)"; }

  std::unique_ptr<ProviderSession> open_session(const ProviderSession* base) const override {
    return std::make_unique<OnednnSession>(static_cast<const OnednnSession*>(base));
  }

  Error bind(const OpBinding& op, std::unique_ptr<BoundKernel>* out) const override {
    Decline decline;
    size_t fused = 0;
    Error error = Error::NotSupported;
    auto* session = static_cast<OnednnSession*>(op.session);
    const std::string kernel = op.kernel;
    onednn::Compare compare = onednn::Compare::kEq;
    Reduction reduction = Reduction::kAny;
    if (session == nullptr) {
      decline.reason = "no provider session";
    } else {
      try {
        OnednnSession& provider = *session;
        if (is_onednn_quantized_kernel(kernel)) {
          // Checked only: finalize binds it (prepare) once the layouts are known.
          error = check_quantized(op, &decline.reason);
          if (error == Error::Ok) {
            auto kernel = std::make_unique<QuantizedChainKernel>(op);
            provider.add_unprepared(kernel.get());
            *out = std::move(kernel);
          }
        } else if (kernel == "aten::convolution.out") {
          error = bind_conv(op, provider, out, &decline, &fused);
        } else if (kernel == "aten::linear.out" || kernel == "aten::addmm.out") {
          error = bind_linear(op, kernel == "aten::addmm.out", provider, out, &decline, &fused);
        } else if (kernel == "aten::max_pool2d_with_indices.out") {
          error = bind_max_pool(op, provider, out, &decline);
        } else if (kernel == "aten::mean.out") {
          error = bind_mean(op, provider, out, &decline);
        } else if (kernel == "aten::mm.out" || kernel == "aten::bmm.out") {
          error = bind_matmul(op, kernel == "aten::bmm.out", provider, out, &decline, &fused);
        } else if (is_activation_kernel(kernel)) {
          error = bind_eltwise(op, provider, out, &decline);
        } else if (kernel == "aten::avg_pool2d.out") {
          error = bind_avg_pool(op, provider, out, &decline);
        } else if (kernel == "aten::_adaptive_avg_pool2d.out") {
          error = bind_adaptive_avg_pool(op, provider, out, &decline);
        } else if (kernel == "aten::upsample_nearest2d.vec_out" ||
                   kernel == "aten::upsample_bilinear2d.vec_out") {
          error = bind_upsample(op, kernel == "aten::upsample_bilinear2d.vec_out", provider, out,
                                &decline);
        } else if (kernel == "aten::cat.out") {
          error = bind_cat(op, provider, out, &decline);
        } else if (kernel == "aten::_softmax.out" || kernel == "aten::_log_softmax.out") {
          error = bind_softmax(op, kernel == "aten::_log_softmax.out", provider, out, &decline);
        } else if (kernel == "aten::native_layer_norm.out") {
          error = bind_layer_norm(op, provider, out, &decline);
        } else if (kernel == "aten::permute_copy.out") {
          error = bind_permute(op, provider, out, &decline);
        } else if (kernel == "aten::add.out") {
          error = bind_binary(op, onednn::BinaryOp::kAdd, "add", provider, out, &decline);
        } else if (kernel == "aten::sub.out") {
          error = bind_binary(op, onednn::BinaryOp::kSub, "sub", provider, out, &decline);
        } else if (kernel == "aten::mul.out") {
          error = bind_binary(op, onednn::BinaryOp::kMul, "mul", provider, out, &decline);
        } else if (kernel == "aten::div.out") {
          error = bind_binary(op, onednn::BinaryOp::kDiv, "div", provider, out, &decline);
        } else if (compare_of(kernel, &compare)) {
          error = bind_compare_scalar(op, compare, provider, out, &decline);
        } else if (kernel == "quantized_decomposed::quantize_per_tensor.out" ||
                   kernel == "quantized_decomposed::dequantize_per_tensor.out") {
          error = bind_quantize_convert(
              op, kernel == "quantized_decomposed::quantize_per_tensor.out", provider, out,
              &decline);
        } else if (kernel == "aten::logical_not.out") {
          error = bind_logical_not(op, provider, out, &decline);
        } else if (kernel == "aten::where.self_out") {
          error = bind_where(op, provider, out, &decline);
        } else if (reduction_of(kernel, &reduction)) {
          error = bind_reduction(op, reduction, provider, out, &decline);
        } else if (kernel == "aten::embedding.out") {
          error = bind_embedding(op, provider, out, &decline);
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

const OnednnKernelProvider kProvider;
const bool kRegistered = register_kernel_provider(kOptimizedProviderId, &kProvider);

}  // namespace
}  // namespace cpu
}  // namespace et_cpu_plugin
