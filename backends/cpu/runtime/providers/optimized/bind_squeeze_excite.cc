// The squeeze-excite tail as one kernel (kernels/squeeze_excite.h): a global average pool
// (aten::mean.out over H and W with keepdim, or aten::_adaptive_avg_pool2d.out to 1x1) whose
// offered steps are a 1x1 convolution, its activations, a 1x1 convolution and the gate's
// activations, all on the pooled [N, C, 1, 1] values, and, when offered next (kBroadcastMul),
// the gate multiply with x itself unless the 1x1 convolution after it folds the gate into its
// weights (bind_gated_pointwise, ET_CPU_SE_GATE_FOLD). ET_CPU_SE_FUSED_MUL=0 (read at bind)
// leaves the multiply to its own op, for measuring. Anything else leaves the pool to its own
// binder.
#include "backends/cpu/runtime/providers/optimized/binders.h"

#include "backends/cpu/runtime/error_report.h"
#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/kernels/squeeze_excite.h"

namespace et_cpu_plugin {
namespace cpu {
namespace optimized {

namespace {

// One of the tail's 1x1 convolutions on [N, in, 1, 1]: its constant weight [out, in, 1, 1]
// and bias (or null).
struct PointwiseStep {
  int64_t in = 0;
  int64_t out = 0;
  const float* weight = nullptr;
  const float* bias = nullptr;
};

bool pixel_dims(const Tensor* t, int64_t batch, int64_t channels) {
  return t != nullptr && is_f32(t) && dims_of(*t) == std::vector<int64_t>{batch, channels, 1, 1};
}

// Offered step `step` as a 1x1 convolution from `in` channels of `batch` pooled pixels.
bool pointwise_step(const FusableStep& step, int64_t batch, int64_t in, PointwiseStep* out) {
  if (step.kind != FusableStep::Kind::kConv || step.args.size() < 10 ||
      step.arg_is_constant == nullptr) {
    return false;
  }
  const Span<EValue*> args = step.args;
  const Tensor* weight = tensor_arg(args, 1);
  const Tensor* bias = tensor_arg(args, 2);
  if (!pixel_dims(tensor_arg(args, 0), batch, in) || weight == nullptr || !is_f32(weight) ||
      weight->dim() != 4 || weight->size(1) != in || weight->size(2) != 1 ||
      weight->size(3) != 1 || !step.arg_is_constant[1]) {
    return false;
  }
  const int64_t channels = weight->size(0);
  if (bias != nullptr && (!is_f32(bias) || !step.arg_is_constant[2] || bias->dim() != 1 ||
                          bias->size(0) != channels)) {
    return false;
  }
  std::vector<int64_t> padding;
  if (!args[6]->isBool() || args[6]->toBool() || !args[8]->isInt() || args[8]->toInt() != 1 ||
      !int_list(args[4], 2, &padding) || padding != std::vector<int64_t>{0, 0} ||
      !pixel_dims(tensor_arg(args, 9), batch, channels)) {
    return false;
  }
  out->in = in;
  out->out = channels;
  out->weight = weight->const_data_ptr<float>();
  out->bias = bias ? bias->const_data_ptr<float>() : nullptr;
  return true;
}

// Elementwise steps from `*index` on as post-ops, up to a convolution, an add or the end.
bool activations(const OpBinding& op, size_t* index, onednn::PostOps* post) {
  for (; *index < op.fusable.size(); ++*index) {
    const FusableStep& step = op.fusable[*index];
    if (step.kind == FusableStep::Kind::kConv || step.kind == FusableStep::Kind::kAdd ||
        step.kind == FusableStep::Kind::kBroadcastMul) {
      break;
    }
    const Tensor* no_residual = nullptr;
    if (!append_post_op(step, post, &no_residual)) return false;
  }
  return true;
}

// Whether step `index` is the gate multiply x * gate (x the pool's `input`) this kernel should
// take: ET_CPU_SE_FUSED_MUL not "0", and no 1x1 convolution after it that folds the gate.
bool takes_gate_multiply(const OpBinding& op, size_t index, const Tensor* input) {
  if (index >= op.fusable.size() || !onednn::kernel_switched_on("ET_CPU_SE_FUSED_MUL")) {
    return false;
  }
  const FusableStep& step = op.fusable[index];
  if (step.kind != FusableStep::Kind::kBroadcastMul || step.residual == nullptr ||
      !step.residual->isTensor() || impl_of(&step.residual->toTensor()) != impl_of(input) ||
      step.output == nullptr || !step.output->isTensor() ||
      dims_of(step.output->toTensor()) != dims_of(*input)) {
    return false;
  }
  if (index + 1 < op.fusable.size() && op.fusable[index + 1].kind == FusableStep::Kind::kConv) {
    const Tensor* weight = tensor_arg(op.fusable[index + 1].args, 1);
    if (weight != nullptr && weight->dim() == 4 && weight->size(2) == 1 && weight->size(3) == 1 &&
        se_gate_fold_wanted(weight->size(0), input->size(2) * input->size(3))) {
      return false;  // bind_gated_pointwise folds it into the convolution's weights
    }
  }
  return true;
}

class SqueezeExciteKernel final : public OptimizedKernel {
 public:
  // `scaled`: the gate multiply's product x * gate when the kernel takes it, else null.
  // `resizes`: a graph resized in place keeps it as it is at a new batch (plans_per_image; it
  // reads the batch and the pixels at each run).
  SqueezeExciteKernel(std::shared_ptr<const onednn::SqueezeExcite> se, const Tensor* input,
                      Tensor* output, Tensor* scaled, bool resizes)
      : se_(std::move(se)), input_(input), output_(output), scaled_(scaled), resizes_(resizes) {}

  bool resizable() const override { return resizes_; }
  bool plan_fits_every_size() const override { return resizes_; }

  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    channels_last_ = channels_last(impl_of(input_));
    scaled_channels_last_ = scaled_ != nullptr && channels_last(impl_of(scaled_));
    pool_ = provider.work_pool();
    // Taking the multiply leaves the gate without arena bytes (a skipped step's result).
    gate_buffer_.assign(scaled_ != nullptr ? static_cast<size_t>(output_->numel()) : 0, 0.0f);
  }
  size_t staging_bytes() const override { return gate_buffer_.size() * sizeof(float); }
  // The product stays in x's layout (as the broadcast multiply's would).
  const executorch::aten::TensorImpl* chainable_output() const override {
    return scaled_ != nullptr ? impl_of(scaled_) : nullptr;
  }
  const executorch::aten::TensorImpl* chainable_output_after(
      const Chained& chained) const override {
    return chained.count(impl_of(input_)) > 0 ? chainable_output() : nullptr;
  }
  std::string implementation() const override {
    return scaled_ != nullptr ? "squeeze_excite:avx512 (gate multiply fused)"
                              : "squeeze_excite:avx512";
  }

  Error run(KernelRuntimeContext&) override {
    return guarded("squeeze-excite", [&] {
      const int64_t batch = input_->size(0);
      const int64_t pixels = batch > 0 ? static_cast<int64_t>(input_->numel()) /
                                             (batch * se_->channels())
                                       : 0;
      if (pixels < 1) return;
      float* gate = output_->mutable_data_ptr<float>();
      if (scaled_ != nullptr) {
        const size_t need = static_cast<size_t>(batch * se_->channels());
        if (gate_buffer_.size() < need) gate_buffer_.resize(need);
        gate = gate_buffer_.data();
      }
      se_->run(input_->const_data_ptr<float>(), batch, pixels, channels_last_, gate, pool_,
               scaled_ != nullptr ? scaled_->mutable_data_ptr<float>() : nullptr,
               scaled_channels_last_);
    });
  }

 private:
  std::shared_ptr<const onednn::SqueezeExcite> se_;
  const Tensor* input_;
  Tensor* output_;
  Tensor* scaled_;
  bool resizes_;
  bool channels_last_ = false;
  bool scaled_channels_last_ = false;
  std::vector<float> gate_buffer_;  // the gate when the multiply is taken
  onednn::WorkPool* pool_ = nullptr;
};

}  // namespace

bool bind_squeeze_excite(const OpBinding& op, const Tensor* input, const Tensor* pooled,
                         OptimizedSession& session, std::unique_ptr<BoundKernel>* out,
                         size_t* fused) {
  if (op.fusable.empty() || input->dim() != 4) return false;
  const int64_t batch = input->size(0);
  const int64_t channels = input->size(1);
  if (batch < 1 || channels < 1 || input->size(2) < 1 || input->size(3) < 1 ||
      !pixel_dims(pooled, batch, channels)) {
    return false;
  }
  size_t index = 0;
  PointwiseStep reduce;
  PointwiseStep expand;
  onednn::PostOps act;
  onednn::PostOps gate;
  if (!pointwise_step(op.fusable[index++], batch, channels, &reduce) ||
      !activations(op, &index, &act) || index >= op.fusable.size() ||
      !pointwise_step(op.fusable[index++], batch, reduce.out, &expand) ||
      expand.out != channels || !activations(op, &index, &gate) ||
      !onednn::squeeze_excite_supports(act, gate)) {
    return false;
  }
  std::shared_ptr<const onednn::SqueezeExcite> se;
  try {
    se = std::make_shared<onednn::SqueezeExcite>(channels, reduce.out, reduce.weight, reduce.bias,
                                                 act, expand.weight, expand.bias, gate,
                                                 session.provider().weight_cache());
  } catch (const std::exception& e) {
    log_line(LogLevel::kInfo, "squeeze-excite at %s not fused: %s", op.op_name, e.what());
    return false;
  }
  Tensor* gate_out = &op.fusable[index - 1].output->toTensor();
  Tensor* scaled = nullptr;
  if (takes_gate_multiply(op, index, input)) {
    scaled = &op.fusable[index].output->toTensor();
    ++index;
  }
  auto kernel = std::make_unique<SqueezeExciteKernel>(std::move(se), input, gate_out, scaled,
                                                      plans_per_image(session));
  if (bind_prepared(std::move(kernel), session, out) != Error::Ok) return false;
  *fused = index;
  return true;
}

}  // namespace optimized
}  // namespace cpu
}  // namespace et_cpu_plugin
