// et_cpu_quant::rms_norm.out (RMSNorm, fused by backends/cpu/fuse_rms_norm.py) on our own
// AVX-512 kernel (kernels/rms_norm.h), rows shared out on the pool. ET_CPU_RMS_NORM=0 declines it
// (the Reference provider's built-in scalar loop runs it then).
#include "backends/cpu/runtime/providers/optimized/binders.h"

#include "backends/cpu/runtime/error_report.h"
#include "backends/cpu/runtime/providers/optimized/kernels/rms_norm.h"

namespace et_cpu_plugin {
namespace cpu {
namespace optimized {

namespace {

class RmsNormKernel final : public OptimizedKernel {
 public:
  RmsNormKernel(const Tensor* x, const Tensor* weight, Tensor* out, float eps)
      : x_(x), weight_(weight), out_(out), eps_(eps) {}

  void prepare(onednn::Provider& provider, const InChannelsLast&) override {
    pool_ = provider.work_pool();
  }
  std::vector<const executorch::aten::TensorImpl*> plain_reads() const override {
    if (weight_ == nullptr) return {impl_of(x_)};
    return {impl_of(x_), impl_of(weight_)};
  }
  std::string implementation() const override { return "rms_norm:avx512"; }
  bool resizable() const override { return true; }  // rms_norm_shape at each run

  Error run(KernelRuntimeContext&) override {
    RmsNormShape shape;
    if (!rms_norm_shape(*x_, weight_, *out_, eps_, &shape)) {
      // As the built-in kernel says it (runtime/rms_norm.cc): the sizes of this call fail the
      // checks the bind passed.
      return report_error(Error::InvalidArgument,
                          "CpuBackend: rms_norm: shapes changed into no RMSNorm (x, weight)");
    }
    if (shape.rows == 0) return Error::Ok;
    return guarded("rms_norm", [&] {
      onednn::rms_norm(shape, x_->const_data_ptr<float>(),
                       weight_ ? weight_->const_data_ptr<float>() : nullptr,
                       out_->mutable_data_ptr<float>(), pool_);
    });
  }

 private:
  const Tensor* x_;
  const Tensor* weight_;
  Tensor* out_;
  float eps_;
  onednn::WorkPool* pool_ = nullptr;
};

}  // namespace

Error bind_rms_norm(const OpBinding& op, OptimizedSession& session, Out out, Decline* decline) {
  if (!onednn::rms_norm_enabled()) {
    decline->reason = "rms_norm: switched off (ET_CPU_RMS_NORM=0)";
    return Error::NotSupported;
  }
  const Tensor* x = tensor_arg(op, 0);
  const Tensor* weight = tensor_arg(op, 1);
  Tensor* output = out_arg(op);
  const bool weight_ok = op.args.size() > 1 && (op.args[1]->isNone() || is_f32(weight));
  float eps = 0.0f;
  RmsNormShape shape;
  if (!is_f32(x) || !weight_ok || !is_f32(output) || op.args.size() < 3 ||
      !rms_norm_eps(*op.args[2], &eps) || !rms_norm_shape(*x, weight, *output, eps, &shape)) {
    decline->reason =
        "rms_norm: float32 x with a non-empty last dim D, weight absent or float32 [D], a finite "
        "eps, out x's shape";
    return Error::NotSupported;
  }
  return bind_prepared(std::make_unique<RmsNormKernel>(x, weight, output, eps), session, out);
}

}  // namespace optimized
}  // namespace cpu
}  // namespace et_cpu_plugin
