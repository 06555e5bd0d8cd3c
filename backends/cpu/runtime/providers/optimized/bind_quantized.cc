// Quantized binders: the delegate's int8 ops (et_cpu_quant::conv2d / linear / max_pool2d / add,
// onednn/quantized_kernels.cc), which bind only checks and finalize prepares once the layouts are
// known (QuantizedChainKernel), and the per-tensor quantize / dequantize loops
// (kernels/quantize_convert.h), and torchao's 8da4w linear (et_cpu_quant::linear_8da) on our
// VNNI / AVX2 kernel (kernels/linear_8da_vnni.h).
#include "backends/cpu/runtime/providers/optimized/binders.h"

#include <cmath>
#include <stdexcept>

#include "backends/cpu/runtime/linear_8da.h"
#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/common/work_pool.h"
#include "backends/cpu/runtime/providers/optimized/kernels/linear_8da_vnni.h"
#include "backends/cpu/runtime/providers/optimized/kernels/quantize_convert.h"
#include "backends/cpu/runtime/providers/optimized/onednn/quantized_kernels.h"

namespace et_cpu_plugin {
namespace cpu {
namespace optimized {

namespace {

// An int8 op (quantized_kernels.cc) taking part in the layout chaining: bind only checks it,
// finalize binds it with its int8 input / output NHWC where only layout-aware int8 kernels touch
// them, so the reorders between oneDNN's NHWC int8 kernels and NCHW buffers go away.
class QuantizedChainKernel final : public OptimizedKernel {
 public:
  explicit QuantizedChainKernel(const OpBinding& op)
      : args_(op.args.begin(), op.args.end()), kernel_name_(op.kernel), op_(op) {
    op_.args = Span<EValue*>(args_.data(), args_.size());
    op_.kernel = kernel_name_.c_str();
    op_.decline_reason = nullptr;
    op_.fused_steps = nullptr;
    op_.session = nullptr;
    input_ = &args_[0]->toTensor();
    output_ = &args_[args_.size() - 2]->toTensor();
    const int second = quantized_second_input(kernel_name_);
    if (second >= 0) second_ = &args_[static_cast<size_t>(second)]->toTensor();
  }
  Error run(KernelRuntimeContext& context) override {
    if (!kernel_) {  // finalize did not prepare it (never expected)
      context.fail(Error::Internal);
      return Error::Internal;
    }
    return kernel_->run(context);
  }
  void prepare(onednn::Provider& provider, const InChannelsLast& channels_last) override {
    std::string reason;
    std::unique_ptr<BoundKernel> fresh;
    if (bind_quantized(op_, &fresh, &reason, channels_last(impl_of(input_)),
                       channels_last(impl_of(output_)), provider.work_pool(),
                       second_ != nullptr && channels_last(impl_of(second_))) != Error::Ok) {
      throw std::runtime_error("int8 kernel: " + reason);
    }
    kernel_ = std::move(fresh);
  }
  std::vector<const executorch::aten::TensorImpl*> plain_reads() const override {
    if (quantized_output_chainable(kernel_name_) || quantized_layout_follows_input(kernel_name_)) {
      return {};
    }
    return {impl_of(input_)};  // the linear reads its 2-D input plain
  }
  const executorch::aten::TensorImpl* chainable_output() const override {
    return quantized_output_chainable(kernel_name_) ? impl_of(output_) : nullptr;
  }
  std::string implementation() const override {
    return kernel_ ? quantized_implementation(*kernel_) : "";
  }
  // The int8 max pool's / add's output may be channels-last when all its inputs are.
  const executorch::aten::TensorImpl* chainable_output_after(
      const Chained& chained) const override {
    if (quantized_layout_follows_input(kernel_name_)) {
      const bool inputs = chained.count(impl_of(input_)) > 0 &&
                          (second_ == nullptr || chained.count(impl_of(second_)) > 0);
      return inputs ? impl_of(output_) : nullptr;
    }
    return chainable_output();
  }

 private:
  std::vector<EValue*> args_;
  std::string kernel_name_;
  OpBinding op_;
  std::unique_ptr<BoundKernel> kernel_;
  const Tensor* input_ = nullptr;
  const Tensor* second_ = nullptr;  // the add's second operand
  const Tensor* output_ = nullptr;
};

// et_cpu_quant::linear_8da.out on the weights packed at bind (kernels/linear_8da_vnni.h).
class Linear8daKernel final : public OptimizedKernel {
 public:
  Linear8daKernel(std::shared_ptr<const onednn::Linear8daPacked> packed, onednn::Linear8daIsa isa,
                  const Tensor* input, Tensor* output)
      : gemm_(std::move(packed), isa), input_(input), output_(output) {}

  void prepare(onednn::Provider& provider, const InChannelsLast&) override {
    // The provider's pool (WorkPool::shared of its threads); without work sharing (OpenMP
    // mode) the same shared pool of as many threads, held here.
    own_pool_.reset();
    pool_ = provider.work_pool();
    if (pool_ == nullptr && provider.num_threads() > 1) {
      own_pool_ = onednn::WorkPool::shared(provider.num_threads());
      pool_ = own_pool_.get();
    }
  }
  // The rows from the input at each run (its quantized rows' buffers grow to the largest count);
  // prepare reads no size.
  bool resizable() const override { return true; }
  std::vector<const executorch::aten::TensorImpl*> plain_reads() const override {
    return {impl_of(input_)};
  }
  size_t staging_bytes() const override { return gemm_.weights_bytes(); }
  std::string implementation() const override {
    return std::string("linear_8da:") + onednn::linear_8da_isa_name(gemm_.isa());
  }
  Error run(KernelRuntimeContext&) override {
    const int64_t k = input_->size(input_->dim() - 1);
    const int64_t rows = input_->numel() / k;
    const int64_t n = output_->size(output_->dim() - 1);
    if (static_cast<int64_t>(output_->numel()) != rows * n) {
      return report_error(Error::InvalidArgument,
                          "linear_8da: output holds %zd values, expected %lld",
                          static_cast<ssize_t>(output_->numel()),
                          static_cast<long long>(rows * n));
    }
    return guarded("linear_8da", [&] {
      gemm_.run(input_->const_data_ptr<float>(), rows, output_->mutable_data_ptr<float>(), pool_);
    });
  }

 private:
  onednn::Linear8daGemm gemm_;
  const Tensor* input_;
  Tensor* output_;
  onednn::WorkPool* pool_ = nullptr;
  std::shared_ptr<onednn::WorkPool> own_pool_;
};

}  // namespace

// et_cpu_quant::linear_8da.out(input, weight, weight_scales, weight_zero_points?, bias?,
// group_size, weight_bits, *, out): the constants packed once here. The arguments are read and
// checked by the scalar kernel's `read_linear_8da_args` (runtime/linear_8da.h). Anything unusual
// (bad arguments, a group size that is not a multiple of 8, no AVX2) is declined: the Reference
// provider's scalar kernel runs it, or reports what is wrong.
Error bind_linear_8da(const OpBinding& op, OptimizedSession& session,
                      std::unique_ptr<BoundKernel>* out, Decline* decline) {
  auto no = [&](const std::string& why) {
    decline->reason = "linear_8da: " + why;
    return Error::NotSupported;
  };
  const onednn::Linear8daIsa isa = onednn::linear_8da_isa();
  if (isa == onednn::Linear8daIsa::kNone) {
    return no("no AVX2 / AVX-512 VNNI, or switched off (ET_CPU_LINEAR_8DA, ET_CPU_LINEAR_8DA_ISA)");
  }
  cpu::Linear8daArgs args{};
  if (const char* why = cpu::read_linear_8da_args(op, &args)) return no(why);
  onednn::Linear8daParams params;
  params.k = args.w.cols;
  params.n = args.w.rows;
  params.group = args.w.group;
  params.bits = args.w.bits;
  std::string reason;
  if (!onednn::linear_8da_supports(params, &reason)) return no(reason);
  if (!is_constant(op, 1) || !is_constant(op, 2) || (args.w.zeros && !is_constant(op, 3)) ||
      (args.bias && !is_constant(op, 4))) {
    return no("weight, scales, zero points and bias must be constants");
  }
  auto packed = onednn::cached_linear_8da_weights(
      session.provider().weight_cache(), params, args.w.data, args.w.scales, args.w.zeros,
      args.bias ? args.bias->const_data_ptr<float>() : nullptr);
  return bind_prepared(
      std::make_unique<Linear8daKernel>(std::move(packed), isa, args.input, args.output), session,
      out);
}

// et_cpu_quant::{conv2d,linear,max_pool2d,add}.out: checked only; finalize binds it (prepare)
// once the layouts are known.
Error bind_int8(const OpBinding& op, OptimizedSession& session, std::unique_ptr<BoundKernel>* out,
                Decline* decline) {
  const Error error = check_quantized(op, &decline->reason);
  if (error == Error::Ok) {
    auto kernel = std::make_unique<QuantizedChainKernel>(op);
    session.add_unprepared(kernel.get());
    *out = std::move(kernel);
  }
  return error;
}

// quantized_decomposed::quantize_per_tensor.out (input, scale, zero_point, quant_min, quant_max,
// dtype, *, out) and dequantize_per_tensor.out (the same, *, out_dtype, out) on our own loops
// (quantize_convert.h): float32 <-> int8 / uint8 over a range within the dtype, a scale that is
// a float32 (the loops multiply in float32, as the portable kernels do).
// ET_CPU_ONEDNN_QUANTIZE_LOOPS=0 declines them (the portable kernels run: the A/B).
Error bind_quantize_convert(const OpBinding& op, bool quantize, OptimizedSession& session,
                            std::unique_ptr<BoundKernel>* out, Decline* decline) {
  if (!onednn::kernel_switched_on("ET_CPU_ONEDNN_QUANTIZE_LOOPS")) {
    decline->reason = "quantize/dequantize loops switched off (ET_CPU_ONEDNN_QUANTIZE_LOOPS=0)";
    return Error::NotSupported;
  }
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = out_arg(op);
  const Tensor* quantized = quantize ? output : input;
  const Tensor* real = quantize ? input : output;
  double scale = 0.0, zero_point = 0.0, low = 0.0, high = 0.0;
  const bool scalars = schema_args(op) >= 7 && scalar_of(op.args[1], &scale) &&
                       scalar_of(op.args[2], &zero_point) && scalar_of(op.args[3], &low) &&
                       scalar_of(op.args[4], &high);
  const bool is_signed = has_dtype(quantized, ScalarType::Char);
  const double type_low = is_signed ? -128 : 0, type_high = is_signed ? 127 : 255;
  if (!scalars || !has_dtype(real, ScalarType::Float) ||
      !(is_signed || has_dtype(quantized, ScalarType::Byte)) ||
      input->numel() != output->numel() || !(type_low <= low && low <= high && high <= type_high) ||
      !(scale > 0.0) || static_cast<double>(static_cast<float>(scale)) != scale ||
      std::abs(zero_point) > 1e6 || zero_point != std::floor(zero_point)) {
    decline->reason = "quantize/dequantize: float32 <-> int8/uint8 within the dtype's range, a "
                      "float32 scale, an integer zero point";
    return Error::NotSupported;
  }
  onednn::TensorQuantization q;
  q.scale = static_cast<float>(scale);
  q.zero_point = static_cast<int32_t>(zero_point);
  q.quant_min = static_cast<int32_t>(low);
  q.quant_max = static_cast<int32_t>(high);
  q.is_signed = is_signed;
  const int64_t n = input->numel();
  if (quantize) {
    return bind_loop(session, out, "quantize", {input}, [=] {
      onednn::quantize_per_tensor(q, input->const_data_ptr<float>(), n,
                                  output->mutable_data_ptr());
      return Error::Ok;
    });
  }
  return bind_loop(session, out, "dequantize", {input}, [=] {
    onednn::dequantize_per_tensor(q, input->const_data_ptr(), n,
                                  output->mutable_data_ptr<float>());
    return Error::Ok;
  });
}

}  // namespace optimized
}  // namespace cpu
}  // namespace et_cpu_plugin
