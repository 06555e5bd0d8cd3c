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

struct SoftmaxPlan::Impl : WholeOp {};

SoftmaxPlan::SoftmaxPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

std::string SoftmaxPlan::implementation() const {
  return impl_->implementation;
}

void SoftmaxPlan::run(const float* input, float* output) const {
  impl_->run(input, output);
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
  ProviderState& state = *state_;
  ThreadCountGuard threads(state.omp_threads);
  return wrap_dnnl("prepare_softmax", [&] {
    auto impl = std::make_shared<SoftmaxPlan::Impl>();
    impl->state = state_;
    impl->src = input.impl().md;
    impl->dst = output.impl().md;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    // softmax_accurate subtracts the row maximum first, as torch does.
    const dnnl::softmax_forward::primitive_desc pd(
        state.engine, dnnl::prop_kind::forward_inference,
        log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate, impl->src,
        impl->dst, static_cast<int>(axis), attr);
    impl->set(dnnl::softmax_forward(pd), pd);
    return SoftmaxPlan(std::move(impl));
  });
}

}  // namespace onednn
}  // namespace et_cpu_plugin
