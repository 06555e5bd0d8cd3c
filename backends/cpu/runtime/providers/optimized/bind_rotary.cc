// et_cpu_quant::rotary.out (rotary embeddings, fused by backends/cpu/fuse_rotary.py) on our own
// AVX-512 kernel (kernels/rotary.h), rows shared out on the pool. ET_CPU_ROTARY=0 declines it
// (the Reference provider's built-in scalar loop runs it then).
#include "backends/cpu/runtime/providers/optimized/binders.h"

#include <algorithm>

#include "backends/cpu/runtime/error_report.h"
#include "backends/cpu/runtime/providers/optimized/kernels/rotary.h"

namespace et_cpu_plugin {
namespace cpu {
namespace optimized {

namespace {

class RotaryKernel final : public OptimizedKernel {
 public:
  RotaryKernel(const Tensor* x, const Tensor* cos, const Tensor* sin, Tensor* out)
      : x_(x), cos_(cos), sin_(sin), out_(out) {}

  void prepare(onednn::Provider& provider, const InChannelsLast&) override {
    pool_ = provider.work_pool();
  }
  std::vector<const executorch::aten::TensorImpl*> plain_reads() const override {
    return {impl_of(x_), impl_of(cos_), impl_of(sin_)};
  }
  std::string implementation() const override { return "rotary:avx512"; }
  bool resizable() const override { return true; }  // rotary_shape at each run

  Error run(KernelRuntimeContext&) override {
    RotaryShape shape;
    if (!rotary_shape(*x_, *cos_, *sin_, *out_, &shape)) {
      // As the built-in kernel says it (runtime/rotary.cc): the sizes of this call fail the
      // checks the bind passed.
      return report_error(Error::InvalidArgument,
                          "CpuBackend: rotary: shapes changed into no rotary (x, cos, sin)");
    }
    if (shape.rows == 0) return Error::Ok;
    return guarded("rotary", [&] {
      onednn::rotary(shape, x_->const_data_ptr<float>(), cos_->const_data_ptr<float>(),
                     sin_->const_data_ptr<float>(), out_->mutable_data_ptr<float>(), pool_);
    });
  }

 private:
  const Tensor* x_;
  const Tensor* cos_;
  const Tensor* sin_;
  Tensor* out_;
  onednn::WorkPool* pool_ = nullptr;
};

}  // namespace

Error bind_rotary(const OpBinding& op, OptimizedSession& session, Out out, Decline* decline) {
  if (!onednn::rotary_enabled()) {
    decline->reason = "rotary: switched off (ET_CPU_ROTARY=0)";
    return Error::NotSupported;
  }
  const Tensor* x = tensor_arg(op, 0);
  const Tensor* cos = tensor_arg(op, 1);
  const Tensor* sin = tensor_arg(op, 2);
  Tensor* output = out_arg(op);
  RotaryShape shape;
  if (!is_f32(x) || !is_f32(cos) || !is_f32(sin) || !is_f32(output) ||
      !rotary_shape(*x, *cos, *sin, *output, &shape)) {
    decline->reason =
        "rotary: float32 x with an even last dim, cos and sin of one shape matching its "
        "trailing dims";
    return Error::NotSupported;
  }
  return bind_prepared(std::make_unique<RotaryKernel>(x, cos, sin, output), session, out);
}

}  // namespace optimized
}  // namespace cpu
}  // namespace et_cpu_plugin
