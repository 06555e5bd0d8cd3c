#include "backends/cpu/runtime/state_kernels.h"

#include <cstring>
#include <functional>
#include <string>

#include "backends/cpu/runtime/error_report.h"

namespace et_cpu_plugin {
namespace cpu {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::KernelRuntimeContext;

namespace {

constexpr const char* kIndexPut = "aten::index_put.out";
constexpr const char* kIndexCopy = "aten::index_copy.out";

bool is_tensor(const ArgValue& arg) {
  return arg.type == ArgValue::Type::Tensor && arg.tensor >= 0;
}

// Where the row write's pieces are in its argument list, and which dimension it indexes.
struct RowWriteArgs {
  size_t self = 0;
  size_t index = 0;
  size_t values = 0;
  int64_t dim = 0;
  bool index_put = false;
};

bool row_write_args(const GraphSpec& graph, const OpSpec& op, RowWriteArgs* out) {
  const std::vector<ArgValue>& a = op.args;
  if (op.kernel == kIndexPut) {
    // (self, indices, values, accumulate, out)
    if (a.size() != 5 || !is_tensor(a[0]) || a[1].type != ArgValue::Type::OptionalTensorList ||
        !is_tensor(a[2]) || a[3].type != ArgValue::Type::Bool || a[3].bool_value ||
        !is_tensor(a[4])) {
      return false;
    }
    const size_t rank = graph.values[a[0].tensor].shape.size();
    if (a[1].tensors.size() > rank) return false;
    int64_t found = -1;
    for (size_t d = 0; d < a[1].tensors.size(); ++d) {
      if (a[1].tensors[d] < 0) continue;
      if (found >= 0) return false;  // more than one index tensor
      found = static_cast<int64_t>(d);
    }
    if (found < 0) return false;
    const ValueSpec& index = graph.values[a[1].tensors[static_cast<size_t>(found)]];
    if ((index.dtype != ScalarType::Long && index.dtype != ScalarType::Int) ||
        index.shape.size() != 1) {
      return false;
    }
    *out = RowWriteArgs{0, 1, 2, found, true};
  } else if (op.kernel == kIndexCopy) {
    // (self, dim, index, source, out)
    if (a.size() != 5 || !is_tensor(a[0]) || a[1].type != ArgValue::Type::Int ||
        !is_tensor(a[2]) || !is_tensor(a[3]) || !is_tensor(a[4])) {
      return false;
    }
    const int64_t rank = static_cast<int64_t>(graph.values[a[0].tensor].shape.size());
    int64_t dim = a[1].int_value;
    if (dim < 0) dim += rank;
    const ValueSpec& index = graph.values[a[2].tensor];
    const ValueSpec& source = graph.values[a[3].tensor];
    if (dim < 0 || dim >= rank || index.dtype != ScalarType::Long || index.shape.size() != 1 ||
        static_cast<int64_t>(source.shape.size()) != rank) {
      return false;
    }
    *out = RowWriteArgs{0, 2, 3, dim, false};
  } else {
    return false;
  }
  const ValueSpec& self = graph.values[a[out->self].tensor];
  const ValueSpec& values = graph.values[a[out->values].tensor];
  const ValueSpec& result = graph.values[a.back().tensor];
  return values.dtype == self.dtype && result.dtype == self.dtype && result.shape == self.shape &&
         !self.is_dynamic() && values.shape.size() <= self.shape.size();
}

class RowWrite final : public BoundKernel {
 public:
  RowWrite(const OpSpec& op, const RowWriteArgs& where, EValue* self, EValue* index,
           EValue* values)
      : name_(op.name),
        kernel_(op.kernel),
        dim_(where.dim),
        index_put_(where.index_put),
        self_(self),
        index_(index),
        values_(values) {}

  Error run(KernelRuntimeContext&) override {
    Tensor self = self_->toTensor();
    const Tensor index = index_->toTensor();
    const Tensor values = values_->toTensor();
    const int64_t rank = self.dim();
    const int64_t count = index.numel();
    const int64_t size = self.size(dim_);
    // The indexed shape: self's with dimension dim_ replaced by the index count; values
    // broadcast to it (right-aligned, each dimension equal or 1).
    std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
    shape[dim_] = count;
    const int64_t values_rank = values.dim();
    if (values_rank > rank) return fail_shape(values);
    std::vector<int64_t> value_strides(rank, 0);
    int64_t stride = 1;
    bool dense = true;  // values hold exactly the indexed shape (leading 1s aside)
    for (int64_t d = rank - 1; d >= 0; --d) {
      const int64_t vd = d - (rank - values_rank);
      const int64_t vsize = vd >= 0 ? values.size(vd) : 1;
      if (vsize != shape[d] && vsize != 1) return fail_shape(values);
      if (vsize != shape[d]) dense = false;
      value_strides[d] = vsize == 1 ? 0 : stride;
      stride *= vsize;
    }
    // Every index checked before any row is written: a bad one leaves the state as it was.
    std::vector<int64_t> rows(static_cast<size_t>(count));
    for (int64_t j = 0; j < count; ++j) {
      int64_t row = index.scalar_type() == ScalarType::Long
                        ? index.const_data_ptr<int64_t>()[j]
                        : static_cast<int64_t>(index.const_data_ptr<int32_t>()[j]);
      const int64_t given = row;
      if (index_put_ && row < 0) row += size;
      if (row < 0 || row >= size) {
        return report_error(Error::InvalidArgument,
                            "%s at %s (in place on the delegate's state): index %lld (position "
                            "%lld of the indices) is out of range for dimension %lld of size %lld",
                            kernel_.c_str(), name_.c_str(), static_cast<long long>(given),
                            static_cast<long long>(j), static_cast<long long>(dim_),
                            static_cast<long long>(size));
      }
      rows[static_cast<size_t>(j)] = row;
    }
    const size_t item = element_size(self.scalar_type());
    int64_t outer = 1;
    for (int64_t d = 0; d < dim_; ++d) outer *= shape[d];
    int64_t inner = 1;
    for (int64_t d = dim_ + 1; d < rank; ++d) inner *= shape[d];
    auto* out = static_cast<uint8_t*>(self.mutable_data_ptr());
    const auto* in = static_cast<const uint8_t*>(values.const_data_ptr());
    if (dense) {
      const size_t row_bytes = static_cast<size_t>(inner) * item;
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t j = 0; j < count; ++j) {
          std::memcpy(out + static_cast<size_t>((o * size + rows[j]) * inner) * item,
                      in + static_cast<size_t>((o * count + j) * inner) * item, row_bytes);
        }
      }
      return Error::Ok;
    }
    // Broadcast values: element by element over the indexed shape.
    std::vector<int64_t> coord(rank, 0);
    const int64_t total = outer * count * inner;
    for (int64_t e = 0; e < total; ++e) {
      int64_t rest = e;
      for (int64_t d = rank - 1; d >= 0; --d) {
        coord[d] = shape[d] == 0 ? 0 : rest % shape[d];
        rest = shape[d] == 0 ? 0 : rest / shape[d];
      }
      int64_t src = 0;
      int64_t dst = 0;
      for (int64_t d = 0; d < rank; ++d) {
        src += coord[d] * value_strides[d];
        dst = dst * self.size(d) + (d == dim_ ? rows[coord[d]] : coord[d]);
      }
      std::memcpy(out + static_cast<size_t>(dst) * item, in + static_cast<size_t>(src) * item,
                  item);
    }
    return Error::Ok;
  }

 private:
  Error fail_shape(const Tensor& values) const {
    return report_error(Error::InvalidArgument,
                        "%s at %s (in place on the delegate's state): values of rank %zd do not "
                        "broadcast to the indexed rows",
                        kernel_.c_str(), name_.c_str(), static_cast<ssize_t>(values.dim()));
  }

  std::string name_;
  std::string kernel_;
  int64_t dim_;
  bool index_put_;
  EValue* self_;
  EValue* index_;
  EValue* values_;
};

}  // namespace

bool is_row_write(const GraphSpec& graph, const OpSpec& op, int32_t* self) {
  RowWriteArgs where;
  if (!row_write_args(graph, op, &where)) return false;
  *self = op.args[where.self].tensor;
  return true;
}

std::unique_ptr<BoundKernel> make_row_write(const GraphSpec& graph, const OpSpec& op,
                                            const std::function<EValue*(int32_t)>& tensor) {
  RowWriteArgs where;
  if (!row_write_args(graph, op, &where)) return nullptr;
  // index_put: the one non-None entry of the optional tensor list, at position `dim`.
  const int32_t index = where.index_put ? op.args[where.index].tensors[where.dim]
                                        : op.args[where.index].tensor;
  return std::unique_ptr<BoundKernel>(new RowWrite(op, where, tensor(op.args[where.self].tensor),
                                                   tensor(index),
                                                   tensor(op.args[where.values].tensor)));
}

}  // namespace cpu
}  // namespace et_cpu_plugin
