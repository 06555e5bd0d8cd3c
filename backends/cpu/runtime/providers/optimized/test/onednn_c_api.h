// A C ABI over the plans of onednn/onednn_provider.h, for ctypes (tests, benchmarks). Not the
// runtime's interface: the runtime calls the C++ API directly.
//
// Every function that can fail returns NULL or a non-zero int and leaves the message in
// etdnn_last_error() (per thread). Post-ops are three parallel arrays: kinds (0 = residual add,
// 1 = relu, 2 = clamp, 3 = sigmoid, 4 = silu, 5 = hardswish, 6 = hardsigmoid, 7 = leaky relu),
// minimums (clamp's, or leaky relu's slope) and maximums (clamp's).
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct etdnn_provider etdnn_provider;
typedef struct etdnn_plan etdnn_plan;

const char* etdnn_last_error(void);

etdnn_provider* etdnn_provider_create(int num_threads);
// work_sharing: 1 = split plans on the provider's pool (default), 0 = oneDNN's OpenMP team.
// min_task_flops: see ProviderOptions (-1 = default, 0 = split every op as finely as allowed).
etdnn_provider* etdnn_provider_create_ex(int num_threads, int work_sharing,
                                         int64_t min_task_flops);
// A provider of a graph whose sizes vary (ProviderOptions::size_independent_plans): a linear of
// 1-4 rows prepares the plan that reads its rows at each run.
etdnn_provider* etdnn_provider_create_sizes_vary(int num_threads);
void etdnn_provider_destroy(etdnn_provider* provider);
int etdnn_provider_num_threads(const etdnn_provider* provider);
int etdnn_provider_work_sharing(const etdnn_provider* provider);
size_t etdnn_provider_weights_bytes(const etdnn_provider* provider);
size_t etdnn_provider_scratchpad_bytes(const etdnn_provider* provider);
size_t etdnn_provider_staging_bytes(const etdnn_provider* provider);
// The process's weight arena (common/weight_arena.h): bytes of huge-page slabs held and of live
// weight blocks in them.
void etdnn_weight_arena_stats(size_t* slab_bytes, size_t* block_bytes);
// Writes the dispatched ISA name into `out` (NUL-terminated, truncated to `size`).
void etdnn_provider_isa(const etdnn_provider* provider, char* out, size_t size);

// geometry = {batch, in_channels, out_channels, groups}; the spatial arrays have `rank` entries.
// input_from: NULL for a plain (or, with input_channels_last, NHWC) input, or a conv plan whose
// output layout this conv reads. output_layout: 0 plain, 1 channels-last, 2 oneDNN's best.
etdnn_plan* etdnn_conv_prepare(
    etdnn_provider* provider,
    int rank,
    const int64_t* geometry,
    const int64_t* input_size,
    const int64_t* kernel_size,
    const int64_t* stride,
    const int64_t* padding,
    const int64_t* dilation,
    const float* weight,
    const float* bias,
    const int* post_kinds,
    const float* post_mins,
    const float* post_maxs,
    int post_count,
    const etdnn_plan* input_from,
    int input_channels_last,
    int output_layout);
etdnn_plan* etdnn_linear_prepare(
    etdnn_provider* provider,
    int64_t rows,
    int64_t in_features,
    int64_t out_features,
    int weight_is_k_by_n,
    const float* weight,
    const float* bias,
    const int* post_kinds,
    const float* post_mins,
    const float* post_maxs,
    int post_count);
etdnn_plan* etdnn_matmul_prepare(
    etdnn_provider* provider,
    int64_t batch,
    int64_t m,
    int64_t k,
    int64_t n,
    const int* post_kinds,
    const float* post_mins,
    const float* post_maxs,
    int post_count);
// Converts `conv`'s output layout to plain.
etdnn_plan* etdnn_reorder_to_plain_prepare(etdnn_provider* provider, const etdnn_plan* conv);

// conv/linear/reorder read `a`; matmul reads `a` and `b`. Returns 0 on success.
int etdnn_plan_run(const etdnn_plan* plan, const float* a, const float* b, float* out,
                   const float* residual);
// Runs the plan `runs` times back to back (as etdnn_plan_run) and returns the fastest run in
// nanoseconds (steady clock), or -1 on failure: timing without the caller's per-call overhead.
double etdnn_plan_time(const etdnn_plan* plan, const float* a, const float* b, float* out,
                       const float* residual, int runs);
// Bytes of the output buffer run() writes (conv: of its output layout).
size_t etdnn_plan_output_bytes(const etdnn_plan* plan);
int etdnn_plan_output_is_plain(const etdnn_plan* plan);
int etdnn_plan_output_is_channels_last(const etdnn_plan* plan);
// Converts plain data into `conv`'s output layout (e.g. to feed a residual add in that layout).
etdnn_plan* etdnn_reorder_from_plain_prepare(etdnn_provider* provider, const etdnn_plan* conv);
// 1 when two conv plans write the same layout (a residual must match the consumer's output).
int etdnn_plan_same_output_layout(const etdnn_plan* a, const etdnn_plan* b);
size_t etdnn_plan_weights_bytes(const etdnn_plan* plan);
size_t etdnn_plan_scratchpad_bytes(const etdnn_plan* plan);
// Pieces a split plan runs on the work-sharing pool (1: one oneDNN call).
size_t etdnn_plan_pieces(const etdnn_plan* plan);
// "implementation | input layout -> output layout" into `out`.
void etdnn_plan_describe(const etdnn_plan* plan, char* out, size_t size);
void etdnn_plan_destroy(etdnn_plan* plan);

// The plans' own vector kernels (vector_activations.h): kind 3 = sigmoid, 4 = silu, as in the
// post-op kinds. has: 1 when this CPU runs it, else 0. apply: output[i] = f(input[i]) for
// `count` floats (in place when equal); non-zero when there is no such kernel here.
int etdnn_has_vector_activation(int kind);
int etdnn_vector_activation(int kind, const float* input, float* output, size_t count);

// The int8 depthwise kernel (kernels/depthwise_int8.h) on one channels-last image, all rows on
// the calling thread. `geometry`: channels, in_h, in_w, out_h, out_w, kernel, stride_h,
// stride_w, pad_top, pad_left. `quant`: input scale, input zero point, output scale, output
// zero point, quant_min, quant_max, output_min, output_max (+-inf: none), is_signed (1: s8).
// `bias` may be null. 0: done; 1: an error (etdnn_last_error); 2: the kernel does not take it.
int etdnn_depthwise_int8_run(const int64_t* geometry, const double* quant, const int8_t* weight,
                             const float* weight_scales, const float* bias, const uint8_t* input,
                             uint8_t* output);

// The int8 1x1 convolution (kernels/pointwise_int8.h) over `pixels` channels-last pixels, in
// `pieces` consecutive slices (1: whole). `shape`: in channels K, out channels N. `quant`: as
// etdnn_depthwise_int8_run's. `weight` s8 [N, K]; `bias` may be null.
// 0: done; 1: an error (etdnn_last_error); 2: the kernel does not take it.
int etdnn_pointwise_int8_run(const int64_t* shape, const double* quant, const int8_t* weight,
                             const float* weight_scales, const float* bias, const uint8_t* input,
                             uint8_t* output, int64_t pixels, int64_t pieces);

// The float32 1x1 convolution (kernels/pointwise_conv.h: BlockPlan's expand) over `pixels`
// channels-last pixels on the calling thread, `runs` times (>= 1); the fastest run's
// nanoseconds into `best_ns` when not null. `shape`: in channels K, out channels N. `weight`
// [N, K]; `bias` may be null; post-ops as etdnn_conv_prepare's. 0: done; 1: an error
// (etdnn_last_error); 2: the kernel does not take it (ET_CPU_OWN_EXPAND=0, no AVX-512F).
int etdnn_pointwise_conv_run(const int64_t* shape, const float* weight, const float* bias,
                             const int* post_kinds, const float* post_mins,
                             const float* post_maxs, int post_count, const float* input,
                             float* output, int64_t pixels, int runs, double* best_ns);

// The int8 add (kernels/quantized_add.h) of `count` bytes, in `pieces` consecutive slices (as the
// work pool cuts it; 1: whole). `quant`: a scale, a zero point, b scale, b zero point, output
// scale, output zero point, quant_min, quant_max, low, high (+-inf: none), is_signed (1: s8).
// 0: done; 1: an error (etdnn_last_error); 2: the kernel does not run here.
int etdnn_quantized_add_run(const double* quant, const uint8_t* a, const uint8_t* b,
                            uint8_t* output, int64_t count, int64_t pieces);

#ifdef __cplusplus
}
#endif
