#include "backends/cpu/runtime/rms_norm.h"

#include <cstring>

#include "backends/cpu/runtime/argument_checks.h"
#include "backends/cpu/runtime/error_report.h"

namespace et_cpu_plugin {
namespace cpu {
namespace {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::KernelRuntimeContext;

constexpr const char* kKernel = "et_cpu_quant::rms_norm.out";

class RmsNormBuiltin final : public BoundKernel {
 public:
  RmsNormBuiltin(const char* op_name, const Tensor* x, const Tensor* weight, Tensor* out,
                 float eps)
      : op_name_(op_name), x_(x), weight_(weight), out_(out), eps_(eps) {}

  Error run(KernelRuntimeContext&) override {
    RmsNormShape shape;
    if (!rms_norm_shape(*x_, weight_, *out_, eps_, &shape)) {
      return report_error(Error::InvalidArgument, "rms_norm at %s: shapes changed into no RMSNorm",
                          op_name_);
    }
    rms_norm_rows(shape, x_->const_data_ptr<float>(),
                  weight_ ? weight_->const_data_ptr<float>() : nullptr,
                  out_->mutable_data_ptr<float>(), 0, shape.rows);
    return Error::Ok;
  }
  // Its sizes read at each run (rms_norm_shape): a graph resized in place keeps it.
  bool resizable() const override { return true; }

 private:
  const char* op_name_;
  const Tensor* x_;
  const Tensor* weight_;
  Tensor* out_;
  float eps_;
};

}  // namespace

bool rms_norm_shape(const Tensor& x, const Tensor* weight, const Tensor& out, float eps,
                    RmsNormShape* shape) {
  if (x.dim() < 1 || !same_sizes(out, x)) return false;
  const int64_t width = x.size(x.dim() - 1);
  if (width < 1) return false;
  if (weight != nullptr && (weight->dim() != 1 || weight->size(0) != width)) return false;
  shape->width = width;
  shape->rows = static_cast<int64_t>(x.numel()) / width;
  shape->eps = eps;
  return true;
}

bool rms_norm_eps(const EValue& value, float* eps) {
  double number = 0.0;
  if (value.isDouble()) {
    number = value.toDouble();
  } else if (value.isInt()) {
    number = static_cast<double>(value.toInt());
  } else {
    return false;
  }
  *eps = static_cast<float>(number);
  return std::isfinite(*eps);
}

void rms_norm_rows(const RmsNormShape& shape, const float* x, const float* weight, float* out,
                   int64_t first, int64_t last) {
  for (int64_t r = first; r < last; ++r) {
    const float* in = x + r * shape.width;
    float* o = out + r * shape.width;
    double sum = 0.0;  // double: the row's sum as exactly as torch's pairwise float sum, or more
    for (int64_t i = 0; i < shape.width; ++i) {
      const float square = in[i] * in[i];
      sum += square;
    }
    const float scale = rms_norm_scale(shape, static_cast<float>(sum));
    for (int64_t i = 0; i < shape.width; ++i) {
      const float normed = in[i] * scale;
      o[i] = weight ? normed * weight[i] : normed;
    }
  }
}

bool is_rms_norm_kernel(const char* kernel) { return std::strcmp(kernel, kKernel) == 0; }

Error bind_rms_norm_builtin(const OpBinding& op, std::unique_ptr<BoundKernel>* out) {
  // x, weight?, eps, out, and the result slot the runtime appends.
  if (op.args.size() < 4) {
    return report_error(Error::InvalidArgument, "%s at %s: expected (x, weight, eps, out)",
                        kKernel, op.op_name);
  }
  const bool has_weight = !op.args[1]->isNone();
  for (size_t i : {size_t{0}, size_t{1}, size_t{3}}) {
    if (i == 1 && !has_weight) continue;
    if (!op.args[i]->isTensor() || op.args[i]->toTensor().scalar_type() != ScalarType::Float) {
      return report_error(Error::InvalidArgument, "%s at %s: argument %zu is not float32",
                          kKernel, op.op_name, i);
    }
  }
  float eps = 0.0f;
  if (!rms_norm_eps(*op.args[2], &eps)) {
    return report_error(Error::InvalidArgument, "%s at %s: eps is not a finite number", kKernel,
                        op.op_name);
  }
  const Tensor& x = op.args[0]->toTensor();
  const Tensor* weight = has_weight ? &op.args[1]->toTensor() : nullptr;
  Tensor& output = op.args[3]->toTensor();
  RmsNormShape shape;
  if (!rms_norm_shape(x, weight, output, eps, &shape)) {
    return report_error(Error::InvalidArgument,
                        "%s at %s: x needs a non-empty last dim D, the weight (if any) shape [D], "
                        "out x's shape",
                        kKernel, op.op_name);
  }
  out->reset(new RmsNormBuiltin(op.op_name, &x, weight, &output, eps));
  return Error::Ok;
}

}  // namespace cpu
}  // namespace et_cpu_plugin
