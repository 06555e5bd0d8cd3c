"""`lower --profile`: run the `.pte` with ETDump, read the events back with ExecuTorch's Inspector
(linked to the program through the ETRecord) and say which ops take the time.

The files land beside the `.pte`: `NAME.etdp` (ETDump), `NAME.etrecord` (ETRecord) and
`NAME.profile.svg` (profile_chart.py), so Inspector can be pointed at them again later.
"""

from __future__ import annotations

import os
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from tools.lower.errors import ExitCode, LowerError
from tools.lower.program_facts import short_op_name

# Containers of the op events in an ETDump run, not ops themselves: the forward, a delegate
# call, and the instruction around a portable kernel's own "native_call_<kernel>" event.
METHOD_EVENT = "Method::execute"
DELEGATE_EVENT = "DELEGATE_CALL"
OPERATOR_EVENT = "OPERATOR_CALL"
# Ops that run outside any delegate: ExecuTorch's portable kernels.
PORTABLE = "portable"

# The CPU delegate's event names: "node + fused node ... (Provider)" (profiling_events.py).
_CPU_EVENT = re.compile(r"^(?P<nodes>.+) \((?P<provider>[^()]+)\)$")
_CPU_BACKEND = "CpuBackend"


@dataclass(frozen=True)
class ProfilePaths:
    etdump: str
    etrecord: str
    chart: str

    @staticmethod
    def beside(pte_path: str) -> ProfilePaths:
        stem = os.path.splitext(pte_path)[0]
        return ProfilePaths(f"{stem}.etdp", f"{stem}.etrecord", f"{stem}.profile.svg")


@dataclass(frozen=True)
class OpTime:
    """One op event of the profile (one kernel call per run, or a fused group)."""

    node: str
    op: str  # the op type of the node, from the ETRecord ("-" when not linked)
    provider: str
    fused_with: tuple[str, ...]
    ms: float  # mean per run
    share: float  # of the whole forward (Method::execute), 0..1
    op_types: tuple[str, ...] = ()  # every op type the event covers (fused, folded)

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "op": self.op,
            "provider": self.provider,
            "fused_with": list(self.fused_with),
            "ms": self.ms,
            "share": self.share,
            "op_types": list(self.op_types),
        }


@dataclass
class Profile:
    runs: int
    warmup_runs: int
    forward_ms: float  # mean Method::execute per run
    ops: list[OpTime]  # slowest first
    delegate_calls: dict[str, float] = field(default_factory=dict)  # backend -> mean ms per run
    paths: ProfilePaths | None = None

    @property
    def ops_ms(self) -> float:
        return sum(op.ms for op in self.ops)

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "warmup_runs": self.warmup_runs,
            "forward_ms": self.forward_ms,
            "ops_ms": self.ops_ms,
            "delegate_calls_ms": dict(self.delegate_calls),
            "ops": [op.to_dict() for op in self.ops],
            "files": (
                {}
                if self.paths is None
                else {
                    "etdump": self.paths.etdump,
                    "etrecord": self.paths.etrecord,
                    "chart": self.paths.chart,
                }
            ),
        }


def _split_name(name: str, backend: str | None) -> tuple[str, tuple[str, ...], str | None]:
    """(node, fused nodes, provider) of an event; provider None when the name does not say."""
    match = _CPU_EVENT.match(name) if backend == _CPU_BACKEND else None
    if match is None:
        return name, (), None
    nodes = match.group("nodes").split(" + ")
    return nodes[0], tuple(nodes[1:]), match.group("provider")


def _mean(samples: Sequence[float]) -> float:
    return statistics.fmean(samples) if samples else 0.0


def node_names(etrecord: Any) -> dict[int, str]:
    """Debug handle -> node name in the ETRecord's edge program (empty without one)."""
    program = getattr(etrecord, "edge_dialect_program", None)
    graph = getattr(program, "graph", None)
    if graph is None:
        return {}
    names: dict[int, str] = {}
    for node in graph.nodes:
        handle = node.meta.get("debug_handle")
        if isinstance(handle, int) and node.op == "call_function":
            names.setdefault(handle, node.name)
    return names


def summarize(
    events: Sequence[Any], warmup_runs: int, names: Mapping[int, str] | None = None
) -> Profile:
    """A Profile from the Inspector events of an ETDump's "Execute" block, leaving out the
    first ``warmup_runs`` samples of each event. ``names`` (debug handle -> node name) names
    the events that do not name their node themselves (portable kernels)."""

    def timed(event: Any) -> list[float]:
        raw = list(event.perf_data.raw) if event.perf_data is not None else []
        return [float(ms) for ms in raw[warmup_runs:]]

    forward = [timed(e) for e in events if e.name == METHOD_EVENT]
    runs = len(forward[0]) if forward else 0
    forward_ms = _mean(forward[0]) if forward else 0.0
    calls: dict[str, list[float]] = {}
    ops: list[OpTime] = []
    for event in events:
        samples = timed(event)
        if event.name in (METHOD_EVENT, OPERATOR_EVENT) or not samples:
            continue
        backend = getattr(event, "delegate_backend_name", None) or None
        if event.name == DELEGATE_EVENT:
            calls.setdefault(backend or "?", []).append(_mean(samples))
            continue
        node, fused, provider = _split_name(str(event.name), backend)
        given = event.debug_handles if provider is None else None  # an int or a list of them
        handles = [given] if isinstance(given, int) else sorted(given or [])
        if handles and names and handles[0] in names:
            node = names[handles[0]]
        op_types = tuple(short_op_name(str(t)) for t in (event.op_types or []))
        ms = _mean(samples)
        ops.append(
            OpTime(
                node=node,
                op=op_types[0] if op_types else "-",
                provider=provider or (backend if event.is_delegated_op else PORTABLE) or "?",
                fused_with=fused,
                ms=ms,
                share=ms / forward_ms if forward_ms > 0 else 0.0,
                op_types=op_types,
            )
        )
    ops.sort(key=lambda op: -op.ms)
    return Profile(
        runs=runs,
        warmup_runs=warmup_runs,
        forward_ms=forward_ms,
        ops=ops,
        delegate_calls={backend: sum(means) for backend, means in calls.items()},
    )


def profile_program(
    pte_path: str,
    inputs: Sequence[torch.Tensor],
    runs: int,
    etrecord: Any,
    paths: ProfilePaths,
) -> Profile:
    """Runs the `.pte` at ``pte_path`` once to warm up and ``runs`` times with ETDump, writes the
    ETDump and ``etrecord`` (None: none, the events then carry no op types) to ``paths``, and
    reads them back with Inspector."""
    from executorch.devtools import Inspector
    from executorch.extension.pybindings import portable_lib

    warmup_runs = 1
    try:
        # No debug buffer: only timings are logged (intermediate outputs would need one sized
        # for every run's tensors, and a full one aborts the process).
        module = portable_lib._load_for_executorch(pte_path, enable_etdump=True)
        for _ in range(warmup_runs + runs):
            module.forward(list(inputs))
        module.write_etdump_result_to_file(paths.etdump)
    except Exception as exc:
        raise LowerError(
            ExitCode.LOWERING_FAILED, f"{pte_path}: running with ETDump failed ({exc})"
        ) from None
    del module
    try:
        if etrecord is not None:
            etrecord.save(paths.etrecord)
        inspector = Inspector(
            etdump_path=paths.etdump, etrecord=paths.etrecord if etrecord is not None else None
        )
    except OSError as exc:
        raise LowerError(ExitCode.BAD_INPUT, f"{paths.etrecord}: cannot write: {exc}") from None
    blocks = [b for b in inspector.event_blocks if b.name == "Execute"]
    if not blocks:
        raise LowerError(
            ExitCode.LOWERING_FAILED, f"{paths.etdump}: the ETDump holds no Execute events"
        )
    profile = summarize(blocks[0].events, warmup_runs, node_names(etrecord))
    profile.paths = paths
    return profile
