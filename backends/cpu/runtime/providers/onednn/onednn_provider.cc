#include "backends/cpu/runtime/providers/onednn/onednn_provider.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <utility>

#include <oneapi/dnnl/dnnl.hpp>

#include "backends/cpu/runtime/providers/onednn/work_pool.h"

namespace et_cpu_plugin {
namespace onednn {

using dnnl::memory;
using Dims = memory::dims;

namespace {

// 64-byte aligned bytes that can grow (the shared scratchpad) or stay fixed (weights, staging).
class AlignedBuffer {
 public:
  void reserve(size_t bytes) {
    if (bytes <= size_) {
      return;
    }
    const size_t rounded = (bytes + 63) / 64 * 64;
    data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
    if (!data_) {
      throw ProviderError("oneDNN provider: out of memory allocating " + std::to_string(bytes));
    }
    size_ = bytes;
  }
  void* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t size_ = 0;
};

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

// $ET_CPU_ONEDNN_THREADS if it is a positive integer, else the CPUs this process may run on;
// never more than those (more threads than cores only queue behind each other).
int default_thread_count() {
  int cpus = 1;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    cpus = std::max(1, CPU_COUNT(&set));
  }
  if (const char* env = std::getenv("ET_CPU_ONEDNN_THREADS")) {
    const int value = std::atoi(env);
    if (value > 0) {
      return std::min(value, cpus);
    }
  }
  return cpus;
}

int64_t default_min_task_flops() {
  if (const char* env = std::getenv("ET_CPU_ONEDNN_TASK_FLOPS")) {
    char* end = nullptr;
    const long long value = std::strtoll(env, &end, 10);
    if (end != env && value >= 0) {
      return value;
    }
  }
  return 1000000;
}

// Pieces per pool thread at most: enough that a thread the OS deschedules leaves most of an op
// to the others, few enough that the fixed cost of a oneDNN call (a few us) stays small. Measured
// on the example networks: 2 per thread beat 4 (ResNet 17 vs 21 ms, MobileNet 3.7 vs 5.7 ms).
constexpr int64_t kPiecesPerThread = 2;

Dims row_major_strides(const Dims& dims) {
  Dims strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) {
    strides[i - 1] = strides[i] * std::max<int64_t>(dims[i], 1);
  }
  return strides;
}

memory::desc plain_md(const Dims& dims) {
  return memory::desc(dims, memory::data_type::f32, row_major_strides(dims));
}

memory::desc any_md(const Dims& dims) {
  return memory::desc(dims, memory::data_type::f32, memory::format_tag::any);
}

std::string dims_to_string(const std::vector<int64_t>& dims) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    out << (i ? ", " : "") << dims[i];
  }
  out << "]";
  return out.str();
}

Support check_post_ops(const PostOps& post_ops) {
  int adds = 0;
  for (size_t i = 0; i < post_ops.size(); ++i) {
    const PostOp& op = post_ops[i];
    if (op.kind == PostOp::Kind::kAdd && ++adds > 1) {
      return Support::no("post_ops[" + std::to_string(i) + "]: only one residual add is fused");
    }
    if (op.kind == PostOp::Kind::kClamp && !(op.min <= op.max)) {
      return Support::no(
          "post_ops[" + std::to_string(i) + "]: clamp min " + std::to_string(op.min) +
          " > max " + std::to_string(op.max));
    }
  }
  return Support::yes();
}

dnnl::primitive_attr make_attr(const PostOps& post_ops) {
  dnnl::post_ops ops;
  for (const PostOp& op : post_ops) {
    switch (op.kind) {
      case PostOp::Kind::kAdd:
        // sum: dst = result + dst_before, so run() puts the residual into dst first.
        ops.append_sum(1.0f);
        break;
      case PostOp::Kind::kRelu:
        ops.append_eltwise(dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        break;
      case PostOp::Kind::kClamp:
        ops.append_eltwise(dnnl::algorithm::eltwise_clip, op.min, op.max);
        break;
    }
  }
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  // One scratchpad per Provider, shared by its plans (they run one at a time).
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

bool has_add(const PostOps& post_ops) {
  return std::any_of(post_ops.begin(), post_ops.end(), [](const PostOp& op) {
    return op.kind == PostOp::Kind::kAdd;
  });
}

template <typename Fn>
auto wrap_dnnl(const char* what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const dnnl::error& e) {
    throw ProviderError(std::string("oneDNN provider: ") + what + ": " + e.what());
  }
}

// An inference convolution's primitive descriptor (oneDNN counts dilation as the gaps between
// kernel taps: 0 = dense). A zero `bias` md means no bias.
dnnl::convolution_forward::primitive_desc conv_pd(
    const dnnl::engine& engine, const memory::desc& src, const memory::desc& weights,
    const memory::desc& bias, const memory::desc& dst, const Dims& strides,
    const Dims& dilation, const Dims& pad_left, const Dims& pad_right,
    const dnnl::primitive_attr& attr) {
  return dnnl::convolution_forward::primitive_desc(
      engine, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src,
      weights, bias, dst, strides, dilation, pad_left, pad_right, attr);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Layout

struct Layout::Impl {
  memory::desc md;
  std::vector<int64_t> dims;
};

Layout::Layout(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

Layout Layout::plain(const std::vector<int64_t>& dims) {
  return Layout(std::make_shared<const Impl>(Impl{plain_md(dims), dims}));
}

namespace {
memory::desc channels_last_md(const Dims& dims) {
  if (dims.size() < 3) {
    throw ProviderError("channels_last layout needs {N, C, *spatial} dims, got rank " +
                        std::to_string(dims.size()));
  }
  // Strides of NCHW dims laid out as NHWC: C innermost, then the spatial dims, N outermost.
  Dims strides(dims.size());
  int64_t stride = 1;
  strides[1] = stride;
  stride *= dims[1];
  for (size_t i = dims.size(); i-- > 2;) {
    strides[i] = stride;
    stride *= dims[i];
  }
  strides[0] = stride;
  return memory::desc(dims, memory::data_type::f32, strides);
}
}  // namespace

Layout Layout::channels_last(const std::vector<int64_t>& dims) {
  return Layout(std::make_shared<const Impl>(Impl{channels_last_md(dims), dims}));
}

bool Layout::is_channels_last() const {
  return impl_->dims.size() >= 3 && impl_->md == channels_last_md(impl_->dims);
}

const std::vector<int64_t>& Layout::dims() const {
  return impl_->dims;
}

bool Layout::is_plain() const {
  return impl_->md == plain_md(impl_->dims);
}

size_t Layout::size_bytes() const {
  return impl_->md.get_size();
}

std::string Layout::describe() const {
  // oneDNN's naming: dims as letters ordered outer to inner, upper case when also blocked, then
  // the inner blocks, e.g. "aBcd16b" for nChw16c.
  const memory::desc& md = impl_->md;
  if (md.get_format_kind() != memory::format_kind::blocked) {
    return "non-blocked";
  }
  const int ndims = md.get_ndims();
  const Dims strides = md.get_strides();
  const int nblks = md.get_inner_nblks();
  const Dims blks = md.get_inner_blks();
  const Dims idxs = md.get_inner_idxs();
  std::vector<int> order(ndims);
  for (int i = 0; i < ndims; ++i) {
    order[i] = i;
  }
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
    return strides[x] > strides[y];
  });
  std::string name;
  for (int dim : order) {
    bool blocked = false;
    for (int b = 0; b < nblks; ++b) {
      blocked = blocked || idxs[b] == dim;
    }
    name += static_cast<char>((blocked ? 'A' : 'a') + dim);
  }
  for (int b = 0; b < nblks; ++b) {
    name += std::to_string(blks[b]) + static_cast<char>('a' + idxs[b]);
  }
  return name;
}

bool Layout::operator==(const Layout& other) const {
  return impl_->md == other.impl_->md;
}

namespace {
Layout layout_of(const memory::desc& md) {
  const Dims dims = md.get_dims();
  return Layout(std::make_shared<const Layout::Impl>(Layout::Impl{md, dims}));
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// Provider state shared by the plans

struct ProviderState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  int num_threads = 1;
  int omp_threads = 1;  // oneDNN's OpenMP team size on the calling thread
  int64_t min_task_flops = 0;
  AlignedBuffer scratchpad;
  size_t weights_bytes = 0;
  size_t staging_bytes = 0;
  // Work sharing: the pool, and one stream and scratchpad per pool thread (index 0 = caller).
  std::unique_ptr<WorkPool> pool;
  std::vector<dnnl::stream> piece_streams;
  std::vector<AlignedBuffer> piece_scratchpads;
  // Dense outputs of channel pieces (see split_conv), one per pool thread, copied out in place.
  std::vector<AlignedBuffer> piece_outputs;
  // Block plans (prepare_block): each thread's expanded rows and depthwise output rows.
  std::vector<AlignedBuffer> block_expanded;
  std::vector<AlignedBuffer> block_depthwise;

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
    return total;
  }

  // Pieces an op of `flops` splits into over `units` independent slices; 1 = run it whole.
  size_t pieces_for(double flops, int64_t units) const {
    if (!pool || pool->size() < 2 || units < 2) {
      return 1;
    }
    int64_t pieces = min_task_flops > 0 ? static_cast<int64_t>(flops / min_task_flops) : units;
    pieces = std::min({pieces, units, kPiecesPerThread * pool->size()});
    return pieces < 2 ? 1 : static_cast<size_t>(pieces);
  }
};

namespace {

// Owns reordered constant data (weights, bias) in the primitive's layout.
struct OwnedTensor {
  memory::desc md;
  std::shared_ptr<AlignedBuffer> bytes;
};

OwnedTensor reorder_constant(
    ProviderState& state, const memory::desc& from, const float* data, const memory::desc& to) {
  OwnedTensor owned{to, std::make_shared<AlignedBuffer>()};
  owned.bytes->reserve(to.get_size());
  memory src(from, state.engine, const_cast<float*>(data));
  memory dst(to, state.engine, owned.bytes->data());
  dnnl::reorder(src, dst).execute(state.stream, src, dst);
  state.stream.wait();
  state.weights_bytes += to.get_size();
  return owned;
}

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
};

// The memory object `memories[key]` of `md`, pointed at `data`: made on first use, re-pointed
// afterwards (making one costs ~0.25 us with oneDNN 3.2, re-pointing ~0.01 us).
memory& point(std::unordered_map<int, memory>& memories, int key, const memory::desc& md,
              const dnnl::engine& engine, const void* data) {
  auto found = memories.find(key);
  if (found == memories.end()) {
    return memories.emplace(key, memory(md, engine, const_cast<void*>(data))).first->second;
  }
  found->second.set_data_handle(const_cast<void*>(data));
  return found->second;
}

// Runs `primitive` on `stream` with `scratchpad`, re-pointing the memory objects in `args` (made
// on first use) at `data`. One thread uses `args` at a time, so no lock.
void execute_with(ProviderState& state, const dnnl::primitive& primitive,
                  std::unordered_map<int, memory>& args, const memory::desc& src_md,
                  const memory::desc& dst_md, const memory::desc& scratchpad_md,
                  dnnl::stream& stream, void* scratchpad, const PieceData& data) {
  point(args, DNNL_ARG_SRC, src_md, state.engine, data.src);
  point(args, DNNL_ARG_DST, dst_md, state.engine, data.dst);
  point(args, DNNL_ARG_SCRATCHPAD, scratchpad_md, state.engine, scratchpad);
  if (data.weights != nullptr) {
    point(args, DNNL_ARG_WEIGHTS, *data.weights_md, state.engine, data.weights);
  }
  if (data.bias != nullptr) {
    point(args, DNNL_ARG_BIAS, *data.bias_md, state.engine, data.bias);
  }
  primitive.execute(stream, args);
  stream.wait();
}

// Runs `primitive` on `worker`'s stream and scratchpad (the provider's own when it has no pool).
void execute_on_worker(ProviderState& state, const dnnl::primitive& primitive,
                       std::unordered_map<int, memory>& args, const memory::desc& src_md,
                       const memory::desc& dst_md, const memory::desc& scratchpad_md, int worker,
                       const PieceData& data) {
  const bool pooled = !state.piece_streams.empty();
  const size_t index = static_cast<size_t>(worker);
  execute_with(state, primitive, args, src_md, dst_md, scratchpad_md,
               pooled ? state.piece_streams[index] : state.stream,
               pooled ? state.piece_scratchpads[index].data() : state.scratchpad.data(), data);
}

// Runs a whole (unsplit) op's primitive on the calling thread: the provider's stream and shared
// scratchpad.
void execute_whole(ProviderState& state, const dnnl::primitive& primitive,
                   std::unordered_map<int, memory>& args, const memory::desc& src_md,
                   const memory::desc& dst_md, const memory::desc& scratchpad_md,
                   const PieceData& data) {
  wrap_dnnl("execute", [&] {
    execute_with(state, primitive, args, src_md, dst_md, scratchpad_md, state.stream,
                 state.scratchpad.data(), data);
  });
}

// Runs one piece on `worker`'s stream and scratchpad.
void execute_piece(ProviderState& state, const Piece& piece, int worker, const PieceData& data) {
  wrap_dnnl("execute piece", [&] {
    execute_on_worker(state, piece.primitive, piece.args, piece.src_md, piece.dst_md,
                      piece.scratchpad_md, worker, data);
  });
}

// Copies `rows` rows of `width` floats between a dense block and a row-strided one.
void copy_rows(const float* from, int64_t from_stride, float* to, int64_t to_stride,
               int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(to + r * to_stride, from + r * from_stride, static_cast<size_t>(width) * 4);
  }
}

// Gives `piece` the primitive of `pd` and its scratchpad size.
template <typename Primitive, typename PrimitiveDesc>
void set_primitive(Piece& piece, const PrimitiveDesc& pd) {
  piece.primitive = Primitive(pd);
  piece.scratchpad_md = pd.scratchpad_desc();
}

// [begin, end) of slice `index` when `units` are split into `count` near-equal slices.
std::pair<int64_t, int64_t> slice_of(int64_t units, size_t count, size_t index) {
  const int64_t n = static_cast<int64_t>(count);
  const int64_t i = static_cast<int64_t>(index);
  return {units * i / n, units * (i + 1) / n};
}

// [begin, end) of slice `index` of `count` over `total` items cut into blocks of `block` (the
// last slice also takes the remainder), e.g. output channels in blocks of 16.
std::pair<int64_t, int64_t> block_slice(int64_t total, int64_t block, size_t count, size_t index) {
  const auto [begin, end] = slice_of(total / block, count, index);
  return {begin * block, index + 1 == count ? total : end * block};
}

// The pieces `make(index, piece)` builds for index 0..count-1, or none (the op stays whole) when
// count < 2, when `make` returns false, or when oneDNN refuses one. Only a complete split keeps
// what it counted (reordered weights) and reserves its scratchpad in every pool thread's buffer.
template <typename Make>
std::vector<Piece> make_pieces(ProviderState& state, size_t count, Make make) {
  if (count < 2) {
    return {};
  }
  const size_t weights_before = state.weights_bytes;
  std::vector<Piece> pieces;
  try {
    for (size_t i = 0; i < count; ++i) {
      Piece piece;
      if (!make(i, piece)) {
        pieces.clear();
        break;
      }
      pieces.push_back(std::move(piece));
    }
  } catch (const dnnl::error&) {
    pieces.clear();
  }
  if (pieces.empty()) {
    state.weights_bytes = weights_before;
    return {};
  }
  for (const Piece& piece : pieces) {
    state.reserve_piece_scratchpad(piece.scratchpad_md);
  }
  return pieces;
}

// Runs every piece on the pool; `args(piece)` gives its arguments beside the scratchpad.
void run_pieces(
    ProviderState& state,
    const std::vector<Piece>& pieces,
    const std::function<PieceData(const Piece&)>& data) {
  state.pool->run(pieces.size(), [&](size_t index, int worker) {
    execute_piece(state, pieces[index], worker, data(pieces[index]));
  });
}

const float* data_of(const OwnedTensor& tensor) {
  return tensor.bytes ? static_cast<const float*>(tensor.bytes->data()) : nullptr;
}

// What a piece reads and writes when its weights (and bias: null when there is none) are owned
// constants.
PieceData piece_data(const float* src, float* dst, const OwnedTensor& weights,
                    const OwnedTensor* bias) {
  PieceData data;
  data.src = src;
  data.dst = dst;
  data.weights_md = &weights.md;
  data.weights = data_of(weights);
  if (bias != nullptr) {
    data.bias_md = &bias->md;
    data.bias = data_of(*bias);
  }
  return data;
}


}  // namespace

// ---------------------------------------------------------------------------------------------
// Convolution

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

double product(const std::vector<int64_t>& values, size_t from = 0) {
  double result = 1;
  for (size_t i = from; i < values.size(); ++i) result *= static_cast<double>(values[i]);
  return result;
}

// Output channels per channel piece at least (one AVX-512 register of fp32).
constexpr int64_t kConvChannels = 16;

// What converting one element between layouts costs, in FLOPs of a convolution on one core
// (measured here: the stem's 1x3x224x224 NCHW -> NHWC reorder, 0.6 ns per element, against
// ~65 GFLOP/s), so a reorder splits by the same ET_CPU_ONEDNN_TASK_FLOPS rule as the ops.
constexpr double kReorderFlopsPerElement = 40;

// A large layout conversion (the graph input's NCHW -> NHWC, single-threaded otherwise) as
// bands of the first spatial dim, one reorder per band over sub-memories of the same buffers;
// none when it is too small to share or oneDNN refuses a band.
std::vector<dnnl::reorder> split_reorder(ProviderState& state, const memory::desc& from,
                                         const memory::desc& to) {
  const memory::dims dims = from.get_dims();
  if (dims.size() < 3) return {};
  const size_t count =
      state.pieces_for(product(dims) * kReorderFlopsPerElement, static_cast<int64_t>(dims[2]));
  std::vector<dnnl::reorder> bands;
  if (count < 2) return bands;
  try {
    for (size_t i = 0; i < count; ++i) {
      const auto [begin, end] = slice_of(dims[2], count, i);
      memory::dims band = dims;
      band[2] = end - begin;
      memory::dims offsets(dims.size(), 0);
      offsets[2] = begin;
      bands.emplace_back(dnnl::reorder::primitive_desc(
          state.engine, from.submemory_desc(band, offsets), state.engine,
          to.submemory_desc(band, offsets)));
    }
  } catch (const dnnl::error&) {
    bands.clear();
  }
  return bands;
}

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

// ---------------------------------------------------------------------------------------------
// Linear and matmul (both on oneDNN's matmul primitive)

Support supports_linear(const LinearParams& p, const PostOps& post_ops) {
  if (p.rows < 1 || p.in_features < 1 || p.out_features < 1) {
    return Support::no(
        "linear: rows " + std::to_string(p.rows) + ", in_features " +
        std::to_string(p.in_features) + ", out_features " + std::to_string(p.out_features) +
        " must be positive");
  }
  return check_post_ops(post_ops);
}

Support supports_matmul(const MatmulParams& p, const PostOps& post_ops) {
  if (p.batch < 1 || p.m < 1 || p.k < 1 || p.n < 1) {
    return Support::no(
        "matmul: batch " + std::to_string(p.batch) + ", m " + std::to_string(p.m) + ", k " +
        std::to_string(p.k) + ", n " + std::to_string(p.n) + " must be positive");
  }
  return check_post_ops(post_ops);
}

struct LinearPlan::Impl {
  std::shared_ptr<ProviderState> state;
  dnnl::matmul primitive;
  std::string implementation;
  memory::desc scratchpad_md;
  memory::desc src_md;
  memory::desc dst_md;
  OwnedTensor weights;
  OwnedTensor bias;
  bool has_bias = false;
  bool has_add = false;
  // Work sharing: column blocks of the output, each with its own weights; empty = one call.
  std::vector<Piece> pieces;
  size_t weights_bytes = 0;
  mutable std::unordered_map<int, memory> args;  // the whole op's, made on the first run
};

LinearPlan::LinearPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

size_t LinearPlan::weights_bytes() const {
  return impl_->weights_bytes;
}
size_t LinearPlan::scratchpad_bytes() const {
  return impl_->scratchpad_md.get_size();
}
std::string LinearPlan::implementation() const {
  return impl_->implementation;
}
size_t LinearPlan::pieces() const {
  return std::max<size_t>(1, impl_->pieces.size());
}

void LinearPlan::run(const float* input, float* output, const float* residual) const {
  const Impl& p = *impl_;
  ProviderState& state = *p.state;
  if (p.has_add && residual == nullptr) {
    throw ProviderError("linear plan: post-op add needs a residual tensor, got null");
  }
  ThreadCountGuard threads(state.omp_threads);
  if (p.has_add && residual != output) {
    std::memcpy(output, residual, p.dst_md.get_size());
  }
  if (!p.pieces.empty()) {
    run_pieces(state, p.pieces, [&](const Piece& piece) {
      return piece_data(input, output + piece.dst_offset, piece.weights,
                        p.has_bias ? &piece.bias : nullptr);
    });
    return;
  }
  execute_whole(state, p.primitive, p.args, p.src_md, p.dst_md, p.scratchpad_md,
                piece_data(input, output, p.weights, p.has_bias ? &p.bias : nullptr));
}

namespace {

// Columns per linear piece at least: narrower blocks starve oneDNN's GEMM kernel.
constexpr int64_t kLinearColumns = 64;

// Splits a linear into column blocks of its output: each piece reads the whole input, owns its
// block of the weights (reordered once here, so the weights are not duplicated) and writes its
// columns of the row-major output. Empty result: the plan stays whole.
std::vector<Piece> split_linear(
    ProviderState& state,
    const LinearParams& params,
    const memory::desc& src_md,
    const float* weight,
    const float* bias,
    const dnnl::primitive_attr& attr,
    const std::string& whole_implementation) {
  const int64_t m = params.rows;
  const int64_t k = params.in_features;
  const int64_t n = params.out_features;
  const size_t count = state.pieces_for(2.0 * m * k * n, n / kLinearColumns);
  return make_pieces(state, count, [&](size_t i, Piece& piece) {
    const auto [begin, end] = block_slice(n, kLinearColumns, count, i);
    const int64_t width = end - begin;
    piece.src_md = src_md;
    piece.dst_md = memory::desc({m, width}, memory::data_type::f32, Dims{n, 1});
    piece.dst_offset = static_cast<size_t>(begin);
    // This block of the weight as a logical [K, width] matrix.
    const memory::desc user_weight_md = params.weight_is_k_by_n
        ? memory::desc({k, width}, memory::data_type::f32, Dims{n, 1})
        : memory::desc({k, width}, memory::data_type::f32, Dims{1, k});
    const float* user_weight = params.weight_is_k_by_n ? weight + begin : weight + begin * k;
    const memory::desc bias_md = bias ? plain_md({1, width}) : memory::desc();
    const dnnl::matmul::primitive_desc pd(state.engine, piece.src_md, any_md({k, width}),
                                          bias_md, piece.dst_md, attr);
    // A column block writes a strided output, which oneDNN's brgemm matmul refuses (2.6 and
    // 3.2); its jit GEMM takes it at about the same speed. Only the reference kernel is not
    // worth it.
    if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0 &&
        whole_implementation.rfind("ref", 0) != 0) {
      return false;
    }
    set_primitive<dnnl::matmul>(piece, pd);
    piece.weights = reorder_constant(state, user_weight_md, user_weight, pd.weights_desc());
    if (bias) {
      piece.bias = reorder_constant(state, plain_md({1, width}), bias + begin, pd.bias_desc());
    }
    return true;
  });
}

}  // namespace

LinearPlan Provider::prepare_linear(
    const LinearParams& params, const float* weight, const float* bias, const PostOps& post_ops) {
  const Support support = supports_linear(params, post_ops);
  if (!support.ok) {
    throw ProviderError("prepare_linear: " + support.reason);
  }
  if (weight == nullptr) {
    throw ProviderError("prepare_linear: weight is null");
  }
  ProviderState& state = *state_;
  ThreadCountGuard threads(state.omp_threads);
  const int64_t m = params.rows;
  const int64_t k = params.in_features;
  const int64_t n = params.out_features;
  // The weight as a logical [K, N] matrix: plain for addmm's mat2, transposed view for linear's.
  const memory::desc user_weight_md = params.weight_is_k_by_n
      ? plain_md({k, n})
      : memory::desc({k, n}, memory::data_type::f32, Dims{1, k});

  return wrap_dnnl("prepare_linear", [&] {
    using Impl = LinearPlan::Impl;
    auto impl = std::make_shared<Impl>();
    impl->state = state_;
    impl->src_md = plain_md({m, k});
    impl->dst_md = plain_md({m, n});
    const memory::desc bias_md = bias ? plain_md({1, n}) : memory::desc();
    const dnnl::matmul::primitive_desc pd(state.engine, impl->src_md, any_md({k, n}), bias_md,
                                          impl->dst_md, make_attr(post_ops));
    impl->primitive = dnnl::matmul(pd);
    impl->implementation = pd.impl_info_str();
    impl->has_bias = bias != nullptr;
    impl->has_add = has_add(post_ops);
    const size_t weights_before = state.weights_bytes;
    impl->pieces = split_linear(
        state, params, impl->src_md, weight, bias, make_attr(post_ops), impl->implementation);
    if (!impl->pieces.empty()) {
      impl->implementation += ", " + std::to_string(impl->pieces.size()) + " pieces";
    } else {
      impl->scratchpad_md = pd.scratchpad_desc();
      state.reserve_scratchpad(impl->scratchpad_md);
      impl->weights = reorder_constant(state, user_weight_md, weight, pd.weights_desc());
      if (bias) {
        impl->bias = reorder_constant(state, plain_md({1, n}), bias, pd.bias_desc());
      }
    }
    impl->weights_bytes = state.weights_bytes - weights_before;
    return LinearPlan(std::move(impl));
  });
}

struct MatmulPlan::Impl {
  std::shared_ptr<ProviderState> state;
  dnnl::matmul primitive;
  std::string implementation;
  memory::desc scratchpad_md;
  memory::desc a_md;
  memory::desc b_md;
  memory::desc dst_md;
  bool has_add = false;
  // Work sharing: batches (bmm) or row bands of a and the output; empty = one call.
  std::vector<Piece> pieces;
  mutable std::unordered_map<int, memory> args;  // the whole op's, made on the first run
};

MatmulPlan::MatmulPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

size_t MatmulPlan::scratchpad_bytes() const {
  return impl_->scratchpad_md.get_size();
}
std::string MatmulPlan::implementation() const {
  return impl_->implementation;
}
size_t MatmulPlan::pieces() const {
  return std::max<size_t>(1, impl_->pieces.size());
}

void MatmulPlan::run(const float* a, const float* b, float* output, const float* residual) const {
  const Impl& p = *impl_;
  ProviderState& state = *p.state;
  if (p.has_add && residual == nullptr) {
    throw ProviderError("matmul plan: post-op add needs a residual tensor, got null");
  }
  ThreadCountGuard threads(state.omp_threads);
  if (p.has_add && residual != output) {
    std::memcpy(output, residual, p.dst_md.get_size());
  }
  if (!p.pieces.empty()) {
    run_pieces(state, p.pieces, [&](const Piece& piece) {
      PieceData data;
      data.src = a + piece.src_offset;
      data.dst = output + piece.dst_offset;
      data.weights_md = &piece.weights_md;
      data.weights = b + piece.weights_offset;
      return data;
    });
    return;
  }
  PieceData data;
  data.src = a;
  data.dst = output;
  data.weights_md = &p.b_md;
  data.weights = b;
  execute_whole(state, p.primitive, p.args, p.a_md, p.dst_md, p.scratchpad_md, data);
}

namespace {

// Rows per matmul piece at least (each piece reads all of b).
constexpr int64_t kMatmulRows = 16;

// Splits a matmul into batches (bmm) or bands of rows of a (mm); empty result: one call.
std::vector<Piece> split_matmul(
    ProviderState& state,
    const MatmulParams& params,
    const dnnl::primitive_attr& attr,
    const std::string& whole_implementation) {
  const bool by_batch = params.batch > 1;
  const int64_t units = by_batch ? params.batch : params.m / kMatmulRows;
  const double flops = 2.0 * params.batch * params.m * params.k * params.n;
  const size_t count = state.pieces_for(flops, units);
  return make_pieces(state, count, [&](size_t i, Piece& piece) {
    if (by_batch) {
      const auto [begin, end] = slice_of(units, count, i);
      const int64_t batch = end - begin;
      piece.src_md = plain_md({batch, params.m, params.k});
      piece.weights_md = plain_md({batch, params.k, params.n});
      piece.dst_md = plain_md({batch, params.m, params.n});
      piece.src_offset = static_cast<size_t>(begin * params.m * params.k);
      piece.weights_offset = static_cast<size_t>(begin * params.k * params.n);
      piece.dst_offset = static_cast<size_t>(begin * params.m * params.n);
    } else {
      const auto [begin, end] = block_slice(params.m, kMatmulRows, count, i);
      piece.src_md = plain_md({end - begin, params.k});
      piece.weights_md = plain_md({params.k, params.n});
      piece.dst_md = plain_md({end - begin, params.n});
      piece.src_offset = static_cast<size_t>(begin * params.k);
      piece.dst_offset = static_cast<size_t>(begin * params.n);
    }
    const dnnl::matmul::primitive_desc pd(state.engine, piece.src_md, piece.weights_md,
                                          piece.dst_md, attr);
    if (pd.impl_info_str() != whole_implementation) {
      return false;
    }
    set_primitive<dnnl::matmul>(piece, pd);
    return true;
  });
}

}  // namespace

MatmulPlan Provider::prepare_matmul(const MatmulParams& params, const PostOps& post_ops) {
  const Support support = supports_matmul(params, post_ops);
  if (!support.ok) {
    throw ProviderError("prepare_matmul: " + support.reason);
  }
  ProviderState& state = *state_;
  ThreadCountGuard threads(state.omp_threads);
  return wrap_dnnl("prepare_matmul", [&] {
    using Impl = MatmulPlan::Impl;
    auto impl = std::make_shared<Impl>();
    impl->state = state_;
    const auto with_batch = [&](Dims dims) {
      if (params.batch > 1) {
        dims.insert(dims.begin(), params.batch);
      }
      return plain_md(dims);
    };
    impl->a_md = with_batch({params.m, params.k});
    impl->b_md = with_batch({params.k, params.n});
    impl->dst_md = with_batch({params.m, params.n});
    const dnnl::matmul::primitive_desc pd(state.engine, impl->a_md, impl->b_md, impl->dst_md,
                                          make_attr(post_ops));
    impl->primitive = dnnl::matmul(pd);
    impl->implementation = pd.impl_info_str();
    impl->scratchpad_md = pd.scratchpad_desc();
    state.reserve_scratchpad(impl->scratchpad_md);
    impl->has_add = has_add(post_ops);
    impl->pieces = split_matmul(state, params, make_attr(post_ops), impl->implementation);
    if (!impl->pieces.empty()) {
      impl->implementation += ", " + std::to_string(impl->pieces.size()) + " pieces";
    }
    return MatmulPlan(std::move(impl));
  });
}

// ---------------------------------------------------------------------------------------------
// Reorder

struct ReorderPlan::Impl {
  std::shared_ptr<ProviderState> state;
  dnnl::reorder primitive;
  memory::desc from;
  memory::desc to;
  mutable std::unordered_map<int, memory> memories;  // made on the first run
};

ReorderPlan::ReorderPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

void ReorderPlan::run(const float* input, float* output) const {
  const Impl& p = *impl_;
  ProviderState& state = *p.state;
  ThreadCountGuard threads(state.omp_threads);
  wrap_dnnl("reorder", [&] {
    p.primitive.execute(state.stream,
                        point(p.memories, DNNL_ARG_FROM, p.from, state.engine, input),
                        point(p.memories, DNNL_ARG_TO, p.to, state.engine, output));
    state.stream.wait();
  });
}

ReorderPlan Provider::prepare_reorder(const Layout& from, const Layout& to) {
  if (from.dims() != to.dims()) {
    throw ProviderError(
        "prepare_reorder: dims differ: from " + dims_to_string(from.dims()) + " to " +
        dims_to_string(to.dims()));
  }
  ThreadCountGuard threads(state_->omp_threads);
  return wrap_dnnl("prepare_reorder", [&] {
    auto impl = std::make_shared<ReorderPlan::Impl>();
    impl->state = state_;
    impl->from = from.impl().md;
    impl->to = to.impl().md;
    impl->primitive = dnnl::reorder(
        dnnl::reorder::primitive_desc(state_->engine, impl->from, state_->engine, impl->to));
    return ReorderPlan(std::move(impl));
  });
}

// ---------------------------------------------------------------------------------------------
// Inverted residual block (1x1 expand -> depthwise -> 1x1 project in row bands)

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

}  // namespace

struct BlockPlan::Impl {
  std::shared_ptr<ProviderState> state;
  BlockParams params;
  int64_t out_h = 0;
  int64_t out_w = 0;
  bool has_add = false;
  std::vector<BlockStage> expand;
  std::vector<BlockStage> depthwise;
  std::vector<BlockStage> project;
  OwnedTensor expand_weights, expand_bias;
  OwnedTensor depthwise_weights, depthwise_bias;
  OwnedTensor project_weights, project_bias;
  std::vector<BlockPiece> pieces;
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
  return impl_->pieces.size();
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

}  // namespace

BlockPlan Provider::prepare_block(
    const BlockParams& params, const BlockWeights& weights, const BlockPostOps& post_ops) {
  const Support support = supports_block(params, post_ops);
  if (!support.ok) {
    throw ProviderError("prepare_block: " + support.reason);
  }
  if ((params.expand && !weights.expand) || !weights.depthwise || !weights.project) {
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
    const dnnl::primitive_attr expand_attr = make_attr(post_ops.expand);
    const dnnl::primitive_attr depthwise_attr = make_attr(post_ops.depthwise);
    const dnnl::primitive_attr project_attr = make_attr(post_ops.project);

    // Weights in the layouts the whole-image stages pick.
    std::string expand_impl;
    std::string depthwise_impl;
    std::string project_impl;
    if (params.expand) {
      std::tie(p.expand_weights, p.expand_bias, expand_impl) = block_weights(
          state, {1, cin, h, w}, {1, hid, h, w}, {hid, cin, 1, 1}, weights.expand,
          weights.expand_bias, {1, 1}, {0, 0}, expand_attr);
    }
    std::tie(p.depthwise_weights, p.depthwise_bias, depthwise_impl) = block_weights(
        state, {1, hid, h, w}, {1, hid, p.out_h, p.out_w}, {hid, 1, 1, k, k}, weights.depthwise,
        weights.depthwise_bias, {s, s}, {pad, pad}, depthwise_attr);
    std::tie(p.project_weights, p.project_bias, project_impl) = block_weights(
        state, {1, hid, p.out_h, p.out_w}, {1, cout, p.out_h, p.out_w}, {cout, hid, 1, 1},
        weights.project, weights.project_bias, {1, 1}, {0, 0}, project_attr);

    // Rows per step: what fits kBlockStepBytes of expanded (or input) plus depthwise rows.
    const double row_bytes = 4.0 * static_cast<double>(hid) * static_cast<double>(s * w + p.out_w);
    p.step_rows = std::max<int64_t>(1, static_cast<int64_t>(kBlockStepBytes / row_bytes));
    p.step_rows = std::min(p.step_rows, p.out_h);

    // Pieces: per image, bands of output rows; as many as the pool's rule gives, but a multiple
    // of the threads (each gets an equal share) and no thinner than kBlockMinPieceRows.
    const int threads_n = state.pool ? state.pool->size() : 1;
    const double expand_flops = params.expand ? static_cast<double>(h * w * cin * hid) : 0.0;
    const double rest_flops = static_cast<double>(p.out_h * p.out_w) * hid * (k * k + cout);
    const double flops = 2.0 * static_cast<double>(params.batch) * (expand_flops + rest_flops);
    int64_t per_image = static_cast<int64_t>(state.pieces_for(flops / params.batch, p.out_h));
    per_image = std::min(per_image, std::max<int64_t>(1, p.out_h / kBlockMinPieceRows));
    if (per_image > 1 && threads_n > 1) {
      per_image = std::max<int64_t>(threads_n, per_image / threads_n * threads_n);
    }

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
          if (new_rows > 0 && params.expand) {
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
          step.depthwise = stage_index(
              depthwise_keys, p.depthwise, std::vector<int64_t>{hi - lo, top, bottom, rows}, [&] {
                return checked(
                    make_block_stage(state, {1, hid, hi - lo, w}, {1, hid, rows, p.out_w},
                                     p.depthwise_weights.md,
                                     weights.depthwise_bias ? p.depthwise_bias.md
                                                            : memory::desc(),
                                     {s, s}, {top, pad}, {bottom, pad}, depthwise_attr),
                    depthwise_impl, "depthwise");
              });
          step.project = stage_index(project_keys, p.project, rows, [&] {
            return checked(
                make_block_stage(state, {1, hid, rows, p.out_w}, {1, cout, rows, p.out_w},
                                 p.project_weights.md,
                                 weights.project_bias ? p.project_bias.md : memory::desc(),
                                 {1, 1}, {0, 0}, {0, 0}, project_attr),
                project_impl, "project");
          });
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
    for (AlignedBuffer& buffer : state.block_depthwise) {
      buffer.reserve(static_cast<size_t>(max_step_rows * p.out_w * hid) * sizeof(float));
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
    p.implementation = "block " +
                       (params.expand ? p.expand.front().implementation + " + " : std::string()) +
                       p.depthwise.front().implementation + " + " +
                       p.project.front().implementation + ", " +
                       std::to_string(p.pieces.size()) + " pieces in steps of <= " +
                       std::to_string(p.step_rows) + " rows";
    return BlockPlan(std::move(impl));
  });
}

void BlockPlan::run(const float* input, float* output) const {
  const Impl& p = *impl_;
  ProviderState& state = *p.state;
  ThreadCountGuard threads(state.omp_threads);
  const BlockParams& bp = p.params;
  const int64_t h = bp.input_size[0];
  const int64_t w = bp.input_size[1];
  const int64_t in_row = w * bp.in_channels;         // floats per input row
  const int64_t hidden_row = w * bp.hidden_channels;  // per expanded row
  const int64_t out_row = p.out_w * bp.out_channels;  // per output row
  auto run_stage = [&](const BlockStage& stage, int worker, const float* src, float* dst,
                       const OwnedTensor& weights, const OwnedTensor& bias) {
    execute_on_worker(state, stage.primitive, stage.args[static_cast<size_t>(worker)],
                      stage.src_md, stage.dst_md, stage.scratchpad_md, worker,
                      piece_data(src, dst, weights, bias.bytes ? &bias : nullptr));
  };
  auto run_piece = [&](size_t index, int worker) {
    wrap_dnnl("block", [&] {
      const BlockPiece& piece = p.pieces[index];
      const float* x = input + piece.image * h * in_row;
      float* y = output + piece.image * p.out_h * out_row;
      const size_t w_index = static_cast<size_t>(worker);
      float* expanded = static_cast<float*>(state.block_expanded[w_index].data());
      float* depthwise = static_cast<float*>(state.block_depthwise[w_index].data());
      for (const BlockStep& step : piece.steps) {
        if (step.kept > 0 && step.kept_from > 0) {
          std::memmove(expanded, expanded + step.kept_from * hidden_row,
                       static_cast<size_t>(step.kept * hidden_row) * sizeof(float));
        }
        if (step.expand >= 0) {
          run_stage(p.expand[static_cast<size_t>(step.expand)], worker,
                    x + step.expand_begin * in_row, expanded + step.kept * hidden_row,
                    p.expand_weights, p.expand_bias);
        }
        const float* depthwise_in = bp.expand ? expanded : x + step.expand_begin * in_row;
        run_stage(p.depthwise[static_cast<size_t>(step.depthwise)], worker, depthwise_in,
                  depthwise, p.depthwise_weights, p.depthwise_bias);
        float* out = y + step.out_begin * out_row;
        if (p.has_add) {
          // The sum post-op adds what the output rows hold: the block's input rows.
          std::memcpy(out, x + step.out_begin * in_row,
                      static_cast<size_t>((step.out_end - step.out_begin) * out_row) *
                          sizeof(float));
        }
        run_stage(p.project[static_cast<size_t>(step.project)], worker, depthwise, out,
                  p.project_weights, p.project_bias);
      }
    });
  };
  if (state.pool) {
    state.pool->run(p.pieces.size(), run_piece);
  } else {
    for (size_t i = 0; i < p.pieces.size(); ++i) run_piece(i, 0);
  }
}

// ---------------------------------------------------------------------------------------------
// Max pooling

// The right/bottom padding that makes oneDNN's floor formula give the requested output size:
// torch's padding in floor mode (or less, when the last rows are dropped), more in ceil mode.
int64_t pool_right_padding(const PoolParams& p, size_t i) {
  return std::max<int64_t>(
      0, (p.output_size[i] - 1) * p.stride[i] + p.kernel_size[i] - p.input_size[i] - p.padding[i]);
}

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

struct PoolPlan::Impl {
  std::shared_ptr<ProviderState> state;
  dnnl::pooling_forward primitive;
  memory::desc src;
  memory::desc dst;
  memory::desc scratchpad_md;
  std::string implementation;
  mutable std::unordered_map<int, memory> args;  // made on the first run
};

PoolPlan::PoolPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

std::string PoolPlan::implementation() const {
  return impl_->implementation;
}

void PoolPlan::run(const float* input, float* output) const {
  const Impl& p = *impl_;
  ProviderState& state = *p.state;
  ThreadCountGuard threads(state.omp_threads);
  PieceData data;
  data.src = input;
  data.dst = output;
  execute_whole(state, p.primitive, p.args, p.src, p.dst, p.scratchpad_md, data);
}

namespace {

// A pooling plan of `algorithm` from `src` to `dst` (its scratchpad in the provider's shared one).
PoolPlan make_pool_plan(const std::shared_ptr<ProviderState>& state, const char* what,
                        dnnl::algorithm algorithm, const memory::desc& src,
                        const memory::desc& dst, const Dims& strides, const Dims& kernel,
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
    impl->primitive = dnnl::pooling_forward(pd);
    impl->implementation = pd.impl_info_str();
    impl->scratchpad_md = pd.scratchpad_desc();
    state->reserve_scratchpad(impl->scratchpad_md);
    return PoolPlan(std::move(impl));
  });
}

}  // namespace

PoolPlan Provider::prepare_max_pool(
    const PoolParams& params, const Layout& input, const Layout& output) {
  const Support support = supports_max_pool(params);
  if (!support.ok) {
    throw ProviderError("prepare_max_pool: " + support.reason);
  }
  Dims src_dims{params.batch, params.channels};
  src_dims.insert(src_dims.end(), params.input_size.begin(), params.input_size.end());
  Dims dst_dims{params.batch, params.channels};
  dst_dims.insert(dst_dims.end(), params.output_size.begin(), params.output_size.end());
  if (input.dims() != std::vector<int64_t>(src_dims) ||
      output.dims() != std::vector<int64_t>(dst_dims)) {
    throw ProviderError("prepare_max_pool: layout dims differ from the pooling's");
  }
  Dims right;
  for (size_t i = 0; i < params.input_size.size(); ++i) {
    right.push_back(pool_right_padding(params, i));
  }
  return make_pool_plan(state_, "prepare_max_pool", dnnl::algorithm::pooling_max,
                        input.impl().md, output.impl().md,
                        Dims(params.stride.begin(), params.stride.end()),
                        Dims(params.kernel_size.begin(), params.kernel_size.end()),
                        Dims(params.padding.begin(), params.padding.end()), right);
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
  return make_pool_plan(state_, "prepare_global_average_pool",
                        dnnl::algorithm::pooling_avg_exclude_padding, input.impl().md, dst,
                        Dims(window.size(), 1), window, zeros, zeros);
}

// ---------------------------------------------------------------------------------------------
// Provider

Provider::Provider(ProviderOptions options) : state_(std::make_shared<ProviderState>()) {
  ProviderState& state = *state_;
  state.num_threads = options.num_threads > 0 ? options.num_threads : default_thread_count();
  state.min_task_flops =
      options.min_task_flops >= 0 ? options.min_task_flops : default_min_task_flops();
  if (options.work_sharing) {
    state.omp_threads = 1;
    if (state.num_threads > 1) {  // one thread never splits: no pool, no per-thread buffers
      state.pool = std::make_unique<WorkPool>(state.num_threads);
      for (int i = 0; i < state.num_threads; ++i) {
        state.piece_streams.emplace_back(state.engine);
      }
      state.piece_scratchpads.resize(static_cast<size_t>(state.num_threads));
      state.piece_outputs.resize(static_cast<size_t>(state.num_threads));
    }
    state.block_expanded.resize(static_cast<size_t>(state.num_threads));
    state.block_depthwise.resize(static_cast<size_t>(state.num_threads));
  } else {
    state.omp_threads = state.num_threads;
  }
}

Provider::~Provider() = default;

int Provider::num_threads() const {
  return state_->num_threads;
}
bool Provider::work_sharing() const {
  return state_->omp_threads == 1 && state_->pool != nullptr;
}
size_t Provider::weights_bytes() const {
  return state_->weights_bytes;
}
size_t Provider::scratchpad_bytes() const {
  return state_->scratchpad_total();
}
size_t Provider::staging_bytes() const {
  return state_->staging_bytes;
}

std::string Provider::isa() const {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx2_vnni_2:
      return "avx2_vnni_2";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_fp16:
      return "avx512_core_fp16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_amx_fp16:
      return "avx512_core_amx_fp16";
    default:
      return "other";
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
