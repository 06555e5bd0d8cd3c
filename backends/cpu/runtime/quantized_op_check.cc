#include "backends/cpu/runtime/quantized_op_check.h"

#include <cmath>
#include <string>

#include "backends/cpu/runtime/error_report.h"

namespace et_cpu_plugin {
namespace cpu {

using executorch::aten::ScalarType;
using executorch::runtime::Error;

namespace {

constexpr char kConv[] = "et_cpu_quant::conv2d.out";
constexpr char kLinear[] = "et_cpu_quant::linear.out";
constexpr char kMaxPool[] = "et_cpu_quant::max_pool2d.out";
constexpr char kAdd[] = "et_cpu_quant::add.out";

class Checker {
 public:
  Checker(const GraphSpec& graph, size_t index) : graph_(graph), op_(graph.ops[index]) {}

  Error check() {
    if (op_.kernel == kMaxPool) return check_max_pool();
    if (op_.kernel == kAdd) return check_add();
    const bool conv = op_.kernel == kConv;
    // Positions of the arguments after the four tensors (see quantized_ops.py's schemas).
    const size_t q = conv ? 8 : 4;
    const ValueSpec& input = value(0);
    const ValueSpec& weight = value(1);
    const ValueSpec& scales = value(2);
    const ValueSpec& out = value(q + 8);
    const size_t rank = conv ? 4 : 2;
    if (input.dtype != ScalarType::Char && input.dtype != ScalarType::Byte) {
      return fail("input dtype must be int8 or uint8");
    }
    if (out.dtype != input.dtype) return fail("output dtype differs from the input's");
    if (weight.dtype != ScalarType::Char || weight.kind != ValueKind::Constant) {
      return fail("weight must be a constant int8 tensor");
    }
    if (input.shape.size() != rank || weight.shape.size() != rank || out.shape.size() != rank) {
      return fail(conv ? "input, weight and output must be 4-D" : "input, weight and output must be 2-D");
    }
    const int64_t channels = weight.shape[0];
    if (scales.dtype != ScalarType::Float || scales.kind != ValueKind::Constant ||
        scales.shape.size() != 1 || scales.shape[0] != channels) {
      return fail("weight_scales must be a constant float32 vector with one scale per output channel");
    }
    if (out.shape[1] != channels || out.shape[0] != input.shape[0]) {
      return fail("output shape does not match the batch and the weight's output channels");
    }
    const ArgValue& bias = op_.args[3];
    if (bias.type == ArgValue::Type::Tensor) {
      const ValueSpec& b = value(3);
      if (b.dtype != ScalarType::Float || b.shape.size() != 1 || b.shape[0] != channels) {
        return fail("bias must be a float32 vector with one value per output channel");
      }
    }
    if (conv) {
      const int64_t groups = op_.args[7].int_value;
      for (size_t a = 4; a < 7; ++a) {
        if (op_.args[a].ints.size() != 2) return fail("stride, padding and dilation need 2 values");
      }
      for (int64_t v : op_.args[4].ints) if (v < 1) return fail("stride must be positive");
      for (int64_t v : op_.args[6].ints) if (v < 1) return fail("dilation must be positive");
      for (int64_t v : op_.args[5].ints) if (v < 0) return fail("padding must not be negative");
      if (groups < 1 || channels % groups != 0 || input.shape[1] != weight.shape[1] * groups) {
        return fail("groups do not divide the channels / match the weight's input channels");
      }
    } else if (input.shape[1] != weight.shape[1]) {
      return fail("input features differ from the weight's");
    }
    for (size_t s : {q, q + 2}) {
      if (Error e = check_grid(s, input.dtype); e != Error::Ok) return e;
    }
    return check_ranges(q + 4, input.dtype);
  }

 private:
  // (a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
  // quant_min, quant_max, output_min, output_max, *, out): three tensors of one dtype and shape.
  Error check_add() {
    const ValueSpec& a = value(0);
    const ValueSpec& b = value(3);
    const ValueSpec& out = value(12);
    if (a.dtype != ScalarType::Char && a.dtype != ScalarType::Byte) {
      return fail("input dtype must be int8 or uint8");
    }
    if (b.dtype != a.dtype || out.dtype != a.dtype) {
      return fail("the operands' and the output's dtypes differ");
    }
    if (b.shape != a.shape || out.shape != a.shape) {
      return fail("the operands' and the output's shapes differ");
    }
    for (size_t s : {1, 4, 6}) {
      if (Error e = check_grid(s, a.dtype); e != Error::Ok) return e;
    }
    return check_ranges(8, a.dtype);
  }

  // A quantization scale at `index` and its zero point after it, for `dtype`.
  Error check_grid(size_t index, ScalarType dtype) const {
    const int64_t low = dtype == ScalarType::Char ? -128 : 0, high = low + 255;
    const double scale = op_.args[index].double_value;
    if (!std::isfinite(scale) || scale <= 0 || scale > 1e30 || scale < 1e-30) {
      return fail("a quantization scale is not a positive finite number");
    }
    const int64_t zero_point = op_.args[index + 1].int_value;
    if (zero_point < low || zero_point > high) return fail("a zero point is outside the dtype");
    return Error::Ok;
  }

  // quant_min, quant_max, output_min, output_max from `index` on, for `dtype`.
  Error check_ranges(size_t index, ScalarType dtype) const {
    const int64_t low = dtype == ScalarType::Char ? -128 : 0, high = low + 255;
    const int64_t quant_min = op_.args[index].int_value;
    const int64_t quant_max = op_.args[index + 1].int_value;
    if (quant_min < low || quant_max > high || quant_min >= quant_max) {
      return fail("quant_min / quant_max outside the dtype or empty");
    }
    const double output_min = op_.args[index + 2].double_value;
    const double output_max = op_.args[index + 3].double_value;
    if (std::isnan(output_min) || std::isnan(output_max) || output_min > output_max) {
      return fail("output_min / output_max are NaN or empty");
    }
    return Error::Ok;
  }

  // (input, kernel_size, stride, padding, dilation, ceil_mode, *, out): the output's size must be
  // the one torch computes, the kernel's windows stay within it.
  Error check_max_pool() {
    const ValueSpec& input = value(0);
    const ValueSpec& out = value(6);
    if (input.dtype != ScalarType::Char && input.dtype != ScalarType::Byte) {
      return fail("input dtype must be int8 or uint8");
    }
    if (out.dtype != input.dtype) return fail("output dtype differs from the input's");
    if (input.shape.size() != 4 || out.shape.size() != 4) {
      return fail("input and output must be 4-D");
    }
    if (out.shape[0] != input.shape[0] || out.shape[1] != input.shape[1]) {
      return fail("output batch / channels differ from the input's");
    }
    for (size_t a = 1; a < 5; ++a) {
      if (op_.args[a].ints.size() != 2) {
        return fail("kernel_size, stride, padding and dilation need 2 values");
      }
    }
    const bool ceil_mode = op_.args[5].bool_value;
    for (size_t d = 0; d < 2; ++d) {
      const int64_t k = op_.args[1].ints[d], s = op_.args[2].ints[d];
      const int64_t p = op_.args[3].ints[d], dil = op_.args[4].ints[d];
      if (k < 1 || s < 1 || dil < 1 || p < 0 || 2 * p > k || k > 1024 || dil > 1024) {
        return fail("kernel_size / stride / dilation must be positive, padding at most half "
                    "the kernel");
      }
      const int64_t span = dil * (k - 1) + 1, in = input.shape[2 + d];
      if (in + 2 * p < span) return fail("the window is larger than the padded input");
      int64_t size = (in + 2 * p - span + (ceil_mode ? s - 1 : 0)) / s + 1;
      // torch: with ceil_mode the last window must start inside the input or its left padding.
      if (ceil_mode && (size - 1) * s >= in + p) --size;
      if (out.shape[2 + d] != size) return fail("output size differs from the pooling's");
    }
    return Error::Ok;
  }

  const ValueSpec& value(size_t arg) const { return graph_.values[op_.args[arg].tensor]; }

  Error fail(const char* what) const {
    return report_error(Error::InvalidProgram, "op %s (%s): %s", op_.name.c_str(),
                        op_.kernel.c_str(), what);
  }

  const GraphSpec& graph_;
  const OpSpec& op_;
};

}  // namespace

bool is_quantized_kernel(const std::string& kernel) {
  return kernel == kConv || kernel == kLinear || kernel == kMaxPool || kernel == kAdd;
}

Error check_quantized_op(const GraphSpec& graph, size_t index) {
  return Checker(graph, index).check();
}

}  // namespace cpu
}  // namespace et_cpu_plugin
