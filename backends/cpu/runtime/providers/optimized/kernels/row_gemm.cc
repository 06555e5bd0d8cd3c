// RowGemm (see row_gemm.h): packing, the register-blocked kernel and its in-register epilogue.
#include "backends/cpu/runtime/providers/optimized/kernels/row_gemm.h"

#include <algorithm>
#include <string>
#include <utility>

#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_internal.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_epilogue.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {
namespace {

constexpr int64_t kLanes = 16;               // floats per AVX-512 vector
constexpr int64_t kGroupPanels = 4;          // vectors per column group
constexpr int64_t kGroupColumns = kLanes * kGroupPanels;
// Floats ahead of the current weight row that the kernel asks the cache for: far enough to
// cover memory latency at the rate one core streams (~4 KB), near enough to stay in L1.
constexpr int64_t kPrefetchFloats = 1024;
// The cold stream's second prefetch, into L2: 32 KB ahead, 8 pages, so each page's lines are
// requested well before the near prefetch and the loads reach them (the hardware's L2 streamer
// starts over at each 4 KB page, and the near prefetch alone keeps only L1's few fill buffers
// busy). MobileNetV3's heads read from L3 (12 copies in rotation, interleaved, under load):
// see the provider README.
// Only streams of 2 MiB or more (a classifier head): they outgrow L2 and come from L3 or memory
// at every call. Smaller ones (a small decoder's projections, squeeze-excite's 1x1s) may stay
// in cache, where the second prefetch only adds load-port work (the Llama-style decoder's step
// took 1.3x as long with it on every RowGemm).
constexpr int64_t kFarPrefetchFloats = 8192;
constexpr size_t kColdStreamBytes = size_t{2} << 20;  // the bar: Packed::bytes() from 2 MiB

// kPanels vectors of a column group for kRows rows: acc[r][p] over all k, then the epilogue.
// The group's weights are one contiguous [k][stride] stream (stride: the group's width in floats),
// of which this reads the kPanels vectors from `weights` on: the whole group (kPanels of its
// width), or a part of it (rows 5-8: two vectors at a time, kernel_for). The loops over
// rows and vectors are unrolled so the accumulators stay in registers (8 x 2 was not, by
// default: they lived on the stack, a load and a store per FMA).
template <int kRows, int kPanels>
ET_AVX512 void group_kernel(const float* x, int64_t k, const float* weights, int64_t stride,
                            const float* bias, const PostOps& post_ops, int64_t columns,
                            int64_t n, const float* residual, float* y, int64_t far_prefetch) {
  __m512 acc[kRows][kPanels];
#pragma GCC unroll 4
  for (int p = 0; p < kPanels; ++p) {
    const __m512 b = _mm512_loadu_ps(bias + p * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) acc[r][p] = b;
  }
  const float* w = weights;
  for (int64_t i = 0; i < k; ++i, w += stride) {
    for (int p = 0; p < kPanels; ++p) {  // one cache line per vector
      _mm_prefetch(reinterpret_cast<const char*>(w + kPrefetchFloats + p * kLanes), _MM_HINT_T0);
    }
    if (far_prefetch > 0) {
      for (int p = 0; p < kPanels; ++p) {
        _mm_prefetch(reinterpret_cast<const char*>(w + far_prefetch + p * kLanes), _MM_HINT_T1);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m512 xr = _mm512_set1_ps(x[r * k + i]);
#pragma GCC unroll 4
      for (int p = 0; p < kPanels; ++p) {
        acc[r][p] = _mm512_fmadd_ps(xr, _mm512_load_ps(w + p * kLanes), acc[r][p]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int p = 0; p < kPanels; ++p) {
      const int64_t left = columns - p * kLanes;
      const __mmask16 mask =
          left >= kLanes ? static_cast<__mmask16>(0xFFFF)
                         : static_cast<__mmask16>((1u << std::max<int64_t>(left, 0)) - 1u);
      const int64_t at = r * n + p * kLanes;
      const __m512 v = epilogue16(post_ops, acc[r][p], residual ? residual + at : nullptr, mask);
      _mm512_mask_storeu_ps(y + at, mask, v);
    }
  }
}

using GroupKernel = void (*)(const float*, int64_t, const float*, int64_t, const float*,
                             const PostOps&, int64_t, int64_t, const float*, float*, int64_t);

// The kernel of `rows` rows (1 to kRowGemmWideRows) over `panels` vectors (1 to kGroupPanels),
// [rows - 1][panels - 1]. Rows 1-4: rows x up to 4 vectors of accumulators, a whole column group
// in one pass. Rows 5-8 (kRowGemmWideRows): rows x 2 vectors (16 at 8 rows, with the two weight
// vectors and a broadcast), so a group of up to 4 vectors runs as passes of 2 over its stream,
// each reading its own two vectors (cache lines) of every k row: every weight is still read once,
// for all the rows; a pass of 3 or 4 vectors left runs its first 2.
static_assert(kRowGemmMaxRows == 4 && kRowGemmWideRows == 8 && kGroupPanels == 4,
              "kKernels lists rows 1-8 and 1-4 vectors");
constexpr GroupKernel kKernels[kRowGemmWideRows][kGroupPanels] = {
    {group_kernel<1, 1>, group_kernel<1, 2>, group_kernel<1, 3>, group_kernel<1, 4>},
    {group_kernel<2, 1>, group_kernel<2, 2>, group_kernel<2, 3>, group_kernel<2, 4>},
    {group_kernel<3, 1>, group_kernel<3, 2>, group_kernel<3, 3>, group_kernel<3, 4>},
    {group_kernel<4, 1>, group_kernel<4, 2>, group_kernel<4, 3>, group_kernel<4, 4>},
    {group_kernel<5, 1>, group_kernel<5, 2>, group_kernel<5, 2>, group_kernel<5, 2>},
    {group_kernel<6, 1>, group_kernel<6, 2>, group_kernel<6, 2>, group_kernel<6, 2>},
    {group_kernel<7, 1>, group_kernel<7, 2>, group_kernel<7, 2>, group_kernel<7, 2>},
    {group_kernel<8, 1>, group_kernel<8, 2>, group_kernel<8, 2>, group_kernel<8, 2>},
};

GroupKernel kernel_for(int64_t rows, int64_t panels) {
  return kKernels[rows - 1][panels - 1];
}

int64_t group_columns(int64_t n, int64_t group) {
  return std::min(kGroupColumns, n - group * kGroupColumns);
}

int64_t panels_of(int64_t columns) {
  return (columns + kLanes - 1) / kLanes;
}

int64_t groups_of(int64_t n) {
  return (n + kGroupColumns - 1) / kGroupColumns;
}

// Floats of a k x n packing (Packed::bytes() / sizeof(float)): the stream, every group's k rows
// of its columns zero-padded to whole vectors (all groups but the last are kGroupColumns wide, so
// group g starts at g * k * kGroupColumns, on a cache line), and the bias of whole groups.
size_t stream_floats(int64_t k, int64_t n) {
  return static_cast<size_t>(k * panels_of(n) * kLanes);
}
size_t bias_floats(int64_t n) {
  return static_cast<size_t>(groups_of(n) * kGroupColumns);
}
size_t packed_floats(int64_t k, int64_t n) {
  return stream_floats(k, n) + bias_floats(n);
}

}  // namespace

bool row_gemm_cold_stream() {
  return kernel_switched_on("ET_CPU_ROW_GEMM_COLD_STREAM");
}

bool row_gemm_wide_rows(int64_t rows, int64_t k, int64_t n) {
  if (rows <= kRowGemmMaxRows || k < 1 || n < 1) return false;
  return packed_floats(k, n) * sizeof(float) >= kColdStreamBytes &&
         kernel_switched_on("ET_CPU_ROW_GEMM_WIDE");
}

bool row_gemm_supports(int64_t rows, const PostOps& post_ops) {
  if (rows < 1 || rows > kRowGemmWideRows || !kernel_switched_on("ET_CPU_ROW_GEMM") ||
      !cpu_has_avx512()) return false;
  for (const PostOp& op : post_ops) {
    if (op.kind == PostOp::Kind::kActivation && !activation_in_registers(op.activation.kind)) {
      return false;
    }
  }
  return true;
}

std::shared_ptr<const RowGemm::Packed> RowGemm::pack(int64_t k, int64_t n, const float* weight,
                                                    bool weight_is_k_by_n, const float* bias) {
  if (k < 1 || n < 1 || weight == nullptr) {
    throw ProviderError("row gemm: k " + std::to_string(k) + " and n " + std::to_string(n) +
                        " must be positive and the weight non-null");
  }
  auto packed = std::make_shared<Packed>();
  packed->k = k;
  packed->n = n;
  const int64_t groups = groups_of(n);
  // Each group starts on a cache line (64 bytes) so the kernel's loads are aligned.
  for (int64_t g = 0; g < groups; ++g) {
    packed->group_offset.push_back(static_cast<size_t>(g * k * kGroupColumns));
  }
  const size_t total = stream_floats(k, n);
  packed->weights.reserve_weights(total * sizeof(float));
  float* const stream = static_cast<float*>(packed->weights.data());
  std::fill(stream, stream + total, 0.0f);  // the zero padding of each group's last vectors
  packed->bias.assign(bias_floats(n), 0.0f);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t width = panels_of(group_columns(n, g)) * kLanes;
    float* out = stream + packed->group_offset[g];
    for (int64_t c = 0; c < group_columns(n, g); ++c) {
      const int64_t column = g * kGroupColumns + c;
      for (int64_t i = 0; i < k; ++i) {
        out[i * width + c] = weight_is_k_by_n ? weight[i * n + column] : weight[column * k + i];
      }
      if (bias) packed->bias[column] = bias[column];
    }
  }
  return packed;
}

RowGemm::RowGemm(int64_t rows, std::shared_ptr<const Packed> packed, PostOps post_ops)
    : rows_(rows), k_(packed ? packed->k : 0), n_(packed ? packed->n : 0),
      groups_(groups_of(n_)), post_ops_(std::move(post_ops)),
      has_add_(onednn::has_add(post_ops_)), packed_(std::move(packed)),
      far_prefetch_(packed_ != nullptr && packed_->bytes() >= kColdStreamBytes &&
                            row_gemm_cold_stream()
                        ? kFarPrefetchFloats
                        : 0) {
  if (!row_gemm_supports(rows, post_ops_)) {
    throw ProviderError("row gemm: " + std::to_string(rows) +
                        " rows or these post-ops are not supported here");
  }
  if (packed_ == nullptr) throw ProviderError("row gemm: no packed weights");
}

RowGemm::RowGemm(int64_t rows, int64_t k, int64_t n, const float* weight, bool weight_is_k_by_n,
                 const float* bias, PostOps post_ops)
    : RowGemm(rows, pack(k, n, weight, weight_is_k_by_n, bias), std::move(post_ops)) {}

void RowGemm::run(const float* x, float* y, const float* residual, int64_t first,
                  int64_t last) const {
  if (has_add_ && residual == nullptr) {
    throw ProviderError("row gemm: post-op add needs a residual tensor, got null");
  }
  for (int64_t g = first; g < last; ++g) {
    const int64_t columns = group_columns(n_, g);
    const int64_t at = g * kGroupColumns;
    const float* weights = packed_->stream() + packed_->group_offset[g];
    const int64_t panels = panels_of(columns);
    const int64_t stride = panels * kLanes;
    if (rows_ <= kRowGemmMaxRows) {
      kernel_for(rows_, panels)(x, k_, weights, stride, packed_->bias.data() + at, post_ops_,
                                columns, n_, residual ? residual + at : nullptr, y + at,
                                far_prefetch_);
      continue;
    }
    for (int64_t p = 0; p < panels; p += 2) {  // two vectors per pass
      const int64_t c = p * kLanes;
      kernel_for(rows_, panels - p)(x, k_, weights + c, stride, packed_->bias.data() + at + c,
                                    post_ops_, columns - c, n_,
                                    residual ? residual + at + c : nullptr, y + at + c,
                                    far_prefetch_);
    }
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
