// Binders of the ops on our own loops that never call oneDNN: reductions over adjacent dims
// (amax / amin / argmax / argmin / any: kernels/reductions.h), attention-mask ops (comparison
// with a scalar, logical_not, where: kernels/mask_ops.h) and the embedding gather
// (kernels/embedding.h), each a LoopKernel; amax / amin over an activation's spatial dims a
// SpatialMaxKernel, which also reads a channels-last input.
#include "backends/cpu/runtime/providers/optimized/binders.h"

#include <algorithm>

#include "backends/cpu/runtime/error_report.h"
#include "backends/cpu/runtime/providers/optimized/kernels/embedding.h"
#include "backends/cpu/runtime/providers/optimized/kernels/reductions.h"

namespace et_cpu_plugin {
namespace cpu {
namespace optimized {

namespace {

// The dims a reduction's `dim` argument names: an int, an int list, or None (every dim).
bool reduction_dims(const EValue* value, std::vector<int64_t>* dims) {
  dims->clear();
  if (value->isNone()) return true;
  if (value->isInt()) {
    dims->push_back(value->toInt());
    return true;
  }
  if (!value->isIntList()) return false;
  for (int64_t d : value->toIntList()) dims->push_back(d);
  return true;
}

// amax / amin over every spatial dim of an activation of rank 3-5 ([N, C, spatial...]: the text
// CNN's max over time after each Conv1d), which reads its input in whichever layout the session
// keeps it: channels-last it lies as [N, spatial..., C], the reduction over the middle run with
// the channels innermost (16 channels a vector). So the convolution before it writes its
// channels-last output as is, with no conversion to plain behind it (oneDNN's reorder).
// ET_CPU_AMAX_CHANNELS_LAST=0 (read at bind): the input is read plain, as every other loop.
class SpatialMaxKernel final : public OptimizedKernel {
 public:
  SpatialMaxKernel(const Tensor* input, Tensor* output, bool minimum,
                   const onednn::ReductionShape& plain)
      : input_(input), output_(output), minimum_(minimum), plain_(plain), shape_(plain) {}

  // Whether `op` reduces every spatial dim of a rank 3-5 input (the dims normalized, sorted).
  static bool covers_spatial_dims(const Tensor& input, std::vector<int64_t> dims) {
    const int64_t rank = input.dim();
    if (rank < 3 || rank > 5 || dims.size() != static_cast<size_t>(rank - 2)) return false;
    for (int64_t& d : dims) d = d < 0 ? d + rank : d;
    std::sort(dims.begin(), dims.end());
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] != static_cast<int64_t>(i) + 2) return false;
    }
    return true;
  }

  void prepare(onednn::Provider&, const InChannelsLast& channels_last) override {
    channels_last_ = channels_last(impl_of(input_));
    shape_ = plain_;
    if (channels_last_) {
      const std::vector<int64_t> sizes = dims_of(*input_);
      shape_.outer = sizes[0];
      shape_.inner = sizes[1];
      shape_.extent = 1;
      for (size_t d = 2; d < sizes.size(); ++d) shape_.extent *= sizes[d];
    }
  }
  std::string implementation() const override {
    return std::string("loops:") + (minimum_ ? "amin" : "amax") +
           (channels_last_ ? " (channels-last input)" : "");
  }
  Error run(KernelRuntimeContext&) override {
    onednn::reduce_max(shape_, minimum_, input_->const_data_ptr<float>(),
                       output_->mutable_data_ptr<float>());
    return Error::Ok;
  }

 private:
  const Tensor* input_;
  Tensor* output_;
  bool minimum_;
  onednn::ReductionShape plain_;
  onednn::ReductionShape shape_;
  bool channels_last_ = false;
};

}  // namespace

// aten::{eq,ne,lt,le,gt,ge}.Scalar_out (self, other, *, out): float32 self, bool out.
Error bind_compare_scalar(const OpBinding& op, onednn::Compare compare, OptimizedSession& session,
                          std::unique_ptr<BoundKernel>* out, Decline* decline) {
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = out_arg(op);
  double scalar = 0.0;
  if (schema_args(op) != 3 || !is_f32(input) || !has_dtype(output, ScalarType::Bool) ||
      !scalar_of(op.args[1], &scalar) || output->numel() != input->numel()) {
    decline->reason = "compare: only float32 self with a number, bool out of the same size";
    return Error::NotSupported;
  }
  // torch compares in the tensor's dtype: the scalar rounded to float first.
  const float value = static_cast<float>(scalar);
  return bind_loop(session, out, "compare", {input}, [=] {
    onednn::compare_scalar(compare, input->const_data_ptr<float>(), value,
                           output->mutable_data_ptr<bool>(), input->numel());
    return Error::Ok;
  }, LoopKernel::Sizes::kAtRun);
}

// aten::logical_not.out (self, *, out): bool to bool.
Error bind_logical_not(const OpBinding& op, OptimizedSession& session,
                       std::unique_ptr<BoundKernel>* out, Decline* decline) {
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = out_arg(op);
  if (schema_args(op) != 2 || !has_dtype(input, ScalarType::Bool) ||
      !has_dtype(output, ScalarType::Bool) || output->numel() != input->numel()) {
    decline->reason = "logical_not: only bool to bool of the same size";
    return Error::NotSupported;
  }
  return bind_loop(session, out, "logical_not", {input}, [=] {
    onednn::logical_not(input->const_data_ptr<bool>(), output->mutable_data_ptr<bool>(),
                        input->numel());
    return Error::Ok;
  }, LoopKernel::Sizes::kAtRun);
}

// aten::where.self_out (condition, self, other, *, out): bool condition, float32 operands and
// out, numpy broadcasting.
Error bind_where(const OpBinding& op, OptimizedSession& session, std::unique_ptr<BoundKernel>* out,
                 Decline* decline) {
  const Tensor* condition = tensor_arg(op, 0);
  const Tensor* a = tensor_arg(op, 1);
  const Tensor* b = tensor_arg(op, 2);
  Tensor* output = out_arg(op);
  if (schema_args(op) != 4 || !has_dtype(condition, ScalarType::Bool) || !is_f32(a) ||
      !is_f32(b) || !is_f32(output) || output->numel() == 0) {
    decline->reason = "where: only a bool condition and float32 operands, a non-empty output";
    return Error::NotSupported;
  }
  std::string error;
  onednn::WherePlan plan = onednn::WherePlan::make(dims_of(*condition), dims_of(*a), dims_of(*b),
                                                   dims_of(*output), &error);
  if (!error.empty()) {
    decline->reason = error;
    return Error::NotSupported;
  }
  // Shared by the body and the replan that makes it again for a graph resized in place.
  auto made = std::make_shared<onednn::WherePlan>(std::move(plan));
  auto replan = [=] {
    std::string why;
    *made = onednn::WherePlan::make(dims_of(*condition), dims_of(*a), dims_of(*b),
                                    dims_of(*output), &why);
    if (!why.empty()) throw onednn::ProviderError("where: " + why);
  };
  return bind_loop(session, out, "where", {condition, a, b}, [=] {
    made->run(condition->const_data_ptr<bool>(), a->const_data_ptr<float>(),
              b->const_data_ptr<float>(), output->mutable_data_ptr<float>());
    return Error::Ok;
  }, LoopKernel::Sizes::kReplan, replan);
}

// amax / amin (self, dim[], keepdim, *, out), argmax / argmin (self, dim?, keepdim, *, out),
// any (self, dim, keepdim, *, out), any.dims (self, dim[]?, keepdim, *, out), any.all_out
// (self, *, out): over adjacent dims; keepdim does not change the output's bytes.

Error bind_reduction(const OpBinding& op, Reduction kind, OptimizedSession& session,
                     std::unique_ptr<BoundKernel>* out, Decline* decline) {
  const Tensor* input = tensor_arg(op, 0);
  Tensor* output = out_arg(op);
  const bool any = kind == Reduction::kAny;
  const bool arg = kind == Reduction::kArgmax || kind == Reduction::kArgmin;
  const ScalarType in_type = any ? ScalarType::Bool : ScalarType::Float;
  const ScalarType out_type = any ? ScalarType::Bool : arg ? ScalarType::Long : ScalarType::Float;
  std::vector<int64_t> dims;
  const bool dims_ok = schema_args(op) == 2 || (schema_args(op) == 4 &&
                                                 reduction_dims(op.args[1], &dims));
  if (!has_dtype(input, in_type) || !has_dtype(output, out_type) || !dims_ok) {
    decline->reason = any ? "any: only bool to bool" : arg ? "argmax/argmin: only float32 in"
                                                           : "amax/amin: only float32";
    return Error::NotSupported;
  }
  if (arg && dims.empty() && !op.args[1]->isNone()) {
    decline->reason = "argmax/argmin: one dim or None";
    return Error::NotSupported;
  }
  std::string error;
  const onednn::ReductionShape shape =
      onednn::ReductionShape::over(dims_of(*input), dims, &error);
  if (error.empty() && output->numel() != shape.outputs()) {
    error = "reduction: output size differs from the reduced input's";
  }
  if (!error.empty()) {
    decline->reason = error;
    return Error::NotSupported;
  }
  if (any) {
    auto sized = std::make_shared<onednn::ReductionShape>(shape);
    auto replan = [=] {  // a graph resized in place: the shape at the new sizes
      std::string why;
      *sized = onednn::ReductionShape::over(dims_of(*input), dims, &why);
      if (why.empty() && output->numel() != sized->outputs()) why = "output size differs";
      if (!why.empty()) throw onednn::ProviderError("any: " + why);
    };
    return bind_loop(session, out, "any", {input}, [=] {
      onednn::reduce_any(*sized, input->const_data_ptr<bool>(), output->mutable_data_ptr<bool>());
      return Error::Ok;
    }, LoopKernel::Sizes::kReplan, replan);
  }
  const bool minimum = kind == Reduction::kMin || kind == Reduction::kArgmin;
  if (arg) {
    return bind_loop(session, out, "argmax", {input}, [=] {
      onednn::reduce_argmax(shape, minimum, input->const_data_ptr<float>(),
                            output->mutable_data_ptr<int64_t>());
      return Error::Ok;
    });
  }
  if (SpatialMaxKernel::covers_spatial_dims(*input, dims) &&
      onednn::kernel_switched_on("ET_CPU_AMAX_CHANNELS_LAST")) {
    return bind_prepared(std::make_unique<SpatialMaxKernel>(input, output, minimum, shape),
                         session, out);
  }
  return bind_loop(session, out, "amax", {input}, [=] {
    onednn::reduce_max(shape, minimum, input->const_data_ptr<float>(),
                       output->mutable_data_ptr<float>());
    return Error::Ok;
  });
}

// aten::embedding.out (weight, indices, padding_idx, scale_grad_by_freq, sparse, *, out):
// float32 [rows, width] table, int64 or int32 ids of any shape; the other arguments only
// matter for gradients. Every id is checked against the rows before any is read.
Error bind_embedding(const OpBinding& op, OptimizedSession& session,
                     std::unique_ptr<BoundKernel>* out, Decline* decline) {
  const Tensor* table = tensor_arg(op, 0);
  const Tensor* ids = tensor_arg(op, 1);
  Tensor* output = out_arg(op);
  const bool long_ids = has_dtype(ids, ScalarType::Long);
  if (schema_args(op) != 6 || !is_f32(table) || table->dim() != 2 ||
      !(long_ids || has_dtype(ids, ScalarType::Int)) || !is_f32(output) ||
      output->numel() != ids->numel() * table->size(1)) {
    decline->reason = "embedding: only a float32 [rows, width] table, int64/int32 ids";
    return Error::NotSupported;
  }
  const std::string name = op.op_name != nullptr ? op.op_name : "embedding";
  const int64_t rows = table->size(0);
  const int64_t width = table->size(1);
  const bool prefetch = onednn::embedding_prefetch_enabled();
  return bind_loop(session, out, "embedding", {table, ids}, [=] {
    const float* data = table->const_data_ptr<float>();
    float* to = output->mutable_data_ptr<float>();
    const int64_t count = ids->numel();
    const int64_t bad =
        long_ids ? onednn::gather_rows(data, rows, width, ids->const_data_ptr<int64_t>(), count,
                                       to, prefetch)
                 : onednn::gather_rows(data, rows, width, ids->const_data_ptr<int32_t>(), count,
                                       to, prefetch);
    if (bad < 0) return Error::Ok;
    const long long id = long_ids ? static_cast<long long>(ids->const_data_ptr<int64_t>()[bad])
                                  : static_cast<long long>(ids->const_data_ptr<int32_t>()[bad]);
    return report_error(Error::InvalidArgument,
                        "CpuBackend: %s: token id %lld at position %lld is outside the "
                        "embedding table's %lld rows",
                        printable_text(name.c_str()).c_str(), id, static_cast<long long>(bad),
                        static_cast<long long>(rows));
  }, LoopKernel::Sizes::kAtRun);
}

}  // namespace optimized
}  // namespace cpu
}  // namespace et_cpu_plugin
