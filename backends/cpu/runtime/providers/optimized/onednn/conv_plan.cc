// Convolutions (prepare_conv, a ConvLikePlan): the primitive's layouts, our row_gemm for a
// product over one pixel, our own depthwise, stem, 1x1 (weight stream, or a gated project split
// by pixels) and 3x3 kernels where they are wanted, and the splits into row bands, images,
// output-channel blocks.
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_internal.h"

#include <algorithm>

#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/kernels/depthwise_conv.h"
#include "backends/cpu/runtime/providers/optimized/kernels/pointwise_conv.h"
#include "backends/cpu/runtime/providers/optimized/kernels/stem_conv.h"
#include "backends/cpu/runtime/providers/optimized/kernels/stream_conv.h"
#include "backends/cpu/runtime/providers/optimized/kernels/winograd_conv.h"
#include "backends/cpu/runtime/providers/optimized/kernels/row_gemm.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

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

namespace {

// ET_CPU_CONV_BAND_WEIGHTS=0: row bands only take the whole op's weight layout (for measuring;
// a 1x1 convolution whose bands want another then runs whole).
bool band_weights_enabled() {
  return kernel_switched_on("ET_CPU_CONV_BAND_WEIGHTS");
}

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
    const ConvLikePlan::Impl& plan,
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
  // One block per thread (ET_CPU_CONV_CHANNEL_SHARES, on unless "0", read at prepare): every
  // run streams these weights from L3, and two blocks per thread each paid the stream's ramp
  // (ResNet-50-style stage 4, cold weights, 2 threads: 3x3 256@7 247 -> 238 us, 1x1 256->1024
  // 130 -> 123 us); "0" gives the kPiecesPerThread blocks per thread of the other splits.
  int64_t blocks = params.out_channels / kConvChannels;
  if (state.pool && kernel_switched_on("ET_CPU_CONV_CHANNEL_SHARES")) {
    blocks = std::min<int64_t>(blocks, state.pool->size());
  }
  const size_t count = state.pieces_for(flops, blocks);
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
// reordered weights, so each must accept one weight layout with the same implementation: the
// whole op's, else (band_weights_enabled) the one the first band picks, which *weights_md then
// names (the plan reorders its weights into it). If no layout suits every band, the plan stays
// whole (empty result).
std::vector<Piece> split_conv(
    ProviderState& state,
    const ConvParams& params,
    const ConvLikePlan::Impl& plan,
    const Dims& src_dims,
    const Dims& dst_dims,
    const Dims& strides,
    const Dims& dilation,
    const dnnl::primitive_attr& attr,
    const dnnl::convolution_forward::primitive_desc& whole,
    const Dims& weight_dims,
    const float* weight,
    const float* bias,
    memory::desc* weights_md) {
  *weights_md = whole.weights_desc();
  if (plan.primitive_src_md != channels_last_md(src_dims) ||
      plan.primitive_dst_md != channels_last_md(dst_dims)) {
    return {};
  }
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
  const Dims padding(params.padding.begin(), params.padding.end());
  // Input rows [first, last) that output rows [begin, end) read, padding included.
  const auto band = [&](int64_t begin, int64_t end, BandRows* rows) {
    const int64_t first = begin * params.stride[0] - params.padding[0];
    const int64_t last = (end - 1) * params.stride[0] - params.padding[0] +
                         params.dilation[0] * (params.kernel_size[0] - 1) + 1;
    rows->lo = std::max<int64_t>(0, first);
    rows->hi = std::min<int64_t>(params.input_size[0], last);
    if (rows->hi <= rows->lo) {
      return false;  // a band that sees only padding: not worth a special case
    }
    rows->pad_left = rows->lo - first;
    rows->pad_right = last - rows->hi;
    return true;
  };
  // The weight layout every band must take; `any` until the first band of a retry picks one.
  memory::desc shared = whole.weights_desc();
  const auto make = [&](Piece& piece, const Dims& pad_left, const Dims& pad_right) {
    const memory::desc weights = shared.is_zero() ? any_md(weight_dims) : shared;
    const auto pd = conv_pd(state.engine, piece.src_md, weights,
                            plan.has_bias ? whole.bias_desc() : memory::desc(), piece.dst_md,
                            strides, dilation, pad_left, pad_right, attr);
    if (pd.impl_info_str() != plan.implementation) {
      return false;  // the band would run a slower kernel: keep the op whole
    }
    shared = pd.weights_desc();
    set_primitive<dnnl::convolution_forward>(piece, pd);
    return true;
  };
  std::vector<Piece> pieces =
      split_images_or_rows(state, src_dims, dst_dims, flops, padding, padding, band, make);
  // oneDNN's 1x1 kernels block the weights by the shape they see: a band with fewer rows wants
  // another blocking than the whole op, and with the whole op's it falls to a slower kernel.
  // Then the bands take the first band's blocking (the plan reorders its weights into it once).
  if (pieces.empty() && band_weights_enabled()) {
    shared = memory::desc();
    pieces = split_images_or_rows(state, src_dims, dst_dims, flops, padding, padding, band, make);
    if (!pieces.empty()) {
      *weights_md = shared;
    }
  }
  return pieces;
}

// Whether the convolution is a product over one pixel per image that RowGemm runs: a dense 1x1
// kernel on a 1x1 input (squeeze-excite's convolutions after the global pool), the input in a
// layout where each image's channels are contiguous (plain and channels-last coincide there).
bool is_row_product(const ConvParams& p, const PostOps& post_ops, const memory::desc& src_md) {
  const auto ones = [](const std::vector<int64_t>& v) {
    return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 1; });
  };
  const bool no_padding = std::all_of(p.padding.begin(), p.padding.end(),
                                      [](int64_t x) { return x == 0; });
  if (p.groups != 1 || !ones(p.input_size) || !ones(p.kernel_size) || !no_padding) {
    return false;
  }
  Dims src_dims{p.batch, p.in_channels};
  src_dims.insert(src_dims.end(), p.input_size.begin(), p.input_size.end());
  const bool dense = src_md == plain_md(src_dims) || src_md == channels_last_md(src_dims);
  return dense && p.batch <= kRowGemmMaxRows && row_gemm_supports(p.batch, post_ops);
}

// The plan of a row product (is_row_product): our kernel, the caller's layouts as they are.
ConvPlan prepare_row_product(const std::shared_ptr<ProviderState>& state, const ConvParams& p,
                             const float* weight, const float* bias, const PostOps& post_ops,
                             const memory::desc& src_md, OutputLayout output) {
  auto impl = std::make_shared<ConvLikePlan::Impl>();
  impl->state = state;
  impl->own = std::make_shared<RowGemmRun>(
      prepare_row_gemm(*state, p.batch, p.in_channels, p.out_channels, weight,
                       /*weight_is_k_by_n=*/false, bias, post_ops, &impl->implementation));
  impl->has_bias = bias != nullptr;
  impl->has_add = has_add(post_ops);
  Dims dst_dims{p.batch, p.out_channels};
  dst_dims.insert(dst_dims.end(), p.input_size.size(), 1);
  impl->input_layout = layout_of(src_md);
  impl->output_layout = layout_of(output == OutputLayout::kPlain ? plain_md(dst_dims)
                                                                 : channels_last_md(dst_dims));
  return ConvPlan(std::move(impl));
}

// The window (conv_window.h) of a dense 2D convolution: one image's extents, kernel, strides
// and top / left padding.
ConvWindow window_of(const ConvParams& p) {
  const std::vector<int64_t> out = conv_output_size(p);
  ConvWindow w;
  w.in_h = p.input_size[0];
  w.in_w = p.input_size[1];
  w.out_h = out[0];
  w.out_w = out[1];
  w.kernel_h = p.kernel_size[0];
  w.kernel_w = p.kernel_size[1];
  w.stride_h = p.stride[0];
  w.stride_w = p.stride[1];
  w.pad_top = p.padding[0];
  w.pad_left = p.padding[1];
  return w;
}

// What our own 2D kernels on channels-last rows (depthwise, StreamConv, WinogradConv) need of a
// convolution: 2D, dense (dilation 1), a channels-last input, and a channels-last output asked
// for (or oneDNN's choice, which is channels-last for fp32 here).
bool channels_last_2d(const ConvParams& p, const memory::desc& src_md, OutputLayout output) {
  if (p.input_size.size() != 2 || p.dilation[0] != 1 || p.dilation[1] != 1 ||
      output == OutputLayout::kPlain) {
    return false;
  }
  const Dims src_dims{p.batch, p.in_channels, p.input_size[0], p.input_size[1]};
  return src_md == channels_last_md(src_dims);
}

// The shape our depthwise kernel (depthwise_conv.h) computes for a 2D convolution with one
// filter per channel (groups == in == out channels), dense (dilation 1), reading a channels-last
// input and asked for a channels-last output (or oneDNN's choice, which is channels-last for
// fp32 here), with post-ops it applies in registers; nothing when any of that fails.
std::optional<DepthwiseShape> own_depthwise_shape(const ConvParams& p, const PostOps& post_ops,
                                                  const memory::desc& src_md,
                                                  OutputLayout output) {
  if (p.groups != p.in_channels || p.out_channels != p.in_channels ||
      !channels_last_2d(p, src_md, output)) {
    return std::nullopt;
  }
  DepthwiseShape shape;
  static_cast<ConvWindow&>(shape) = window_of(p);
  shape.channels = p.in_channels;
  if (!own_depthwise_wanted(shape, post_ops)) return std::nullopt;
  return shape;
}

// What every plan on our own 2D kernels records: the given input layout, a channels-last output
// of `window`'s size, and no residual add (a plan on WinogradConv, the one that takes one, sets
// has_add afterwards).
void set_own_plan_layouts(ConvLikePlan::Impl& impl, const ConvParams& p, const ConvWindow& window,
                          bool has_bias, const memory::desc& src_md) {
  impl.has_bias = has_bias;
  impl.has_add = false;
  impl.input_layout = layout_of(src_md);
  impl.output_layout =
      layout_of(channels_last_md({p.batch, p.out_channels, window.out_h, window.out_w}));
}

// The plan of a convolution on one of our own row kernels (`Kernel`: DepthwiseConv or StemConv,
// built from `shape`; ImageRowsRun), `macs` multiply-adds per output pixel: the given input
// layout, channels-last output, the batch's output rows shared out on the pool; `name` plus the
// pieces note is its implementation.
template <typename Kernel, typename Shape>
ConvPlan prepare_own(const std::shared_ptr<ProviderState>& state, const ConvParams& p,
                     const Shape& shape, double macs, const float* weight, const float* bias,
                     const PostOps& post_ops, const memory::desc& src_md, const char* name) {
  auto impl = std::make_shared<ConvLikePlan::Impl>();
  impl->state = state;
  ImageRowsRun<Kernel> run;
  run.conv = std::make_shared<Kernel>(shape, weight, bias, post_ops);
  run.batch = p.batch;
  const double flops = 2.0 * static_cast<double>(p.batch * shape.out_h * shape.out_w) * macs;
  run.tasks = state->pieces_for(flops, p.batch * shape.out_h);
  run.image_flops = flops / static_cast<double>(p.batch);
  state->weights_bytes += run.conv->weights_bytes();
  impl->implementation = name + pieces_note(run.tasks);
  impl->own = std::make_shared<ImageRowsRun<Kernel>>(std::move(run));
  set_own_plan_layouts(*impl, p, shape, bias != nullptr, src_md);
  return ConvPlan(std::move(impl));
}

// The shape our stem kernel (stem_conv.h) computes for a dense 2D convolution (groups 1,
// dilation 1) from 1 to 4 input channels, plain or channels-last, asked for a channels-last
// output (or oneDNN's choice), when it is wanted there; nothing otherwise.
std::optional<StemShape> own_stem_shape(const ConvParams& p, const PostOps& post_ops,
                                        const memory::desc& src_md, OutputLayout output) {
  if (p.input_size.size() != 2 || p.groups != 1 || p.dilation[0] != 1 || p.dilation[1] != 1 ||
      output == OutputLayout::kPlain) {
    return std::nullopt;
  }
  const Dims src_dims{p.batch, p.in_channels, p.input_size[0], p.input_size[1]};
  StemShape shape;
  if (src_md == channels_last_md(src_dims)) {
    shape.input_channels_last = true;
  } else if (src_md == plain_md(src_dims)) {
    shape.input_channels_last = false;
  } else {
    return std::nullopt;
  }
  static_cast<ConvWindow&>(shape) = window_of(p);
  shape.in_channels = p.in_channels;
  shape.out_channels = p.out_channels;
  if (!own_stem_wanted(shape, post_ops)) return std::nullopt;
  return shape;
}

bool all_ones(const std::vector<int64_t>& v) {
  return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 1; });
}

// A dense 1x1 kernel (groups 1, no padding) from a channels-last input: what both plans on
// PointwiseConv need of a convolution (besides its stride) and of the input's layout.
bool channels_last_1x1(const ConvParams& p, const memory::desc& src_md) {
  const bool no_padding = std::all_of(p.padding.begin(), p.padding.end(),
                                      [](int64_t x) { return x == 0; });
  if (p.groups != 1 || !all_ones(p.kernel_size) || !no_padding) return false;
  Dims src_dims{p.batch, p.in_channels};
  src_dims.insert(src_dims.end(), p.input_size.begin(), p.input_size.end());
  return src_md == channels_last_md(src_dims);
}

// A 1x1 convolution's weights against its activations (input + output floats per pixel): > 1
// weight-heavy (the weight stream's rule).
double pointwise_weight_share(const ConvParams& p) {
  const double pixels = static_cast<double>(p.batch) * product(conv_output_size(p));
  const double weights = static_cast<double>(p.in_channels) * p.out_channels;
  return weights / (pixels * static_cast<double>(p.in_channels + p.out_channels));
}

// Whether a convolution runs on the weight stream of pointwise_conv.h (run_stream): a dense 1x1
// kernel (groups 1, no padding; stride 1, or any in 2D: ResNet's projection shortcuts) from a
// channels-last input to a channels-last output (or oneDNN's choice), weights larger than its
// activations (deep CNN stages: each call streams them from memory; ET_CPU_STREAM_1X1=all: any
// weights) and pointwise_stream_supports (ET_CPU_STREAM_1X1 not "0"; read at prepare).
bool stream_pointwise_wanted(const ConvParams& p, const PostOps& post_ops,
                             const memory::desc& src_md, OutputLayout output) {
  // Strides other than 1 (gathered at run) in 2D only.
  const bool strides_ok = all_ones(p.stride) || p.input_size.size() == 2;
  if (!strides_ok || output == OutputLayout::kPlain || !channels_last_1x1(p, src_md)) {
    return false;
  }
  const bool weight_heavy = pointwise_weight_share(p) > 1.0;
  if (!weight_heavy && switch_reach("ET_CPU_STREAM_1X1") != SwitchReach::kEverywhere) return false;
  return pointwise_stream_supports(p.in_channels, p.out_channels, post_ops);
}

// Whether a convolution whose weights the caller replaces per call (ConvLayouts::weights_per_call:
// a squeeze-excite gate folded in) runs on PointwiseConv split by pixels: a dense 1x1, stride 1,
// no padding, groups 1, channels-last in and out, post-ops in registers (a residual add too),
// and ET_CPU_OWN_GATED_1X1 (read once at prepare, opted_in_reach):
// unset or "0" never, "all" any K, "1" K <= kOwnExpandMaxK (MobileNetV3's 16 -> 16 at 56x56,
// EfficientNet's 32 -> 16 at 112x112: oneDNN's brgconv_1x1 at K = 16 reached ~54 GFLOP/s there;
// off by default until a quiet whole-model A/B shows a gain, provider README).
bool own_gated_pointwise_wanted(const ConvParams& p, const PostOps& post_ops,
                                const memory::desc& src_md, const ConvLayouts& layouts) {
  const SwitchReach reach = opted_in_reach("ET_CPU_OWN_GATED_1X1");
  if (!layouts.weights_per_call || reach == SwitchReach::kNever) return false;
  if (reach != SwitchReach::kEverywhere && p.in_channels > kOwnExpandMaxK) {
    return false;
  }
  if (!all_ones(p.stride) || layouts.output == OutputLayout::kPlain ||
      !channels_last_1x1(p, src_md)) {
    return false;
  }
  return pointwise_stream_supports(p.in_channels, p.out_channels, post_ops);
}

// Whether a 1x1 convolution runs on PointwiseConv split by pixels (each thread all the weights
// and its own slice of the pixels, PointwiseRun::by_pixels) instead of oneDNN's brgconv_1x1 in
// row bands: stride 1, channels-last in and out, post-ops in registers, and
// ET_CPU_POINTWISE_BY_PIXELS (read at prepare, switch_reach): "0" never, "all" every such 1x1
// (ahead of the weight stream), unset where it measured faster in the model (ResNet-50-style's
// 14x14 1x1s, back to back and after time away, provider README): weights of more than a
// quarter of the activations but not outweighing them (the weight stream takes those), and at
// least kPixelPointwiseMinChannels channels in and out (the shapes measured; MobileNet-style
// projections such as 480 -> 112 at 14x14 were not).
constexpr double kPixelPointwiseMinShare = 0.25;
constexpr int64_t kPixelPointwiseMinChannels = 128;
bool pixel_pointwise_wanted(const ConvParams& p, const PostOps& post_ops,
                            const memory::desc& src_md, OutputLayout output) {
  const SwitchReach reach = switch_reach("ET_CPU_POINTWISE_BY_PIXELS");
  if (reach == SwitchReach::kNever) return false;
  if (!all_ones(p.stride) || output == OutputLayout::kPlain || !channels_last_1x1(p, src_md)) {
    return false;
  }
  if (reach != SwitchReach::kEverywhere) {
    const double share = pointwise_weight_share(p);
    if (share <= kPixelPointwiseMinShare || share > 1.0 ||
        std::min(p.in_channels, p.out_channels) < kPixelPointwiseMinChannels) {
      return false;
    }
  }
  return pointwise_stream_supports(p.in_channels, p.out_channels, post_ops);
}

// What a pixel of a 1x1 convolution costs against pieces_for besides its multiply-adds: its K
// inputs read and N outputs written (memory-bound at K = 16), as a reorder's element.
constexpr double kPointwiseFlopsPerFloat = 20;

// The plan of a 1x1 convolution on PointwiseConv::run_stream: RowGemm's packed weights (through
// the weight cache) and, at most one per thread, either (stream_pointwise_wanted) contiguous
// ranges of column groups, each streaming its share, a strided one's input pixels gathered into
// a buffer of the plan, or (`by_pixels`: own_gated_pointwise_wanted, pixel_pointwise_wanted)
// near-equal slices of the pixels, weighed with their memory traffic (PointwiseRun). `name`:
// the implementation the plan reports.
ConvPlan prepare_pointwise(const std::shared_ptr<ProviderState>& state, const ConvParams& p,
                           const float* weight, const float* bias, const PostOps& post_ops,
                           const memory::desc& src_md, bool by_pixels,
                           const char* name) {
  auto impl = std::make_shared<ConvLikePlan::Impl>();
  impl->state = state;
  PointwiseRun run;
  run.conv = std::make_shared<const PointwiseConv>(
      cached_row_gemm_weights(state->weight_cache.get(), p.in_channels, p.out_channels, weight,
                              /*weight_is_k_by_n=*/false, bias),
      post_ops);
  run.by_pixels = by_pixels;
  run.pixel_step = by_pixels && stream_tile_fit() ? kPointwiseTileMultiple : 1;
  const std::vector<int64_t> out_size = conv_output_size(p);
  run.pixels = p.batch * static_cast<int64_t>(product(out_size));
  if (!all_ones(p.stride)) {
    run.batch = p.batch;
    run.window = window_of(p);
    run.gathered =
        std::make_shared<std::vector<float>>(static_cast<size_t>(run.pixels * p.in_channels));
  }
  double flops = 2.0 * static_cast<double>(run.pixels) * p.in_channels * p.out_channels;
  if (by_pixels) {
    flops += kPointwiseFlopsPerFloat * static_cast<double>(run.pixels) *
             static_cast<double>(p.in_channels + p.out_channels);
  }
  const int64_t units = by_pixels ? run.pixels : pointwise_groups(p.out_channels);
  run.tasks = std::min<size_t>(state->pieces_for(flops, units),
                               state->pool ? static_cast<size_t>(state->pool->size()) : 1);
  run.group_halves = !by_pixels && run.tasks > 1 && stream_tile_fit() && run.pixels >= 2 &&
                     units % static_cast<int64_t>(run.tasks) != 0;
  run.weighted = !by_pixels && run.tasks > 1 && !run.group_halves && state->even_shares &&
                 p.out_channels % kPointwiseGroupColumns != 0;
  state->weights_bytes += run.conv->weights_bytes();
  impl->implementation =
      std::string(name) +
      pieces_note(run.tasks) + (run.group_halves ? " in half groups" : "") +
      (run.weighted ? " in equal shares of unequal groups" : "");
  impl->own = std::make_shared<PointwiseRun>(std::move(run));
  impl->has_bias = bias != nullptr;
  impl->has_add = has_add(post_ops);
  Dims dst_dims{p.batch, p.out_channels};
  dst_dims.insert(dst_dims.end(), out_size.begin(), out_size.end());
  impl->input_layout = layout_of(src_md);
  impl->output_layout = layout_of(channels_last_md(dst_dims));
  return ConvPlan(std::move(impl));
}

// The shape of a dense 2D convolution (groups 1, dilation 1) reading a channels-last input, asked
// for a channels-last output (or oneDNN's choice): what StreamConv (stream_conv.h) and
// WinogradConv (winograd_conv.h) compute; nothing for any other convolution.
std::optional<DenseConvShape> dense_conv_shape(const ConvParams& p, const memory::desc& src_md,
                                               OutputLayout output) {
  if (p.groups != 1 || !channels_last_2d(p, src_md, output)) return std::nullopt;
  DenseConvShape shape;
  static_cast<ConvWindow&>(shape) = window_of(p);
  shape.in_channels = p.in_channels;
  shape.out_channels = p.out_channels;
  return shape;
}

// The plan of a convolution on StreamConv: one range of output-channel blocks per thread.
ConvPlan prepare_stream_conv(const std::shared_ptr<ProviderState>& state, const ConvParams& p,
                             const StreamConvShape& shape, const float* weight, const float* bias,
                             const PostOps& post_ops, const memory::desc& src_md) {
  auto impl = std::make_shared<ConvLikePlan::Impl>();
  impl->state = state;
  StreamConvRun run;
  run.conv = std::make_shared<StreamConv>(shape, weight, bias, post_ops);
  run.batch = p.batch;
  const double flops = 2.0 * static_cast<double>(p.batch * shape.out_h * shape.out_w) *
                       static_cast<double>(shape.out_channels * shape.in_channels * 9);
  const int64_t threads = state->pool ? state->pool->size() : 1;
  run.tasks = state->pieces_for(flops, std::min<int64_t>(run.conv->blocks(), threads));
  state->weights_bytes += run.conv->weights_bytes();
  impl->implementation = "stream_conv:avx512" + pieces_note(run.tasks);
  impl->own = std::make_shared<StreamConvRun>(std::move(run));
  set_own_plan_layouts(*impl, p, shape, bias != nullptr, src_md);
  return ConvPlan(std::move(impl));
}

// The plan of a convolution on WinogradConv: contiguous ranges of tile groups per task (each over
// every output-channel block: both threads read all the weights), or of output-channel blocks
// (each task then transforms the whole input, and reads only its blocks' weights) when the batch
// has fewer than 2 tile groups per thread (7x7 and 8x8 images) or the transformed weights
// outweigh the batch's transformed input (ResNet-50-style stage 3's 128 @ 14: 1 MiB against
// 0.45 MiB; 30 us faster after time away and 5-14 us back to back, provider README).
// ET_CPU_WINOGRAD_BY_BLOCKS (read at prepare): `0` by tile groups unless fewer than 2 per thread
// (the earlier rule), `all` by blocks whenever there are as many blocks as threads.
ConvPlan prepare_winograd_conv(const std::shared_ptr<ProviderState>& state, const ConvParams& p,
                               const WinogradShape& shape, const float* weight, const float* bias,
                               const PostOps& post_ops, const memory::desc& src_md) {
  auto impl = std::make_shared<ConvLikePlan::Impl>();
  impl->state = state;
  WinogradRun run;
  run.conv = std::make_shared<WinogradConv>(shape, weight, bias, post_ops);
  run.batch = p.batch;
  const int64_t groups = run.conv->groups(p.batch);
  const int64_t blocks = run.conv->blocks();
  const int64_t threads = state->pool ? state->pool->size() : 1;
  // The transformed weights against the batch's transformed input.
  const bool weights_outweigh =
      run.conv->transformed_weight_floats() > run.conv->transformed_input_floats(p.batch);
  const SwitchReach reach = switch_reach("ET_CPU_WINOGRAD_BY_BLOCKS");
  run.by_blocks = blocks >= threads &&
                  (groups < 2 * threads || reach == SwitchReach::kEverywhere ||
                   (reach == SwitchReach::kDefault && weights_outweigh));
  // Multiply-adds of the products (16 per tile and channel pair).
  const double flops = 2.0 * 16.0 * static_cast<double>(groups * WinogradConv::kGroupTiles) *
                       static_cast<double>(shape.in_channels * shape.out_channels);
  run.tasks = state->pieces_for(flops, run.by_blocks ? std::min(blocks, threads) : groups);
  state->weights_bytes += run.conv->weights_bytes();
  impl->implementation = std::string("winograd:avx512") + (run.by_blocks ? " by blocks" : "") +
                         pieces_note(run.tasks);
  impl->own = std::make_shared<WinogradRun>(std::move(run));
  set_own_plan_layouts(*impl, p, shape, bias != nullptr, src_md);
  impl->has_add = has_add(post_ops);
  return ConvPlan(std::move(impl));
}

}  // namespace

ConvPlan Provider::prepare_conv(
    const ConvParams& params,
    const float* weight,
    const float* bias,
    const PostOps& post_ops,
    const ConvLayouts& layouts) {
  check_conv_like("prepare_conv", supports_conv(params, post_ops), weight);
  ProviderState& state = *state_;
  ThreadCountGuard threads(state.omp_threads);
  const ConvLikeShape shape =
      conv_like_shape("prepare_conv", "convolution", params, conv_output_size(params), layouts);
  const Dims& src_dims = shape.src_dims;
  const Dims& dst_dims = shape.dst_dims;
  const Dims& strides = shape.strides;
  const Dims& padding = shape.pad_left;
  const Dims& dilation = shape.dilation;
  const memory::desc& given_src_md = shape.given_src_md;
  // torch's [C_out, C_in/g, *k] is oneDNN's [g, C_out/g, C_in/g, *k] in the same memory order.
  Dims weight_dims;
  if (params.groups > 1) {
    weight_dims = {
        params.groups, params.out_channels / params.groups, params.in_channels / params.groups};
  } else {
    weight_dims = {params.out_channels, params.in_channels};
  }
  weight_dims.insert(weight_dims.end(), params.kernel_size.begin(), params.kernel_size.end());
  if (is_row_product(params, post_ops, given_src_md)) {
    return prepare_row_product(state_, params, weight, bias, post_ops, given_src_md,
                               layouts.output);
  }
  if (const std::optional<DepthwiseShape> depthwise =
          own_depthwise_shape(params, post_ops, given_src_md, layouts.output)) {
    const double macs = static_cast<double>(depthwise->channels * depthwise->kernel_h *
                                            depthwise->kernel_w);
    return prepare_own<DepthwiseConv>(state_, params, *depthwise, macs, weight, bias, post_ops,
                                      given_src_md, "depthwise:avx512");
  }
  if (const std::optional<StemShape> stem =
          own_stem_shape(params, post_ops, given_src_md, layouts.output)) {
    const double macs = static_cast<double>(stem->out_channels * stem->in_channels *
                                            stem->kernel_h * stem->kernel_w);
    return prepare_own<StemConv>(state_, params, *stem, macs, weight, bias, post_ops,
                                 given_src_md, "stem:avx512");
  }
  if (own_gated_pointwise_wanted(params, post_ops, given_src_md, layouts)) {
    return prepare_pointwise(state_, params, weight, bias, post_ops, given_src_md,
                             /*by_pixels=*/true, "pointwise_pixels:avx512");
  }
  if (pixel_pointwise_wanted(params, post_ops, given_src_md, layouts.output)) {
    return prepare_pointwise(state_, params, weight, bias, post_ops, given_src_md,
                             /*by_pixels=*/true, "pointwise_by_pixels:avx512");
  }
  if (stream_pointwise_wanted(params, post_ops, given_src_md, layouts.output)) {
    return prepare_pointwise(state_, params, weight, bias, post_ops, given_src_md,
                             /*by_pixels=*/false, "pointwise_stream:avx512");
  }
  if (const std::optional<DenseConvShape> dense =
          dense_conv_shape(params, given_src_md, layouts.output)) {
    if (own_winograd_wanted(*dense, post_ops)) {
      return prepare_winograd_conv(state_, params, *dense, weight, bias, post_ops, given_src_md);
    }
    if (own_stream_conv_wanted(*dense, post_ops)) {
      return prepare_stream_conv(state_, params, *dense, weight, bias, post_ops, given_src_md);
    }
  }
  const memory::desc bias_md = bias ? any_md({params.out_channels}) : memory::desc();

  return wrap_dnnl("prepare_conv", [&] {
    using Impl = ConvLikePlan::Impl;
    const auto choose_pd = [&](const dnnl::primitive_attr& attr) {
      auto pd = conv_pd(state.engine, any_md(src_dims), any_md(weight_dims), bias_md,
                        any_md(dst_dims), strides, dilation, padding, padding, attr);
      // oneDNN 3.x has no brgconv for 1 to 4 input channels (fp32, 1D/2D: the stem on the
      // graph input); for `any` its jit "first convolution" kernel reads the plain input and
      // writes nChw16c, which row bands cannot split and a channels-last consumer must reorder.
      // The same kernel runs channels-last in and out at the same speed (7x7 3 -> 64 @224:
      // 2.06 ms on one core either way, as oneDNN 2.6's brgconv, which chose channels-last):
      // take that, so the input reorder splits into bands and the convolution into row pieces.
      if (pd.src_desc() == plain_md(src_dims) && pd.dst_desc().get_inner_nblks() > 0) {
        try {
          const auto channels_last =
              conv_pd(state.engine, channels_last_md(src_dims), any_md(weight_dims), bias_md,
                      channels_last_md(dst_dims), strides, dilation, padding, padding, attr);
          if (std::string(channels_last.impl_info_str()) == pd.impl_info_str()) {
            pd = channels_last;
          }
        } catch (const dnnl::error&) {
          // keep oneDNN's choice
        }
      }
      return pd;
    };
    SplitPostOps split;
    auto pd = choose_with_tail(post_ops, &split, choose_pd);

    auto impl = std::make_shared<Impl>();
    impl->prepare(state_, pd, bias != nullptr, has_add(post_ops), given_src_md, layouts.output,
                  dst_dims, /*input_in_bands=*/true);
    impl->tail = split.tail;
    memory::desc weights_md;
    impl->pieces = split_conv(state, params, *impl, src_dims, dst_dims, strides, dilation,
                              make_attr(split.primitive), pd, weight_dims, weight, bias,
                              &weights_md);
    if (impl->pieces.empty()) impl->primitive = dnnl::convolution_forward(pd);
    impl->implementation += split.note();
    impl->describe_split();
    // Channel pieces own their weight blocks; the whole op and row bands use the plan's.
    if (impl->pieces.empty() || impl->pieces.front().channels == 0) {
      impl->weights = reorder_constant(state, plain_md(weight_dims), weight, weights_md);
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
