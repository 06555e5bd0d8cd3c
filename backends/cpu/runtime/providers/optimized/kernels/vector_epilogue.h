// The in-register epilogue our AVX-512 kernels share (row_gemm.cc, the depthwise, stem, 1x1, 3x3,
// Winograd and squeeze-excite kernels): bias and accumulation are the kernel's own; these apply the
// fused post-ops (residual add, ReLU, clamp and the activations with a vector form) to one vector
// of 16 outputs before its only store, and turn their class (FusedEpilogue) into the template
// argument a kernel specializes on (with_fused_epilogue).
#pragma once

#include <algorithm>
#include <limits>
#include <type_traits>

#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_provider.h"

namespace et_cpu_plugin {
namespace onednn {

// Whether epilogue16 computes activation `kind` in registers.
inline bool activation_in_registers(Activation::Kind kind) {
  switch (kind) {
    case Activation::Kind::kRelu:
    case Activation::Kind::kLeakyRelu:
    case Activation::Kind::kClamp:
    case Activation::Kind::kHardswish:
    case Activation::Kind::kHardsigmoid:
    case Activation::Kind::kSigmoid:
    case Activation::Kind::kSilu:
      return true;
    default:
      return false;
  }
}

ET_AVX512 inline __m512 clamp16(__m512 v, float lo, float hi) {
  return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
}

// relu6(x + 3) / 6
ET_AVX512 inline __m512 hardsigmoid16(__m512 v) {
  return _mm512_mul_ps(clamp16(_mm512_add_ps(v, _mm512_set1_ps(3.0f)), 0.0f, 6.0f),
                       _mm512_set1_ps(1.0f / 6.0f));
}

ET_AVX512 inline __m512 activation16(const Activation& a, __m512 v) {
  switch (a.kind) {
    case Activation::Kind::kRelu:
      return _mm512_max_ps(v, _mm512_setzero_ps());
    case Activation::Kind::kLeakyRelu: {
      const __mmask16 negative = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
      return _mm512_mask_mul_ps(v, negative, v, _mm512_set1_ps(a.alpha));
    }
    case Activation::Kind::kClamp:
      return clamp16(v, a.alpha, a.beta);
    case Activation::Kind::kHardswish:
      return _mm512_mul_ps(v, hardsigmoid16(v));
    case Activation::Kind::kHardsigmoid:
      return hardsigmoid16(v);
    case Activation::Kind::kSigmoid:
      return sigmoid16(v);
    case Activation::Kind::kSilu:
      return silu16(v);
    default:
      return v;  // excluded by row_gemm_supports
  }
}

// The post-ops on one vector of output columns; `residual` points at the same columns.
ET_AVX512 inline __m512 epilogue16(const PostOps& post_ops, __m512 v, const float* residual,
                                   __mmask16 mask) {
  for (const PostOp& op : post_ops) {
    switch (op.kind) {
      case PostOp::Kind::kAdd:
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, residual));
        break;
      case PostOp::Kind::kRelu:
        v = _mm512_max_ps(v, _mm512_setzero_ps());
        break;
      case PostOp::Kind::kClamp:
        v = clamp16(v, op.min, op.max);
        break;
      case PostOp::Kind::kActivation:
        v = activation16(op.activation, v);
        break;
    }
  }
  return v;
}

// Whether every post-op of `post_ops` has an in-register form (epilogue16 runs them all).
inline bool post_ops_in_registers(const PostOps& post_ops) {
  return std::all_of(post_ops.begin(), post_ops.end(), [](const PostOp& op) {
    return op.kind != PostOp::Kind::kActivation || activation_in_registers(op.activation.kind);
  });
}

// Whether a kernel that stores each output vector once, without reading the output first (the
// depthwise, 1x1, stem and squeeze-excite kernels), runs `post_ops` itself: no residual add, and
// every other post-op in registers.
inline bool post_ops_in_registers_without_add(const PostOps& post_ops) {
  return std::none_of(post_ops.begin(), post_ops.end(),
                      [](const PostOp& op) { return op.kind == PostOp::Kind::kAdd; }) &&
         post_ops_in_registers(post_ops);
}

// How a kernel with the post-ops as a template parameter applies them to each output vector: the
// three the mobile networks fuse (ReLU / ReLU6 / hardtanh as a clamp, hardswish, SiLU) with their
// own inlined code, every other in-register chain through epilogue16 (a dispatch per vector).
// kSiluFast: SiLU by silu16_fast (a kernel's choice for kSilu; fused_epilogue_of never gives it).
enum class FusedEpilogue { kClamp, kHardswish, kSilu, kSiluFast, kGeneric };

// The class E as a type: what with_fused_epilogue passes its callable.
template <FusedEpilogue E>
using FusedEpilogueClass = std::integral_constant<FusedEpilogue, E>;

// f(FusedEpilogueClass<epi>{}): the runtime class `epi` as a compile-time one (in f:
// `decltype(e)::value`), f's result returned (the same type for every class). Instantiates f for
// the classes fused_epilogue_of gives, kClamp, kHardswish, kSilu and kGeneric, and with
// kWithSiluFast for kSiluFast too; otherwise kSiluFast takes kGeneric.
template <bool kWithSiluFast = false, typename F>
auto with_fused_epilogue(FusedEpilogue epi, F&& f) {
  switch (epi) {
    case FusedEpilogue::kClamp:
      return f(FusedEpilogueClass<FusedEpilogue::kClamp>{});
    case FusedEpilogue::kHardswish:
      return f(FusedEpilogueClass<FusedEpilogue::kHardswish>{});
    case FusedEpilogue::kSilu:
      return f(FusedEpilogueClass<FusedEpilogue::kSilu>{});
    case FusedEpilogue::kSiluFast:
      if constexpr (kWithSiluFast) return f(FusedEpilogueClass<FusedEpilogue::kSiluFast>{});
      break;
    case FusedEpilogue::kGeneric:
      break;
  }
  return f(FusedEpilogueClass<FusedEpilogue::kGeneric>{});
}

// The class of `post_ops` (no add) and, for kClamp, its bounds.
inline FusedEpilogue fused_epilogue_of(const PostOps& post_ops, float* lo, float* hi) {
  *lo = 0.0f;
  *hi = std::numeric_limits<float>::infinity();
  if (post_ops.size() != 1) return FusedEpilogue::kGeneric;
  const PostOp& op = post_ops[0];
  switch (op.kind) {
    case PostOp::Kind::kRelu:
      return FusedEpilogue::kClamp;
    case PostOp::Kind::kClamp:
      *lo = op.min;
      *hi = op.max;
      return FusedEpilogue::kClamp;
    case PostOp::Kind::kActivation:
      switch (op.activation.kind) {
        case Activation::Kind::kRelu:
          return FusedEpilogue::kClamp;
        case Activation::Kind::kClamp:
          *lo = op.activation.alpha;
          *hi = op.activation.beta;
          return FusedEpilogue::kClamp;
        case Activation::Kind::kHardswish:
          return FusedEpilogue::kHardswish;
        case Activation::Kind::kSilu:
          return FusedEpilogue::kSilu;
        default:
          return FusedEpilogue::kGeneric;
      }
    default:
      return FusedEpilogue::kGeneric;
  }
}

// The post-ops of class E on one vector (`lo` / `hi`: kClamp's bounds, broadcast).
template <FusedEpilogue E>
ET_AVX512 inline __attribute__((always_inline)) __m512 fused_epilogue(const PostOps& post_ops,
                                                                      __m512 v, __m512 lo,
                                                                      __m512 hi) {
  if constexpr (E == FusedEpilogue::kClamp) {
    return _mm512_min_ps(_mm512_max_ps(v, lo), hi);
  } else if constexpr (E == FusedEpilogue::kHardswish) {
    return _mm512_mul_ps(v, hardsigmoid16(v));
  } else if constexpr (E == FusedEpilogue::kSilu) {
    return silu16(v);
  } else if constexpr (E == FusedEpilogue::kSiluFast) {
    return silu16_fast(v);
  } else {
    return epilogue16(post_ops, v, nullptr, static_cast<__mmask16>(0xFFFF));
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
