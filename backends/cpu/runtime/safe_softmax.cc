#include "backends/cpu/runtime/safe_softmax.h"

#include <algorithm>
#include <cmath>
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

constexpr const char* kKernel = "et_cpu_quant::safe_softmax.out";

class SafeSoftmaxBuiltin final : public BoundKernel {
 public:
  SafeSoftmaxBuiltin(const char* op_name, const Tensor* x, const EValue* dim, Tensor* out)
      : op_name_(op_name), x_(x), dim_(dim), out_(out) {}

  Error run(KernelRuntimeContext&) override {
    SafeSoftmaxShape shape;
    if (!safe_softmax_shape(*x_, *dim_, *out_, &shape)) {
      return report_error(Error::InvalidArgument,
                          "safe_softmax at %s: shapes changed into no last-dim softmax", op_name_);
    }
    safe_softmax_rows(shape, x_->const_data_ptr<float>(), out_->mutable_data_ptr<float>(), 0,
                      shape.rows);
    return Error::Ok;
  }
  // Its sizes read at each run (safe_softmax_shape): a graph resized in place keeps it.
  bool resizable() const override { return true; }

 private:
  const char* op_name_;
  const Tensor* x_;
  const EValue* dim_;
  Tensor* out_;
};

}  // namespace

bool safe_softmax_shape(const Tensor& x, const EValue& dim, const Tensor& out,
                        SafeSoftmaxShape* shape) {
  if (x.dim() < 1 || !same_sizes(out, x) || !dim.isInt()) return false;
  const int64_t axis = dim.toInt();
  if (axis != -1 && axis != x.dim() - 1) return false;
  const int64_t width = x.size(x.dim() - 1);
  if (width < 1) return false;
  shape->width = width;
  shape->rows = static_cast<int64_t>(x.numel()) / width;
  return true;
}

void safe_softmax_rows(const SafeSoftmaxShape& shape, const float* x, float* out, int64_t first,
                       int64_t last) {
  for (int64_t r = first; r < last; ++r) {
    const float* in = x + r * shape.width;
    float* o = out + r * shape.width;
    if (all_minus_infinity(in, shape.width)) {
      std::fill(o, o + shape.width, 0.0f);
      continue;
    }
    float max = in[0];
    for (int64_t i = 1; i < shape.width; ++i) {
      max = std::isnan(in[i]) ? in[i] : std::max(max, in[i]);  // a NaN stays: all outputs NaN
    }
    float sum = 0.0f;
    for (int64_t i = 0; i < shape.width; ++i) {
      o[i] = std::exp(in[i] - max);
      sum += o[i];
    }
    const float scale = 1.0f / sum;
    for (int64_t i = 0; i < shape.width; ++i) o[i] *= scale;
  }
}

bool is_safe_softmax_kernel(const char* kernel) { return std::strcmp(kernel, kKernel) == 0; }

Error bind_safe_softmax_builtin(const OpBinding& op, std::unique_ptr<BoundKernel>* out) {
  // x, dim, out, and the result slot the runtime appends.
  if (op.args.size() < 3) {
    return report_error(Error::InvalidArgument, "%s at %s: expected (x, dim, out)", kKernel,
                        op.op_name);
  }
  for (size_t i : {size_t{0}, size_t{2}}) {
    if (!op.args[i]->isTensor() || op.args[i]->toTensor().scalar_type() != ScalarType::Float) {
      return report_error(Error::InvalidArgument, "%s at %s: argument %zu is not float32",
                          kKernel, op.op_name, i);
    }
  }
  const Tensor& x = op.args[0]->toTensor();
  Tensor& output = op.args[2]->toTensor();
  SafeSoftmaxShape shape;
  if (!safe_softmax_shape(x, *op.args[1], output, &shape)) {
    return report_error(Error::InvalidArgument,
                        "%s at %s: needs dim the last of x (non-empty), out x's shape", kKernel,
                        op.op_name);
  }
  out->reset(new SafeSoftmaxBuiltin(op.op_name, &x, op.args[1], &output));
  return Error::Ok;
}

}  // namespace cpu
}  // namespace et_cpu_plugin
