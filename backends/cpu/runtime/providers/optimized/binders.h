// The Optimized provider's binders, one file per op family; bind_table.cc maps each routed
// kernel name to one of them. A binder checks the op's arguments, makes the kernel (an
// OptimizedKernel on a oneDNN plan or on our own loops), prepares it on the session and hands it
// to the runtime in *out, or declines with the reason in decline->reason (Error::NotSupported)
// so the runtime falls back to the Reference provider. `fused` (where a binder takes it): how
// many of the offered fusable steps became post-ops of the kernel.
#pragma once

#include <cstddef>
#include <memory>

#include "backends/cpu/runtime/providers/optimized/binding.h"
#include "backends/cpu/runtime/providers/optimized/kernels/mask_ops.h"

namespace et_cpu_plugin {
namespace cpu {
namespace optimized {

using Out = std::unique_ptr<BoundKernel>*;

// bind_convolution.cc: aten::convolution.out, plain (and fused into inverted residual blocks)
// or transposed.
Error bind_conv(const OpBinding& op, OptimizedSession& session, Out out, Decline* decline,
                size_t* fused);
// The squeeze-excite gate multiply (aten::mul.out of an activation and a [N or 1, C, 1, 1]
// gate) and the 1x1 convolution offered after it (with its post-ops) as one kernel whose
// weights take the gate per image; false (nothing bound) when the op is not that, or
// ET_CPU_SE_GATE_FOLD says no (bind_convolution.cc).
bool bind_gated_pointwise(const OpBinding& op, OptimizedSession& session, Out out, size_t* fused);
// Whether ET_CPU_SE_GATE_FOLD (common/switches.h switch_reach: "0", "all", unset or "1": the
// default rule) folds a gate into a 1x1 convolution of `out_channels` over `pixels` pixels.
bool se_gate_fold_wanted(int64_t out_channels, int64_t pixels);

// bind_linear.cc: aten::linear.out / aten::addmm.out (`is_addmm`), aten::mm.out / aten::bmm.out
// (`batched`).
Error bind_linear(const OpBinding& op, bool is_addmm, OptimizedSession& session, Out out,
                  Decline* decline, size_t* fused);
Error bind_matmul(const OpBinding& op, bool batched, OptimizedSession& session, Out out,
                  Decline* decline, size_t* fused);

// bind_pooling.cc: pooling, global average (mean), resampling, concatenation, permute.
Error bind_max_pool(const OpBinding& op, OptimizedSession& session, Out out, Decline* decline);
Error bind_avg_pool(const OpBinding& op, OptimizedSession& session, Out out, Decline* decline);
Error bind_adaptive_avg_pool(const OpBinding& op, OptimizedSession& session, Out out,
                             Decline* decline, size_t* fused);
Error bind_mean(const OpBinding& op, OptimizedSession& session, Out out, Decline* decline,
                size_t* fused);
// bind_squeeze_excite.cc: a global average pool of `input` into `pooled` ([N, C, 1, 1]) and its
// offered steps as one squeeze-excite kernel (kernels/squeeze_excite.h); false (nothing bound)
// when the steps are not that tail.
bool bind_squeeze_excite(const OpBinding& op, const Tensor* input, const Tensor* pooled,
                         OptimizedSession& session, Out out, size_t* fused);
Error bind_upsample(const OpBinding& op, bool linear, OptimizedSession& session, Out out,
                    Decline* decline);
Error bind_cat(const OpBinding& op, OptimizedSession& session, Out out, Decline* decline);
Error bind_permute(const OpBinding& op, OptimizedSession& session, Out out, Decline* decline);

// bind_elementwise.cc: activations and the scalar arithmetic they express, binary ops with
// broadcasting.
Error bind_eltwise(const OpBinding& op, OptimizedSession& session, Out out, Decline* decline);
Error bind_binary(const OpBinding& op, onednn::BinaryOp kind, const char* what,
                  OptimizedSession& session, Out out, Decline* decline);

// bind_rotary.cc: et_cpu_quant::rotary.out (rotary embeddings, rotate-half form) on
// kernels/rotary.h.
Error bind_rotary(const OpBinding& op, OptimizedSession& session, Out out, Decline* decline);

// bind_rms_norm.cc: et_cpu_quant::rms_norm.out (RMSNorm over the last dim) on
// kernels/rms_norm.h.
Error bind_rms_norm(const OpBinding& op, OptimizedSession& session, Out out, Decline* decline);

// bind_normalization.cc: layer norm, softmax and log-softmax.
Error bind_layer_norm(const OpBinding& op, OptimizedSession& session, Out out, Decline* decline);
Error bind_softmax(const OpBinding& op, bool log, OptimizedSession& session, Out out,
                   Decline* decline);
// et_cpu_quant::safe_softmax.out: softmax over the last dim, fully masked rows giving zeros.
Error bind_safe_softmax(const OpBinding& op, OptimizedSession& session, Out out,
                        Decline* decline);

// bind_reductions.cc: reductions, attention-mask ops and the embedding gather, on our own loops.
enum class Reduction { kMax, kMin, kArgmax, kArgmin, kAny };
Error bind_reduction(const OpBinding& op, Reduction kind, OptimizedSession& session, Out out,
                     Decline* decline);
Error bind_compare_scalar(const OpBinding& op, onednn::Compare compare, OptimizedSession& session,
                          Out out, Decline* decline);
Error bind_logical_not(const OpBinding& op, OptimizedSession& session, Out out, Decline* decline);
Error bind_where(const OpBinding& op, OptimizedSession& session, Out out, Decline* decline);
Error bind_embedding(const OpBinding& op, OptimizedSession& session, Out out, Decline* decline);

// bind_quantized.cc: the delegate's int8 ops (checked at bind, prepared by finalize) and the
// per-tensor quantize / dequantize loops.
Error bind_int8(const OpBinding& op, OptimizedSession& session, Out out, Decline* decline);
Error bind_quantize_convert(const OpBinding& op, bool quantize, OptimizedSession& session,
                            Out out, Decline* decline);
// torchao's 8da4w linear (et_cpu_quant::linear_8da.out) on kernels/linear_8da_vnni.h.
Error bind_linear_8da(const OpBinding& op, OptimizedSession& session, Out out, Decline* decline);

}  // namespace optimized
}  // namespace cpu
}  // namespace et_cpu_plugin
