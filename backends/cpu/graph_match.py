"""What preprocess's subgraph fusions share (fuse_rotary.py, fuse_rms_norm.py,
fuse_safe_softmax.py): reading an Edge node (its op, its tensor value, its readers) and replacing
the node a matched subgraph ends in with one fused op."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.export import ExportedProgram

from backends.cpu.routes import op_key
from backends.transforms.pass_report import PassReport
from backends.transforms.program_constants import ProgramConstants


def is_op(node: object, key: str) -> bool:
    """Whether `node` calls the op `key` (e.g. "aten.mul.Tensor")."""
    return (
        isinstance(node, torch.fx.Node)
        and node.op == "call_function"
        and op_key(node.target) == key
    )


def tensor_val(node: object) -> torch.Tensor | None:
    """The (fake) tensor `node` computes, or None."""
    if not isinstance(node, torch.fx.Node):
        return None
    val = node.meta.get("val")
    return val if isinstance(val, torch.Tensor) else None


def only_user(node: object, user: torch.fx.Node) -> bool:
    """Whether `user` is the one node that reads `node`."""
    return isinstance(node, torch.fx.Node) and len(node.users) == 1 and user in node.users


def replace_with_fused(
    graph: torch.fx.Graph,
    last: torch.fx.Node,
    target: Any,
    args: tuple[Any, ...],
    dead: Sequence[torch.fx.Node],
) -> torch.fx.Node:
    """Puts `target(*args)` in place of `last` (its meta kept: value, debug handle), then erases
    `dead` (the subgraph's other nodes, consumers first) where nothing reads them any more."""
    with graph.inserting_before(last):
        fused = graph.call_function(target, args)
    fused.meta = dict(last.meta)
    last.replace_all_uses_with(fused)
    graph.erase_node(last)
    for node in dead:
        if not node.users:
            graph.erase_node(node)
    return fused


@dataclasses.dataclass
class Fusion:
    """One matched subgraph: `target(*args)` replaces `last`; `dead` are its other nodes,
    consumers first."""

    last: torch.fx.Node
    target: Any
    args: tuple[Any, ...]
    dead: list[torch.fx.Node]


def fuse_subgraphs(
    ep: ExportedProgram,
    pass_name: str,
    anchor: str,
    match: Callable[[torch.fx.Node, ProgramConstants], Fusion | None],
) -> PassReport:
    """Calls `match` on every node of `ep` calling the op `anchor` and applies each Fusion it
    returns (replace_with_fused); the graph is linted and recompiled when anything changed."""
    report = PassReport(pass_name=pass_name)
    constants = ProgramConstants(ep)
    graph = ep.graph
    for node in list(graph.nodes):
        if not is_op(node, anchor):
            continue
        found = match(node, constants)
        if found is None:
            continue
        replace_with_fused(graph, found.last, found.target, found.args, found.dead)
        report.folded += 1
        report.changed = True
    if report.changed:
        graph.lint()
        ep.graph_module.recompile()
    constants.commit()
    return report
