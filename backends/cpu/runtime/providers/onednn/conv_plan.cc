// Convolution plans (ConvPlan): layouts, staging, and the splits into rows, images, channels.
#include "backends/cpu/runtime/providers/onednn/onednn_internal.h"

#include <cstring>

namespace et_cpu_plugin {
namespace onednn {

dnnl::convolution_forward::primitive_desc conv_pd(
    const dnnl::engine& engine, const memory::desc& src, const memory::desc& weights,
    const memory::desc& bias, const memory::desc& dst, const Dims& strides,
    const Dims& dilation, const Dims& pad_left, const Dims& pad_right,
    const dnnl::primitive_attr& attr) {
  return dnnl::convolution_forward::primitive_desc(
      engine, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src,
      weights, bias, dst, strides, dilation, pad_left, pad_right, attr);
}

std::vector<int64_t> conv_output_size(const ConvParams& p) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < p.input_size.size(); ++i) {
    const int64_t effective_kernel = p.dilation[i] * (p.kernel_size[i] - 1) + 1;
    out.push_back((p.input_size[i] + 2 * p.padding[i] - effective_kernel) / p.stride[i] + 1);
  }
  return out;
}

Support supports_conv(const ConvParams& p, const PostOps& post_ops) {
  const size_t rank = p.input_size.size();
  if (rank < 1 || rank > 3) {
    return Support::no(
        "conv: input_size " + dims_to_string(p.input_size) + " must have 1 to 3 spatial dims");
  }
  const std::pair<const char*, const std::vector<int64_t>*> fields[] = {
      {"kernel_size", &p.kernel_size},
      {"stride", &p.stride},
      {"padding", &p.padding},
      {"dilation", &p.dilation}};
  for (const auto& field : fields) {
    if (field.second->size() != rank) {
      return Support::no(
          std::string("conv: ") + field.first + " " + dims_to_string(*field.second) + " has " +
          std::to_string(field.second->size()) + " dims, input_size has " +
          std::to_string(rank));
    }
  }
  if (p.batch < 1 || p.in_channels < 1 || p.out_channels < 1 || p.groups < 1) {
    return Support::no("conv: batch, in_channels, out_channels and groups must be positive");
  }
  if (p.in_channels % p.groups || p.out_channels % p.groups) {
    return Support::no(
        "conv: groups " + std::to_string(p.groups) + " must divide in_channels " +
        std::to_string(p.in_channels) + " and out_channels " + std::to_string(p.out_channels));
  }
  for (size_t i = 0; i < rank; ++i) {
    if (p.input_size[i] < 1 || p.kernel_size[i] < 1 || p.stride[i] < 1 || p.padding[i] < 0 ||
        p.dilation[i] < 1) {
      return Support::no("conv: bad size/kernel/stride/padding/dilation at spatial dim " +
                         std::to_string(i));
    }
  }
  for (int64_t size : conv_output_size(p)) {
    if (size < 1) {
      return Support::no("conv: empty output for input_size " + dims_to_string(p.input_size));
    }
  }
  const Support post_ops_ok = check_post_ops(post_ops);
  if (!post_ops_ok.ok) {
    return post_ops_ok;
  }
  // oneDNN 2.6's brgconv segfaulted (seen here, 1D to 3D) when padding covers a whole kernel
  // extent (output points that see only padding) and a residual add is fused with another
  // post-op. oneDNN 3.2 ran all 1,944 such shapes of a probe without crashing, but the decline
  // stays until tests cover those shapes against eager: real networks never pad like that, and
  // the reference provider runs them.
  if (has_add(post_ops) && post_ops.size() > 1) {
    for (size_t i = 0; i < rank; ++i) {
      if (p.padding[i] >= p.dilation[i] * (p.kernel_size[i] - 1) + 1) {
        return Support::no(
            "conv: padding " + dims_to_string(p.padding) +
            " covers a whole kernel extent with add + another post-op (crashes oneDNN 2.6)");
      }
    }
  }
  return Support::yes();
}

struct ConvPlan::Impl {
  std::shared_ptr<ProviderState> state;
  dnnl::convolution_forward primitive;
  std::string implementation;
  memory::desc scratchpad_md;
  OwnedTensor weights;
  OwnedTensor bias;
  bool has_bias = false;
  bool has_add = false;
  Layout input_layout{nullptr};
  Layout output_layout{nullptr};
  // The primitive picks its own src/dst layouts (format `any`, the fast kernels want blocked or
  // channels-last); where the caller's layout differs, run() converts through a staging buffer.
  memory::desc primitive_src_md;
  memory::desc primitive_dst_md;
  bool reorder_input = false;
  bool reorder_output = false;
  dnnl::reorder input_reorder;     // input layout -> primitive src
  dnnl::reorder residual_reorder;  // output layout -> primitive dst (for the residual)
  dnnl::reorder output_reorder;    // primitive dst -> output layout
  std::shared_ptr<AlignedBuffer> staged_input;
  std::shared_ptr<AlignedBuffer> staged_output;
  // Work sharing: the input reorder split into bands of rows (empty = one call), and the
  // primitive's rows (or images, or output channels) split into pieces (empty = one call).
  std::vector<dnnl::reorder> input_bands;
  std::vector<Piece> pieces;
  // Memory objects, made on the first run and re-pointed afterwards (one thread runs a plan at a
  // time): the whole op's arguments, the conversions' (keys below) and each input band's.
  enum Conversion : int { kInput, kStagedInput, kResidual, kStagedOutput, kOutput };
  mutable std::unordered_map<int, memory> args;
  mutable std::unordered_map<int, memory> conversions;
  mutable std::vector<std::unordered_map<int, memory>> band_memories;
};

ConvPlan::ConvPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

const Layout& ConvPlan::input_layout() const {
  return impl_->input_layout;
}
const Layout& ConvPlan::output_layout() const {
  return impl_->output_layout;
}
std::vector<int64_t> ConvPlan::output_dims() const {
  return impl_->output_layout.dims();
}
size_t ConvPlan::weights_bytes() const {
  size_t total = impl_->weights.md.get_size() + (impl_->has_bias ? impl_->bias.md.get_size() : 0);
  for (const Piece& piece : impl_->pieces) {
    total += piece.weights.md.get_size() + (piece.channels > 0 && impl_->has_bias
                                                ? piece.bias.md.get_size()
                                                : 0);
  }
  return total;
}
size_t ConvPlan::scratchpad_bytes() const {
  return impl_->scratchpad_md.get_size();
}
std::string ConvPlan::implementation() const {
  return impl_->implementation;
}
size_t ConvPlan::pieces() const {
  return std::max<size_t>(1, impl_->pieces.size());
}

void ConvPlan::run(const float* input, float* output, const float* residual) const {
  const Impl& p = *impl_;
  ProviderState& state = *p.state;
  if (p.has_add && residual == nullptr) {
    throw ProviderError("conv plan: post-op add needs a residual tensor, got null");
  }
  ThreadCountGuard threads(state.omp_threads);
  const memory::desc& input_md = p.input_layout.impl().md;
  const memory::desc& output_md = p.output_layout.impl().md;
  // What the primitive reads and writes: the caller's buffers, or the staging buffers.
  const float* src_data = p.reorder_input ? static_cast<const float*>(p.staged_input->data())
                                          : input;
  float* dst_data = p.reorder_output ? static_cast<float*>(p.staged_output->data()) : output;
  // With pieces and no staging, each piece copies its own slice of the residual (in parallel).
  const bool copy_residual_per_piece =
      !p.pieces.empty() && p.has_add && !p.reorder_output && residual != output;
  wrap_dnnl("layout conversion", [&] {
    if (p.reorder_input) {
      if (p.input_bands.empty()) {
        p.input_reorder.execute(
            state.stream, point(p.conversions, Impl::kInput, input_md, state.engine, input),
            point(p.conversions, Impl::kStagedInput, p.primitive_src_md, state.engine, src_data));
      } else {
        state.pool->run(p.input_bands.size(), [&](size_t index, int worker) {
          wrap_dnnl("input reorder band", [&] {
            std::unordered_map<int, memory>& memories = p.band_memories[index];
            p.input_bands[index].execute(
                state.piece_streams[worker],
                point(memories, DNNL_ARG_FROM, input_md, state.engine, input),
                point(memories, DNNL_ARG_TO, p.primitive_src_md, state.engine, src_data));
            state.piece_streams[worker].wait();
          });
        });
      }
    }
    if (p.has_add) {
      // The sum post-op adds what dst holds before the call.
      if (p.reorder_output) {
        p.residual_reorder.execute(
            state.stream, point(p.conversions, Impl::kResidual, output_md, state.engine, residual),
            point(p.conversions, Impl::kStagedOutput, p.primitive_dst_md, state.engine,
                  dst_data));
      } else if (residual != output && !copy_residual_per_piece) {
        std::memcpy(output, residual, p.output_layout.size_bytes());
      }
    }
    state.stream.wait();
  });
  if (!p.pieces.empty()) {
    const int64_t out_channels = p.output_layout.dims()[1];
    // Where a channel piece reads its residual slice: the staged output already holds it.
    const float* residual_rows = p.reorder_output ? dst_data : residual;
    state.pool->run(p.pieces.size(), [&](size_t index, int worker) {
      const Piece& piece = p.pieces[index];
      const bool channel_piece = piece.channels > 0;
      float* piece_dst = channel_piece ? static_cast<float*>(state.piece_outputs[worker].data())
                                       : dst_data + piece.dst_offset;
      if (channel_piece && p.has_add) {
        copy_rows(residual_rows + piece.first_channel, out_channels, piece_dst, piece.channels,
                  piece.pixels, piece.channels);
      } else if (copy_residual_per_piece) {
        std::memcpy(piece_dst, residual + piece.dst_offset, piece.dst_md.get_size());
      }
      const OwnedTensor& weights = channel_piece ? piece.weights : p.weights;
      const OwnedTensor& bias = channel_piece ? piece.bias : p.bias;
      execute_piece(state, piece, worker,
                    piece_data(src_data + piece.src_offset, piece_dst, weights,
                              p.has_bias ? &bias : nullptr));
      if (channel_piece) {
        copy_rows(piece_dst, piece.channels, dst_data + piece.first_channel, out_channels,
                  piece.pixels, piece.channels);
      }
    });
  } else {
    execute_whole(state, p.primitive, p.args, p.primitive_src_md, p.primitive_dst_md,
                  p.scratchpad_md,
                  piece_data(src_data, dst_data, p.weights, p.has_bias ? &p.bias : nullptr));
  }
  if (p.reorder_output) {
    wrap_dnnl("output reorder", [&] {
      p.output_reorder.execute(
          state.stream,
          point(p.conversions, Impl::kStagedOutput, p.primitive_dst_md, state.engine, dst_data),
          point(p.conversions, Impl::kOutput, output_md, state.engine, output));
      state.stream.wait();
    });
  }
}

namespace {

// Output channels per channel piece at least (one AVX-512 register of fp32).
constexpr int64_t kConvChannels = 16;

// Splits a weight-heavy convolution (weights larger than its activations: the deep layers of a
// CNN) into blocks of output channels, so each piece streams only its share of the weights.
// Each piece owns its block, reordered here from torch's layout (the plan then keeps no whole
// copy), reads the whole input and computes a dense channels-last output of its channels, which
// run() copies into place. Empty result: no such split.
std::vector<Piece> split_conv_channels(
    ProviderState& state,
    const ConvParams& params,
    const ConvPlan::Impl& plan,
    const Dims& src_dims,
    const Dims& dst_dims,
    const Dims& strides,
    const Dims& dilation,
    const dnnl::primitive_attr& attr,
    const float* weight,
    const float* bias,
    double flops) {
  const int64_t per_channel = static_cast<int64_t>(product(params.kernel_size)) *
                              params.in_channels;
  const size_t count = state.pieces_for(flops, params.out_channels / kConvChannels);
  std::vector<Piece> pieces = make_pieces(state, count, [&](size_t i, Piece& piece) {
    const auto [begin, end] = block_slice(params.out_channels, kConvChannels, count, i);
    piece.first_channel = begin;
    piece.channels = end - begin;
    piece.pixels = static_cast<int64_t>(product(dst_dims)) / params.out_channels;
    Dims piece_dst = dst_dims;
    piece_dst[1] = piece.channels;
    Dims weight_dims{piece.channels, params.in_channels};
    weight_dims.insert(weight_dims.end(), params.kernel_size.begin(), params.kernel_size.end());
    piece.src_md = plan.primitive_src_md;
    piece.dst_md = channels_last_md(piece_dst);
    const Dims padding(params.padding.begin(), params.padding.end());
    const auto pd = conv_pd(state.engine, piece.src_md, any_md(weight_dims),
                            bias ? any_md({piece.channels}) : memory::desc(), piece.dst_md,
                            strides, dilation, padding, padding, attr);
    if (pd.impl_info_str() != plan.implementation) {
      return false;
    }
    set_primitive<dnnl::convolution_forward>(piece, pd);
    piece.weights = reorder_constant(
        state, plain_md(weight_dims), weight + begin * per_channel, pd.weights_desc());
    if (bias) {
      piece.bias =
          reorder_constant(state, plain_md({piece.channels}), bias + begin, pd.bias_desc());
    }
    return true;
  });
  for (const Piece& piece : pieces) {
    state.reserve_piece_output(piece.dst_md.get_size());
  }
  return pieces;
}

// Splits a convolution whose primitive reads and writes channels-last data into pieces: blocks
// of output channels when its weights outweigh its activations (split_conv_channels), else
// images of the batch or (batch 1) bands of output rows along the first spatial dim, each band
// reading the input rows it needs with its own top/bottom padding. Bands share the plan's
// reordered weights, so each must accept their layout with the same implementation; if any
// would not, the plan stays whole (empty result).
std::vector<Piece> split_conv(
    ProviderState& state,
    const ConvParams& params,
    const ConvPlan::Impl& plan,
    const Dims& src_dims,
    const Dims& dst_dims,
    const Dims& strides,
    const Dims& dilation,
    const dnnl::primitive_attr& attr,
    const dnnl::convolution_forward::primitive_desc& whole,
    const float* weight,
    const float* bias) {
  if (plan.primitive_src_md != channels_last_md(src_dims) ||
      plan.primitive_dst_md != channels_last_md(dst_dims)) {
    return {};
  }
  const std::vector<int64_t> out_size(dst_dims.begin() + 2, dst_dims.end());
  const double flops = 2.0 * product(dst_dims) * (params.in_channels / params.groups) *
                       product(params.kernel_size);
  const size_t activation_bytes =
      plan.primitive_src_md.get_size() + plan.primitive_dst_md.get_size();
  if (params.groups == 1 && whole.weights_desc().get_size() > activation_bytes) {
    std::vector<Piece> pieces = split_conv_channels(
        state, params, plan, src_dims, dst_dims, strides, dilation, attr, weight, bias, flops);
    if (!pieces.empty()) {
      return pieces;
    }
  }
  const bool by_batch = params.batch > 1;
  const int64_t units = by_batch ? params.batch : out_size[0];
  const size_t count = state.pieces_for(flops, units);
  // Floats per image, and per row of the first spatial dim (channels-last: contiguous).
  const int64_t src_row = static_cast<int64_t>(product(src_dims, 3)) * params.in_channels;
  const int64_t dst_row = static_cast<int64_t>(product(dst_dims, 3)) * params.out_channels;
  const int64_t src_image = src_row * src_dims[2];
  const int64_t dst_image = dst_row * dst_dims[2];
  return make_pieces(state, count, [&](size_t i, Piece& piece) {
    const auto [begin, end] = slice_of(units, count, i);
    Dims piece_src = src_dims;
    Dims piece_dst = dst_dims;
    Dims pad_left(params.padding.begin(), params.padding.end());
    Dims pad_right = pad_left;
    if (by_batch) {
      piece_src[0] = piece_dst[0] = end - begin;
      piece.src_offset = static_cast<size_t>(begin * src_image);
      piece.dst_offset = static_cast<size_t>(begin * dst_image);
    } else {
      // Input rows [first, last) that output rows [begin, end) read, padding included.
      const int64_t first = begin * params.stride[0] - params.padding[0];
      const int64_t last = (end - 1) * params.stride[0] - params.padding[0] +
                           params.dilation[0] * (params.kernel_size[0] - 1) + 1;
      const int64_t lo = std::max<int64_t>(0, first);
      const int64_t hi = std::min<int64_t>(params.input_size[0], last);
      if (hi <= lo) {
        return false;  // a band that sees only padding: not worth a special case
      }
      piece_src[2] = hi - lo;
      piece_dst[2] = end - begin;
      pad_left[0] = lo - first;
      pad_right[0] = last - hi;
      piece.src_offset = static_cast<size_t>(lo * src_row);
      piece.dst_offset = static_cast<size_t>(begin * dst_row);
    }
    piece.src_md = channels_last_md(piece_src);
    piece.dst_md = channels_last_md(piece_dst);
    const auto pd = conv_pd(state.engine, piece.src_md, whole.weights_desc(),
                            plan.has_bias ? whole.bias_desc() : memory::desc(), piece.dst_md,
                            strides, dilation, pad_left, pad_right, attr);
    if (pd.impl_info_str() != plan.implementation) {
      return false;  // the band would run a slower kernel: keep the op whole
    }
    set_primitive<dnnl::convolution_forward>(piece, pd);
    return true;
  });
}

}  // namespace

ConvPlan Provider::prepare_conv(
    const ConvParams& params,
    const float* weight,
    const float* bias,
    const PostOps& post_ops,
    const ConvLayouts& layouts) {
  const Support support = supports_conv(params, post_ops);
  if (!support.ok) {
    throw ProviderError("prepare_conv: " + support.reason);
  }
  if (weight == nullptr) {
    throw ProviderError("prepare_conv: weight is null");
  }
  ProviderState& state = *state_;
  ThreadCountGuard threads(state.omp_threads);
  const size_t rank = params.input_size.size();
  const std::vector<int64_t> out_size = conv_output_size(params);

  Dims src_dims{params.batch, params.in_channels};
  src_dims.insert(src_dims.end(), params.input_size.begin(), params.input_size.end());
  Dims dst_dims{params.batch, params.out_channels};
  dst_dims.insert(dst_dims.end(), out_size.begin(), out_size.end());
  // torch's [C_out, C_in/g, *k] is oneDNN's [g, C_out/g, C_in/g, *k] in the same memory order.
  Dims weight_dims;
  if (params.groups > 1) {
    weight_dims = {
        params.groups, params.out_channels / params.groups, params.in_channels / params.groups};
  } else {
    weight_dims = {params.out_channels, params.in_channels};
  }
  weight_dims.insert(weight_dims.end(), params.kernel_size.begin(), params.kernel_size.end());

  Dims strides(params.stride.begin(), params.stride.end());
  Dims padding(params.padding.begin(), params.padding.end());
  Dims dilation;
  for (size_t i = 0; i < rank; ++i) {
    dilation.push_back(params.dilation[i] - 1);  // oneDNN counts the gaps, torch the step
  }

  if (layouts.input && layouts.input->dims() != std::vector<int64_t>(src_dims)) {
    throw ProviderError(
        "prepare_conv: input layout dims " + dims_to_string(layouts.input->dims()) +
        " != convolution input dims " + dims_to_string(src_dims));
  }
  const memory::desc given_src_md = layouts.input ? layouts.input->impl().md : plain_md(src_dims);
  const memory::desc bias_md = bias ? any_md({params.out_channels}) : memory::desc();

  return wrap_dnnl("prepare_conv", [&] {
    using Impl = ConvPlan::Impl;
    auto pd = conv_pd(state.engine, any_md(src_dims), any_md(weight_dims), bias_md,
                      any_md(dst_dims), strides, dilation, padding, padding, make_attr(post_ops));
    // oneDNN 3.x has no brgconv for 1 to 4 input channels (fp32, 1D/2D: the stem on the graph
    // input); for `any` its jit "first convolution" kernel reads the plain input and writes
    // nChw16c, which row bands cannot split and a channels-last consumer must reorder. The same
    // kernel runs channels-last in and out at the same speed (7x7 3 -> 64 @224: 2.06 ms on one
    // core either way, as oneDNN 2.6's brgconv, which chose channels-last): take that, so the
    // input reorder splits into bands and the convolution into row pieces as before.
    if (pd.src_desc() == plain_md(src_dims) && pd.dst_desc().get_inner_nblks() > 0) {
      try {
        const auto channels_last = conv_pd(
            state.engine, channels_last_md(src_dims), any_md(weight_dims), bias_md,
            channels_last_md(dst_dims), strides, dilation, padding, padding, make_attr(post_ops));
        if (std::string(channels_last.impl_info_str()) == pd.impl_info_str()) {
          pd = channels_last;
        }
      } catch (const dnnl::error&) {
        // keep oneDNN's choice
      }
    }

    auto impl = std::make_shared<Impl>();
    impl->state = state_;
    impl->primitive = dnnl::convolution_forward(pd);
    impl->implementation = pd.impl_info_str();
    impl->scratchpad_md = pd.scratchpad_desc();
    state.reserve_scratchpad(impl->scratchpad_md);
    impl->has_bias = bias != nullptr;
    impl->has_add = has_add(post_ops);
    impl->primitive_src_md = pd.src_desc();
    impl->primitive_dst_md = pd.dst_desc();
    const memory::desc out_md = layouts.output == OutputLayout::kBest
        ? impl->primitive_dst_md
        : layouts.output == OutputLayout::kChannelsLast ? channels_last_md(dst_dims)
                                                         : plain_md(dst_dims);
    impl->input_layout = layout_of(given_src_md);
    impl->output_layout = layout_of(out_md);
    const auto make_reorder = [&](const memory::desc& from, const memory::desc& to) {
      return dnnl::reorder(dnnl::reorder::primitive_desc(state.engine, from, state.engine, to));
    };
    if (impl->primitive_src_md != given_src_md) {
      impl->reorder_input = true;
      impl->input_reorder = make_reorder(given_src_md, impl->primitive_src_md);
      impl->staged_input = std::make_shared<AlignedBuffer>();
      impl->staged_input->reserve(impl->primitive_src_md.get_size());
      state.staging_bytes += impl->primitive_src_md.get_size();
      impl->input_bands = split_reorder(state, given_src_md, impl->primitive_src_md);
      impl->band_memories.resize(impl->input_bands.size());
    }
    if (impl->primitive_dst_md != out_md) {
      impl->reorder_output = true;
      impl->output_reorder = make_reorder(impl->primitive_dst_md, out_md);
      impl->residual_reorder = make_reorder(out_md, impl->primitive_dst_md);
      impl->staged_output = std::make_shared<AlignedBuffer>();
      impl->staged_output->reserve(impl->primitive_dst_md.get_size());
      state.staging_bytes += impl->primitive_dst_md.get_size();
    }
    impl->pieces = split_conv(state, params, *impl, src_dims, dst_dims, strides, dilation,
                              make_attr(post_ops), pd, weight, bias);
    if (!impl->pieces.empty()) {
      impl->implementation += ", " + std::to_string(impl->pieces.size()) + " pieces";
    }
    if (!impl->input_bands.empty()) {
      impl->implementation +=
          ", input reordered in " + std::to_string(impl->input_bands.size()) + " bands";
    }
    // Channel pieces own their weight blocks; the whole op and row bands use the plan's.
    if (impl->pieces.empty() || impl->pieces.front().channels == 0) {
      impl->weights = reorder_constant(state, plain_md(weight_dims), weight, pd.weights_desc());
      if (bias) {
        impl->bias =
            reorder_constant(state, plain_md({params.out_channels}), bias, pd.bias_desc());
      }
    }
    return ConvPlan(std::move(impl));
  });
}

}  // namespace onednn
}  // namespace et_cpu_plugin
