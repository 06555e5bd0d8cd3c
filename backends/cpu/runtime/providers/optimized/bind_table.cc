// The Optimized provider's table from routed kernel name to binder (see bind_table.h), grouped
// by the binder file of each op family, and its C query for the route-table test.
#include "backends/cpu/runtime/providers/optimized/bind_table.h"

#include <cstring>
#include <iterator>

#include "backends/cpu/runtime/providers/optimized/binders.h"

namespace et_cpu_plugin {
namespace cpu {
namespace optimized {
namespace {

using R = BindRequest;
using onednn::BinaryOp;
using onednn::Compare;

// Each binder as a Binder: its family's function with the argument the kernel name implies.
Error int8(const R& r) { return bind_int8(r.op, r.session, r.out, r.decline); }
Error linear_8da(const R& r) { return bind_linear_8da(r.op, r.session, r.out, r.decline); }
Error conv(const R& r) { return bind_conv(r.op, r.session, r.out, r.decline, r.fused); }
Error linear(const R& r) { return bind_linear(r.op, false, r.session, r.out, r.decline, r.fused); }
Error addmm(const R& r) { return bind_linear(r.op, true, r.session, r.out, r.decline, r.fused); }
Error mm(const R& r) { return bind_matmul(r.op, false, r.session, r.out, r.decline, r.fused); }
Error bmm(const R& r) { return bind_matmul(r.op, true, r.session, r.out, r.decline, r.fused); }
Error max_pool(const R& r) { return bind_max_pool(r.op, r.session, r.out, r.decline); }
Error avg_pool(const R& r) { return bind_avg_pool(r.op, r.session, r.out, r.decline); }
Error adaptive(const R& r) {
  return bind_adaptive_avg_pool(r.op, r.session, r.out, r.decline, r.fused);
}
Error mean(const R& r) { return bind_mean(r.op, r.session, r.out, r.decline, r.fused); }
Error nearest(const R& r) { return bind_upsample(r.op, false, r.session, r.out, r.decline); }
Error bilinear(const R& r) { return bind_upsample(r.op, true, r.session, r.out, r.decline); }
Error cat(const R& r) { return bind_cat(r.op, r.session, r.out, r.decline); }
Error permute(const R& r) { return bind_permute(r.op, r.session, r.out, r.decline); }
Error eltwise(const R& r) { return bind_eltwise(r.op, r.session, r.out, r.decline); }
template <BinaryOp kKind>
Error binary(const R& r) {
  static constexpr const char* kNames[] = {"add", "sub", "mul", "div"};
  return bind_binary(r.op, kKind, kNames[static_cast<int>(kKind)], r.session, r.out, r.decline);
}
// A squeeze-excite gate multiply whose product only a 1x1 convolution reads is folded into it
// (bind_gated_pointwise); any other multiply is a binary op.
Error mul(const R& r) {
  if (bind_gated_pointwise(r.op, r.session, r.out, r.fused)) return Error::Ok;
  return binary<BinaryOp::kMul>(r);
}
Error rotary(const R& r) { return bind_rotary(r.op, r.session, r.out, r.decline); }
Error rms_norm(const R& r) { return bind_rms_norm(r.op, r.session, r.out, r.decline); }
Error safe_softmax(const R& r) { return bind_safe_softmax(r.op, r.session, r.out, r.decline); }
Error layer_norm(const R& r) { return bind_layer_norm(r.op, r.session, r.out, r.decline); }
Error softmax(const R& r) { return bind_softmax(r.op, false, r.session, r.out, r.decline); }
Error log_softmax(const R& r) { return bind_softmax(r.op, true, r.session, r.out, r.decline); }
template <Compare kCompare>
Error compare(const R& r) {
  return bind_compare_scalar(r.op, kCompare, r.session, r.out, r.decline);
}
Error logical_not(const R& r) { return bind_logical_not(r.op, r.session, r.out, r.decline); }
Error where(const R& r) { return bind_where(r.op, r.session, r.out, r.decline); }
template <Reduction kReduction>
Error reduction(const R& r) {
  return bind_reduction(r.op, kReduction, r.session, r.out, r.decline);
}
Error embedding(const R& r) { return bind_embedding(r.op, r.session, r.out, r.decline); }
Error quantize(const R& r) {
  return bind_quantize_convert(r.op, true, r.session, r.out, r.decline);
}
Error dequantize(const R& r) {
  return bind_quantize_convert(r.op, false, r.session, r.out, r.decline);
}

constexpr BindRow kTable[] = {
    // bind_quantized.cc: the delegate's int8 ops, then the quantize / dequantize loops.
    {"et_cpu_quant::conv2d.out", int8},
    {"et_cpu_quant::linear.out", int8},
    {"et_cpu_quant::max_pool2d.out", int8},
    {"et_cpu_quant::add.out", int8},
    {"et_cpu_quant::linear_8da.out", linear_8da},
    // bind_rotary.cc: rotary embeddings (fused by preprocess).
    {"et_cpu_quant::rotary.out", rotary},
    // bind_rms_norm.cc: RMSNorm (fused by preprocess).
    {"et_cpu_quant::rms_norm.out", rms_norm},
    // bind_normalization.cc: SDPA's softmax with its fully-masked-row guard (fused by preprocess).
    {"et_cpu_quant::safe_softmax.out", safe_softmax},
    {"quantized_decomposed::quantize_per_tensor.out", quantize},
    {"quantized_decomposed::dequantize_per_tensor.out", dequantize},
    // bind_convolution.cc
    {"aten::convolution.out", conv},
    // bind_linear.cc
    {"aten::linear.out", linear},
    {"aten::addmm.out", addmm},
    {"aten::mm.out", mm},
    {"aten::bmm.out", bmm},
    // bind_pooling.cc
    {"aten::max_pool2d_with_indices.out", max_pool},
    {"aten::avg_pool2d.out", avg_pool},
    {"aten::_adaptive_avg_pool2d.out", adaptive},
    {"aten::mean.out", mean},
    {"aten::upsample_nearest2d.vec_out", nearest},
    {"aten::upsample_bilinear2d.vec_out", bilinear},
    {"aten::cat.out", cat},
    {"aten::permute_copy.out", permute},
    // bind_elementwise.cc: activations and scalar arithmetic, then binary ops.
    {"aten::relu.out", eltwise},
    {"aten::clamp.out", eltwise},
    {"aten::hardtanh.out", eltwise},
    {"aten::sigmoid.out", eltwise},
    {"aten::tanh.out", eltwise},
    {"aten::hardswish.out", eltwise},
    {"aten::hardsigmoid.out", eltwise},
    {"aten::silu.out", eltwise},
    {"aten::gelu.out", eltwise},
    {"aten::leaky_relu.out", eltwise},
    {"aten::elu.out", eltwise},
    {"aten::neg.out", eltwise},
    {"aten::abs.out", eltwise},
    {"aten::sqrt.out", eltwise},
    {"aten::rsqrt.out", eltwise},
    {"aten::exp.out", eltwise},
    {"aten::log.out", eltwise},
    {"aten::pow.Tensor_Scalar_out", eltwise},
    {"aten::mul.Scalar_out", eltwise},
    {"aten::div.Scalar_out", eltwise},
    {"aten::add.Scalar_out", eltwise},
    {"aten::sub.Scalar_out", eltwise},
    {"aten::rsub.Scalar_out", eltwise},
    {"aten::add.out", binary<BinaryOp::kAdd>},
    {"aten::sub.out", binary<BinaryOp::kSub>},
    {"aten::mul.out", mul},
    {"aten::div.out", binary<BinaryOp::kDiv>},
    // bind_normalization.cc
    {"aten::native_layer_norm.out", layer_norm},
    {"aten::_softmax.out", softmax},
    {"aten::_log_softmax.out", log_softmax},
    // bind_reductions.cc: comparisons and masks, reductions, the embedding gather.
    {"aten::eq.Scalar_out", compare<Compare::kEq>},
    {"aten::ne.Scalar_out", compare<Compare::kNe>},
    {"aten::lt.Scalar_out", compare<Compare::kLt>},
    {"aten::le.Scalar_out", compare<Compare::kLe>},
    {"aten::gt.Scalar_out", compare<Compare::kGt>},
    {"aten::ge.Scalar_out", compare<Compare::kGe>},
    {"aten::logical_not.out", logical_not},
    {"aten::where.self_out", where},
    {"aten::amax.out", reduction<Reduction::kMax>},
    {"aten::amin.out", reduction<Reduction::kMin>},
    {"aten::argmax.out", reduction<Reduction::kArgmax>},
    {"aten::argmin.out", reduction<Reduction::kArgmin>},
    {"aten::any.out", reduction<Reduction::kAny>},
    {"aten::any.dims_out", reduction<Reduction::kAny>},
    {"aten::any.all_out", reduction<Reduction::kAny>},
    {"aten::embedding.out", embedding},
};

}  // namespace

const BindRow* find_binder(const std::string& kernel) {
  for (const BindRow& row : kTable) {
    if (kernel == row.kernel) return &row;
  }
  return nullptr;
}

}  // namespace optimized
}  // namespace cpu
}  // namespace et_cpu_plugin

extern "C" {

__attribute__((visibility("default"))) size_t et_cpu_optimized_kernels(char* buffer,
                                                                         size_t capacity) {
  std::string names;
  for (const auto& row : et_cpu_plugin::cpu::optimized::kTable) {
    names += row.kernel;
    names += '\n';
  }
  if (buffer != nullptr && capacity > 0) {
    const size_t n = names.size() < capacity - 1 ? names.size() : capacity - 1;
    std::memcpy(buffer, names.data(), n);
    buffer[n] = '\0';
  }
  return names.size();
}

}  // extern "C"
