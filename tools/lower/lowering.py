"""Lowering an exported program for one target (CPU delegate, XNNPACK, or no delegate), and what
the lowered program looks like: which ops each delegate took, which stayed out and why, which batch
norms are gone."""

from __future__ import annotations

import copy
import operator
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export import ExportedProgram

from backends.cpu import symbolic_dims
from tools.lower.errors import ExitCode, LowerError
from tools.lower.program_facts import is_batch_norm, op_name
from tools.lower.target_setup import TargetSetup

CPU = "cpu"
XNNPACK = "xnnpack"
NO_DELEGATE = "none"
TARGETS = (CPU, XNNPACK, NO_DELEGATE)

TARGET_TITLES = {
    CPU: "CPU delegate",
    XNNPACK: "XNNPACK delegate",
    NO_DELEGATE: "no delegate (portable kernels)",
}

# Why an op is not in a delegate when the partitioner gives no reason of its own.
NOT_CLAIMED = "not claimed by the partitioner"
NO_PARTITIONER = "no delegate requested"


@dataclass
class Delegation:
    """Op counts of a lowered program, by op name."""

    delegated: Counter[str] = field(default_factory=Counter)
    # reason -> op name -> count
    not_delegated: dict[str, Counter[str]] = field(default_factory=dict)
    subgraphs: int = 0
    payload_bytes: int = 0
    # Every node left out: {"node", "op", "reason", "detail"}, in graph order.
    left_out: list[dict[str, str]] = field(default_factory=list)

    @property
    def delegated_count(self) -> int:
        return sum(self.delegated.values())

    @property
    def not_delegated_count(self) -> int:
        return sum(sum(c.values()) for c in self.not_delegated.values())


@dataclass
class Lowered:
    """A lowered program: the `.pte` bytes and what went into them."""

    target: str
    pte: bytes
    lowering_s: float
    delegation: Delegation
    batch_norms_left: int
    delegate_details: dict[str, Any] = field(default_factory=dict)
    # executorch's ETRecord of the lowering (lower(..., etrecord=True)), for Inspector.
    etrecord: Any = None


# --- the targets ----------------------------------------------------------------------------------


def target_setup(target: str) -> TargetSetup:
    """A fresh setup (partitioner state is per lowering) for ``target``; LowerError when the
    target is unknown or unavailable in this build."""
    if target == NO_DELEGATE:
        return TargetSetup(partitioners=[])
    if target == XNNPACK:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        return TargetSetup(partitioners=[XnnpackPartitioner()])
    if target == CPU:
        return _cpu_target_setup()
    raise LowerError(ExitCode.BAD_INPUT, f"unknown target {target!r} (known: {', '.join(TARGETS)})")


def _cpu_target_setup() -> TargetSetup:
    try:
        from tools.lower import cpu_delegate
    except ImportError as exc:
        raise LowerError(
            ExitCode.LOWERING_FAILED,
            f"the CPU delegate is not available in this build ({exc}); "
            "try --target xnnpack or --target none",
        ) from None
    return cpu_delegate.target_setup()


# --- lowering -------------------------------------------------------------------------------------


def lower(
    program: ExportedProgram, target: str, setup: TargetSetup | None = None, etrecord: bool = False
) -> Lowered:
    """Lowers a copy of ``program`` for ``target`` to `.pte` bytes (and, with ``etrecord``, an
    ETRecord of the lowering); LowerError on failure."""
    from executorch.exir import to_edge_transform_and_lower

    setup = setup or target_setup(target)
    started = time.perf_counter()
    try:
        edge = to_edge_transform_and_lower(
            copy.deepcopy(program),
            partitioner=setup.partitioners or None,
            generate_etrecord=etrecord,
        )
        analysis = analyse(edge.exported_program().graph_module, setup)
        # Keeps bounded dynamic dimensions at their exported bounds (see symbolic_dims).
        executorch_program = symbolic_dims.to_executorch(edge)
        pte = executorch_program.buffer
        record = executorch_program.get_etrecord() if etrecord else None
    except LowerError:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise LowerError(
            ExitCode.LOWERING_FAILED,
            f"lowering for {TARGET_TITLES[target]} failed: {type(exc).__name__}: {first}",
        ) from exc
    delegation, batch_norms_left, details = analysis
    return Lowered(
        target=target,
        pte=pte,
        lowering_s=time.perf_counter() - started,
        delegation=delegation,
        batch_norms_left=batch_norms_left,
        delegate_details=details,
        etrecord=record,
    )


def analyse(
    graph_module: torch.fx.GraphModule, setup: TargetSetup
) -> tuple[Delegation, int, dict[str, Any]]:
    """Counts delegated and left-out ops (grouped by reason) and the batch norms still executed.

    Batch norms inside a delegated subgraph count as executed only when the target's
    ``describe_delegate`` says so: the CPU delegate reports what its preprocess folded; XNNPACK
    folds batch norms into its convolutions in its own preprocess and is taken at its word.
    """
    delegation = Delegation()
    batch_norms = 0
    details: dict[str, Any] = {}
    for node in graph_module.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        name = op_name(node.target)
        if name == "executorch_call_delegate":
            lowered_module = getattr(graph_module, node.args[0].target)
            delegation.subgraphs += 1
            delegation.payload_bytes += len(lowered_module.processed_bytes)
            inner = lowered_module.original_module.graph_module
            for inner_node in inner.graph.nodes:
                if inner_node.op == "call_function" and inner_node.target is not operator.getitem:
                    delegation.delegated[op_name(inner_node.target)] += 1
            described = setup.describe_delegate(lowered_module)
            # The delegate may fold batch norms in preprocess; count what it still executes.
            batch_norms += int(described.pop("batch_norm_ops", 0))
            for key, value in described.items():
                details[key] = details.get(key, 0) + value if isinstance(value, int) else value
            continue
        reason, detail = setup.explain(node) or (
            NOT_CLAIMED if setup.partitioners else NO_PARTITIONER,
            "",
        )
        delegation.not_delegated.setdefault(reason, Counter())[name] += 1
        delegation.left_out.append(
            {"node": node.name, "op": name, "reason": reason, "detail": detail}
        )
        if is_batch_norm(name):
            batch_norms += 1
    return delegation, batch_norms, details
