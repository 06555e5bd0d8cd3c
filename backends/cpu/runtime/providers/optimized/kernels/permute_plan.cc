// PermutePlan: permute_copy (attention's head split and merge, transposes before a matmul, NCL
// to NLC in speech models) on our own strided copy. oneDNN's reorder handles arbitrary strides
// element by element ("simple:any"); a permutation of contiguous tensors is either a copy of
// contiguous runs (the innermost dim stays innermost) or a 2-D transpose repeated over the other
// dims, and both stream at memory speed with a loop that knows which one it is. In a graph resized
// in place, a plain permute's plan works its loops out again from the input's dims at a run where
// they changed (run_sized): nothing prepared at a new size.
#include <algorithm>
#include <cstring>

#include "backends/cpu/runtime/providers/optimized/onednn/onednn_internal.h"

namespace et_cpu_plugin {
namespace onednn {

namespace {

// Elements along a side of a transpose tile: 16 x 16 floats read and written as whole cache lines.
constexpr int64_t kTile = 16;

// The permutation as loops over the output (dense, row-major) reading the input at `strides`:
// size-1 dims dropped, neighbours that are contiguous in both merged into one.
struct CopyLoops {
  std::vector<int64_t> dims;     // output order, outermost first
  std::vector<int64_t> strides;  // the input's stride (elements) along each
};

CopyLoops coalesce(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
  CopyLoops loops;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] == 1) continue;
    if (!loops.dims.empty() && loops.strides.back() == strides[k] * dims[k]) {
      loops.dims.back() *= dims[k];
      loops.strides.back() = strides[k];
    } else {
      loops.dims.push_back(dims[k]);
      loops.strides.push_back(strides[k]);
    }
  }
  return loops;
}

}  // namespace

struct PermutePlan::Impl {
  enum class Kind {
    kRuns,       // the innermost output dim is contiguous in the input: memcpy of runs
    kTranspose,  // another output dim is: tiles of (that dim x innermost dim)
    kStrided,    // neither (an input with no unit stride left after coalescing): element loop
  };
  std::shared_ptr<ProviderState> state;
  Kind kind = Kind::kRuns;
  CopyLoops loops;
  // kTranspose: the output dim read contiguously, and the dims the units range over (the
  // others, outermost first) with the unit's chunks of kTile along `unit_dim`.
  size_t unit_dim = 0;
  std::vector<size_t> outer;
  int64_t chunks = 1;
  int64_t units = 1;
  size_t tasks = 1;
  std::vector<int64_t> out_strides;  // dense output strides of `loops.dims`
  std::string implementation;
  // prepare_permute_sized_at_run: the permutation and the input dims these loops are for.
  std::vector<int64_t> perm;
  std::vector<int64_t> input_dims;

  // Input and output offsets of the first element of `unit` (kRuns and kStrided: the unit is a
  // position over every dim but the innermost; kTranspose: see `outer` and `chunks`).
  void unit_offsets(int64_t unit, int64_t* in, int64_t* out) const {
    *in = 0;
    *out = 0;
    if (kind == Kind::kTranspose) {
      const int64_t chunk = unit % chunks;
      unit /= chunks;
      *in += chunk * kTile * loops.strides[unit_dim];
      *out += chunk * kTile * out_strides[unit_dim];
      for (size_t i = outer.size(); i-- > 0;) {
        const size_t k = outer[i];
        const int64_t index = unit % loops.dims[k];
        unit /= loops.dims[k];
        *in += index * loops.strides[k];
        *out += index * out_strides[k];
      }
      return;
    }
    for (size_t k = loops.dims.size() - 1; k-- > 0;) {
      const int64_t index = unit % loops.dims[k];
      unit /= loops.dims[k];
      *in += index * loops.strides[k];
      *out += index * out_strides[k];
    }
  }

  void run_units(const float* input, float* output, int64_t first, int64_t last) const {
    const size_t inner = loops.dims.size() - 1;
    const int64_t length = loops.dims[inner];
    const int64_t in_step = loops.strides[inner];
    for (int64_t unit = first; unit < last; ++unit) {
      int64_t in = 0;
      int64_t out = 0;
      unit_offsets(unit, &in, &out);
      const float* from = input + in;
      float* to = output + out;
      if (kind == Kind::kRuns) {
        std::memcpy(to, from, static_cast<size_t>(length) * sizeof(float));
      } else if (kind == Kind::kStrided) {
        for (int64_t j = 0; j < length; ++j) to[j] = from[j * in_step];
      } else {
        // rows: `unit_dim` (contiguous in the input), columns: the innermost output dim.
        const int64_t row_begin = (unit % chunks) * kTile;
        const int64_t rows = std::min(kTile, loops.dims[unit_dim] - row_begin);
        const int64_t out_row = out_strides[unit_dim];
        for (int64_t j0 = 0; j0 < length; j0 += kTile) {
          const int64_t columns = std::min(kTile, length - j0);
          for (int64_t j = 0; j < columns; ++j) {
            const float* column = from + (j0 + j) * in_step;
            for (int64_t i = 0; i < rows; ++i) to[i * out_row + j0 + j] = column[i];
          }
        }
      }
    }
  }
};

PermutePlan::PermutePlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

std::string PermutePlan::implementation() const {
  return impl_->implementation;
}

size_t PermutePlan::pieces() const {
  return impl_->tasks;
}

void PermutePlan::run(const float* input, float* output) const {
  const Impl& p = *impl_;
  if (p.loops.dims.empty()) {  // one element
    output[0] = input[0];
    return;
  }
  run_in_slices(p.state->pool.get(), p.tasks, p.units, [&](int64_t first, int64_t last, int) {
    p.run_units(input, output, first, last);
  });
}

Support supports_permute(const std::vector<int64_t>& perm, const std::vector<int64_t>& input,
                         const std::vector<int64_t>& output) {
  if (perm.size() != input.size() || output.size() != input.size()) {
    return Support::no("permute: dims " + dims_to_string(perm) + " do not match input " +
                       dims_to_string(input) + " and output " + dims_to_string(output));
  }
  std::vector<bool> seen(perm.size(), false);
  for (size_t k = 0; k < perm.size(); ++k) {
    const int64_t d = perm[k];
    if (d < 0 || d >= static_cast<int64_t>(perm.size()) || seen[static_cast<size_t>(d)]) {
      return Support::no("permute: dims " + dims_to_string(perm) + " are not a permutation");
    }
    seen[static_cast<size_t>(d)] = true;
    if (output[k] != input[static_cast<size_t>(d)]) {
      return Support::no("permute: output " + dims_to_string(output) + " is not input " +
                         dims_to_string(input) + " permuted by " + dims_to_string(perm));
    }
  }
  for (const int64_t d : input) {
    if (d < 1) return Support::no("permute: empty tensors are not supported");
  }
  return Support::yes();
}

namespace {

// The plan's loops and split for an output of `dims` (in its memory order, outermost first,
// dense) reading the input at `strides` (elements, per output dim in that order).
void plan_loops(PermutePlan::Impl& impl, ProviderState& state, const std::vector<int64_t>& dims,
                const std::vector<int64_t>& strides) {
  impl.loops = coalesce(dims, strides);
  CopyLoops& loops = impl.loops;
  const size_t rank = loops.dims.size();
  impl.out_strides.assign(rank, 1);
  for (size_t k = rank; k-- > 1;) impl.out_strides[k - 1] = impl.out_strides[k] * loops.dims[k];
  if (rank == 0) {
    impl.implementation = "permute:copy";
    return;
  }
  using Kind = PermutePlan::Impl::Kind;
  const auto elements = static_cast<int64_t>(product(dims));
  if (loops.strides[rank - 1] == 1) {
    impl.kind = Kind::kRuns;
    impl.units = elements / loops.dims[rank - 1];
    impl.implementation = "permute:runs";
  } else {
    size_t unit_dim = rank;
    for (size_t k = 0; k + 1 < rank; ++k) {
      if (loops.strides[k] == 1) unit_dim = k;
    }
    if (unit_dim == rank) {
      impl.kind = Kind::kStrided;
      impl.units = elements / loops.dims[rank - 1];
      impl.implementation = "permute:strided";
    } else {
      impl.kind = Kind::kTranspose;
      impl.unit_dim = unit_dim;
      for (size_t k = 0; k + 1 < rank; ++k) {
        if (k != unit_dim) impl.outer.push_back(k);
      }
      impl.chunks = (loops.dims[unit_dim] + kTile - 1) / kTile;
      impl.units = elements / (loops.dims[unit_dim] * loops.dims[rank - 1]) * impl.chunks;
      impl.implementation = "permute:transpose";
    }
  }
  // A copy streams memory: count it like an elementwise op for the split decision.
  impl.tasks = state.pieces_for(static_cast<double>(elements) * 8.0, impl.units);
  impl.implementation += pieces_note(impl.tasks);
}

// The plan of plain input `input` permuted by `perm` into a plain output (checked first).
std::shared_ptr<PermutePlan::Impl> plain_permute(std::shared_ptr<ProviderState> state,
                                                 const std::vector<int64_t>& perm,
                                                 const std::vector<int64_t>& input) {
  std::vector<int64_t> output(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) {
    const int64_t d = perm[k];
    output[k] = d >= 0 && d < static_cast<int64_t>(input.size()) ? input[static_cast<size_t>(d)]
                                                                 : 0;
  }
  const Support support = supports_permute(perm, input, output);
  if (!support.ok) throw ProviderError("permute: " + support.reason);
  std::vector<int64_t> in_strides(input.size(), 1);
  for (size_t k = input.size(); k-- > 1;) in_strides[k - 1] = in_strides[k] * input[k];
  std::vector<int64_t> strides(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) strides[k] = in_strides[static_cast<size_t>(perm[k])];
  auto impl = std::make_shared<PermutePlan::Impl>();
  impl->state = std::move(state);
  impl->perm = perm;
  impl->input_dims = input;
  plan_loops(*impl, *impl->state, output, strides);
  return impl;
}

}  // namespace

void PermutePlan::run_sized(const float* input, float* output,
                            const std::vector<int64_t>& input_dims) {
  if (input_dims.size() != impl_->input_dims.size()) {
    throw ProviderError("permute: input of rank " + std::to_string(input_dims.size()) +
                        " for a plan of rank " + std::to_string(impl_->input_dims.size()) +
                        " (or of fixed sizes)");
  }
  if (input_dims != impl_->input_dims) {
    impl_ = plain_permute(impl_->state, impl_->perm, input_dims);
  }
  run(input, output);
}

PermutePlan Provider::prepare_permute_sized_at_run(const std::vector<int64_t>& perm,
                                                   const std::vector<int64_t>& input) {
  return PermutePlan(plain_permute(state_, perm, input));
}

PermutePlan Provider::prepare_permute(const std::vector<int64_t>& perm, const Layout& input,
                                      const Layout& output) {
  const Support support = supports_permute(perm, input.dims(), output.dims());
  if (!support.ok) throw ProviderError("prepare_permute: " + support.reason);
  const memory::desc& md = input.impl().md;
  const memory::desc& out_md = output.impl().md;
  if (md.get_inner_nblks() != 0 || out_md.get_inner_nblks() != 0) {
    throw ProviderError("prepare_permute: blocked layout " + input.describe() + " -> " +
                        output.describe());
  }
  const memory::dims in_strides = md.get_strides();
  const memory::dims out_strides = out_md.get_strides();
  auto impl = std::make_shared<PermutePlan::Impl>();
  impl->state = state_;
  // The loops walk the output in its memory order (plain: its dims in order; channels-last, for
  // a convolution reading it: channels innermost), where it is dense.
  std::vector<size_t> order(perm.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return out_strides[a] > out_strides[b]; });
  std::vector<int64_t> dims(perm.size());
  std::vector<int64_t> strides(perm.size());
  for (size_t k = 0; k < order.size(); ++k) {
    dims[k] = output.dims()[order[k]];
    strides[k] = in_strides[static_cast<size_t>(perm[order[k]])];
  }
  plan_loops(*impl, *state_, dims, strides);
  return PermutePlan(std::move(impl));
}

}  // namespace onednn
}  // namespace et_cpu_plugin
