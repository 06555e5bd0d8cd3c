#include "backends/cpu/runtime/packed_weight.h"

#include "backends/cpu/runtime/argument_checks.h"

namespace et_cpu_plugin {
namespace cpu {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::runtime::EValue;

const char* read_packed_weight(const EValue* weight, const EValue* scales, const EValue* zeros,
                               const EValue* group, const EValue* bits, PackedWeight* w) {
  if (!weight->isTensor() || !scales->isTensor()) return "weight and scales must be tensors";
  if (!zeros->isTensor() && !zeros->isNone()) return "zero points must be a tensor or None";
  if (!group->isInt() || !bits->isInt()) return "group size and weight bits must be ints";
  const Tensor& data = weight->toTensor();
  const Tensor& scale_tensor = scales->toTensor();
  const Tensor* zero_tensor = optional_tensor(zeros);
  w->group = group->toInt();
  w->bits = bits->toInt();
  if (w->bits != 4 && w->bits != 8) return "weight bits must be 4 or 8";
  if (data.dim() != 2) return "weight must be 2D";
  w->rows = data.size(0);
  if (w->bits == 4) {
    if (data.scalar_type() != ScalarType::Byte) return "4-bit weight must be uint8";
    w->cols = data.size(1) * 2;
  } else {
    if (data.scalar_type() != ScalarType::Char) return "8-bit weight must be int8";
    w->cols = data.size(1);
  }
  if (w->rows <= 0 || w->cols <= 0) return "empty weight";
  if (w->group <= 0 || w->cols % w->group != 0) return "group size does not divide the row";
  const int64_t groups = w->cols / w->group;
  if (scale_tensor.scalar_type() != ScalarType::Float ||
      !has_shape(scale_tensor, {w->rows, groups})) {
    return "weight scales are not float32 [rows, cols / group_size]";
  }
  if (zero_tensor != nullptr && (zero_tensor->scalar_type() != ScalarType::Char ||
                                 !has_shape(*zero_tensor, {w->rows, groups}))) {
    return "weight zero points are not int8 [rows, cols / group_size]";
  }
  w->data = static_cast<const uint8_t*>(data.const_data_ptr());
  w->scales = scale_tensor.const_data_ptr<float>();
  w->zeros = zero_tensor ? zero_tensor->const_data_ptr<int8_t>() : nullptr;
  return nullptr;
}

}  // namespace cpu
}  // namespace et_cpu_plugin
