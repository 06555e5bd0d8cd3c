// Pooling plans (PoolPlan): max pooling, average pooling and global average pooling.
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_internal.h"

#include "backends/cpu/runtime/providers/optimized/common/switches.h"

namespace et_cpu_plugin {
namespace onednn {

namespace {

// The right/bottom padding that makes oneDNN's floor formula give the requested output size:
// torch's padding in floor mode (or less, when the last rows are dropped), more in ceil mode.
int64_t pool_right_padding(const PoolParams& p, size_t i) {
  return std::max<int64_t>(
      0, (p.output_size[i] - 1) * p.stride[i] + p.kernel_size[i] - p.input_size[i] - p.padding[i]);
}

}  // namespace

Support supports_max_pool(const PoolParams& p) {
  const size_t rank = p.input_size.size();
  if (rank < 1 || rank > 3 || p.output_size.size() != rank || p.kernel_size.size() != rank ||
      p.stride.size() != rank || p.padding.size() != rank) {
    return Support::no("max_pool: 1 to 3 spatial dims, every size list of the same rank");
  }
  if (p.batch < 1 || p.channels < 1) {
    return Support::no("max_pool: batch and channels must be positive");
  }
  for (size_t i = 0; i < rank; ++i) {
    if (p.kernel_size[i] < 1 || p.stride[i] < 1 || p.padding[i] < 0 || p.output_size[i] < 1 ||
        2 * p.padding[i] > p.kernel_size[i]) {
      return Support::no("max_pool: kernel/stride positive, 0 <= padding <= kernel / 2");
    }
    const int64_t right = pool_right_padding(p, i);
    if (right >= p.kernel_size[i] ||
        (p.input_size[i] + p.padding[i] + right - p.kernel_size[i]) / p.stride[i] + 1 !=
            p.output_size[i]) {
      return Support::no("max_pool: output size does not match input, kernel, stride, padding");
    }
  }
  return Support::yes();
}

Support supports_avg_pool(const PoolParams& p, bool count_include_pad) {
  // The same window geometry as max pooling (torch's avg_pool2d has the same constraints).
  const Support geometry = supports_max_pool(p);
  if (!geometry.ok) {
    return Support::no("avg_pool" + geometry.reason.substr(std::string("max_pool").size()));
  }
  for (size_t i = 0; count_include_pad && i < p.input_size.size(); ++i) {
    // torch divides a ceil-mode window that runs past the right padding by the cells up to the
    // padding's end; oneDNN (include_padding) by the whole kernel.
    if (pool_right_padding(p, i) > p.padding[i]) {
      return Support::no(
          "avg_pool: count_include_pad with a ceil-mode window past the padding (torch's "
          "divisor differs from oneDNN's)");
    }
  }
  return Support::yes();
}

struct PoolPlan::Impl : WholeOp {
  FormatBridge bridge;  // pools in the input's format; reorders into the output after
  // Bands of output rows (batch 1) or images on the pool, when it pools channels-last on the
  // caller's buffers (split_pool); empty: one call on the calling thread.
  std::vector<Piece> pieces;
};

PoolPlan::PoolPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

std::string PoolPlan::implementation() const {
  return impl_->implementation;
}

size_t PoolPlan::pieces() const {
  return std::max<size_t>(1, impl_->pieces.size());
}

void PoolPlan::run(const float* input, float* output) const {
  const Impl& plan = *impl_;
  if (plan.pieces.empty()) {
    plan.bridge.run(plan, input, output);
    return;
  }
  ThreadCountGuard threads(plan.state->omp_threads);
  run_pieces(*plan.state, plan.pieces, [&](const Piece& piece) {
    PieceData data;
    data.src = input + piece.src_offset;
    data.dst = output + piece.dst_offset;
    return data;
  });
}

namespace {

// A pooling of `algorithm` from `src` to `dst` (its scratchpad in the provider's shared one).
std::shared_ptr<PoolPlan::Impl> make_pool(const std::shared_ptr<ProviderState>& state,
                                          const char* what, dnnl::algorithm algorithm,
                                          const memory::desc& src, const memory::desc& dst,
                                          const Dims& strides, const Dims& kernel,
                                          const Dims& pad_l, const Dims& pad_r) {
  ThreadCountGuard threads(state->omp_threads);
  return wrap_dnnl(what, [&] {
    auto impl = std::make_shared<PoolPlan::Impl>();
    impl->state = state;
    impl->src = src;
    impl->dst = dst;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    // No dilation (oneDNN counts the gaps between window taps: 0 = dense).
    const dnnl::pooling_forward::primitive_desc pd(
        state->engine, dnnl::prop_kind::forward_inference, algorithm, src, dst, strides, kernel,
        Dims(kernel.size(), 0), pad_l, pad_r, attr);
    impl->set(dnnl::pooling_forward(pd), pd);
    return impl;
  });
}

// The work of a window pooling, weighed against min_task_flops (a compute-bound core's ~15 us):
// per window tap a load and a max / add, about 8 flops' time each (ResNet-50-style's 3x3 stride-2
// max pool, 32@112x112 -> 56x56 channels-last: 82 us on one core for 0.9 M taps).
constexpr double kPoolFlopsPerTap = 8.0;

// Splits a 2-D pooling that runs channels-last on the caller's buffers into images of the batch or
// (batch 1) bands of output rows, each reading the input rows its windows cover with its own
// top / bottom padding (split_images_or_rows), when its work is worth it (pieces_for) and every
// piece runs the whole op's kernel; empty: it stays whole. ET_CPU_POOL_BANDS=0 (read at prepare):
// never (one call on the calling thread, as before).
std::vector<Piece> split_pool(ProviderState& state, dnnl::algorithm algorithm,
                              const PoolParams& params, const Dims& src_dims,
                              const Dims& dst_dims, const Dims& strides, const Dims& kernel,
                              const Dims& left, const Dims& right,
                              const std::string& implementation) {
  if (params.input_size.size() != 2 || !kernel_switched_on("ET_CPU_POOL_BANDS")) {
    return {};
  }
  const double flops = kPoolFlopsPerTap * static_cast<double>(product(dst_dims)) *
                       static_cast<double>(product(kernel));
  // Input rows [lo, hi) that output rows [begin, end) read, and the padding beyond them.
  const auto band = [&](int64_t begin, int64_t end, BandRows* rows) {
    const int64_t first = begin * params.stride[0] - params.padding[0];
    const int64_t last = (end - 1) * params.stride[0] - params.padding[0] + params.kernel_size[0];
    rows->lo = std::max<int64_t>(0, first);
    rows->hi = std::min<int64_t>(params.input_size[0], last);
    if (rows->hi <= rows->lo) {
      return false;  // a band of padding only
    }
    rows->pad_left = rows->lo - first;
    rows->pad_right = last - rows->hi;
    return true;
  };
  const auto make = [&](Piece& piece, const Dims& pad_left, const Dims& pad_right) {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::pooling_forward::primitive_desc pd(
        state.engine, dnnl::prop_kind::forward_inference, algorithm, piece.src_md, piece.dst_md,
        strides, kernel, Dims(kernel.size(), 0), pad_left, pad_right, attr);
    if (pd.impl_info_str() != implementation) {
      return false;  // a band would run another (slower) kernel: keep the op whole
    }
    set_primitive<dnnl::pooling_forward>(piece, pd);
    return true;
  };
  return split_images_or_rows(state, src_dims, dst_dims, flops, left, right, band, make);
}

// A max or average pooling over `params`' windows between `input` and `output`, whose dims must be
// the pooling's (`what` names the caller in errors).
PoolPlan make_window_pool_plan(Provider& provider, const std::shared_ptr<ProviderState>& state,
                               const char* what, dnnl::algorithm algorithm,
                               const PoolParams& params, const Layout& input,
                               const Layout& output) {
  Dims src_dims{params.batch, params.channels};
  src_dims.insert(src_dims.end(), params.input_size.begin(), params.input_size.end());
  Dims dst_dims{params.batch, params.channels};
  dst_dims.insert(dst_dims.end(), params.output_size.begin(), params.output_size.end());
  if (input.dims() != std::vector<int64_t>(src_dims) ||
      output.dims() != std::vector<int64_t>(dst_dims)) {
    throw ProviderError(std::string(what) + ": layout dims differ from the pooling's");
  }
  Dims right;
  for (size_t i = 0; i < params.input_size.size(); ++i) {
    right.push_back(pool_right_padding(params, i));
  }
  const Dims strides(params.stride.begin(), params.stride.end());
  const Dims kernel(params.kernel_size.begin(), params.kernel_size.end());
  const Dims left(params.padding.begin(), params.padding.end());
  // Mixed formats (a pool between a channels-last conv output and a flatten) fell to ref:any:
  // 4.9 ms against 0.03 ms at 8x64x16x16. Pool in the input's format, then reorder (the output
  // is the smaller side).
  FormatBridge bridge = bridge_formats(provider, *state, input, output, input.is_channels_last());
  std::shared_ptr<PoolPlan::Impl> impl = make_pool(
      state, what, algorithm, bridge.source_md, bridge.target_md, strides, kernel, left, right);
  if (!bridge.to_source && !bridge.to_output &&
      bridge.source_md == channels_last_md(src_dims) &&
      bridge.target_md == channels_last_md(dst_dims)) {
    ThreadCountGuard threads(state->omp_threads);
    impl->pieces = wrap_dnnl(what, [&] {
      return split_pool(*state, algorithm, params, src_dims, dst_dims, strides, kernel, left,
                        right, impl->implementation);
    });
    impl->implementation += pieces_note(impl->pieces.size());
  }
  impl->implementation = bridge.describe(impl->implementation);
  impl->bridge = std::move(bridge);
  return PoolPlan(std::move(impl));
}

}  // namespace

PoolPlan Provider::prepare_max_pool(
    const PoolParams& params, const Layout& input, const Layout& output) {
  const Support support = supports_max_pool(params);
  if (!support.ok) {
    throw ProviderError("prepare_max_pool: " + support.reason);
  }
  return make_window_pool_plan(*this, state_, "prepare_max_pool", dnnl::algorithm::pooling_max,
                               params, input, output);
}

PoolPlan Provider::prepare_avg_pool(const PoolParams& params, bool count_include_pad,
                                    const Layout& input, const Layout& output) {
  const Support support = supports_avg_pool(params, count_include_pad);
  if (!support.ok) {
    throw ProviderError("prepare_avg_pool: " + support.reason);
  }
  return make_window_pool_plan(*this, state_, "prepare_avg_pool",
                               count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                                 : dnnl::algorithm::pooling_avg_exclude_padding,
                               params, input, output);
}

PoolPlan Provider::prepare_global_average_pool(const Layout& input, const Layout& output) {
  const std::vector<int64_t>& in = input.dims();
  const std::vector<int64_t>& out = output.dims();
  bool ok = in.size() >= 3 && in.size() <= 5 && out.size() == in.size() && out[0] == in[0] &&
            out[1] == in[1];
  for (size_t i = 2; ok && i < in.size(); ++i) ok = in[i] >= 1 && out[i] == 1;
  if (!ok) {
    throw ProviderError("prepare_global_average_pool: input " + dims_to_string(in) +
                        " and output " + dims_to_string(out) +
                        " are not {N, C, *spatial} and {N, C, 1, ...}");
  }
  // With one spatial position, channels-last and plain outputs are the same bytes; oneDNN's jit
  // pooling wants the input's format on both sides (a plain output from a channels-last input
  // falls to ref:any, 490 vs 2.6 us at 96@14x14).
  const memory::desc dst = input.is_channels_last()
                               ? channels_last_md(Dims(out.begin(), out.end()))
                               : output.impl().md;
  const Dims window(in.begin() + 2, in.end());
  const Dims zeros(window.size(), 0);
  return PoolPlan(make_pool(state_, "prepare_global_average_pool",
                            dnnl::algorithm::pooling_avg_exclude_padding, input.impl().md, dst,
                            Dims(window.size(), 1), window, zeros, zeros));
}

}  // namespace onednn
}  // namespace et_cpu_plugin
