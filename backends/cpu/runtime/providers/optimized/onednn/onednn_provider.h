// The plans of the CPU delegate's Optimized provider (onednn::Provider): convolutions, linears,
// matmuls, pooling, resampling, concatenation, elementwise, binary, normalization, softmax and
// permute plans, on oneDNN primitives or on our own kernels (kernels/) where those are faster.
// The runtime's provider (../provider.cc and its binders) binds ops to these plans.
//
// Plain pointers and shapes only (no ExecuTorch or oneDNN types), so the runtime binds it in a few
// lines. The life cycle mirrors the delegate's: `Provider` is created once per delegate instance in
// `init`; each optimized node is `prepare_*`d once there (weights reordered into oneDNN's preferred
// layout, primitive created, scratchpad sized); `execute` calls `plan.run(...)` per node.
//
// Layouts: every plan states the activation layout it reads (`input_layout()`) and writes
// (`output_layout()`). By default both are plain row-major (NCHW / NCL / NCDHW, [M, K]), i.e. what
// contiguous ExecuTorch tensors hold. Between consecutive optimized convolutions ask for
// `OutputLayout::kBest` (oneDNN's choice: channels-last "acdb" for fp32 on AVX-512 with oneDNN
// 3.2) and pass that layout as the next plan's `input`: the activation then stays in that layout
// and no conversion happens between the two nodes. `OutputLayout::kChannelsLast` pins NHWC, which
// ExecuTorch can also hold (dim order 0,2,3,1) and torch pools natively. `prepare_reorder` converts
// an activation back to plain where a reference op reads it.
//
// Threads: with work sharing (the default), a plan whose primitive reads and writes channels-last
// (or plain [M, K]) data is split at prepare into pieces (rows of the output, images of the
// batch, column blocks of a linear's output), each its own single-threaded oneDNN primitive, that
// the calling thread and the provider's WorkPool take one at a time (work_pool.h says why). oneDNN
// is built on OpenMP (libgomp) here: each prepare and run sets the calling thread's OpenMP thread
// count (1 with work sharing, else num_threads) and restores the previous value afterwards, so
// torch (which shares libgomp in a Python process) keeps its own setting. See README.md.
//
// Errors: `prepare_*` throw `ProviderError` with a message naming the argument; call the matching
// `supports_*` first to fall back to the reference provider without exceptions. `run` throws
// `ProviderError` only if oneDNN itself fails.
//
// Not thread-safe: plans of one Provider share its scratchpad, so run them from one thread at a
// time (ExecuTorch executes one delegate call at a time per method).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace et_cpu_plugin {
namespace onednn {

class WorkPool;
class WeightCache;

class ProviderError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The answer of a `supports_*` check: `ok`, or the reason the reference provider must run it.
struct Support {
  bool ok = true;
  std::string reason;
  static Support yes() { return {}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
};

// An elementwise activation with torch's definition, run standalone (Provider::prepare_eltwise)
// or fused after a convolution, linear or matmul (PostOp::act).
struct Activation {
  enum class Kind {
    kRelu,         // max(x, 0)
    kLeakyRelu,    // x > 0 ? x : alpha * x
    kClamp,        // min(max(x, alpha), beta); +-infinity for an absent bound
    kSigmoid,      // 1 / (1 + exp(-x))
    kTanh,         // tanh(x)
    kHardswish,    // x * relu6(x + 3) / 6
    kHardsigmoid,  // relu6(x + 3) / 6
    kSilu,         // x * sigmoid(x)
    kGeluErf,      // x * Phi(x) (gelu, approximate='none')
    kGeluTanh,     // gelu, approximate='tanh'
    kElu,          // x > 0 ? x : alpha * (exp(x) - 1)
    // Elementwise math of normalizations, attention and scalar arithmetic (standalone only).
    kLinear,  // alpha * x + beta: neg, and add/sub/mul/div by a scalar
    kSquare,  // x * x: pow(x, 2), RMSNorm's mean of squares
    kPow,     // x ** alpha for a non-integer alpha: rsqrt = x ** -0.5
    kSqrt,    // sqrt(x)
    kExp,     // exp(x)
    kLog,     // log(x)
    kAbs,     // |x|
  };
  Kind kind = Kind::kRelu;
  float alpha = 0.0f;
  float beta = 0.0f;
};
// Whether the activation's parameters are usable (clamp bounds ordered, finite alphas); if not, why.
Support supports_activation(const Activation& activation);

// An elementwise op fused after the main op, applied in list order.
struct PostOp {
  enum class Kind {
    kAdd,    // += a tensor of the output's shape and layout (a residual), given to run()
    kRelu,   // max(x, 0)
    kClamp,  // min(max(x, min), max): hardtanh, relu6, clamp
    kActivation,  // any Activation (`activation`)
  };
  Kind kind = Kind::kRelu;
  float min = 0.0f;
  float max = 0.0f;
  Activation activation;

  static PostOp add() { return {Kind::kAdd, 0.0f, 0.0f}; }
  static PostOp relu() { return {Kind::kRelu, 0.0f, 0.0f}; }
  static PostOp clamp(float lo, float hi) { return {Kind::kClamp, lo, hi}; }
  static PostOp act(const Activation& activation) {
    return {Kind::kActivation, 0.0f, 0.0f, activation};
  }
};
using PostOps = std::vector<PostOp>;

// An activation layout: logical dims plus how they lie in memory. Opaque; compare with ==.
class Layout {
 public:
  // Row-major contiguous fp32 tensor of `dims` (the layout of a contiguous ExecuTorch tensor).
  static Layout plain(const std::vector<int64_t>& dims);
  // Channels-last fp32 tensor of logical `dims` {N, C, *spatial}: NWC / NHWC / NDHWC in memory.
  static Layout channels_last(const std::vector<int64_t>& dims);

  const std::vector<int64_t>& dims() const;
  bool is_plain() const;
  bool is_channels_last() const;
  // Bytes a buffer of this layout needs (blocked layouts pad channels, e.g. to 16).
  size_t size_bytes() const;
  // oneDNN's short name of the layout, e.g. "abcd" (plain NCHW) or "aBcd16b" (nChw16c).
  std::string describe() const;
  bool operator==(const Layout& other) const;
  bool operator!=(const Layout& other) const { return !(*this == other); }

  struct Impl;
  explicit Layout(std::shared_ptr<const Impl> impl);
  const Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<const Impl> impl_;
};

// Convolution with torch semantics, 1 to 3 spatial dims (conv1d/2d/3d), grouped and depthwise.
struct ConvParams {
  int64_t batch = 1;
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t groups = 1;
  std::vector<int64_t> input_size;   // spatial extent of the input: {L}, {H, W} or {D, H, W}
  std::vector<int64_t> kernel_size;  // same rank as input_size
  std::vector<int64_t> stride;       // same rank; torch's stride
  std::vector<int64_t> padding;      // same rank; symmetric, torch's padding
  std::vector<int64_t> dilation;     // same rank; torch's dilation (1 = dense)
};

// Output spatial extent of `params` with torch's formula.
std::vector<int64_t> conv_output_size(const ConvParams& params);
// Whether prepare_conv accepts these arguments; if not, why.
Support supports_conv(const ConvParams& params, const PostOps& post_ops);

enum class OutputLayout {
  kPlain,        // NCHW: readable by any ExecuTorch kernel
  kChannelsLast, // NHWC: ExecuTorch channels-last dim order; torch pools it natively
  kBest,         // oneDNN's choice for its kernel (may be blocked), for a following optimized conv
};

// Which layouts a convolution reads and writes. Any mismatch with what the fastest kernel wants
// is converted inside run() through a staging buffer (counted in Provider::staging_bytes()).
struct ConvLayouts {
  // Layout the input arrives in; empty = plain. Pass a previous plan's output_layout() to chain.
  std::shared_ptr<const Layout> input;
  OutputLayout output = OutputLayout::kPlain;
  // The caller runs the plan with per-call weights (ConvLikePlan::run_with_weights: a folded
  // squeeze-excite gate): a few-channel 1x1 convolution may then run on our own kernel, its
  // pixels split (own_gated_pointwise_wanted, conv_plan.cc; ET_CPU_OWN_GATED_1X1).
  bool weights_per_call = false;
};

// Transposed convolution (torch's conv_transpose1d/2d/3d, aten.convolution with transposed=True)
// on oneDNN's deconvolution: 1 to 3 spatial dims, groups (incl. depthwise), stride, symmetric
// padding, output_padding (< stride or dilation, as torch requires), dilation.
struct DeconvParams {
  int64_t batch = 1;
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t groups = 1;
  std::vector<int64_t> input_size;      // spatial extent of the input: {L}, {H, W} or {D, H, W}
  std::vector<int64_t> kernel_size;     // same rank as input_size
  std::vector<int64_t> stride;          // same rank
  std::vector<int64_t> padding;         // same rank; torch's padding
  std::vector<int64_t> output_padding;  // same rank; extra rows/columns at the end
  std::vector<int64_t> dilation;        // same rank; torch's dilation (1 = dense)
};
// Output spatial extent with torch's formula: (in - 1) * s - 2 p + d (k - 1) + output_padding + 1.
std::vector<int64_t> deconv_output_size(const DeconvParams& params);
// Whether prepare_deconv accepts these arguments; if not, why.
Support supports_deconv(const DeconvParams& params, const PostOps& post_ops);

// y = x @ W^T + b (torch.nn.functional.linear) or addmm(b, x, W) with a constant weight.
struct LinearParams {
  int64_t rows = 0;          // M: the batch (all leading dims of the input, flattened)
  int64_t in_features = 0;   // K
  int64_t out_features = 0;  // N
  // false: weight is [N, K] (linear's weight); true: weight is [K, N] (addmm's mat2).
  bool weight_is_k_by_n = false;
};
Support supports_linear(const LinearParams& params, const PostOps& post_ops);

// out[b] = a[b] @ b[b] with both operands given at run time (mm: batch = 1; bmm).
struct MatmulParams {
  int64_t batch = 1;
  int64_t m = 0;
  int64_t k = 0;
  int64_t n = 0;
  // Element strides of a ([batch,] m, k) and b ([batch,] k, n), batch only when batch > 1;
  // empty: contiguous. Lets the product read a permute's input in place (q @ k^T without the
  // transposed copy).
  std::vector<int64_t> a_strides;
  std::vector<int64_t> b_strides;
};
Support supports_matmul(const MatmulParams& params, const PostOps& post_ops);

// Max pooling (torch.nn.functional.max_pool1d/2d/3d without dilation) for inference: the output
// size is given (floor or ceil mode alike: the right padding is derived from it; padded cells
// never win the max). No indices are computed.
struct PoolParams {
  int64_t batch = 1;
  int64_t channels = 0;
  std::vector<int64_t> input_size;   // spatial extent of the input
  std::vector<int64_t> output_size;  // spatial extent of the output
  std::vector<int64_t> kernel_size;
  std::vector<int64_t> stride;
  std::vector<int64_t> padding;      // left/top padding (torch's padding)
};
Support supports_max_pool(const PoolParams& params);
// Average pooling (torch's avg_pool1d/2d/3d without divisor_override): count_include_pad divides
// by the whole window (padding cells count), else by the input cells in it. Declines a ceil-mode
// window past the padding with count_include_pad (torch's divisor differs there).
Support supports_avg_pool(const PoolParams& params, bool count_include_pad);

// MobileNetV2's inverted residual block as one plan: 1x1 expand (optional) -> k x k depthwise
// (stride s) -> 1x1 project, the project optionally adding the block's input (PostOp::add in its
// post-ops).
// Input and output are channels-last. Each thread takes bands of output rows and runs the three
// convolutions a few rows at a time, carrying the overlapping expanded rows from one step to the
// next: the expanded activation (6x the input in MobileNetV2) stays in the core's L2 instead of
// going through memory twice, and the threads meet once per block instead of once per conv.
struct BlockParams {
  int64_t batch = 1;
  int64_t in_channels = 0;
  // false: no expand (MobileNetV2's first block, MobileNetV1's pairs): the depthwise reads the
  // input directly and hidden_channels == in_channels.
  bool expand = true;
  int64_t hidden_channels = 0;  // the expand's output channels = the depthwise's channels
  int64_t out_channels = 0;
  std::vector<int64_t> input_size;  // {H, W}
  int64_t kernel = 3;               // depthwise kernel (square)
  int64_t stride = 1;               // depthwise stride (both dims)
  int64_t padding = 1;              // depthwise padding (both dims, torch's)
  // false: no project (a squeeze-excite block, whose gate needs the whole depthwise output
  // first): expand -> depthwise only, the output is the depthwise's (out_channels ==
  // hidden_channels); needs the expand.
  bool project = true;
};
// torch's layouts: expand [hidden, in, 1, 1] (null without expand), depthwise [hidden, 1, k, k],
// project [out, hidden, 1, 1] (null without project); biases [channels] or null. Copied
// (reordered) at prepare.
struct BlockWeights {
  const float* expand = nullptr;
  const float* expand_bias = nullptr;
  const float* depthwise = nullptr;
  const float* depthwise_bias = nullptr;
  const float* project = nullptr;
  const float* project_bias = nullptr;
};
struct BlockPostOps {
  PostOps expand;     // no add
  PostOps depthwise;  // no add
  PostOps project;    // an add here adds the block's input (stride 1, in == out channels);
                      // empty without project
};
// Output spatial extent of the block ({H_out, W_out}).
std::vector<int64_t> block_output_size(const BlockParams& params);
// Whether prepare_block accepts these arguments; if not, why.
Support supports_block(const BlockParams& params, const BlockPostOps& post_ops);

// Elementwise a (op) b on float32 with numpy broadcasting (torch's add/sub with alpha 1, mul,
// div), operands given with the output's rank (leading 1s added by the caller). oneDNN
// broadcasts one operand only: at least one operand has the output's dims, and a divided
// operand (div's a) must have them.
enum class BinaryOp { kAdd, kSub, kMul, kDiv };
Support supports_binary(BinaryOp op, const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                        const std::vector<int64_t>& out);

// Resampling {N, C, *spatial} -> {N, C, *spatial'} with torch's align_corners=False coordinates
// and factors output / input: linear (torch's bilinear) for any sizes; nearest only for integer
// upsampling (torch's floor(dst * in / out) and oneDNN's rounding pick other sources otherwise).
Support supports_resampling(bool linear, const std::vector<int64_t>& input,
                            const std::vector<int64_t>& output);
// torch's _softmax / _log_softmax of a non-empty tensor of `dims` over `axis` (0 <= axis < rank).
Support supports_softmax(const std::vector<int64_t>& dims, int64_t axis);
// Layer normalization over the `features` trailing elements of each of `rows` rows (torch's
// native_layer_norm with its normalized_shape flattened), optional weight and bias [features].
struct LayerNormParams {
  int64_t rows = 0;
  int64_t features = 0;
  float eps = 1e-5f;
  bool has_weight = false;
  bool has_bias = false;
};
Support supports_layer_norm(const LayerNormParams& params);

// Whether `perm` permutes `input` into `output` (see prepare_permute); if not, why.
Support supports_permute(const std::vector<int64_t>& perm, const std::vector<int64_t>& input,
                         const std::vector<int64_t>& output);
// torch.cat of `inputs` along `axis`: every input of the output's rank, equal outside `axis`.
Support supports_concat(const std::vector<std::vector<int64_t>>& inputs, int64_t axis,
                        const std::vector<int64_t>& output);

class Provider;

struct ProviderOptions {
  // Threads the provider uses. 0 = default: $ET_CPU_ONEDNN_THREADS if set, else the number of
  // CPUs this process may run on (sched_getaffinity), i.e. 2 on the project's machines; the
  // default never exceeds those CPUs.
  int num_threads = 0;
  // true: split plans (see below) on the provider's own work-sharing pool, oneDNN single-threaded
  // inside each piece. false: one oneDNN call per op on an OpenMP team of num_threads.
  bool work_sharing = true;
  // Smallest work (FLOPs) worth a separate piece of a split plan; smaller ops run whole on the
  // calling thread. < 0 = default: $ET_CPU_ONEDNN_TASK_FLOPS if set, else 1,000,000 (about 15 us
  // of one AVX-512 core). 0 splits every op as finely as allowed (tests).
  int64_t min_task_flops = -1;
  // Prepared constants (reordered weights and biases, packed RowGemm weights) shared with other
  // Providers of the same constants (weight_cache.h), or null: each plan prepares its own.
  std::shared_ptr<WeightCache> weight_cache;
  // The graph is one size of a program whose sizes vary: linears of 32+ rows run in row tiles of
  // one size-independent primitive (linear_plan.cc), so a new size generates no kernel for them.
  // A static graph keeps the plan fastest at its one size.
  bool size_independent_plans = false;
  // With size_independent_plans: a plan may stand in for the first call at a new size, made of
  // what the plans at the bounds hold (a linear's small tiles, LinearPlan::stands_in); the graph
  // asks for the plans kept when that size is called again (a graph resized in place:
  // OptimizedSession::resize sets it, prepare_standing_in does not).
  bool first_call_stand_ins = false;
  // Another Provider whose oneDNN engine this one uses (null: its own), so primitives made on
  // either run on the other's streams: a graph resized in place keeps the primitives whose shape
  // did not change (LinearPlan's row tile) across the fresh Provider of each size.
  const Provider* same_engine = nullptr;
};

class BinaryPlan;
class BlockPlan;
class ConcatPlan;
class PermutePlan;
class LayerNormPlan;
class ConvLikePlan;
using ConvPlan = ConvLikePlan;    // what prepare_conv returns
using DeconvPlan = ConvLikePlan;  // what prepare_deconv returns
class LinearPlan;
class MatmulPlan;
class ReorderPlan;
class PoolPlan;
class EltwisePlan;
class ResamplePlan;
class SoftmaxPlan;
struct ProviderState;

// Softmax over `rows` contiguous rows of `n` floats, a row of -inf only (fully masked) giving
// zeros (torch's _safe_softmax: et_cpu_quant::safe_softmax); our AVX-512 row kernel (call only
// after cpu_has_avx512()), rows in bands on `pool` (null: the calling thread alone).
void safe_softmax_rows(const float* x, float* y, int64_t rows, int64_t n, WorkPool* pool);

class Provider {
 public:
  explicit Provider(ProviderOptions options = {});
  ~Provider();
  Provider(const Provider&) = delete;
  Provider& operator=(const Provider&) = delete;

  // `weight` is torch's layout [C_out, C_in/groups, *kernel]; `bias` is [C_out] or null. Both are
  // copied (reordered) at prepare: the caller may free them afterwards.
  ConvPlan prepare_conv(
      const ConvParams& params,
      const float* weight,
      const float* bias,
      const PostOps& post_ops,
      const ConvLayouts& layouts = {});
  // `weight` is torch's transposed-convolution layout [C_in, C_out/groups, *kernel]; `bias` is
  // [C_out] or null; both copied (reordered) at prepare. Layouts as for prepare_conv.
  DeconvPlan prepare_deconv(
      const DeconvParams& params,
      const float* weight,
      const float* bias,
      const PostOps& post_ops,
      const ConvLayouts& layouts = {});
  // `weight` as LinearParams::weight_is_k_by_n says; `bias` is [N] or null; both copied.
  // `previous`: a plan of the same linear (weights, bias, post-ops) at another row count, whose
  // row-tile primitive this one reuses instead of generating it again (a graph resized in place).
  // `rows_read`: a plan of the same linear that reads its rows at each run (reads_rows_up_to),
  // whose kernels run this one's rows after its row tiles instead of new ones.
  // `first_at_size`: the first call at this row count in a graph whose sizes vary, where its
  // small tiles may stand in for a primitive of the count (or of a tile's remainder) that a call
  // again at that count prepares (LinearPlan::stands_in, keeps_rows); else the plan it
  // keeps.
  LinearPlan prepare_linear(
      const LinearParams& params,
      const float* weight,
      const float* bias,
      const PostOps& post_ops,
      const LinearPlan* previous = nullptr,
      const LinearPlan* rows_read = nullptr,
      bool first_at_size = false);
  // In a graph whose sizes vary (size_independent_plans): the plan of this linear that reads its
  // rows at each run (LinearPlan::reads_rows_up_to), every count below a row tile or the few
  // row_gemm takes (linear_plan.cc); none in a static graph or where row_gemm does not run.
  // `previous` as prepare_linear's.
  std::optional<LinearPlan> prepare_linear_rows_read(const LinearParams& params,
                                                     const float* weight,
                                                     const float* bias,
                                                     const PostOps& post_ops,
                                                     const LinearPlan* previous = nullptr);
  MatmulPlan prepare_matmul(const MatmulParams& params, const PostOps& post_ops);
  // Converts activations between two layouts of the same dims (e.g. blocked -> plain).
  ReorderPlan prepare_reorder(const Layout& from, const Layout& to);
  // An inverted residual block (see BlockParams); needs work sharing (throws in OpenMP mode).
  BlockPlan prepare_block(
      const BlockParams& params, const BlockWeights& weights, const BlockPostOps& post_ops);
  // Max pooling reading `input` and writing `output` (plain or channels-last layouts of the
  // input and output dims).
  PoolPlan prepare_max_pool(const PoolParams& params, const Layout& input, const Layout& output);
  // Average pooling (see supports_avg_pool), layouts as for max pooling.
  PoolPlan prepare_avg_pool(const PoolParams& params, bool count_include_pad, const Layout& input,
                            const Layout& output);
  // Mean over every spatial position (global average pooling, torch's x.mean((2, 3), keepdim)):
  // `input` {N, C, *spatial}, `output` {N, C, 1, ...}, plain or channels-last.
  PoolPlan prepare_global_average_pool(const Layout& input, const Layout& output);
  // An elementwise activation from `input` to `output` (same dims; plain or channels-last, either
  // side: a layout change is a reorder into the output, then the activation in place). Split
  // into pieces for the work-sharing pool when large.
  EltwisePlan prepare_eltwise(const Activation& activation, const Layout& input,
                              const Layout& output);

  // a (op) b -> output, each plain or channels-last (an output-sized operand in the other
  // layout than the output's is converted into a staging buffer first; a broadcast one is read
  // as it lies). Large ops are split along the output's outermost dim on the pool.
  BinaryPlan prepare_binary(BinaryOp op, const Layout& a, const Layout& b, const Layout& output);

  // Resampling (see supports_resampling), input and output plain or channels-last; whole on
  // the calling thread.
  ResamplePlan prepare_resampling(bool linear, const Layout& input, const Layout& output);
  // Softmax, or log-softmax when `log`, over `axis` (see supports_softmax); input and output
  // plain or channels-last, of one dims. Our AVX-512 kernel, split on the pool when large
  // (ET_CPU_VECTOR_SOFTMAX=0 or no AVX-512: oneDNN's, whole on the calling thread).
  SoftmaxPlan prepare_softmax(bool log, int64_t axis, const Layout& input, const Layout& output);
  // Concatenation (see supports_concat), each input and the output plain or channels-last; large
  // ones split along the output's outermost dim in memory (when it is not `axis`) on the pool.
  ConcatPlan prepare_concat(const std::vector<Layout>& inputs, int64_t axis, const Layout& output);
  // native_layer_norm on plain data, whole on the calling thread; its run() writes torch's three
  // outputs (normalized, per-row mean, per-row 1 / sqrt(var + eps)).
  LayerNormPlan prepare_layer_norm(const LayerNormParams& params);
  // permute_copy: output dim k is input dim perm[k]; the input plain or channels-last, the
  // output plain. Our own copy loops (contiguous runs, or 16 x 16 transpose tiles), split on
  // the pool when large.
  PermutePlan prepare_permute(const std::vector<int64_t>& perm, const Layout& input,
                              const Layout& output);
  // The same with both plain, planned from the input's dims at each run (PermutePlan::run_sized):
  // one plan for every size of a graph resized in place, nothing prepared at a new size.
  // `input` is the dims at prepare (checked here).
  PermutePlan prepare_permute_sized_at_run(const std::vector<int64_t>& perm,
                                           const std::vector<int64_t>& input);

  int num_threads() const;
  bool work_sharing() const;
  // The work-sharing pool (null without work sharing), for kernels outside the plans (int8).
  WorkPool* work_pool() const;
  // The prepared constants shared with other Providers (ProviderOptions::weight_cache), or null.
  WeightCache* weight_cache() const;
  // ProviderOptions::size_independent_plans.
  bool size_independent_plans() const;
  // ProviderOptions::first_call_stand_ins.
  bool first_call_stand_ins() const;
  // Memory the provider holds beside the activations (for the delegate's memory report):
  size_t weights_bytes() const;     // reordered weights + biases of every plan
  size_t scratchpad_bytes() const;  // oneDNN scratchpads: the shared one + one per pool thread
  size_t staging_bytes() const;     // per-plan input conversion buffers
  // The instruction set oneDNN dispatches to, e.g. "avx512_core_bf16".
  std::string isa() const;

 private:
  std::shared_ptr<ProviderState> state_;
};

// The plans are cheap handles (shared ownership of the prepared primitive); copy freely.
// A convolution or a transposed convolution: one plan type on one core (ConvCore,
// conv_common.cc); prepare_conv and prepare_deconv differ only in the primitive and its splits.
// A convolution plan's weights in oneDNN's layout with each input channel scaled by its own
// factor (ConvLikePlan::input_channel_scaling): which input channel every float of the layout
// belongs to (found once by reordering channel numbers into it), read 16 floats at a time as
// one channel broadcast (oneDNN's blocks of 16 output channels), 16 consecutive channels, or a
// gather; padding lanes come out 0.
class InputChannelScaling {
 public:
  // `owner` keeps `weights` alive.
  InputChannelScaling(std::shared_ptr<const void> owner, const float* weights, size_t floats,
                      std::vector<int32_t> channel);
  size_t floats() const { return floats_; }
  // out[k] = weights[k] * scale[channel of k] for every float of the layout.
  void scale(const float* scale, float* out) const { scale_range(scale, out, 0, floats_); }
  // The same for floats [begin, end) (begin a multiple of 16).
  void scale_range(const float* scale, float* out, size_t begin, size_t end) const;
  // Where share `index` of `parts` near-equal shares of whole vectors starts (`parts`: the end),
  // so the pool can scale [part_start(parts, i), part_start(parts, i + 1)) for each i: ranges
  // of output channels in oneDNN's blocked layouts.
  size_t part_start(size_t parts, size_t index) const {
    return index >= parts ? floats_ : floats_ / 16 * index / parts * 16;
  }

 private:
  enum Kind : uint8_t { kBroadcast, kConsecutive, kGather };
  std::shared_ptr<const void> owner_;
  const float* weights_;  // the plan's
  size_t floats_;
  std::vector<int32_t> channel_;  // per float; -1: padding
  // Per whole vector of 16: its kind, its lanes that are weights (not padding), and the channel
  // of a broadcast / the first of consecutive channels.
  std::vector<uint8_t> kind_;
  std::vector<uint16_t> real_;
  std::vector<int32_t> base_;
};

class ConvLikePlan {
 public:
  const Layout& input_layout() const;
  const Layout& output_layout() const;
  std::vector<int64_t> output_dims() const;  // {N, C_out, *spatial}
  size_t weights_bytes() const;
  size_t scratchpad_bytes() const;
  // oneDNN's implementation name, e.g. "brgconv:avx512_core", plus ", N pieces" when split.
  std::string implementation() const;
  // Pieces the work-sharing pool runs (1: the whole op in one oneDNN call).
  size_t pieces() const;
  // `residual` is required iff the post-ops contain kAdd; it must be in output_layout(); it may be
  // `output` itself (then no copy is made).
  void run(const float* input, float* output, const float* residual = nullptr) const;
  // Whether run_images takes several images in one round of the pool: a plan prepared for one
  // image on our own depthwise or stem kernel (rows of any image count split alike).
  bool runs_images_together() const;
  // `images` whole images (a plan of one image, runs_images_together(); no residual) in one
  // round of the pool, the batch's output rows split as a plan of that batch splits them.
  void run_images(const float* input, float* output, int64_t images) const;

  // Per-call weights (a squeeze-excite gate folded into the 1x1 convolution after it: the
  // weights' input channel c times gate[c]). Null unless the plan runs one oneDNN primitive (or
  // pieces of it) on one buffer of weights that run_with_weights can replace (groups 1, no
  // channel pieces) or our own 1x1 kernel split by pixels (ConvLayouts::weights_per_call).
  std::shared_ptr<const InputChannelScaling> input_channel_scaling() const;
  // run() with `weights` (InputChannelScaling::floats() floats, in the plan's layout) instead of
  // the plan's own.
  void run_with_weights(const float* input, float* output, const float* residual,
                        const float* weights) const;

  struct Impl;
  explicit ConvLikePlan(std::shared_ptr<const Impl> impl);

 private:
  std::shared_ptr<const Impl> impl_;
};

// Input {N, C_in, H, W} and output {N, C_out, H_out, W_out}, both channels-last.
class BlockPlan {
 public:
  std::vector<int64_t> output_dims() const;
  size_t weights_bytes() const;
  // The three stages' oneDNN implementations, the pieces and the rows per step.
  std::string implementation() const;
  size_t pieces() const;
  // `images`: the images `input` holds, 0 meaning the batch prepared for. A plan prepared for
  // one image runs any count in one round of the pool (pieces image x band, or image x channel
  // slice), not one round per image; a plan of a larger batch runs only that batch.
  void run(const float* input, float* output, int64_t images = 0) const;

  struct Impl;
  explicit BlockPlan(std::shared_ptr<const Impl> impl);

 private:
  std::shared_ptr<const Impl> impl_;
};

// Input [M, K] plain, output [M, N] plain.
class LinearPlan {
 public:
  size_t weights_bytes() const;
  size_t scratchpad_bytes() const;
  std::string implementation() const;
  size_t pieces() const;
  // Whether it holds a row tile a plan at another size can reuse (prepare_linear's `previous`).
  bool has_row_tile() const;
  // The row counts it serves, 1 to this, reading the count at each run (run's `rows`; 0: none,
  // its prepared count only): a graph whose sizes vary, counts below a row tile on row_gemm and
  // small tiles, one plan for every such count (linear_plan.cc, ET_CPU_VARIABLE_ROWS,
  // ET_CPU_SMALL_ROW_TILES).
  int64_t reads_rows_up_to() const;
  // Whether it serves `rows` (one of those) for good: up to kRowGemmMaxRows by default and the
  // multiples of the small tile (every count for a weight row_gemm takes in wide blocks,
  // row_gemm_wide_rows); at other counts its small tiles only stand in for a first call at a new
  // count (prepare_linear's `first_at_size`).
  bool keeps_rows(int64_t rows) const;
  // Its rows after its row tiles run in small tiles standing in for a primitive of their count
  // (prepared with `first_at_size`): a call again at this size prepares the plan it keeps.
  bool stands_in() const;
  // `rows`: this call's rows when reads_rows_up_to() > 0, else ignored (0: the rows prepared for).
  void run(const float* input, float* output, const float* residual = nullptr,
           int64_t rows = 0) const;

  struct Impl;
  explicit LinearPlan(std::shared_ptr<const Impl> impl);

 private:
  friend class Provider;  // prepare_linear reads a previous plan's row tile
  std::shared_ptr<const Impl> impl_;
};

// a [batch, M, K], b [batch, K, N], out [batch, M, N], all plain.
class MatmulPlan {
 public:
  size_t scratchpad_bytes() const;
  std::string implementation() const;
  size_t pieces() const;
  void run(const float* a, const float* b, float* output, const float* residual = nullptr) const;

  struct Impl;
  explicit MatmulPlan(std::shared_ptr<const Impl> impl);

 private:
  std::shared_ptr<const Impl> impl_;
};

class ReorderPlan {
 public:
  void run(const float* input, float* output) const;

  struct Impl;
  explicit ReorderPlan(std::shared_ptr<const Impl> impl);

 private:
  std::shared_ptr<const Impl> impl_;
};

class BinaryPlan {
 public:
  std::string implementation() const;
  size_t pieces() const;
  void run(const float* a, const float* b, float* output) const;

  struct Impl;
  explicit BinaryPlan(std::shared_ptr<const Impl> impl);

 private:
  std::shared_ptr<const Impl> impl_;
};

class ResamplePlan {
 public:
  std::string implementation() const;
  void run(const float* input, float* output) const;

  struct Impl;
  explicit ResamplePlan(std::shared_ptr<const Impl> impl);

 private:
  std::shared_ptr<const Impl> impl_;
};

class SoftmaxPlan {
 public:
  std::string implementation() const;
  void run(const float* input, float* output) const;

  struct Impl;
  explicit SoftmaxPlan(std::shared_ptr<const Impl> impl);

 private:
  std::shared_ptr<const Impl> impl_;
};

class LayerNormPlan {
 public:
  std::string implementation() const;
  // weight / bias: [features] when planned (null otherwise); mean / rstd: [rows].
  void run(const float* input, const float* weight, const float* bias, float* output, float* mean,
           float* rstd) const;

  struct Impl;
  explicit LayerNormPlan(std::shared_ptr<const Impl> impl);

 private:
  std::shared_ptr<const Impl> impl_;
};

class PermutePlan {
 public:
  std::string implementation() const;
  size_t pieces() const;
  void run(const float* input, float* output) const;
  // A plan from prepare_permute_sized_at_run: `input_dims` (the permutation's rank) are the
  // input's dims now; when they differ from the last run's the loops are worked out again
  // (arithmetic on the dims only). One thread runs a plan at a time. Throws ProviderError on
  // dims it cannot take.
  void run_sized(const float* input, float* output, const std::vector<int64_t>& input_dims);

  struct Impl;
  explicit PermutePlan(std::shared_ptr<const Impl> impl);

 private:
  std::shared_ptr<const Impl> impl_;
};

class ConcatPlan {
 public:
  std::string implementation() const;
  size_t pieces() const;
  // One pointer per planned input, in order.
  void run(const std::vector<const float*>& inputs, float* output) const;

  struct Impl;
  explicit ConcatPlan(std::shared_ptr<const Impl> impl);

 private:
  std::shared_ptr<const Impl> impl_;
};

class PoolPlan {
 public:
  std::string implementation() const;
  // Pieces the work-sharing pool runs (row bands or images; 1: one call on the calling thread).
  size_t pieces() const;
  void run(const float* input, float* output) const;

  struct Impl;
  explicit PoolPlan(std::shared_ptr<const Impl> impl);

 private:
  std::shared_ptr<const Impl> impl_;
};

// An elementwise activation (see Provider::prepare_eltwise). `output` may be `input` (in place)
// when both layouts are the same.
class EltwisePlan {
 public:
  std::string implementation() const;
  size_t pieces() const;
  void run(const float* input, float* output) const;

  struct Impl;
  explicit EltwisePlan(std::shared_ptr<const Impl> impl);

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace onednn
}  // namespace et_cpu_plugin
