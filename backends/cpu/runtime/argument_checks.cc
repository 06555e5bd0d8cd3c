#include "backends/cpu/runtime/argument_checks.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <executorch/runtime/core/evalue.h>

#include "backends/cpu/runtime/error_report.h"

namespace et_cpu_plugin {
namespace cpu {
namespace {

using executorch::runtime::Error;

// Every entry of the int list at argument `index` must be >= `min`.
struct ListRule {
  size_t index;
  int64_t min;
  const char* what;
};

struct KernelRule {
  const char* kernel;
  ListRule lists[4];
  int groups_index;  // an int argument that must be >= 1, or -1
};

// Positions from the kernels' out-variant schemas (kernel_signatures.inc).
constexpr KernelRule kRules[] = {
    {"aten::convolution.out",
     {{3, 1, "stride"}, {4, 0, "padding"}, {5, 1, "dilation"}, {7, 0, "output_padding"}},
     8},
    {"aten::max_pool2d_with_indices.out",
     {{1, 1, "kernel_size"}, {2, 1, "stride"}, {3, 0, "padding"}, {4, 1, "dilation"}},
     -1},
    {"aten::avg_pool2d.out",
     {{1, 1, "kernel_size"}, {2, 1, "stride"}, {3, 0, "padding"}, {0, 0, nullptr}},
     -1},
};

// A convolution's groups must divide its input channels [N, C_in, ...], and a non-transposed
// weight [C_out, C_in / groups, ...] must fit them: the kernels size their loops from both (a
// transposed one multiplies weight channels by groups for its output channels).
Error check_convolution_channels(const OpBinding& op) {
  if (std::strcmp(op.kernel, "aten::convolution.out") != 0 || op.args.size() < 9) return Error::Ok;
  if (!op.args[0]->isTensor() || !op.args[1]->isTensor() || !op.args[6]->isBool() ||
      !op.args[8]->isInt()) {
    return Error::Ok;
  }
  const auto& input = op.args[0]->toTensor();
  const auto& weight = op.args[1]->toTensor();
  const bool transposed = op.args[6]->toBool();
  const int64_t groups = op.args[8]->toInt();
  const int64_t in_channels = input.dim() < 2 ? -1 : input.size(1);
  const int64_t weight_channels = weight.dim() < 2 ? -1 : weight.size(1);
  // Divide rather than multiply: a hostile groups (2^62 + 1 with 4 weight channels) made
  // weight channels x groups overflow back to the input's channel count and pass.
  bool fits = in_channels >= 0 && weight_channels >= 0 && groups >= 1 &&
              groups <= std::max<int64_t>(in_channels, 1) && in_channels % groups == 0;
  if (fits && !transposed) fits = in_channels / groups == weight_channels;
  if (!fits) {
    return report_error(Error::InvalidProgram,
                        "op %s (%s): weight channels %lld x groups %lld do not match input "
                        "channels %lld",
                        printable_text(op.op_name).c_str(), op.kernel,
                        static_cast<long long>(weight_channels), static_cast<long long>(groups),
                        static_cast<long long>(in_channels));
  }
  return Error::Ok;
}

}  // namespace

Error check_kernel_arguments(const OpBinding& op) {
  for (const KernelRule& rule : kRules) {
    if (std::strcmp(op.kernel, rule.kernel) != 0) continue;
    for (const ListRule& list : rule.lists) {
      if (list.what == nullptr || list.index >= op.args.size() || !op.args[list.index]->isIntList()) {
        continue;
      }
      auto values = op.args[list.index]->toIntList();
      for (size_t i = 0; i < values.size(); ++i) {
        if (values[i] < list.min) {
          return report_error(Error::InvalidProgram,
                              "op %s (%s): %s[%zu] is %lld, must be at least %lld",
                              printable_text(op.op_name).c_str(), op.kernel, list.what, i,
                              static_cast<long long>(values[i]),
                              static_cast<long long>(list.min));
        }
      }
    }
    if (rule.groups_index >= 0 && static_cast<size_t>(rule.groups_index) < op.args.size() &&
        op.args[rule.groups_index]->isInt() && op.args[rule.groups_index]->toInt() < 1) {
      return report_error(Error::InvalidProgram, "op %s (%s): groups is %lld, must be at least 1",
                          printable_text(op.op_name).c_str(), op.kernel,
                          static_cast<long long>(op.args[rule.groups_index]->toInt()));
    }
  }
  return check_convolution_channels(op);
}

bool has_shape(const executorch::aten::Tensor& t, std::initializer_list<int64_t> sizes) {
  if (t.dim() != static_cast<ssize_t>(sizes.size())) return false;
  ssize_t d = 0;
  for (int64_t size : sizes) {
    if (t.size(d++) != size) return false;
  }
  return true;
}

bool same_sizes(const executorch::aten::Tensor& a, const executorch::aten::Tensor& b) {
  if (a.dim() != b.dim()) return false;
  for (ssize_t d = 0; d < a.dim(); ++d) {
    if (a.size(d) != b.size(d)) return false;
  }
  return true;
}

const executorch::aten::Tensor* optional_tensor(const executorch::runtime::EValue* value) {
  return value->isTensor() ? &value->toTensor() : nullptr;
}

}  // namespace cpu
}  // namespace et_cpu_plugin
