#include "backends/cpu/runtime/builtin_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>
#include <executorch/runtime/platform/log.h>

#include "backends/cpu/runtime/argument_checks.h"
#include "backends/cpu/runtime/error_report.h"
#include "backends/cpu/runtime/linear_8da.h"
#include "backends/cpu/runtime/linear_wo.h"
#include "backends/cpu/runtime/rms_norm.h"
#include "backends/cpu/runtime/rotary.h"
#include "backends/cpu/runtime/safe_softmax.h"

namespace et_cpu_plugin {
namespace cpu {
namespace {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::KernelRuntimeContext;

using UnaryFn = float (*)(float);

// torch's definitions (torch/nn/functional.py, aten/src/ATen/native/Activation.cpp).
float hardsigmoid(float x) {
  return std::min(std::max(x + 3.0f, 0.0f), 6.0f) / 6.0f;  // relu6(x + 3) / 6
}
float hardswish(float x) {
  return x * std::min(std::max(x + 3.0f, 0.0f), 6.0f) / 6.0f;  // x * relu6(x + 3) / 6
}
float silu(float x) {
  return x / (1.0f + std::exp(-x));  // x * sigmoid(x)
}

struct Builtin {
  const char* kernel;
  UnaryFn fn;
};

// Every entry has the schema `(Tensor self, *, Tensor(a!) out) -> Tensor(a!)`.
constexpr Builtin kBuiltins[] = {
    {"aten::hardswish.out", hardswish},
    {"aten::hardsigmoid.out", hardsigmoid},
    {"aten::silu.out", silu},
};

const Builtin* find_builtin(const char* kernel) {
  for (const Builtin& builtin : kBuiltins) {
    if (std::strcmp(builtin.kernel, kernel) == 0) return &builtin;
  }
  return nullptr;
}

class UnaryKernel final : public BoundKernel {
 public:
  UnaryKernel(UnaryFn fn, const Tensor* input, Tensor* output)
      : fn_(fn), input_(input), output_(output) {}

  Error run(KernelRuntimeContext&) override {
    const float* in = input_->const_data_ptr<float>();
    float* out = output_->mutable_data_ptr<float>();
    const size_t n = static_cast<size_t>(input_->numel());
    for (size_t i = 0; i < n; ++i) out[i] = fn_(in[i]);
    return Error::Ok;
  }
  bool resizable() const override { return true; }  // numel read at each run

 private:
  UnaryFn fn_;
  const Tensor* input_;
  Tensor* output_;
};

const char* dtype_name(ScalarType type) {
  return executorch::runtime::toString(type);
}

}  // namespace

bool is_builtin_kernel(const char* kernel) {
  return find_builtin(kernel) != nullptr || is_linear_8da_kernel(kernel) ||
         is_weight_only_kernel(kernel) || is_rotary_kernel(kernel) ||
         is_rms_norm_kernel(kernel) || is_safe_softmax_kernel(kernel);
}

Error bind_builtin_kernel(const OpBinding& op, std::unique_ptr<BoundKernel>* out) {
  if (is_linear_8da_kernel(op.kernel)) return bind_linear_8da(op, out);
  if (is_weight_only_kernel(op.kernel)) return bind_weight_only(op, out);
  if (is_rotary_kernel(op.kernel)) return bind_rotary_builtin(op, out);
  if (is_rms_norm_kernel(op.kernel)) return bind_rms_norm_builtin(op, out);
  if (is_safe_softmax_kernel(op.kernel)) return bind_safe_softmax_builtin(op, out);
  const Builtin* builtin = find_builtin(op.kernel);
  if (builtin == nullptr) return Error::OperatorMissing;
  // self, out, and the result slot the runtime appends.
  if (op.args.size() < 2 || !op.args[0]->isTensor() || !op.args[1]->isTensor()) {
    return report_error(Error::InvalidArgument,
                        "built-in kernel %s at %s: expected (Tensor self, Tensor out)", op.kernel,
                        op.op_name);
  }
  const Tensor& input = op.args[0]->toTensor();
  Tensor& output = op.args[1]->toTensor();
  if (input.scalar_type() != ScalarType::Float || output.scalar_type() != ScalarType::Float) {
    return report_error(Error::InvalidArgument,
                        "built-in kernel %s at %s takes float32 only, got input %s and output %s",
                        op.kernel, op.op_name, dtype_name(input.scalar_type()),
                        dtype_name(output.scalar_type()));
  }
  if (!same_sizes(input, output)) {
    return report_error(Error::InvalidArgument,
                        "built-in kernel %s at %s: output shape differs from the input's",
                        op.kernel, op.op_name);
  }
  out->reset(new UnaryKernel(builtin->fn, &input, &output));
  return Error::Ok;
}

}  // namespace cpu
}  // namespace et_cpu_plugin
