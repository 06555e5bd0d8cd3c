"""Folds an inference batch norm into the `linear` that feeds it, only where that is exact.

bn(linear(x, W, b)) == linear(x, W * s[:, None], b * s + t) holds only when batch norm's channel
dim (dim 1) is linear's output dim, i.e. when the linear output has rank 2. A BatchNorm1d after a
rank-3 linear normalises over the sequence axis instead and must not be folded.

Besides `aten.linear` this recognises what `to_edge` decomposes a linear into unless a partitioner
keeps it: `addmm(b, x, permute_copy(W, [1, 0]))`, and `mm(x, permute_copy(W, [1, 0]))` without
bias (rewritten to an addmm to take the folded bias). Fused tensors are written as new
parameters; the originals stay untouched.
"""

from __future__ import annotations

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

# linear itself, and what to_edge decomposes it into: addmm (with bias) or mm (without).
_LINEAR_FORMS = (aten.linear.default, aten.addmm.default, aten.mm.default)
_TRANSPOSES = (aten.permute.default, aten.permute_copy.default, aten.t.default, aten.t_copy.default)


def fold_into_linear_weights(
    weight: torch.Tensor, bias: torch.Tensor | None, scale: torch.Tensor, shift: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(W', b') with linear(x, W', b') == linear(x, W, b) * scale + shift, as nn.utils.fusion."""
    compute = torch.promote_types(weight.dtype, torch.float32)
    s = scale.to(compute)
    fused_w = weight.to(compute) * s.unsqueeze(-1)
    b = bias.to(compute) if bias is not None else torch.zeros_like(s)
    fused_b = b * s + shift.to(compute)
    return fused_w.to(weight.dtype), fused_b.to(weight.dtype)


class _LinearSite:
    """Where a linear's weight and bias are read, so the fusion can swap them for fused ones."""

    def __init__(
        self,
        weight: torch.fx.Node,
        bias: torch.fx.Node | None,
        weight_reader: torch.fx.Node,
        weight_index: int,
        bias_index: int,
    ) -> None:
        self.weight = weight
        self.bias = bias
        self.weight_reader = weight_reader  # the linear itself, or the transpose in front of addmm
        self.weight_index = weight_index
        self.bias_index = bias_index


def _is_transpose_2d(node: torch.fx.Node) -> bool:
    op = aten_op(node.target)
    if op not in _TRANSPOSES:
        return False
    if op in (aten.t.default, aten.t_copy.default):
        return True
    dims = list(node.args[1]) if len(node.args) > 1 else []  # type: ignore[arg-type]
    return dims in ([1, 0], [-1, -2], [1, -2], [-1, 0])


class FuseBatchNormWithLinearPass:
    """Folds every foldable inference batch norm into its producing linear.

    `FuseBatchNormWithLinearPass()(ep)` edits `ep` in place (graph, signature, state dict and
    constants stay consistent) and returns a PassReport. Fuses only when the linear output is
    rank 2, every weight, bias and running statistic is a constant parameter or buffer, the batch
    norm is read only through getitem(0), it is in inference mode, and nothing else reads the
    linear's output.
    """

    def __call__(self, ep: ExportedProgram) -> PassReport:
        report = PassReport(pass_name=type(self).__name__)
        constants = ProgramConstants(ep)
        fused_cache: dict[tuple[object, ...], tuple[torch.fx.Node, torch.fx.Node]] = {}
        for node in list(ep.graph.nodes):
            if not is_batch_norm(node):
                continue
            producer = node.args[0]
            if not isinstance(producer, torch.fx.Node) or producer.op != "call_function":
                continue
            if aten_op(producer.target) not in _LINEAR_FORMS:
                continue  # not ours
            reason = self._try_fold(node, producer, constants, fused_cache, report)
            if reason is not None:
                report.skip(node.name, reason)
        constants.commit()
        if report.changed:
            ep.graph_module.recompile()
        return report

    @staticmethod
    def _site(linear: torch.fx.Node, constants: ProgramConstants) -> _LinearSite | str:
        args: list[Any] = list(linear.args)
        if aten_op(linear.target) == aten.linear.default:
            if linear.kwargs:
                return f"linear {linear.name} passes arguments as keywords"
            weight = args[1]
            bias = args[2] if len(args) > 2 else None
            reader, weight_index = linear, 1
        else:  # addmm(bias, input, mat2 = W^T) or mm(input, mat2 = W^T)
            if any(linear.kwargs.get(k, 1) != 1 for k in ("alpha", "beta")):
                return f"addmm {linear.name} has alpha/beta other than 1"
            if aten_op(linear.target) == aten.mm.default:
                bias, mat2 = None, args[1]
            else:
                bias, mat2 = args[0], args[2]
            if not (isinstance(mat2, torch.fx.Node) and _is_transpose_2d(mat2)):
                return f"{linear.name} is not a decomposed linear (mat2 is not W^T)"
            if len(mat2.users) != 1:
                return f"transposed weight {mat2.name} is also read by another op"
            weight, reader, weight_index = mat2.args[0], mat2, 0
        if not constants.is_constant(weight):
            return f"linear {linear.name} weight is not a constant parameter or buffer"
        if bias is not None and not constants.is_constant(bias):
            return f"linear {linear.name} bias is not a constant parameter or buffer"
        bias_index = 2 if reader is linear else 0
        return _LinearSite(weight, bias, reader, weight_index, bias_index)

    def _try_fold(
        self,
        bn_node: torch.fx.Node,
        linear: torch.fx.Node,
        constants: ProgramConstants,
        fused_cache: dict[tuple[object, ...], tuple[torch.fx.Node, torch.fx.Node]],
        report: PassReport,
    ) -> str | None:
        """Folds `bn_node` into `linear` and returns None, or returns why it did not."""
        bn = match_foldable_batch_norm(bn_node, constants)
        if isinstance(bn, str):
            return bn
        val = linear.meta.get("val")
        rank = getattr(val, "ndim", None)
        if rank != 2:
            return (
                f"linear {linear.name} output has rank {rank}; batch norm normalises dim 1, which "
                "is linear's output dim only for rank-2 outputs"
            )
        if len(linear.users) != 1:
            others = sorted(u.name for u in linear.users if u is not bn_node)
            return f"linear {linear.name} output is also read by {others}"
        site = self._site(linear, constants)
        if isinstance(site, str):
            return site
        w = constants.value(site.weight)
        if not w.is_floating_point() or w.dim() != 2:
            return f"linear {linear.name} weight is not a 2-D float tensor"
        channels = constants.value(bn.running_mean).numel()
        if w.shape[0] != channels:
            return f"linear has {w.shape[0]} output features, batch norm {channels} channels"
        if site.bias is not None and constants.value(site.bias).shape != (channels,):
            return f"linear {linear.name} bias is broadcast, not one value per output feature"

        key: tuple[object, ...] = (site.weight, site.bias, bn.weight, bn.bias, bn.running_mean)
        key += (bn.running_var, bn.eps)
        if key not in fused_cache:
            fused_cache[key] = self._write_fused(linear, site, bn, constants, report)
        fused_weight, fused_bias = fused_cache[key]
        _set_arg(site.weight_reader, site.weight_index, fused_weight)
        if aten_op(linear.target) == aten.mm.default:
            linear = _mm_to_addmm(linear, fused_bias)
        else:
            _set_arg(linear, site.bias_index, fused_bias)
        replace_batch_norm(bn, linear, constants.ep.graph_signature.output_specs)
        report.folded += 1
        report.changed = True
        return None

    @staticmethod
    @torch.no_grad()  # fused tensors are constants: no autograd history to carry or fake
    def _write_fused(
        linear: torch.fx.Node,
        site: _LinearSite,
        bn: FoldableBatchNorm,
        constants: ProgramConstants,
        report: PassReport,
    ) -> tuple[torch.fx.Node, torch.fx.Node]:
        scale, shift = bn.scale_and_shift(constants)
        bias = constants.value(site.bias) if site.bias is not None else None
        fused_w, fused_b = fold_into_linear_weights(
            constants.value(site.weight), bias, scale, shift
        )
        w_node = constants.add_parameter(f"{linear.name}_fused_weight", fused_w)
        b_node = constants.add_parameter(f"{linear.name}_fused_bias", fused_b)
        for node in (w_node, b_node):
            spec = constants.spec_of(node)
            assert spec is not None and spec.target is not None
            report.added_constants.append(spec.target)
        return w_node, b_node


def _mm_to_addmm(mm: torch.fx.Node, bias: torch.fx.Node) -> torch.fx.Node:
    """Replaces `mm(x, W^T)` by `addmm(bias, x, W^T)` in the same dialect; returns the addmm.

    A bias-free linear reaches the Edge dialect as mm, which has no slot for the folded shift.
    """
    if isinstance(mm.target, torch._ops.OpOverload):
        addmm: Any = aten.addmm.default
    else:
        from executorch.exir.dialects._ops import ops as exir_ops

        addmm = exir_ops.edge.aten.addmm.default
    graph = mm.graph
    with graph.inserting_after(mm):
        node = graph.call_function(addmm, (bias, *mm.args))
    node.meta.update(mm.meta)
    mm.replace_all_uses_with(node)
    graph.erase_node(mm)
    return node


def _set_arg(node: torch.fx.Node, index: int, value: torch.fx.Node) -> None:
    args: list[Any] = list(node.args)
    while len(args) <= index:
        args.append(None)
    args[index] = value
    node.args = tuple(args)
