// Our own kernel for `et_cpu_quant::linear_8da.out` (torchao's 8da4w linear, see
// backends/cpu/torchao/linear_8da.py and the scalar reference runtime/linear_8da.cc): each float32
// row quantized to int8 per token exactly as the reference does it (vectorized, bit-identical),
// int8 x int4 / int8 products exact in int32 per group, then the float epilogue (sum over groups of
// acc * weight scale, times the row scale, plus the bias).
//
// The weights are packed once, at bind, into blocks of 16 output channels. Within a block, each
// 64-byte vector feeds one `vpdpbusd` (u8 x s8, 4 products summed per int32 lane) per 4 k for all
// 16 channels: byte 4c + t of a vector is channel c's weight at k + t. 4-bit weights stay 4-bit:
// one 64-byte vector holds 8 k, k..k+3 in the low nibbles and k+4..k+7 in the high ones (unpacked
// in registers with an and / a shift). Weights are stored unsigned (w + 8, or w + 128 for 8
// bits), activations are the signed int8 q, so per (channel, group)
//   sum (q - zq)(w - zw) = dot(u, q) - (offset + zw) * sum(q) - zq * sum(w - zw)
// where sum(q) is the row's per-group activation sum and sum(w - zw) is precomputed at pack time.
// Beside the weights, per block and group, 16 contiguous scales, weight sums and (with zero
// points) offsets.
//
// Decode (1 row) streams the weights once, output-channel blocks shared out on the work pool (on
// AVX-512 VNNI with 4 bits: the packed nibbles and scales only, see Linear8daDecodeOptions);
// prefill tiles rows (up to 4 rows x 2 blocks, each unpacked weight vector feeds 4 rows) over
// chunks of blocks that stay in cache while all rows pass. From 8 rows on AVX-512 VNNI (the
// many-row path: 4 rows x 3 blocks) a chunk's 4-bit weights are first unpacked to bytes in a
// per-thread buffer, once for all its row tiles. Without weight zero points the accumulators
// start at -offset * sum(q), so the per-group epilogue is one vpmulld (zero point x weight sums),
// a subtraction, the conversion and the reference's multiply and add. The tiles' loops over rows and blocks are fully unrolled (the
// accumulators must stay in registers: rolled, GCC kept them on the stack, ~1.6x slower), and
// for group 32 the step loop too. ISA chosen at run time:
// AVX-512 VNNI (vpdpbusd), else AVX2 (vpmaddubsw + vpmaddwd for 4 bits, 16-bit products for 8
// bits), else the binder declines and the Reference provider's scalar kernel runs.
//
// Plain types only (no runtime or oneDNN types), like the rest of kernels/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace et_cpu_plugin {
namespace onednn {

class WorkPool;

enum class Linear8daIsa { kNone = 0, kAvx2 = 1, kAvx512Vnni = 2 };

// The best path this CPU runs (checked once): AVX-512 VNNI (avx512f/bw/vl/vnni), AVX2 (avx2,
// fma), or kNone.
Linear8daIsa linear_8da_cpu_isa();
// The path to use: the CPU's best, lowered by ET_CPU_LINEAR_8DA_ISA ("avx2": at most AVX2,
// "none": none, so the binder declines; read at each call), kNone with ET_CPU_LINEAR_8DA=0.
Linear8daIsa linear_8da_isa();
const char* linear_8da_isa_name(Linear8daIsa isa);

struct Linear8daParams {
  int64_t k = 0;      // in features
  int64_t n = 0;      // out features
  int64_t group = 0;  // divides k
  int64_t bits = 4;   // 4 or 8
};

// Whether the kernel runs these shapes (group a multiple of 8 for 4 bits / 4 for 8 bits, at
// most 32768; k a multiple of the group); the reason otherwise.
bool linear_8da_supports(const Linear8daParams& params, std::string* reason);

struct Linear8daPacked {
  Linear8daParams params;
  int64_t groups = 0;
  int64_t blocks = 0;           // ceil(n / 16)
  int64_t vectors_per_group = 0;  // 64-byte weight vectors per block and group
  int32_t offset = 8;           // 8 (4 bits) or 128 (8 bits)
  bool has_zero_points = false;
  // Block b's weights from weights()[b * block_bytes]: groups x vectors_per_group x 64 bytes.
  size_t block_bytes = 0;
  // Per block, per group, 16 values each: scales (padding channels 0), sum over the group of
  // (w - zw), and with zero points offset + zw.
  std::vector<float> scales;
  std::vector<int32_t> weight_sums;
  std::vector<int32_t> offsets;
  std::vector<float> bias;  // blocks * 16, zero-padded (zeros without a bias)
  std::vector<uint8_t> storage;  // the weights, 64 bytes of slack to align them
  const uint8_t* weights() const;
  size_t bytes() const;
};

// Packs the op's constants: `weight` uint8 [n, k / 2] (4 bits: w + 8, even k in the low nibble)
// or int8 [n, k]; `scales` float32 [n, groups]; `zero_points` int8 [n, groups] or null; `bias`
// [n] or null. `params` must satisfy linear_8da_supports.
std::shared_ptr<const Linear8daPacked> pack_linear_8da(const Linear8daParams& params,
                                                       const void* weight, const float* scales,
                                                       const int8_t* zero_points,
                                                       const float* bias);

class WeightCache;
// The packing of these constants that `cache` holds alive (a graph's shape plans bind the same
// constants once per size), or a new one remembered there (weight_cache.cc); packed anew when
// `cache` is null.
std::shared_ptr<const Linear8daPacked> cached_linear_8da_weights(WeightCache* cache,
                                                                 const Linear8daParams& params,
                                                                 const void* weight,
                                                                 const float* scales,
                                                                 const int8_t* zero_points,
                                                                 const float* bias);

// The one-row (decode) path on AVX-512 VNNI with 4-bit weights, read when a kernel is made:
// `gemv` (ET_CPU_LINEAR_8DA_GEMV, default on; 0 runs the general 1-row tile instead, which reads
// the precomputed weight sums) streams only the int4 weights and scales, the activation zero
// point's term computed in registers; `prefetch` (ET_CPU_LINEAR_8DA_PREFETCH, bytes, 0 to 65536,
// default 256) how far ahead each weight stream is prefetched in software, 0 for none.
struct Linear8daDecodeOptions {
  bool gemv = true;
  int64_t prefetch = 0;
};
Linear8daDecodeOptions linear_8da_decode_options();

class Linear8daGemm {
 public:
  // `isa` must not be kNone nor above linear_8da_cpu_isa().
  Linear8daGemm(std::shared_ptr<const Linear8daPacked> packed, Linear8daIsa isa);
  // y [rows, n] from x [rows, k], shared out on `pool` (null: the calling thread alone).
  void run(const float* x, int64_t rows, float* y, WorkPool* pool);
  Linear8daIsa isa() const { return isa_; }

  // Rows x blocks of the many-row path's tiles (8 rows and more on AVX-512 VNNI).
  struct GemmShape {
    int rows;
    int blocks;
  };
  size_t weights_bytes() const { return packed_->bytes(); }

  // The quantized rows (per token, as the reference): public for the kernels in the .cc.
  struct Rows {
    int64_t stride = 0;               // bytes per row in q
    std::vector<int8_t> q;            // rows x stride
    std::vector<float> scale;         // per row
    std::vector<int32_t> zero_point;  // per row
    std::vector<int32_t> sums;        // rows x groups: sum of q over each group
    int32_t offset = 0;               // the weights' offset (8 or 128)
    std::vector<int32_t> offset_sums;  // rows x groups: -offset * sums (wrapping)
  };

 private:
  std::shared_ptr<const Linear8daPacked> packed_;
  Linear8daIsa isa_;
  GemmShape gemm_shape_;
  Linear8daDecodeOptions decode_;
  Rows rows_;
  // The many-row path unpacks a chunk's weights into a buffer of the running thread (one per
  // thread, not per kernel: unpack_scratch in the .cc).
};

// The many-row tile: 4 rows x 3 blocks, or ET_CPU_LINEAR_8DA_TILE="RxB" (R <= 8, B <= 4; for
// tuning and tests), read when a kernel is made.
Linear8daGemm::GemmShape linear_8da_gemm_shape();

}  // namespace onednn
}  // namespace et_cpu_plugin
