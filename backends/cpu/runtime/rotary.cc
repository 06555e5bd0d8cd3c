#include "backends/cpu/runtime/rotary.h"

#include <algorithm>
#include <cstring>

#include "backends/cpu/runtime/argument_checks.h"
#include "backends/cpu/runtime/error_report.h"

namespace et_cpu_plugin {
namespace cpu {
namespace {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::runtime::Error;
using executorch::runtime::KernelRuntimeContext;

constexpr const char* kKernel = "et_cpu_quant::rotary.out";

class RotaryBuiltin final : public BoundKernel {
 public:
  RotaryBuiltin(const char* op_name, const Tensor* x, const Tensor* cos, const Tensor* sin,
                Tensor* out)
      : op_name_(op_name), x_(x), cos_(cos), sin_(sin), out_(out) {}

  Error run(KernelRuntimeContext&) override {
    RotaryShape shape;
    if (!rotary_shape(*x_, *cos_, *sin_, *out_, &shape)) {
      return report_error(Error::InvalidArgument, "rotary at %s: shapes changed into no rotary",
                          op_name_);
    }
    rotary_rows(shape, x_->const_data_ptr<float>(), cos_->const_data_ptr<float>(),
                sin_->const_data_ptr<float>(), out_->mutable_data_ptr<float>(), 0, shape.rows);
    return Error::Ok;
  }
  // Its sizes read at each run (rotary_shape): a graph resized in place keeps it.
  bool resizable() const override { return true; }

 private:
  const char* op_name_;
  const Tensor* x_;
  const Tensor* cos_;
  const Tensor* sin_;
  Tensor* out_;
};

}  // namespace

bool rotary_shape(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out,
                  RotaryShape* shape) {
  if (x.dim() < 1 || !same_sizes(cos, sin) || !same_sizes(out, x) || cos.dim() < 1) return false;
  ssize_t first = 0;  // cos's leading 1s
  while (first + 1 < cos.dim() && cos.size(first) == 1) ++first;
  const ssize_t kept = cos.dim() - first;
  if (kept > x.dim()) return false;
  for (ssize_t d = 0; d < kept; ++d) {
    if (cos.size(first + d) != x.size(x.dim() - kept + d)) return false;
  }
  const int64_t width = x.size(x.dim() - 1);
  if (width < 2 || width % 2 != 0) return false;
  shape->width = width;
  shape->rows = static_cast<int64_t>(x.numel()) / width;
  shape->table_rows = std::max<int64_t>(1, static_cast<int64_t>(cos.numel()) / width);
  return true;
}

void rotary_rows(const RotaryShape& shape, const float* x, const float* cos, const float* sin,
                 float* out, int64_t first, int64_t last) {
  const int64_t half = shape.width / 2;
  for_rotary_rows(shape, x, cos, sin, out, first, last,
                  [&](const float* in, const float* c, const float* s, float* o) {
                    for (int64_t i = 0; i < shape.width; ++i) {
                      const float turned = i < half ? -in[i + half] : in[i - half];
                      const float plain = in[i] * c[i];
                      const float rotated = turned * s[i];
                      o[i] = plain + rotated;
                    }
                  });
}

bool is_rotary_kernel(const char* kernel) { return std::strcmp(kernel, kKernel) == 0; }

Error bind_rotary_builtin(const OpBinding& op, std::unique_ptr<BoundKernel>* out) {
  // x, cos, sin, out, and the result slot the runtime appends.
  if (op.args.size() < 4) {
    return report_error(Error::InvalidArgument, "%s at %s: expected (x, cos, sin, out)", kKernel,
                        op.op_name);
  }
  for (size_t i = 0; i < 4; ++i) {
    if (!op.args[i]->isTensor() || op.args[i]->toTensor().scalar_type() != ScalarType::Float) {
      return report_error(Error::InvalidArgument, "%s at %s: argument %zu is not float32",
                          kKernel, op.op_name, i);
    }
  }
  const Tensor& x = op.args[0]->toTensor();
  const Tensor& cos = op.args[1]->toTensor();
  const Tensor& sin = op.args[2]->toTensor();
  Tensor& output = op.args[3]->toTensor();
  RotaryShape shape;
  if (!rotary_shape(x, cos, sin, output, &shape)) {
    return report_error(Error::InvalidArgument,
                        "%s at %s: x needs an even last dim, cos and sin one shape matching x's "
                        "trailing dims, out x's shape",
                        kKernel, op.op_name);
  }
  out->reset(new RotaryBuiltin(op.op_name, &x, &cos, &sin, &output));
  return Error::Ok;
}

}  // namespace cpu
}  // namespace et_cpu_plugin
