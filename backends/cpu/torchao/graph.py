"""What every torchao pattern shares: the op keys, node accessors, the quantized weight.

torchao's `quantize_` turns a module's weight into a tensor subclass that exports as

    dequantize_affine(W_q, [1, group], scales, zero_points, int8, qmin, qmax) -> float32 weight

on constants (int8-stored int4/int8 values, float32, bfloat16 or float16 scales, integer zero
points). torchao multiplies the float32 (q - zero point) by the scale upcast to float32, so the
packed weight keeps the scales widened to float32: the same values, exactly.
`match_weight` recognises it for every fused op (linear_8da.py, weight_only.py); `pack_weight`
stores it packed: two int4 values a byte when its range fits [-8, 7] and the row is even, else
one int8 a byte. `lift_weight` adds the packed constants to the program for a fused op.
"""

from __future__ import annotations

import dataclasses

import torch

from backends.transforms.program_constants import ProgramConstants

CHOOSE_QPARAMS = "torchao.choose_qparams_affine.default"
QUANTIZE = "torchao.quantize_affine.default"
DEQUANTIZE = "torchao.dequantize_affine.default"
LINEAR = "aten.linear.default"
EMBEDDING = "aten.embedding.default"
TORCHAO_OPS = frozenset({CHOOSE_QPARAMS, QUANTIZE, DEQUANTIZE})
# Weight scale dtypes whose values float32 holds exactly (torchao upcasts them when dequantizing).
SCALE_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16})


def key(node: object) -> str | None:
    """The route-table key of a call_function node's op (as routes.op_key), else None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return None
    op = node.target if isinstance(node.target, torch._ops.OpOverload) else None
    op = op or getattr(node.target, "_op", None)  # an EdgeOpOverload wraps the ATen overload
    if not isinstance(op, torch._ops.OpOverload):
        return None
    return f"{op._schema.name.replace('::', '.')}.{op._overloadname}"


def val(node: object) -> torch.Tensor | None:
    """The tensor a node's meta says it computes, else None."""
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return value if isinstance(value, torch.Tensor) else None


def ints(value: object) -> list[int] | None:
    """`value` as a list of ints when it is a list/tuple of ints (a block size), else None."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) for v in value):
        return None
    return [int(v) for v in value]


def arg(node: torch.fx.Node, index: int, name: str, default: object = None) -> object:
    """Argument `index` (or keyword `name`) of `node`, else `default`."""
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


@dataclasses.dataclass(frozen=True)
class WeightMatch:
    """One constant weight's dequantize_affine and what a fused op needs of it."""

    dequantize: torch.fx.Node
    weight: torch.fx.Node  # int8 constant [rows, cols]
    scales: torch.fx.Node  # float32 / bfloat16 / float16 constant [rows, cols / group]
    zero_points: torch.fx.Node | None  # integer constant [rows, cols / group], or absent
    rows: int
    cols: int
    group_size: int
    weight_range: tuple[int, int]


def match_weight(w_dq: object) -> WeightMatch | str:
    """The quantized constant weight `w_dq` dequantizes (see the module doc), or why it is not."""
    if key(w_dq) != DEQUANTIZE:
        return "weight is not dequantize_affine"
    assert isinstance(w_dq, torch.fx.Node)
    weight, block, scales, zero_points = w_dq.args[0:4]
    w_val, s_val = val(weight), val(scales)
    constant = all(
        isinstance(n, torch.fx.Node) and n.op == "placeholder"
        for n in (weight, scales, zero_points)
        if n is not None
    )
    if not constant or w_val is None or s_val is None:
        return "weight, scales or zero points are not constants"
    assert isinstance(weight, torch.fx.Node) and isinstance(scales, torch.fx.Node)
    if w_val.dtype != torch.int8 or w_val.dim() != 2:
        return f"weight is not a 2D int8 tensor (dtype {w_val.dtype})"
    rows, cols = w_val.shape
    sizes = ints(block)
    if sizes is None or len(sizes) != 2 or sizes[0] != 1:
        return f"weight block {block} is not (1, group)"
    group = sizes[1]
    if group <= 0 or cols % group != 0:
        return f"weight group size {group} does not divide the row length {cols}"
    groups = cols // group
    if s_val.dtype not in SCALE_DTYPES or s_val.numel() != rows * groups:
        return (
            f"weight scales ({s_val.dtype}) are not float32, bfloat16 or float16, one per "
            "(row, group)"
        )
    if zero_points is not None:
        z_val = val(zero_points)
        if z_val is None or z_val.dtype not in (torch.int8, torch.int32, torch.int64):
            return "weight zero points are not an integer tensor"
        if z_val.numel() != rows * groups:
            return "weight zero points are not one per (row, group)"
    if w_dq.args[4] != torch.int8:
        return f"weight dtype {w_dq.args[4]} (only int8-stored int4/int8)"
    qmin, qmax = w_dq.args[5], w_dq.args[6]
    if not (isinstance(qmin, int) and isinstance(qmax, int) and -128 <= qmin < qmax <= 127):
        return f"weight range [{qmin}, {qmax}] outside int8"
    if arg(w_dq, 7, "output_dtype", torch.float32) != torch.float32:
        return "weight dequantize_affine to a dtype other than float32"
    return WeightMatch(
        dequantize=w_dq,
        weight=weight,
        scales=scales,
        zero_points=zero_points if isinstance(zero_points, torch.fx.Node) else None,
        rows=rows,
        cols=cols,
        group_size=group,
        weight_range=(qmin, qmax),
    )


def pack_weight(weight: torch.Tensor, weight_range: tuple[int, int]) -> tuple[torch.Tensor, int]:
    """(packed weight, bits): uint8 [rows, cols / 2] with w + 8 in the low nibble for even
    columns and the high nibble for odd ones when the range fits [-8, 7] and cols is even; else
    the int8 weight."""
    qmin, qmax = weight_range
    values = weight.to(torch.int8).clamp(qmin, qmax)
    if qmin >= -8 and qmax <= 7 and weight.shape[1] % 2 == 0:
        nibbles = (values.to(torch.int16) + 8).to(torch.uint8)
        packed = nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)
        return packed.contiguous(), 4
    return values.contiguous(), 8


@dataclasses.dataclass(frozen=True)
class LiftedWeight:
    """The constants of a packed weight, as the fused ops take them."""

    weight: torch.fx.Node  # uint8 [rows, cols / 2] (4 bits) or int8 [rows, cols]
    scales: torch.fx.Node  # float32 [rows, cols / group]
    zero_points: torch.fx.Node | None  # int8 [rows, cols / group], absent when all are 0
    bits: int


def lift_weight(constants: ProgramConstants, found: WeightMatch, name: str) -> LiftedWeight:
    """Adds `found`'s packed weight, float32 scales and (only when some are not 0) int8 zero
    points to the program as constants named after `name`."""
    weight = constants.value(found.weight)
    packed, bits = pack_weight(weight, found.weight_range)
    groups = found.cols // found.group_size
    scales = constants.value(found.scales).reshape(found.rows, groups).to(torch.float32)
    scales = scales.contiguous()
    zero_points = None
    if found.zero_points is not None:
        z = constants.value(found.zero_points).reshape(found.rows, groups)
        if bool(torch.any(z != 0)):
            # torchao clamps zero points into the weight's range, which lies within int8.
            if bool(torch.any((z < -128) | (z > 127))):
                raise ValueError(f"{name}: weight zero points outside int8")
            zero_points = constants.add_lifted_constant(
                f"{name}_weight_zero_points", z.to(torch.int8).contiguous()
            )
    return LiftedWeight(
        weight=constants.add_lifted_constant(f"{name}_weight_int{bits}", packed),
        scales=constants.add_lifted_constant(f"{name}_weight_scales", scales),
        zero_points=zero_points,
        bits=bits,
    )
