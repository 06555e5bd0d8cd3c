// The plans' internals shared by their source files: ProviderState, buffers, pieces, helpers.
//
// Not part of the plans' interface (onednn_provider.h is): only the plans' own .cc files include
// this. Where things live (paths below providers/optimized/):
//   onednn/onednn_provider.cc  Provider (threads, defaults, memory accounting, ISA), post-ops
//   common/layout.cc           Layout, memory descriptors, reorders (ReorderPlan, weights, bands)
//   common/pieces.cc           running primitives on the pool's threads; slicing ops into pieces
//   common/work_pool.{h,cc}    the work-sharing pool
//   common/weight_cache.{h,cc} prepared constants shared by a delegate instance's Providers
//   onednn/conv_common.cc      ConvLikePlan on ConvCore: staging, run, row bands (conv, deconv)
//   onednn/conv_plan.cc        prepare_conv and its splits (row bands, images, channel blocks)
//   onednn/deconv_plan.cc      prepare_deconv: transposed convolution (images, output row bands)
//   onednn/linear_plan.cc      LinearPlan (column blocks)
//   onednn/matmul_plan.cc      MatmulPlan (batches, row bands)
//   onednn/block_plan.cc       BlockPlan: the inverted residual block in row bands
//   onednn/pooling_plan.cc     PoolPlan: max pooling and global average pooling
//   onednn/eltwise_plan.cc     EltwisePlan: activations; their oneDNN algorithms (post-ops too)
//   onednn/binary_plan.cc      BinaryPlan: add/sub/mul/div with broadcasting
//   onednn/resampling_plan.cc  ResamplePlan: nearest and linear resampling
//   onednn/concat_plan.cc      ConcatPlan: concatenation
//   onednn/layer_norm_plan.cc  LayerNormPlan: layer normalization
//   onednn/softmax_plan.cc     SoftmaxPlan: our own AVX-512 loops, else oneDNN's softmax
//   kernels/permute_plan.cc    PermutePlan: permute_copy on our own copy loops
//   kernels/row_gemm.cc, channel_binary.cc, vector_activations.cc: our own kernels the plans run
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "backends/cpu/runtime/providers/optimized/onednn/onednn_provider.h"
#include "backends/cpu/runtime/providers/optimized/common/aligned_buffer.h"
#include "backends/cpu/runtime/providers/optimized/common/slices.h"
#include "backends/cpu/runtime/providers/optimized/common/weight_cache.h"
#include "backends/cpu/runtime/providers/optimized/common/work_pool.h"
#include "backends/cpu/runtime/providers/optimized/kernels/conv_window.h"

namespace et_cpu_plugin {
namespace onednn {

using dnnl::memory;
using Dims = memory::dims;

// Runs a region with oneDNN's thread count, restoring the caller's OpenMP setting afterwards
// (torch shares libgomp in a Python process and must keep its own torch.set_num_threads value).
class ThreadCountGuard {
 public:
  explicit ThreadCountGuard(int threads) : saved_(omp_get_max_threads()) {
    if (saved_ != threads) {
      omp_set_num_threads(threads);
    }
    threads_ = threads;
  }
  ~ThreadCountGuard() {
    if (saved_ != threads_) {
      omp_set_num_threads(saved_);
    }
  }
  ThreadCountGuard(const ThreadCountGuard&) = delete;
  ThreadCountGuard& operator=(const ThreadCountGuard&) = delete;

 private:
  int saved_;
  int threads_ = 0;
};

// Pieces per pool thread at most: enough that a thread the OS deschedules leaves most of an op
// to the others, few enough that the fixed cost of a oneDNN call (a few us) stays small. Measured
// on the example networks: 2 per thread beat 4 (ResNet 17 vs 21 ms, MobileNet 3.7 vs 5.7 ms).
constexpr int64_t kPiecesPerThread = 2;

// Runs `fn`, turning a oneDNN error into a ProviderError that names `what`.
template <typename Fn>
auto wrap_dnnl(const char* what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const dnnl::error& e) {
    throw ProviderError(std::string("oneDNN provider: ") + what + ": " + e.what());
  }
}

// ---------------------------------------------------------------------------------------------
// Dims, memory descriptors and layouts (layout.cc)

// "[1, 2, 3]".
std::string dims_to_string(const std::vector<int64_t>& dims);
// The product of values[from:].
double product(const std::vector<int64_t>& values, size_t from = 0);
// fp32 descriptors of `dims`: row-major, channels-last ({N, C, *spatial} as NWC / NHWC / NDHWC;
// throws below rank 3), and format `any` (the primitive picks).
memory::desc plain_md(const Dims& dims);
memory::desc channels_last_md(const Dims& dims);
memory::desc any_md(const Dims& dims);

struct Layout::Impl {
  memory::desc md;
  std::vector<int64_t> dims;
};

// The Layout of `md` (its dims taken from it).
Layout layout_of(const memory::desc& md);

// ---------------------------------------------------------------------------------------------
// Post-ops (onednn_provider.cc)

// Whether `post_ops` can be fused: at most one add, clamps with min <= max.
Support check_post_ops(const PostOps& post_ops);
// `post_ops` as oneDNN post-ops (an add as the sum post-op: run() puts the residual into dst
// first), with a user scratchpad (one per Provider, shared by its plans).
dnnl::primitive_attr make_attr(const PostOps& post_ops);
bool has_add(const PostOps& post_ops);

// ---------------------------------------------------------------------------------------------
// Activations (eltwise_plan.cc)

// oneDNN's eltwise algorithm and its alpha/beta for `activation` (torch's definition).
dnnl::algorithm eltwise_algorithm(const Activation& activation, float* alpha, float* beta);
// "hardswish", "gelu(tanh)", ... for messages.
const char* activation_name(Activation::Kind kind);

// ---------------------------------------------------------------------------------------------
// Provider state shared by the plans

class RowGemm;
class DepthwiseConv;
class StemConv;
class PointwiseConv;
class StreamConv;
class WinogradConv;

struct ProviderState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  int num_threads = 1;
  int omp_threads = 1;  // oneDNN's OpenMP team size on the calling thread
  int64_t min_task_flops = 0;
  // pieces_for rounds a count above the pool's threads down to a multiple of them (3 pieces on
  // 2 threads leave one thread 2 of them: the join waits a third of the op): ET_CPU_EVEN_SHARES
  // not "0", read when the Provider is made.
  bool even_shares = true;
  bool size_independent_plans = false;  // ProviderOptions::size_independent_plans
  bool first_call_stand_ins = false;    // ProviderOptions::first_call_stand_ins
  AlignedBuffer scratchpad;
  size_t weights_bytes = 0;
  size_t staging_bytes = 0;
  // Prepared constants shared with the delegate instance's other Providers, or null.
  std::shared_ptr<WeightCache> weight_cache;
  // Work sharing: the pool, and one stream and scratchpad per pool thread (index 0 = caller).
  std::shared_ptr<WorkPool> pool;  // the process's pool of num_threads (WorkPool::shared)
  std::vector<dnnl::stream> piece_streams;
  std::vector<AlignedBuffer> piece_scratchpads;
  // Dense outputs of channel pieces (see split_conv), one per pool thread, copied out in place.
  std::vector<AlignedBuffer> piece_outputs;
  // Block plans (prepare_block): each thread's expanded rows and depthwise output rows.
  std::vector<AlignedBuffer> block_expanded;
  std::vector<AlignedBuffer> block_depthwise;
  // Two-phase block plans: the whole depthwise output (all threads' channel slices) the project
  // then reads in pixel pieces.
  AlignedBuffer block_hidden;

  void reserve_scratchpad(const memory::desc& md) { scratchpad.reserve(md.get_size()); }
  void reserve_piece_scratchpad(const memory::desc& md) {
    for (AlignedBuffer& buffer : piece_scratchpads) buffer.reserve(md.get_size());
  }
  void reserve_piece_output(size_t bytes) {
    for (AlignedBuffer& buffer : piece_outputs) buffer.reserve(bytes);
  }
  size_t scratchpad_total() const {
    size_t total = scratchpad.size();
    for (const AlignedBuffer& buffer : piece_scratchpads) total += buffer.size();
    for (const AlignedBuffer& buffer : piece_outputs) total += buffer.size();
    for (const AlignedBuffer& buffer : block_expanded) total += buffer.size();
    for (const AlignedBuffer& buffer : block_depthwise) total += buffer.size();
    return total + block_hidden.size();
  }

  // Pieces an op of `flops` splits into over `units` independent slices; 1 = run it whole.
  size_t pieces_for(double flops, int64_t units) const {
    if (!pool || pool->size() < 2 || units < 2) {
      return 1;
    }
    int64_t pieces = min_task_flops > 0 ? static_cast<int64_t>(flops / min_task_flops) : units;
    const int64_t threads = pool->size();
    pieces = std::min({pieces, units, kPiecesPerThread * threads});
    if (even_shares && pieces > threads) pieces -= pieces % threads;
    return pieces < 2 ? 1 : static_cast<size_t>(pieces);
  }
};

// ---------------------------------------------------------------------------------------------
// Reorders (layout.cc)

// Owns reordered constant data (weights, bias) in the primitive's layout.
struct OwnedTensor {
  memory::desc md;
  std::shared_ptr<AlignedBuffer> bytes;
};

// `data` (laid out as `from`) reordered into a new buffer laid out as `to`; counted in the
// provider's weights_bytes.
OwnedTensor reorder_constant(
    ProviderState& state, const memory::desc& from, const float* data, const memory::desc& to);
// The live prepared constant of `data` read as `from` and laid out as `to` in `cache`, or
// `make()`'s, remembered there (weight_cache.cc); just `make()` without a cache.
OwnedTensor cached_constant(WeightCache* cache, const memory::desc& from, const float* data,
                            const memory::desc& to, const std::function<OwnedTensor()>& make);

// A large layout conversion (the graph input's NCHW -> NHWC, single-threaded otherwise) as
// bands of the first spatial dim, one reorder per band over sub-memories of the same buffers;
// none when it is too small to share or oneDNN refuses a band.
std::vector<dnnl::reorder> split_reorder(ProviderState& state, const memory::desc& from,
                                         const memory::desc& to);

// ---------------------------------------------------------------------------------------------
// Pieces of split plans and running primitives (pieces.cc)

// One piece of a split plan: a primitive over a slice of the op. Offsets are in floats from the
// start of the op's buffers; pieces never overlap in what they write.
struct Piece {
  dnnl::primitive primitive;
  memory::desc src_md;
  memory::desc weights_md;  // matmul: the run-time operand b; linear: the piece's own weights
  memory::desc dst_md;
  memory::desc scratchpad_md;
  OwnedTensor weights;  // linear pieces own their column block; conv pieces share the plan's
  OwnedTensor bias;
  size_t src_offset = 0;
  size_t weights_offset = 0;
  size_t dst_offset = 0;
  // Channel pieces of a channels-last convolution: output channels [first_channel,
  // first_channel + channels) of every pixel, computed into the thread's dense piece output and
  // copied into place (oneDNN's fast kernels only write dense outputs). 0 = a dense slice.
  int64_t first_channel = 0;
  int64_t channels = 0;
  int64_t pixels = 0;  // N * spatial: rows of the strided copy
  // Row tiles (split_linear_tiles): the primitive runs `tiles` times, each time `src_tile` and
  // `dst_tile` floats further on, so one size-independent primitive covers any band.
  int64_t tiles = 1;
  size_t src_tile = 0;
  size_t dst_tile = 0;
  // Memory objects of the piece's arguments, made on its first run and re-pointed afterwards
  // (making them costs about as much as a small piece's kernel). One thread runs a piece at a
  // time, so no lock.
  mutable std::unordered_map<int, memory> args;
};

// What a piece reads and writes in one run; a null weights/bias pointer means none.
struct PieceData {
  const float* src = nullptr;
  float* dst = nullptr;
  const memory::desc* weights_md = nullptr;
  const float* weights = nullptr;
  const memory::desc* bias_md = nullptr;
  const float* bias = nullptr;
  // An activation the plan runs itself on the destination right after the primitive, while it
  // is in cache (vector_activations.h; the plan left it out of the primitive's post-ops). The
  // destination must be dense (see tail_fits) or row-strided 2-D.
  const Activation* tail = nullptr;
};

// A plan's post-ops split for the primitive and for the plan's own vector kernel: a trailing
// activation that has one (has_vector_activation) becomes the tail, unless `keep` (the plan's
// destination does not suit it).
struct SplitPostOps {
  PostOps primitive;
  std::optional<Activation> tail;
  // For implementation(): " + vector silu" when there is a tail.
  std::string note() const {
    return tail ? std::string(" + vector ") + activation_name(tail->kind) : std::string();
  }
};
SplitPostOps split_tail(const PostOps& post_ops, bool keep = false);
// A plan's tail as PieceData::tail wants it: null when there is none.
inline const Activation* tail_of(const std::optional<Activation>& tail) {
  return tail ? &*tail : nullptr;
}
// Whether the tail can run over `md`: every byte an element (plain, channels-last and other
// unpadded orders), or rows of a 2-D matrix with unit column stride.
bool tail_fits(const memory::desc& md);
// The primitive descriptor `choose(attr)` gives for `post_ops` with a trailing sigmoid / SiLU
// left to the plan's vector kernel (in *split), or with the post-ops whole when that primitive
// would write a padded (blocked) destination, where the tail would touch the padding.
template <typename Choose>
auto choose_with_tail(const PostOps& post_ops, SplitPostOps* split, Choose choose) {
  *split = split_tail(post_ops);
  auto pd = choose(make_attr(split->primitive));
  if (split->tail && !tail_fits(pd.dst_desc())) {
    *split = split_tail(post_ops, /*keep=*/true);
    pd = choose(make_attr(split->primitive));
  }
  return pd;
}

// The memory object `memories[key]` of `md`, pointed at `data`: made on first use, re-pointed
// afterwards (making one costs ~0.25 us with oneDNN 3.2, re-pointing ~0.01 us and more for a
// padded layout, so only a changed pointer is re-pointed).
memory& point(std::unordered_map<int, memory>& memories, int key, const memory::desc& md,
              const dnnl::engine& engine, const void* data);
// Runs `primitive` on `worker`'s stream and scratchpad (the provider's own when it has no pool),
// re-pointing the memory objects in `args` (made on first use) at `data`. One thread uses `args`
// at a time, so no lock.
void execute_on_worker(ProviderState& state, const dnnl::primitive& primitive,
                       std::unordered_map<int, memory>& args, const memory::desc& src_md,
                       const memory::desc& dst_md, const memory::desc& scratchpad_md, int worker,
                       const PieceData& data);
// Runs a whole (unsplit) op's primitive on the calling thread: the provider's stream and shared
// scratchpad.
void execute_whole(ProviderState& state, const dnnl::primitive& primitive,
                   std::unordered_map<int, memory>& args, const memory::desc& src_md,
                   const memory::desc& dst_md, const memory::desc& scratchpad_md,
                   const PieceData& data);
// An op of one src and one dst that runs whole on the calling thread (pooling, resampling): its
// primitive, their layouts, and its scratchpad in the provider's shared one.
struct WholeOp {
  std::shared_ptr<ProviderState> state;
  dnnl::primitive primitive;
  memory::desc src;
  memory::desc dst;
  memory::desc scratchpad_md;
  std::string implementation;
  mutable std::unordered_map<int, memory> args;  // made on the first run

  // Takes `op` (made from `pd`) with pd's implementation, and reserves its scratchpad.
  void set(dnnl::primitive op, const dnnl::primitive_desc_base& pd) {
    primitive = std::move(op);
    implementation = pd.impl_info_str();
    scratchpad_md = pd.scratchpad_desc();
    state->reserve_scratchpad(scratchpad_md);
  }
  void run(const float* input, float* output) const;
};
// Conversions around a WholeOp that oneDNN runs fast in one format only: its jit pooling and
// resampling want the same format on both sides, its softmax also its axis innermost; other
// combinations fall to ref:any, 40-150x slower. The op runs in the chosen format; an input or
// output in the other one goes through a buffer of the bridge's own and a reorder.
struct FormatBridge {
  std::optional<ReorderPlan> to_source;  // the input into `source`, when its format differs
  std::optional<ReorderPlan> to_output;  // `target` into the output, when its format differs
  AlignedBuffer source;
  AlignedBuffer target;
  memory::desc source_md;  // what the op reads and writes
  memory::desc target_md;

  std::string before;  // "reorder abcd -> acdb + ", or ""
  std::string after;   // " + reorder acdb -> abcd", or ""

  // Runs `op` between the conversions.
  void run(const WholeOp& op, const float* input, float* output) const;
  // `implementation` with the conversions around it.
  std::string describe(const std::string& implementation) const {
    return before + implementation + after;
  }
};
// The bridge from `input` to `output` for an op run channels-last (`channels_last`) or plain;
// its buffers are counted in state.staging_bytes.
FormatBridge bridge_formats(Provider& provider, ProviderState& state, const Layout& input,
                            const Layout& output, bool channels_last);

// Runs one piece on `worker`'s stream and scratchpad.
void execute_piece(ProviderState& state, const Piece& piece, int worker, const PieceData& data);
// ", N pieces" for a plan's implementation() when it runs in N > 1 pieces, else "".
std::string pieces_note(size_t count);

// ET_CPU_ROW_GEMM_STREAM_SPLIT (on unless "0"; callers read it at prepare): weigh a RowGemm's
// split by its weights (row_gemm_split_work) rather than its flops alone.
bool row_gemm_stream_split();
// The work a RowGemm of `rows` x `k` -> `n` weighs against pieces_for: with `stream_split` its
// weight stream's time (a few rows read every weight once), else its flops.
double row_gemm_split_work(int64_t rows, int64_t k, int64_t n, bool stream_split);
// One of our own kernels that a convolution plan runs instead of a oneDNN primitive
// (ConvCore::own): the prepared kernel and the `tasks` a call is shared out in on the pool (1: the
// calling thread runs it). Each kernel's run below implements it, so the plan asks it for its
// weights and runs it without knowing which kernel it is: one virtual call per plan call, none
// inside a kernel.
struct OwnConvRun {
  size_t tasks = 1;

  virtual ~OwnConvRun() = default;
  // Bytes of the kernel's prepared weights and bias (ConvLikePlan::weights_bytes).
  virtual size_t weights_bytes() const = 0;
  // Runs it on the caller's buffers in the plan's layouts (ConvLikePlan::run): `residual` read
  // by a residual add post-op (null without one), `weights` (null: the kernel's own) in place of
  // the kernel's where one_weights_buffer().
  virtual void run(ProviderState& state, const float* input, float* output,
                   const float* residual, const float* weights) const = 0;
  // Whether a call reads one buffer of weights the caller may replace (ConvLikePlan::
  // run_with_weights), and which input channel each of its floats belongs to.
  virtual bool one_weights_buffer() const { return false; }
  virtual std::shared_ptr<const InputChannelScaling> input_channel_scaling() const {
    return nullptr;
  }
  // Whether run_images runs several whole images in one round of the pool
  // (ConvLikePlan::runs_images_together), and that run of `images` images.
  virtual bool runs_images_together() const { return false; }
  virtual void run_images(ProviderState& state, const float* input, float* output,
                          int64_t images) const {
    throw ProviderError("own conv run: " + std::to_string(images) + " images in one round " +
                        "need a kernel that runs them together");
  }
};
// A plan's RowGemm (row_gemm.h); LinearPlan's too.
struct RowGemmRun final : OwnConvRun {
  std::shared_ptr<const RowGemm> gemm;

  size_t weights_bytes() const override;
  // run_row_gemm.
  void run(ProviderState& state, const float* input, float* output, const float* residual,
           const float* weights) const override;
};
// Packs the weights (counted in state.weights_bytes) and picks the split (pieces_for on the
// weights' stream time: ET_CPU_ROW_GEMM_STREAM_SPLIT, pieces.cc); `implementation`
// becomes "row_gemm:avx512" plus its pieces_note. The caller checked row_gemm_supports.
RowGemmRun prepare_row_gemm(ProviderState& state, int64_t rows, int64_t k, int64_t n,
                            const float* weight, bool weight_is_k_by_n, const float* bias,
                            const PostOps& post_ops, std::string* implementation);
// Runs it on x / y / residual (see RowGemm::run), its column groups in contiguous ranges.
void run_row_gemm(ProviderState& state, const RowGemmRun& run, const float* x, float* y,
                  const float* residual);
// A plan's kernel computing a band of an image's output rows at a time (DepthwiseConv, StemConv)
// over `batch` images: the batch's output rows shared out in near-equal contiguous slices. A plan
// of one image runs any count of images in one round (run_images: the rows split as a plan
// prepared for that batch would split them). Instantiated in conv_common.cc.
template <typename Kernel>
struct ImageRowsRun final : OwnConvRun {
  std::shared_ptr<const Kernel> conv;
  int64_t batch = 1;
  double image_flops = 0;  // per image: the split of another count of images (run_images)

  size_t weights_bytes() const override;
  void run(ProviderState& state, const float* input, float* output, const float* residual,
           const float* weights) const override;
  bool runs_images_together() const override { return batch == 1; }
  void run_images(ProviderState& state, const float* input, float* output,
                  int64_t images) const override;
};
// DepthwiseConv (depthwise_conv.h) on channels-last images (input {N, C, H, W}, output
// {N, C, H_out, W_out}).
using DepthwiseRun = ImageRowsRun<DepthwiseConv>;
// StemConv (stem_conv.h) on images (input {N, C, H, W} plain or channels-last as its shape says,
// output channels-last {N, C, H_out, W_out}).
using StemRun = ImageRowsRun<StemConv>;
// A plan's weight-streaming 1x1 convolution (PointwiseConv::run_stream) over `pixels`
// channels-last pixels and the tasks its column groups are shared out in (1: the calling thread);
// `by_pixels`: the tasks are near-equal slices of the pixels instead, each over every column
// group (a few-channel 1x1 at a large spatial size whose weights take a gate per call, and the
// 1x1s whose weights are a quarter to all of their activations: ResNet-50-style's 14x14 ones).
struct PointwiseRun final : OwnConvRun {
  std::shared_ptr<const PointwiseConv> conv;
  int64_t pixels = 0;
  bool by_pixels = false;
  // by_pixels: slices start on multiples of this many pixels (kPointwiseTileMultiple, or 1 with
  // ET_CPU_STREAM_TILE_FIT=0), so no slice but the last ends in a partial tile.
  int64_t pixel_step = 1;
  // Column groups: the tasks take halves of groups (each group's pixels cut in two, on
  // kPointwiseTileMultiple), so an odd count of groups still gives each thread an equal share
  // (MobileNetV3's 96 -> 576 at 7x7: 9 groups, 4.5 each, not 5 and 4). Set when the groups do
  // not divide among the tasks and ET_CPU_STREAM_TILE_FIT is not "0".
  bool group_halves = false;
  // Column groups of unequal width (the last one partial: MobileNetV3's 576 -> 96 at 7x7, one
  // group of 4 vectors and one of 2): each task takes an equal share of the groups' vectors x
  // pixels, in group order, cut inside a group on a multiple of its tile, instead of whole
  // groups (2:1 there). Set when the groups divide among the tasks (no group_halves), the last
  // one is partial and ET_CPU_EVEN_SHARES is not "0" (read at prepare).
  bool weighted = false;
  // A strided 2D convolution (ResNet's projection shortcuts): the input pixels of `batch`
  // images of `window` it reads, gathered into `gathered` ([pixels][K]) before the product.
  // Stride 1: no gather.
  int64_t batch = 1;
  ConvWindow window;
  std::shared_ptr<std::vector<float>> gathered;

  size_t weights_bytes() const override;
  // run_pointwise.
  void run(ProviderState& state, const float* input, float* output, const float* residual,
           const float* weights) const override;
  // Split by pixels, every slice reads all of RowGemm's packing.
  bool one_weights_buffer() const override { return by_pixels; }
  std::shared_ptr<const InputChannelScaling> input_channel_scaling() const override;
};
// Runs it on x / y / residual, its column groups (or pixels) in contiguous ranges; `weights`
// (or null: the packed ones) as PointwiseConv::run_stream takes them.
void run_pointwise(ProviderState& state, const PointwiseRun& run, const float* x, float* y,
                   const float* residual, const float* weights = nullptr);
// A plan's StreamConv (stream_conv.h) over `batch` images and the tasks its output-channel
// blocks are shared out in (one contiguous range of blocks per task: each thread streams its
// share of the weights once).
struct StreamConvRun final : OwnConvRun {
  std::shared_ptr<const StreamConv> conv;
  int64_t batch = 1;

  size_t weights_bytes() const override;
  void run(ProviderState& state, const float* input, float* output, const float* residual,
           const float* weights) const override;
};
// A plan's WinogradConv (winograd_conv.h) over `batch` images and the tasks it is shared out in:
// contiguous ranges of tile groups, each over every output-channel block, or (`by_blocks`: few
// tiles, or transformed weights outweighing the transformed input) contiguous ranges of blocks,
// each over every tile.
struct WinogradRun final : OwnConvRun {
  std::shared_ptr<const WinogradConv> conv;
  int64_t batch = 1;
  bool by_blocks = false;

  size_t weights_bytes() const override;
  void run(ProviderState& state, const float* input, float* output, const float* residual,
           const float* weights) const override;
};
// Runs every piece on the pool; `data(piece)` gives what it reads and writes.
void run_pieces(ProviderState& state, const std::vector<Piece>& pieces,
                const std::function<PieceData(const Piece&)>& data);
// What a piece reads and writes when its weights (and bias: null when there is none) are owned
// constants.
PieceData piece_data(const float* src, float* dst, const OwnedTensor& weights,
                     const OwnedTensor* bias);

// Copies `rows` rows of `width` floats between a dense block and a row-strided one.
void copy_rows(const float* from, int64_t from_stride, float* to, int64_t to_stride,
               int64_t rows, int64_t width);

// The dim whose stride is the largest among the dims of `md` larger than 1 (the outermost in
// memory), or -1 when every dim is 1.
int outermost_dim(const memory::desc& md);
// Elements [begin, end) of `md` along `dim` (same strides) and, in `offset`, where they start
// in floats; a dim of 1 (a broadcast operand) stays whole at offset 0.
memory::desc slice_dim(const memory::desc& md, int dim, int64_t begin, int64_t end,
                       size_t* offset);

// How an op over dense operands (binary ops, concatenation) splits for the pool: into `count`
// slices along `dim`, the output's outermost dim in memory, which every source has outermost too
// or broadcasts (size 1); count 1 when it does not split.
struct OuterSlices {
  int dim = -1;
  size_t count = 1;
  int64_t units = 0;  // the output's extent along dim
  // Slice `index` of `md` along dim; where it starts (in floats) in *offset.
  memory::desc slice(const memory::desc& md, size_t index, size_t* offset) const;
};
// The slices of an op writing `dst` from `srcs` at `flops_per_element` per output element;
// `excluded`: a dim it must not split (concat's axis), or -1.
OuterSlices outer_slices(ProviderState& state, const memory::desc& dst,
                         const std::vector<memory::desc>& srcs, int excluded,
                         double flops_per_element);

// The parts of an op split into `count` slices (`make(index)` builds one; ", N pieces" goes on
// `implementation`), their scratchpads reserved in every pool thread's buffer; or, when count < 2
// or oneDNN refuses a slice, `make_whole()` alone with its scratchpad in the shared one (built
// only then: generating a kernel that never runs is most of a compile). A Part has a
// `scratchpad` desc (binary and concat plans).
template <typename MakeWhole, typename Make, typename Part = std::invoke_result_t<MakeWhole>>
std::vector<Part> split_parts(ProviderState& state, size_t count, MakeWhole make_whole,
                              std::string* implementation, Make make) {
  std::vector<Part> parts;
  if (count > 1) {
    try {
      for (size_t i = 0; i < count; ++i) {
        Part part = make(i);
        state.reserve_piece_scratchpad(part.scratchpad);
        parts.push_back(std::move(part));
      }
      *implementation += ", " + std::to_string(count) + " pieces";
    } catch (const dnnl::error&) {
      parts.clear();
    }
  }
  if (parts.empty()) {
    Part whole = make_whole();
    state.reserve_scratchpad(whole.scratchpad);
    parts.push_back(std::move(whole));
  }
  return parts;
}

// The pieces `make(index, piece)` builds for index 0..count-1, or none (the op stays whole) when
// count < 2, when `make` returns false, or when oneDNN refuses one. Only a complete split keeps
// what it counted (reordered weights) and reserves its scratchpad in every pool thread's buffer.
std::vector<Piece> make_pieces(ProviderState& state, size_t count,
                               const std::function<bool(size_t index, Piece& piece)>& make);

// Counts a matmul primitive a plan makes of `pd` (the loader's matmul_primitive_stats): new when
// no plan of the process made one of the same operands, kernel and post-ops before (oneDNN
// generates its kernel then; otherwise its primitive cache has it), reused otherwise.
void count_matmul_primitive(const dnnl::matmul::primitive_desc& pd);
// A matmul primitive of `pd`, counted (count_matmul_primitive).
dnnl::matmul make_matmul(const dnnl::matmul::primitive_desc& pd);

// Gives `piece` the primitive of `pd` and its scratchpad size.
template <typename Primitive, typename PrimitiveDesc>
void set_primitive(Piece& piece, const PrimitiveDesc& pd) {
  if constexpr (std::is_same_v<Primitive, dnnl::matmul>) count_matmul_primitive(pd);
  piece.primitive = Primitive(pd);
  piece.scratchpad_md = pd.scratchpad_desc();
}


// ---------------------------------------------------------------------------------------------
// Convolution primitives (conv_plan.cc; the block plan builds its stages with it too)

// An inference convolution's primitive descriptor (oneDNN counts dilation as the gaps between
// kernel taps: 0 = dense). A zero `bias` md means no bias.
dnnl::convolution_forward::primitive_desc conv_pd(
    const dnnl::engine& engine, const memory::desc& src, const memory::desc& weights,
    const memory::desc& bias, const memory::desc& dst, const Dims& strides,
    const Dims& dilation, const Dims& pad_left, const Dims& pad_right,
    const dnnl::primitive_attr& attr);

// ---------------------------------------------------------------------------------------------
// Convolution-like plans (conv_common.cc): ConvLikePlan, the one plan type of convolutions and
// transposed convolutions

// One convolution-like primitive (convolution, transposed convolution) between the caller's
// layouts: staging where they differ from the primitive's, and its pieces on the pool. The plans'
// Impls are ConvCores; their prepare_* pick the primitive, split it and reorder the weights.
struct ConvCore {
  std::shared_ptr<ProviderState> state;
  dnnl::primitive primitive;
  std::string implementation;
  memory::desc scratchpad_md;
  OwnedTensor weights;
  OwnedTensor bias;
  bool has_bias = false;
  bool has_add = false;
  // A trailing sigmoid / SiLU run by the plan on each piece's destination (split_tail).
  std::optional<Activation> tail;
  // Our own kernel, run instead of the primitive where prepare_conv wants it (conv_plan.cc): a
  // product over one pixel (1x1 kernel, 1x1 input: squeeze-excite) on RowGemm, a depthwise
  // convolution, a stem of 1 to 4 input channels, a weight-heavy (or per-call weights) 1x1, a
  // weight-heavy 3x3 on StreamConv, a dense 3x3 stride-1 on WinogradConv (OwnConvRun). Then only
  // the layouts below, has_bias and has_add are set.
  std::shared_ptr<const OwnConvRun> own;
  Layout input_layout{nullptr};
  Layout output_layout{nullptr};
  // What the primitive reads and writes (its own choice of layouts, or channels-last); where
  // the caller's layout differs, run() converts through a staging buffer.
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

  // Takes pd's implementation, scratchpad and src/dst layouts, and stages between them and
  // `given_src_md` / the `output` layout of `dst_dims`; a large input conversion splits into
  // bands on the pool when `input_in_bands`. The caller makes `primitive` from pd once it knows
  // the op runs whole: a split op never runs it, and generating it is most of a compile.
  void prepare(const std::shared_ptr<ProviderState>& provider,
               const dnnl::primitive_desc_base& pd, bool bias, bool add,
               const memory::desc& given_src_md, OutputLayout output, const Dims& dst_dims,
               bool input_in_bands);
  // Appends the pieces and input bands (if any) to `implementation`.
  void describe_split();
  size_t weights_bytes() const;
  // Runs the op (`what` names the plan in errors); see ConvLikePlan::run. `weights_override`
  // (null: the plan's) replaces the weights buffer, same layout (ConvLikePlan::run_with_weights).
  void run(const char* what, const float* input, float* output, const float* residual,
           const float* weights_override = nullptr) const;
};

// What prepare_conv and prepare_deconv return (onednn_provider.h): a ConvCore and the name its
// errors give the plan.
struct ConvLikePlan::Impl : ConvCore {
  const char* name = "conv plan";
};

// What prepare_conv and prepare_deconv (`what`, in errors) give oneDNN of a convolution-like
// op (`op`: "convolution", "transposed convolution") with ConvParams or DeconvParams `p`: src
// {N, C_in, *in}, dst {N, C_out, *out_size}, strides, left padding, dilations (oneDNN counts the
// gaps, torch the step), and the layout the input arrives in (plain when layouts.input is empty;
// its dims must be src's).
struct ConvLikeShape {
  Dims src_dims;
  Dims dst_dims;
  Dims strides;
  Dims pad_left;
  Dims dilation;
  memory::desc given_src_md;
};
template <typename Params>
ConvLikeShape conv_like_shape(const char* what, const char* op, const Params& p,
                              const std::vector<int64_t>& out_size, const ConvLayouts& layouts) {
  ConvLikeShape shape;
  shape.src_dims = {p.batch, p.in_channels};
  shape.src_dims.insert(shape.src_dims.end(), p.input_size.begin(), p.input_size.end());
  shape.dst_dims = {p.batch, p.out_channels};
  shape.dst_dims.insert(shape.dst_dims.end(), out_size.begin(), out_size.end());
  shape.strides.assign(p.stride.begin(), p.stride.end());
  shape.pad_left.assign(p.padding.begin(), p.padding.end());
  for (int64_t d : p.dilation) shape.dilation.push_back(d - 1);
  if (layouts.input && layouts.input->dims() != std::vector<int64_t>(shape.src_dims)) {
    throw ProviderError(std::string(what) + ": input layout dims " +
                        dims_to_string(layouts.input->dims()) + " != " + op + " input dims " +
                        dims_to_string(shape.src_dims));
  }
  shape.given_src_md = layouts.input ? layouts.input->impl().md : plain_md(shape.src_dims);
  return shape;
}

// Throws ProviderError (`what`: the prepare_* function) unless `support` is ok and `weight` set.
inline void check_conv_like(const char* what, const Support& support, const float* weight) {
  if (!support.ok) {
    throw ProviderError(std::string(what) + ": " + support.reason);
  }
  if (weight == nullptr) {
    throw ProviderError(std::string(what) + ": weight is null");
  }
}

// A band of output rows [begin, end) along the first spatial dim: the input rows [lo, hi) it
// reads and its own padding there (`band(begin, end, &rows)` fills them; false: no input row).
struct BandRows {
  int64_t lo = 0;
  int64_t hi = 0;
  int64_t pad_left = 0;
  int64_t pad_right = 0;
};
using BandOf = std::function<bool(int64_t begin, int64_t end, BandRows* rows)>;
// Gives `piece` (its src/dst mds set) its primitive with that padding; false when it would run
// another kernel than the whole op.
using MakePiecePrimitive =
    std::function<bool(Piece& piece, const Dims& pad_left, const Dims& pad_right)>;

// Splits a convolution-like op of `flops` whose primitive reads and writes channels-last
// `src_dims` / `dst_dims` into images of the batch or (batch 1) bands of output rows, each a
// dense slice of src and dst; empty when it stays whole (see make_pieces).
std::vector<Piece> split_images_or_rows(ProviderState& state, const Dims& src_dims,
                                        const Dims& dst_dims, double flops, const Dims& pad_left,
                                        const Dims& pad_right, const BandOf& band,
                                        const MakePiecePrimitive& make);

}  // namespace onednn
}  // namespace et_cpu_plugin
