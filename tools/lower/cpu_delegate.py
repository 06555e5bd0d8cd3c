"""The lowering tool's view of the CPU delegate: its partitioner, why it left nodes out, what its
preprocess folded, and the runtime's arena size. Imported only when the CPU target is used."""

from __future__ import annotations

import os
from typing import Any

import torch

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.runtime import loader
from tools.lower.errors import ExitCode, LowerError
from tools.lower.program_facts import count_batch_norms
from tools.lower.target_setup import TargetSetup

_BATCH_NORM_PASSES = ("FuseBatchNormWithConvPass", "FuseBatchNormWithLinearPass")


# Under `bazel run`, loader.py's default search misses the library (it looks beside argv[0], which
# is main.py inside the runfiles tree); this file sits in the same runfiles tree as the library.
_RUNFILES_LIBRARY = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "backends",
    "cpu",
    "runtime",
    "libcpu_backend.so",
)


def _prepare_runtime() -> None:
    explicit = os.environ.get(loader.ENV_LIBRARY)
    beside_us = None if explicit or not os.path.isfile(_RUNFILES_LIBRARY) else _RUNFILES_LIBRARY
    try:
        path = loader.load_cpu_backend(beside_us)
    except Exception as exc:  # missing file, dlopen failure, a library of another version
        raise LowerError(
            ExitCode.LOWERING_FAILED, f"CPU delegate runtime could not be loaded: {exc}"
        ) from None
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

    def explain(node: torch.fx.Node) -> tuple[str, str] | None:
        for report in reversed(partitioner.reports):
            for left in report.left_out:
                if left.name == node.name:
                    return left.reason.value, left.detail
        return None

    return TargetSetup(
        partitioners=[partitioner],
        prepare_runtime=_prepare_runtime,
        explain=explain,
        describe_delegate=_describe,
        runtime_details=_runtime_details,
    )
