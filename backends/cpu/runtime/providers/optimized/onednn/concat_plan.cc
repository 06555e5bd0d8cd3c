// Concatenation plans (ConcatPlan): torch.cat on oneDNN's concat primitive, on the inputs' and
// output's own layouts (channels-last inputs along channels -> a channels-last output).
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_internal.h"

namespace et_cpu_plugin {
namespace onednn {

namespace {

// What one copied element costs in the FLOPs of ProviderOptions::min_task_flops (a copy, like a
// reorder in layout.cc).
constexpr double kConcatFlopsPerElement = 40;

// Whether two plain / channels-last descriptors of the same dims lay the elements out alike:
// equal strides along every dim larger than 1 (the class token [1, 1, C] is both abc and acb).
bool same_bytes(const memory::desc& a, const memory::desc& b) {
  if (a.get_dims() != b.get_dims() || a.get_format_kind() != dnnl::memory::format_kind::blocked ||
      b.get_format_kind() != dnnl::memory::format_kind::blocked || a.get_inner_nblks() != 0 ||
      b.get_inner_nblks() != 0) {
    return false;
  }
  const Dims dims = a.get_dims();
  const Dims sa = a.get_strides();
  const Dims sb = b.get_strides();
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] > 1 && sa[i] != sb[i]) return false;
  }
  return true;
}

// `input` in the output's format (plain or channels-last) of its own dims.
Layout in_format_of(const Layout& input, const Layout& output) {
  return output.is_channels_last() ? Layout::channels_last(input.dims())
                                   : Layout::plain(input.dims());
}

}  // namespace

Support supports_concat(const std::vector<std::vector<int64_t>>& inputs, int64_t axis,
                        const std::vector<int64_t>& output) {
  const size_t rank = output.size();
  if (inputs.empty() || rank < 1 || rank > 6 || axis < 0 || axis >= static_cast<int64_t>(rank)) {
    return Support::no("cat: 1 or more inputs of rank 1 to 6 and a dim inside it");
  }
  int64_t total = 0;
  for (const std::vector<int64_t>& dims : inputs) {
    if (dims.size() != rank) {
      return Support::no("cat: inputs of another rank than the output (" + dims_to_string(dims) +
                         ")");
    }
    for (size_t i = 0; i < rank; ++i) {
      if (dims[i] < 1) return Support::no("cat: empty inputs are not supported");
      if (static_cast<int64_t>(i) != axis && dims[i] != output[i]) {
        return Support::no("cat: input " + dims_to_string(dims) + " does not fit output " +
                           dims_to_string(output) + " outside dim " + std::to_string(axis));
      }
    }
    total += dims[static_cast<size_t>(axis)];
  }
  if (total != output[static_cast<size_t>(axis)]) {
    return Support::no("cat: the inputs' sizes along dim " + std::to_string(axis) +
                       " do not add up to the output's");
  }
  return Support::yes();
}

struct ConcatPlan::Impl {
  struct Part {
    dnnl::concat primitive;
    std::vector<memory::desc> srcs;
    std::vector<size_t> src_offsets;  // floats from each input's start
    memory::desc dst;
    size_t dst_offset = 0;
    memory::desc scratchpad;
    mutable std::unordered_map<int, memory> args;  // made on the first run
  };
  // An input in another format than the output's, copied into its slice of the output.
  struct SliceCopy {
    dnnl::reorder primitive;
    memory::desc src;
    memory::desc dst;  // the input's slice of the output along the axis
    size_t dst_offset = 0;
    mutable std::unordered_map<int, memory> args;  // made on the first run
  };
  std::shared_ptr<ProviderState> state;
  std::vector<Part> parts;  // one: whole on the calling thread; more: on the pool
  // Mixed formats (oneDNN's concat would run ref:any): each input reordered into its slice of
  // the output instead, on the calling thread; `parts` is then empty.
  std::vector<SliceCopy> copies;
  std::string implementation;
};

ConcatPlan::ConcatPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

std::string ConcatPlan::implementation() const {
  return impl_->implementation;
}

size_t ConcatPlan::pieces() const {
  return std::max<size_t>(1, impl_->parts.size());
}

void ConcatPlan::run(const std::vector<const float*>& inputs, float* output) const {
  const Impl& p = *impl_;
  ProviderState& state = *p.state;
  ThreadCountGuard threads(state.omp_threads);
  auto run_part = [&](const Impl::Part& part, dnnl::stream& stream, void* scratchpad) {
    for (size_t i = 0; i < part.srcs.size(); ++i) {
      point(part.args, DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), part.srcs[i], state.engine,
            inputs[i] + part.src_offsets[i]);
    }
    point(part.args, DNNL_ARG_DST, part.dst, state.engine, output + part.dst_offset);
    point(part.args, DNNL_ARG_SCRATCHPAD, part.scratchpad, state.engine, scratchpad);
    part.primitive.execute(stream, part.args);
    stream.wait();
  };
  const size_t planned = p.parts.empty() ? p.copies.size() : p.parts[0].srcs.size();
  if (inputs.size() != planned) {
    throw ProviderError("ConcatPlan::run: " + std::to_string(inputs.size()) + " inputs, planned " +
                        std::to_string(planned));
  }
  if (!p.copies.empty()) {
    wrap_dnnl("concat copy", [&] {
      for (size_t i = 0; i < p.copies.size(); ++i) {
        const Impl::SliceCopy& copy = p.copies[i];
        copy.primitive.execute(
            state.stream,
            point(copy.args, DNNL_ARG_FROM, copy.src, state.engine, inputs[i]),
            point(copy.args, DNNL_ARG_TO, copy.dst, state.engine, output + copy.dst_offset));
      }
      state.stream.wait();
    });
    return;
  }
  if (p.parts.size() == 1) {
    wrap_dnnl("concat", [&] { run_part(p.parts[0], state.stream, state.scratchpad.data()); });
    return;
  }
  state.pool->run(p.parts.size(), [&](size_t index, int worker) {
    const size_t w = static_cast<size_t>(worker);
    wrap_dnnl("concat piece", [&] {
      run_part(p.parts[index], state.piece_streams[w], state.piece_scratchpads[w].data());
    });
  });
}

ConcatPlan Provider::prepare_concat(const std::vector<Layout>& inputs, int64_t axis,
                                    const Layout& output) {
  std::vector<std::vector<int64_t>> dims;
  for (const Layout& input : inputs) dims.push_back(input.dims());
  const Support support = supports_concat(dims, axis, output.dims());
  if (!support.ok) {
    throw ProviderError("prepare_concat: " + support.reason);
  }
  ProviderState& state = *state_;
  ThreadCountGuard threads(state.omp_threads);
  return wrap_dnnl("prepare_concat", [&] {
    auto impl = std::make_shared<ConcatPlan::Impl>();
    impl->state = state_;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const auto pd_of = [&](const std::vector<memory::desc>& srcs, const memory::desc& dst) {
      return dnnl::concat::primitive_desc(state.engine, dst, static_cast<int>(axis), srcs, attr);
    };
    const auto make_part = [&](const dnnl::concat::primitive_desc& pd,
                               const std::vector<memory::desc>& srcs, const memory::desc& dst) {
      ConcatPlan::Impl::Part part;
      part.primitive = dnnl::concat(pd);
      part.srcs = srcs;
      part.src_offsets.assign(srcs.size(), 0);
      part.dst = dst;
      part.scratchpad = pd.scratchpad_desc();
      return part;
    };
    // An input whose bytes are the same in the output's format is described so; with another
    // input still in the other format oneDNN's concat runs ref:any (ViT's class token beside
    // the channels-last patches), so then every input is reordered into its slice instead.
    std::vector<memory::desc> srcs;
    bool mixed = false;
    for (const Layout& input : inputs) {
      const memory::desc as_output = in_format_of(input, output).impl().md;
      const bool same = same_bytes(input.impl().md, as_output);
      srcs.push_back(same ? as_output : input.impl().md);
      mixed = mixed || !same;
    }
    const memory::desc dst = output.impl().md;
    if (mixed && (output.is_plain() || output.is_channels_last())) {
      int64_t begin = 0;
      for (const memory::desc& src : srcs) {
        const int64_t end = begin + src.get_dims()[static_cast<size_t>(axis)];
        ConcatPlan::Impl::SliceCopy copy;
        copy.src = src;
        copy.dst = slice_dim(dst, static_cast<int>(axis), begin, end, &copy.dst_offset);
        const dnnl::reorder::primitive_desc pd(state.engine, copy.src, state.engine, copy.dst);
        copy.primitive = dnnl::reorder(pd);
        impl->implementation += (begin == 0 ? "" : " + ") + std::string(pd.impl_info_str());
        impl->copies.push_back(std::move(copy));
        begin = end;
      }
      impl->implementation = "reorders into slices: " + impl->implementation;
      return ConcatPlan(std::move(impl));
    }
    const dnnl::concat::primitive_desc whole = pd_of(srcs, dst);
    impl->implementation = whole.impl_info_str();
    // Slices along a dim other than the concatenated one that is outermost in memory in the
    // output and every input (rows of channels-last images): each piece is a dense slice.
    const OuterSlices slices =
        outer_slices(state, dst, srcs, static_cast<int>(axis), kConcatFlopsPerElement);
    impl->parts = split_parts(
        state, slices.count, [&] { return make_part(whole, srcs, dst); }, &impl->implementation,
        [&](size_t i) {
      std::vector<memory::desc> piece_srcs;
      std::vector<size_t> offsets(srcs.size(), 0);
      for (size_t s = 0; s < srcs.size(); ++s) {
        piece_srcs.push_back(slices.slice(srcs[s], i, &offsets[s]));
      }
      size_t dst_offset = 0;
      const memory::desc piece_dst = slices.slice(dst, i, &dst_offset);
      auto part = make_part(pd_of(piece_srcs, piece_dst), piece_srcs, piece_dst);
      part.src_offsets = offsets;
      part.dst_offset = dst_offset;
      return part;
    });
    return ConcatPlan(std::move(impl));
  });
}

}  // namespace onednn
}  // namespace et_cpu_plugin
