// Binders of the ops that move or pool activations in whatever layout the session keeps them:
// max / average / adaptive average pooling, mean over the spatial dims (global average pooling),
// nearest / bilinear resampling, concatenation and permute_copy. Their kernels take part in
// layout chaining (an output may stay channels-last after a channels-last input).
#include "backends/cpu/runtime/providers/optimized/binders.h"
#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/kernels/reductions.h"

namespace et_cpu_plugin {
namespace cpu {
namespace optimized {

namespace {

// `per_image` (plans_per_image): the plan is prepared for one image and run per image.
std::unique_ptr<OptimizedKernel> max_pool_kernel(onednn::PoolParams params, const Tensor* input,
                                              Tensor* output, bool per_image) {
  if (per_image) params.batch = 1;
  return std::make_unique<LayoutKernel<onednn::PoolPlan>>(
      "max pooling",
      [params](onednn::Provider& provider, const onednn::Layout& in, const onednn::Layout& out) {
        return provider.prepare_max_pool(params, in, out);
      },
      input, output, false, false, per_image);
}

// Average pooling (avg_pool2d, an adaptive pooling whose windows tile the input); `per_image`
// as max_pool_kernel's.
std::unique_ptr<OptimizedKernel> avg_pool_kernel(onednn::PoolParams params, bool count_include_pad,
                                              const Tensor* input, Tensor* output,
                                              bool per_image) {
  if (per_image) params.batch = 1;
  return std::make_unique<LayoutKernel<onednn::PoolPlan>>(
      "average pooling",
      [params, count_include_pad](onednn::Provider& provider, const onednn::Layout& in,
                                  const onednn::Layout& out) {
        return provider.prepare_avg_pool(params, count_include_pad, in, out);
      },
      input, output, false, false, per_image);
}

// Nearest / bilinear resampling (align_corners=False).
std::unique_ptr<OptimizedKernel> resample_kernel(bool linear, const Tensor* input, Tensor* output) {
  return std::make_unique<LayoutKernel<onednn::ResamplePlan>>(
      "resampling",
      [linear](onednn::Provider& provider, const onednn::Layout& in, const onednn::Layout& out) {
        return provider.prepare_resampling(linear, in, out);
      },
      input, output);
}

// Mean over the spatial dims (global average pooling) of an activation that may be channels-last;
// writes plain (for a 1x1 spatial output the same bytes as channels-last). `per_image`
// (plans_per_image): a channels-last input's plan is prepared for one image and run per image.
class MeanKernel final : public OptimizedKernel {
 public:
  MeanKernel(const Tensor* input, Tensor* output, bool per_image)
      : input_(input), output_(output), per_image_(per_image),
        image_(std::vector<const Tensor*>{input}) {}

  // The loop on plain rows reads its sizes at each run; a plan per image fits any batch.
  bool plan_fits_every_size() const override {
    return per_image_ && (rows_plain_ || (plan_ && image_.current()));
  }

  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    const std::vector<int64_t> in =
        per_image_ ? one_image(dims_of(*input_)) : dims_of(*input_);
    // A plain input is N x C contiguous rows: their means on our loop. oneDNN's plain-layout
    // pooling took ~30 us for RMSNorm's 128 x 288 (issue 45: the Llama-style prefill), the loop
    // a few.
    rows_plain_ = !channels_last(impl_of(input_));
    if (rows_plain_) {
      plan_.reset();
      return;
    }
    std::vector<int64_t> out(in.size(), 1);
    out[0] = in[0];
    out[1] = in[1];
    plan_ = std::make_unique<onednn::PoolPlan>(provider.prepare_global_average_pool(
        onednn::Layout::channels_last(in), onednn::Layout::plain(out)));
  }
  std::string implementation() const override {
    return rows_plain_ ? "loops:row means" : plan_ ? plan_->implementation() : "";
  }
  bool resizable() const override { return true; }  // sizes read at prepare and run

  Error run(KernelRuntimeContext&) override {
    if (rows_plain_) {
      const int64_t rows = input_->size(0) * input_->size(1);
      const int64_t length = rows > 0 ? static_cast<int64_t>(input_->numel()) / rows : 0;
      onednn::row_means(rows, length, input_->const_data_ptr<float>(),
                        output_->mutable_data_ptr<float>());
      return Error::Ok;
    }
    return guarded("mean", [&] {
      run_per_image(*plan_, per_image_, input_, output_);
    });
  }

 private:
  const Tensor* input_;
  Tensor* output_;
  bool per_image_;
  ImageSizes image_;  // with per_image_: the image sizes its plan serves
  bool rows_plain_ = false;
  std::unique_ptr<onednn::PoolPlan> plan_;
};

// torch.cat: each input and the output plain or channels-last (inputs of rank 3-5 that the
// session keeps channels-last stay so: a UNet decoder's skip concatenation along channels).
class ConcatKernel final : public OptimizedKernel {
 public:
  ConcatKernel(std::vector<const Tensor*> inputs, int64_t axis, Tensor* output)
      : inputs_(std::move(inputs)), axis_(axis), output_(output) {}

  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    std::vector<onednn::Layout> layouts;
    for (const Tensor* input : inputs_) layouts.push_back(session_layout(channels_last, input));
    plan_ = std::make_unique<onednn::ConcatPlan>(
        provider.prepare_concat(layouts, axis_, session_layout(channels_last, output_)));
    pointers_.assign(inputs_.size(), nullptr);
  }
  // Inputs below rank 3 cannot be channels-last.
  std::vector<const executorch::aten::TensorImpl*> plain_reads() const override {
    std::vector<const executorch::aten::TensorImpl*> plain;
    for (const Tensor* t : inputs_) {
      if (t->dim() < 3) plain.push_back(impl_of(t));
    }
    return plain;
  }
  const executorch::aten::TensorImpl* chainable_output() const override {
    return output_->dim() >= 3 && output_->dim() <= 5 ? impl_of(output_) : nullptr;
  }
  // Channels-last only when an input is (else plain inputs would be converted one by one).
  const executorch::aten::TensorImpl* chainable_output_after(
      const Chained& chained) const override {
    for (const Tensor* t : inputs_) {
      if (chained.count(impl_of(t)) > 0) return chainable_output();
    }
    return nullptr;
  }
  size_t pieces() const override { return plan_ ? plan_->pieces() : 1; }

  Error run(KernelRuntimeContext&) override {
    return guarded("concatenation", [&] {
      for (size_t i = 0; i < inputs_.size(); ++i) {
        pointers_[i] = inputs_[i]->const_data_ptr<float>();
      }
      plan_->run(pointers_, output_->mutable_data_ptr<float>());
    });
  }

 private:
  std::vector<const Tensor*> inputs_;  // the graph's list storage: alive as long as the graph
  int64_t axis_;
  Tensor* output_;
  std::unique_ptr<onednn::ConcatPlan> plan_;
  std::vector<const float*> pointers_;
};

// permute_copy on our own copy loops (PermutePlan): reads its input in whatever layout the
// session keeps it (a channels-last producer's NLC output permuted to torch's NLC is one
// contiguous copy), writes plain.
class PermuteKernel final : public OptimizedKernel {
 public:
  PermuteKernel(std::vector<int64_t> perm, const Tensor* input, Tensor* output)
      : perm_(std::move(perm)), input_(input), output_(output) {}

  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    // A graph whose sizes vary, both sides plain: one plan that works out its loops from the
    // input's dims at each run where they changed, kept across resizes (nothing prepared at a
    // new size). ET_CPU_PERMUTE_AT_RUN=0: prepared at each size.
    sized_at_run_ = provider.size_independent_plans() && !channels_last(impl_of(input_)) &&
                    !channels_last(impl_of(output_)) &&
                    onednn::kernel_switched_on("ET_CPU_PERMUTE_AT_RUN");
    if (sized_at_run_) {
      if (!plan_ || !plan_sized_at_run_) {
        plan_ = std::make_unique<onednn::PermutePlan>(
            provider.prepare_permute_sized_at_run(perm_, dims_of(*input_)));
        plan_sized_at_run_ = true;
      }
      return;
    }
    plan_sized_at_run_ = false;
    plan_ = std::make_unique<onednn::PermutePlan>(provider.prepare_permute(
        perm_, session_layout(channels_last, input_), session_layout(channels_last, output_)));
  }
  // Its output may stay channels-last for convolutions that read it: the text CNN's NLC
  // embedding transposed to NCL is then a contiguous copy, not a transpose (rank 3-5: the
  // layouts oneDNN's convolutions have).
  const executorch::aten::TensorImpl* chainable_output() const override {
    return output_->dim() >= 3 && output_->dim() <= 5 ? impl_of(output_) : nullptr;
  }
  // Only that case (channels-last to channels-first: (0, r-1, 1, ..., r-2)) or a channels-last
  // input: any other permute's output held channels-last is a layout no kernel asked for (the
  // attention heads' (0, 2, 1, 3) in a transformer).
  const executorch::aten::TensorImpl* chainable_output_after(
      const Chained& chained) const override {
    return to_channels_first() || chained.count(impl_of(input_)) > 0 ? chainable_output()
                                                                     : nullptr;
  }
  size_t pieces() const override { return plan_ ? plan_->pieces() : 1; }
  std::string implementation() const override { return plan_ ? plan_->implementation() : ""; }
  bool resizable() const override { return true; }  // prepare or run reads the sizes

  Error run(KernelRuntimeContext&) override {
    return guarded("permute", [&] {
      if (sized_at_run_) {
        dims_.resize(static_cast<size_t>(input_->dim()));
        for (size_t d = 0; d < dims_.size(); ++d) dims_[d] = input_->size(static_cast<ssize_t>(d));
        if (output_->numel() != input_->numel()) {
          throw onednn::ProviderError("permute: output holds " +
                                      std::to_string(output_->numel()) + " values, input " +
                                      std::to_string(input_->numel()));
        }
        plan_->run_sized(input_->const_data_ptr<float>(), output_->mutable_data_ptr<float>(),
                         dims_);
        return;
      }
      plan_->run(input_->const_data_ptr<float>(), output_->mutable_data_ptr<float>());
    });
  }

 private:
  bool to_channels_first() const {
    const size_t rank = perm_.size();
    if (rank < 3 || perm_[0] != 0 || perm_[1] != static_cast<int64_t>(rank) - 1) return false;
    for (size_t d = 2; d < rank; ++d) {
      if (perm_[d] != static_cast<int64_t>(d) - 1) return false;
    }
    return true;
  }

  std::vector<int64_t> perm_;
  const Tensor* input_;
  Tensor* output_;
  std::unique_ptr<onednn::PermutePlan> plan_;
  bool sized_at_run_ = false;       // plan_ runs with the input's dims (run_sized)
  bool plan_sized_at_run_ = false;  // plan_ came from prepare_permute_sized_at_run
  std::vector<int64_t> dims_;       // the input's dims at the last run
};

}  // namespace

// aten::max_pool2d_with_indices.out(self, kernel_size, stride, padding, dilation, ceil_mode, *,
// out, indices): taken when nobody reads the indices (inference graphs), which it leaves unwritten.
Error bind_max_pool(const OpBinding& op, OptimizedSession& session,
                    std::unique_ptr<BoundKernel>* out, Decline* decline) {
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = op.args.size() > 7 && op.args[6]->isTensor() ? &op.args[6]->toTensor() : nullptr;
  if (!is_f32(input) || !is_f32(output) || input->dim() != 4) {
    decline->reason = "max_pool2d: only float32 NCHW (4D) tensors";
    return Error::NotSupported;
  }
  if (op.arg_is_unread == nullptr || !op.arg_is_unread[7]) {
    decline->reason = "max_pool2d: its indices are read (the provider does not compute them)";
    return Error::NotSupported;
  }
  onednn::PoolParams params;
  params.batch = input->size(0);
  params.channels = input->size(1);
  params.input_size = {input->size(2), input->size(3)};
  params.output_size = {output->size(2), output->size(3)};
  std::vector<int64_t> dilation;
  if (!int_list(op.args[1], 2, &params.kernel_size) || !int_list(op.args[3], 2, &params.padding) ||
      !int_list(op.args[4], 2, &dilation)) {
    decline->reason = "max_pool2d: kernel_size, padding and dilation need 1 or 2 entries";
    return Error::NotSupported;
  }
  if (op.args[2]->isIntList() && op.args[2]->toIntList().size() == 0) {
    params.stride = params.kernel_size;  // torch: stride defaults to the kernel size
  } else if (!int_list(op.args[2], 2, &params.stride)) {
    decline->reason = "max_pool2d: stride needs 0, 1 or 2 entries";
    return Error::NotSupported;
  }
  if (dilation[0] != 1 || dilation[1] != 1) {
    decline->reason = "max_pool2d: dilation is not supported by the provider";
    return Error::NotSupported;
  }
  onednn::Support support = onednn::supports_max_pool(params);
  if (!support.ok) {
    decline->reason = support.reason;
    return Error::NotSupported;
  }
  auto kernel = max_pool_kernel(params, input, output, plans_per_image(session));
  return bind_prepared(std::move(kernel), session, out);
}

// aten::mean.out(self, dim[]?, keepdim, *, dtype?, out): taken for float32 over exactly the
// spatial dims of a 3D-5D tensor (global average pooling), keepdim or not.
Error bind_mean(const OpBinding& op, OptimizedSession& session, std::unique_ptr<BoundKernel>* out,
                Decline* decline, size_t* fused) {
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = op.args.size() > 4 && op.args[4]->isTensor() ? &op.args[4]->toTensor() : nullptr;
  if (!is_f32(input) || !is_f32(output) || input->dim() < 3 || input->dim() > 5 ||
      !op.args[3]->isNone()) {
    decline->reason = "mean: only float32 3D-5D input, no dtype argument";
    return Error::NotSupported;
  }
  const int64_t rank = input->dim();
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  if (!op.args[1]->isIntList()) {
    decline->reason = "mean: only over a list of dims";
    return Error::NotSupported;
  }
  for (int64_t d : op.args[1]->toIntList()) {
    const int64_t dim = d < 0 ? d + rank : d;
    if (dim < 0 || dim >= rank || reduced[static_cast<size_t>(dim)]) {
      decline->reason = "mean: dim out of range or repeated";
      return Error::NotSupported;
    }
    reduced[static_cast<size_t>(dim)] = true;
  }
  if (reduced[0] || reduced[1] ||
      std::count(reduced.begin(), reduced.end(), true) != rank - 2) {
    decline->reason = "mean: only over all spatial dims (global average pooling)";
    return Error::NotSupported;
  }
  if (output->numel() != input->size(0) * input->size(1)) {
    decline->reason = "mean: output size differs from N x C";
    return Error::NotSupported;
  }
  if (bind_squeeze_excite(op, input, output, session, out, fused)) return Error::Ok;
  auto kernel = std::make_unique<MeanKernel>(input, output, plans_per_image(session));
  return bind_prepared(std::move(kernel), session, out);
}

// aten::permute_copy.out(self, dims, *, out): float32, dims a permutation (negative dims count
// from the end).
Error bind_permute(const OpBinding& op, OptimizedSession& session,
                   std::unique_ptr<BoundKernel>* out, Decline* decline) {
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = op.args.size() > 2 && op.args[2]->isTensor() ? &op.args[2]->toTensor() : nullptr;
  if (!is_f32(input) || !is_f32(output)) {
    decline->reason = "permute: only float32 input and output";
    return Error::NotSupported;
  }
  const size_t rank = static_cast<size_t>(input->dim());
  std::vector<int64_t> perm;
  if (!op.args[1]->isIntList() || !int_list(op.args[1], rank, &perm) || perm.size() != rank) {
    decline->reason = "permute: dims must be a list of " + std::to_string(rank) + " ints";
    return Error::NotSupported;
  }
  for (int64_t& d : perm) {
    if (d < 0) d += static_cast<int64_t>(rank);
  }
  const onednn::Support support =
      onednn::supports_permute(perm, dims_of(*input), dims_of(*output));
  if (!support.ok) {
    decline->reason = support.reason;
    return Error::NotSupported;
  }
  return bind_prepared(std::make_unique<PermuteKernel>(std::move(perm), input, output), session,
                       out);
}

// aten::avg_pool2d.out(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
// divisor_override?, *, out): float32 NCHW without divisor_override.
Error bind_avg_pool(const OpBinding& op, OptimizedSession& session,
                    std::unique_ptr<BoundKernel>* out, Decline* decline) {
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = op.args.size() > 7 && op.args[7]->isTensor() ? &op.args[7]->toTensor() : nullptr;
  if (!is_f32(input) || !is_f32(output) || input->dim() != 4 || output->dim() != 4) {
    decline->reason = "avg_pool2d: only float32 NCHW (4D) tensors";
    return Error::NotSupported;
  }
  if (!op.args[6]->isNone()) {
    decline->reason = "avg_pool2d: divisor_override is not supported by the provider";
    return Error::NotSupported;
  }
  if (!op.args[5]->isBool()) {
    decline->reason = "avg_pool2d: count_include_pad is not a bool";
    return Error::NotSupported;
  }
  onednn::PoolParams params;
  params.batch = input->size(0);
  params.channels = input->size(1);
  params.input_size = {input->size(2), input->size(3)};
  params.output_size = {output->size(2), output->size(3)};
  if (output->size(0) != params.batch || output->size(1) != params.channels ||
      !int_list(op.args[1], 2, &params.kernel_size) || !int_list(op.args[3], 2, &params.padding)) {
    decline->reason = "avg_pool2d: kernel_size and padding need 1 or 2 entries";
    return Error::NotSupported;
  }
  if (op.args[2]->isIntList() && op.args[2]->toIntList().size() == 0) {
    params.stride = params.kernel_size;  // torch: stride defaults to the kernel size
  } else if (!int_list(op.args[2], 2, &params.stride)) {
    decline->reason = "avg_pool2d: stride needs 0, 1 or 2 entries";
    return Error::NotSupported;
  }
  const bool include = op.args[5]->toBool();
  onednn::Support support = onednn::supports_avg_pool(params, include);
  if (!support.ok) {
    decline->reason = support.reason;
    return Error::NotSupported;
  }
  return bind_prepared(
      avg_pool_kernel(params, include, input, output, plans_per_image(session)), session, out);
}

// aten::_adaptive_avg_pool2d.out(self, output_size, *, out): taken when the output size divides
// the input size (every window then has the same size and stride: a plain average pooling).
Error bind_adaptive_avg_pool(const OpBinding& op, OptimizedSession& session,
                             std::unique_ptr<BoundKernel>* out, Decline* decline, size_t* fused) {
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = op.args.size() > 2 && op.args[2]->isTensor() ? &op.args[2]->toTensor() : nullptr;
  if (!is_f32(input) || !is_f32(output) || input->dim() != 4 || output->dim() != 4 ||
      output->size(0) != input->size(0) || output->size(1) != input->size(1)) {
    decline->reason = "adaptive_avg_pool2d: only float32 NCHW (4D) tensors";
    return Error::NotSupported;
  }
  onednn::PoolParams params;
  params.batch = input->size(0);
  params.channels = input->size(1);
  for (ssize_t d = 2; d < 4; ++d) {
    const int64_t in = input->size(d);
    const int64_t size = output->size(d);
    if (size < 1 || in < 1 || in % size != 0) {
      decline->reason = "adaptive_avg_pool2d: output size " + std::to_string(size) +
                        " does not divide input size " + std::to_string(in) +
                        " (windows of different sizes)";
      return Error::NotSupported;
    }
    params.input_size.push_back(in);
    params.output_size.push_back(size);
    params.kernel_size.push_back(in / size);
    params.stride.push_back(in / size);
    params.padding.push_back(0);
  }
  onednn::Support support = onednn::supports_avg_pool(params, false);
  if (!support.ok) {
    decline->reason = support.reason;
    return Error::NotSupported;
  }
  if (bind_squeeze_excite(op, input, output, session, out, fused)) return Error::Ok;
  if (plans_per_image(session) && params.output_size == std::vector<int64_t>{1, 1}) {
    // To 1x1: a global average, whose plan per image fits every batch (MeanKernel).
    return bind_prepared(std::make_unique<MeanKernel>(input, output, true), session, out);
  }
  return bind_prepared(
      avg_pool_kernel(params, false, input, output, plans_per_image(session)), session, out);
}

// aten::upsample_nearest2d.vec_out(input, output_size?, scale_factors?, *, out) and
// aten::upsample_bilinear2d.vec_out(input, output_size?, align_corners, scale_factors?, *, out):
// float32 NCHW, align_corners=False, scale factors (when given) equal to output / input size.
Error bind_upsample(const OpBinding& op, bool linear, OptimizedSession& session,
                    std::unique_ptr<BoundKernel>* out, Decline* decline) {
  const std::string what = linear ? "upsample_bilinear2d" : "upsample_nearest2d";
  const size_t scales_index = linear ? 3 : 2;
  const size_t out_index = linear ? 4 : 3;
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = op.args.size() > out_index && op.args[out_index]->isTensor()
                       ? &op.args[out_index]->toTensor()
                       : nullptr;
  if (!is_f32(input) || !is_f32(output) || input->dim() != 4 || output->dim() != 4) {
    decline->reason = what + ": only float32 NCHW (4D) tensors";
    return Error::NotSupported;
  }
  if (linear && (!op.args[2]->isBool() || op.args[2]->toBool())) {
    decline->reason = what +
                      ": align_corners=True is not supported (oneDNN's linear resampling maps "
                      "coordinates as align_corners=False)";
    return Error::NotSupported;
  }
  const EValue* scales = op.args[scales_index];
  if (!scales->isNone()) {
    if (!scales->isDoubleList() || scales->toDoubleList().size() != 2) {
      decline->reason = what + ": scale_factors must be 2 floats";
      return Error::NotSupported;
    }
    auto factors = scales->toDoubleList();
    for (size_t i = 0; i < 2; ++i) {
      const double in = static_cast<double>(input->size(static_cast<ssize_t>(i + 2)));
      const double size = static_cast<double>(output->size(static_cast<ssize_t>(i + 2)));
      if (factors[i] * in != size) {
        decline->reason = what + ": scale factor " + std::to_string(factors[i]) +
                          " is not output / input size (torch then maps coordinates with "
                          "1 / scale, oneDNN with input / output)";
        return Error::NotSupported;
      }
    }
  }
  onednn::Support support = onednn::supports_resampling(linear, dims_of(*input), dims_of(*output));
  if (!support.ok) {
    decline->reason = support.reason;
    return Error::NotSupported;
  }
  return bind_prepared(resample_kernel(linear, input, output), session, out);
}

// aten::cat.out(tensors, dim, *, out): float32 tensors of one rank.
Error bind_cat(const OpBinding& op, OptimizedSession& session, std::unique_ptr<BoundKernel>* out,
               Decline* decline) {
  Tensor* output = op.args.size() > 2 && op.args[2]->isTensor() ? &op.args[2]->toTensor() : nullptr;
  if (op.args.size() < 3 || !op.args[0]->isTensorList() || !op.args[1]->isInt() ||
      !is_f32(output)) {
    decline->reason = "cat: only a list of float32 tensors and an int dim";
    return Error::NotSupported;
  }
  auto list = op.args[0]->toTensorList();
  std::vector<const Tensor*> inputs;
  std::vector<std::vector<int64_t>> dims;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!is_f32(&list[i])) {
      decline->reason = "cat: only float32 tensors";
      return Error::NotSupported;
    }
    inputs.push_back(&list[i]);
    dims.push_back(dims_of(list[i]));
  }
  const int64_t rank = output->dim();
  int64_t axis = op.args[1]->toInt();
  if (axis < 0) axis += rank;
  onednn::Support support = onednn::supports_concat(dims, axis, dims_of(*output));
  if (!support.ok) {
    decline->reason = support.reason;
    return Error::NotSupported;
  }
  return bind_prepared(std::make_unique<ConcatKernel>(std::move(inputs), axis, output),
                          session, out);
}

}  // namespace optimized
}  // namespace cpu
}  // namespace et_cpu_plugin
