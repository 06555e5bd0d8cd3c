"""The delegate's profiling events and the debug-handle map that links them to the program.

The runtime (`CompiledGraph::execute`) logs one event per kernel call through ExecuTorch's event
tracer, named after the payload ops the call covers and the provider that ran it:
`"aten_convolution_default (Optimized)"`, or for an op that fused the ones after it
`"aten_convolution_default + aten_relu_default (Optimized)"`; an op its provider declined runs on
ExecuTorch's own kernels and is `"... (Reference)"`. Which ops fuse is only decided when the
runtime binds them, so the map holds every name the runtime can produce for a payload: each op on
Reference, and on its route's provider alone or with up to `MAX_FUSED_STEPS` ops after it.

ExecuTorch keeps the map on the lowered module (`PreprocessResult.debug_handle_map`) and in the
ETRecord, not in the `.pte`; Inspector reads it to give each event the debug handles, hence the
nodes and op types, of the exported program.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.export import ExportedProgram

from backends.cpu.serialization.schema import fb

# Steps the runtime offers after an op at most (kMaxFusedSteps in runtime/compiled_graph.cc; the
# runtime reports its own through et_cpu_runtime_max_fused_steps, a test compares the two).
MAX_FUSED_STEPS = 6

REFERENCE = 0  # Provider.Reference in schema.fbs

# Provider id -> its name in schema.fbs, the name the runtime puts in its events.
PROVIDER_NAMES: dict[int, str] = {
    value: name
    for name, value in vars(fb.Provider).items()
    if not name.startswith("_") and isinstance(value, int)
}


def provider_name(provider: int) -> str:
    """The schema's name of a provider id, as the runtime spells it in its events."""
    return PROVIDER_NAMES.get(provider, f"provider {provider}")


def event_name(nodes: Sequence[str], provider: int) -> str:
    """The name of the event of one kernel call covering ``nodes`` (the op first, then the ops it
    fused) on ``provider``."""
    return f"{' + '.join(nodes)} ({provider_name(provider)})"


@dataclass(frozen=True)
class HandleSnapshot:
    """Debug handles of a program's call nodes, taken before the delegate's passes rewrite it."""

    handles: dict[str, int]
    # Node name -> the node its first argument comes from (None: a placeholder or a non-node).
    first_input: dict[str, str | None]


def snapshot_handles(program: ExportedProgram) -> HandleSnapshot:
    """Records every call node's debug handle (set by `to_edge`) and first input."""
    handles: dict[str, int] = {}
    first_input: dict[str, str | None] = {}
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        handle = node.meta.get("debug_handle")
        if isinstance(handle, int):
            handles[node.name] = handle
        source = node.args[0] if node.args else None
        first_input[node.name] = source.name if isinstance(source, torch.fx.Node) else None
    return HandleSnapshot(handles, first_input)


def handles_per_node(before: HandleSnapshot, survivors: Sequence[str]) -> dict[str, set[int]]:
    """Debug handles of each surviving node: its own, and those of the nodes the passes removed
    that fed on it (a batch norm folded into its convolution, the batch norm's getitem).

    A removed node is credited to the first survivor up its chain of first inputs: the passes
    that remove nodes fold them into the op they read from.
    """
    alive = set(survivors)
    result: dict[str, set[int]] = {name: set() for name in survivors}
    for name, handle in before.handles.items():
        owner: str | None = name
        seen: set[str] = set()
        while owner is not None and owner not in alive and owner not in seen:
            seen.add(owner)
            owner = before.first_input.get(owner)
        if owner is not None and owner in alive:
            result[owner].add(handle)
    return result


def debug_handle_map(
    program: ExportedProgram, ops: Sequence[tuple[str, int]], before: HandleSnapshot
) -> dict[str, tuple[int, ...]]:
    """Every event name the runtime may log for the payload of ``program`` (after the passes),
    whose ops are ``ops`` ((node name, route provider) in payload order) -> the debug handles of
    the nodes it covers, from ``before`` (taken before the passes).

    A group is an op and the ops right after it, each reading the one before (the runtime only
    fuses a step that reads the previous result). Events without any known handle are left out
    (Inspector then shows them without op types).
    """
    names = [name for name, _ in ops]
    handles = handles_per_node(before, names)
    nodes = {node.name: node for node in program.graph.nodes}
    reads_previous = [
        i > 0 and nodes[names[i - 1]] in nodes[names[i]].all_input_nodes for i in range(len(names))
    ]
    result: dict[str, tuple[int, ...]] = {}

    def add(first: int, count: int, provider: int) -> None:
        covered = names[first : first + count]
        found: set[int] = set()
        for name in covered:
            found |= handles.get(name, set())
        if found:
            result[event_name(covered, provider)] = tuple(sorted(found))

    for i, (_, provider) in enumerate(ops):
        add(i, 1, REFERENCE)
        if provider == REFERENCE:
            continue
        add(i, 1, provider)
        steps = 0
        while (
            steps < MAX_FUSED_STEPS and i + steps + 1 < len(ops) and reads_previous[i + steps + 1]
        ):
            steps += 1
            add(i, 1 + steps, provider)
    return result
