// Convolution-like binders: aten::convolution.out as a convolution, as a transposed convolution
// (deconvolution), or, with the convolutions offered after it, as one inverted residual block
// (1x1 expand, depthwise, 1x1 project: BlockPlan). ConvLikeKernel serves both convolution kinds
// (one recipe, one layout-chaining behaviour); BlockKernel runs a fused block. In a graph whose
// batch varies (plans_per_image, binding.h) each prepares its plan for one image and runs it
// over the batch read at each run: one plan fits every batch. Blocks and our depthwise and stem
// kernels run the batch's images in one round of the pool; oneDNN convolutions over small images
// in tiles of several images (ConvLikeKernel::kTileImages), others image by image.
#include "backends/cpu/runtime/providers/optimized/binders.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "backends/cpu/runtime/error_report.h"
#include "backends/cpu/runtime/providers/optimized/common/aligned_buffer.h"
#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/common/work_pool.h"

namespace et_cpu_plugin {
namespace cpu {
namespace optimized {

namespace {

// A convolution-like op's constants and post-ops (`Params`: ConvParams or DeconvParams).
template <typename Params>
struct ConvLikeRecipe {
  Params params;
  const float* weight = nullptr;  // the graph's constants: alive as long as the graph
  const float* bias = nullptr;
  onednn::PostOps post;
};
using ConvRecipe = ConvLikeRecipe<onednn::ConvParams>;
using DeconvRecipe = ConvLikeRecipe<onednn::DeconvParams>;

// What ConvLikeKernel needs to know of each op: its plan, how to prepare it, its name in errors.
struct ConvOp {
  using Recipe = ConvRecipe;
  using Plan = onednn::ConvPlan;
  static constexpr const char* kName = "convolution";
  static Plan prepare(onednn::Provider& provider, const Recipe& recipe,
                      const onednn::ConvLayouts& layouts) {
    return provider.prepare_conv(recipe.params, recipe.weight, recipe.bias, recipe.post,
                                 layouts);
  }
};
struct DeconvOp {
  using Recipe = DeconvRecipe;
  using Plan = onednn::DeconvPlan;
  static constexpr const char* kName = "transposed convolution";
  static Plan prepare(onednn::Provider& provider, const Recipe& recipe,
                      const onednn::ConvLayouts& layouts) {
    return provider.prepare_deconv(recipe.params, recipe.weight, recipe.bias, recipe.post,
                                   layouts);
  }
};

// A convolution or transposed convolution; both take part in layout chaining the same way.
// `per_image`: its plan is prepared for one image and run once per image (plans_per_image).
template <typename Op>
class ConvLikeKernel final : public OptimizedKernel {
 public:
  using Recipe = typename Op::Recipe;
  using Plan = typename Op::Plan;

  ConvLikeKernel(Recipe recipe, const Tensor* input, Tensor* output, const Tensor* residual,
                 bool per_image)
      : recipe_(std::move(recipe)), input_(input), output_(output), residual_(residual),
        per_image_(per_image), image_(std::vector<const Tensor*>{input, output, residual}) {
    if (per_image_) recipe_.params.batch = 1;
  }

  bool resizable() const override { return per_image_; }
  bool plan_fits_every_size() const override { return per_image_ && plan_ && image_.current(); }
  bool runs_images_apart() const override {
    return per_image_ && input_->size(0) > 1 && !runs_images_together() && tiles_.empty();
  }

  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    if (per_image_) image_.check(Op::kName);
    const auto dims = [&](const Tensor& t) {
      return per_image_ ? one_image(dims_of(t)) : dims_of(t);
    };
    // The plan for `images` images (0: the recipe's batch, per image 1).
    const auto prepare_for = [&](int64_t images) {
      Recipe recipe = recipe_;
      if (images > 0) recipe.params.batch = images;
      const auto with_batch = [&](std::vector<int64_t> d) {
        if (images > 0) d[0] = images;
        return d;
      };
      onednn::ConvLayouts layouts;
      if (channels_last(impl_of(input_))) {
        layouts.input = std::make_shared<onednn::Layout>(
            onednn::Layout::channels_last(with_batch(dims(*input_))));
      }
      layouts.output = channels_last(impl_of(output_)) ? onednn::OutputLayout::kChannelsLast
                                                       : onednn::OutputLayout::kPlain;
      return std::make_unique<Plan>(Op::prepare(provider, recipe, layouts));
    };
    plan_ = prepare_for(0);
    residual_fix_.reset();
    tiles_.clear();
    if (residual_ != nullptr) {
      // The residual must arrive in the output's layout: convert it into the output buffer
      // and add in place when its producer left it in the other one.
      const std::vector<int64_t> residual_dims = dims(*residual_);
      const onednn::Layout given = channels_last(impl_of(residual_))
                                       ? onednn::Layout::channels_last(residual_dims)
                                       : onednn::Layout::plain(residual_dims);
      if (given != plan_->output_layout()) {
        residual_fix_ = std::make_unique<onednn::ReorderPlan>(
            provider.prepare_reorder(given, plan_->output_layout()));
      }
    }
    if (per_image_ && !residual_fix_ && !plan_->runs_images_together() &&
        image_pixels() <= kTileMaxPixels &&
        onednn::kernel_switched_on("ET_CPU_CONV_BATCH_TILES")) {
      // Up to the batch at prepare (the graph's bound): no tile larger than any batch it runs.
      for (int64_t images : kTileImages) {
        if (images <= input_->size(0)) tiles_.emplace_back(images, prepare_for(images));
      }
    }
  }

  const executorch::aten::TensorImpl* chainable_output() const override {
    return impl_of(output_);
  }
  // ConvCore and row_gemm read each residual element before writing the output there (the
  // sum post-op adds what dst holds; channel pieces stage their own channels).
  bool adds_in_place() const override { return residual_ != nullptr; }
  size_t pieces() const override { return plan_ ? plan_->pieces() : 1; }
  std::string implementation() const override { return plan_ ? plan_->implementation() : ""; }

  Error run(KernelRuntimeContext&) override {
    return guarded(Op::kName, [&] {
      // Per image: the batch read now, each image's elements (channels-last keeps the batch
      // outermost too); else one call on the whole batch.
      const int64_t batch = input_->size(0);
      const int64_t images = per_image_ ? batch : 1;
      if (images < 1) return;
      if (runs_images_together()) {
        plan_->run_images(input_->const_data_ptr<float>(), output_->mutable_data_ptr<float>(),
                          images);
        return;
      }
      const int64_t in_step = input_->numel() / images;
      const int64_t out_step = output_->numel() / images;
      const float* in = input_->const_data_ptr<float>();
      float* out = output_->mutable_data_ptr<float>();
      const float* residual = residual_ ? residual_->const_data_ptr<float>() : nullptr;
      int64_t n = 0;
      for (const auto& [tile_images, tile] : tiles_) {  // largest first
        for (; images - n >= tile_images; n += tile_images) {
          tile->run(in + n * in_step, out + n * out_step,
                    residual ? residual + n * out_step : nullptr);
        }
      }
      for (; n < images; ++n) {
        float* image_out = out + n * out_step;
        const float* image_residual = residual ? residual + n * out_step : nullptr;
        if (residual_fix_ && image_residual == image_out) {
          // Planned in place (adds_in_place) but produced in the other layout: convert it
          // through a buffer of our own (a reorder cannot run in place).
          staged_residual_.resize(static_cast<size_t>(out_step));
          residual_fix_->run(image_residual, staged_residual_.data());
          std::memcpy(image_out, staged_residual_.data(),
                      static_cast<size_t>(out_step) * sizeof(float));
        } else if (residual_fix_) {
          residual_fix_->run(image_residual, image_out);
        }
        if (residual_fix_) image_residual = image_out;
        plan_->run(in + n * in_step, image_out, image_residual);
      }
    });
  }

 private:
  Recipe recipe_;
  const Tensor* input_;
  Tensor* output_;
  const Tensor* residual_;
  bool per_image_;
  ImageSizes image_;  // with per_image_: the image sizes its plan serves
  std::unique_ptr<Plan> plan_;
  std::unique_ptr<onednn::ReorderPlan> residual_fix_;
  std::vector<float> staged_residual_;  // residual_fix_ on a residual planned in place

  // Per image, the plans of tiles of several images, largest first (see kTileMaxPixels).
  std::vector<std::pair<int64_t, std::unique_ptr<Plan>>> tiles_;

  // Per image on our own depthwise or stem kernel, no residual: the batch's images run in one
  // round of the pool (ConvLikePlan::run_images) instead of one round each.
  bool runs_images_together() const {
    return per_image_ && plan_ && residual_ == nullptr && plan_->runs_images_together();
  }

  // Per image on oneDNN, an output image of at most kTileMaxPixels pixels (MobileNetV3's 7x7
  // 1x1 convolutions) runs apart measurably slower than in a plan of the whole batch (a round
  // of the pool and a pass over the weights per image): such a kernel also prepares plans of
  // tiles of kTileImages images and runs a batch as tiles, largest first, then single images.
  // ET_CPU_CONV_BATCH_TILES=0 (read at prepare) prepares none.
  static constexpr int64_t kTileMaxPixels = 64;
  static constexpr int64_t kTileImages[] = {8, 4, 2};
  int64_t image_pixels() const {
    const std::vector<int64_t> d = dims_of(*output_);
    int64_t pixels = 1;
    for (size_t i = 2; i < d.size(); ++i) pixels *= d[i];
    return pixels;
  }
};
using ConvKernel = ConvLikeKernel<ConvOp>;
using DeconvKernel = ConvLikeKernel<DeconvOp>;

// An inverted residual block (1x1 expand, depthwise, 1x1 project, optionally + its input) as one
// kernel: see onednn::BlockParams. It reads and writes channels-last; where the graph keeps its
// input or output plain (a graph input, a tensor a reference op reads) it converts through its
// own buffer. `per_image`: prepared for one image and run once per image (plans_per_image).
class BlockKernel final : public OptimizedKernel {
 public:
  BlockKernel(onednn::BlockParams params, const onednn::BlockWeights& weights,
              onednn::BlockPostOps post, const Tensor* input, Tensor* output, bool per_image)
      : params_(std::move(params)), weights_(weights), post_(std::move(post)), input_(input),
        output_(output), per_image_(per_image),
        image_(std::vector<const Tensor*>{input, output}) {
    if (per_image_) params_.batch = 1;
  }

  bool resizable() const override { return per_image_; }
  bool plan_fits_every_size() const override { return per_image_ && plan_ && image_.current(); }
  // Only when converting its input or output (a plain neighbour): the plan otherwise runs the
  // batch's images in one round (BlockPlan::run), as fast as a plan of the whole batch.
  bool runs_images_apart() const override {
    return per_image_ && input_->size(0) > 1 && (input_fix_ || output_fix_);
  }

  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    if (per_image_) image_.check("block");
    plan_ = std::make_unique<onednn::BlockPlan>(provider.prepare_block(params_, weights_, post_));
    const std::vector<int64_t> in_dims =
        per_image_ ? one_image(dims_of(*input_)) : dims_of(*input_);
    const std::vector<int64_t> out_dims = plan_->output_dims();
    const auto floats = [](const std::vector<int64_t>& d) {
      int64_t n = 1;
      for (int64_t x : d) n *= x;
      return static_cast<size_t>(n);
    };
    input_fix_.reset();
    output_fix_.reset();
    // Fresh vectors: clear() would keep the capacity of the bind-time (all plain) prepare.
    staged_input_ = std::vector<float>();
    staged_output_ = std::vector<float>();
    if (!channels_last(impl_of(input_))) {
      input_fix_ = std::make_unique<onednn::ReorderPlan>(provider.prepare_reorder(
          onednn::Layout::plain(in_dims), onednn::Layout::channels_last(in_dims)));
      staged_input_.resize(floats(in_dims));
    }
    if (!channels_last(impl_of(output_))) {
      output_fix_ = std::make_unique<onednn::ReorderPlan>(provider.prepare_reorder(
          onednn::Layout::channels_last(out_dims), onednn::Layout::plain(out_dims)));
      staged_output_.resize(floats(out_dims));
    }
  }
  const executorch::aten::TensorImpl* chainable_output() const override {
    return impl_of(output_);
  }
  size_t pieces() const override { return plan_ ? plan_->pieces() : 1; }
  std::string implementation() const override { return plan_ ? plan_->implementation() : ""; }
  size_t staging_bytes() const override {
    return (staged_input_.size() + staged_output_.size()) * sizeof(float);
  }

  Error run(KernelRuntimeContext&) override {
    return guarded("block", [&] {
      const int64_t images = per_image_ ? input_->size(0) : 1;
      if (images < 1) return;
      if (!input_fix_ && !output_fix_) {
        // Channels-last in and out: the plan runs the batch's images in one round of its
        // pieces (BlockPlan::run), not one round per image.
        plan_->run(input_->const_data_ptr<float>(), output_->mutable_data_ptr<float>(),
                   per_image_ ? images : 0);
        return;
      }
      const int64_t in_step = input_->numel() / images;
      const int64_t out_step = output_->numel() / images;
      for (int64_t n = 0; n < images; ++n) {
        const float* in = input_->const_data_ptr<float>() + n * in_step;
        float* given_out = output_->mutable_data_ptr<float>() + n * out_step;
        if (input_fix_) {
          input_fix_->run(in, staged_input_.data());
          in = staged_input_.data();
        }
        float* out = output_fix_ ? staged_output_.data() : given_out;
        plan_->run(in, out);
        if (output_fix_) output_fix_->run(out, given_out);
      }
    });
  }

 private:
  onednn::BlockParams params_;
  onednn::BlockWeights weights_;  // the graph's constants: alive as long as the graph
  onednn::BlockPostOps post_;
  const Tensor* input_;
  Tensor* output_;
  bool per_image_;
  ImageSizes image_;  // with per_image_: the image sizes its plan serves
  std::unique_ptr<onednn::BlockPlan> plan_;
  std::unique_ptr<onednn::ReorderPlan> input_fix_;
  std::unique_ptr<onednn::ReorderPlan> output_fix_;
  std::vector<float> staged_input_;
  std::vector<float> staged_output_;
};

bool parse_conv(Span<EValue*> args, const bool* constant, ConvRecipe* recipe,
                const Tensor** input_out, Tensor** output_out, Decline* decline);

// ET_CPU_ONEDNN_BLOCKS=0 runs inverted residual blocks as three convolutions (for measuring).
bool blocks_enabled() { return onednn::kernel_switched_on("ET_CPU_ONEDNN_BLOCKS"); }

// ET_CPU_ONEDNN_SE_BLOCKS=0 leaves an expand + depthwise pair whose chain ends there (the
// squeeze-excite blocks of MobileNetV3 and EfficientNet) as two convolutions (for measuring).
bool se_blocks_enabled() { return onednn::kernel_switched_on("ET_CPU_ONEDNN_SE_BLOCKS"); }

bool is_pointwise(const onednn::ConvParams& p) {
  return p.input_size.size() == 2 && p.groups == 1 && p.kernel_size == std::vector<int64_t>{1, 1} &&
         p.stride == std::vector<int64_t>{1, 1} && p.padding == std::vector<int64_t>{0, 0};
}

// Elementwise steps from `*index` on as post-ops, up to the next convolution or the end; false
// on an add when `allow_add` is false (or a second add).
bool block_post_ops(const OpBinding& op, size_t* index, bool allow_add, const Tensor* block_input,
                    onednn::PostOps* post) {
  for (; *index < op.fusable.size(); ++*index) {
    const FusableStep& step = op.fusable[*index];
    if (step.kind == FusableStep::Kind::kConv) return true;
    if (step.kind == FusableStep::Kind::kAdd) {
      // Only the block's own input, and nothing after it (the plan adds it last).
      if (!allow_add || step.residual == nullptr || !step.residual->isTensor() ||
          impl_of(&step.residual->toTensor()) != impl_of(block_input)) {
        return false;
      }
      post->push_back(onednn::PostOp::add());
      ++*index;
      return true;
    }
    const Tensor* no_residual = nullptr;  // adds are handled above
    if (!append_post_op(step, post, &no_residual)) return false;
  }
  return true;
}

// The convolution offered as step `*index` (then the next), or false.
bool conv_step(const OpBinding& op, size_t* index, ConvRecipe* recipe) {
  if (*index >= op.fusable.size() || op.fusable[*index].kind != FusableStep::Kind::kConv) {
    return false;
  }
  const FusableStep& step = op.fusable[(*index)++];
  const Tensor* input = nullptr;
  Tensor* output = nullptr;
  Decline ignored;
  return parse_conv(step.args, step.arg_is_constant, recipe, &input, &output, &ignored);
}

// Takes this convolution and the steps after it as one inverted residual block when they are
// one: pointwise [eltwise...] depthwise [eltwise...] pointwise [add of the block's input], the
// same without the expand (this convolution is the depthwise), or without the project when the
// offered steps end after the depthwise's activations (squeeze-excite: the depthwise output
// feeds the pool and the gate multiply). False (nothing bound, nothing changed) otherwise; the
// caller then binds the convolution alone.
bool bind_block(const OpBinding& op, const ConvRecipe& head, const Tensor* input,
                OptimizedSession& session, std::unique_ptr<BoundKernel>* out, size_t* fused) {
  if (!blocks_enabled() || op.fusable.empty()) return false;
  onednn::BlockPostOps post;
  size_t index = 0;
  const bool has_expand = is_pointwise(head.params);
  ConvRecipe depthwise = head;
  if (has_expand && (head.params.dilation != std::vector<int64_t>{1, 1} ||
                     !block_post_ops(op, &index, false, input, &post.expand) ||
                     !conv_step(op, &index, &depthwise))) {
    return false;
  }
  const onednn::ConvParams& d = depthwise.params;
  const int64_t hidden = has_expand ? head.params.out_channels : head.params.in_channels;
  if (d.input_size.size() != 2 || d.groups != hidden || d.in_channels != hidden ||
      d.out_channels != hidden || d.kernel_size[0] != d.kernel_size[1] ||
      d.stride[0] != d.stride[1] || d.padding[0] != d.padding[1] || d.dilation[0] != 1 ||
      d.dilation[1] != 1) {
    return false;
  }
  if (!block_post_ops(op, &index, false, input, &post.depthwise)) return false;
  ConvRecipe project;
  const bool has_project = index < op.fusable.size();
  if (!has_project && (!has_expand || !se_blocks_enabled())) return false;
  if (has_project &&
      (!conv_step(op, &index, &project) || !is_pointwise(project.params) ||
       project.params.in_channels != hidden ||
       project.params.dilation != std::vector<int64_t>{1, 1} ||
       !block_post_ops(op, &index, true, input, &post.project))) {
    return false;
  }
  onednn::BlockParams params;
  params.batch = head.params.batch;
  params.in_channels = head.params.in_channels;
  params.expand = has_expand;
  params.hidden_channels = hidden;
  params.project = has_project;
  params.out_channels = has_project ? project.params.out_channels : hidden;
  params.input_size = head.params.input_size;
  params.kernel = d.kernel_size[0];
  params.stride = d.stride[0];
  params.padding = d.padding[0];
  if (!onednn::supports_block(params, post).ok) return false;
  const onednn::BlockWeights weights{has_expand ? head.weight : nullptr,
                                     has_expand ? head.bias : nullptr,
                                     depthwise.weight,
                                     depthwise.bias,
                                     has_project ? project.weight : nullptr,
                                     has_project ? project.bias : nullptr};
  auto kernel = std::make_unique<BlockKernel>(params, weights, post, input,
                                              &op.fusable[index - 1].output->toTensor(),
                                              plans_per_image(session));
  if (session.defers_prepare() && op.base_fused_steps == index) {
    // A shape plan of a graph whose base fused this same block (at the upper bounds): finalize
    // prepares it once, with its final layouts, instead of also here with plain ones.
    session.add_unprepared(kernel.get());
  } else {
    try {
      kernel->prepare(session.provider(),
                      [](const executorch::aten::TensorImpl*) { return false; });
    } catch (const std::exception& e) {
      log_line(LogLevel::kInfo, "oneDNN block at %s not fused: %s", op.op_name, e.what());
      return false;
    }
    session.add(kernel.get());
  }
  session.count_block();
  *out = std::move(kernel);
  *fused = index;
  return true;
}

// aten::convolution.out(input, weight, bias?, stride, padding, dilation, transposed,
// output_padding, groups, *, out), from `args` (an op's or a fused step's) with `constant`
// flags parallel to them. False with the reason in `decline` when oneDNN cannot take it.
bool parse_conv(Span<EValue*> args, const bool* constant, ConvRecipe* recipe,
                const Tensor** input_out, Tensor** output_out, Decline* decline) {
  const Tensor* input = tensor_arg(args, 0);
  const Tensor* weight = tensor_arg(args, 1);
  const Tensor* bias = tensor_arg(args, 2);
  if (args.size() < 10 || !is_f32(input) || !is_f32(weight) || !is_f32(tensor_arg(args, 9)) ||
      (bias != nullptr && !is_f32(bias))) {
    decline->reason = "convolution: only float32 input, weight, bias and output";
    return false;
  }
  if (constant == nullptr || !constant[1] || (bias != nullptr && !constant[2])) {
    decline->reason = "convolution: weight and bias must be constants (reordered once at init)";
    return false;
  }
  if (!args[6]->isBool() || args[6]->toBool()) {
    decline->reason = "convolution: transposed convolution is not supported by the provider";
    return false;
  }
  const ssize_t rank = input->dim();
  if (rank < 3 || rank > 5 || weight->dim() != rank) {
    decline->reason = "convolution: input must be 3D, 4D or 5D (conv1d/2d/3d)";
    return false;
  }
  const size_t spatial = static_cast<size_t>(rank - 2);
  onednn::ConvParams params;
  params.batch = input->size(0);
  params.in_channels = input->size(1);
  params.out_channels = weight->size(0);
  if (!args[8]->isInt()) {
    decline->reason = "convolution: groups is not an int";
    return false;
  }
  params.groups = args[8]->toInt();
  // oneDNN lays the weights out from these numbers: they must be the weight tensor's own
  // (issue 22: a damaged input shape made the weight reorder read far past the weights).
  if (params.groups < 1 || params.in_channels % params.groups != 0 ||
      params.out_channels % params.groups != 0 ||
      weight->size(1) * params.groups != params.in_channels) {
    decline->reason = "convolution: weight channels do not match the input's and groups";
    return false;
  }
  if (bias != nullptr && (bias->dim() != 1 || bias->size(0) != params.out_channels)) {
    decline->reason = "convolution: bias is not [out_channels]";
    return false;
  }
  for (size_t d = 0; d < spatial; ++d) {
    params.input_size.push_back(input->size(static_cast<ssize_t>(d + 2)));
    params.kernel_size.push_back(weight->size(static_cast<ssize_t>(d + 2)));
  }
  if (!int_list(args[3], spatial, &params.stride) ||
      !int_list(args[4], spatial, &params.padding) ||
      !int_list(args[5], spatial, &params.dilation)) {
    decline->reason = "convolution: stride, padding and dilation must have 1 or " +
                      std::to_string(spatial) + " entries";
    return false;
  }
  // conv_output_size divides by the strides (issue 22, pte_fuzz cnn:0:9440: a stride of 0);
  // Reference's argument checks then refuse the op with a message naming the argument.
  for (size_t d = 0; d < spatial; ++d) {
    if (params.stride[d] < 1 || params.dilation[d] < 1 || params.padding[d] < 0) {
      decline->reason = "convolution: stride and dilation must be >= 1, padding >= 0";
      return false;
    }
  }
  // The output shape the graph planned must be the one oneDNN computes.
  const Tensor* planned = tensor_arg(args, 9);
  std::vector<int64_t> expected{params.batch, params.out_channels};
  for (int64_t size : onednn::conv_output_size(params)) expected.push_back(size);
  if (dims_of(*planned) != expected) {
    decline->reason = "convolution: output shape differs from the convolution's";
    return false;
  }
  onednn::Support base = onednn::supports_conv(params, {});
  if (!base.ok) {
    decline->reason = base.reason;
    return false;
  }
  recipe->params = std::move(params);
  recipe->weight = weight->const_data_ptr<float>();
  recipe->bias = bias ? bias->const_data_ptr<float>() : nullptr;
  *input_out = input;
  *output_out = &args[9]->toTensor();
  return true;
}

// ET_CPU_ONEDNN_DECONV=0 leaves transposed convolutions to the Reference provider (for measuring).
bool deconv_enabled() { return onednn::kernel_switched_on("ET_CPU_ONEDNN_DECONV"); }

// aten::convolution.out with transposed=True: oneDNN's deconvolution, with the offered ReLU /
// clamp / residual-add steps as post-ops.
Error bind_deconv(const OpBinding& op, OptimizedSession& session, std::unique_ptr<BoundKernel>* out,
                  Decline* decline, size_t* fused) {
  Span<EValue*> args = op.args;
  const Tensor* input = tensor_arg(args, 0);
  const Tensor* weight = tensor_arg(args, 1);
  const Tensor* bias = tensor_arg(args, 2);
  if (args.size() < 10 || !is_f32(input) || !is_f32(weight) || !is_f32(tensor_arg(args, 9)) ||
      (bias != nullptr && !is_f32(bias))) {
    decline->reason = "transposed convolution: only float32 input, weight, bias and output";
    return Error::NotSupported;
  }
  if (!is_constant(op, 1) || (bias != nullptr && !is_constant(op, 2))) {
    decline->reason =
        "transposed convolution: weight and bias must be constants (reordered once at init)";
    return Error::NotSupported;
  }
  const ssize_t rank = input->dim();
  if (rank < 3 || rank > 5 || weight->dim() != rank) {
    decline->reason = "transposed convolution: input must be 3D, 4D or 5D";
    return Error::NotSupported;
  }
  if (!args[8]->isInt()) {
    decline->reason = "transposed convolution: groups is not an int";
    return Error::NotSupported;
  }
  const size_t spatial = static_cast<size_t>(rank - 2);
  DeconvRecipe recipe;
  onednn::DeconvParams& params = recipe.params;
  params.batch = input->size(0);
  params.in_channels = input->size(1);
  params.groups = args[8]->toInt();
  // Checked before the product below: a hostile groups overflowed it or divided by zero later.
  if (params.in_channels < 1 || params.groups < 1 || params.in_channels % params.groups != 0) {
    decline->reason = "transposed convolution: groups does not divide the input channels";
    return Error::NotSupported;
  }
  // torch's transposed weight: [C_in, C_out / groups, *kernel].
  params.out_channels = weight->size(1) * params.groups;
  if (weight->size(0) != params.in_channels) {
    decline->reason = "transposed convolution: weight's first dim differs from input channels";
    return Error::NotSupported;
  }
  if (bias != nullptr && (bias->dim() != 1 || bias->size(0) != params.out_channels)) {
    decline->reason = "transposed convolution: bias is not a vector of the output channels";
    return Error::NotSupported;
  }
  for (size_t d = 0; d < spatial; ++d) {
    params.input_size.push_back(input->size(static_cast<ssize_t>(d + 2)));
    params.kernel_size.push_back(weight->size(static_cast<ssize_t>(d + 2)));
  }
  if (!int_list(args[3], spatial, &params.stride) ||
      !int_list(args[4], spatial, &params.padding) ||
      !int_list(args[5], spatial, &params.dilation) ||
      !int_list(args[7], spatial, &params.output_padding)) {
    decline->reason = "transposed convolution: stride, padding, dilation and output_padding "
                      "must have 1 or " + std::to_string(spatial) + " entries";
    return Error::NotSupported;
  }
  const onednn::Support base = onednn::supports_deconv(params, {});
  if (!base.ok) {
    decline->reason = base.reason;
    return Error::NotSupported;
  }
  const Tensor* planned = tensor_arg(args, 9);
  std::vector<int64_t> expected{params.batch, params.out_channels};
  for (int64_t size : onednn::deconv_output_size(params)) expected.push_back(size);
  if (dims_of(*planned) != expected) {
    decline->reason = "transposed convolution: output shape differs from the op's";
    return Error::NotSupported;
  }
  recipe.weight = weight->const_data_ptr<float>();
  recipe.bias = bias ? bias->const_data_ptr<float>() : nullptr;
  const Tensor* residual = nullptr;
  *fused = longest_supported_prefix(
      op, [&](const onednn::PostOps& p) { return onednn::supports_deconv(params, p); },
      &recipe.post, &residual);
  auto kernel = std::make_unique<DeconvKernel>(std::move(recipe), input,
                                               final_output(op, 9, *fused), residual,
                                               plans_per_image(session));
  return bind_prepared(std::move(kernel), session, out);
}

// The squeeze-excite gate multiply (x * gate, gate [N or 1, C, 1, 1]) and the 1x1 convolution
// reading its product, as one kernel that never writes the product: per image, the convolution's
// weights (oneDNN's layout, or RowGemm's packing when the plan runs our own 1x1 kernel split by
// pixels: ConvLayouts::weights_per_call, ET_CPU_OWN_GATED_1X1) times the image's gate along their
// input channels (onednn::InputChannelScaling: C_out x C_in multiplies instead of H x W x C_in),
// then the same plan on x. The plan is prepared for one image and run image by image, so any batch (a
// dynamic-batch program's shape plans included) runs one plan. When the plan's weights cannot
// be replaced (channel pieces), x times the gate goes through a staging buffer (one image)
// instead. `resizes`: a graph resized in place keeps the plan at a new batch (plans_per_image).
class GatedPointwiseKernel final : public OptimizedKernel {
 public:
  GatedPointwiseKernel(ConvRecipe recipe, const Tensor* input, const Tensor* gate, Tensor* output,
                       const Tensor* residual, bool resizes)
      : recipe_(std::move(recipe)), input_(input), gate_(gate), output_(output),
        residual_(residual), resizes_(resizes),
        image_(std::vector<const Tensor*>{input, output, residual}) {
    recipe_.params.batch = 1;
  }

  bool resizable() const override { return resizes_; }
  bool plan_fits_every_size() const override { return resizes_ && plan_ && image_.current(); }

  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    image_.check("gated convolution");
    input_channels_last_ = channels_last(impl_of(input_));
    const std::vector<int64_t> in_dims = one_image(dims_of(*input_));
    onednn::ConvLayouts layouts;
    if (input_channels_last_) {
      layouts.input = std::make_shared<onednn::Layout>(onednn::Layout::channels_last(in_dims));
    }
    const bool output_channels_last = channels_last(impl_of(output_));
    layouts.output = output_channels_last ? onednn::OutputLayout::kChannelsLast
                                          : onednn::OutputLayout::kPlain;
    layouts.weights_per_call = true;
    plan_ = std::make_unique<onednn::ConvPlan>(
        ConvOp::prepare(provider, recipe_, layouts));
    scaling_ = plan_->input_channel_scaling();
    pool_ = onednn::kernel_opted_in("ET_CPU_SE_SCALE_SPLIT") ? provider.work_pool() : nullptr;
    scaled_ = onednn::AlignedBuffer();
    if (scaling_) scaled_.reserve(scaling_->floats() * sizeof(float));
    const int64_t image_floats = input_->numel() / std::max<int64_t>(1, input_->size(0));
    staged_ = std::vector<float>(scaling_ ? 0 : static_cast<size_t>(image_floats));
    residual_fix_.reset();
    if (residual_ != nullptr && channels_last(impl_of(residual_)) != output_channels_last) {
      const std::vector<int64_t> dims = one_image(dims_of(*residual_));
      const auto layout = [&](bool nhwc) {
        return nhwc ? onednn::Layout::channels_last(dims) : onednn::Layout::plain(dims);
      };
      residual_fix_ = std::make_unique<onednn::ReorderPlan>(
          provider.prepare_reorder(layout(!output_channels_last), layout(output_channels_last)));
    }
  }

  const executorch::aten::TensorImpl* chainable_output() const override {
    return impl_of(output_);
  }
  size_t pieces() const override { return plan_ ? plan_->pieces() : 1; }
  std::string implementation() const override {
    if (!plan_) return "";
    return plan_->implementation() +
           (scaling_ ? " (gate folded into the weights)" : " (gate folded, staged)");
  }
  size_t staging_bytes() const override {
    return scaled_.size() + staged_.size() * sizeof(float);
  }

  Error run(KernelRuntimeContext&) override {
    return guarded("gated convolution", [&] {
      const int64_t batch = input_->size(0);
      const int64_t channels = input_->size(1);
      const int64_t in_image = batch > 0 ? input_->numel() / batch : 0;
      const int64_t out_image = batch > 0 ? output_->numel() / batch : 0;
      const int64_t pixels = channels > 0 ? in_image / channels : 0;
      const bool shared_gate = gate_->size(0) == 1;
      const float* x = input_->const_data_ptr<float>();
      const float* gate = gate_->const_data_ptr<float>();
      float* out = output_->mutable_data_ptr<float>();
      const float* residual = residual_ ? residual_->const_data_ptr<float>() : nullptr;
      for (int64_t n = 0; n < batch; ++n) {
        const float* g = gate + (shared_gate ? 0 : n * channels);
        const float* image = x + n * in_image;
        const float* image_residual = residual ? residual + n * out_image : nullptr;
        if (residual_fix_) {
          residual_fix_->run(image_residual, out + n * out_image);
          image_residual = out + n * out_image;
        }
        if (scaling_) {
          scale_weights(g);
          plan_->run_with_weights(image, out + n * out_image, image_residual, scaled());
          continue;
        }
        float* staged = staged_.data();
        for (int64_t p = 0; p < pixels; ++p) {
          for (int64_t c = 0; c < channels; ++c) {
            // channels-last: [pixel][channel]; plain: [channel][pixel].
            const int64_t at = input_channels_last_ ? p * channels + c : c * pixels + p;
            staged[at] = image[at] * g[c];
          }
        }
        plan_->run(staged, out + n * out_image, image_residual);
      }
    });
  }

 private:
  ConvRecipe recipe_;
  const Tensor* input_;
  const Tensor* gate_;
  Tensor* output_;
  const Tensor* residual_;
  bool resizes_;
  ImageSizes image_;  // the image sizes its plan serves
  bool input_channels_last_ = false;
  std::unique_ptr<onednn::ConvPlan> plan_;
  std::shared_ptr<const onednn::InputChannelScaling> scaling_;
  // The scaled weights: on a cache line (our own 1x1 kernel loads them aligned).
  onednn::AlignedBuffer scaled_;
  std::vector<float> staged_;
  std::unique_ptr<onednn::ReorderPlan> residual_fix_;
  onednn::WorkPool* pool_ = nullptr;

  // scaled_ = the plan's weights times the gate `g` along their input channels, on the calling
  // thread; ET_CPU_SE_SCALE_SPLIT=1 (read at prepare) shares it out on the pool in one share of
  // output channels per thread when there are at least kScaleSplitFloats floats. Off by
  // default: it measured no faster on EfficientNet's folded gates (provider README).
  float* scaled() const { return static_cast<float*>(scaled_.data()); }
  static constexpr size_t kScaleSplitFloats = 16384;
  void scale_weights(const float* g) {
    const size_t floats = scaling_->floats();
    const size_t parts = pool_ != nullptr && floats >= kScaleSplitFloats
                             ? static_cast<size_t>(pool_->size())
                             : 1;
    onednn::run_tasks(pool_, parts, [&](size_t part, int) {
      scaling_->scale_range(g, scaled(), scaling_->part_start(parts, part),
                            scaling_->part_start(parts, part + 1));
    });
  }
};

// ET_CPU_SE_GATE_FOLD: unset or "1" folds a gate whose convolution's weights are much cheaper
// to scale than the activation: C_out x 4 <= H x W (the 112x112 to 28x28 stages of EfficientNet
// and MobileNetV3; at 14x14, C_in x C_out weights scaled on the calling thread before the pieces
// start measured no faster than the multiply on the pool, provider README), "all" every one
// (tests; a plan split into output-channel blocks then multiplies into a staging buffer on the
// calling thread), "0" none (the multiply runs on its own, for measuring). Read at bind.
bool gate_fold_wanted(const onednn::ConvParams& params) {
  return se_gate_fold_wanted(params.out_channels,
                             params.input_size[0] * params.input_size[1]);
}

}  // namespace

bool se_gate_fold_wanted(int64_t out_channels, int64_t pixels) {
  switch (onednn::switch_reach("ET_CPU_SE_GATE_FOLD")) {
    case onednn::SwitchReach::kNever:
      return false;
    case onednn::SwitchReach::kEverywhere:
      return true;
    case onednn::SwitchReach::kDefault:
      break;
  }
  return out_channels * 4 <= pixels;
}

bool bind_gated_pointwise(const OpBinding& op, OptimizedSession& session, Out out,
                          size_t* fused) {
  if (op.fusable.empty() || op.fusable[0].kind != FusableStep::Kind::kConv) return false;
  const Tensor* a = tensor_arg(op, 0);
  const Tensor* b = tensor_arg(op, 1);
  if (!is_f32(a) || !is_f32(b) || a->dim() != 4 || b->dim() != 4) return false;
  // x is the operand of the product's shape, the gate the one of [N or 1, C, 1, 1].
  const bool a_is_x = b->size(2) == 1 && b->size(3) == 1 && (a->size(2) != 1 || a->size(3) != 1);
  const Tensor* x = a_is_x ? a : b;
  const Tensor* gate = a_is_x ? b : a;
  const std::vector<int64_t> x_dims = dims_of(*x);
  if (gate->size(1) != x_dims[1] || gate->size(2) != 1 || gate->size(3) != 1 ||
      (gate->size(0) != x_dims[0] && gate->size(0) != 1) || x_dims[0] < 1) {
    return false;
  }
  size_t index = 0;
  ConvRecipe recipe;
  if (!conv_step(op, &index, &recipe) || !is_pointwise(recipe.params) ||
      recipe.params.dilation != std::vector<int64_t>{1, 1} ||
      dims_of(*tensor_arg(op.fusable[0].args, 0)) != x_dims || !gate_fold_wanted(recipe.params)) {
    return false;
  }
  // The steps after the convolution (activations, a residual add) as its post-ops: the longest
  // prefix oneDNN takes.
  const Tensor* residual = nullptr;
  size_t steps = op.fusable.size();
  for (;; --steps) {
    onednn::PostOps post;
    const Tensor* found = nullptr;
    bool ok = true;
    for (size_t s = 1; s < steps && ok; ++s) ok = append_post_op(op.fusable[s], &post, &found);
    if (ok && onednn::supports_conv(recipe.params, post).ok) {
      recipe.post = std::move(post);
      residual = found;
      break;
    }
    if (steps == 1) return false;
  }
  auto kernel =
      std::make_unique<GatedPointwiseKernel>(std::move(recipe), x, gate, final_output(op, 0, steps),
                                             residual, plans_per_image(session));
  try {
    if (bind_prepared(std::move(kernel), session, out) != Error::Ok) return false;
  } catch (const std::exception& e) {
    log_line(LogLevel::kInfo, "gate at %s not folded into its convolution: %s", op.op_name,
             e.what());
    return false;
  }
  *fused = steps;
  return true;
}

Error bind_conv(const OpBinding& op, OptimizedSession& session, std::unique_ptr<BoundKernel>* out,
                Decline* decline, size_t* fused) {
  if (op.args.size() > 6 && op.args[6]->isBool() && op.args[6]->toBool()) {
    if (!deconv_enabled()) {
      decline->reason = "transposed convolution: off (ET_CPU_ONEDNN_DECONV=0)";
      return Error::NotSupported;
    }
    return bind_deconv(op, session, out, decline, fused);
  }
  ConvRecipe recipe;
  const Tensor* input = nullptr;
  Tensor* output = nullptr;
  if (!parse_conv(op.args, op.arg_is_constant, &recipe, &input, &output, decline)) {
    return Error::NotSupported;
  }
  if (bind_block(op, recipe, input, session, out, fused)) return Error::Ok;
  const Tensor* residual = nullptr;
  const onednn::ConvParams& params = recipe.params;
  *fused = longest_supported_prefix(
      op, [&](const onednn::PostOps& p) { return onednn::supports_conv(params, p); },
      &recipe.post, &residual);
  auto kernel = std::make_unique<ConvKernel>(std::move(recipe), input,
                                             final_output(op, 9, *fused), residual,
                                             plans_per_image(session));
  return bind_prepared(std::move(kernel), session, out);
}

}  // namespace optimized
}  // namespace cpu
}  // namespace et_cpu_plugin
