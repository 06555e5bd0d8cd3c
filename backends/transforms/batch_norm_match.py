"""Recognises a batch norm node in the ATen or the Edge dialect and decides whether it is foldable.

Shared by the conv and linear fusions, so both apply the same rules to the same op variants:
- `aten.batch_norm` (torch.export output; `training` is arg 5, eps arg 7, returns a tensor);
- `aten.native_batch_norm` (same arguments, returns a tuple);
- `aten._native_batch_norm_legit_no_training` (ATen after decomposition, and the Edge dialect;
  eps is arg 6, returns a tuple);
- the training variants (`_native_batch_norm_legit`, `_native_batch_norm_legit_functional`) are
  recognised only to be reported as skipped.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Sequence
from typing import Any

import torch
from torch.export.graph_signature import OutputSpec, TensorArgument

from backends.transforms.program_constants import ProgramConstants

aten = torch.ops.aten


def aten_op(target: object) -> object:
    """The ATen overload behind `target`: Edge ops wrap one in `_op`, ATen ops are themselves."""
    inner = getattr(target, "_op", None)
    if isinstance(inner, torch._ops.OpOverload):
        return inner
    return target


_TRAINING_ONLY = (
    aten._native_batch_norm_legit.default,
    aten._native_batch_norm_legit.no_stats,
    aten._native_batch_norm_legit_functional.default,
)


def is_batch_norm(node: torch.fx.Node) -> bool:
    """True for any batch-norm variant this module knows, foldable or not."""
    if node.op != "call_function":
        return False
    op = aten_op(node.target)
    return op in _TRAINING_ONLY or op in (
        aten.batch_norm.default,
        aten.native_batch_norm.default,
        aten._native_batch_norm_legit_no_training.default,
    )


@dataclasses.dataclass
class FoldableBatchNorm:
    """An inference batch norm whose statistics are program constants, ready to fold."""

    node: torch.fx.Node
    producer: torch.fx.Node  # the node whose output the batch norm normalises
    weight: torch.fx.Node | None  # None when affine=False
    bias: torch.fx.Node | None
    running_mean: torch.fx.Node
    running_var: torch.fx.Node
    eps: float
    # The nodes that carry the normalised tensor: the batch norm itself, or its getitem(0).
    outputs: list[torch.fx.Node]

    def nodes_to_erase(self) -> list[torch.fx.Node]:
        """The batch norm and its getitems, users first, so each is user-free when erased."""
        return [n for n in self.outputs if n is not self.node] + [self.node]

    def scale_and_shift(self, constants: ProgramConstants) -> tuple[torch.Tensor, torch.Tensor]:
        """(scale, shift) with bn(y) == y * scale + shift per channel, as torch.nn.utils.fusion.

        scale = weight / sqrt(running_var + eps); shift = bias - running_mean * scale, where an
        absent weight is 1 and an absent bias is 0 (affine=False).
        """
        mean = constants.value(self.running_mean)
        var = constants.value(self.running_var)
        weight = constants.value(self.weight) if self.weight is not None else torch.ones_like(mean)
        bias = constants.value(self.bias) if self.bias is not None else torch.zeros_like(mean)
        scale = weight * torch.rsqrt(var + self.eps)
        return scale, bias - mean * scale


def match_foldable_batch_norm(
    node: torch.fx.Node, constants: ProgramConstants
) -> FoldableBatchNorm | str:
    """A FoldableBatchNorm for `node`, or the reason it cannot be folded (for the report)."""
    op = aten_op(node.target)
    args: list[Any] = list(node.args)
    if op in _TRAINING_ONLY:
        return "batch norm in training mode (batch statistics) cannot be folded"
    if op == aten._native_batch_norm_legit_no_training.default:
        eps_index, returns_tuple = 6, True
    elif op in (aten.batch_norm.default, aten.native_batch_norm.default):
        if _arg(node, args, 5, "training", False):
            return (
                "batch norm in training mode (or without running statistics, "
                "track_running_stats=False) cannot be folded"
            )
        eps_index, returns_tuple = 7, op == aten.native_batch_norm.default
    else:
        return f"not a batch norm: {node.target}"

    producer = args[0]
    weight, bias = _arg(node, args, 1, "weight", None), _arg(node, args, 2, "bias", None)
    mean, var = _arg(node, args, 3, "running_mean", None), _arg(node, args, 4, "running_var", None)
    eps = _arg(node, args, eps_index, "eps", 1e-5)
    if not isinstance(producer, torch.fx.Node):
        return "batch norm input is not a graph value"
    if mean is None or var is None:
        return "batch norm without running statistics (track_running_stats=False)"
    for label, value in (("running_mean", mean), ("running_var", var)):
        if not constants.is_constant(value):
            return f"batch norm {label} is not a constant parameter or buffer"
    for label, value in (("weight", weight), ("bias", bias)):
        if value is not None and not constants.is_constant(value):
            return f"batch norm {label} is not a constant parameter or buffer"
    if not isinstance(eps, float | int):
        return f"batch norm eps is not a number: {eps!r}"

    if returns_tuple:
        outputs = []
        for user in node.users:
            if not (
                user.op == "call_function" and user.target is operator.getitem and user.args[1] == 0
            ):
                return "batch norm is consumed other than through getitem(0) (mean/var outputs)"
            outputs.append(user)
    else:
        outputs = [node]
    return FoldableBatchNorm(
        node=node,
        producer=producer,
        weight=weight,
        bias=bias,
        running_mean=mean,
        running_var=var,
        eps=float(eps),
        outputs=outputs,
    )


def _arg(node: torch.fx.Node, args: Sequence[Any], index: int, name: str, default: Any) -> Any:
    if index < len(args):
        return args[index]
    return node.kwargs.get(name, default)


def replace_batch_norm(
    bn: FoldableBatchNorm, replacement: torch.fx.Node, output_specs: Sequence[OutputSpec]
) -> None:
    """Points every reader of the batch norm's result at `replacement` and erases the batch norm.

    Output specs that named the batch norm's result are renamed in place (the spec objects are
    shared with shallow copies of the program, which must see the same names as the graph).
    """
    graph = bn.node.graph
    for out in bn.outputs:
        if any(user.op == "output" for user in out.users):
            for spec in output_specs:
                if isinstance(spec.arg, TensorArgument) and spec.arg.name == out.name:
                    spec.arg = TensorArgument(name=replacement.name)
        out.replace_all_uses_with(replacement)
    for dead in bn.nodes_to_erase():
        graph.erase_node(dead)
