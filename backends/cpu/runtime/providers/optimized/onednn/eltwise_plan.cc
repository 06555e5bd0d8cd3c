// Elementwise activations (EltwisePlan) and their mapping onto oneDNN's eltwise algorithms, which
// the post-ops of the other plans use too.
#include <cfloat>
#include <cmath>

#include "backends/cpu/runtime/providers/optimized/onednn/onednn_internal.h"
#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_activations.h"

namespace et_cpu_plugin {
namespace onednn {

const char* activation_name(Activation::Kind kind) {
  switch (kind) {
    case Activation::Kind::kRelu:
      return "relu";
    case Activation::Kind::kLeakyRelu:
      return "leaky_relu";
    case Activation::Kind::kClamp:
      return "clamp";
    case Activation::Kind::kSigmoid:
      return "sigmoid";
    case Activation::Kind::kTanh:
      return "tanh";
    case Activation::Kind::kHardswish:
      return "hardswish";
    case Activation::Kind::kHardsigmoid:
      return "hardsigmoid";
    case Activation::Kind::kSilu:
      return "silu";
    case Activation::Kind::kGeluErf:
      return "gelu";
    case Activation::Kind::kGeluTanh:
      return "gelu(tanh)";
    case Activation::Kind::kElu:
      return "elu";
    case Activation::Kind::kLinear:
      return "linear";
    case Activation::Kind::kSquare:
      return "square";
    case Activation::Kind::kPow:
      return "pow";
    case Activation::Kind::kSqrt:
      return "sqrt";
    case Activation::Kind::kExp:
      return "exp";
    case Activation::Kind::kLog:
      return "log";
    case Activation::Kind::kAbs:
      return "abs";
  }
  return "?";
}

Support supports_activation(const Activation& a) {
  const std::string name = activation_name(a.kind);
  switch (a.kind) {
    case Activation::Kind::kClamp:
      // +-infinity is fine (an absent bound); NaN or an empty range is not.
      if (std::isnan(a.alpha) || std::isnan(a.beta) || !(a.alpha <= a.beta)) {
        return Support::no(name + ": bounds must be numbers with min <= max, got [" +
                           std::to_string(a.alpha) + ", " + std::to_string(a.beta) + "]");
      }
      return Support::yes();
    case Activation::Kind::kLeakyRelu:
    case Activation::Kind::kElu:
      if (!std::isfinite(a.alpha)) {
        return Support::no(name + ": alpha must be finite, got " + std::to_string(a.alpha));
      }
      return Support::yes();
    case Activation::Kind::kLinear:
      if (!std::isfinite(a.alpha) || !std::isfinite(a.beta)) {
        return Support::no(name + ": scale and shift must be finite, got " +
                           std::to_string(a.alpha) + " and " + std::to_string(a.beta));
      }
      return Support::yes();
    case Activation::Kind::kPow:
      // oneDNN's pow goes through exp(alpha * log(x)): wrong for a negative x where torch gives
      // a real result, i.e. for integer exponents; those stay on ExecuTorch's kernel.
      if (!std::isfinite(a.alpha) || std::nearbyint(a.alpha) == a.alpha) {
        return Support::no(name + ": only finite non-integer exponents, got " +
                           std::to_string(a.alpha));
      }
      return Support::yes();
    default:
      return Support::yes();
  }
}

dnnl::algorithm eltwise_algorithm(const Activation& a, float* alpha, float* beta) {
  *alpha = 0.0f;
  *beta = 0.0f;
  switch (a.kind) {
    case Activation::Kind::kRelu:
      return dnnl::algorithm::eltwise_relu;
    case Activation::Kind::kLeakyRelu:  // x > 0 ? x : alpha * x
      *alpha = a.alpha;
      return dnnl::algorithm::eltwise_relu;
    case Activation::Kind::kClamp:  // min(max(x, alpha), beta)
      *alpha = std::max(a.alpha, -FLT_MAX);
      *beta = std::min(a.beta, FLT_MAX);
      return dnnl::algorithm::eltwise_clip;
    case Activation::Kind::kSigmoid:
      return dnnl::algorithm::eltwise_logistic;
    case Activation::Kind::kTanh:
      return dnnl::algorithm::eltwise_tanh;
    // oneDNN: hardsigmoid = max(0, min(1, alpha * x + beta)), hardswish = x * hardsigmoid; torch:
    // relu6(x + 3) / 6 = clamp(x / 6 + 1 / 2, 0, 1).
    case Activation::Kind::kHardswish:
      *alpha = 1.0f / 6.0f;
      *beta = 0.5f;
      return dnnl::algorithm::eltwise_hardswish;
    case Activation::Kind::kHardsigmoid:
      *alpha = 1.0f / 6.0f;
      *beta = 0.5f;
      return dnnl::algorithm::eltwise_hardsigmoid;
    case Activation::Kind::kSilu:  // swish: x * sigmoid(alpha * x)
      *alpha = 1.0f;
      return dnnl::algorithm::eltwise_swish;
    case Activation::Kind::kGeluErf:
      return dnnl::algorithm::eltwise_gelu_erf;
    case Activation::Kind::kGeluTanh:
      return dnnl::algorithm::eltwise_gelu_tanh;
    case Activation::Kind::kElu:  // x > 0 ? x : alpha * (exp(x) - 1)
      *alpha = a.alpha;
      return dnnl::algorithm::eltwise_elu;
    case Activation::Kind::kLinear:
      *alpha = a.alpha;
      *beta = a.beta;
      return dnnl::algorithm::eltwise_linear;
    case Activation::Kind::kSquare:
      return dnnl::algorithm::eltwise_square;
    case Activation::Kind::kPow:  // oneDNN: alpha * x ** beta
      *alpha = 1.0f;
      *beta = a.alpha;
      return dnnl::algorithm::eltwise_pow;
    case Activation::Kind::kSqrt:
      return dnnl::algorithm::eltwise_sqrt;
    case Activation::Kind::kExp:
      return dnnl::algorithm::eltwise_exp;
    case Activation::Kind::kLog:
      return dnnl::algorithm::eltwise_log;
    case Activation::Kind::kAbs:
      return dnnl::algorithm::eltwise_abs;
  }
  throw ProviderError("unknown activation");
}

namespace {

// Rough cost of one element in FLOPs, for the split decision (pieces_for): an activation streams
// memory, so even relu is worth splitting when large; exp-based ones cost more per element.
double cost_per_element(Activation::Kind kind) {
  switch (kind) {
    case Activation::Kind::kRelu:
    case Activation::Kind::kLeakyRelu:
    case Activation::Kind::kClamp:
    case Activation::Kind::kHardswish:
    case Activation::Kind::kHardsigmoid:
    case Activation::Kind::kLinear:
    case Activation::Kind::kSquare:
    case Activation::Kind::kAbs:
      return 8.0;
    default:
      return 24.0;
  }
}

// Slices of this many floats at least (and multiples of 16: whole cache lines per piece).
constexpr int64_t kMinSliceFloats = 4096;

// The activations our plain loop computes (apply_loop_activation): the arithmetic a transformer's
// unfused pieces use (x * s + b, x ** 2, rsqrt, sqrt) and the clamps. A graph whose sizes vary
// runs them on it: nothing to generate at a new size (oneDNN's eltwise made a kernel per size,
// ~125 us of a decoder's resize at one token).
bool has_loop_activation(const Activation& a) {
  switch (a.kind) {
    case Activation::Kind::kRelu:
    case Activation::Kind::kLeakyRelu:
    case Activation::Kind::kClamp:
    case Activation::Kind::kLinear:
    case Activation::Kind::kSquare:
    case Activation::Kind::kSqrt:
    case Activation::Kind::kPow:
    case Activation::Kind::kAbs:
      return true;
    default:
      return false;
  }
}

// output[i] = a(input[i]) for `count` floats (in place allowed); torch's float32 definitions,
// NaN staying NaN (the comparisons below are false for it).
void apply_loop_activation(const Activation& a, const float* input, float* output, size_t count) {
  const float alpha = a.alpha;
  const float beta = a.beta;
  auto each = [&](auto f) {
    for (size_t i = 0; i < count; ++i) output[i] = f(input[i]);
  };
  switch (a.kind) {
    case Activation::Kind::kRelu:
      return each([](float x) { return x < 0.0f ? 0.0f : x; });
    case Activation::Kind::kLeakyRelu:
      return each([=](float x) { return x < 0.0f ? x * alpha : x; });
    case Activation::Kind::kClamp:
      return each([=](float x) { return x < alpha ? alpha : x > beta ? beta : x; });
    case Activation::Kind::kLinear:
      return each([=](float x) { return alpha * x + beta; });
    case Activation::Kind::kSquare:
      return each([](float x) { return x * x; });
    case Activation::Kind::kSqrt:
      return each([](float x) { return std::sqrt(x); });
    case Activation::Kind::kPow:
      if (alpha == -0.5f) return each([](float x) { return 1.0f / std::sqrt(x); });
      return each([=](float x) { return std::pow(x, alpha); });
    case Activation::Kind::kAbs:
      return each([](float x) { return std::fabs(x); });
    default:
      throw ProviderError(std::string("no loop for activation ") + activation_name(a.kind));
  }
}

}  // namespace

struct EltwisePlan::Impl {
  std::shared_ptr<ProviderState> state;
  Activation activation;
  int64_t elements = 0;
  // The activation over the buffer as one flat run of floats (plain and channels-last layouts are
  // dense: the function does not care where each element lies).
  dnnl::eltwise_forward primitive;
  memory::desc flat;
  memory::desc scratchpad_md;
  std::vector<Piece> pieces;
  // Sigmoid / SiLU on the plan's own vector kernel (has_vector_activation), or (`loop`) the
  // arithmetic on our plain loop: no primitive; pieces then only name their slice (src_offset,
  // and dst_md's element count).
  bool vector = false;
  bool loop = false;
  // Input and output in different layouts: converted into the output first, then in place.
  std::unique_ptr<ReorderPlan> convert;
  std::string implementation;
  mutable std::unordered_map<int, memory> args;
};

EltwisePlan::EltwisePlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

std::string EltwisePlan::implementation() const {
  return impl_->implementation;
}
size_t EltwisePlan::pieces() const {
  return impl_->pieces.empty() ? 1 : impl_->pieces.size();
}

void EltwisePlan::run(const float* input, float* output) const {
  const Impl& p = *impl_;
  ProviderState& state = *p.state;
  ThreadCountGuard threads(state.omp_threads);
  if (p.convert) {
    p.convert->run(input, output);
    input = output;
  }
  if (p.vector) {
    const auto apply = p.loop ? apply_loop_activation : apply_vector_activation;
    if (p.pieces.empty()) {
      apply(p.activation, input, output, static_cast<size_t>(p.elements));
      return;
    }
    state.pool->run(p.pieces.size(), [&](size_t index, int) {
      const Piece& piece = p.pieces[index];
      apply(p.activation, input + piece.src_offset, output + piece.src_offset,
            static_cast<size_t>(piece.dst_md.get_dims()[0]));
    });
    return;
  }
  if (p.pieces.empty()) {
    PieceData data;
    data.src = input;
    data.dst = output;
    execute_whole(state, p.primitive, p.args, p.flat, p.flat, p.scratchpad_md, data);
    return;
  }
  run_pieces(state, p.pieces, [&](const Piece& piece) {
    PieceData data;
    data.src = input + piece.src_offset;
    data.dst = output + piece.dst_offset;
    return data;
  });
}

EltwisePlan Provider::prepare_eltwise(const Activation& activation, const Layout& input,
                                      const Layout& output) {
  const Support support = supports_activation(activation);
  if (!support.ok) {
    throw ProviderError("prepare_eltwise: " + support.reason);
  }
  if (input.dims() != output.dims()) {
    throw ProviderError("prepare_eltwise: input dims " + dims_to_string(input.dims()) +
                        " differ from output dims " + dims_to_string(output.dims()));
  }
  const double elements = product(input.dims());
  if (input.dims().empty() || elements < 1 ||
      input.size_bytes() != static_cast<size_t>(elements) * sizeof(float) ||
      output.size_bytes() != input.size_bytes()) {
    throw ProviderError("prepare_eltwise: only dense, non-empty layouts, got " +
                        input.describe() + " -> " + output.describe() + " of " +
                        dims_to_string(input.dims()));
  }
  std::unique_ptr<ReorderPlan> convert;
  if (input != output) {
    convert = std::make_unique<ReorderPlan>(prepare_reorder(input, output));
  }
  ProviderState& state = *state_;
  ThreadCountGuard threads(state.omp_threads);
  return wrap_dnnl("prepare_eltwise", [&] {
    auto impl = std::make_shared<EltwisePlan::Impl>();
    impl->state = state_;
    impl->activation = activation;
    impl->elements = static_cast<int64_t>(elements);
    impl->convert = std::move(convert);
    const int64_t units = impl->elements / kMinSliceFloats;
    const size_t count =
        state.pieces_for(elements * cost_per_element(activation.kind), units);
    impl->loop = !has_vector_activation(activation) && state.size_independent_plans &&
                 has_loop_activation(activation) && kernel_switched_on("ET_CPU_LOOP_ELTWISE");
    if (impl->loop || has_vector_activation(activation)) {
      impl->vector = true;
      impl->implementation =
          std::string(impl->loop ? "loop " : "vector ") + activation_name(activation.kind);
      if (count > 1) {
        for (size_t index = 0; index < count; ++index) {
          const auto [begin, end] = block_slice(impl->elements, 16, count, index);
          Piece piece;
          piece.src_offset = static_cast<size_t>(begin);
          piece.dst_md = plain_md(Dims{end - begin});
          impl->pieces.push_back(std::move(piece));
        }
        impl->implementation += pieces_note(count);
      }
      return EltwisePlan(std::move(impl));
    }
    float alpha = 0.0f;
    float beta = 0.0f;
    const dnnl::algorithm algorithm = eltwise_algorithm(activation, &alpha, &beta);
    auto make = [&](int64_t count, memory::desc* md) {
      *md = plain_md(Dims{count});
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      return dnnl::eltwise_forward::primitive_desc(state.engine,
                                                   dnnl::prop_kind::forward_inference,
                                                   algorithm, *md, *md, alpha, beta, attr);
    };
    const auto pd = make(impl->elements, &impl->flat);
    impl->implementation = pd.impl_info_str();
    impl->pieces = make_pieces(state, count, [&](size_t index, Piece& piece) {
      const auto [begin, end] = block_slice(impl->elements, 16, count, index);
      if (end <= begin) return false;
      const auto piece_pd = make(end - begin, &piece.src_md);
      piece.dst_md = piece.src_md;
      set_primitive<dnnl::eltwise_forward>(piece, piece_pd);
      piece.src_offset = static_cast<size_t>(begin);
      piece.dst_offset = static_cast<size_t>(begin);
      return true;
    });
    if (impl->pieces.empty()) {  // the whole op's kernel only when it runs (a compile's cost)
      impl->primitive = dnnl::eltwise_forward(pd);
      impl->scratchpad_md = pd.scratchpad_desc();
      state.reserve_scratchpad(impl->scratchpad_md);
    }
    impl->implementation += pieces_note(impl->pieces.size());
    return EltwisePlan(std::move(impl));
  });
}

}  // namespace onednn
}  // namespace et_cpu_plugin
