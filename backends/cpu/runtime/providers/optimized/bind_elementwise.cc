// Elementwise binders: activations and the scalar arithmetic oneDNN's eltwise expresses
// (relu ... gelu, neg, rsqrt, pow by a scalar, x * s + b; EltwisePlan, our own AVX-512 sigmoid /
// SiLU where faster) and binary ops with numpy broadcasting (add / sub with alpha 1, mul, div;
// BinaryPlan, our own channel / row / flat kernels where faster).
#include "backends/cpu/runtime/providers/optimized/binders.h"

#include <limits>
#include <utility>

namespace et_cpu_plugin {
namespace cpu {
namespace optimized {

namespace {

// a (op) b with broadcasting (add/sub with alpha 1, mul, div): reads an operand of the
// output's rank channels-last when the session keeps it so (a convolution's output times an
// (N, C, 1, 1) gate stays channels-last) and writes channels-last when its output is kept so.
class BinaryKernel final : public OptimizedKernel {
 public:
  BinaryKernel(onednn::BinaryOp op, const Tensor* a, const Tensor* b, Tensor* output)
      : op_(op), a_(a), b_(b), output_(output) {}

  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    const std::vector<int64_t> out = dims_of(*output_);
    auto layout = [&](const Tensor* t) {
      std::vector<int64_t> dims = dims_of(*t);
      if (dims.size() == out.size() && channels_last(impl_of(t))) {
        return onednn::Layout::channels_last(dims);
      }
      dims.insert(dims.begin(), out.size() - dims.size(), 1);  // numpy: leading 1s
      return onednn::Layout::plain(dims);
    };
    plan_ = std::make_unique<onednn::BinaryPlan>(
        provider.prepare_binary(op_, layout(a_), layout(b_), layout(output_)));
  }
  // Operands of another rank than the output (or below 3) are read plain.
  std::vector<const executorch::aten::TensorImpl*> plain_reads() const override {
    std::vector<const executorch::aten::TensorImpl*> plain;
    for (const Tensor* t : {a_, b_}) {
      if (t->dim() != output_->dim() || t->dim() < 3) plain.push_back(impl_of(t));
    }
    return plain;
  }
  const executorch::aten::TensorImpl* chainable_output() const override {
    return output_->dim() >= 3 && output_->dim() <= 5 ? impl_of(output_) : nullptr;
  }
  // Channels-last only when an output-sized operand is: from plain operands (SiLU's x *
  // sigmoid(x) after a reference sigmoid) a channels-last output would cost converting both.
  const executorch::aten::TensorImpl* chainable_output_after(
      const Chained& chained) const override {
    for (const Tensor* t : {a_, b_}) {
      if (t->dim() == output_->dim() && t->numel() == output_->numel() &&
          chained.count(impl_of(t)) > 0) {
        return chainable_output();
      }
    }
    return nullptr;
  }
  size_t pieces() const override { return plan_ ? plan_->pieces() : 1; }
  std::string implementation() const override { return plan_ ? plan_->implementation() : ""; }
  bool resizable() const override { return true; }  // prepare reads the sizes

  Error run(KernelRuntimeContext&) override {
    return guarded("binary", [&] {
      plan_->run(a_->const_data_ptr<float>(), b_->const_data_ptr<float>(),
                 output_->mutable_data_ptr<float>());
    });
  }

 private:
  onednn::BinaryOp op_;
  const Tensor* a_;
  const Tensor* b_;
  Tensor* output_;
  std::unique_ptr<onednn::BinaryPlan> plan_;
};

// An elementwise activation on its input's layout (channels-last when its producer is a oneDNN
// convolution that keeps it so): see onednn::EltwisePlan.
class EltwiseKernel final : public OptimizedKernel {
 public:
  EltwiseKernel(onednn::Activation activation, const Tensor* input, Tensor* output)
      : activation_(activation), input_(input), output_(output) {}

  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    plan_ = std::make_unique<onednn::EltwisePlan>(
        provider.prepare_eltwise(activation_, session_layout(channels_last, input_),
                                 session_layout(channels_last, output_)));
  }
  // Channels-last output only when the input is (rank 3 to 5): chaining an activation of a plain
  // producer would add a conversion, not save one (and would start chains in transformers,
  // which have no convolution to feed).
  const executorch::aten::TensorImpl* chainable_output() const override {
    return input_->dim() >= 3 && input_->dim() <= 5 ? impl_of(output_) : nullptr;
  }
  const executorch::aten::TensorImpl* chainable_output_after(
      const Chained& chained) const override {
    return chained.count(impl_of(input_)) > 0 ? chainable_output() : nullptr;
  }
  size_t pieces() const override { return plan_ ? plan_->pieces() : 1; }
  bool resizable() const override { return true; }  // prepare reads the sizes

  Error run(KernelRuntimeContext&) override {
    return guarded("activation", [&] {
      plan_->run(input_->const_data_ptr<float>(), output_->mutable_data_ptr<float>());
    });
  }

 private:
  onednn::Activation activation_;
  const Tensor* input_;
  Tensor* output_;
  std::unique_ptr<onednn::EltwisePlan> plan_;
};

// The activation a routed elementwise kernel computes from its arguments (self first, out last);
// false with the reason in `decline` when oneDNN has no such activation or the arguments differ.
bool parse_activation(const OpBinding& op, onednn::Activation* a, Decline* decline) {
  using K = onednn::Activation::Kind;
  const std::string kernel = op.kernel;
  const size_t n = op.args.size() - 1;  // without the result slot
  auto scalar = [&](size_t index, double fallback, double* value) {
    if (op.args[index]->isNone()) {
      *value = fallback;
      return true;
    }
    return scalar_of(op.args[index], value);
  };
  static const std::pair<const char*, K> kUnary[] = {
      {"aten::relu.out", K::kRelu},           {"aten::sigmoid.out", K::kSigmoid},
      {"aten::tanh.out", K::kTanh},           {"aten::hardswish.out", K::kHardswish},
      {"aten::hardsigmoid.out", K::kHardsigmoid}, {"aten::silu.out", K::kSilu},
      {"aten::sqrt.out", K::kSqrt},           {"aten::exp.out", K::kExp},
      {"aten::log.out", K::kLog},             {"aten::abs.out", K::kAbs},
  };
  for (const auto& [name, kind] : kUnary) {
    if (kernel == name && n == 2) {
      a->kind = kind;
      return true;
    }
  }
  double lo = 0.0;
  double hi = 0.0;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if ((kernel == "aten::clamp.out" || kernel == "aten::hardtanh.out") && n == 4) {
    if (!scalar(1, -kInf, &lo) || !scalar(2, kInf, &hi)) {
      decline->reason = kernel + ": bounds are not numbers";
      return false;
    }
    a->kind = K::kClamp;
    a->alpha = static_cast<float>(lo);
    a->beta = static_cast<float>(hi);
  } else if (kernel == "aten::gelu.out" && n == 3 && op.args[1]->isString()) {
    const auto text = op.args[1]->toString();
    const std::string approximate(text.data(), text.size());
    if (approximate != "none" && approximate != "tanh") {
      decline->reason = "gelu: approximate='" + approximate + "'";
      return false;
    }
    a->kind = approximate == "none" ? K::kGeluErf : K::kGeluTanh;
  } else if (kernel == "aten::leaky_relu.out" && n == 3 && scalar(1, 0.01, &lo)) {
    a->kind = K::kLeakyRelu;
    a->alpha = static_cast<float>(lo);
  } else if (kernel == "aten::elu.out" && n == 5 && scalar(1, 1.0, &lo)) {
    double scale = 0.0;
    double input_scale = 0.0;
    if (!scalar(2, 1.0, &scale) || !scalar(3, 1.0, &input_scale) || scale != 1.0 ||
        input_scale != 1.0) {
      decline->reason = "elu: only scale = input_scale = 1";
      return false;
    }
    a->kind = K::kElu;
    a->alpha = static_cast<float>(lo);
  } else if (kernel == "aten::neg.out" && n == 2) {
    a->kind = K::kLinear;
    a->alpha = -1.0f;
  } else if (kernel == "aten::rsqrt.out" && n == 2) {
    a->kind = K::kPow;
    a->alpha = -0.5f;
  } else if (kernel == "aten::pow.Tensor_Scalar_out" && n == 3 && scalar(1, 1.0, &lo)) {
    // Exact forms for the exponents models use; x ** 2 is x * x in torch too.
    a->kind = lo == 2.0 ? K::kSquare : lo == 0.5 ? K::kSqrt : lo == 1.0 ? K::kLinear : K::kPow;
    a->alpha = lo == 1.0 ? 1.0f : static_cast<float>(lo);
  } else if ((kernel == "aten::mul.Scalar_out" || kernel == "aten::div.Scalar_out") && n == 3 &&
             scalar(1, 1.0, &lo)) {
    a->kind = K::kLinear;
    a->alpha = static_cast<float>(kernel == "aten::mul.Scalar_out" ? lo : 1.0 / lo);
  } else if ((kernel == "aten::add.Scalar_out" || kernel == "aten::sub.Scalar_out") && n == 4 &&
             scalar(1, 0.0, &lo) && scalar(2, 1.0, &hi)) {
    a->kind = K::kLinear;
    a->alpha = 1.0f;
    a->beta = static_cast<float>((kernel == "aten::add.Scalar_out" ? lo : -lo) * hi);
  } else if (kernel == "aten::rsub.Scalar_out" && n == 4 && scalar(1, 0.0, &lo) &&
             scalar(2, 1.0, &hi)) {  // other - alpha * self
    a->kind = K::kLinear;
    a->alpha = static_cast<float>(-hi);
    a->beta = static_cast<float>(lo);
  } else {
    decline->reason = "no oneDNN activation for " + kernel + " with these arguments";
    return false;
  }
  const onednn::Support support = onednn::supports_activation(*a);
  if (!support.ok) {
    decline->reason = support.reason;
    return false;
  }
  return true;
}

}  // namespace

Error bind_eltwise(const OpBinding& op, OptimizedSession& session,
                   std::unique_ptr<BoundKernel>* out, Decline* decline) {
  if (op.args.size() < 3) {
    decline->reason = std::string(op.kernel) + ": unexpected arguments";
    return Error::NotSupported;
  }
  const Tensor* input = tensor_arg(op, 0);
  const Tensor* output = tensor_arg(op, op.args.size() - 2);
  if (!is_f32(input) || !is_f32(output)) {
    decline->reason = std::string(op.kernel) + ": only float32 input and output";
    return Error::NotSupported;
  }
  if (dims_of(*input) != dims_of(*output) || input->numel() == 0) {
    decline->reason = std::string(op.kernel) + ": input and output of one non-empty shape only";
    return Error::NotSupported;
  }
  onednn::Activation activation;
  if (!parse_activation(op, &activation, decline)) return Error::NotSupported;
  auto kernel = std::make_unique<EltwiseKernel>(activation, input,
                                                &op.args[op.args.size() - 2]->toTensor());
  return bind_prepared(std::move(kernel), session, out);
}

// aten::add.out / sub.out (self, other, *, alpha, out), aten::mul.out / div.out (self, other,
// *, out): float32 tensors with numpy broadcasting, alpha 1.
Error bind_binary(const OpBinding& op, onednn::BinaryOp kind, const char* what,
                  OptimizedSession& session, std::unique_ptr<BoundKernel>* out, Decline* decline) {
  const bool has_alpha = kind == onednn::BinaryOp::kAdd || kind == onednn::BinaryOp::kSub;
  const size_t out_index = has_alpha ? 3 : 2;
  const Tensor* a = tensor_arg(op, 0);
  const Tensor* b = tensor_arg(op, 1);
  Tensor* output = op.args.size() > out_index && op.args[out_index]->isTensor()
                       ? &op.args[out_index]->toTensor()
                       : nullptr;
  if (!is_f32(a) || !is_f32(b) || !is_f32(output)) {
    decline->reason = std::string(what) + ": only float32 tensors";
    return Error::NotSupported;
  }
  if (has_alpha) {
    double alpha = 0.0;
    if (!scalar_of(op.args[2], &alpha) || alpha != 1.0) {
      decline->reason = std::string(what) + ": alpha must be 1";
      return Error::NotSupported;
    }
  }
  std::vector<int64_t> out_dims = dims_of(*output);
  if (a->dim() > output->dim() || b->dim() > output->dim()) {
    decline->reason = std::string(what) + ": an operand has a higher rank than the output";
    return Error::NotSupported;
  }
  auto extended = [&](const Tensor* t) {
    std::vector<int64_t> dims = dims_of(*t);
    dims.insert(dims.begin(), out_dims.size() - dims.size(), 1);
    return dims;
  };
  onednn::Support support = onednn::supports_binary(kind, extended(a), extended(b), out_dims);
  if (!support.ok) {
    decline->reason = support.reason;
    return Error::NotSupported;
  }
  auto kernel = std::make_unique<BinaryKernel>(kind, a, b, output);
  return bind_prepared(std::move(kernel), session, out);
}

}  // namespace optimized
}  // namespace cpu
}  // namespace et_cpu_plugin
