// Softmax and log-softmax plans (SoftmaxPlan) on oneDNN's softmax primitive: classifier heads,
// per-frame class log-probabilities, attention weights.
#include "backends/cpu/runtime/providers/onednn/onednn_internal.h"

namespace et_cpu_plugin {
namespace onednn {

Support supports_softmax(const std::vector<int64_t>& dims, int64_t axis) {
  if (dims.empty() || axis < 0 || axis >= static_cast<int64_t>(dims.size())) {
    return Support::no("softmax: dim " + std::to_string(axis) + " is not a dim of " +
                       dims_to_string(dims));
  }
  for (const int64_t d : dims) {
    if (d < 1) return Support::no("softmax: empty tensors are not supported");
  }
  return Support::yes();
}

struct SoftmaxPlan::Impl : WholeOp {
  FormatBridge bridge;  // into and out of the format where the softmax axis is innermost
};

SoftmaxPlan::SoftmaxPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

std::string SoftmaxPlan::implementation() const {
  return impl_->implementation;
}

void SoftmaxPlan::run(const float* input, float* output) const {
  impl_->bridge.run(*impl_, input, output);
}

SoftmaxPlan Provider::prepare_softmax(bool log, int64_t axis, const Layout& input,
                                      const Layout& output) {
  const Support support = supports_softmax(input.dims(), axis);
  if (!support.ok) {
    throw ProviderError("prepare_softmax: " + support.reason);
  }
  if (input.dims() != output.dims()) {
    throw ProviderError("prepare_softmax: input dims " + dims_to_string(input.dims()) +
                        " differ from output dims " + dims_to_string(output.dims()));
  }
  // oneDNN's jit softmax wants its axis innermost (log_softmax over time after a conv1d, read
  // channels-last: ref:any, 0.41 ms against 0.01 ms at 1x100x40). So it runs plain for the last
  // axis, channels-last for the channel axis, else in the output's format.
  const int64_t rank = static_cast<int64_t>(input.dims().size());
  const bool channels_last = rank >= 3 && axis == 1   ? true
                             : axis == rank - 1       ? false
                                                      : output.is_channels_last();
  ProviderState& state = *state_;
  FormatBridge bridge = bridge_formats(*this, state, input, output, channels_last);
  ThreadCountGuard threads(state.omp_threads);
  return wrap_dnnl("prepare_softmax", [&] {
    auto impl = std::make_shared<SoftmaxPlan::Impl>();
    impl->state = state_;
    impl->src = bridge.source_md;
    impl->dst = bridge.target_md;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    // softmax_accurate subtracts the row maximum first, as torch does.
    const dnnl::softmax_forward::primitive_desc pd(
        state.engine, dnnl::prop_kind::forward_inference,
        log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate, impl->src,
        impl->dst, static_cast<int>(axis), attr);
    impl->set(dnnl::softmax_forward(pd), pd);
    impl->implementation = bridge.describe(impl->implementation);
    impl->bridge = std::move(bridge);
    return SoftmaxPlan(std::move(impl));
  });
}

}  // namespace onednn
}  // namespace et_cpu_plugin
