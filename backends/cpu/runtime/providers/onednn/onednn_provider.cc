#include "backends/cpu/runtime/providers/onednn/onednn_provider.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <unordered_map>
#include <utility>

#include <oneapi/dnnl/dnnl.hpp>

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

int default_thread_count() {
  if (const char* env = std::getenv("ET_CPU_ONEDNN_THREADS")) {
    const int value = std::atoi(env);
    if (value > 0) {
      return value;
    }
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    return std::max(1, CPU_COUNT(&set));
  }
  return 1;
}

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
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        break;
      case PostOp::Kind::kClamp:
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, op.min, op.max);
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
  const dnnl_memory_desc_t& md = impl_->md.data;
  if (md.format_kind != dnnl_blocked) {
    return "non-blocked";
  }
  const dnnl_blocking_desc_t& blocking = md.format_desc.blocking;
  std::vector<int> order(md.ndims);
  for (int i = 0; i < md.ndims; ++i) {
    order[i] = i;
  }
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
    return blocking.strides[x] > blocking.strides[y];
  });
  std::string name;
  for (int dim : order) {
    bool blocked = false;
    for (int b = 0; b < blocking.inner_nblks; ++b) {
      blocked = blocked || blocking.inner_idxs[b] == dim;
    }
    name += static_cast<char>((blocked ? 'A' : 'a') + dim);
  }
  for (int b = 0; b < blocking.inner_nblks; ++b) {
    name += std::to_string(blocking.inner_blks[b]) + static_cast<char>('a' + blocking.inner_idxs[b]);
  }
  return name;
}

bool Layout::operator==(const Layout& other) const {
  return impl_->md == other.impl_->md;
}

namespace {
Layout layout_of(const memory::desc& md) {
  const Dims dims = md.dims();
  return Layout(std::make_shared<const Layout::Impl>(Layout::Impl{md, dims}));
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// Provider state shared by the plans

struct ProviderState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  int num_threads = 1;
  AlignedBuffer scratchpad;
  size_t weights_bytes = 0;
  size_t staging_bytes = 0;

  memory scratchpad_memory(const memory::desc& md) const {
    return memory(md, engine, scratchpad.data());
  }
  void reserve_scratchpad(const memory::desc& md) { scratchpad.reserve(md.get_size()); }
};

namespace {

// Owns reordered constant data (weights, bias) in the primitive's layout.
struct OwnedTensor {
  memory::desc md;
  std::shared_ptr<AlignedBuffer> bytes;

  memory as_memory(const dnnl::engine& engine) const {
    return memory(md, engine, bytes ? bytes->data() : nullptr);
  }
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

void execute(
    ProviderState& state,
    const dnnl::primitive& primitive,
    const memory::desc& scratchpad_md,
    std::unordered_map<int, memory> args) {
  args.emplace(DNNL_ARG_SCRATCHPAD, state.scratchpad_memory(scratchpad_md));
  wrap_dnnl("execute", [&] {
    primitive.execute(state.stream, args);
    state.stream.wait();
  });
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
  // oneDNN 2.6's brgconv segfaults (seen here, 1D to 3D) when padding covers a whole kernel
  // extent (output points that see only padding) and a residual add is fused with another
  // post-op. Real networks never pad like that: leave those few to the reference provider.
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
  return impl_->weights.md.get_size() + (impl_->has_bias ? impl_->bias.md.get_size() : 0);
}
size_t ConvPlan::scratchpad_bytes() const {
  return impl_->scratchpad_md.get_size();
}
std::string ConvPlan::implementation() const {
  return impl_->implementation;
}

void ConvPlan::run(const float* input, float* output, const float* residual) const {
  const Impl& p = *impl_;
  ProviderState& state = *p.state;
  if (p.has_add && residual == nullptr) {
    throw ProviderError("conv plan: post-op add needs a residual tensor, got null");
  }
  ThreadCountGuard threads(state.num_threads);
  memory src(p.input_layout.impl().md, state.engine, const_cast<float*>(input));
  memory out(p.output_layout.impl().md, state.engine, output);
  memory dst = out;
  wrap_dnnl("layout conversion", [&] {
    if (p.reorder_input) {
      memory staged(p.primitive_src_md, state.engine, p.staged_input->data());
      p.input_reorder.execute(state.stream, src, staged);
      src = staged;
    }
    if (p.reorder_output) {
      dst = memory(p.primitive_dst_md, state.engine, p.staged_output->data());
    }
    if (p.has_add) {
      // The sum post-op adds what dst holds before the call.
      memory res(p.output_layout.impl().md, state.engine, const_cast<float*>(residual));
      if (p.reorder_output) {
        p.residual_reorder.execute(state.stream, res, dst);
      } else if (residual != output) {
        std::memcpy(output, residual, p.output_layout.size_bytes());
      }
    }
  });
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, src},
      {DNNL_ARG_WEIGHTS, p.weights.as_memory(state.engine)},
      {DNNL_ARG_DST, dst}};
  if (p.has_bias) {
    args.emplace(DNNL_ARG_BIAS, p.bias.as_memory(state.engine));
  }
  execute(state, p.primitive, p.scratchpad_md, std::move(args));
  if (p.reorder_output) {
    wrap_dnnl("output reorder", [&] {
      p.output_reorder.execute(state.stream, dst, out);
      state.stream.wait();
    });
  }
}

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
  ThreadCountGuard threads(state.num_threads);
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
    dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference,
        dnnl::algorithm::convolution_direct,
        any_md(src_dims),
        any_md(weight_dims),
        bias_md,
        any_md(dst_dims),
        strides,
        dilation,
        padding,
        padding);
    dnnl::convolution_forward::primitive_desc pd(desc, make_attr(post_ops), state.engine);

    auto impl = std::make_shared<Impl>();
    impl->state = state_;
    impl->primitive = dnnl::convolution_forward(pd);
    impl->implementation = pd.impl_info_str();
    impl->scratchpad_md = pd.scratchpad_desc();
    state.reserve_scratchpad(impl->scratchpad_md);
    impl->weights = reorder_constant(state, plain_md(weight_dims), weight, pd.weights_desc());
    if (bias) {
      impl->has_bias = true;
      impl->bias = reorder_constant(state, plain_md({params.out_channels}), bias, pd.bias_desc());
    }
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
    }
    if (impl->primitive_dst_md != out_md) {
      impl->reorder_output = true;
      impl->output_reorder = make_reorder(impl->primitive_dst_md, out_md);
      impl->residual_reorder = make_reorder(out_md, impl->primitive_dst_md);
      impl->staged_output = std::make_shared<AlignedBuffer>();
      impl->staged_output->reserve(impl->primitive_dst_md.get_size());
      state.staging_bytes += impl->primitive_dst_md.get_size();
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
};

LinearPlan::LinearPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

size_t LinearPlan::weights_bytes() const {
  return impl_->weights.md.get_size() + (impl_->has_bias ? impl_->bias.md.get_size() : 0);
}
size_t LinearPlan::scratchpad_bytes() const {
  return impl_->scratchpad_md.get_size();
}
std::string LinearPlan::implementation() const {
  return impl_->implementation;
}

void LinearPlan::run(const float* input, float* output, const float* residual) const {
  const Impl& p = *impl_;
  ProviderState& state = *p.state;
  if (p.has_add && residual == nullptr) {
    throw ProviderError("linear plan: post-op add needs a residual tensor, got null");
  }
  ThreadCountGuard threads(state.num_threads);
  if (p.has_add && residual != output) {
    std::memcpy(output, residual, p.dst_md.get_size());
  }
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, memory(p.src_md, state.engine, const_cast<float*>(input))},
      {DNNL_ARG_WEIGHTS, p.weights.as_memory(state.engine)},
      {DNNL_ARG_DST, memory(p.dst_md, state.engine, output)}};
  if (p.has_bias) {
    args.emplace(DNNL_ARG_BIAS, p.bias.as_memory(state.engine));
  }
  execute(state, p.primitive, p.scratchpad_md, std::move(args));
}

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
  ThreadCountGuard threads(state.num_threads);
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
    dnnl::matmul::desc desc(impl->src_md, any_md({k, n}), bias_md, impl->dst_md);
    dnnl::matmul::primitive_desc pd(desc, make_attr(post_ops), state.engine);
    impl->primitive = dnnl::matmul(pd);
    impl->implementation = pd.impl_info_str();
    impl->scratchpad_md = pd.scratchpad_desc();
    state.reserve_scratchpad(impl->scratchpad_md);
    impl->weights = reorder_constant(state, user_weight_md, weight, pd.weights_desc());
    if (bias) {
      impl->has_bias = true;
      impl->bias = reorder_constant(state, plain_md({1, n}), bias, pd.bias_desc());
    }
    impl->has_add = has_add(post_ops);
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
};

MatmulPlan::MatmulPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

size_t MatmulPlan::scratchpad_bytes() const {
  return impl_->scratchpad_md.get_size();
}
std::string MatmulPlan::implementation() const {
  return impl_->implementation;
}

void MatmulPlan::run(const float* a, const float* b, float* output, const float* residual) const {
  const Impl& p = *impl_;
  ProviderState& state = *p.state;
  if (p.has_add && residual == nullptr) {
    throw ProviderError("matmul plan: post-op add needs a residual tensor, got null");
  }
  ThreadCountGuard threads(state.num_threads);
  if (p.has_add && residual != output) {
    std::memcpy(output, residual, p.dst_md.get_size());
  }
  execute(
      state,
      p.primitive,
      p.scratchpad_md,
      {{DNNL_ARG_SRC, memory(p.a_md, state.engine, const_cast<float*>(a))},
       {DNNL_ARG_WEIGHTS, memory(p.b_md, state.engine, const_cast<float*>(b))},
       {DNNL_ARG_DST, memory(p.dst_md, state.engine, output)}});
}

MatmulPlan Provider::prepare_matmul(const MatmulParams& params, const PostOps& post_ops) {
  const Support support = supports_matmul(params, post_ops);
  if (!support.ok) {
    throw ProviderError("prepare_matmul: " + support.reason);
  }
  ProviderState& state = *state_;
  ThreadCountGuard threads(state.num_threads);
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
    dnnl::matmul::desc desc(impl->a_md, impl->b_md, impl->dst_md);
    dnnl::matmul::primitive_desc pd(desc, make_attr(post_ops), state.engine);
    impl->primitive = dnnl::matmul(pd);
    impl->implementation = pd.impl_info_str();
    impl->scratchpad_md = pd.scratchpad_desc();
    state.reserve_scratchpad(impl->scratchpad_md);
    impl->has_add = has_add(post_ops);
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
};

ReorderPlan::ReorderPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

void ReorderPlan::run(const float* input, float* output) const {
  const Impl& p = *impl_;
  ProviderState& state = *p.state;
  ThreadCountGuard threads(state.num_threads);
  memory src(p.from, state.engine, const_cast<float*>(input));
  memory dst(p.to, state.engine, output);
  wrap_dnnl("reorder", [&] {
    p.primitive.execute(state.stream, src, dst);
    state.stream.wait();
  });
}

ReorderPlan Provider::prepare_reorder(const Layout& from, const Layout& to) {
  if (from.dims() != to.dims()) {
    throw ProviderError(
        "prepare_reorder: dims differ: from " + dims_to_string(from.dims()) + " to " +
        dims_to_string(to.dims()));
  }
  ThreadCountGuard threads(state_->num_threads);
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
};

PoolPlan::PoolPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

std::string PoolPlan::implementation() const {
  return impl_->implementation;
}

void PoolPlan::run(const float* input, float* output) const {
  const Impl& p = *impl_;
  ProviderState& state = *p.state;
  ThreadCountGuard threads(state.num_threads);
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, memory(p.src, state.engine, const_cast<float*>(input))},
      {DNNL_ARG_DST, memory(p.dst, state.engine, output)}};
  execute(state, p.primitive, p.scratchpad_md, std::move(args));
}

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
  ProviderState& state = *state_;
  ThreadCountGuard threads(state.num_threads);
  return wrap_dnnl("prepare_max_pool", [&] {
    auto impl = std::make_shared<PoolPlan::Impl>();
    impl->state = state_;
    impl->src = input.impl().md;
    impl->dst = output.impl().md;
    dnnl::pooling_forward::desc desc(
        dnnl::prop_kind::forward_inference,
        dnnl::algorithm::pooling_max,
        impl->src,
        impl->dst,
        Dims(params.stride.begin(), params.stride.end()),
        Dims(params.kernel_size.begin(), params.kernel_size.end()),
        Dims(params.padding.begin(), params.padding.end()),
        right);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::pooling_forward::primitive_desc pd(desc, attr, state.engine);
    impl->primitive = dnnl::pooling_forward(pd);
    impl->implementation = pd.impl_info_str();
    impl->scratchpad_md = pd.scratchpad_desc();
    state.reserve_scratchpad(impl->scratchpad_md);
    return PoolPlan(std::move(impl));
  });
}

// ---------------------------------------------------------------------------------------------
// Provider

Provider::Provider(ProviderOptions options) : state_(std::make_shared<ProviderState>()) {
  state_->num_threads = options.num_threads > 0 ? options.num_threads : default_thread_count();
}

Provider::~Provider() = default;

int Provider::num_threads() const {
  return state_->num_threads;
}
size_t Provider::weights_bytes() const {
  return state_->weights_bytes;
}
size_t Provider::scratchpad_bytes() const {
  return state_->scratchpad.size();
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
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
