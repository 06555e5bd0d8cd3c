// Softmax and log-softmax plans (SoftmaxPlan): classifier heads, per-frame class log-probabilities,
// attention weights. On AVX-512 our own kernel runs them over any axis, on the data's own layout
// (plain or channels-last), split on the pool; otherwise oneDNN's softmax primitive.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/runtime/providers/optimized/onednn/onednn_internal.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {

Support supports_softmax(const std::vector<int64_t>& dims, int64_t axis) {
  if (dims.empty() || axis < 0 || axis >= static_cast<int64_t>(dims.size())) {
    return Support::no("softmax: dim " + std::to_string(axis) + " is not a dim of " +
                       dims_to_string(dims));
  }
  for (const int64_t d : dims) {
    if (d < 1) return Support::no("softmax: empty tensors are not supported");
  }
  return Support::yes();
}

namespace {

// What one element costs in the FLOPs of ProviderOptions::min_task_flops (an exp, a max, a sum
// and a scale).
constexpr double kSoftmaxFlopsPerElement = 24;
constexpr int kLanes = 16;

// exp(z) for z <= 0 (x minus its maximum): 0 below -87, where exp_nonpositive16 stops; NaN stays
// NaN (max takes its second operand when one is NaN).
ET_AVX512 inline __m512 exp_shifted16(__m512 z) {
  const __m512 low = _mm512_set1_ps(-87.0f);
  const __m512 e = exp_nonpositive16(_mm512_max_ps(low, z));
  return _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(z, low, _CMP_LT_OQ), _mm512_setzero_ps());
}

ET_AVX512 inline __mmask16 lanes_below(int64_t count) {
  return count >= kLanes ? static_cast<__mmask16>(0xFFFF)
                         : static_cast<__mmask16>((1u << count) - 1u);
}

// Softmax over `n` contiguous floats (the axis innermost in memory). A NaN or an infinity in the
// row makes every output NaN, as torch's (x - max gives a NaN somewhere, so does the sum).
// `safe`: a row of -inf only (fully masked) gives zeros, as torch's _safe_softmax (the guard
// scaled_dot_product_attention exports: where(all(x == -inf), 0, softmax(x))); looked for only
// when the row's maximum is -inf, as every such row's is.
ET_AVX512 void softmax_row(const float* x, float* y, int64_t n, bool log, bool safe = false) {
  __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 m = lanes_below(n - i);
    vmax = _mm512_mask_max_ps(vmax, m, vmax, _mm512_maskz_loadu_ps(m, x + i));
  }
  const float row_max = horizontal16<Horizontal::kMax>(vmax);
  if (safe && row_max == -std::numeric_limits<float>::infinity() &&
      std::all_of(x, x + n, [](float v) { return v == -std::numeric_limits<float>::infinity(); })) {
    std::fill(y, y + n, 0.0f);
    return;
  }
  const __m512 max = _mm512_set1_ps(row_max);
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 m = lanes_below(n - i);
    const __m512 e = exp_shifted16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), max));
    vsum = _mm512_mask_add_ps(vsum, m, vsum, e);
    if (!log) _mm512_mask_storeu_ps(y + i, m, e);
  }
  const float sum = horizontal16<Horizontal::kSum>(vsum);
  if (log) {
    const __m512 log_sum = _mm512_set1_ps(std::log(sum));
    for (int64_t i = 0; i < n; i += kLanes) {
      const __mmask16 m = lanes_below(n - i);
      const __m512 shifted = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), max);
      _mm512_mask_storeu_ps(y + i, m, _mm512_sub_ps(shifted, log_sum));
    }
    return;
  }
  const __m512 scale = _mm512_set1_ps(1.0f / sum);
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 m = lanes_below(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i), scale));
  }
}

// Softmax over `n` floats `stride` apart, for `lanes` <= 16 neighbouring columns at once (the
// axis in the middle of memory: each step along it reads a run of the inner dims).
ET_AVX512 void softmax_columns(const float* x, float* y, int64_t n, int64_t stride, int64_t lanes,
                               bool log) {
  const __mmask16 m = lanes_below(lanes);
  __m512 max = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t a = 0; a < n; ++a) {
    max = _mm512_mask_max_ps(max, m, max, _mm512_maskz_loadu_ps(m, x + a * stride));
  }
  __m512 sum = _mm512_setzero_ps();
  for (int64_t a = 0; a < n; ++a) {
    const __m512 e = exp_shifted16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + a * stride), max));
    sum = _mm512_add_ps(sum, e);
    if (!log) _mm512_mask_storeu_ps(y + a * stride, m, e);
  }
  if (log) {
    alignas(64) float sums[kLanes];
    _mm512_store_ps(sums, sum);
    for (int l = 0; l < kLanes; ++l) sums[l] = std::log(sums[l]);
    const __m512 log_sum = _mm512_load_ps(sums);
    for (int64_t a = 0; a < n; ++a) {
      const __m512 shifted = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + a * stride), max);
      _mm512_mask_storeu_ps(y + a * stride, m, _mm512_sub_ps(shifted, log_sum));
    }
    return;
  }
  const __m512 scale = _mm512_div_ps(_mm512_set1_ps(1.0f), sum);
  for (int64_t a = 0; a < n; ++a) {
    float* row = y + a * stride;
    _mm512_mask_storeu_ps(row, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row), scale));
  }
}

// The tensor seen in memory order as [outer, length, inner]: `length` the softmax axis.
struct AxisShape {
  int64_t outer = 1;
  int64_t length = 1;
  int64_t inner = 1;
  // Units of work: rows (inner 1) or blocks of 16 columns of one outer index.
  int64_t column_blocks() const { return (inner + kLanes - 1) / kLanes; }
  int64_t units() const { return inner == 1 ? outer : outer * column_blocks(); }
};

AxisShape axis_shape(const Layout& layout, int64_t axis) {
  const std::vector<int64_t>& dims = layout.dims();
  const size_t rank = dims.size();
  // Memory order of the logical dims: plain 0..r-1; channels-last 0, 2, ..., r-1, 1.
  std::vector<size_t> order;
  order.push_back(0);
  if (layout.is_channels_last() && rank >= 3) {
    for (size_t d = 2; d < rank; ++d) order.push_back(d);
    order.push_back(1);
  } else {
    for (size_t d = 1; d < rank; ++d) order.push_back(d);
  }
  AxisShape shape;
  bool before = true;
  for (const size_t d : order) {
    if (static_cast<int64_t>(d) == axis) {
      shape.length = dims[d];
      before = false;
    } else if (before) {
      shape.outer *= dims[d];
    } else {
      shape.inner *= dims[d];
    }
  }
  return shape;
}

// Runs units [begin, end) of the softmax (see AxisShape::units).
void softmax_units(const AxisShape& s, bool log, const float* x, float* y, int64_t begin,
                   int64_t end) {
  if (s.inner == 1) {
    for (int64_t row = begin; row < end; ++row) {
      softmax_row(x + row * s.length, y + row * s.length, s.length, log);
    }
    return;
  }
  const int64_t blocks = s.column_blocks();
  for (int64_t unit = begin; unit < end; ++unit) {
    const int64_t o = unit / blocks;
    const int64_t column = (unit % blocks) * kLanes;
    const int64_t offset = o * s.length * s.inner + column;
    softmax_columns(x + offset, y + offset, s.length, s.inner,
                    std::min<int64_t>(kLanes, s.inner - column), log);
  }
}

}  // namespace

struct SoftmaxPlan::Impl : WholeOp {
  FormatBridge bridge;  // oneDNN's: into and out of the format where the axis is innermost
  // Our own kernel: the input brought into the output's format by bridge.to_source if needed.
  bool own = false;
  bool log = false;
  AxisShape shape;
  size_t tasks = 1;
};

SoftmaxPlan::SoftmaxPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

std::string SoftmaxPlan::implementation() const {
  return impl_->implementation;
}

void SoftmaxPlan::run(const float* input, float* output) const {
  const Impl& p = *impl_;
  if (!p.own) {
    p.bridge.run(p, input, output);
    return;
  }
  const float* from = input;
  if (p.bridge.to_source) {
    p.bridge.to_source->run(input, static_cast<float*>(p.bridge.source.data()));
    from = static_cast<const float*>(p.bridge.source.data());
  }
  const int64_t units = p.shape.units();
  if (p.tasks <= 1) {
    softmax_units(p.shape, p.log, from, output, 0, units);
    return;
  }
  p.state->pool->run(p.tasks, [&](size_t task, int) {
    const auto [begin, end] = slice_of(units, p.tasks, task);
    softmax_units(p.shape, p.log, from, output, begin, end);
  });
}

void safe_softmax_rows(const float* x, float* y, int64_t rows, int64_t n, WorkPool* pool) {
  // Bands of at least ~16 KiB of x, as the rotary and RMSNorm kernels.
  const int64_t min_rows = std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1));
  const int64_t threads = pool ? static_cast<int64_t>(pool->size()) : 1;
  const int64_t bands = std::max<int64_t>(1, std::min<int64_t>(threads * 2, rows / min_rows));
  const auto band_rows = [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) softmax_row(x + r * n, y + r * n, n, false, true);
  };
  if (bands <= 1 || pool == nullptr) {
    band_rows(0, rows);
    return;
  }
  pool->run(static_cast<size_t>(bands), [&](size_t band, int) {
    const int64_t b = static_cast<int64_t>(band);
    band_rows(rows * b / bands, rows * (b + 1) / bands);
  });
}

SoftmaxPlan Provider::prepare_softmax(bool log, int64_t axis, const Layout& input,
                                      const Layout& output) {
  const Support support = supports_softmax(input.dims(), axis);
  if (!support.ok) {
    throw ProviderError("prepare_softmax: " + support.reason);
  }
  if (input.dims() != output.dims()) {
    throw ProviderError("prepare_softmax: input dims " + dims_to_string(input.dims()) +
                        " differ from output dims " + dims_to_string(output.dims()));
  }
  ProviderState& state = *state_;
  const bool known_format = output.is_plain() || output.is_channels_last();
  // ET_CPU_VECTOR_SOFTMAX=0 keeps oneDNN's (for measuring), read at prepare.
  if (known_format && cpu_has_avx512() && kernel_switched_on("ET_CPU_VECTOR_SOFTMAX")) {
    auto impl = std::make_shared<SoftmaxPlan::Impl>();
    impl->state = state_;
    impl->own = true;
    impl->log = log;
    impl->bridge = bridge_formats(*this, state, input, output, output.is_channels_last());
    impl->shape = axis_shape(output, axis);
    const double elements = static_cast<double>(impl->shape.outer) *
                            static_cast<double>(impl->shape.length) *
                            static_cast<double>(impl->shape.inner);
    impl->tasks = state.pieces_for(elements * kSoftmaxFlopsPerElement, impl->shape.units());
    impl->implementation = impl->bridge.describe(
        std::string("softmax:avx512 (") + (impl->shape.inner == 1 ? "rows" : "columns") + ")" +
        pieces_note(impl->tasks));
    return SoftmaxPlan(std::move(impl));
  }
  // oneDNN's jit softmax wants its axis innermost (log_softmax over time after a conv1d, read
  // channels-last: ref:any, 0.41 ms against 0.01 ms at 1x100x40). So it runs plain for the last
  // axis, channels-last for the channel axis, else in the output's format.
  const int64_t rank = static_cast<int64_t>(input.dims().size());
  const bool channels_last = rank >= 3 && axis == 1   ? true
                             : axis == rank - 1       ? false
                                                      : output.is_channels_last();
  FormatBridge bridge = bridge_formats(*this, state, input, output, channels_last);
  ThreadCountGuard threads(state.omp_threads);
  return wrap_dnnl("prepare_softmax", [&] {
    auto impl = std::make_shared<SoftmaxPlan::Impl>();
    impl->state = state_;
    impl->src = bridge.source_md;
    impl->dst = bridge.target_md;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    // softmax_accurate subtracts the row maximum first, as torch does.
    const dnnl::softmax_forward::primitive_desc pd(
        state.engine, dnnl::prop_kind::forward_inference,
        log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate, impl->src,
        impl->dst, static_cast<int>(axis), attr);
    impl->set(dnnl::softmax_forward(pd), pd);
    impl->implementation = bridge.describe(impl->implementation);
    impl->bridge = std::move(bridge);
    return SoftmaxPlan(std::move(impl));
  });
}

}  // namespace onednn
}  // namespace et_cpu_plugin
