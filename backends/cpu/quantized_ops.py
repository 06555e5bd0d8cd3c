"""The delegate's int8 ops: a convolution, linear, max pool or add that reads and writes
quantized tensors.

Preprocess (`quantized_fusion.py`) rewrites each PT2E group `dequantize -> conv/linear ->
[relu/hardtanh/clamp] -> quantize` into one of these, so the runtime runs it as one int8 kernel
(oneDNN) and the activation stays int8 between quantized ops. Their arguments carry the
quantization: the input's and the output's per-tensor scale and zero point as scalars, the
per-output-channel weight scales as a float32 tensor (symmetric int8 weights, zero point 0), and
the float32 bias. `output_min` / `output_max` clamp the float result before it is quantized (a
fused ReLU is 0 / +inf); `quant_min` / `quant_max` are the output dtype's quantized range.

`max_pool2d` is PT2E's `dequantize -> max_pool2d -> quantize` with one set of parameters (what
XNNPACK's quantizer shares between a max pool's input and output): dequantize is increasing and
quantize gives back each dequantized value, so it is the max pool of the int8 values themselves
and needs no parameters. `add` is `dequantize(a) + dequantize(b) -> [clamp] -> quantize` for two
int8 tensors of one shape, each with its own grid, computed in float32 as those ops do.

The schemas are defined here once; `gen_kernel_signatures.py` reads `SCHEMAS` so the runtime
checks payload arguments against the same text. The eager implementations are the reference
semantics (dequantize, float op, clamp, quantize with round-half-even), used for shape inference
and by the tests.
"""

import math
from typing import Any

import torch

NAMESPACE = "et_cpu_quant"

_COMMON = (
    "float input_scale, int input_zero_point, float output_scale, int output_zero_point, "
    "int quant_min, int quant_max, float output_min, float output_max"
)
_CONV = (
    "conv2d(Tensor input, Tensor weight, Tensor weight_scales, Tensor? bias, int[] stride, "
    f"int[] padding, int[] dilation, int groups, {_COMMON}"
)
_LINEAR = f"linear(Tensor input, Tensor weight, Tensor weight_scales, Tensor? bias, {_COMMON}"
_ADD = (
    "add(Tensor a, float a_scale, int a_zero_point, Tensor b, float b_scale, int b_zero_point, "
    "float output_scale, int output_zero_point, int quant_min, int quant_max, float output_min, "
    "float output_max"
)
# torchao's 8da4w linear (torchao/linear_8da.py): per-token dynamic int8 activations, grouped
# weights.
_LINEAR_8DA = (
    "linear_8da(Tensor input, Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, "
    "Tensor? bias, int group_size, int weight_bits"
)
# torchao's weight-only linear and embedding (torchao/weight_only.py): float32 activations, the
# same packed grouped weights.
_LINEAR_WO = _LINEAR_8DA.replace("linear_8da(", "linear_wo(", 1)
_EMBEDDING_WO = (
    "embedding_wo(Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, "
    "Tensor indices, int group_size, int weight_bits"
)
_MAX_POOL = (
    "max_pool2d(Tensor input, int[] kernel_size, int[] stride, int[] padding, int[] dilation, "
    "bool ceil_mode"
)

# name -> schema without namespace; the out variants end in `*, Tensor(a!) out`.
SCHEMAS: dict[str, str] = {
    "conv2d": f"{_CONV}) -> Tensor",
    "conv2d.out": _CONV.replace("conv2d(", "conv2d.out(", 1) + ", *, Tensor(a!) out) -> Tensor(a!)",
    "linear": f"{_LINEAR}) -> Tensor",
    "linear.out": _LINEAR.replace("linear(", "linear.out(", 1)
    + ", *, Tensor(a!) out) -> Tensor(a!)",
    "add": f"{_ADD}) -> Tensor",
    "add.out": _ADD.replace("add(", "add.out(", 1) + ", *, Tensor(a!) out) -> Tensor(a!)",
    "linear_8da": f"{_LINEAR_8DA}) -> Tensor",
    "linear_8da.out": _LINEAR_8DA.replace("linear_8da(", "linear_8da.out(", 1)
    + ", *, Tensor(a!) out) -> Tensor(a!)",
    "linear_wo": f"{_LINEAR_WO}) -> Tensor",
    "linear_wo.out": _LINEAR_WO.replace("linear_wo(", "linear_wo.out(", 1)
    + ", *, Tensor(a!) out) -> Tensor(a!)",
    "embedding_wo": f"{_EMBEDDING_WO}) -> Tensor",
    "embedding_wo.out": _EMBEDDING_WO.replace("embedding_wo(", "embedding_wo.out(", 1)
    + ", *, Tensor(a!) out) -> Tensor(a!)",
    # Rotary position embedding, "rotate half" form (fuse_rotary.py): float32, not quantized.
    "rotary": "rotary(Tensor x, Tensor cos, Tensor sin) -> Tensor",
    "rotary.out": "rotary.out(Tensor x, Tensor cos, Tensor sin, *, Tensor(a!) out) -> Tensor(a!)",
    # RMSNorm over the last dim (fuse_rms_norm.py): float32, not quantized.
    "rms_norm": "rms_norm(Tensor x, Tensor? weight, float eps) -> Tensor",
    "rms_norm.out": "rms_norm.out(Tensor x, Tensor? weight, float eps, *, Tensor(a!) out) "
    "-> Tensor(a!)",
    # Softmax over the last dim, fully masked rows giving zeros (fuse_safe_softmax.py): float32.
    "safe_softmax": "safe_softmax(Tensor x, int dim) -> Tensor",
    "safe_softmax.out": "safe_softmax.out(Tensor x, int dim, *, Tensor(a!) out) -> Tensor(a!)",
    "max_pool2d": f"{_MAX_POOL}) -> Tensor",
    "max_pool2d.out": _MAX_POOL.replace("max_pool2d(", "max_pool2d.out(", 1)
    + ", *, Tensor(a!) out) -> Tensor(a!)",
}

# Quantized dtype -> its full range (the output range before a fused clamp narrows it).
QUANTIZED_RANGES: dict[torch.dtype, tuple[int, int]] = {
    torch.int8: (-128, 127),
    torch.uint8: (0, 255),
}

_library = torch.library.Library(NAMESPACE, "DEF")
for _schema in SCHEMAS.values():
    _library.define(_schema)


def _dequantize(x: torch.Tensor, scale: float, zero_point: int) -> torch.Tensor:
    return (x.to(torch.float32) - zero_point) * scale


def _weights(weight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    shape = [-1] + [1] * (weight.dim() - 1)
    return weight.to(torch.float32) * scales.to(torch.float32).reshape(shape)


def _finish(
    y: torch.Tensor,
    dtype: torch.dtype,
    output_scale: float,
    output_zero_point: int,
    quant_min: int,
    quant_max: int,
    output_min: float,
    output_max: float,
) -> torch.Tensor:
    if math.isfinite(output_min):
        y = y.clamp(min=output_min)
    if math.isfinite(output_max):
        y = y.clamp(max=output_max)
    q = torch.round(y * (1.0 / output_scale)) + output_zero_point
    return q.clamp(quant_min, quant_max).to(dtype)


# The trailing arguments both ops share, in schema order: input_scale, input_zero_point,
# output_scale, output_zero_point, quant_min, quant_max, output_min, output_max.
Quantization = tuple[float, int, float, int, int, int, float, float]


def _quantized(input: torch.Tensor, float_op: Any, quantization: tuple[Any, ...]) -> torch.Tensor:
    """float_op(dequantized input), clamped and quantized as `quantization` says."""
    input_scale, input_zero_point, *output = quantization
    return _finish(
        float_op(_dequantize(input, input_scale, input_zero_point)), input.dtype, *output
    )


def conv2d(
    input: torch.Tensor,
    weight: torch.Tensor,
    weight_scales: torch.Tensor,
    bias: torch.Tensor | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    *quantization: Any,
) -> torch.Tensor:
    """Reference semantics of `et_cpu_quant::conv2d` (`quantization`: see Quantization)."""
    w = _weights(weight, weight_scales)
    conv = torch.nn.functional.conv2d
    return _quantized(
        input, lambda x: conv(x, w, bias, stride, padding, dilation, groups), quantization
    )


def linear(
    input: torch.Tensor,
    weight: torch.Tensor,
    weight_scales: torch.Tensor,
    bias: torch.Tensor | None,
    *quantization: Any,
) -> torch.Tensor:
    """Reference semantics of `et_cpu_quant::linear` (`quantization`: see Quantization)."""
    w = _weights(weight, weight_scales)
    return _quantized(input, lambda x: torch.nn.functional.linear(x, w, bias), quantization)


def max_pool2d(
    input: torch.Tensor,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    ceil_mode: bool,
) -> torch.Tensor:
    """Reference semantics of `et_cpu_quant::max_pool2d`: the max pool of the int8 values (in
    float32, which holds every one of them exactly)."""
    pool = torch.nn.functional.max_pool2d
    y = pool(input.to(torch.float32), kernel_size, stride, padding, dilation, ceil_mode)
    return y.to(input.dtype)


def add(
    a: torch.Tensor,
    a_scale: float,
    a_zero_point: int,
    b: torch.Tensor,
    b_scale: float,
    b_zero_point: int,
    *output: Any,
) -> torch.Tensor:
    """Reference semantics of `et_cpu_quant::add` (`output`: output_scale, output_zero_point,
    quant_min, quant_max, output_min, output_max)."""
    y = _dequantize(a, a_scale, a_zero_point) + _dequantize(b, b_scale, b_zero_point)
    return _finish(y, a.dtype, *output)


def dequantize_weight(
    weight: torch.Tensor,
    weight_scales: torch.Tensor,
    weight_zero_points: torch.Tensor | None,
    group_size: int,
    weight_bits: int,
) -> torch.Tensor:
    """The float32 [rows, cols] a packed grouped weight stands for, as torchao's
    dequantize_affine computes it: (w - zero_point) * scale per (row, group of `group_size`
    columns). A 4-bit weight is uint8 [rows, cols / 2] holding w + 8, even columns in the low
    nibble; an 8-bit one int8 [rows, cols]."""
    if weight_bits == 4:
        low = (weight & 0xF).to(torch.int32) - 8
        high = (weight >> 4).to(torch.int32) - 8
        values = torch.stack((low, high), dim=-1).reshape(weight.shape[0], -1)
    else:
        values = weight.to(torch.int32)
    rows, cols = values.shape
    values = values.reshape(rows, cols // group_size, group_size)
    if weight_zero_points is not None:
        values = values - weight_zero_points.to(torch.int32).reshape(rows, -1, 1)
    w = values.to(torch.float32) * weight_scales.to(torch.float32).reshape(rows, -1, 1)
    return w.reshape(rows, cols)


def linear_8da(
    input: torch.Tensor,
    weight: torch.Tensor,
    weight_scales: torch.Tensor,
    weight_zero_points: torch.Tensor | None,
    bias: torch.Tensor | None,
    group_size: int,
    weight_bits: int,
) -> torch.Tensor:
    """Reference semantics of `et_cpu_quant::linear_8da`: torchao's per-token asymmetric int8
    quantization of `input` (choose_qparams_affine / quantize_affine / dequantize_affine), the
    weight dequantized per (output channel, group of `group_size` along K) as
    `dequantize_weight` says, then linear."""
    w = dequantize_weight(weight, weight_scales, weight_zero_points, group_size, weight_bits)
    low_val = torch.clamp(input.amin(dim=-1, keepdim=True), max=0.0)
    high_val = torch.clamp(input.amax(dim=-1, keepdim=True), min=0.0)
    scale = torch.clamp(
        (high_val - low_val) / 255.0, min=torch.finfo(torch.float32).smallest_normal
    )
    zero_point = torch.clamp(-128 - torch.round(low_val / scale), -128, 127)
    q = torch.clamp(torch.round(input * (1.0 / scale)) + zero_point, -128, 127)
    return torch.nn.functional.linear((q - zero_point) * scale, w, bias)


def linear_wo(
    input: torch.Tensor,
    weight: torch.Tensor,
    weight_scales: torch.Tensor,
    weight_zero_points: torch.Tensor | None,
    bias: torch.Tensor | None,
    group_size: int,
    weight_bits: int,
) -> torch.Tensor:
    """Reference semantics of `et_cpu_quant::linear_wo`: torchao's weight-only linear, the
    weight [N, K] dequantized as `dequantize_weight` says, then a float32 linear of `input`."""
    w = dequantize_weight(weight, weight_scales, weight_zero_points, group_size, weight_bits)
    return torch.nn.functional.linear(input, w, bias)


def embedding_wo(
    weight: torch.Tensor,
    weight_scales: torch.Tensor,
    weight_zero_points: torch.Tensor | None,
    indices: torch.Tensor,
    group_size: int,
    weight_bits: int,
) -> torch.Tensor:
    """Reference semantics of `et_cpu_quant::embedding_wo`: the rows of the table [V, D],
    dequantized as `dequantize_weight` says, at `indices` (each in [0, V))."""
    w = dequantize_weight(weight, weight_scales, weight_zero_points, group_size, weight_bits)
    return torch.nn.functional.embedding(indices, w)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Reference semantics of `et_cpu_quant::rotary`: `x * cos + rotate_half(x) * sin` over the
    last dim (`rotate_half(x) = cat([-x[..., h:], x[..., :h]])`, h half of it), cos and sin
    broadcast to x."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def _rotary_out(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, out: torch.Tensor
) -> torch.Tensor:
    return out.copy_(rotary(x, cos, sin))


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """Reference semantics of `et_cpu_quant::rms_norm`: `x * rsqrt(mean(x^2) + eps)` over the
    last dim, then `* weight` ([D]) when there is one, as torch computes that decomposition."""
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return normed if weight is None else normed * weight


def _rms_norm_out(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float, *, out: torch.Tensor
) -> torch.Tensor:
    return out.copy_(rms_norm(x, weight, eps))


def safe_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Reference semantics of `et_cpu_quant::safe_softmax`: softmax over `dim`, except that a
    row of -inf only (fully masked) gives zeros (what scaled_dot_product_attention exports)."""
    masked = (x == float("-inf")).all(dim=dim, keepdim=True)
    return torch.where(masked, torch.zeros_like(x), torch.softmax(x, dim=dim))


def _safe_softmax_out(x: torch.Tensor, dim: int, *, out: torch.Tensor) -> torch.Tensor:
    return out.copy_(safe_softmax(x, dim))


_library.impl("safe_softmax", safe_softmax, "CompositeExplicitAutograd")
_library.impl("safe_softmax.out", _safe_softmax_out, "CompositeExplicitAutograd")
_library.impl("rms_norm", rms_norm, "CompositeExplicitAutograd")
_library.impl("rms_norm.out", _rms_norm_out, "CompositeExplicitAutograd")
_library.impl("rotary", rotary, "CompositeExplicitAutograd")
_library.impl("rotary.out", _rotary_out, "CompositeExplicitAutograd")
_library.impl("linear_8da", linear_8da, "CompositeExplicitAutograd")
_library.impl("linear_wo", linear_wo, "CompositeExplicitAutograd")
_library.impl("embedding_wo", embedding_wo, "CompositeExplicitAutograd")
_library.impl("conv2d", conv2d, "CompositeExplicitAutograd")
_library.impl("add", add, "CompositeExplicitAutograd")
_library.impl("linear", linear, "CompositeExplicitAutograd")
_library.impl("max_pool2d", max_pool2d, "CompositeExplicitAutograd")


def _conv_out(*args: object, out: torch.Tensor) -> torch.Tensor:
    return out.copy_(conv2d(*args))  # type: ignore[arg-type]


def _linear_out(*args: object, out: torch.Tensor) -> torch.Tensor:
    return out.copy_(linear(*args))  # type: ignore[arg-type]


def _linear_8da_out(*args: object, out: torch.Tensor) -> torch.Tensor:
    return out.copy_(linear_8da(*args))  # type: ignore[arg-type]


def _linear_wo_out(*args: object, out: torch.Tensor) -> torch.Tensor:
    return out.copy_(linear_wo(*args))  # type: ignore[arg-type]


def _embedding_wo_out(*args: object, out: torch.Tensor) -> torch.Tensor:
    return out.copy_(embedding_wo(*args))  # type: ignore[arg-type]


_library.impl("linear_8da.out", _linear_8da_out, "CompositeExplicitAutograd")
_library.impl("linear_wo.out", _linear_wo_out, "CompositeExplicitAutograd")
_library.impl("embedding_wo.out", _embedding_wo_out, "CompositeExplicitAutograd")
_library.impl("conv2d.out", _conv_out, "CompositeExplicitAutograd")
_library.impl("linear.out", _linear_out, "CompositeExplicitAutograd")


def _max_pool_out(*args: object, out: torch.Tensor) -> torch.Tensor:
    return out.copy_(max_pool2d(*args))  # type: ignore[arg-type]


_library.impl("max_pool2d.out", _max_pool_out, "CompositeExplicitAutograd")


def _add_out(*args: object, out: torch.Tensor) -> torch.Tensor:
    return out.copy_(add(*args))  # type: ignore[arg-type]


_library.impl("add.out", _add_out, "CompositeExplicitAutograd")

CONV2D: torch._ops.OpOverload = getattr(torch.ops, NAMESPACE).conv2d.default
LINEAR: torch._ops.OpOverload = getattr(torch.ops, NAMESPACE).linear.default
MAX_POOL2D: torch._ops.OpOverload = getattr(torch.ops, NAMESPACE).max_pool2d.default
ADD: torch._ops.OpOverload = getattr(torch.ops, NAMESPACE).add.default
LINEAR_8DA: torch._ops.OpOverload = getattr(torch.ops, NAMESPACE).linear_8da.default
LINEAR_WO: torch._ops.OpOverload = getattr(torch.ops, NAMESPACE).linear_wo.default
EMBEDDING_WO: torch._ops.OpOverload = getattr(torch.ops, NAMESPACE).embedding_wo.default
ROTARY: torch._ops.OpOverload = getattr(torch.ops, NAMESPACE).rotary.default
RMS_NORM: torch._ops.OpOverload = getattr(torch.ops, NAMESPACE).rms_norm.default
SAFE_SOFTMAX: torch._ops.OpOverload = getattr(torch.ops, NAMESPACE).safe_softmax.default
