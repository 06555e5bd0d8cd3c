// Attention-mask ops on our own loops (see mask_ops.h).
#include "backends/cpu/runtime/providers/onednn/mask_ops.h"

#include <string>

namespace et_cpu_plugin {
namespace onednn {
namespace {

template <typename Op>
void compare_loop(const float* x, float scalar, bool* out, int64_t count, Op op) {
  for (int64_t i = 0; i < count; ++i) out[i] = op(x[i], scalar);
}

}  // namespace

void compare_scalar(Compare op, const float* x, float s, bool* out, int64_t count) {
  switch (op) {
    case Compare::kEq:
      return compare_loop(x, s, out, count, [](float a, float b) { return a == b; });
    case Compare::kNe:
      return compare_loop(x, s, out, count, [](float a, float b) { return a != b; });
    case Compare::kLt:
      return compare_loop(x, s, out, count, [](float a, float b) { return a < b; });
    case Compare::kLe:
      return compare_loop(x, s, out, count, [](float a, float b) { return a <= b; });
    case Compare::kGt:
      return compare_loop(x, s, out, count, [](float a, float b) { return a > b; });
    case Compare::kGe:
      return compare_loop(x, s, out, count, [](float a, float b) { return a >= b; });
  }
}

void logical_not(const bool* x, bool* out, int64_t count) {
  // Through bytes: a bool is 0 or 1 in memory, and the compiler vectorizes the xor.
  const uint8_t* in = reinterpret_cast<const uint8_t*>(x);
  uint8_t* to = reinterpret_cast<uint8_t*>(out);
  for (int64_t i = 0; i < count; ++i) to[i] = static_cast<uint8_t>((in[i] != 0) ^ 1u);
}

std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& dims,
                                       const std::vector<int64_t>& out_dims) {
  if (dims.size() > out_dims.size()) return {};
  std::vector<int64_t> strides(out_dims.size(), 0);
  int64_t stride = 1;
  const size_t offset = out_dims.size() - dims.size();
  for (size_t i = dims.size(); i-- > 0;) {
    const int64_t size = dims[i];
    const int64_t out_size = out_dims[offset + i];
    if (size != out_size && size != 1) return {};
    strides[offset + i] = size == 1 ? 0 : stride;
    stride *= size;
  }
  return strides;
}

WherePlan WherePlan::make(const std::vector<int64_t>& condition_dims,
                          const std::vector<int64_t>& a_dims, const std::vector<int64_t>& b_dims,
                          const std::vector<int64_t>& out_dims, std::string* error) {
  WherePlan plan;
  const std::vector<int64_t> strides[3] = {broadcast_strides(condition_dims, out_dims),
                                           broadcast_strides(a_dims, out_dims),
                                           broadcast_strides(b_dims, out_dims)};
  for (const auto& s : strides) {
    if (s.size() != out_dims.size()) {
      *error = "where: an operand does not broadcast to the output's shape";
      return plan;
    }
  }
  // Merge a dim into the one inside it when every operand steps through both as through one
  // (the innermost loop gets as long as possible); drop size-1 dims.
  for (size_t d = 0; d < out_dims.size(); ++d) {
    if (out_dims[d] == 1) continue;
    if (!plan.dims.empty()) {
      const int64_t size = out_dims[d];
      bool mergeable = true;
      const std::vector<int64_t>* mine[3] = {&plan.condition, &plan.a, &plan.b};
      for (int k = 0; k < 3; ++k) {
        if (mine[k]->back() != strides[k][d] * size) mergeable = false;
      }
      if (mergeable) {
        plan.dims.back() *= size;
        plan.condition.back() = strides[0][d];
        plan.a.back() = strides[1][d];
        plan.b.back() = strides[2][d];
        continue;
      }
    }
    plan.dims.push_back(out_dims[d]);
    plan.condition.push_back(strides[0][d]);
    plan.a.push_back(strides[1][d]);
    plan.b.push_back(strides[2][d]);
  }
  if (plan.dims.empty()) {  // one element
    plan.dims = {1};
    plan.condition = plan.a = plan.b = {0};
  }
  return plan;
}

void WherePlan::run(const bool* condition_data, const float* a_data, const float* b_data,
                    float* out) const {
  const size_t rank = dims.size();
  const int64_t inner = dims[rank - 1];
  const int64_t cs = condition[rank - 1], as = a[rank - 1], bs = b[rank - 1];
  std::vector<int64_t> index(rank, 0);
  int64_t co = 0, ao = 0, bo = 0;  // offsets of the current row
  for (;;) {
    const bool* cr = condition_data + co;
    const float* ar = a_data + ao;
    const float* br = b_data + bo;
    for (int64_t i = 0; i < inner; ++i) out[i] = cr[i * cs] ? ar[i * as] : br[i * bs];
    out += inner;
    // Next row: an odometer over the outer dims.
    size_t d = rank - 1;
    for (;;) {
      if (d == 0) return;
      --d;
      co += condition[d];
      ao += a[d];
      bo += b[d];
      if (++index[d] < dims[d]) break;
      co -= condition[d] * dims[d];
      ao -= a[d] * dims[d];
      bo -= b[d] * dims[d];
      index[d] = 0;
    }
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
