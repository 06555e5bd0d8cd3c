"""The lowering tool's view of the CPU delegate: its partitioner, why it left nodes out, what its
preprocess folded, and the runtime's arena size. Imported only when the CPU target is used."""

from __future__ import annotations

import os
from typing import Any

import torch

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.runtime import loader
from tools.lower.errors import ExitCode, LowerError
from tools.lower.lowering import TargetSetup, count_batch_norms

_BATCH_NORM_PASSES = ("FuseBatchNormWithConvPass", "FuseBatchNormWithLinearPass")


def _prepare_runtime() -> None:
    try:
        path = loader.load_cpu_backend()
    except (FileNotFoundError, OSError) as exc:
        raise LowerError(ExitCode.LOWERING_FAILED, f"CPU delegate runtime: {exc}") from None
    # Child processes (the benchmark's memory measurements) then load the same library.
    os.environ.setdefault(loader.ENV_LIBRARY, path)


def _describe(lowered_module: Any) -> dict[str, Any]:
    """Batch norms the subgraph still runs after preprocess folded what it could."""
    info = lowered_module.meta.get("_delegate_info_meta") or {}
    folded = sum(
        int(report.get("folded", 0))
        for report in info.get("pass_reports", [])
        if report.get("pass_name") in _BATCH_NORM_PASSES
    )
    before = count_batch_norms(lowered_module.original_module.graph_module)
    return {
        "batch_norm_ops": max(0, before - folded),
        "payload_bytes": len(lowered_module.processed_bytes),
    }


def _runtime_details() -> dict[str, Any]:
    return {"arena_bytes": loader.live_arena_bytes()}


def target_setup() -> TargetSetup:
    partitioner = CpuPartitioner()

    def explain(node: torch.fx.Node) -> str | None:
        for report in reversed(partitioner.reports):
            for left in report.left_out:
                if left.name == node.name:
                    return (
                        f"{left.reason.value} ({left.detail})" if left.detail else left.reason.value
                    )
        return None

    return TargetSetup(
        partitioners=[partitioner],
        prepare_runtime=_prepare_runtime,
        explain=explain,
        describe_delegate=_describe,
        runtime_details=_runtime_details,
    )
