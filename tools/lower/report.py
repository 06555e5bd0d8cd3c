"""The lowering report: one dataclass, rendered as text a person reads at a glance, or as JSON."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from tools.lower.lowering import TARGET_TITLES, Delegation
from tools.lower.profiling import Profile
from tools.lower.program_facts import short_op_name
from tools.lower.runtime_check import OutputCheck
from tools.lower.size_check import SizeCheck


@dataclass
class PathTiming:
    """Median latency of one way of running the model, from one interleaved run."""

    name: str
    median_ms: float | None
    samples: int
    ratio_to_primary: float | None
    lowering_s: float | None = None
    pte_bytes: int | None = None
    delegated_ops: int | None = None
    not_delegated_ops: int | None = None
    matches_eager: bool | None = None
    error: str | None = None


@dataclass
class Report:
    source: str
    target: str
    output_path: str
    inputs_origin: str
    export_s: float
    lowering_s: float
    delegation: Delegation
    batch_norms_before: int
    batch_norms_left: int
    constant_bytes: int
    pte_bytes: int
    atol: float
    rtol: float
    checks: list[OutputCheck]
    delegate_details: dict[str, Any] = field(default_factory=dict)
    timings: list[PathTiming] = field(default_factory=list)
    load_average: tuple[float, float, float] | None = None
    threads: int = 0
    profile: Profile | None = None
    # --quantize: SQNR of the .pte's float outputs against the float model, in dB.
    sqnr_db: float | None = None
    # --quantize 8da4w | int8wo: what was quantized, and the float program's constant bytes.
    quantization: str | None = None
    float_constant_bytes: int | None = None
    # --check-sizes: runs at sizes within the dynamic dimensions' bounds.
    size_checks: list[SizeCheck] = field(default_factory=list)

    @property
    def matches_eager(self) -> bool:
        return all(c.ok for c in self.checks) and all(c.ok for c in self.size_checks)

    @property
    def batch_norms_folded(self) -> int:
        return max(0, self.batch_norms_before - self.batch_norms_left)

    def to_dict(self) -> dict[str, Any]:
        d = self.delegation
        return {
            "source": self.source,
            "target": self.target,
            "output_path": self.output_path,
            "inputs_origin": self.inputs_origin,
            "export_s": self.export_s,
            "lowering_s": self.lowering_s,
            "delegation": {
                "subgraphs": d.subgraphs,
                "delegated": dict(sorted(d.delegated.items())),
                "delegated_count": d.delegated_count,
                "not_delegated": {
                    reason: dict(sorted(ops.items())) for reason, ops in d.not_delegated.items()
                },
                "not_delegated_count": d.not_delegated_count,
                "left_out_nodes": list(d.left_out),
                "payload_bytes": d.payload_bytes,
            },
            "batch_norms": {
                "before": self.batch_norms_before,
                "left": self.batch_norms_left,
                "folded": self.batch_norms_folded,
            },
            "constant_bytes": self.constant_bytes,
            "pte_bytes": self.pte_bytes,
            "quantization": self.quantization,
            "float_constant_bytes": self.float_constant_bytes,
            "delegate": dict(self.delegate_details),
            "check": {
                "matches_eager": self.matches_eager,
                "sqnr_db": self.sqnr_db,
                "atol": self.atol,
                "rtol": self.rtol,
                "outputs": [c.to_dict() for c in self.checks],
                "sizes": [c.to_dict() for c in self.size_checks],
            },
            "timings": [t.__dict__ for t in self.timings],
            "load_average": list(self.load_average) if self.load_average else None,
            "torch_threads": self.threads,
            "profile": self.profile.to_dict() if self.profile else None,
        }


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.2f} MiB"


def _ops(counts: dict[str, int], limit: int = 8) -> str:
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{short_op_name(name)} x{count}" for name, count in ordered[:limit])
    if len(ordered) > limit:
        shown += f", ... ({len(ordered) - limit} more kinds)"
    return shown


def render_text(report: Report) -> str:
    r = report
    d = r.delegation
    title = TARGET_TITLES.get(r.target, r.target)
    lines = [
        f"Lowered {r.source} for the {title} -> {r.output_path}",
        f"  export {r.export_s:.2f} s, lowering {r.lowering_s:.2f} s; inputs: {r.inputs_origin}",
        "",
        f"Ops: {d.delegated_count} delegated in {d.subgraphs} subgraph(s), "
        f"{d.not_delegated_count} not delegated",
    ]
    if d.delegated:
        lines.append(f"  delegated: {_ops(d.delegated)}")
    for reason, ops in sorted(d.not_delegated.items()):
        lines.append(f"  not delegated, {reason}: {_ops(ops)}")
    lines.append(
        f"Batch norms folded: {r.batch_norms_folded} of {r.batch_norms_before}"
        + (f" ({r.batch_norms_left} still executed)" if r.batch_norms_left else "")
    )
    ratio = f" ({r.pte_bytes / r.constant_bytes:.2f}x)" if r.constant_bytes else ""
    lines.append(
        f"Size: .pte {human_bytes(r.pte_bytes)}{ratio} vs constants of the exported program "
        f"{human_bytes(r.constant_bytes)}"
    )
    if r.quantization is not None:
        lines.append(f"Quantized: {r.quantization}")
    if r.float_constant_bytes:
        lines.append(
            f"  .pte {human_bytes(r.pte_bytes)} vs the float program's constants "
            f"{human_bytes(r.float_constant_bytes)} "
            f"({r.pte_bytes / r.float_constant_bytes:.2f}x)"
        )
    if "arena_bytes" in r.delegate_details:
        lines.append(f"Delegate arena: {human_bytes(int(r.delegate_details['arena_bytes']))}")
    for key, value in sorted(r.delegate_details.items()):
        if key != "arena_bytes":
            lines.append(f"Delegate {key.replace('_', ' ')}: {value}")
    verdict = "MATCHES" if r.matches_eager else "DIFFERS FROM"
    lines.append(
        f"Check: {verdict} eager on {len(r.checks)} output(s) "
        f"(float: atol {r.atol:g} + rtol {r.rtol:g}; integer/bool: exact)"
    )
    if r.sqnr_db is not None:
        lines.append(f"  quantization: SQNR against the float model {r.sqnr_db:.1f} dB")
    for c in r.checks:
        err = "-" if c.max_abs_error is None else f"{c.max_abs_error:.3g}"
        status = "ok" if c.ok else "FAIL"
        kind = "exact" if c.exact_required else f"max abs err {err}"
        problem = f" ({c.problem})" if c.problem else ""
        lines.append(f"  output {c.index}: {c.dtype}{list(c.shape)} {kind}: {status}{problem}")
    if r.size_checks:
        lines.append(f"  sizes within the dynamic bounds ({len(r.size_checks)} checked, one .pte):")
    for s in r.size_checks:
        sizes = ", ".join(f"{name}={value}" for name, value in s.sizes.items())
        err = "-" if s.max_abs_error is None else f"{s.max_abs_error:.3g}"
        status = "ok" if s.ok else "FAIL"
        problem = f" ({s.problem})" if s.problem else ""
        shapes = " ".join(str(list(shape)) for shape in s.input_shapes)
        lines.append(f"    {sizes}: inputs {shapes}, max abs err {err}: {status}{problem}")
    if r.timings:
        lines.append("")
        primary = r.timings[0].name
        lines.append(f"Latency (median of interleaved runs; ratio = path / {primary}):")
        lines.append(
            f"  {'path':<34} {'median ms':>10} {'ratio':>8} {'n':>3} {'lower s':>8} "
            f"{'.pte':>10} {'deleg ops':>9} {'eager?':>6}"
        )
        for t in r.timings:
            if t.error:
                lines.append(f"  {t.name:<34} FAILED: {t.error}")
                continue
            median = "-" if t.median_ms is None else f"{t.median_ms:.3f}"
            ratio_s = "-" if t.ratio_to_primary is None else f"{t.ratio_to_primary:.2f}x"
            lower_s = "-" if t.lowering_s is None else f"{t.lowering_s:.2f}"
            deleg = "-" if t.delegated_ops is None else str(t.delegated_ops)
            match = {True: "yes", False: "NO", None: "-"}[t.matches_eager]
            lines.append(
                f"  {t.name:<34} {median:>10} {ratio_s:>8} {t.samples:>3} {lower_s:>8} "
                f"{human_bytes(t.pte_bytes):>10} {deleg:>9} {match:>6}"
            )
        if r.load_average:
            lines.append(
                "  load average during the run (1/5/15 min): "
                + " ".join(f"{x:.2f}" for x in r.load_average)
                + f"; torch threads {r.threads}"
            )
            cores = os.cpu_count() or 1
            if r.load_average[0] > cores and r.threads > 1:
                lines.append(
                    f"  (busy machine: load {r.load_average[0]:.1f} on {cores} cores; "
                    "multi-threaded paths suffer most, --threads 1 gives steadier ratios)"
                )
    if r.profile:
        lines.append("")
        lines.extend(render_profile(r.profile))
    return "\n".join(lines)


PROFILE_ROWS = 10  # slowest ops in the text report; the JSON report has them all


def render_profile(profile: Profile, rows: int = PROFILE_ROWS) -> list[str]:
    """The slowest ops as a table, with the totals and where the files are."""
    p = profile
    covered = p.ops_ms / p.forward_ms if p.forward_ms else 0.0
    calls = ", ".join(f"{name} {ms:.3f} ms" for name, ms in sorted(p.delegate_calls.items()))
    lines = [
        f"Profile (ETDump; mean of {p.runs} run(s) after {p.warmup_runs} warm-up): forward "
        f"{p.forward_ms:.3f} ms, its ops {p.ops_ms:.3f} ms ({100 * covered:.1f}%)"
        + (f"; DELEGATE_CALL {calls}" if calls else ""),
    ]
    shown = p.ops[:rows]
    # "fused with" last: it can be long (a whole inverted residual block), the figures stay aligned.
    table = [
        (
            op.node,
            op.op,
            op.provider,
            f"{op.ms:.4f}",
            f"{100 * op.share:.1f}%",
            ", ".join(op.fused_with) or "-",
        )
        for op in shown
    ]
    header = ("node", "op", "provider", "ms", "share", "fused with")
    widths = [max(len(row[i]) for row in [header, *table]) for i in range(len(header))]
    for row in [header, *table]:
        cells = [row[i].ljust(widths[i]) for i in range(3)]
        cells += [row[i].rjust(widths[i]) for i in range(3, 5)] + [row[5]]
        lines.append("  " + "  ".join(cells).rstrip())
    rest = p.ops[rows:]
    if rest:
        ms = sum(op.ms for op in rest)
        share = sum(op.share for op in rest)
        lines.append(f"  ... {len(rest)} more ops: {ms:.4f} ms ({100 * share:.1f}%)")
    if p.paths is not None:
        lines.append(f"  picture: {p.paths.chart}")
        lines.append(f"  ETDump: {p.paths.etdump}  ETRecord: {p.paths.etrecord}")
        lines.append(
            "  (executorch.devtools.Inspector(etdump_path=..., etrecord=...) reads them again)"
        )
    return lines
