// Transposed convolutions (prepare_deconv, a ConvLikePlan) on oneDNN's deconvolution_forward:
// torch's weight layout, the primitive's layouts (channels-last where a jit kernel takes it), and
// the splits into images or bands of output rows.
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_internal.h"

namespace et_cpu_plugin {
namespace onednn {

namespace {

dnnl::deconvolution_forward::primitive_desc deconv_pd(
    const dnnl::engine& engine, const memory::desc& src, const memory::desc& weights,
    const memory::desc& bias, const memory::desc& dst, const Dims& strides,
    const Dims& dilation, const Dims& pad_left, const Dims& pad_right,
    const dnnl::primitive_attr& attr) {
  return dnnl::deconvolution_forward::primitive_desc(
      engine, dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, src,
      weights, bias, dst, strides, dilation, pad_left, pad_right, attr);
}

// Whether oneDNN answered with a generic kernel (GEMM-based or reference) rather than a jit one.
bool is_generic(const std::string& implementation) {
  return implementation.find("gemm") != std::string::npos ||
         implementation.find("ref") != std::string::npos;
}

}  // namespace

std::vector<int64_t> deconv_output_size(const DeconvParams& p) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < p.input_size.size(); ++i) {
    out.push_back((p.input_size[i] - 1) * p.stride[i] - 2 * p.padding[i] +
                  p.dilation[i] * (p.kernel_size[i] - 1) + p.output_padding[i] + 1);
  }
  return out;
}

Support supports_deconv(const DeconvParams& p, const PostOps& post_ops) {
  const size_t rank = p.input_size.size();
  if (rank < 1 || rank > 3) {
    return Support::no("conv_transpose: input_size " + dims_to_string(p.input_size) +
                       " must have 1 to 3 spatial dims");
  }
  const std::pair<const char*, const std::vector<int64_t>*> fields[] = {
      {"kernel_size", &p.kernel_size},
      {"stride", &p.stride},
      {"padding", &p.padding},
      {"output_padding", &p.output_padding},
      {"dilation", &p.dilation}};
  for (const auto& field : fields) {
    if (field.second->size() != rank) {
      return Support::no(std::string("conv_transpose: ") + field.first + " " +
                         dims_to_string(*field.second) + " has " +
                         std::to_string(field.second->size()) + " dims, input_size has " +
                         std::to_string(rank));
    }
  }
  if (p.batch < 1 || p.in_channels < 1 || p.out_channels < 1 || p.groups < 1) {
    return Support::no(
        "conv_transpose: batch, in_channels, out_channels and groups must be positive");
  }
  if (p.in_channels % p.groups || p.out_channels % p.groups) {
    return Support::no("conv_transpose: groups " + std::to_string(p.groups) +
                       " must divide in_channels " + std::to_string(p.in_channels) +
                       " and out_channels " + std::to_string(p.out_channels));
  }
  for (size_t i = 0; i < rank; ++i) {
    if (p.input_size[i] < 1 || p.kernel_size[i] < 1 || p.stride[i] < 1 || p.padding[i] < 0 ||
        p.dilation[i] < 1 || p.output_padding[i] < 0) {
      return Support::no(
          "conv_transpose: bad size/kernel/stride/padding/output_padding/dilation at spatial "
          "dim " + std::to_string(i));
    }
    // torch's own rule (an output_padding this large would only add rows no input reaches).
    if (p.output_padding[i] >= std::max(p.stride[i], p.dilation[i])) {
      return Support::no("conv_transpose: output_padding " + dims_to_string(p.output_padding) +
                         " must be smaller than stride or dilation");
    }
  }
  for (int64_t size : deconv_output_size(p)) {
    if (size < 1) {
      return Support::no("conv_transpose: empty output for input_size " +
                         dims_to_string(p.input_size));
    }
  }
  return check_post_ops(post_ops);
}

namespace {

// Splits a deconvolution whose primitive reads and writes channels-last data into images of the
// batch or (batch 1) bands of output rows along the first spatial dim. A band of output rows
// [begin, end) is itself a deconvolution: of the input rows that reach it, [lo, hi), with its own
// top/bottom padding (output row o gets input row i through kernel tap k when
// o = i * s - pad + k * d). Pieces share the plan's weights, so each must run the same oneDNN
// kernel as the whole op; if any would not (or oneDNN refuses a band's padding), the plan stays
// whole (empty result).
std::vector<Piece> split_deconv(
    ProviderState& state,
    const DeconvParams& params,
    const ConvLikePlan::Impl& plan,
    const Dims& src_dims,
    const Dims& dst_dims,
    const Dims& strides,
    const Dims& dilation,
    const Dims& pad_left,
    const Dims& pad_right,
    const dnnl::primitive_attr& attr,
    const dnnl::deconvolution_forward::primitive_desc& whole) {
  if (plan.primitive_src_md != channels_last_md(src_dims) ||
      plan.primitive_dst_md != channels_last_md(dst_dims)) {
    return {};
  }
  // Every input pixel meets every kernel tap of its group once.
  const double flops = 2.0 * product(src_dims) * (params.out_channels / params.groups) *
                       product(params.kernel_size);
  const int64_t s = params.stride[0];
  const int64_t reach = params.dilation[0] * (params.kernel_size[0] - 1);
  const int64_t pad = params.padding[0];
  const auto band = [&](int64_t begin, int64_t end, BandRows* rows) {
    // Input rows i with begin <= i * s - pad + k * d < end for some tap k.
    const int64_t first = begin + pad - reach;
    rows->lo = std::max<int64_t>(0, first <= 0 ? 0 : (first + s - 1) / s);
    rows->hi = std::min<int64_t>(params.input_size[0], (end - 1 + pad) / s + 1);
    if (rows->hi <= rows->lo) {
      return false;  // a band no input row reaches (bias only): not worth a special case
    }
    rows->pad_left = pad + begin - rows->lo * s;
    rows->pad_right = (rows->hi - rows->lo - 1) * s - rows->pad_left + reach + 1 - (end - begin);
    return true;
  };
  const auto make = [&](Piece& piece, const Dims& left, const Dims& right) {
    const auto pd = deconv_pd(state.engine, piece.src_md, whole.weights_desc(),
                              plan.has_bias ? whole.bias_desc() : memory::desc(), piece.dst_md,
                              strides, dilation, left, right, attr);
    if (pd.impl_info_str() != plan.implementation) {
      return false;  // the piece would run another kernel: keep the op whole
    }
    set_primitive<dnnl::deconvolution_forward>(piece, pd);
    return true;
  };
  return split_images_or_rows(state, src_dims, dst_dims, flops, pad_left, pad_right, band, make);
}

}  // namespace

DeconvPlan Provider::prepare_deconv(
    const DeconvParams& params,
    const float* weight,
    const float* bias,
    const PostOps& post_ops,
    const ConvLayouts& layouts) {
  check_conv_like("prepare_deconv", supports_deconv(params, post_ops), weight);
  ProviderState& state = *state_;
  ThreadCountGuard threads(state.omp_threads);
  const size_t rank = params.input_size.size();
  const ConvLikeShape shape = conv_like_shape("prepare_deconv", "transposed convolution", params,
                                              deconv_output_size(params), layouts);
  const Dims& src_dims = shape.src_dims;
  const Dims& dst_dims = shape.dst_dims;
  const Dims& strides = shape.strides;
  const Dims& pad_left = shape.pad_left;
  const Dims& dilation = shape.dilation;
  const memory::desc& given_src_md = shape.given_src_md;

  // torch's weight is [C_in, C_out/g, *k] = [g, C_in/g, C_out/g, *k] in memory; oneDNN's
  // deconvolution weights are [(g,) C_out/g, C_in/g, *k]: the same bytes with the two channel
  // dims' strides swapped.
  const int64_t kernel_volume = static_cast<int64_t>(product(params.kernel_size));
  const int64_t in_per_group = params.in_channels / params.groups;
  const int64_t out_per_group = params.out_channels / params.groups;
  Dims weight_dims;
  Dims weight_strides;
  if (params.groups > 1) {
    weight_dims = {params.groups, out_per_group, in_per_group};
    weight_strides = {in_per_group * out_per_group * kernel_volume, kernel_volume,
                      out_per_group * kernel_volume};
  } else {
    weight_dims = {params.out_channels, params.in_channels};
    weight_strides = {kernel_volume, params.out_channels * kernel_volume};
  }
  {
    int64_t step = 1;
    Dims kernel_strides(rank);
    for (size_t i = rank; i-- > 0;) {
      kernel_strides[i] = step;
      step *= params.kernel_size[i];
    }
    weight_dims.insert(weight_dims.end(), params.kernel_size.begin(), params.kernel_size.end());
    weight_strides.insert(weight_strides.end(), kernel_strides.begin(), kernel_strides.end());
  }

  // output_padding adds rows at the end: less padding on the right (may go negative).
  Dims pad_right;
  for (size_t i = 0; i < rank; ++i) {
    pad_right.push_back(params.padding[i] - params.output_padding[i]);
  }
  const memory::desc bias_md = bias ? any_md({params.out_channels}) : memory::desc();

  return wrap_dnnl("prepare_deconv", [&] {
    using Impl = ConvLikePlan::Impl;
    const auto choose_pd = [&](const dnnl::primitive_attr& attr) {
      // Channels-last in and out (brgemm-based deconvolution for fp32 on AVX-512, splittable
      // into row bands, and what neighbouring convolutions keep); oneDNN's own choice of layouts
      // where channels-last would get a generic GEMM or reference kernel and `any` a jit one.
      auto pd = deconv_pd(state.engine, channels_last_md(src_dims), any_md(weight_dims),
                          bias_md, channels_last_md(dst_dims), strides, dilation, pad_left,
                          pad_right, attr);
      if (is_generic(pd.impl_info_str())) {
        try {
          auto chosen = deconv_pd(state.engine, any_md(src_dims), any_md(weight_dims), bias_md,
                                  any_md(dst_dims), strides, dilation, pad_left, pad_right, attr);
          if (!is_generic(chosen.impl_info_str())) {
            pd = chosen;
          }
        } catch (const dnnl::error&) {
          // keep channels-last
        }
      }
      return pd;
    };
    SplitPostOps split;
    auto pd = choose_with_tail(post_ops, &split, choose_pd);
    const dnnl::primitive_attr attr = make_attr(split.primitive);

    auto impl = std::make_shared<Impl>();
    impl->name = "deconv plan";
    impl->prepare(state_, pd, bias != nullptr, has_add(post_ops), given_src_md, layouts.output,
                  dst_dims, /*input_in_bands=*/false);
    impl->tail = split.tail;
    impl->pieces = split_deconv(state, params, *impl, src_dims, dst_dims, strides, dilation,
                                pad_left, pad_right, attr, pd);
    if (impl->pieces.empty()) impl->primitive = dnnl::deconvolution_forward(pd);
    impl->implementation += split.note();
    impl->describe_split();
    impl->weights = reorder_constant(state, memory::desc(weight_dims, memory::data_type::f32,
                                                         weight_strides),
                                     weight, pd.weights_desc());
    if (bias) {
      impl->bias = reorder_constant(state, plain_md({params.out_channels}), bias, pd.bias_desc());
    }
    return DeconvPlan(std::move(impl));
  });
}

}  // namespace onednn
}  // namespace et_cpu_plugin
