// Layer normalization plans (LayerNormPlan): native_layer_norm (transformers' pre-norm, the final
// norm) on oneDNN's layer normalization over the trailing features of each row, with torch's
// per-row mean and 1 / std as the op's other two outputs.
#include <cmath>

#include "backends/cpu/runtime/providers/optimized/onednn/onednn_internal.h"

namespace et_cpu_plugin {
namespace onednn {

Support supports_layer_norm(const LayerNormParams& p) {
  if (p.rows < 1 || p.features < 1) {
    return Support::no("layer_norm: rows " + std::to_string(p.rows) + " and features " +
                       std::to_string(p.features) + " must be positive");
  }
  if (!std::isfinite(p.eps) || p.eps < 0.0f) {
    return Support::no("layer_norm: eps must be finite and >= 0, got " + std::to_string(p.eps));
  }
  return Support::yes();
}

struct LayerNormPlan::Impl {
  std::shared_ptr<ProviderState> state;
  LayerNormParams params;
  dnnl::primitive primitive;
  memory::desc data_md;   // [rows, features]
  memory::desc stat_md;   // [rows]
  memory::desc affine_md;  // [features]
  memory::desc scratchpad_md;
  std::string implementation;
  mutable std::unordered_map<int, memory> args;
};

LayerNormPlan::LayerNormPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

std::string LayerNormPlan::implementation() const {
  return impl_->implementation;
}

void LayerNormPlan::run(const float* input, const float* weight, const float* bias, float* output,
                        float* mean, float* rstd) const {
  const Impl& p = *impl_;
  ProviderState& state = *p.state;
  if ((p.params.has_weight && weight == nullptr) || (p.params.has_bias && bias == nullptr) ||
      mean == nullptr || rstd == nullptr) {
    throw ProviderError("layer_norm plan: a planned weight, bias or statistics buffer is null");
  }
  ThreadCountGuard threads(state.omp_threads);
  wrap_dnnl("layer_norm", [&] {
    point(p.args, DNNL_ARG_SRC, p.data_md, state.engine, input);
    point(p.args, DNNL_ARG_DST, p.data_md, state.engine, output);
    point(p.args, DNNL_ARG_MEAN, p.stat_md, state.engine, mean);
    // oneDNN writes the variance; torch's third output is 1 / sqrt(variance + eps), below.
    point(p.args, DNNL_ARG_VARIANCE, p.stat_md, state.engine, rstd);
    point(p.args, DNNL_ARG_SCRATCHPAD, p.scratchpad_md, state.engine, state.scratchpad.data());
    if (p.params.has_weight) point(p.args, DNNL_ARG_SCALE, p.affine_md, state.engine, weight);
    if (p.params.has_bias) point(p.args, DNNL_ARG_SHIFT, p.affine_md, state.engine, bias);
    p.primitive.execute(state.stream, p.args);
    state.stream.wait();
  });
  for (int64_t r = 0; r < p.params.rows; ++r) rstd[r] = 1.0f / std::sqrt(rstd[r] + p.params.eps);
}

LayerNormPlan Provider::prepare_layer_norm(const LayerNormParams& params) {
  const Support support = supports_layer_norm(params);
  if (!support.ok) throw ProviderError("prepare_layer_norm: " + support.reason);
  ProviderState& state = *state_;
  ThreadCountGuard threads(state.omp_threads);
  return wrap_dnnl("prepare_layer_norm", [&] {
    auto impl = std::make_shared<LayerNormPlan::Impl>();
    impl->state = state_;
    impl->params = params;
    impl->data_md = plain_md({params.rows, params.features});
    impl->stat_md = plain_md({params.rows});
    impl->affine_md = plain_md({params.features});
    auto flags = dnnl::normalization_flags::none;
    if (params.has_weight) flags |= dnnl::normalization_flags::use_scale;
    if (params.has_bias) flags |= dnnl::normalization_flags::use_shift;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    // forward_training: the only kind that writes the mean and variance torch returns too.
    const dnnl::layer_normalization_forward::primitive_desc pd(
        state.engine, dnnl::prop_kind::forward_training, impl->data_md, impl->data_md,
        impl->stat_md, params.eps, flags, attr);
    impl->primitive = dnnl::layer_normalization_forward(pd);
    impl->implementation = pd.impl_info_str();
    impl->scratchpad_md = pd.scratchpad_desc();
    state.reserve_scratchpad(impl->scratchpad_md);
    return LayerNormPlan(std::move(impl));
  });
}

}  // namespace onednn
}  // namespace et_cpu_plugin
