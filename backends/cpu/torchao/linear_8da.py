"""torchao's 8da4w linear (int8 dynamic per-token activations, int4/int8 grouped weights).

`quantize_(model, Int8DynamicActivationIntxWeightConfig(...))` exports each linear as

    choose_qparams_affine(x, "ASYMMETRIC", [1, .., 1, K], int8, -128, 127) -> (scale, zero_point)
    quantize_affine(x, block, scale, zero_point, int8, -128, 127) -> dequantize_affine(...) -\\
    dequantize_affine(W_q, [1, group], W_scales, W_zero_points, int8, qmin, qmax) ----------> linear

`match_linear_8da` recognises it; fusion.py replaces it by `et_cpu_quant::linear_8da` (see
quantized_ops.py).
"""

from __future__ import annotations

import dataclasses
import operator

import torch

from backends.cpu.torchao.graph import (
    CHOOSE_QPARAMS,
    DEQUANTIZE,
    LINEAR,
    QUANTIZE,
    WeightMatch,
    arg,
    ints,
    key,
    match_weight,
    val,
)

_ACTIVATION_RANGE = (-128, 127)


@dataclasses.dataclass(frozen=True)
class Linear8daMatch:
    """The nodes of one 8da4w linear and what the fused op needs of them."""

    linear: torch.fx.Node
    x: torch.fx.Node  # the float32 activation
    chain: tuple[torch.fx.Node, ...]  # torchao nodes and getitems, consumers first
    weight: WeightMatch  # [N, K]
    bias: torch.fx.Node | None


def _activation_chain(x_dq: object) -> tuple[torch.fx.Node, tuple[torch.fx.Node, ...]] | str:
    """(x, chain nodes consumers first) of a per-token dynamic int8 activation, or why not."""
    if key(x_dq) != DEQUANTIZE:
        return "linear input is not dequantize_affine"
    assert isinstance(x_dq, torch.fx.Node)
    quantize = x_dq.args[0]
    if key(quantize) != QUANTIZE:
        return "activation dequantize_affine does not read quantize_affine"
    assert isinstance(quantize, torch.fx.Node)
    x = quantize.args[0]
    x_val = val(x)
    if not isinstance(x, torch.fx.Node) or x_val is None or x_val.dtype != torch.float32:
        return "activation is not a float32 tensor"
    if x_val.dim() < 1:
        return "activation has no dims"
    per_token = [1] * (x_val.dim() - 1) + [x_val.shape[-1]]
    scale, zero_point = quantize.args[2], quantize.args[3]
    if not all(
        isinstance(v, torch.fx.Node) and v.target is operator.getitem for v in (scale, zero_point)
    ):
        return "activation scale / zero point are not choose_qparams_affine's results"
    assert isinstance(scale, torch.fx.Node) and isinstance(zero_point, torch.fx.Node)
    choose = scale.args[0]
    if (
        key(choose) != CHOOSE_QPARAMS
        or zero_point.args[0] is not choose
        or (scale.args[1], zero_point.args[1]) != (0, 1)
    ):
        return "activation scale / zero point are not choose_qparams_affine's results"
    assert isinstance(choose, torch.fx.Node)
    if choose.args[0] is not x:
        return "choose_qparams_affine reads another tensor than quantize_affine"
    if arg(choose, 1, "mapping_type") != "ASYMMETRIC":
        return f"activation mapping {arg(choose, 1, 'mapping_type')} (only ASYMMETRIC)"
    if ints(arg(choose, 2, "block_size")) != per_token:
        return "activation block is not per token (1, ..., 1, K)"
    if (
        arg(choose, 3, "target_dtype") != torch.int8
        or (
            arg(choose, 4, "quant_min"),
            arg(choose, 5, "quant_max"),
        )
        != _ACTIVATION_RANGE
    ):
        return "activation qparams are not int8 over [-128, 127]"
    if arg(choose, 6, "eps") is not None or arg(choose, 7, "scale_dtype") not in (
        None,
        torch.float32,
    ):
        return "activation qparams with eps or a scale dtype other than float32"
    if arg(choose, 8, "zero_point_dtype") not in (torch.int8, torch.int32, torch.int64):
        return "activation zero point dtype is not an integer dtype"
    if arg(choose, 9, "keepdim", False):
        return "choose_qparams_affine with keepdim"
    for node in (quantize, x_dq):
        if ints(node.args[1]) != per_token or tuple(node.args[4:7]) != (
            torch.int8,
            *_ACTIVATION_RANGE,
        ):
            return f"{node.name}: not per-token int8 over [-128, 127]"
    if x_dq.args[2:4] != quantize.args[2:4]:
        return "activation dequantize_affine uses other qparams than its quantize_affine"
    if arg(x_dq, 7, "output_dtype", torch.float32) != torch.float32:
        return "activation dequantize_affine to a dtype other than float32"
    return x, (x_dq, quantize, zero_point, scale, choose)


def bias_of(linear: torch.fx.Node, channels: int) -> torch.fx.Node | str | None:
    """The bias node of `linear` (None without one), or why it is not float32 [channels]."""
    bias = linear.args[2] if len(linear.args) > 2 else linear.kwargs.get("bias")
    if bias is None:
        return None
    b_val = val(bias)
    if not isinstance(bias, torch.fx.Node) or b_val is None:
        return "bias is not a tensor"
    if b_val.dtype != torch.float32 or b_val.shape != (channels,):
        return "bias is not float32 with one value per output channel"
    return bias


def match_linear_8da(linear: torch.fx.Node) -> Linear8daMatch | str:
    """The 8da4w pattern ending at `linear`, or why `linear` is not one."""
    if key(linear) != LINEAR:
        return "not aten.linear"
    found = _activation_chain(linear.args[0])
    if isinstance(found, str):
        return found
    x, chain = found
    weight = match_weight(linear.args[1])
    if isinstance(weight, str):
        return f"linear {weight}"
    x_val = val(x)
    assert x_val is not None
    if x_val.shape[-1] != weight.cols:
        return "weight and activation disagree on K"
    bias = bias_of(linear, weight.rows)
    if isinstance(bias, str):
        return bias
    return Linear8daMatch(
        linear=linear, x=x, chain=(*chain, weight.dequantize), weight=weight, bias=bias
    )
