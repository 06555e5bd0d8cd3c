// The inverted residual block plan (BlockPlan): expand, depthwise, project in row bands, or
// whole per image in channel slices (then, with a project, the project in pixel pieces).
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_internal.h"

#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/kernels/depthwise_conv.h"
#include "backends/cpu/runtime/providers/optimized/kernels/pointwise_conv.h"

#include <cstring>
#include <optional>
#include <tuple>

namespace et_cpu_plugin {
namespace onednn {

namespace {

// Bytes of one thread's expanded rows plus depthwise rows per step: half of the 2 MiB L2 of
// the project's machines (Sapphire Rapids), leaving the rest for the weights, the step's input
// and output rows and the kernels' own blocking.
constexpr double kBlockStepBytes = 1 << 20;
// Output rows a piece has at least: a piece's first step computes its top halo of expanded
// rows again (the piece above has them), so pieces of fewer rows waste more of the expand.
constexpr int64_t kBlockMinPieceRows = 4;

// One primitive shape of a stage, with each thread's memory objects (made on first use).
struct BlockStage {
  dnnl::primitive primitive;
  memory::desc src_md;
  memory::desc dst_md;
  memory::desc scratchpad_md;
  std::string implementation;
  mutable std::vector<std::unordered_map<int, memory>> args;  // per thread
};

// One step of a piece: output rows [out_begin, out_end) of the block. The step keeps the
// expanded rows it shares with the previous step (moved to the buffer's front), expands input
// rows [expand_begin, expand_end) after them, runs the depthwise over all of them, then the
// project into the output rows.
struct BlockStep {
  int64_t out_begin = 0;
  int64_t out_end = 0;
  int64_t kept = 0;       // expanded rows carried over from the previous step
  int64_t kept_from = 0;  // where they start in the buffer
  int64_t expand_begin = 0;
  int64_t expand_end = 0;
  int expand = -1;  // stage indices (-1: no new rows to expand)
  int depthwise = -1;
  int project = -1;
};

struct BlockPiece {
  int64_t image = 0;
  std::vector<BlockStep> steps;
};

// Hidden channels [begin, end) of a block run whole (no row bands): the expand of those
// channels over the whole image, the depthwise on them, their own weights (torch's rows
// [begin, end) reordered for these shapes). Channels never mix in the expand's output columns
// nor in the depthwise, so slices need no halo rows and no meeting of the threads.
struct BlockSlice {
  int64_t begin = 0;
  int64_t end = 0;
  BlockStage expand;     // unless own_expand
  BlockStage depthwise;  // unless own_depthwise
  std::shared_ptr<const PointwiseConv> own_expand;
  std::shared_ptr<const DepthwiseConv> own_depthwise;
  OwnedTensor expand_weights, expand_bias;
  OwnedTensor depthwise_weights, depthwise_bias;
};

// Output pixels [begin, end) of one image, the project's piece of a two-phase block: the
// project primitive `stage` over them as one row of pixels.
struct BlockPixels {
  int64_t begin = 0;
  int64_t end = 0;
  int stage = -1;
};

}  // namespace

struct BlockPlan::Impl {
  std::shared_ptr<ProviderState> state;
  BlockParams params;
  int64_t out_h = 0;
  int64_t out_w = 0;
  bool has_add = false;
  // Trailing sigmoid / SiLU of each stage, run by our vector kernel on the stage's rows right
  // after the stage (split_tail): oneDNN's swish post-op costs ~2.6x ours per element.
  std::optional<Activation> expand_tail, depthwise_tail, project_tail;
  std::vector<BlockStage> expand;
  std::vector<BlockStage> depthwise;
  std::vector<BlockStage> project;
  // The expand stage on our own 1x1 kernel (pointwise_conv.h) instead of `expand`'s primitives,
  // when own_expand_wanted says so; its post-ops run in registers (no expand_tail).
  std::shared_ptr<const PointwiseConv> own_expand;
  // The depthwise stage on our own kernel (depthwise_conv.h) instead of `depthwise`'s
  // primitives, when it covers the stage and own_depthwise_wanted says so.
  std::shared_ptr<const DepthwiseConv> own_depthwise;
  OwnedTensor expand_weights, expand_bias;
  OwnedTensor depthwise_weights, depthwise_bias;
  OwnedTensor project_weights, project_bias;
  std::vector<BlockPiece> pieces;
  // Non-empty: the block runs whole per image in these channel slices (block_slices_wanted),
  // pieces (image, slice) on the pool, and `pieces` is empty.
  std::vector<BlockSlice> slices;
  // Non-empty (slices and a project: block_two_phase_wanted): the slices write the whole
  // depthwise output to state.block_hidden, then pieces (image, pixels) run the project.
  std::vector<BlockPixels> pixels;
  // The slices' own depthwise writes its channels straight into the output's (or the whole
  // depthwise output's) pixels, ET_CPU_BLOCK_SLICE_DIRECT unset or not "0" (read at prepare);
  // false: into the per-thread buffer, then copied pixel by pixel (the earlier way).
  bool slice_direct = false;
  int64_t step_rows = 0;
  std::string implementation;
};

BlockPlan::BlockPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

std::vector<int64_t> BlockPlan::output_dims() const {
  const Impl& p = *impl_;
  return {p.params.batch, p.params.out_channels, p.out_h, p.out_w};
}
size_t BlockPlan::weights_bytes() const {
  const Impl& p = *impl_;
  size_t total = 0;
  if (p.own_depthwise) total += p.own_depthwise->weights_bytes();
  if (p.own_expand) total += p.own_expand->weights_bytes();
  for (const BlockSlice& slice : p.slices) {
    if (slice.own_depthwise) total += slice.own_depthwise->weights_bytes();
    if (slice.own_expand) total += slice.own_expand->weights_bytes();
    for (const OwnedTensor* t : {&slice.expand_weights, &slice.expand_bias,
                                 &slice.depthwise_weights, &slice.depthwise_bias}) {
      if (t->bytes) total += t->md.get_size();
    }
  }
  for (const OwnedTensor* t : {&p.expand_weights, &p.expand_bias, &p.depthwise_weights,
                               &p.depthwise_bias, &p.project_weights, &p.project_bias}) {
    if (t->bytes) total += t->md.get_size();
  }
  return total;
}
std::string BlockPlan::implementation() const {
  return impl_->implementation;
}
size_t BlockPlan::pieces() const {
  const Impl& p = *impl_;
  return p.slices.empty() ? p.pieces.size()
                          : p.slices.size() * static_cast<size_t>(p.params.batch);
}

std::vector<int64_t> block_output_size(const BlockParams& p) {
  std::vector<int64_t> out;
  for (int64_t size : p.input_size) {
    out.push_back((size + 2 * p.padding - p.kernel) / std::max<int64_t>(p.stride, 1) + 1);
  }
  return out;
}

Support supports_block(const BlockParams& p, const BlockPostOps& post_ops) {
  if (p.batch < 1 || p.in_channels < 1 || p.hidden_channels < 1 || p.out_channels < 1) {
    return Support::no("block: batch and channel counts must be positive");
  }
  if (!p.expand && p.hidden_channels != p.in_channels) {
    return Support::no("block: without expand the depthwise has the input's channels");
  }
  if (!p.expand && !post_ops.expand.empty()) {
    return Support::no("block: post-ops for an expand the block does not have");
  }
  if (!p.project) {
    // Without both 1x1 convolutions it is a lone depthwise: nothing to fuse.
    if (!p.expand) return Support::no("block: neither expand nor project");
    if (p.out_channels != p.hidden_channels) {
      return Support::no("block: without project the output has the depthwise's channels");
    }
    if (!post_ops.project.empty()) {
      return Support::no("block: post-ops for a project the block does not have");
    }
  }
  if (p.input_size.size() != 2 || p.input_size[0] < 1 || p.input_size[1] < 1) {
    return Support::no("block: input_size must be {H, W} with positive extents");
  }
  if (p.kernel < 1 || p.stride < 1 || p.padding < 0 || p.padding >= p.kernel) {
    return Support::no("block: depthwise kernel, stride and padding out of range (kernel " +
                       std::to_string(p.kernel) + ", stride " + std::to_string(p.stride) +
                       ", padding " + std::to_string(p.padding) + ")");
  }
  for (int64_t size : block_output_size(p)) {
    if (size < 1) return Support::no("block: the depthwise output would be empty");
  }
  const PostOps* stages[] = {&post_ops.expand, &post_ops.depthwise, &post_ops.project};
  const char* names[] = {"expand", "depthwise", "project"};
  for (int i = 0; i < 3; ++i) {
    const Support ok = check_post_ops(*stages[i]);
    if (!ok.ok) return Support::no(std::string("block ") + names[i] + ": " + ok.reason);
    if (i < 2 && has_add(*stages[i])) {
      return Support::no(std::string("block ") + names[i] + ": only the project may add");
    }
  }
  if (has_add(post_ops.project)) {
    if (p.stride != 1 || p.in_channels != p.out_channels ||
        block_output_size(p) != p.input_size) {
      return Support::no(
          "block project: the residual add needs the output shaped like the input (stride 1, "
          "in_channels == out_channels, size-preserving padding)");
    }
    if (post_ops.project.size() > 1) {
      return Support::no("block project: an add may not be combined with other post-ops");
    }
  }
  return Support::yes();
}

namespace {

// A stage primitive for `src_dims` -> `dst_dims` with the plan's weights layout.
BlockStage make_block_stage(ProviderState& state, const Dims& src_dims, const Dims& dst_dims,
                            const memory::desc& weights_md, const memory::desc& bias_md,
                            const Dims& strides, const Dims& pad_l, const Dims& pad_r,
                            const dnnl::primitive_attr& attr) {
  BlockStage stage;
  stage.src_md = channels_last_md(src_dims);
  stage.dst_md = channels_last_md(dst_dims);
  const auto pd = conv_pd(state.engine, stage.src_md, weights_md, bias_md, stage.dst_md, strides,
                          Dims{0, 0}, pad_l, pad_r, attr);
  stage.primitive = dnnl::convolution_forward(pd);
  stage.scratchpad_md = pd.scratchpad_desc();
  stage.implementation = pd.impl_info_str();
  stage.args.resize(state.block_expanded.size());
  return stage;
}

// The weights (and bias) layout oneDNN picks for a stage over the whole image, reordered from
// torch's, and the implementation it picks; every band of the stage then uses this layout.
std::tuple<OwnedTensor, OwnedTensor, std::string> block_weights(
    ProviderState& state, const Dims& src_dims, const Dims& dst_dims, const Dims& weight_dims,
    const float* weight, const float* bias, const Dims& strides, const Dims& padding,
    const dnnl::primitive_attr& attr) {
  const int64_t channels = dst_dims[1];
  const auto pd = conv_pd(state.engine, channels_last_md(src_dims), any_md(weight_dims),
                          bias ? any_md({channels}) : memory::desc(), channels_last_md(dst_dims),
                          strides, Dims{0, 0}, padding, padding, attr);
  OwnedTensor w = reorder_constant(state, plain_md(weight_dims), weight, pd.weights_desc());
  OwnedTensor b;
  if (bias) b = reorder_constant(state, plain_md({channels}), bias, pd.bias_desc());
  return {w, b, pd.impl_info_str()};
}

// `stage` unless oneDNN gave the band a different (slower) kernel than the whole image gets;
// e.g. a 1x1 band of 3 rows with the whole image's weights layout falls to "ref:any", 100x
// slower. Then the block is not fused (the caller runs the three convolutions).
BlockStage checked(BlockStage stage, const std::string& whole, const char* what) {
  if (stage.implementation != whole) {
    throw ProviderError(std::string("prepare_block: a band of the ") + what + " would run " +
                        stage.implementation + " instead of " + whole);
  }
  return stage;
}

// Index of the stage keyed `key` in `stages`, made by `make` the first time.
template <typename Key, typename Make>
int stage_index(std::vector<std::pair<Key, int>>& keys, std::vector<BlockStage>& stages,
                const Key& key, Make make) {
  for (const auto& [k, index] : keys) {
    if (k == key) return index;
  }
  stages.push_back(make());
  keys.emplace_back(key, static_cast<int>(stages.size() - 1));
  return static_cast<int>(stages.size() - 1);
}

// Whether a block runs whole per image in channel slices (BlockSlice, one per pool thread)
// instead of row bands: a block without project (the squeeze-excite blocks' expand +
// depthwise), on a pool, whose one slice of expanded image plus depthwise output fits in
// kBlockStepBytes. Row bands of such small images are few and thin: at 7x7 the rule of at least
// kBlockMinPieceRows rows made one piece (one thread for the whole block), at 14x14 two bands
// whose halo rows made the expand ~28% more work (5x5). ET_CPU_BLOCK_SLICES=0: row bands always.
bool block_slices_wanted(const BlockParams& p, int64_t slices, int64_t out_h, int64_t out_w) {
  if (!kernel_switched_on("ET_CPU_BLOCK_SLICES") || !p.expand || p.project || slices < 2 ||
      p.hidden_channels < 16 * slices) {
    return false;
  }
  const double slice_channels = static_cast<double>((p.hidden_channels + slices - 1) / slices);
  const double pixels =
      static_cast<double>(p.input_size[0] * p.input_size[1] + out_h * out_w);
  return 4.0 * slice_channels * pixels <= kBlockStepBytes;
}

// Whether a block WITH project runs in two phases: the expand and depthwise whole per image in
// channel slices (as block_slices_wanted's blocks), into one buffer of the whole depthwise
// output, then, after the pool's join, the project (+ input) in pieces of pixels. Row bands of
// >= kBlockMinPieceRows rows make a 7x7 block one piece (MobileNetV2's 160 -> 960 -> 160 / 320 on
// one of the two threads). Needs a slice that fits kBlockStepBytes as block_slices_wanted's.
// ET_CPU_BLOCK_TWO_PHASE (read at prepare): "0" never; "all" every block whose slice fits;
// unset: where the row bands (`band_pieces` of them over the batch) would leave a thread idle.
bool block_two_phase_wanted(const BlockParams& p, int64_t slices, int64_t out_h, int64_t out_w,
                            int64_t band_pieces) {
  const SwitchReach reach = switch_reach("ET_CPU_BLOCK_TWO_PHASE");
  if (reach == SwitchReach::kNever || !p.expand || !p.project || slices < 2 ||
      p.hidden_channels < 16 * slices) {
    return false;
  }
  if (reach == SwitchReach::kDefault && band_pieces >= slices) return false;
  const double slice_channels = static_cast<double>((p.hidden_channels + slices - 1) / slices);
  const double pixels =
      static_cast<double>(p.input_size[0] * p.input_size[1] + out_h * out_w);
  return 4.0 * slice_channels * pixels <= kBlockStepBytes;
}

}  // namespace

BlockPlan Provider::prepare_block(
    const BlockParams& params, const BlockWeights& weights, const BlockPostOps& post_ops) {
  const Support support = supports_block(params, post_ops);
  if (!support.ok) {
    throw ProviderError("prepare_block: " + support.reason);
  }
  if ((params.expand && !weights.expand) || !weights.depthwise ||
      (params.project && !weights.project)) {
    throw ProviderError("prepare_block: a weight is null");
  }
  ProviderState& state = *state_;
  if (state.omp_threads != 1 || state.block_expanded.empty()) {
    throw ProviderError("prepare_block: needs work sharing (ET_CPU_ONEDNN_WORK_SHARING=0 is set)");
  }
  ThreadCountGuard threads(state.omp_threads);
  return wrap_dnnl("prepare_block", [&] {
    auto impl = std::make_shared<BlockPlan::Impl>();
    BlockPlan::Impl& p = *impl;
    p.state = state_;
    p.params = params;
    const int64_t h = params.input_size[0];
    const int64_t w = params.input_size[1];
    const std::vector<int64_t> out_size = block_output_size(params);
    p.out_h = out_size[0];
    p.out_w = out_size[1];
    p.has_add = has_add(post_ops.project);
    const int64_t cin = params.in_channels;
    const int64_t hid = params.hidden_channels;
    const int64_t cout = params.out_channels;
    const int64_t k = params.kernel;
    const int64_t s = params.stride;
    const int64_t pad = params.padding;
    // Every stage writes dense channels-last rows, which suit a vector tail (tail_fits).
    const SplitPostOps expand_post = split_tail(post_ops.expand);
    const SplitPostOps depthwise_post = split_tail(post_ops.depthwise);
    const SplitPostOps project_post = split_tail(post_ops.project);
    p.expand_tail = expand_post.tail;
    p.depthwise_tail = depthwise_post.tail;
    p.project_tail = project_post.tail;
    const dnnl::primitive_attr expand_attr = make_attr(expand_post.primitive);
    const dnnl::primitive_attr depthwise_attr = make_attr(depthwise_post.primitive);
    const dnnl::primitive_attr project_attr = make_attr(project_post.primitive);

    DepthwiseShape own_shape;
    own_shape.channels = hid;
    own_shape.in_h = h;
    own_shape.in_w = w;
    own_shape.out_h = p.out_h;
    own_shape.out_w = p.out_w;
    own_shape.kernel_h = own_shape.kernel_w = k;
    own_shape.stride_h = own_shape.stride_w = s;
    own_shape.pad_top = own_shape.pad_left = pad;
    const bool own_depthwise = own_depthwise_wanted(own_shape, post_ops.depthwise);
    // The expand on our own 1x1 kernel (few input channels): its weights RowGemm's packing,
    // through the cache; the stage's post-ops (with a SiLU tail) in registers.
    const bool own_expand = params.expand && own_expand_wanted(cin, hid, post_ops.expand);
    auto make_own_expand = [&](int64_t begin, int64_t n) {
      auto conv = std::make_shared<const PointwiseConv>(
          cached_row_gemm_weights(state.weight_cache.get(), cin, n, weights.expand + begin * cin,
                                  false, weights.expand_bias ? weights.expand_bias + begin
                                                             : nullptr),
          post_ops.expand);
      state.weights_bytes += conv->weights_bytes();
      return conv;
    };

    // Pieces: per image, bands of output rows; as many as the pool's rule gives, but a multiple
    // of the threads (each gets an equal share) and no thinner than kBlockMinPieceRows.
    const int threads_n = state.pool ? state.pool->size() : 1;
    const double expand_flops = params.expand ? static_cast<double>(h * w * cin * hid) : 0.0;
    const double rest_flops =
        static_cast<double>(p.out_h * p.out_w) * hid * (k * k + (params.project ? cout : 0));
    const double flops = 2.0 * static_cast<double>(params.batch) * (expand_flops + rest_flops);
    int64_t per_image = static_cast<int64_t>(state.pieces_for(flops / params.batch, p.out_h));
    per_image = std::min(per_image, std::max<int64_t>(1, p.out_h / kBlockMinPieceRows));
    if (per_image > 1 && threads_n > 1) {
      per_image = std::max<int64_t>(threads_n, per_image / threads_n * threads_n);
    }

    // Whole per image in channel slices (block_slices_wanted, block_two_phase_wanted); row
    // bands below when a slice's stage (or a pixel piece's project) would not get the kernel
    // oneDNN gives its whole op.
    const int64_t slice_count = state.pool ? static_cast<int64_t>(state.pool->size()) : 1;
    if (block_slices_wanted(params, slice_count, p.out_h, p.out_w) ||
        block_two_phase_wanted(params, slice_count, p.out_h, p.out_w,
                               per_image * params.batch)) {
      const int64_t vectors = (hid + 15) / 16;  // slices of whole 16-channel vectors
      bool fits = true;
      int64_t widest = 0;
      for (int64_t i = 0; i < slice_count && fits; ++i) {
        const auto [v0, v1] =
            slice_of(vectors, static_cast<size_t>(slice_count), static_cast<size_t>(i));
        BlockSlice slice;
        slice.begin = v0 * 16;
        slice.end = std::min(hid, v1 * 16);
        const int64_t n = slice.end - slice.begin;
        const float* expand_bias =
            weights.expand_bias ? weights.expand_bias + slice.begin : nullptr;
        const float* depthwise_bias =
            weights.depthwise_bias ? weights.depthwise_bias + slice.begin : nullptr;
        std::string whole;
        if (own_expand) {
          slice.own_expand = make_own_expand(slice.begin, n);
        } else {
          std::tie(slice.expand_weights, slice.expand_bias, whole) = block_weights(
              state, {1, cin, h, w}, {1, n, h, w}, {n, cin, 1, 1},
              weights.expand + slice.begin * cin, expand_bias, {1, 1}, {0, 0}, expand_attr);
          slice.expand = make_block_stage(
              state, {1, cin, h, w}, {1, n, h, w}, slice.expand_weights.md,
              expand_bias ? slice.expand_bias.md : memory::desc(), {1, 1}, {0, 0}, {0, 0},
              expand_attr);
          fits = slice.expand.implementation == whole && whole.find("ref") == std::string::npos;
        }
        if (own_depthwise) {
          DepthwiseShape shape = own_shape;
          shape.channels = n;
          slice.own_depthwise = std::make_shared<DepthwiseConv>(
              shape, weights.depthwise + slice.begin * k * k, depthwise_bias, post_ops.depthwise);
          state.weights_bytes += slice.own_depthwise->weights_bytes();
        } else {
          std::tie(slice.depthwise_weights, slice.depthwise_bias, whole) = block_weights(
              state, {1, n, h, w}, {1, n, p.out_h, p.out_w}, {n, 1, 1, k, k},
              weights.depthwise + slice.begin * k * k, depthwise_bias, {s, s}, {pad, pad},
              depthwise_attr);
          slice.depthwise = make_block_stage(
              state, {1, n, h, w}, {1, n, p.out_h, p.out_w}, slice.depthwise_weights.md,
              depthwise_bias ? slice.depthwise_bias.md : memory::desc(), {s, s}, {pad, pad},
              {pad, pad}, depthwise_attr);
          fits = fits && slice.depthwise.implementation == whole &&
                 whole.find("ref") == std::string::npos;
        }
        widest = std::max(widest, n);
        p.slices.push_back(std::move(slice));
      }
      std::string project_whole;
      if (fits && params.project) {
        // The project over pixel pieces, each one row of pixels, in the whole op's layout.
        std::tie(p.project_weights, p.project_bias, project_whole) = block_weights(
            state, {1, hid, p.out_h, p.out_w}, {1, cout, p.out_h, p.out_w}, {cout, hid, 1, 1},
            weights.project, weights.project_bias, {1, 1}, {0, 0}, project_attr);
        const int64_t pixels = p.out_h * p.out_w;
        const int64_t pixel_pieces = std::min<int64_t>(slice_count, pixels);
        std::vector<std::pair<int64_t, int>> pixel_keys;
        for (int64_t i = 0; i < pixel_pieces && fits; ++i) {
          const auto [begin, end] =
              slice_of(pixels, static_cast<size_t>(pixel_pieces), static_cast<size_t>(i));
          BlockPixels piece;
          piece.begin = begin;
          piece.end = end;
          const int64_t n = end - begin;
          piece.stage = stage_index(pixel_keys, p.project, n, [&] {
            return make_block_stage(state, {1, hid, 1, n}, {1, cout, 1, n}, p.project_weights.md,
                                    weights.project_bias ? p.project_bias.md : memory::desc(),
                                    {1, 1}, {0, 0}, {0, 0}, project_attr);
          });
          fits = p.project[static_cast<size_t>(piece.stage)].implementation == project_whole &&
                 project_whole.find("ref") == std::string::npos;
          p.pixels.push_back(piece);
        }
      }
      if (fits) {
        if (own_depthwise) p.depthwise_tail.reset();  // its post-ops run in registers
        p.slice_direct = own_depthwise && kernel_switched_on("ET_CPU_BLOCK_SLICE_DIRECT");
        if (own_expand) p.expand_tail.reset();
        for (AlignedBuffer& buffer : state.block_expanded) {
          buffer.reserve(static_cast<size_t>(h * w * widest) * sizeof(float));
        }
        for (AlignedBuffer& buffer : state.block_depthwise) {
          buffer.reserve(static_cast<size_t>(p.out_h * p.out_w * widest) * sizeof(float));
        }
        for (const BlockSlice& slice : p.slices) {
          if (!own_expand) state.reserve_piece_scratchpad(slice.expand.scratchpad_md);
          if (!own_depthwise) state.reserve_piece_scratchpad(slice.depthwise.scratchpad_md);
        }
        for (const BlockStage& stage : p.project) {
          state.reserve_piece_scratchpad(stage.scratchpad_md);
        }
        if (params.project) {
          state.block_hidden.reserve(static_cast<size_t>(params.batch * p.out_h * p.out_w * hid) *
                                     sizeof(float));
        }
        const BlockSlice& first = p.slices.front();
        const bool tails = p.expand_tail || p.depthwise_tail || p.project_tail;
        p.implementation =
            "block " +
            (own_expand ? std::string("pointwise:avx512") : first.expand.implementation) + " + " +
            (own_depthwise ? std::string("depthwise:avx512") : first.depthwise.implementation) +
            (params.project ? " + " + project_whole : std::string(" (no project)")) +
            (tails ? " + vector tails" : "") + ", whole image in " +
            std::to_string(p.slices.size()) + " channel slices" +
            (p.slice_direct ? " written in place" : "") +
            (params.project ? ", then the project in " + std::to_string(p.pixels.size()) +
                                  " pixel pieces"
                            : std::string());
        return BlockPlan(std::move(impl));
      }
      p.slices.clear();
      p.pixels.clear();
      p.project.clear();
    }

    // Weights in the layouts the whole-image stages pick.
    std::string expand_impl;
    std::string depthwise_impl;
    std::string project_impl;
    if (own_expand) {
      p.own_expand = make_own_expand(0, hid);
      p.expand_tail.reset();
      expand_impl = "pointwise:avx512";
    } else if (params.expand) {
      std::tie(p.expand_weights, p.expand_bias, expand_impl) = block_weights(
          state, {1, cin, h, w}, {1, hid, h, w}, {hid, cin, 1, 1}, weights.expand,
          weights.expand_bias, {1, 1}, {0, 0}, expand_attr);
    }
    if (own_depthwise) {
      // Every post-op in registers: no vector tail after this stage.
      p.own_depthwise = std::make_shared<DepthwiseConv>(own_shape, weights.depthwise,
                                                        weights.depthwise_bias,
                                                        post_ops.depthwise);
      p.depthwise_tail.reset();
      state.weights_bytes += p.own_depthwise->weights_bytes();
      depthwise_impl = "depthwise:avx512";
    } else {
      std::tie(p.depthwise_weights, p.depthwise_bias, depthwise_impl) = block_weights(
          state, {1, hid, h, w}, {1, hid, p.out_h, p.out_w}, {hid, 1, 1, k, k},
          weights.depthwise, weights.depthwise_bias, {s, s}, {pad, pad}, depthwise_attr);
    }
    if (params.project) {
      std::tie(p.project_weights, p.project_bias, project_impl) = block_weights(
          state, {1, hid, p.out_h, p.out_w}, {1, cout, p.out_h, p.out_w}, {cout, hid, 1, 1},
          weights.project, weights.project_bias, {1, 1}, {0, 0}, project_attr);
    }

    // Rows per step: what fits kBlockStepBytes of expanded (or input) plus depthwise rows
    // (ET_CPU_BLOCK_STEP_KIB, read at prepare: another budget, for measuring).
    const double step_bytes =
        1024.0 * static_cast<double>(switch_number("ET_CPU_BLOCK_STEP_KIB",
                                                   static_cast<int64_t>(kBlockStepBytes) / 1024, 16,
                                                   65536));
    const double row_bytes = 4.0 * static_cast<double>(hid) * static_cast<double>(s * w + p.out_w);
    p.step_rows = std::max<int64_t>(1, static_cast<int64_t>(step_bytes / row_bytes));
    p.step_rows = std::min(p.step_rows, p.out_h);

    std::vector<std::pair<int64_t, int>> expand_keys;
    std::vector<std::pair<std::vector<int64_t>, int>> depthwise_keys;
    std::vector<std::pair<int64_t, int>> project_keys;
    int64_t max_expanded_rows = 0;
    int64_t max_step_rows = 0;
    for (int64_t image = 0; image < params.batch; ++image) {
      for (size_t i = 0; i < static_cast<size_t>(per_image); ++i) {
        const auto [begin, end] = slice_of(p.out_h, static_cast<size_t>(per_image), i);
        BlockPiece piece;
        piece.image = image;
        int64_t buf_lo = 0;
        int64_t buf_hi = 0;  // expanded rows [buf_lo, buf_hi) in the buffer; empty at first
        // Near-equal steps of at most step_rows rows (no thin remainder: thin bands are where
        // oneDNN's fast kernels stop applying).
        const size_t steps = static_cast<size_t>((end - begin + p.step_rows - 1) / p.step_rows);
        for (size_t j = 0; j < steps; ++j) {
          const auto [step_begin, step_end] = slice_of(end - begin, steps, j);
          const int64_t r0 = begin + step_begin;
          BlockStep step;
          step.out_begin = r0;
          step.out_end = begin + step_end;
          const int64_t rows = step.out_end - step.out_begin;
          const int64_t first = r0 * s - pad;
          const int64_t last = (step.out_end - 1) * s - pad + k;
          const int64_t lo = std::max<int64_t>(0, first);
          const int64_t hi = std::min<int64_t>(h, last);
          if (hi <= lo) {
            throw ProviderError("prepare_block: a step would read only padding");
          }
          if (buf_hi > lo && params.expand) {
            step.kept = buf_hi - lo;
            step.kept_from = lo - buf_lo;
          }
          // Without expand these are the input rows the depthwise reads in place.
          step.expand_begin = lo + step.kept;
          step.expand_end = hi;
          const int64_t new_rows = step.expand_end - step.expand_begin;
          if (new_rows > 0 && p.own_expand) {
            step.expand = 0;  // our kernel takes any rows: no stage per row count
          } else if (new_rows > 0 && params.expand) {
            step.expand = stage_index(expand_keys, p.expand, new_rows, [&] {
              return checked(
                  make_block_stage(state, {1, cin, new_rows, w}, {1, hid, new_rows, w},
                                   p.expand_weights.md,
                                   weights.expand_bias ? p.expand_bias.md : memory::desc(),
                                   {1, 1}, {0, 0}, {0, 0}, expand_attr),
                  expand_impl, "expand");
            });
          }
          const int64_t top = lo - first;
          const int64_t bottom = last - hi;
          if (!p.own_depthwise) step.depthwise = stage_index(
              depthwise_keys, p.depthwise, std::vector<int64_t>{hi - lo, top, bottom, rows}, [&] {
                return checked(
                    make_block_stage(state, {1, hid, hi - lo, w}, {1, hid, rows, p.out_w},
                                     p.depthwise_weights.md,
                                     weights.depthwise_bias ? p.depthwise_bias.md
                                                            : memory::desc(),
                                     {s, s}, {top, pad}, {bottom, pad}, depthwise_attr),
                    depthwise_impl, "depthwise");
              });
          if (params.project) {
            step.project = stage_index(project_keys, p.project, rows, [&] {
              return checked(
                  make_block_stage(state, {1, hid, rows, p.out_w}, {1, cout, rows, p.out_w},
                                   p.project_weights.md,
                                   weights.project_bias ? p.project_bias.md : memory::desc(),
                                   {1, 1}, {0, 0}, {0, 0}, project_attr),
                  project_impl, "project");
            });
          }
          max_expanded_rows = std::max(max_expanded_rows, hi - lo);
          max_step_rows = std::max(max_step_rows, rows);
          buf_lo = lo;
          buf_hi = hi;
          piece.steps.push_back(step);
        }
        p.pieces.push_back(std::move(piece));
      }
    }
    if (params.expand) {
      for (AlignedBuffer& buffer : state.block_expanded) {
        buffer.reserve(static_cast<size_t>(max_expanded_rows * w * hid) * sizeof(float));
      }
    }
    if (params.project) {  // without it the depthwise writes the output rows
      for (AlignedBuffer& buffer : state.block_depthwise) {
        buffer.reserve(static_cast<size_t>(max_step_rows * p.out_w * hid) * sizeof(float));
      }
    }
    for (const std::vector<BlockStage>* stages : {&p.expand, &p.depthwise, &p.project}) {
      for (const BlockStage& stage : *stages) {
        if (state.pool) {
          state.reserve_piece_scratchpad(stage.scratchpad_md);
        } else {
          state.reserve_scratchpad(stage.scratchpad_md);
        }
      }
    }
    const bool tails = p.expand_tail || p.depthwise_tail || p.project_tail;
    p.implementation =
        "block " + (params.expand ? expand_impl + " + " : std::string()) +
        depthwise_impl +
        (params.project ? " + " + p.project.front().implementation : std::string(" (no project)")) +
        (tails ? " + vector tails" : "") + ", " + std::to_string(p.pieces.size()) +
        " pieces in steps of <= " + std::to_string(p.step_rows) + " rows";
    return BlockPlan(std::move(impl));
  });
}

void BlockPlan::run(const float* input, float* output, int64_t images) const {
  const Impl& p = *impl_;
  ProviderState& state = *p.state;
  ThreadCountGuard threads(state.omp_threads);
  const BlockParams& bp = p.params;
  if (images == 0) images = bp.batch;
  if (images < 1 || (images != bp.batch && bp.batch != 1)) {
    throw ProviderError("block: a plan prepared for " + std::to_string(bp.batch) +
                        " images cannot run " + std::to_string(images));
  }
  const int64_t h = bp.input_size[0];
  const int64_t w = bp.input_size[1];
  const int64_t in_row = w * bp.in_channels;         // floats per input row
  const int64_t hidden_row = w * bp.hidden_channels;  // per expanded row
  const int64_t out_row = p.out_w * bp.out_channels;  // per output row
  auto run_stage = [&](const BlockStage& stage, int worker, const float* src, float* dst,
                       const OwnedTensor& weights, const OwnedTensor& bias,
                       const std::optional<Activation>& tail) {
    PieceData data = piece_data(src, dst, weights, bias.bytes ? &bias : nullptr);
    if (tail) data.tail = &*tail;
    execute_on_worker(state, stage.primitive, stage.args[static_cast<size_t>(worker)],
                      stage.src_md, stage.dst_md, stage.scratchpad_md, worker, data);
  };
  if (!p.slices.empty()) {
    // With a project, block_hidden holds the depthwise output of the batch prepared for only:
    // a plan of one image run over several images takes them one round at a time.
    const int64_t per_round = bp.project ? bp.batch : images;
    for (int64_t done = 0; done < images; done += per_round) {
      const int64_t round = std::min(per_round, images - done);
      const float* round_input = input + done * h * in_row;
      float* round_output = output + done * p.out_h * out_row;
      // Piece (image, slice): the slice's expand over the whole image, its depthwise, and its
      // channels copied into the output's rows (with a project: into the image's rows of the
      // whole depthwise output, which the project's pixel pieces read after the join).
      const size_t count = p.slices.size();
      const int64_t pixels = p.out_h * p.out_w;
      float* hidden = bp.project ? static_cast<float*>(state.block_hidden.data()) : nullptr;
      const int64_t gathered_channels = bp.project ? bp.hidden_channels : bp.out_channels;
      auto run_slice = [&](size_t index, int worker) {
        wrap_dnnl("block", [&] {
          const BlockSlice& slice = p.slices[index % count];
          const int64_t image = static_cast<int64_t>(index / count);
          const float* x = round_input + image * h * in_row;
          float* y = hidden ? hidden + image * pixels * bp.hidden_channels
                            : round_output + image * p.out_h * out_row;
          const size_t w_index = static_cast<size_t>(worker);
          float* expanded = static_cast<float*>(state.block_expanded[w_index].data());
          float* depthwise = static_cast<float*>(state.block_depthwise[w_index].data());
          if (slice.own_expand) {
            slice.own_expand->run(x, h * w, expanded);
          } else {
            run_stage(slice.expand, worker, x, expanded, slice.expand_weights, slice.expand_bias,
                      p.expand_tail);
          }
          if (p.slice_direct) {
            // Straight into the slice's channels of each output pixel: no copy.
            slice.own_depthwise->run_rows(expanded, 0, h, y + slice.begin, 0, p.out_h,
                                          gathered_channels);
            return;
          }
          if (slice.own_depthwise) {
            slice.own_depthwise->run_rows(expanded, 0, h, depthwise, 0, p.out_h);
          } else {
            run_stage(slice.depthwise, worker, expanded, depthwise, slice.depthwise_weights,
                      slice.depthwise_bias, p.depthwise_tail);
          }
          const int64_t n = slice.end - slice.begin;
          for (int64_t i = 0; i < pixels; ++i) {
            std::memcpy(y + i * gathered_channels + slice.begin, depthwise + i * n,
                        static_cast<size_t>(n) * sizeof(float));
          }
        });
      };
      if (state.pool) {
        state.pool->run(count * static_cast<size_t>(round), run_slice);
      } else {
        for (size_t i = 0; i < count * static_cast<size_t>(round); ++i) run_slice(i, 0);
      }
      if (!bp.project) continue;
      // Piece (image, pixels): the project of those pixels (+ the block's input).
      const size_t pixel_count = p.pixels.size();
      auto run_pixels = [&](size_t index, int worker) {
        wrap_dnnl("block", [&] {
          const BlockPixels& piece = p.pixels[index % pixel_count];
          const int64_t image = static_cast<int64_t>(index / pixel_count);
          const int64_t first = image * pixels + piece.begin;
          float* out = round_output + first * bp.out_channels;
          if (p.has_add) {
            // The sum post-op adds what the output pixels hold: the block's input pixels.
            std::memcpy(out, round_input + first * bp.in_channels,
                        static_cast<size_t>((piece.end - piece.begin) * bp.out_channels) *
                            sizeof(float));
          }
          run_stage(p.project[static_cast<size_t>(piece.stage)], worker,
                    hidden + first * bp.hidden_channels, out, p.project_weights, p.project_bias,
                    p.project_tail);
        });
      };
      if (state.pool) {
        state.pool->run(pixel_count * static_cast<size_t>(round), run_pixels);
      } else {
        for (size_t i = 0; i < pixel_count * static_cast<size_t>(round); ++i) run_pixels(i, 0);
      }
    }
    return;
  }
  auto run_piece = [&](size_t index, int worker) {
    wrap_dnnl("block", [&] {
      const BlockPiece& piece = p.pieces[index % p.pieces.size()];
      const int64_t image = piece.image + static_cast<int64_t>(index / p.pieces.size());
      const float* x = input + image * h * in_row;
      float* y = output + image * p.out_h * out_row;
      const size_t w_index = static_cast<size_t>(worker);
      float* expanded = static_cast<float*>(state.block_expanded[w_index].data());
      float* depthwise = static_cast<float*>(state.block_depthwise[w_index].data());
      for (const BlockStep& step : piece.steps) {
        if (step.kept > 0 && step.kept_from > 0) {
          std::memmove(expanded, expanded + step.kept_from * hidden_row,
                       static_cast<size_t>(step.kept * hidden_row) * sizeof(float));
        }
        if (step.expand >= 0 && p.own_expand) {
          p.own_expand->run(x + step.expand_begin * in_row,
                            (step.expand_end - step.expand_begin) * w,
                            expanded + step.kept * hidden_row);
        } else if (step.expand >= 0) {
          run_stage(p.expand[static_cast<size_t>(step.expand)], worker,
                    x + step.expand_begin * in_row, expanded + step.kept * hidden_row,
                    p.expand_weights, p.expand_bias, p.expand_tail);
        }
        const float* depthwise_in = bp.expand ? expanded : x + step.expand_begin * in_row;
        float* out = y + step.out_begin * out_row;
        if (p.own_depthwise) {
          // The held rows: image rows [lo, hi) (the expanded buffer's, or the input's).
          const int64_t lo = step.expand_begin - step.kept;
          p.own_depthwise->run_rows(depthwise_in, lo, step.expand_end - lo,
                                    bp.project ? depthwise : out, step.out_begin, step.out_end);
        } else {
          run_stage(p.depthwise[static_cast<size_t>(step.depthwise)], worker, depthwise_in,
                    bp.project ? depthwise : out, p.depthwise_weights, p.depthwise_bias,
                    p.depthwise_tail);
        }
        if (!bp.project) continue;
        if (p.has_add) {
          // The sum post-op adds what the output rows hold: the block's input rows.
          std::memcpy(out, x + step.out_begin * in_row,
                      static_cast<size_t>((step.out_end - step.out_begin) * out_row) *
                          sizeof(float));
        }
        run_stage(p.project[static_cast<size_t>(step.project)], worker, depthwise, out,
                  p.project_weights, p.project_bias, p.project_tail);
      }
    });
  };
  // A plan of one image over `images`: task t is piece t % pieces of image t / pieces.
  const size_t tasks = p.pieces.size() * static_cast<size_t>(images / bp.batch);
  if (state.pool) {
    state.pool->run(tasks, run_piece);
  } else {
    for (size_t i = 0; i < tasks; ++i) run_piece(i, 0);
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
