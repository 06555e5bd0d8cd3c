// The squeeze-excite tail as one kernel (kernels/squeeze_excite.h): a global average pool
// (aten::mean.out over H and W with keepdim, or aten::_adaptive_avg_pool2d.out to 1x1) whose
// offered steps are a 1x1 convolution, its activations, a 1x1 convolution and the gate's
// activations, all on the pooled [N, C, 1, 1] values. The gate multiply with x is the next op
// (a broadcast multiply). Anything else leaves the pool to its own binder.
#include "backends/cpu/runtime/providers/optimized/binders.h"

#include "backends/cpu/runtime/error_report.h"
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
    if (step.kind == FusableStep::Kind::kConv || step.kind == FusableStep::Kind::kAdd) break;
    const Tensor* no_residual = nullptr;
    if (!append_post_op(step, post, &no_residual)) return false;
  }
  return true;
}

class SqueezeExciteKernel final : public OptimizedKernel {
 public:
  SqueezeExciteKernel(std::shared_ptr<const onednn::SqueezeExcite> se, const Tensor* input,
                      Tensor* output)
      : se_(std::move(se)), input_(input), output_(output) {}

  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    channels_last_ = channels_last(impl_of(input_));
    pool_ = provider.work_pool();
  }
  std::string implementation() const override { return "squeeze_excite:avx512"; }

  Error run(KernelRuntimeContext&) override {
    return guarded("squeeze-excite", [&] {
      const int64_t batch = input_->size(0);
      const int64_t pixels = batch > 0 ? static_cast<int64_t>(input_->numel()) /
                                             (batch * se_->channels())
                                       : 0;
      if (pixels < 1) return;
      se_->run(input_->const_data_ptr<float>(), batch, pixels, channels_last_,
               output_->mutable_data_ptr<float>(), pool_);
    });
  }

 private:
  std::shared_ptr<const onednn::SqueezeExcite> se_;
  const Tensor* input_;
  Tensor* output_;
  bool channels_last_ = false;
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
                                                 act, expand.weight, expand.bias, gate);
  } catch (const std::exception& e) {
    log_line(LogLevel::kInfo, "squeeze-excite at %s not fused: %s", op.op_name, e.what());
    return false;
  }
  auto kernel = std::make_unique<SqueezeExciteKernel>(std::move(se), input,
                                                      &op.fusable[index - 1].output->toTensor());
  if (bind_prepared(std::move(kernel), session, out) != Error::Ok) return false;
  *fused = index;
  return true;
}

}  // namespace optimized
}  // namespace cpu
}  // namespace et_cpu_plugin
