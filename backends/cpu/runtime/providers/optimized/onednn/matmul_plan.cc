// mm / bmm plans (MatmulPlan) on oneDNN's matmul, split into batches or row bands.
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_internal.h"

#include <algorithm>
#include <cstring>

namespace et_cpu_plugin {
namespace onednn {

Support supports_matmul(const MatmulParams& p, const PostOps& post_ops) {
  if (p.batch < 1 || p.m < 1 || p.k < 1 || p.n < 1) {
    return Support::no(
        "matmul: batch " + std::to_string(p.batch) + ", m " + std::to_string(p.m) + ", k " +
        std::to_string(p.k) + ", n " + std::to_string(p.n) + " must be positive");
  }
  const size_t rank = p.batch > 1 ? 3 : 2;
  for (const std::vector<int64_t>* strides : {&p.a_strides, &p.b_strides}) {
    if (!strides->empty() &&
        (strides->size() != rank ||
         std::any_of(strides->begin(), strides->end(), [](int64_t s) { return s < 1; }))) {
      return Support::no("matmul: operand strides must be " + std::to_string(rank) +
                         " positive values");
    }
  }
  return check_post_ops(post_ops);
}

namespace {

// `dims` laid out with `strides` (elements), or plain when `strides` is empty.
memory::desc strided_md(const Dims& dims, const std::vector<int64_t>& strides) {
  if (strides.empty()) return plain_md(dims);
  return memory::desc(dims, memory::data_type::f32, Dims(strides.begin(), strides.end()));
}

// The element offset of row (or batch) `index` along dim `dim` of an operand.
size_t offset_of(const std::vector<int64_t>& strides, size_t dim, int64_t index,
                 int64_t contiguous_stride) {
  return static_cast<size_t>(index * (strides.empty() ? contiguous_stride : strides[dim]));
}

}  // namespace

struct MatmulPlan::Impl {
  std::shared_ptr<ProviderState> state;
  dnnl::matmul primitive;
  std::string implementation;
  memory::desc scratchpad_md;
  memory::desc a_md;
  memory::desc b_md;
  memory::desc dst_md;
  bool has_add = false;
  std::optional<Activation> tail;  // run by the plan after each call (split_tail)
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
      data.tail = tail_of(p.tail);
      return data;
    });
    return;
  }
  PieceData data;
  data.src = a;
  data.dst = output;
  data.weights_md = &p.b_md;
  data.weights = b;
  data.tail = tail_of(p.tail);
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
      piece.src_md = strided_md({batch, params.m, params.k}, params.a_strides);
      piece.weights_md = strided_md({batch, params.k, params.n}, params.b_strides);
      piece.dst_md = plain_md({batch, params.m, params.n});
      piece.src_offset = offset_of(params.a_strides, 0, begin, params.m * params.k);
      piece.weights_offset = offset_of(params.b_strides, 0, begin, params.k * params.n);
      piece.dst_offset = static_cast<size_t>(begin * params.m * params.n);
    } else {
      const auto [begin, end] = block_slice(params.m, kMatmulRows, count, i);
      piece.src_md = strided_md({end - begin, params.k}, params.a_strides);
      piece.weights_md = strided_md({params.k, params.n}, params.b_strides);
      piece.dst_md = plain_md({end - begin, params.n});
      piece.src_offset = offset_of(params.a_strides, 0, begin, params.k);
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
    const auto with_batch = [&](Dims dims, const std::vector<int64_t>& strides) {
      if (params.batch > 1) {
        dims.insert(dims.begin(), params.batch);
      }
      return strided_md(dims, strides);
    };
    impl->a_md = with_batch({params.m, params.k}, params.a_strides);
    impl->b_md = with_batch({params.k, params.n}, params.b_strides);
    impl->dst_md = with_batch({params.m, params.n}, {});
    // Plain outputs: a trailing sigmoid / SiLU always suits the plan's kernel.
    const SplitPostOps split = split_tail(post_ops);
    impl->tail = split.tail;
    const dnnl::matmul::primitive_desc pd(state.engine, impl->a_md, impl->b_md, impl->dst_md,
                                          make_attr(split.primitive));
    impl->implementation = pd.impl_info_str();
    impl->has_add = has_add(post_ops);
    impl->pieces =
        split_matmul(state, params, make_attr(split.primitive), impl->implementation);
    if (impl->pieces.empty()) {  // the whole op's kernel only when it runs (see prepare_linear)
      impl->primitive = make_matmul(pd);
      impl->scratchpad_md = pd.scratchpad_desc();
      state.reserve_scratchpad(impl->scratchpad_md);
    }
    impl->implementation += split.note();
    impl->implementation += pieces_note(impl->pieces.size());
    return MatmulPlan(std::move(impl));
  });
}

}  // namespace onednn
}  // namespace et_cpu_plugin
