// Resampling plans (ResamplePlan): nearest and linear (bilinear) up/down-sampling with torch's
// align_corners=False coordinates, on oneDNN's resampling primitive.
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_internal.h"

namespace et_cpu_plugin {
namespace onednn {

Support supports_resampling(bool linear, const std::vector<int64_t>& input,
                            const std::vector<int64_t>& output) {
  const char* what = linear ? "upsample_linear: " : "upsample_nearest: ";
  if (input.size() < 3 || input.size() > 5 || output.size() != input.size() ||
      output[0] != input[0] || output[1] != input[1]) {
    return Support::no(std::string(what) + "input " + dims_to_string(input) + " and output " +
                       dims_to_string(output) + " are not {N, C, *spatial} of one N and C");
  }
  for (size_t i = 0; i < input.size(); ++i) {
    if (input[i] < 1 || output[i] < 1) {
      return Support::no(std::string(what) + "empty tensors are not supported");
    }
  }
  if (!linear) {
    // torch's nearest takes source floor(dst * in / out); oneDNN rounds (dst + 0.5) * in / out
    // - 0.5 to the nearest: the same source for integer upsampling only.
    for (size_t i = 2; i < input.size(); ++i) {
      if (output[i] % input[i] != 0) {
        return Support::no(std::string(what) + "output size " + std::to_string(output[i]) +
                           " is not a multiple of input size " + std::to_string(input[i]) +
                           " (torch's nearest rounding differs from oneDNN's there)");
      }
    }
  }
  return Support::yes();
}

struct ResamplePlan::Impl : WholeOp {
  FormatBridge bridge;  // resamples in the input's format; reorders into the output after
};

ResamplePlan::ResamplePlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

std::string ResamplePlan::implementation() const {
  return impl_->implementation;
}

void ResamplePlan::run(const float* input, float* output) const {
  impl_->bridge.run(*impl_, input, output);
}

ResamplePlan Provider::prepare_resampling(bool linear, const Layout& input,
                                          const Layout& output) {
  const Support support = supports_resampling(linear, input.dims(), output.dims());
  if (!support.ok) {
    throw ProviderError("prepare_resampling: " + support.reason);
  }
  ProviderState& state = *state_;
  // Mixed formats (an upsampling of a channels-last conv output into the graph's plain output)
  // fall to ref:any: resample in the input's format, then reorder.
  FormatBridge bridge = bridge_formats(*this, state, input, output, input.is_channels_last());
  ThreadCountGuard threads(state.omp_threads);
  return wrap_dnnl("prepare_resampling", [&] {
    auto impl = std::make_shared<ResamplePlan::Impl>();
    impl->state = state_;
    impl->src = bridge.source_md;
    impl->dst = bridge.target_md;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    // The factors follow from the dims (output / input), as torch's when it is given sizes.
    const dnnl::resampling_forward::primitive_desc pd(
        state.engine, dnnl::prop_kind::forward_inference,
        linear ? dnnl::algorithm::resampling_linear : dnnl::algorithm::resampling_nearest,
        impl->src, impl->dst, attr);
    impl->set(dnnl::resampling_forward(pd), pd);
    impl->implementation = bridge.describe(impl->implementation);
    impl->bridge = std::move(bridge);
    return ResamplePlan(std::move(impl));
  });
}

}  // namespace onednn
}  // namespace et_cpu_plugin
