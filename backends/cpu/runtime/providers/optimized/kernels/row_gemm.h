// Our own AVX-512 kernel for matrix products with a few rows: batch-1 linears (a classifier
// head; at a batch of up to 8 images too when its weights are large, kRowGemmWideRows) and 1x1
// convolutions over one pixel (squeeze-excite). Such a product reads every weight
// once and does two flops with it, so it runs at the speed the weights stream in. oneDNN 3.2's
// jit GEMM reads them in panels that leave half the machine's bandwidth unused when they come
// from memory (MobileNetV3's 1024 -> 1000 head: 0.9 ms cold against XNNPACK's 0.5 ms, see the
// provider README); here they are packed once into one contiguous stream per column group, and
// bias, post-ops and the residual add are applied in registers before the only store. A stream
// of 2 MiB or more, which comes from L3 or memory at every call (issue 46), is also prefetched
// further ahead into L2 (ET_CPU_ROW_GEMM_COLD_STREAM). The packings are prepared weights: on the
// weight arena's huge pages (weight_arena.h) like every other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "backends/cpu/runtime/providers/optimized/common/aligned_buffer.h"
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_provider.h"

namespace et_cpu_plugin {
namespace onednn {

// Rows (M) a RowGemm takes in one pass over a column group: its accumulators (rows x 4 vectors)
// fill the registers.
constexpr int64_t kRowGemmMaxRows = 4;
// Rows a RowGemm takes at most: 5 to this run each column group in passes of 2 vectors (rows x 2
// accumulators), still reading every weight once for all the rows.
constexpr int64_t kRowGemmWideRows = 8;

// Whether RowGemm runs `rows` rows with these post-ops on this CPU: AVX-512F, rows in
// [1, kRowGemmWideRows] (callers take rows above kRowGemmMaxRows only where row_gemm_wide_rows
// says so), every post-op with an in-register form (add, relu, clamp and the
// activations relu, leaky relu, clamp, hardswish, hardsigmoid, sigmoid, SiLU), and
// ET_CPU_ROW_GEMM is not "0" ("0" keeps oneDNN's kernels, for measuring; read at each call).
bool row_gemm_supports(int64_t rows, const PostOps& post_ops);

// Whether RowGemms prepared now stream packed weights of 2 MiB or more for cold caches: a second
// prefetch 32 KB ahead into L2 (the hardware streamer stops at every 4 KB page).
// ET_CPU_ROW_GEMM_COLD_STREAM, on unless "0" (read at construction, i.e. at prepare).
bool row_gemm_cold_stream();

// Whether a product of `rows` rows (5 to kRowGemmWideRows, or in blocks of that many rows) reads
// a k x n weight's packed stream once per block on RowGemm rather than oneDNN's brgemm: a stream of
// 2 MiB or more (a classifier head at a batch of several images: it comes from L3 or memory at
// every call, and brgemm's one tile of 8 rows ran on one thread), rows above kRowGemmMaxRows, and
// ET_CPU_ROW_GEMM_WIDE is not "0" (read when asked, i.e. at prepare). Checks nothing else
// (row_gemm_supports does).
bool row_gemm_wide_rows(int64_t rows, int64_t k, int64_t n);

class RowGemm {
 public:
  // The weights and bias packed per column group: they depend on the constants, k and n only,
  // so the RowGemms of one weight at several row counts (a decoder's sizes) share them.
  struct Packed {
    int64_t k = 0;
    int64_t n = 0;
    // Group g: k rows of its (up to 64, zero-padded to whole vectors) columns, contiguous,
    // from group_offset[g] (on a cache line); the bias of all groups, zero-padded alike. Both
    // from the weight arena (weight_arena.h: huge-page slabs unless ET_CPU_HUGE_WEIGHTS=0).
    AlignedBuffer weights;
    std::vector<size_t> group_offset;
    WeightVector<float> bias;
    const float* stream() const { return static_cast<const float*>(weights.data()); }
    size_t bytes() const { return weights.size() + bias.size() * sizeof(float); }
  };
  // `weight` is [n, k] (linear's and a 1x1 convolution's layout) or [k, n] when
  // `weight_is_k_by_n`; `bias` is [n] or null. Throws ProviderError on a null weight or a
  // non-positive k or n.
  static std::shared_ptr<const Packed> pack(int64_t k, int64_t n, const float* weight,
                                            bool weight_is_k_by_n, const float* bias);

  // y[r, c] = post_ops(sum_k x[r, k] * w(k, c) + bias[c]), x [rows, k] and y [rows, n] row-major,
  // on weights from pack(). Throws ProviderError unless row_gemm_supports(rows, post_ops).
  RowGemm(int64_t rows, std::shared_ptr<const Packed> packed, PostOps post_ops);
  // The same, packing `weight` and `bias` (see pack) for this RowGemm alone.
  RowGemm(int64_t rows, int64_t k, int64_t n, const float* weight, bool weight_is_k_by_n,
          const float* bias, PostOps post_ops);

  // Column groups (64 columns each, the last may be narrower): the unit of work sharing.
  int64_t groups() const { return groups_; }
  size_t weights_bytes() const { return packed_->bytes(); }
  bool has_add() const { return has_add_; }

  // Computes y's columns of groups [first, last) for every row. `residual` ([rows, n], may be
  // `y` itself) is required iff the post-ops hold an add.
  void run(const float* x, float* y, const float* residual, int64_t first, int64_t last) const;

 private:
  int64_t rows_;
  int64_t k_;
  int64_t n_;
  int64_t groups_;
  PostOps post_ops_;
  bool has_add_;
  std::shared_ptr<const Packed> packed_;
  int64_t far_prefetch_ = 0;  // floats ahead of the second prefetch; 0: none (not a cold stream)
};

class WeightCache;
// The packed weights of `weight` and `bias` (see RowGemm::pack) that `cache` holds alive, or new
// ones remembered there (weight_cache.cc); packed anew when `cache` is null.
std::shared_ptr<const RowGemm::Packed> cached_row_gemm_weights(WeightCache* cache, int64_t k,
                                                               int64_t n, const float* weight,
                                                               bool weight_is_k_by_n,
                                                               const float* bias);

}  // namespace onednn
}  // namespace et_cpu_plugin
