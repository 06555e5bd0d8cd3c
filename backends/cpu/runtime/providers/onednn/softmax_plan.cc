// Softmax and log-softmax plans (SoftmaxPlan) on oneDNN's softmax primitive: classifier heads,
// per-frame class log-probabilities, attention weights.
#include <optional>

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
  // The softmax runs in the format where its axis is innermost (see prepare_softmax): an input
  // in another format is converted into `staged` first, a result into the output afterwards.
  std::optional<ReorderPlan> to_staged;
  std::optional<ReorderPlan> to_output;
  AlignedBuffer staged;
  AlignedBuffer result;
};

SoftmaxPlan::SoftmaxPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

std::string SoftmaxPlan::implementation() const {
  return impl_->implementation;
}

void SoftmaxPlan::run(const float* input, float* output) const {
  const Impl& p = *impl_;
  const float* source = input;
  if (p.to_staged) {
    p.to_staged->run(input, static_cast<float*>(p.staged.data()));
    source = static_cast<const float*>(p.staged.data());
  }
  float* target = p.to_output ? static_cast<float*>(p.result.data()) : output;
  p.run(source, target);
  if (p.to_output) p.to_output->run(target, output);
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
  // oneDNN's jit softmax wants its axis innermost and one format on both sides; anything else
  // falls to ref:any (log_softmax over the time axis of a channels-last conv1d output: 0.41 ms
  // against 0.01 ms at 1x100x40). So the softmax runs plain for the last axis, channels-last for
  // the channel axis, with reorders from and to the tensors' own formats where they differ.
  const int64_t rank = static_cast<int64_t>(input.dims().size());
  const bool channels_last = rank >= 3 && axis == 1   ? true
                             : axis == rank - 1       ? false
                                                      : output.is_channels_last();
  const auto in_format = [&](const Layout& layout) {
    if (layout.is_channels_last() == channels_last) return layout;
    return channels_last ? Layout::channels_last(layout.dims()) : Layout::plain(layout.dims());
  };
  const Layout source = in_format(input);
  const Layout target = in_format(output);
  std::optional<ReorderPlan> to_staged;
  std::optional<ReorderPlan> to_output;
  if (source != input) to_staged = prepare_reorder(input, source);
  if (target != output) to_output = prepare_reorder(target, output);
  ProviderState& state = *state_;
  ThreadCountGuard threads(state.omp_threads);
  return wrap_dnnl("prepare_softmax", [&] {
    auto impl = std::make_shared<SoftmaxPlan::Impl>();
    impl->state = state_;
    impl->src = source.impl().md;
    impl->dst = target.impl().md;
    if (to_staged) {
      impl->to_staged = std::move(to_staged);
      impl->staged.reserve(source.size_bytes());
      state.staging_bytes += source.size_bytes();
    }
    if (to_output) {
      impl->to_output = std::move(to_output);
      impl->result.reserve(target.size_bytes());
      state.staging_bytes += target.size_bytes();
    }
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    // softmax_accurate subtracts the row maximum first, as torch does.
    const dnnl::softmax_forward::primitive_desc pd(
        state.engine, dnnl::prop_kind::forward_inference,
        log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate, impl->src,
        impl->dst, static_cast<int>(axis), attr);
    impl->set(dnnl::softmax_forward(pd), pd);
    if (impl->to_staged) {
      impl->implementation =
          "reorder " + input.describe() + " -> " + source.describe() + " + " + impl->implementation;
    }
    if (impl->to_output) {
      impl->implementation += " + reorder " + target.describe() + " -> " + output.describe();
    }
    return SoftmaxPlan(std::move(impl));
  });
}

}  // namespace onednn
}  // namespace et_cpu_plugin
