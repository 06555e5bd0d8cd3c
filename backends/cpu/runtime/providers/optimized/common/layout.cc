// Activation layouts (Layout), memory descriptors and reorders: ReorderPlan, weights, bands.
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_internal.h"

#include <sstream>

namespace et_cpu_plugin {
namespace onednn {

namespace {

Dims row_major_strides(const Dims& dims) {
  Dims strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) {
    strides[i - 1] = strides[i] * std::max<int64_t>(dims[i], 1);
  }
  return strides;
}

}  // namespace

std::string dims_to_string(const std::vector<int64_t>& dims) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    out << (i ? ", " : "") << dims[i];
  }
  out << "]";
  return out.str();
}

double product(const std::vector<int64_t>& values, size_t from) {
  double result = 1;
  for (size_t i = from; i < values.size(); ++i) result *= static_cast<double>(values[i]);
  return result;
}

memory::desc plain_md(const Dims& dims) {
  return memory::desc(dims, memory::data_type::f32, row_major_strides(dims));
}

memory::desc any_md(const Dims& dims) {
  return memory::desc(dims, memory::data_type::f32, memory::format_tag::any);
}

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

// ---------------------------------------------------------------------------------------------
// Layout

Layout::Layout(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

Layout Layout::plain(const std::vector<int64_t>& dims) {
  return Layout(std::make_shared<const Impl>(Impl{plain_md(dims), dims}));
}

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

Layout layout_of(const memory::desc& md) {
  const Dims dims = md.get_dims();
  return Layout(std::make_shared<const Layout::Impl>(Layout::Impl{md, dims}));
}

// ---------------------------------------------------------------------------------------------
// Reorders

OwnedTensor reorder_constant(
    ProviderState& state, const memory::desc& from, const float* data, const memory::desc& to) {
  state.weights_bytes += to.get_size();  // what this Provider's plans hold, shared or not
  return cached_constant(state.weight_cache.get(), from, data, to, [&] {
    OwnedTensor owned{to, std::make_shared<AlignedBuffer>()};
    owned.bytes->reserve_weights(to.get_size());
    memory src(from, state.engine, const_cast<float*>(data));
    memory dst(to, state.engine, owned.bytes->data());
    dnnl::reorder(src, dst).execute(state.stream, src, dst);
    state.stream.wait();
    return owned;
  });
}

namespace {

// What converting one element between layouts costs, in FLOPs of a convolution on one core
// (measured here: the stem's 1x3x224x224 NCHW -> NHWC reorder, 0.6 ns per element, against
// ~65 GFLOP/s), so a reorder splits by the same ET_CPU_ONEDNN_TASK_FLOPS rule as the ops.
constexpr double kReorderFlopsPerElement = 40;

}  // namespace

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

FormatBridge bridge_formats(Provider& provider, ProviderState& state, const Layout& input,
                            const Layout& output, bool channels_last) {
  const auto in_format = [&](const Layout& layout) {
    if (layout.is_channels_last() == channels_last) return layout;
    return channels_last ? Layout::channels_last(layout.dims()) : Layout::plain(layout.dims());
  };
  const Layout source = in_format(input);
  const Layout target = in_format(output);
  FormatBridge bridge;
  bridge.source_md = source.impl().md;
  bridge.target_md = target.impl().md;
  if (source != input) {
    bridge.to_source = provider.prepare_reorder(input, source);
    bridge.source.reserve(source.size_bytes());
    state.staging_bytes += source.size_bytes();
    bridge.before = "reorder " + input.describe() + " -> " + source.describe() + " + ";
  }
  if (target != output) {
    bridge.to_output = provider.prepare_reorder(target, output);
    bridge.target.reserve(target.size_bytes());
    state.staging_bytes += target.size_bytes();
    bridge.after = " + reorder " + target.describe() + " -> " + output.describe();
  }
  return bridge;
}

void FormatBridge::run(const WholeOp& op, const float* input, float* output) const {
  const float* from = input;
  if (to_source) {
    to_source->run(input, static_cast<float*>(source.data()));
    from = static_cast<const float*>(source.data());
  }
  float* to = to_output ? static_cast<float*>(target.data()) : output;
  op.run(from, to);
  if (to_output) to_output->run(to, output);
}

}  // namespace onednn
}  // namespace et_cpu_plugin
