"""torchao's quantized linears and embeddings as the delegate's fused ops.

Three patterns (their modules say how torchao exports them):

    8da4w linear      (linear_8da.py)   -> et_cpu_quant::linear_8da
    weight-only linear (weight_only.py) -> et_cpu_quant::linear_wo
    weight-only embedding (weight_only.py) -> et_cpu_quant::embedding_wo

`check_torchao_node` is the partitioner's test for each torchao node: it is claimed only when
every path from it ends in a linear or embedding that one of the patterns accepts, whose chain
holds it and which the partitioner claims too; so preprocess (`FuseTorchaoOps`) always replaces
the whole chain and no torchao op reaches the payload. Weights stay packed (graph.py).

This package does not import routes.py (routes.py's partition check imports it).
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch
from torch.export import ExportedProgram

from backends.cpu import quantized_ops
from backends.cpu.torchao.graph import (
    DEQUANTIZE,
    EMBEDDING,
    LINEAR,
    QUANTIZE,
    TORCHAO_OPS,
    key,
    lift_weight,
)
from backends.cpu.torchao.linear_8da import Linear8daMatch, match_linear_8da
from backends.cpu.torchao.weight_only import (
    EmbeddingWoMatch,
    LinearWoMatch,
    match_embedding_wo,
    match_linear_wo,
)
from backends.transforms.pass_report import PassReport
from backends.transforms.program_constants import ProgramConstants

Match = Linear8daMatch | LinearWoMatch | EmbeddingWoMatch

__all__ = ["TORCHAO_OPS", "FuseTorchaoOps", "Match", "check_torchao_node", "match_consumer"]

_CONSUMERS = (LINEAR, EMBEDDING)


def match_consumer(node: torch.fx.Node) -> Match | str:
    """The torchao pattern ending at linear / embedding `node`, or why it is not one."""
    op = key(node)
    if op == LINEAR:
        if key(node.args[0]) == DEQUANTIZE:
            return match_linear_8da(node)
        return match_linear_wo(node)
    if op == EMBEDDING:
        return match_embedding_wo(node)
    return f"{op} is neither aten.linear nor aten.embedding"


def _pattern(found: Match) -> str:
    if isinstance(found, Linear8daMatch):
        return "8da4w linear"
    return "weight-only linear" if isinstance(found, LinearWoMatch) else "weight-only embedding"


def check_torchao_node(
    node: torch.fx.Node, check_consumer: Callable[[torch.fx.Node], str | None]
) -> str | None:
    """None when every path from torchao node `node` ends in a linear or embedding of one of the
    patterns (see the module doc) whose chain holds `node` and which `check_consumer` (the
    partitioner's own decision on that node) accepts; else why the delegate cannot take it."""
    consumers: list[torch.fx.Node] = []
    pending, seen = [node], set()
    while pending:
        current = pending.pop()
        for user in current.users:
            if user in seen:
                continue
            seen.add(user)
            op = key(user)
            if op in _CONSUMERS:
                consumers.append(user)
            elif op in (QUANTIZE, DEQUANTIZE) or user.target is operator.getitem:
                pending.append(user)
            else:
                return (
                    f"{current.name} is read by {user.name} ({op}), not by a linear or an "
                    "embedding the delegate fuses"
                )
    if not consumers:
        return "no linear or embedding reads it"
    for consumer in consumers:
        found = match_consumer(consumer)
        if isinstance(found, str):
            return f"{consumer.name}: {found}"
        if node not in found.chain:
            return f"{consumer.name} reads {node.name} outside its {_pattern(found)} pattern"
        why = check_consumer(consumer)
        if why is not None:
            return f"its {key(consumer)} {consumer.name} is left out ({why})"
    return None


class FuseTorchaoOps:
    """Rewrites each torchao pattern into its fused op; see the module doc."""

    def __call__(self, program: ExportedProgram) -> PassReport:
        report = PassReport(pass_name=type(self).__name__)
        graph = program.graph
        constants = ProgramConstants(program)
        for node in list(graph.nodes):
            if key(node) not in _CONSUMERS:
                continue
            found = match_consumer(node)
            if isinstance(found, str):
                if any(key(a) in TORCHAO_OPS for a in node.all_input_nodes):
                    report.skip(node.name, found)
                continue
            self._replace(constants, found)
            report.folded += 1
            report.changed = True
        if report.changed:
            constants.commit()
            program.graph_module.recompile()
        return report

    def _replace(self, constants: ProgramConstants, found: Match) -> None:
        if isinstance(found, EmbeddingWoMatch):
            old = found.embedding
            lifted = lift_weight(constants, found.weight, old.name)
            op = quantized_ops.EMBEDDING_WO
            args: tuple[object, ...] = (
                lifted.weight,
                lifted.scales,
                lifted.zero_points,
                found.indices,
                found.weight.group_size,
                lifted.bits,
            )
        else:
            old = found.linear
            lifted = lift_weight(constants, found.weight, old.name)
            is_8da = isinstance(found, Linear8daMatch)
            op = quantized_ops.LINEAR_8DA if is_8da else quantized_ops.LINEAR_WO
            args = (
                found.x,
                lifted.weight,
                lifted.scales,
                lifted.zero_points,
                found.bias,
                found.weight.group_size,
                lifted.bits,
            )
        graph = old.graph
        with graph.inserting_before(old):
            fused = graph.call_function(op, args)  # type: ignore[arg-type]
        fused.meta = dict(old.meta)
        old.replace_all_uses_with(fused)
        graph.erase_node(old)
        for dead in found.chain:  # consumers first; a chain shared with another op stays
            if not dead.users:
                graph.erase_node(dead)
