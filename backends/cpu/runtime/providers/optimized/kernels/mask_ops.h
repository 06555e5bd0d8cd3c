// Our own loops for the boolean ops of attention masks: a float tensor compared with a scalar,
// logical not, and where(condition, a, b) with numpy broadcasting. scaled_dot_product_attention
// guards fully masked rows with eq(scores, -inf) -> logical_not -> any -> logical_not -> where;
// on ExecuTorch's portable kernels (an index computation per element) those took ~11% of the
// Llama-style decoder's time. Plain (contiguous) tensors only; no ExecuTorch or oneDNN types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace et_cpu_plugin {
namespace onednn {

enum class Compare { kEq, kNe, kLt, kLe, kGt, kGe };

// out[i] = x[i] <op> scalar for `count` floats (IEEE semantics: NaN compares false, != true).
void compare_scalar(Compare op, const float* x, float scalar, bool* out, int64_t count);

// out[i] = !x[i] for `count` bools.
void logical_not(const bool* x, bool* out, int64_t count);

// Strides (in elements) of a contiguous tensor of `dims` read as a tensor of `out_dims` under
// numpy broadcasting: dims right-aligned, a size-1 (or missing) dim read with stride 0. Empty
// when `dims` does not broadcast to `out_dims`.
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& dims,
                                       const std::vector<int64_t>& out_dims);

// out = condition ? a : b, every operand broadcast to `out_dims` (out itself contiguous).
struct WherePlan {
  std::vector<int64_t> dims;                  // the output's, adjacent dims merged where possible
  std::vector<int64_t> condition, a, b;       // strides per dim of each operand
  // Empty `error` when the shapes broadcast; else what is wrong.
  static WherePlan make(const std::vector<int64_t>& condition_dims,
                        const std::vector<int64_t>& a_dims, const std::vector<int64_t>& b_dims,
                        const std::vector<int64_t>& out_dims, std::string* error);
  void run(const bool* condition_data, const float* a_data, const float* b_data,
           float* out) const;
};

}  // namespace onednn
}  // namespace et_cpu_plugin
