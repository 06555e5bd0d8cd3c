"""Folds an inference batch norm into the convolution that feeds it.

bn(conv(x, W, b)) == conv(x, W * s, b * s + t) per output channel, with s and t from
`FoldableBatchNorm.scale_and_shift` (the arithmetic of torch.nn.utils.fusion). Covers conv1d/2d/3d
(incl. `padding="same"`), grouped and depthwise convs, and transposed convs, whose weight is laid
out (in_channels, out_channels / groups, *kernel): there the scale runs along dim 1 within each
group, which is where upstream fusions go wrong.

The fused weight and bias are always written as new parameters (never in place), so a weight that
another op also reads keeps its value; the originals become unused and are dropped by
`PruneUnusedConstantsPass`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
from torch.export import ExportedProgram

from backends.transforms.batch_norm_match import (
    FoldableBatchNorm,
    aten_op,
    is_batch_norm,
    match_foldable_batch_norm,
    replace_batch_norm,
)
from backends.transforms.pass_report import PassReport
from backends.transforms.program_constants import ProgramConstants

aten = torch.ops.aten


@dataclasses.dataclass(frozen=True)
class _ConvLayout:
    """Where a convolution overload keeps the arguments the fusion needs."""

    transposed_index: int | None  # None: fixed by the overload, see `transposed`
    transposed: bool
    groups_index: int


_CONV_LAYOUTS: dict[object, _ConvLayout] = {
    aten.convolution.default: _ConvLayout(6, False, 8),
    **{
        op: _ConvLayout(None, False, 6)
        for op in (
            aten.conv1d.default,
            aten.conv2d.default,
            aten.conv3d.default,
            aten.conv1d.padding,
            aten.conv2d.padding,
            aten.conv3d.padding,
        )
    },
    **{
        op: _ConvLayout(None, True, 6)
        for op in (
            aten.conv_transpose1d.default,
            aten.conv_transpose2d.input,
            aten.conv_transpose3d.input,
        )
    },
}


def _conv_layout(node: torch.fx.Node) -> _ConvLayout | None:
    if node.op != "call_function":
        return None
    return _CONV_LAYOUTS.get(aten_op(node.target))


def fold_into_conv_weights(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    scale: torch.Tensor,
    shift: torch.Tensor,
    transposed: bool,
    groups: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(W', b') such that conv(x, W', b') == conv(x, W, b) * scale + shift per output channel."""
    compute = torch.promote_types(weight.dtype, torch.float32)
    w = weight.to(compute)
    s = scale.to(compute)
    if transposed:
        # (in, out/groups, *k): output channel g * (out/groups) + j sits at dim 1 index j of the
        # rows of group g, so view the groups explicitly before broadcasting the scale.
        in_channels, out_per_group = w.shape[0], w.shape[1]
        kernel = w.shape[2:]
        grouped = w.reshape(groups, in_channels // groups, out_per_group, *kernel)
        s_view = s.reshape(groups, 1, out_per_group, *([1] * len(kernel)))
        fused_w = (grouped * s_view).reshape(w.shape)
    else:
        fused_w = w * s.reshape(-1, *([1] * (w.dim() - 1)))
    b = bias.to(compute) if bias is not None else torch.zeros_like(s)
    fused_b = b * s + shift.to(compute)
    return fused_w.to(weight.dtype), fused_b.to(weight.dtype)


class FuseBatchNormWithConvPass:
    """Folds every foldable inference batch norm into its producing convolution.

    `FuseBatchNormWithConvPass()(ep)` edits `ep` in place (graph, signature, state dict and
    constants stay consistent) and returns a PassReport. Works on ATen-dialect programs
    (torch.export output) and Edge-dialect programs (inside a backend's preprocess).
    """

    def __call__(self, ep: ExportedProgram) -> PassReport:
        report = PassReport(pass_name=type(self).__name__)
        constants = ProgramConstants(ep)
        # One fused pair per distinct (conv constants, bn constants): a conv+BN module called
        # twice shares one fused weight instead of storing it twice.
        fused_cache: dict[tuple[object, ...], tuple[torch.fx.Node, torch.fx.Node]] = {}
        for node in list(ep.graph.nodes):
            if not is_batch_norm(node):
                continue
            producer = node.args[0]
            if not isinstance(producer, torch.fx.Node):
                continue
            layout = _conv_layout(producer)
            if layout is None:
                continue  # not ours: the linear fusion or nobody reports it
            reason = self._try_fold(node, producer, layout, constants, fused_cache, report)
            if reason is not None:
                report.skip(node.name, reason)
        constants.commit()
        if report.changed:
            ep.graph_module.recompile()
        return report

    def _try_fold(
        self,
        bn_node: torch.fx.Node,
        conv: torch.fx.Node,
        layout: _ConvLayout,
        constants: ProgramConstants,
        fused_cache: dict[tuple[object, ...], tuple[torch.fx.Node, torch.fx.Node]],
        report: PassReport,
    ) -> str | None:
        """Folds `bn_node` into `conv` and returns None, or returns why it did not."""
        bn = match_foldable_batch_norm(bn_node, constants)
        if isinstance(bn, str):
            return bn
        if len(conv.users) != 1:
            others = sorted(u.name for u in conv.users if u is not bn_node)
            return f"convolution {conv.name} output is also read by {others}"
        args: list[Any] = list(conv.args)
        weight = args[1]
        bias = args[2] if len(args) > 2 else conv.kwargs.get("bias")
        if "bias" in conv.kwargs:
            return f"convolution {conv.name} passes bias as a keyword"
        if not constants.is_constant(weight):
            return f"convolution {conv.name} weight is not a constant parameter or buffer"
        if bias is not None and not constants.is_constant(bias):
            return f"convolution {conv.name} bias is not a constant parameter or buffer"
        assert isinstance(weight, torch.fx.Node)
        w = constants.value(weight)
        if not w.is_floating_point():
            return f"convolution {conv.name} weight has non-float dtype {w.dtype}"
        transposed = layout.transposed
        if layout.transposed_index is not None:
            transposed = bool(_arg(args, layout.transposed_index, False))
        groups = int(_arg(args, layout.groups_index, 1))
        out_channels = w.shape[1] * groups if transposed else w.shape[0]
        channels = constants.value(bn.running_mean).numel()
        if out_channels != channels:
            return f"convolution has {out_channels} output channels, batch norm {channels}"

        key: tuple[object, ...] = (weight, bias, bn.weight, bn.bias, bn.running_mean)
        key += (bn.running_var, bn.eps, transposed, groups)
        if key not in fused_cache:
            fused_cache[key] = self._write_fused(
                conv, weight, bias, bn, transposed, groups, constants, report
            )
        fused_weight, fused_bias = fused_cache[key]
        while len(args) < 3:
            args.append(None)
        args[1], args[2] = fused_weight, fused_bias
        conv.args = tuple(args)
        replace_batch_norm(bn, conv, constants.ep.graph_signature.output_specs)
        report.folded += 1
        report.changed = True
        return None

    @staticmethod
    @torch.no_grad()  # fused tensors are constants: no autograd history to carry or fake
    def _write_fused(
        conv: torch.fx.Node,
        weight: torch.fx.Node,
        bias: object,
        bn: FoldableBatchNorm,
        transposed: bool,
        groups: int,
        constants: ProgramConstants,
        report: PassReport,
    ) -> tuple[torch.fx.Node, torch.fx.Node]:
        scale, shift = bn.scale_and_shift(constants)
        b = constants.value(bias) if isinstance(bias, torch.fx.Node) else None
        fused_w, fused_b = fold_into_conv_weights(
            constants.value(weight), b, scale, shift, transposed, groups
        )
        w_node = constants.add_parameter(f"{conv.name}_fused_weight", fused_w)
        b_node = constants.add_parameter(f"{conv.name}_fused_bias", fused_b)
        for node in (w_node, b_node):
            spec = constants.spec_of(node)
            assert spec is not None and spec.target is not None
            report.added_constants.append(spec.target)
        return w_node, b_node


def _arg(args: Sequence[Any], index: int, default: Any) -> Any:
    return args[index] if index < len(args) else default
