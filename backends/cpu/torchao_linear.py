"""torchao's 8da4w linear (int8 dynamic per-token activations, int4/int8 grouped weights) as one op.

`quantize_(model, Int8DynamicActivationIntxWeightConfig(...))` exports each linear as

    choose_qparams_affine(x, "ASYMMETRIC", [1, .., 1, K], int8, -128, 127) -> (scale, zero_point)
    quantize_affine(x, block, scale, zero_point, int8, -128, 127) -> dequantize_affine(...) -\\
    dequantize_affine(W_q, [1, group], W_scales, W_zero_points, int8, qmin, qmax) ----------> linear

`check_torchao_node` is the partitioner's test for each torchao node (a route's check_args): it is
claimed only when every path from it ends in a linear that `match_linear` accepts, so preprocess
(`FuseTorchaoLinears`) always replaces the whole chain by `et_cpu_quant::linear_8da` (see
quantized_ops.py) and no torchao op reaches the payload. The weight stays packed: two int4 values
a byte when its range fits [-8, 7] and K is even, else one int8 a byte.

This module does not import routes.py (routes.py imports it for the check).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable

import torch
from torch.export import ExportedProgram

from backends.cpu import quantized_ops
from backends.transforms.pass_report import PassReport
from backends.transforms.program_constants import ProgramConstants

CHOOSE_QPARAMS = "torchao.choose_qparams_affine.default"
QUANTIZE = "torchao.quantize_affine.default"
DEQUANTIZE = "torchao.dequantize_affine.default"
LINEAR = "aten.linear.default"
TORCHAO_OPS = frozenset({CHOOSE_QPARAMS, QUANTIZE, DEQUANTIZE})
_ACTIVATION_RANGE = (-128, 127)


def _key(node: object) -> str | None:
    """The route-table key of a call_function node's op (as routes.op_key), else None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return None
    op = node.target if isinstance(node.target, torch._ops.OpOverload) else None
    op = op or getattr(node.target, "_op", None)  # an EdgeOpOverload wraps the ATen overload
    if not isinstance(op, torch._ops.OpOverload):
        return None
    return f"{op._schema.name.replace('::', '.')}.{op._overloadname}"


def _val(node: object) -> torch.Tensor | None:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return value if isinstance(value, torch.Tensor) else None


def _ints(value: object) -> list[int] | None:
    """`value` as a list of ints when it is a list/tuple of ints (a block size), else None."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) for v in value):
        return None
    return [int(v) for v in value]


def _arg(node: torch.fx.Node, index: int, name: str, default: object = None) -> object:
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


@dataclasses.dataclass(frozen=True)
class LinearMatch:
    """The nodes of one 8da4w linear and what the fused op needs of them."""

    linear: torch.fx.Node
    x: torch.fx.Node  # the float32 activation
    chain: tuple[torch.fx.Node, ...]  # torchao nodes and getitems, consumers first
    weight: torch.fx.Node  # int8 constant [N, K]
    scales: torch.fx.Node  # float32 constant [N, K / group]
    zero_points: torch.fx.Node | None  # integer constant [N, K / group], or absent
    bias: torch.fx.Node | None
    group_size: int
    weight_range: tuple[int, int]


def _activation_chain(x_dq: object) -> tuple[torch.fx.Node, tuple[torch.fx.Node, ...]] | str:
    """(x, chain nodes consumers first) of a per-token dynamic int8 activation, or why not."""
    if _key(x_dq) != DEQUANTIZE:
        return "linear input is not dequantize_affine"
    assert isinstance(x_dq, torch.fx.Node)
    quantize = x_dq.args[0]
    if _key(quantize) != QUANTIZE:
        return "activation dequantize_affine does not read quantize_affine"
    assert isinstance(quantize, torch.fx.Node)
    x = quantize.args[0]
    x_val = _val(x)
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
        _key(choose) != CHOOSE_QPARAMS
        or zero_point.args[0] is not choose
        or (scale.args[1], zero_point.args[1]) != (0, 1)
    ):
        return "activation scale / zero point are not choose_qparams_affine's results"
    assert isinstance(choose, torch.fx.Node)
    if choose.args[0] is not x:
        return "choose_qparams_affine reads another tensor than quantize_affine"
    if _arg(choose, 1, "mapping_type") != "ASYMMETRIC":
        return f"activation mapping {_arg(choose, 1, 'mapping_type')} (only ASYMMETRIC)"
    if _ints(_arg(choose, 2, "block_size")) != per_token:
        return "activation block is not per token (1, ..., 1, K)"
    if (
        _arg(choose, 3, "target_dtype") != torch.int8
        or (
            _arg(choose, 4, "quant_min"),
            _arg(choose, 5, "quant_max"),
        )
        != _ACTIVATION_RANGE
    ):
        return "activation qparams are not int8 over [-128, 127]"
    if _arg(choose, 6, "eps") is not None or _arg(choose, 7, "scale_dtype") not in (
        None,
        torch.float32,
    ):
        return "activation qparams with eps or a scale dtype other than float32"
    if _arg(choose, 8, "zero_point_dtype") not in (torch.int8, torch.int32, torch.int64):
        return "activation zero point dtype is not an integer dtype"
    if _arg(choose, 9, "keepdim", False):
        return "choose_qparams_affine with keepdim"
    for node in (quantize, x_dq):
        if _ints(node.args[1]) != per_token or tuple(node.args[4:7]) != (
            torch.int8,
            *_ACTIVATION_RANGE,
        ):
            return f"{node.name}: not per-token int8 over [-128, 127]"
    if x_dq.args[2:4] != quantize.args[2:4]:
        return "activation dequantize_affine uses other qparams than its quantize_affine"
    if _arg(x_dq, 7, "output_dtype", torch.float32) != torch.float32:
        return "activation dequantize_affine to a dtype other than float32"
    return x, (x_dq, quantize, zero_point, scale, choose)


def match_linear(linear: torch.fx.Node) -> LinearMatch | str:
    """The 8da4w pattern ending at `linear`, or why `linear` is not one."""
    if _key(linear) != LINEAR:
        return "not aten.linear"
    found = _activation_chain(linear.args[0])
    if isinstance(found, str):
        return found
    x, chain = found
    w_dq = linear.args[1]
    if _key(w_dq) != DEQUANTIZE:
        return "linear weight is not dequantize_affine"
    assert isinstance(w_dq, torch.fx.Node)
    weight, block, scales, zero_points = w_dq.args[0:4]
    w_val, s_val = _val(weight), _val(scales)
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
    channels, k = w_val.shape
    x_val = _val(x)
    assert x_val is not None
    if x_val.shape[-1] != k:
        return "weight and activation disagree on K"
    sizes = _ints(block)
    if sizes is None or len(sizes) != 2 or sizes[0] != 1:
        return f"weight block {block} is not (1, group)"
    group = sizes[1]
    if group <= 0 or k % group != 0:
        return f"weight group size {group} does not divide K = {k}"
    groups = k // group
    if s_val.dtype != torch.float32 or s_val.numel() != channels * groups:
        return "weight scales are not float32, one per (output channel, group)"
    if zero_points is not None:
        z_val = _val(zero_points)
        if z_val is None or z_val.dtype not in (torch.int8, torch.int32, torch.int64):
            return "weight zero points are not an integer tensor"
        if z_val.numel() != channels * groups:
            return "weight zero points are not one per (output channel, group)"
    if w_dq.args[4] != torch.int8:
        return f"weight dtype {w_dq.args[4]} (only int8-stored int4/int8)"
    qmin, qmax = w_dq.args[5], w_dq.args[6]
    if not (isinstance(qmin, int) and isinstance(qmax, int) and -128 <= qmin < qmax <= 127):
        return f"weight range [{qmin}, {qmax}] outside int8"
    if _arg(w_dq, 7, "output_dtype", torch.float32) != torch.float32:
        return "weight dequantize_affine to a dtype other than float32"
    bias = linear.args[2] if len(linear.args) > 2 else linear.kwargs.get("bias")
    if bias is not None:
        b_val = _val(bias)
        if b_val is None or b_val.dtype != torch.float32 or b_val.shape != (channels,):
            return "bias is not float32 with one value per output channel"
    return LinearMatch(
        linear=linear,
        x=x,
        chain=(*chain, w_dq),
        weight=weight,
        scales=scales,
        zero_points=zero_points if isinstance(zero_points, torch.fx.Node) else None,
        bias=bias if isinstance(bias, torch.fx.Node) else None,
        group_size=group,
        weight_range=(qmin, qmax),
    )


def check_torchao_node(
    node: torch.fx.Node, check_linear: Callable[[torch.fx.Node], str | None]
) -> str | None:
    """None when every path from torchao node `node` ends in an 8da4w linear (see the module
    doc) whose chain holds `node` and which `check_linear` (the partitioner's own decision on the
    linear) accepts; else why the delegate cannot take it."""
    linears: list[torch.fx.Node] = []
    pending, seen = [node], set()
    while pending:
        current = pending.pop()
        for user in current.users:
            if user in seen:
                continue
            seen.add(user)
            key = _key(user)
            if key == LINEAR:
                linears.append(user)
            elif key in (QUANTIZE, DEQUANTIZE) or user.target is operator.getitem:
                pending.append(user)
            else:
                return f"{current.name} is read by {user.name} ({key}), not an 8da4w linear"
    if not linears:
        return "not part of an 8da4w linear (no linear reads it)"
    for linear in linears:
        found = match_linear(linear)
        if isinstance(found, str):
            return f"{linear.name}: {found}"
        if node not in found.chain:
            return f"{linear.name} reads {node.name} outside its 8da4w pattern"
        why = check_linear(linear)
        if why is not None:
            return f"its linear {linear.name} is left out ({why})"
    return None


def pack_weight(weight: torch.Tensor, weight_range: tuple[int, int]) -> tuple[torch.Tensor, int]:
    """(packed weight, bits): uint8 [N, K / 2] with w + 8 in the low nibble for even k and the
    high nibble for odd k when the range fits [-8, 7] and K is even; else the int8 weight."""
    qmin, qmax = weight_range
    values = weight.to(torch.int8).clamp(qmin, qmax)
    if qmin >= -8 and qmax <= 7 and weight.shape[1] % 2 == 0:
        nibbles = (values.to(torch.int16) + 8).to(torch.uint8)
        packed = nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)
        return packed.contiguous(), 4
    return values.contiguous(), 8


class FuseTorchaoLinears:
    """Rewrites each 8da4w linear into `et_cpu_quant::linear_8da`; see the module doc."""

    def __call__(self, program: ExportedProgram) -> PassReport:
        report = PassReport(pass_name=type(self).__name__)
        graph = program.graph
        constants = ProgramConstants(program)
        for node in list(graph.nodes):
            if _key(node) != LINEAR:
                continue
            found = match_linear(node)
            if isinstance(found, str):
                if "dequantize_affine" in found or "choose_qparams" in found:
                    report.skip(node.name, found)
                continue
            self._replace(constants, found)
            report.folded += 1
            report.changed = True
        if report.changed:
            constants.commit()
            program.graph_module.recompile()
        return report

    def _replace(self, constants: ProgramConstants, found: LinearMatch) -> None:
        linear = found.linear
        weight = constants.value(found.weight)
        channels, k = weight.shape
        packed, bits = pack_weight(weight, found.weight_range)
        groups = k // found.group_size
        scales = constants.value(found.scales).reshape(channels, groups).contiguous()
        zero_points = None
        if found.zero_points is not None:
            z = constants.value(found.zero_points).reshape(channels, groups)
            if bool(torch.any(z != 0)):
                zero_points = constants.add_lifted_constant(
                    f"{linear.name}_weight_zero_points", z.to(torch.int8).contiguous()
                )
        weight_node = constants.add_lifted_constant(f"{linear.name}_weight_int{bits}", packed)
        scales_node = constants.add_lifted_constant(f"{linear.name}_weight_scales", scales)
        graph = linear.graph
        with graph.inserting_before(linear):
            fused = graph.call_function(
                quantized_ops.LINEAR_8DA,
                (
                    found.x,
                    weight_node,
                    scales_node,
                    zero_points,
                    found.bias,
                    found.group_size,
                    bits,
                ),
            )
        fused.meta = dict(linear.meta)
        linear.replace_all_uses_with(fused)
        graph.erase_node(linear)
        for dead in found.chain:  # consumers first; a chain shared with another linear stays
            if not dead.users:
                graph.erase_node(dead)
