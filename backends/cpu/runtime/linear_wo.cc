#include "backends/cpu/runtime/linear_wo.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/runtime/argument_checks.h"
#include "backends/cpu/runtime/error_report.h"
#include "backends/cpu/runtime/packed_weight.h"

namespace et_cpu_plugin {
namespace cpu {
namespace {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::KernelRuntimeContext;

constexpr const char* kLinearKernel = "et_cpu_quant::linear_wo.out";
constexpr const char* kEmbeddingKernel = "et_cpu_quant::embedding_wo.out";

// Argument positions in the out-variant schemas (quantized_ops.py).
enum LinearArg { kLInput = 0, kLWeight, kLScales, kLZeros, kLBias, kLGroup, kLBits, kLOut, kLCount };
enum EmbeddingArg { kEWeight = 0, kEScales, kEZeros, kEIndices, kEGroup, kEBits, kEOut, kECount };

// 16-lane vectors (GCC/Clang vector extensions): one zmm register under AVX-512, two ymm under
// AVX2, four xmm otherwise. Loads and stores go through memcpy (unaligned).
typedef float F16 __attribute__((vector_size(64)));
typedef int32_t I16 __attribute__((vector_size(64)));
typedef int16_t S16 __attribute__((vector_size(32)));
typedef int8_t B16 __attribute__((vector_size(16)));
typedef uint8_t U16 __attribute__((vector_size(16)));

#define ET_WO_INLINE inline __attribute__((always_inline))

// 16 int8 as float32. Widened through int16: GCC 12 turns the direct int8 -> int32 conversion
// into one lane extract a value, the two steps into sign-extension instructions.
#define ET_WO_TO_FLOAT(bytes) \
  __builtin_convertvector(__builtin_convertvector(__builtin_convertvector(bytes, S16), I16), F16)

// Row `r` of `w` as float32 into out[0, cols): (w - zero_point) * scale per group. w - zero
// point is a small integer, exact in float32, so this is torchao's (w - z).to(float32) * scale.
ET_WO_INLINE void dequantize_row(const PackedWeight& w, int64_t r, float* out) {
  const uint8_t* row = w.data + r * w.row_bytes();
  const int64_t cols = w.cols;
  int64_t k = 0;
  if (w.bits == 4) {
    for (; k + 32 <= cols; k += 32) {
      U16 bytes;
      std::memcpy(&bytes, row + k / 2, sizeof(bytes));
      const U16 low = bytes & 0xF;
      const U16 high = bytes >> 4;
      // Columns k..k+15 and k+16..k+31: even columns from the low nibbles, odd from the high.
      const U16 first = __builtin_shufflevector(low, high, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5,
                                                21, 6, 22, 7, 23);
      const U16 second = __builtin_shufflevector(low, high, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28,
                                                 13, 29, 14, 30, 15, 31);
      const F16 a = ET_WO_TO_FLOAT((B16)first - 8);
      const F16 b = ET_WO_TO_FLOAT((B16)second - 8);
      std::memcpy(out + k, &a, sizeof(a));
      std::memcpy(out + k + 16, &b, sizeof(b));
    }
    for (; k < cols; ++k) {
      const uint8_t byte = row[k >> 1];
      out[k] = static_cast<float>(static_cast<int32_t>((k & 1) ? (byte >> 4) : (byte & 0xF)) - 8);
    }
  } else {
    const int8_t* values = reinterpret_cast<const int8_t*>(row);
    for (; k + 16 <= cols; k += 16) {
      B16 bytes;
      std::memcpy(&bytes, values + k, sizeof(bytes));
      const F16 a = ET_WO_TO_FLOAT(bytes);
      std::memcpy(out + k, &a, sizeof(a));
    }
    for (; k < cols; ++k) out[k] = static_cast<float>(values[k]);
  }
  const int64_t groups = cols / w.group;
  for (int64_t g = 0; g < groups; ++g) {
    const float scale = w.scales[r * groups + g];
    const float zero = w.zeros ? static_cast<float>(w.zeros[r * groups + g]) : 0.0f;
    float* part = out + g * w.group;
    int64_t i = 0;
    for (; i + 16 <= w.group; i += 16) {
      F16 v;
      std::memcpy(&v, part + i, sizeof(v));
      v = (v - zero) * scale;
      std::memcpy(part + i, &v, sizeof(v));
    }
    for (; i < w.group; ++i) part[i] = (part[i] - zero) * scale;
  }
}

// sum(x[i] * w[i]) over [0, k), in 32 lanes, then the lanes and the tail.
ET_WO_INLINE float dot(const float* x, const float* w, int64_t k) {
  F16 acc0 = {}, acc1 = {};
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    F16 x0, w0, x1, w1;
    std::memcpy(&x0, x + i, sizeof(x0));
    std::memcpy(&w0, w + i, sizeof(w0));
    std::memcpy(&x1, x + i + 16, sizeof(x1));
    std::memcpy(&w1, w + i + 16, sizeof(w1));
    acc0 += x0 * w0;
    acc1 += x1 * w1;
  }
  for (; i + 16 <= k; i += 16) {
    F16 x0, w0;
    std::memcpy(&x0, x + i, sizeof(x0));
    std::memcpy(&w0, w + i, sizeof(w0));
    acc0 += x0 * w0;
  }
  acc0 += acc1;
  float sum = 0.0f;
  for (int lane = 0; lane < 16; ++lane) sum += acc0[lane];
  for (; i < k; ++i) sum += x[i] * w[i];
  return sum;
}

struct LinearWo {
  PackedWeight w;  // [N, K]
  const Tensor* input;
  const Tensor* bias;  // float32 [N] or null
  Tensor* output;
};

// The 16 weights of row `r` at columns [k, k + 16) of an 8-bit weight, dequantized.
ET_WO_INLINE void load8(const PackedWeight& w, int64_t r, int64_t k, float zero, float scale,
                        F16* out) {
  B16 bytes;
  std::memcpy(&bytes, w.data + r * w.cols + k, sizeof(bytes));
  *out = (ET_WO_TO_FLOAT(bytes) - zero) * scale;
}

// The 32 weights of row `r` at columns [k, k + 32) of a 4-bit weight (k even), dequantized.
ET_WO_INLINE void load4(const PackedWeight& w, int64_t r, int64_t k, float zero, float scale,
                        F16* first, F16* second) {
  U16 bytes;
  std::memcpy(&bytes, w.data + r * (w.cols / 2) + k / 2, sizeof(bytes));
  const U16 low = bytes & 0xF;
  const U16 high = bytes >> 4;
  const U16 a = __builtin_shufflevector(low, high, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6,
                                        22, 7, 23);
  const U16 b = __builtin_shufflevector(low, high, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29,
                                        14, 30, 15, 31);
  *first = (ET_WO_TO_FLOAT((B16)a - 8) - zero) * scale;
  *second = (ET_WO_TO_FLOAT((B16)b - 8) - zero) * scale;
}

template <int kRows>
ET_WO_INLINE void fma_rows(F16* acc, const float* const* x, int64_t k, const F16& w) {
  for (int r = 0; r < kRows; ++r) {
    F16 v;
    std::memcpy(&v, x[r] + k, sizeof(v));
    acc[r] += v * w;
  }
}

// Input rows [m0, m0 + kRows), kRows <= kFusedRows, when each group is whole vector chunks (16
// columns for 8 bits, 32 for 4): every weight is dequantized in registers and multiplied into
// each row's accumulator, with nothing written in between (the single-token decode case).
constexpr int kFusedRows = 4;

template <int kRows>
ET_WO_INLINE void linear_fused(const LinearWo& a, int64_t m0) {
  const int64_t k = a.w.cols, n = a.w.rows, group = a.w.group, groups = k / group;
  const float* bias = a.bias ? a.bias->const_data_ptr<float>() : nullptr;
  float* y = a.output->mutable_data_ptr<float>();
  const float* x[kRows];
  for (int r = 0; r < kRows; ++r) x[r] = a.input->const_data_ptr<float>() + (m0 + r) * k;
  for (int64_t c = 0; c < n; ++c) {
    F16 acc[kRows] = {};
    for (int64_t g = 0; g < groups; ++g) {
      const float scale = a.w.scales[c * groups + g];
      const float zero = a.w.zeros ? static_cast<float>(a.w.zeros[c * groups + g]) : 0.0f;
      if (a.w.bits == 4) {
        for (int64_t i = g * group; i < (g + 1) * group; i += 32) {
          F16 first, second;
          load4(a.w, c, i, zero, scale, &first, &second);
          fma_rows<kRows>(acc, x, i, first);
          fma_rows<kRows>(acc, x, i + 16, second);
        }
      } else {
        for (int64_t i = g * group; i < (g + 1) * group; i += 16) {
          F16 weights;
          load8(a.w, c, i, zero, scale, &weights);
          fma_rows<kRows>(acc, x, i, weights);
        }
      }
    }
    const float b = bias ? bias[c] : 0.0f;
    for (int r = 0; r < kRows; ++r) {
      float sum = 0.0f;
      for (int lane = 0; lane < 16; ++lane) sum += acc[r][lane];
      y[(m0 + r) * n + c] = sum + b;
    }
  }
}

// y[m, c] = dot(x[m], dequantized row c) + bias[c]. Up to kFusedRows input rows whose groups are
// whole vector chunks: linear_fused. Otherwise one output channel at a time, its row dequantized
// once into `row` (K floats of scratch) for every input row.
ET_WO_INLINE void linear_body(const LinearWo& a, float* row) {
  const int64_t k = a.w.cols, n = a.w.rows;
  const int64_t rows = a.input->numel() / k;
  if (rows <= kFusedRows && a.w.group % (a.w.bits == 4 ? 32 : 16) == 0) {
    switch (rows) {
      case 1:
        linear_fused<1>(a, 0);
        break;
      case 2:
        linear_fused<2>(a, 0);
        break;
      case 3:
        linear_fused<3>(a, 0);
        break;
      case 4:
        linear_fused<4>(a, 0);
        break;
      default:
        break;
    }
    return;
  }
  const float* x = a.input->const_data_ptr<float>();
  const float* bias = a.bias ? a.bias->const_data_ptr<float>() : nullptr;
  float* y = a.output->mutable_data_ptr<float>();
  for (int64_t c = 0; c < n; ++c) {
    dequantize_row(a.w, c, row);
    const float b = bias ? bias[c] : 0.0f;
    for (int64_t m = 0; m < rows; ++m) y[m * n + c] = dot(x + m * k, row, k) + b;
  }
}

// out[i] = dequantized row indices[i]; every index already checked against the table.
template <typename Index>
ET_WO_INLINE void embedding_body(const PackedWeight& w, const Index* indices, int64_t count,
                                 float* out) {
  for (int64_t i = 0; i < count; ++i) dequantize_row(w, static_cast<int64_t>(indices[i]), out + i * w.cols);
}

// The same bodies compiled three times; run time picks the widest the CPU runs.
#define ET_WO_VARIANT(suffix, attribute)                                                        \
  attribute void linear_##suffix(const LinearWo& a, float* row) { linear_body(a, row); }        \
  attribute void embedding64_##suffix(const PackedWeight& w, const int64_t* indices,          \
                                      int64_t count, float* out) {                              \
    embedding_body(w, indices, count, out);                                                     \
  }                                                                                             \
  attribute void embedding32_##suffix(const PackedWeight& w, const int32_t* indices,          \
                                      int64_t count, float* out) {                              \
    embedding_body(w, indices, count, out);                                                     \
  }

#if defined(__x86_64__)
ET_WO_VARIANT(avx512, __attribute__((target("avx512f"))))
ET_WO_VARIANT(avx2, __attribute__((target("avx2,fma"))))
#endif
ET_WO_VARIANT(generic, )

enum class Isa { kAvx512, kAvx2, kGeneric };

// The widest variant this CPU runs.
Isa cpu_isa() {
#if defined(__x86_64__)
  static const Isa isa = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return Isa::kAvx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
    return Isa::kGeneric;
  }();
  return isa;
#else
  return Isa::kGeneric;
#endif
}

// The variant a kernel bound now runs: the CPU's widest, or a narrower one that
// ET_CPU_WEIGHT_ONLY_ISA ("avx2" or "generic") asks for (tests run every variant on one CPU).
Isa bound_isa() {
  const Isa cpu = cpu_isa();
  const char* wanted = std::getenv("ET_CPU_WEIGHT_ONLY_ISA");
  if (wanted == nullptr) return cpu;
  if (std::strcmp(wanted, "generic") == 0) return Isa::kGeneric;
  if (std::strcmp(wanted, "avx2") == 0 && cpu == Isa::kAvx512) return Isa::kAvx2;
  return cpu;
}

// The variant `isa` of `name`.
#if defined(__x86_64__)
#define ET_WO_PICK(name, isa)                                 \
  ((isa) == Isa::kAvx512 ? name##_avx512                      \
   : (isa) == Isa::kAvx2 ? name##_avx2                        \
                         : name##_generic)
#else
#define ET_WO_PICK(name, isa) name##_generic
#endif

class LinearWoKernel final : public BoundKernel {
 public:
  explicit LinearWoKernel(const LinearWo& a)
      : a_(a), row_(static_cast<size_t>(a.w.cols)), isa_(bound_isa()) {}
  // The rows from the input at each run, its scratch one row of K: any size within the bounds.
  bool resizable() const override { return true; }

  Error run(KernelRuntimeContext&) override {
    const int64_t k = a_.w.cols, n = a_.w.rows;
    const int64_t rows = a_.input->numel() / k;
    if (a_.output->numel() != rows * n) {
      return report_error(Error::InvalidArgument, "%s: output holds %zd values, expected %lld",
                          kLinearKernel, static_cast<ssize_t>(a_.output->numel()),
                          static_cast<long long>(rows * n));
    }
    ET_WO_PICK(linear, isa_)(a_, row_.data());
    return Error::Ok;
  }

 private:
  LinearWo a_;
  std::vector<float> row_;
  Isa isa_;
};

class EmbeddingWoKernel final : public BoundKernel {
 public:
  EmbeddingWoKernel(const PackedWeight& w, const Tensor* indices, Tensor* output, const char* name)
      : w_(w), indices_(indices), output_(output), name_(name ? name : ""), isa_(bound_isa()) {}
  // The count of indices read at each run (each checked then): any size within the bounds.
  bool resizable() const override { return true; }

  Error run(KernelRuntimeContext&) override {
    const int64_t count = indices_->numel();
    if (output_->numel() != count * w_.cols) {
      return report_error(Error::InvalidArgument, "%s at %s: output holds %zd values, expected %lld",
                          kEmbeddingKernel, name_.c_str(), static_cast<ssize_t>(output_->numel()),
                          static_cast<long long>(count * w_.cols));
    }
    float* out = output_->mutable_data_ptr<float>();
    if (indices_->scalar_type() == ScalarType::Long) {
      const int64_t* indices = indices_->const_data_ptr<int64_t>();
      const Error checked = check(indices, count);
      if (checked != Error::Ok) return checked;
      ET_WO_PICK(embedding64, isa_)(w_, indices, count, out);
    } else {
      const int32_t* indices = indices_->const_data_ptr<int32_t>();
      const Error checked = check(indices, count);
      if (checked != Error::Ok) return checked;
      ET_WO_PICK(embedding32, isa_)(w_, indices, count, out);
    }
    return Error::Ok;
  }

 private:
  template <typename Index>
  Error check(const Index* indices, int64_t count) const {
    for (int64_t i = 0; i < count; ++i) {
      const int64_t index = static_cast<int64_t>(indices[i]);
      if (index < 0 || index >= w_.rows) {
        return report_error(Error::InvalidArgument,
                            "%s at %s: index %lld (position %lld of the indices) is out of range "
                            "for a table of %lld rows",
                            kEmbeddingKernel, name_.c_str(), static_cast<long long>(index),
                            static_cast<long long>(i), static_cast<long long>(w_.rows));
      }
    }
    return Error::Ok;
  }

  PackedWeight w_;
  const Tensor* indices_;
  Tensor* output_;
  std::string name_;  // the op's FX name, for run-time errors (the payload may be gone by then)
  Isa isa_;
};

Error bind_linear(const OpBinding& op, std::unique_ptr<BoundKernel>* out) {
  auto fail = [&](const char* what) {
    return report_error(Error::InvalidArgument, "%s at %s: %s", kLinearKernel, op.op_name, what);
  };
  if (op.args.size() < kLCount) return fail("too few arguments");
  const EValue* const* args = op.args.data();
  if (!args[kLInput]->isTensor() || !args[kLOut]->isTensor()) {
    return fail("input and out must be tensors");
  }
  if (!args[kLBias]->isTensor() && !args[kLBias]->isNone()) return fail("bias is not a tensor");
  LinearWo a{};
  const char* why = read_packed_weight(args[kLWeight], args[kLScales], args[kLZeros], args[kLGroup],
                                args[kLBits], &a.w);
  if (why != nullptr) return fail(why);
  a.input = &args[kLInput]->toTensor();
  a.bias = optional_tensor(args[kLBias]);
  a.output = &op.args[kLOut]->toTensor();
  if (a.input->scalar_type() != ScalarType::Float || a.output->scalar_type() != ScalarType::Float) {
    return fail("input and output must be float32");
  }
  if (a.input->dim() < 1 || a.input->dim() != a.output->dim()) {
    return fail("input and output must have the same rank >= 1");
  }
  if (a.input->size(a.input->dim() - 1) != a.w.cols) return fail("input's last dim is not K");
  if (a.bias != nullptr &&
      (a.bias->scalar_type() != ScalarType::Float || !has_shape(*a.bias, {a.w.rows}))) {
    return fail("bias is not float32 [N]");
  }
  for (ssize_t d = 0; d + 1 < a.input->dim(); ++d) {
    if (a.input->size(d) != a.output->size(d)) return fail("output's leading dims differ");
  }
  if (a.output->size(a.output->dim() - 1) != a.w.rows) return fail("output's last dim is not N");
  out->reset(new LinearWoKernel(a));
  return Error::Ok;
}

Error bind_embedding(const OpBinding& op, std::unique_ptr<BoundKernel>* out) {
  auto fail = [&](const char* what) {
    return report_error(Error::InvalidArgument, "%s at %s: %s", kEmbeddingKernel, op.op_name,
                        what);
  };
  if (op.args.size() < kECount) return fail("too few arguments");
  const EValue* const* args = op.args.data();
  if (!args[kEIndices]->isTensor() || !args[kEOut]->isTensor()) {
    return fail("indices and out must be tensors");
  }
  PackedWeight w{};
  const char* why = read_packed_weight(args[kEWeight], args[kEScales], args[kEZeros], args[kEGroup],
                                args[kEBits], &w);
  if (why != nullptr) return fail(why);
  const Tensor* indices = &args[kEIndices]->toTensor();
  Tensor* output = &op.args[kEOut]->toTensor();
  if (indices->scalar_type() != ScalarType::Long && indices->scalar_type() != ScalarType::Int) {
    return fail("indices must be int64 or int32");
  }
  if (output->scalar_type() != ScalarType::Float) return fail("output must be float32");
  if (output->dim() != indices->dim() + 1) return fail("output rank is not the indices' + 1");
  for (ssize_t d = 0; d < indices->dim(); ++d) {
    if (indices->size(d) != output->size(d)) return fail("output's leading dims differ");
  }
  if (output->size(output->dim() - 1) != w.cols) return fail("output's last dim is not the row");
  out->reset(new EmbeddingWoKernel(w, indices, output, op.op_name));
  return Error::Ok;
}

}  // namespace

bool is_weight_only_kernel(const char* kernel) {
  return std::strcmp(kernel, kLinearKernel) == 0 || std::strcmp(kernel, kEmbeddingKernel) == 0;
}

Error bind_weight_only(const OpBinding& op, std::unique_ptr<BoundKernel>* out) {
  if (std::strcmp(op.kernel, kLinearKernel) == 0) return bind_linear(op, out);
  return bind_embedding(op, out);
}

}  // namespace cpu
}  // namespace et_cpu_plugin
