// Binary plans (BinaryPlan): add, sub, mul, div with numpy broadcasting on oneDNN's binary
// primitive, on the operands' own layouts (plain or channels-last).
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_internal.h"

#include <optional>

#include "backends/cpu/runtime/providers/optimized/kernels/channel_binary.h"

namespace et_cpu_plugin {
namespace onednn {

namespace {

// What one element of a binary op costs in the FLOPs of ProviderOptions::min_task_flops: like a
// reorder (layout.cc), it is memory-bound (two reads, one write per element).
constexpr double kBinaryFlopsPerElement = 40;

const char* op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "add";
    case BinaryOp::kSub:
      return "sub";
    case BinaryOp::kMul:
      return "mul";
    case BinaryOp::kDiv:
      return "div";
  }
  return "binary";
}

dnnl::algorithm algorithm_of(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return dnnl::algorithm::binary_add;
    case BinaryOp::kSub:
      return dnnl::algorithm::binary_sub;
    case BinaryOp::kMul:
      return dnnl::algorithm::binary_mul;
    case BinaryOp::kDiv:
      return dnnl::algorithm::binary_div;
  }
  return dnnl::algorithm::binary_add;
}

// Whether `a` and `b` (same dims) put every element at the same offset: the strides of the
// dims larger than 1 agree (e.g. a plain and a channels-last {N, C, 1, 1}).
bool same_bytes(const memory::desc& a, const memory::desc& b) {
  const Dims dims = a.get_dims();
  if (dims != b.get_dims()) return false;
  const Dims sa = a.get_strides();
  const Dims sb = b.get_strides();
  if (sa.size() != dims.size() || sb.size() != dims.size()) return false;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] > 1 && sa[i] != sb[i]) return false;
  }
  return true;
}

// The op as a ChannelBinary when it is one: the output-sized operand `full` already in the
// output's plain or channels-last layout, the other {N or 1, C, 1, ...} (the same bytes in any
// layout), rank 3 to 5.
std::optional<ChannelBinary> as_channel_binary(BinaryOp op, const Layout& full,
                                               const Layout& vector, const Layout& output,
                                               bool vector_first) {
  const std::vector<int64_t>& dims = output.dims();
  const std::vector<int64_t>& v = vector.dims();
  if (!channel_binary_enabled() || dims.size() < 3 || dims.size() > 5 || full != output ||
      !(output.is_plain() || output.is_channels_last()) ||
      !(vector.is_plain() || vector.is_channels_last())) {
    return std::nullopt;
  }
  if ((v[0] != dims[0] && v[0] != 1) || v[1] != dims[1]) return std::nullopt;
  for (size_t i = 2; i < v.size(); ++i) {
    if (v[i] != 1) return std::nullopt;
  }
  ChannelBinary channel;
  channel.op = op;
  channel.vector_first = vector_first;
  channel.channels_last = output.is_channels_last();
  channel.shared_vector = v[0] == 1 && dims[0] > 1;
  channel.images = dims[0];
  channel.channels = dims[1];
  channel.pixels = static_cast<int64_t>(product(dims, 2));
  return channel;
}

// The op as a ChannelBinary over flat rows when every element is independent of the layout:
// both operands in the output's dense layout (same bytes), or the other operand one value.
// Small ops (a decoder's 128-float residual adds) then skip oneDNN's ~1 us fixed cost per call.
std::optional<ChannelBinary> as_flat_binary(BinaryOp op, const Layout& full, const Layout& other,
                                            const Layout& output, bool other_first) {
  if (!channel_binary_enabled() || full != output ||
      !(output.is_plain() || output.is_channels_last())) {
    return std::nullopt;
  }
  const bool scalar = product(other.dims()) == 1;
  if (!scalar && other != output) return std::nullopt;
  // Rows of at most 2048 floats where the count halves evenly, so the pool can share them out.
  int64_t width = static_cast<int64_t>(product(output.dims()));
  int64_t rows = 1;
  while (width > 2048 && width % 2 == 0) {
    width /= 2;
    rows *= 2;
  }
  ChannelBinary flat;
  flat.op = op;
  flat.vector_first = other_first;
  if (scalar) {  // plain rows of `width` pixels, one channel whose value every row shares
    flat.channels_last = false;
    flat.shared_vector = true;
    flat.images = rows;
    flat.channels = 1;
    flat.pixels = width;
  } else {  // channels-last images of one pixel: row r reads the same floats of both operands
    flat.channels_last = true;
    flat.images = rows;
    flat.channels = width;
    flat.pixels = 1;
  }
  return flat;
}

// The op as a ChannelBinary over the rows of a plain output when the other operand, plain, is
// one block repeated along the leading dims ([1, ..., 1, d_j, ..., d_last]: RMSNorm's scale,
// rotary embeddings' cos/sin against every head) or one value per block of trailing dims
// ([d_0, ..., d_j-1, 1, ..., 1]: RMSNorm's rsqrt): a transformer's broadcasts, which oneDNN
// runs on jit:uni binary, a kernel generated per shape (at every new sequence length) and ~1 us
// fixed cost per call.
std::optional<ChannelBinary> as_row_binary(BinaryOp op, const Layout& full, const Layout& other,
                                           const Layout& output, bool other_first) {
  const std::vector<int64_t>& dims = output.dims();
  const std::vector<int64_t>& v = other.dims();
  if (!channel_binary_enabled() || dims.size() < 2 || v.size() != dims.size() ||
      full != output || !output.is_plain() || !other.is_plain()) {
    return std::nullopt;
  }
  const size_t rank = dims.size();
  // Repeated block: leading ones, then the output's dims from `lead` on.
  size_t lead = 0;
  while (lead < rank && v[lead] == 1) ++lead;
  bool repeated = lead > 0 && lead < rank;
  for (size_t i = lead; i < rank && repeated; ++i) repeated = v[i] == dims[i];
  // One value per block: the output's dims up to `tail`, then ones.
  size_t tail = rank;
  while (tail > 0 && v[tail - 1] == 1) --tail;
  bool per_block = tail > 0 && tail < rank;
  for (size_t i = 0; i < tail && per_block; ++i) per_block = v[i] == dims[i];
  if (repeated == per_block) return std::nullopt;  // neither, or ambiguous (all ones: flat)
  const size_t split = repeated ? lead : tail;
  const int64_t width = static_cast<int64_t>(product(dims, split));
  const int64_t count = static_cast<int64_t>(product(dims)) / width;
  ChannelBinary rows;
  rows.op = op;
  rows.vector_first = other_first;
  rows.images = 1;
  if (repeated) {  // `count` rows of `width` channels that share the block
    rows.channels_last = true;
    rows.channels = width;
    rows.pixels = count;
  } else {  // `count` rows of `width` pixels, one channel (and value) each
    rows.channels_last = false;
    rows.channels = count;
    rows.pixels = width;
  }
  return rows;
}

}  // namespace

Support supports_binary(BinaryOp op, const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                        const std::vector<int64_t>& out) {
  const std::string what = op_name(op);
  const size_t rank = out.size();
  if (rank < 1 || rank > 6 || a.size() != rank || b.size() != rank) {
    return Support::no(what + ": operands and output must have one rank, 1 to 6 (got " +
                       dims_to_string(a) + ", " + dims_to_string(b) + " -> " +
                       dims_to_string(out) + ")");
  }
  for (size_t i = 0; i < rank; ++i) {
    if (out[i] < 1) return Support::no(what + ": empty tensors are not supported");
    if ((a[i] != out[i] && a[i] != 1) || (b[i] != out[i] && b[i] != 1) ||
        out[i] != std::max(a[i], b[i])) {
      return Support::no(what + ": " + dims_to_string(a) + " and " + dims_to_string(b) +
                         " do not broadcast to " + dims_to_string(out));
    }
  }
  // oneDNN broadcasts only its second source: the first must have the output's dims.
  if (a != out && b != out) {
    return Support::no(what + ": both operands are broadcast (oneDNN broadcasts only one)");
  }
  if (a != out && op == BinaryOp::kDiv) {
    return Support::no("div: the dividend is broadcast (oneDNN broadcasts only the divisor)");
  }
  return Support::yes();
}

struct BinaryPlan::Impl {
  struct Part {
    dnnl::binary primitive;
    memory::desc src0;
    memory::desc src1;
    memory::desc dst;
    memory::desc scratchpad;
    size_t src0_offset = 0;  // floats from the start of the (staged) operand / output
    size_t src1_offset = 0;
    size_t dst_offset = 0;
    mutable std::unordered_map<int, memory> args;  // made on the first run
  };
  // An operand converted into the output's layout before the op (a full-size operand whose
  // producer left it in the other layout).
  struct Staging {
    dnnl::reorder reorder;
    memory::desc from;
    memory::desc to;
    std::shared_ptr<AlignedBuffer> buffer;
    mutable std::unordered_map<int, memory> args;
    // Large conversions: bands of the first spatial dim on the pool (split_reorder), else none.
    std::vector<dnnl::reorder> bands;
    mutable std::vector<std::unordered_map<int, memory>> band_args;
  };

  std::shared_ptr<ProviderState> state;
  bool swapped = false;  // src0 is run()'s b (the output-sized one), src1 its a
  std::unique_ptr<Staging> stage0;
  std::unique_ptr<Staging> stage1;
  std::vector<Part> parts;  // one: run whole on the calling thread; more: on the pool
  // An activation with a per-channel vector, or a layout-independent op (as_flat_binary): our
  // kernel instead (channel_binary.h), its rows in `channel_tasks` slices.
  std::optional<ChannelBinary> channel;
  size_t channel_tasks = 1;
  std::string implementation;
};

BinaryPlan::BinaryPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

std::string BinaryPlan::implementation() const {
  return impl_->implementation;
}

size_t BinaryPlan::pieces() const {
  return impl_->channel ? impl_->channel_tasks : impl_->parts.size();
}

void BinaryPlan::run(const float* a, const float* b, float* output) const {
  const Impl& p = *impl_;
  ProviderState& state = *p.state;
  ThreadCountGuard threads(state.omp_threads);
  const float* src0 = p.swapped ? b : a;
  const float* src1 = p.swapped ? a : b;
  if (p.channel) {
    const ChannelBinary& channel = *p.channel;
    run_in_slices(state.pool.get(), p.channel_tasks, channel.rows(),
                  [&](int64_t first, int64_t last, int) {
                    channel.run(src0, src1, output, first, last);
                  });
    return;
  }
  auto stage = [&](const Impl::Staging* staging, const float** src) {
    if (staging == nullptr) return;
    float* to = static_cast<float*>(staging->buffer->data());
    if (!staging->bands.empty()) {
      state.pool->run(staging->bands.size(), [&](size_t index, int worker) {
        const size_t w = static_cast<size_t>(worker);
        wrap_dnnl("binary staging reorder band", [&] {
          std::unordered_map<int, memory>& args = staging->band_args[index];
          staging->bands[index].execute(
              state.piece_streams[w], point(args, DNNL_ARG_FROM, staging->from, state.engine, *src),
              point(args, DNNL_ARG_TO, staging->to, state.engine, to));
          state.piece_streams[w].wait();
        });
      });
      *src = to;
      return;
    }
    wrap_dnnl("binary staging reorder", [&] {
      staging->reorder.execute(
          state.stream, point(staging->args, DNNL_ARG_FROM, staging->from, state.engine, *src),
          point(staging->args, DNNL_ARG_TO, staging->to, state.engine, to));
      state.stream.wait();
    });
    *src = to;
  };
  stage(p.stage0.get(), &src0);
  stage(p.stage1.get(), &src1);
  auto run_part = [&](const Impl::Part& part, int worker) {
    point(part.args, DNNL_ARG_SRC_1, part.src1, state.engine, src1 + part.src1_offset);
    PieceData data;
    data.src = src0 + part.src0_offset;
    data.dst = output + part.dst_offset;
    execute_on_worker(state, part.primitive, part.args, part.src0, part.dst, part.scratchpad,
                      worker, data);
  };
  if (p.parts.size() == 1) {
    wrap_dnnl("binary", [&] {
      point(p.parts[0].args, DNNL_ARG_SRC_1, p.parts[0].src1, state.engine, src1);
      PieceData data;
      data.src = src0;
      data.dst = output;
      execute_whole(state, p.parts[0].primitive, p.parts[0].args, p.parts[0].src0,
                    p.parts[0].dst, p.parts[0].scratchpad, data);
    });
    return;
  }
  state.pool->run(p.parts.size(), [&](size_t index, int worker) {
    wrap_dnnl("binary piece", [&] { run_part(p.parts[index], worker); });
  });
}

BinaryPlan Provider::prepare_binary(BinaryOp op, const Layout& a, const Layout& b,
                                    const Layout& output) {
  const Support support = supports_binary(op, a.dims(), b.dims(), output.dims());
  if (!support.ok) {
    throw ProviderError("prepare_binary: " + support.reason);
  }
  ProviderState& state = *state_;
  ThreadCountGuard threads(state.omp_threads);
  return wrap_dnnl("prepare_binary", [&] {
    auto impl = std::make_shared<BinaryPlan::Impl>();
    impl->state = state_;
    // oneDNN broadcasts src1 only: the output-sized operand goes first. a - b with a broadcast
    // runs as -(b - a) (negation is exact).
    impl->swapped = a.dims() != output.dims();
    const Layout& first = impl->swapped ? b : a;
    const Layout& second = impl->swapped ? a : b;
    impl->channel = as_channel_binary(op, first, second, output, impl->swapped);
    std::string kernel = "channel_binary:avx512";
    if (!impl->channel) {
      impl->channel = as_flat_binary(op, first, second, output, impl->swapped);
      kernel = "flat_binary:avx512";
    }
    if (!impl->channel) {
      impl->channel = as_row_binary(op, first, second, output, impl->swapped);
      kernel = "row_binary:avx512";
    }
    if (impl->channel) {
      impl->channel_tasks =
          state.pieces_for(product(output.dims()) * kBinaryFlopsPerElement, impl->channel->rows());
      impl->implementation = kernel + pieces_note(impl->channel_tasks);
      return BinaryPlan(std::move(impl));
    }
    const memory::desc dst = output.impl().md;
    const bool dst_channels_last = output.is_channels_last();
    // An operand in the output's format (itself, its bytes read that way, or staged into it).
    auto in_dst_format = [&](const Layout& operand,
                             std::unique_ptr<BinaryPlan::Impl::Staging>* staging) {
      const memory::desc& given = operand.impl().md;
      const Dims dims(operand.dims().begin(), operand.dims().end());
      const memory::desc wanted = dst_channels_last ? channels_last_md(dims) : plain_md(dims);
      if (given == wanted) return given;
      if (same_bytes(given, wanted)) return wanted;
      if (operand.dims() != output.dims()) return given;  // oneDNN reads it as it is
      auto stage = std::make_unique<BinaryPlan::Impl::Staging>();
      stage->from = given;
      stage->to = wanted;
      stage->reorder = dnnl::reorder(
          dnnl::reorder::primitive_desc(state.engine, given, state.engine, wanted));
      stage->bands = split_reorder(state, given, wanted);
      stage->band_args.resize(stage->bands.size());
      stage->buffer = std::make_shared<AlignedBuffer>();
      stage->buffer->reserve(wanted.get_size());
      state.staging_bytes += wanted.get_size();
      *staging = std::move(stage);
      return wanted;
    };
    const memory::desc src0 = (output.is_plain() || dst_channels_last)
                                  ? in_dst_format(first, &impl->stage0)
                                  : first.impl().md;
    const memory::desc src1 = (output.is_plain() || dst_channels_last)
                                  ? in_dst_format(second, &impl->stage1)
                                  : second.impl().md;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (impl->swapped && op == BinaryOp::kSub) {
      dnnl::post_ops negate;
      negate.append_eltwise(dnnl::algorithm::eltwise_linear, -1.0f, 0.0f);
      attr.set_post_ops(negate);
    }
    const dnnl::algorithm algorithm = algorithm_of(op);
    const auto pd_of = [&](const memory::desc& s0, const memory::desc& s1,
                           const memory::desc& d) {
      return dnnl::binary::primitive_desc(state.engine, algorithm, s0, s1, d, attr);
    };
    const auto make_part = [&](const dnnl::binary::primitive_desc& pd, const memory::desc& s0,
                               const memory::desc& s1, const memory::desc& d) {
      BinaryPlan::Impl::Part part;
      part.primitive = dnnl::binary(pd);
      part.src0 = s0;
      part.src1 = s1;
      part.dst = d;
      part.scratchpad = pd.scratchpad_desc();
      return part;
    };
    const dnnl::binary::primitive_desc whole = pd_of(src0, src1, dst);
    impl->implementation = whole.impl_info_str();
    // Slices along the output's outermost dim in memory, when every operand has it outermost
    // too (or broadcasts it): each piece is then a dense slice of every operand.
    const OuterSlices slices = outer_slices(state, dst, {src0, src1}, -1, kBinaryFlopsPerElement);
    impl->parts = split_parts(
        state, slices.count, [&] { return make_part(whole, src0, src1, dst); },
        &impl->implementation, [&](size_t i) {
      size_t o0 = 0, o1 = 0, od = 0;
      const memory::desc s0 = slices.slice(src0, i, &o0);
      const memory::desc s1 = slices.slice(src1, i, &o1);
      const memory::desc d = slices.slice(dst, i, &od);
      auto part = make_part(pd_of(s0, s1, d), s0, s1, d);
      part.src0_offset = o0;
      part.src1_offset = o1;
      part.dst_offset = od;
      return part;
    });
    return BinaryPlan(std::move(impl));
  });
}

}  // namespace onednn
}  // namespace et_cpu_plugin
