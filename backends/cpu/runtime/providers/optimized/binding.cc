// The binders' shared helpers (see binding.h): argument readers, fusable steps as post-ops,
// binding a prepared kernel, LoopKernel, plans per image (ImageSizes).
#include "backends/cpu/runtime/providers/optimized/binding.h"

#include <cfloat>
#include <cmath>

#include "backends/cpu/runtime/providers/optimized/common/switches.h"

namespace et_cpu_plugin {
namespace cpu {
namespace optimized {

const Tensor* tensor_arg(Span<EValue*> args, size_t index) {
  if (index >= args.size() || !args[index]->isTensor()) return nullptr;
  return &args[index]->toTensor();
}

const Tensor* tensor_arg(const OpBinding& op, size_t index) {
  return tensor_arg(op.args, index);
}

bool is_f32(const Tensor* tensor) {
  return tensor != nullptr && tensor->scalar_type() == ScalarType::Float;
}

bool is_constant(const OpBinding& op, size_t index) {
  return op.arg_is_constant != nullptr && op.arg_is_constant[index];
}

std::vector<int64_t> dims_of(const Tensor& tensor) {
  std::vector<int64_t> dims;
  for (ssize_t d = 0; d < tensor.dim(); ++d) dims.push_back(tensor.size(d));
  return dims;
}

bool scalar_of(const EValue* value, double* out) {
  if (value->isInt()) {
    *out = static_cast<double>(value->toInt());
    return true;
  }
  if (value->isDouble()) {
    *out = value->toDouble();
    return true;
  }
  return false;
}

bool int_list(const EValue* value, size_t rank, std::vector<int64_t>* out) {
  if (!value->isIntList()) return false;
  auto list = value->toIntList();
  if (list.size() != 1 && list.size() != rank) return false;
  out->clear();
  for (size_t i = 0; i < rank; ++i) out->push_back(list[list.size() == 1 ? 0 : i]);
  return true;
}

bool activation_of_step(const FusableStep& step, onednn::Activation* out) {
  using E = FusableStep::Eltwise;
  using K = onednn::Activation::Kind;
  onednn::Activation a;
  switch (step.eltwise) {
    case E::kSigmoid:
      a.kind = K::kSigmoid;
      break;
    case E::kTanh:
      a.kind = K::kTanh;
      break;
    case E::kHardswish:
      a.kind = K::kHardswish;
      break;
    case E::kHardsigmoid:
      a.kind = K::kHardsigmoid;
      break;
    case E::kSilu:
      a.kind = K::kSilu;
      break;
    case E::kGelu:
      a.kind = K::kGeluErf;
      break;
    case E::kGeluTanh:
      a.kind = K::kGeluTanh;
      break;
    case E::kLeakyRelu:
      a.kind = K::kLeakyRelu;
      a.alpha = static_cast<float>(step.alpha);
      break;
    case E::kElu:
      a.kind = K::kElu;
      a.alpha = static_cast<float>(step.alpha);
      break;
    default:
      return false;
  }
  if (!onednn::supports_activation(a).ok) return false;
  *out = a;
  return true;
}

bool append_post_op(const FusableStep& step, onednn::PostOps* post, const Tensor** residual) {
  switch (step.kind) {
    case FusableStep::Kind::kRelu:
      post->push_back(onednn::PostOp::relu());
      return true;
    case FusableStep::Kind::kClamp: {
      if (std::isnan(step.min) || std::isnan(step.max)) return false;
      const float lo = step.min < -FLT_MAX ? -FLT_MAX : static_cast<float>(step.min);
      const float hi = step.max > FLT_MAX ? FLT_MAX : static_cast<float>(step.max);
      if (lo == 0.0f && hi == FLT_MAX) {
        post->push_back(onednn::PostOp::relu());
      } else {
        post->push_back(onednn::PostOp::clamp(lo, hi));
      }
      return true;
    }
    case FusableStep::Kind::kAdd:
      if (*residual != nullptr || step.residual == nullptr || !step.residual->isTensor()) {
        return false;
      }
      *residual = &step.residual->toTensor();
      post->push_back(onednn::PostOp::add());
      return true;
    case FusableStep::Kind::kConv:
      return false;  // a convolution is no post-op (see bind_block)
    case FusableStep::Kind::kBroadcastMul:
      return false;  // changes the shape (see bind_squeeze_excite)
    case FusableStep::Kind::kEltwise: {
      onednn::Activation activation;
      if (!activation_of_step(step, &activation)) return false;
      post->push_back(onednn::PostOp::act(activation));
      return true;
    }
  }
  return false;
}

bool post_ops_for(const OpBinding& op, size_t count, onednn::PostOps* post,
                  const Tensor** residual) {
  post->clear();
  *residual = nullptr;
  for (size_t s = 0; s < count; ++s) {
    if (!append_post_op(op.fusable[s], post, residual)) return false;
  }
  return true;
}

Tensor* final_output(const OpBinding& op, size_t out_index, size_t fused) {
  if (fused > 0) return &op.fusable[fused - 1].output->toTensor();
  return &op.args[out_index]->toTensor();
}

const executorch::aten::TensorImpl* impl_of(const Tensor* tensor) {
  return tensor ? tensor->unsafeGetTensorImpl() : nullptr;
}

onednn::Layout session_layout(const OptimizedKernel::InChannelsLast& channels_last,
                              const Tensor* t) {
  return channels_last(impl_of(t)) ? onednn::Layout::channels_last(dims_of(*t))
                                   : onednn::Layout::plain(dims_of(*t));
}

bool has_dtype(const Tensor* tensor, ScalarType dtype) {
  return tensor != nullptr && tensor->scalar_type() == dtype;
}

Tensor* out_arg(const OpBinding& op) {
  if (op.args.size() < 2) return nullptr;
  EValue* out = op.args[op.args.size() - 2];
  return out->isTensor() ? &out->toTensor() : nullptr;
}

size_t schema_args(const OpBinding& op) { return op.args.empty() ? 0 : op.args.size() - 1; }

Error bind_prepared(std::unique_ptr<OptimizedKernel> kernel, OptimizedSession& session,
                    std::unique_ptr<BoundKernel>* out) {
  session.add_checked(kernel.get());
  *out = std::move(kernel);
  return Error::Ok;
}

std::vector<const executorch::aten::TensorImpl*> LoopKernel::plain_reads() const {
  std::vector<const executorch::aten::TensorImpl*> reads;
  for (const Tensor* t : reads_) reads.push_back(impl_of(t));
  return reads;
}

Error bind_loop(OptimizedSession& session, std::unique_ptr<BoundKernel>* out, std::string what,
                std::vector<const Tensor*> reads, LoopKernel::Body body, LoopKernel::Sizes sizes,
                LoopKernel::Replan replan) {
  return bind_prepared(std::make_unique<LoopKernel>(std::move(what), std::move(reads),
                                                    std::move(body), sizes, std::move(replan)),
                       session, out);
}

bool plans_per_image(const OptimizedSession& session) {
  return session.sizes_vary() && !session.is_shape_plan() && resize_in_place_enabled() &&
         onednn::kernel_switched_on("ET_CPU_CONV_PER_IMAGE");
}

ImageSizes::ImageSizes(std::vector<const Tensor*> tensors) : tensors_(std::move(tensors)) {
  for (const Tensor* t : tensors_) {
    std::vector<int64_t> dims = t != nullptr ? dims_of(*t) : std::vector<int64_t>{};
    if (!dims.empty()) dims.erase(dims.begin());
    sizes_.push_back(std::move(dims));
  }
}

bool ImageSizes::current() const {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor* t = tensors_[i];
    if (t == nullptr) continue;
    if (static_cast<size_t>(t->dim()) != sizes_[i].size() + 1) return false;
    for (size_t d = 0; d < sizes_[i].size(); ++d) {
      if (t->size(static_cast<ssize_t>(d + 1)) != sizes_[i][d]) return false;
    }
  }
  return true;
}

void ImageSizes::check(const char* what) const {
  if (!current()) {
    throw onednn::ProviderError(std::string(what) +
                                ": prepared per image, only the batch may change (an image "
                                "size changed)");
  }
}

std::vector<int64_t> one_image(std::vector<int64_t> dims) {
  if (!dims.empty()) dims[0] = 1;
  return dims;
}

}  // namespace optimized
}  // namespace cpu
}  // namespace et_cpu_plugin
