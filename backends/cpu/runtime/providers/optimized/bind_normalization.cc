// Normalization binders: native_layer_norm (LayerNormPlan, read plain) and softmax /
// log-softmax over one dim (SoftmaxPlan, in the input's layout: our own AVX-512 loops where the
// layout allows).
#include "backends/cpu/runtime/providers/optimized/binders.h"

#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"
#include "backends/cpu/runtime/safe_softmax.h"

namespace et_cpu_plugin {
namespace cpu {
namespace optimized {

namespace {

// native_layer_norm on oneDNN's layer normalization; reads everything plain.
class LayerNormKernel final : public OptimizedKernel {
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

// et_cpu_quant::safe_softmax on onednn::safe_softmax_rows, its shape checked at every run.
class SafeSoftmaxKernel final : public OptimizedKernel {
 public:
  SafeSoftmaxKernel(const Tensor* input, const EValue* dim, Tensor* output)
      : input_(input), dim_(dim), output_(output) {}

  void prepare(onednn::Provider& provider, const InChannelsLast&) override {
    pool_ = provider.work_pool();
  }
  std::vector<const executorch::aten::TensorImpl*> plain_reads() const override {
    return {impl_of(input_)};
  }
  std::string implementation() const override { return "safe_softmax:avx512 (rows)"; }
  bool resizable() const override { return true; }  // safe_softmax_shape at each run

  Error run(KernelRuntimeContext&) override {
    SafeSoftmaxShape shape;
    if (!safe_softmax_shape(*input_, *dim_, *output_, &shape)) {
      // As the built-in kernel says it (runtime/safe_softmax.cc).
      return report_error(Error::InvalidArgument,
                          "CpuBackend: safe_softmax: shapes changed into no last-dim softmax");
    }
    if (shape.rows == 0) return Error::Ok;
    return guarded("safe_softmax", [&] {
      onednn::safe_softmax_rows(input_->const_data_ptr<float>(), output_->mutable_data_ptr<float>(),
                                shape.rows, shape.width, pool_);
    });
  }

 private:
  const Tensor* input_;
  const EValue* dim_;
  Tensor* output_;
  onednn::WorkPool* pool_ = nullptr;
};

}  // namespace

// aten::native_layer_norm.out(input, normalized_shape, weight?, bias?, eps, *, out0, out1, out2):
// float32, normalized_shape the input's trailing dims, weight and bias (when given) of that many
// elements, the statistics outputs one value per row.
Error bind_layer_norm(const OpBinding& op, OptimizedSession& session,
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

// aten::_softmax.out / aten::_log_softmax.out(self, dim, half_to_float, *, out): float32, the
// input's layout kept (a channels-last activation softmaxed over its channels stays so).
Error bind_softmax(const OpBinding& op, bool log, OptimizedSession& session,
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
      input, output, /*output_follows_input=*/true, /*resizable=*/true);
  return bind_prepared(std::move(kernel), session, out);
}

// et_cpu_quant::safe_softmax.out(x, dim, *, out) (fused by backends/cpu/fuse_safe_softmax.py):
// float32, dim the last, read plain; our AVX-512 softmax rows, a row of -inf only giving zeros.
// ET_CPU_SAFE_SOFTMAX=0 declines it (the Reference provider's built-in loop runs it then).
Error bind_safe_softmax(const OpBinding& op, OptimizedSession& session,
                        std::unique_ptr<BoundKernel>* out, Decline* decline) {
  if (!onednn::kernel_switched_on("ET_CPU_SAFE_SOFTMAX")) {
    decline->reason = "safe_softmax: switched off (ET_CPU_SAFE_SOFTMAX=0)";
    return Error::NotSupported;
  }
  if (!onednn::cpu_has_avx512()) {
    decline->reason = "safe_softmax: needs AVX-512F";
    return Error::NotSupported;
  }
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = out_arg(op);
  SafeSoftmaxShape shape;
  if (!is_f32(input) || !is_f32(output) || op.args.size() < 2 ||
      !safe_softmax_shape(*input, *op.args[1], *output, &shape)) {
    decline->reason = "safe_softmax: float32 input and output of one shape, dim the last";
    return Error::NotSupported;
  }
  return bind_prepared(std::make_unique<SafeSoftmaxKernel>(input, op.args[1], output), session,
                       out);
}

}  // namespace optimized
}  // namespace cpu
}  // namespace et_cpu_plugin
