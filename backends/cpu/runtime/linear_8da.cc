#include "backends/cpu/runtime/linear_8da.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

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

constexpr const char* kKernel = "et_cpu_quant::linear_8da.out";

// Argument positions in the out-variant schema (quantized_ops.py).
enum Arg {
  kInput = 0,
  kWeight,
  kScales,
  kZeroPoints,
  kBias,
  kGroupSize,
  kWeightBits,
  kOut,
  kArgCount,
};

// torchao's quantize of one row: asymmetric int8 over [-128, 127] with eps the smallest normal
// float32 (choose_qparams_affine), q = clamp(round(x * (1 / scale)) + zero_point), rounding half
// to even (nearbyint in the default rounding mode). Writes q - zero_point; returns the scale.
float quantize_row(const float* x, int64_t k, int32_t* centered) {
  float low = 0.0f, high = 0.0f;  // min(min(x), 0), max(max(x), 0)
  for (int64_t i = 0; i < k; ++i) {
    low = std::min(low, x[i]);
    high = std::max(high, x[i]);
  }
  float scale = (high - low) / 255.0f;
  scale = std::max(scale, FLT_MIN);
  float zero = -128.0f - std::nearbyint(low / scale);
  zero = std::min(std::max(zero, -128.0f), 127.0f);
  const int32_t zero_point = static_cast<int32_t>(zero);
  const float inverse = 1.0f / scale;
  for (int64_t i = 0; i < k; ++i) {
    float q = std::nearbyint(x[i] * inverse) + zero;
    q = std::min(std::max(q, -128.0f), 127.0f);
    centered[i] = static_cast<int32_t>(q) - zero_point;
  }
  return scale;
}

class Linear8daKernel final : public BoundKernel {
 public:
  explicit Linear8daKernel(const Linear8daArgs& a) : a_(a), row_(static_cast<size_t>(a.w.cols)) {}
  // The rows from the input at each run, its scratch one row of K: any size within the bounds.
  bool resizable() const override { return true; }

  Error run(KernelRuntimeContext&) override {
    const int64_t k = a_.w.cols, n = a_.w.rows, group = a_.w.group, groups = k / group;
    const int64_t rows = k == 0 ? 0 : a_.input->numel() / k;
    if (a_.output->numel() != rows * n) {
      return report_error(Error::InvalidArgument, "%s: output holds %zd values, expected %lld",
                          kKernel, static_cast<ssize_t>(a_.output->numel()),
                          static_cast<long long>(rows * n));
    }
    const float* x = a_.input->const_data_ptr<float>();
    const uint8_t* w = a_.w.data;
    const float* scales = a_.w.scales;
    const int8_t* zeros = a_.w.zeros;
    const float* bias = a_.bias ? a_.bias->const_data_ptr<float>() : nullptr;
    float* y = a_.output->mutable_data_ptr<float>();
    const int64_t row_bytes = a_.w.row_bytes();
    int32_t* xq = row_.data();
    for (int64_t m = 0; m < rows; ++m) {
      const float x_scale = quantize_row(x + m * k, k, xq);
      for (int64_t c = 0; c < n; ++c) {
        const uint8_t* wc = w + c * row_bytes;
        float sum = 0.0f;
        for (int64_t g = 0; g < groups; ++g) {
          const int32_t zero = zeros ? zeros[c * groups + g] : 0;
          int32_t acc = 0;
          for (int64_t i = g * group; i < (g + 1) * group; ++i) {
            int32_t value;
            if (a_.w.bits == 4) {
              const uint8_t byte = wc[i >> 1];
              value = static_cast<int32_t>((i & 1) ? (byte >> 4) : (byte & 0xF)) - 8;
            } else {
              value = static_cast<int8_t>(wc[i]);
            }
            acc += xq[i] * (value - zero);
          }
          sum += static_cast<float>(acc) * scales[c * groups + g];
        }
        y[m * n + c] = sum * x_scale + (bias ? bias[c] : 0.0f);
      }
    }
    return Error::Ok;
  }

 private:
  Linear8daArgs a_;
  std::vector<int32_t> row_;
};

}  // namespace

bool is_linear_8da_kernel(const char* kernel) {
  return std::strcmp(kernel, kKernel) == 0;
}

const char* read_linear_8da_args(const OpBinding& op, Linear8daArgs* out) {
  if (op.args.size() < kArgCount) return "too few arguments";
  const EValue* const* args = op.args.data();
  if (!args[kInput]->isTensor() || !args[kOut]->isTensor()) return "input and out must be tensors";
  if (!args[kBias]->isTensor() && !args[kBias]->isNone()) return "bias not a tensor";
  Linear8daArgs a{};
  const char* why = read_packed_weight(args[kWeight], args[kScales], args[kZeroPoints],
                                       args[kGroupSize], args[kWeightBits], &a.w);
  if (why != nullptr) return why;
  a.input = &args[kInput]->toTensor();
  a.bias = optional_tensor(args[kBias]);
  a.output = &op.args[kOut]->toTensor();
  if (a.input->scalar_type() != ScalarType::Float || a.output->scalar_type() != ScalarType::Float) {
    return "input and output must be float32";
  }
  if (a.input->dim() < 1 || a.input->dim() != a.output->dim()) {
    return "input and output must have the same rank >= 1";
  }
  if (a.input->size(a.input->dim() - 1) != a.w.cols) return "input's last dim is not K";
  // |x - x_zero| and |w - w_zero| are <= 255: a group of <= 32768 sums within int32.
  if (a.w.group > 32768) return "group size above 32768 (int32 accumulation)";
  if (a.bias != nullptr &&
      (a.bias->scalar_type() != ScalarType::Float || !has_shape(*a.bias, {a.w.rows}))) {
    return "bias is not float32 [N]";
  }
  for (ssize_t d = 0; d + 1 < a.input->dim(); ++d) {
    if (a.input->size(d) != a.output->size(d)) return "output's leading dims differ";
  }
  if (a.output->size(a.output->dim() - 1) != a.w.rows) return "output's last dim is not N";
  *out = a;
  return nullptr;
}

Error bind_linear_8da(const OpBinding& op, std::unique_ptr<BoundKernel>* out) {
  Linear8daArgs a{};
  if (const char* why = read_linear_8da_args(op, &a)) {
    return report_error(Error::InvalidArgument, "%s at %s: %s", kKernel, op.op_name, why);
  }
  out->reset(new Linear8daKernel(a));
  return Error::Ok;
}

}  // namespace cpu
}  // namespace et_cpu_plugin
