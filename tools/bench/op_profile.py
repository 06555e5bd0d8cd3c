"""The CPU delegate's per-op profile of a benchmark model and how far each op is from the GEMM
peak (issue 17's "what stands between it and the GEMM peak"): the ``--profile`` and
``--profile-away`` of `zoo_bench.py` (the zoo's models, `zoo.py`) and `cpu_delegate_bench.py`
(the examples' models, `tools/lower/examples.py`: resnet, mobilenet, mlp_bn).

A profile runs in a fresh process that rebuilds the program from where the model comes from
(SOURCE: ``zoo`` or ``examples``), with ``ET_CPU_PROFILE=1`` (the runtime times every kernel call
and prints its table when the delegate is destroyed) and the variables of ``--profile-env`` set
(the runtime's switches, e.g. ``ET_CPU_ONEDNN_BLOCKS=0``: an inverted residual block as three
timed convolutions rather than one fused chain):

    python -m tools.bench.op_profile --child SOURCE MODEL SIZE RUNS [back-to-back|away]

The child lowers the model onto the CPU delegate (`lower_cpu`, as the benchmarks' CPU-delegate
path does), runs it RUNS times as the harness times them (outputs not cloned), back to back or
each after ``gc.collect()`` (``away``), destroys the delegate and prints as JSON the op placement,
the mean wall time of a call after the first and every payload op's cost (`op_cost.program_costs`
of the program it ran, so the costs and the timed ops are one program). The parent (`profile`)
parses the table: which provider ran each op and its share of the kernel time, summed per kernel
and provider; one call's parts (Python's ``run_method``, the delegates' share of it and, inside
them, the kernels and the time before, between and after them); and the roofline (`roofline`):
each op's and each kernel class's GFLOP/s against float32 ``torch.mm`` at 1024^3, measured once
in the parent at the first profile. `render_profile` writes it under a table; `profile_away`
compares back to back with after time away, ours (op by op) and ONNX Runtime's (its profiler);
`report` is both, as a benchmark's ``after_each`` adds them (also into ``result.details``, the
JSON).
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from tools.bench import harness, onnxruntime_peer, op_cost

ZOO = "zoo"  # tools/bench/zoo.py
EXAMPLES = "examples"  # tools/lower/examples.py
SOURCES = (ZOO, EXAMPLES)
BASELINE = "cpu delegate"  # the benchmarks' name of the path profiled
XNNPACK = "xnnpack"
CHILD_FLAG = "--child"
BACK_TO_BACK = "back-to-back"
AWAY = "away"
_GEMM_PEAK: list[float] = []  # measured once, at the first profile
_MODULE = "tools.bench.op_profile"  # what the child runs


def create(source: str, model: str, size: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """The model `model` of `source` at `size` in eval mode (the same weights in every process)
    and its inputs."""
    if source == ZOO:
        from tools.bench import zoo

        return zoo.create(model, size)
    if source == EXAMPLES:
        from tools.lower.examples import get_example

        spec = get_example(model)
        return spec.model(size), spec.sample_inputs(size)
    raise ValueError(f"unknown model source {source!r} (sources: {', '.join(SOURCES)})")


def lower_cpu(net: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> tuple[Any, Any]:
    """`net` exported and lowered onto the CPU delegate: the edge program manager (with the
    delegate's payloads) and the partitioner (its report: what it claimed and left out)."""
    from executorch.exir import to_edge_transform_and_lower

    from backends.cpu.partition.cpu_partitioner import CpuPartitioner

    with torch.no_grad():
        exported = torch.export.export(net, inputs)
    partitioner = CpuPartitioner()
    return to_edge_transform_and_lower(exported, partitioner=[partitioner]), partitioner


@dataclass(frozen=True)
class ProfiledOp:
    """One line of the runtime's ET_CPU_PROFILE table."""

    node: str
    kernel: str
    provider: str  # "Reference", "Optimized(oneDNN)", "Reference (declined by ...: why)"
    mean_us: float
    share: float  # percent of the delegate's kernel time


# "      21.6 us   2.9%  <node> <kernel>: <placement>" (compiled_graph.cc, profile_report).
_PROFILE_LINE = re.compile(
    r"^\s*(?P<us>[0-9.]+) us\s+(?P<share>[0-9.]+)%\s+(?P<node>\S+) (?P<kernel>\S+): (?P<where>.+)$"
)


def parse_profile(text: str) -> list[ProfiledOp]:
    """The ops of every ET_CPU_PROFILE table in `text` (other lines are ignored)."""
    ops = []
    for line in text.splitlines():
        match = _PROFILE_LINE.match(line)
        if match:
            ops.append(
                ProfiledOp(
                    node=match["node"],
                    kernel=match["kernel"],
                    provider=match["where"].strip(),
                    mean_us=float(match["us"]),
                    share=float(match["share"]),
                )
            )
    return ops


# "  10473.2 us per call in the delegate (mean after the first): kernels 10402.5, outside them
# 70.7 (entry 1.2, between kernels 60.1, exit 9.4)" (compiled_graph.cc, call_report): one per
# delegate.
_CALL_LINE = re.compile(
    r"^\s*(?P<total>[0-9.]+) us per call in the delegate \(mean after the first\): "
    r"kernels (?P<kernels>[0-9.]+), outside them [0-9.]+ \(entry (?P<entry>[0-9.]+), "
    r"between kernels (?P<between>[0-9.]+), exit (?P<exit>[0-9.]+)\)$"
)
CALL_PARTS = ("total", "kernels", "entry", "between", "exit")


def parse_calls(text: str) -> dict[str, float]:
    """The per-call lines of every ET_CPU_PROFILE table in `text`, summed over the delegates:
    microseconds per call in the delegates (`total`), in their kernels, before the first kernel,
    between kernels and after the last. Empty when no table has one (a single run)."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        match = _CALL_LINE.match(line)
        if match:
            for part in CALL_PARTS:
                sums[part] = sums.get(part, 0.0) + float(match[part])
    return sums


def _provider_group(provider: str) -> str:
    if provider.startswith("folded into"):  # a permute a product or permute reads through
        return "folded permute (no copy)"
    return "Reference (declined)" if provider.startswith("Reference (declined") else provider


def _child(source: str, model: str, size: str, runs: int, away: bool = False) -> int:
    """The profiled process (ET_CPU_PROFILE=1 in its environment): lower, run `runs` times as the
    harness times them (outputs not cloned), back to back or (`away`) each after `gc.collect()`,
    destroy the delegate (the runtime prints its profile table on stderr then); print the op
    placement, the mean wall time of a call after the first (the runtime's convention) and the
    program's op costs as JSON."""
    from executorch.extension.pybindings import portable_lib

    from backends.cpu.runtime import loader

    net, inputs = create(source, model, size)
    edge, _ = lower_cpu(net, inputs)
    costs = op_cost.program_costs(edge.exported_program())
    pte = bytes(edge.to_executorch().buffer)
    loader.load_cpu_backend()
    module = portable_lib._load_for_executorch_from_buffer(pte)
    args = list(inputs)
    seconds = []
    gc.collect()
    gc.disable()  # a collection inside a timed call would count as time outside the delegate
    try:
        for _ in range(runs):
            if away:
                gc.collect()  # the time away, as before each timed call in the harness
            start = time.perf_counter()
            module.run_method("forward", args, clone_outputs=False)
            seconds.append(time.perf_counter() - start)
    finally:
        gc.enable()
    placement = loader.last_placement()
    del module
    gc.collect()
    sys.stderr.flush()
    later = seconds[1:] or seconds
    print(
        json.dumps(
            {
                "placement": placement,
                "call_us": 1e6 * sum(later) / len(later),
                "costs": {name: asdict(cost) for name, cost in costs.items()},
            }
        )
    )
    return 0


@dataclass(frozen=True)
class ProfileRun:
    """What one profiled process reports."""

    ops: list[ProfiledOp]
    placement: list[str]  # the runtime's op placement lines
    call: dict[str, float]  # one call's parts: Python's run_method (`python_us`), `parse_calls`'s
    costs: dict[str, op_cost.OpCost] = field(default_factory=dict)  # of the program profiled


def profiled_ops(
    source: str,
    model: str,
    size: str,
    runs: int,
    timeout_s: float = 600.0,
    away: bool = False,
    env: Mapping[str, str] | None = None,
) -> ProfileRun:
    """Runs the CPU delegate on `source`'s model `runs` times (`away`: each after `gc.collect()`)
    in a fresh process with ET_CPU_PROFILE=1 and `env` (the runtime's switches, read when the
    delegate initializes) set (`_child`); returns what it reports."""
    child_env = {**os.environ, **(env or {}), "ET_CPU_PROFILE": "1"}
    # The child must import what this process imports (Bazel sets sys.path in a launcher stub).
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    mode = AWAY if away else BACK_TO_BACK
    proc = subprocess.run(
        [sys.executable, "-m", _MODULE, CHILD_FLAG, source, model, size, str(runs), mode],
        capture_output=True,
        text=True,
        env=child_env,
        timeout=timeout_s,
        check=False,
    )
    ops = parse_profile(proc.stderr)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not ops or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"profile of {model}/{size} failed (exit {proc.returncode}): {tail}")
    child = json.loads(lines[-1])
    return ProfileRun(
        ops=ops,
        placement=child["placement"],
        call={"python_us": child["call_us"], **parse_calls(proc.stderr)},
        costs={name: op_cost.OpCost(**cost) for name, cost in child["costs"].items()},
    )


def profile(
    source: str,
    model: str,
    size: str,
    runs: int,
    timeout_s: float = 600.0,
    away: bool = False,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """`profiled_ops`'s ops (provider, mean us, share), the shares summed per kernel and
    provider, how many ops were fused into the op before them, one call's parts and the roofline
    (measuring the GEMM peak at the first profile)."""
    run = profiled_ops(source, model, size, runs, timeout_s, away, env)
    ops = run.ops
    by_kernel: dict[tuple[str, str], list[float]] = {}
    for op in ops:
        entry = by_kernel.setdefault((op.kernel, _provider_group(op.provider)), [0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += op.mean_us
        entry[2] += op.share
    per_provider: dict[str, float] = collections.defaultdict(float)
    for op in ops:
        per_provider[_provider_group(op.provider)] += op.share
    if not _GEMM_PEAK:
        _GEMM_PEAK.append(op_cost.gemm_peak_gflops())
    op_rows = [asdict(op) for op in ops]
    return {
        "runs": runs,
        "away": away,
        "env": dict(env or {}),
        "roofline": roofline(op_rows, run.placement, run.costs, _GEMM_PEAK[0]),
        "total_us": sum(op.mean_us for op in ops),
        "per_provider_share": dict(per_provider),
        "per_kernel": [
            {"kernel": k, "provider": p, "ops": int(n), "us": us, "share": share}
            for (k, p), (n, us, share) in sorted(by_kernel.items(), key=lambda kv: -kv[1][2])
        ],
        "fused_ops": sum(1 for line in run.placement if ": fused into " in line),
        "ops": op_rows,
        # Per call: Python's run_method, the delegates' share of it and its parts.
        "call": run.call,
    }


# "<node> <kernel>: fused into <owner> (<provider>)" (compiled_graph.cc, the placement report).
_FUSED_LINE = re.compile(r"^(?P<node>\S+) \S+: fused into (?P<owner>\S+) \(")


def roofline(
    ops: Sequence[dict[str, Any]],
    placement: Sequence[str],
    costs: Mapping[str, op_cost.OpCost],
    peak_gflops: float,
) -> dict[str, Any]:
    """How far the profiled ops are from the GEMM peak: each timed op's FLOPs (its own plus those
    of the ops fused into it, which it ran) and GFLOP/s, summed per kernel class. An op with
    FLOPs fused into one of another class (an inverted residual block) counts as a fused chain;
    `chain_flops` says which classes its FLOPs are (one time for them all: run the profile with
    ET_CPU_ONEDNN_BLOCKS=0 to time each on its own)."""
    owner = {m["node"]: m["owner"] for m in map(_FUSED_LINE.match, placement) if m}
    flops: dict[str, int] = collections.defaultdict(int)
    kinds: dict[str, dict[str, int]] = collections.defaultdict(dict)  # timed op -> class -> FLOPs
    for name, cost in costs.items():
        timed = owner.get(name, name)
        flops[timed] += cost.flops
        if cost.flops:
            kinds[timed][cost.kind] = kinds[timed].get(cost.kind, 0) + cost.flops
    rows = []
    classes: dict[str, list[float]] = {}
    chain_flops: dict[str, int] = collections.defaultdict(int)
    for op in ops:
        node = op["node"]
        own = costs.get(node)
        kind = own.kind if own is not None else op_cost.MEMORY_BOUND
        if len(kinds[node]) > 1:
            kind = op_cost.FUSED_CHAIN
            for member, member_flops in kinds[node].items():
                chain_flops[member] += member_flops
        rate = op_cost.gflops(flops[node], op["mean_us"])
        rows.append(
            {
                "node": node,
                "kind": kind,
                "shape": own.shape if own is not None else "",
                "flops": flops[node],
                "gflops": rate,
                "of_peak": rate / peak_gflops if peak_gflops else 0.0,
            }
        )
        entry = classes.setdefault(kind, [0, 0.0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += op["mean_us"]
        entry[2] += op["share"]
        entry[3] += flops[node]
    total_flops = sum(flops[op["node"]] for op in ops)
    total_us = sum(op["mean_us"] for op in ops)
    order = {kind: i for i, kind in enumerate(op_cost.CLASSES)}
    return {
        "peak_gflops": peak_gflops,
        "flops": total_flops,
        "gflops": op_cost.gflops(total_flops, total_us),
        "per_class": [
            {
                "kind": kind,
                "ops": int(n),
                "us": us,
                "share": share,
                "flops": int(f),
                "gflops": op_cost.gflops(f, us),
            }
            for kind, (n, us, share, f) in sorted(classes.items(), key=lambda kv: order[kv[0]])
        ],
        # The fused chains' FLOPs by the class of the op they come from.
        "chain_flops": dict(sorted(chain_flops.items(), key=lambda kv: order[kv[0]])),
        "ops": rows,
    }


def render_profile(figures: dict[str, Any], top: int = 5) -> str:
    """`profile`'s figures as the lines under a benchmark's table."""
    env = figures.get("env") or {}
    with_env = "".join(f", {name}={value}" for name, value in env.items())
    lines = [
        f"  per-op profile (ET_CPU_PROFILE, {figures['runs']} runs, fresh process{with_env}): "
        f"{figures['total_us']:.0f} us kernel time per run; {figures['fused_ops']} ops fused "
        "into the op before them (no line of their own)",
        "    by provider: "
        + ", ".join(
            f"{p} {s:.1f}%"
            for p, s in sorted(figures["per_provider_share"].items(), key=lambda kv: -kv[1])
        ),
        f"    {'kernel':<40} {'provider':<22} {'ops':>4} {'us/run':>9} {'share':>6}",
    ]
    call = figures["call"]
    if "total" in call:
        lines.insert(
            1,
            f"    per call: {call['python_us']:.0f} us in Python's run_method = "
            f"{call['total']:.0f} in the delegate (kernels {call['kernels']:.0f}, before the first "
            f"{call['entry']:.1f}, between kernels {call['between']:.1f}, after the last "
            f"{call['exit']:.1f}) + {call['python_us'] - call['total']:.0f} outside it "
            "(ExecuTorch's method, the bindings, ops not delegated)",
        )
    for row in figures["per_kernel"]:
        lines.append(
            f"    {row['kernel']:<40} {row['provider']:<22} {row['ops']:>4} "
            f"{row['us']:>9.1f} {row['share']:>5.1f}%"
        )
    roof = figures["roofline"]
    peak = roof["peak_gflops"]
    lines.append(
        f"    against the GEMM peak ({peak:.0f} GFLOP/s: float32 torch.mm 1024^3, measured in this "
        f"run): {roof['flops'] / 1e9:.3g} GFLOP per call, {roof['gflops']:.1f} GFLOP/s over the "
        f"kernel time ({_percent(roof['gflops'], peak)} of peak)"
    )
    lines.append(
        f"    {'kernel class':<22} {'ops':>4} {'us/run':>9} {'share':>6} {'GFLOP/s':>8} peak"
    )
    for row in roof["per_class"]:
        rate = f"{row['gflops']:8.1f} {_percent(row['gflops'], peak):>4}" if row["flops"] else ""
        lines.append(
            f"    {row['kind']:<22} {row['ops']:>4} {row['us']:>9.1f} {row['share']:>5.1f}% {rate}"
        )
    chains = roof.get("chain_flops")
    if chains:
        total = sum(chains.values())
        lines.append(
            f"    {op_cost.FUSED_CHAIN}s' FLOPs (one kernel, one time; ET_CPU_ONEDNN_BLOCKS=0 in "
            "--profile-env times each): "
            + ", ".join(f"{kind} {100 * f / total:.0f}%" for kind, f in chains.items())
        )
    lines.append(f"    top {top} ops:")
    rates = {row["node"]: row for row in roof["ops"]}
    for op in sorted(figures["ops"], key=lambda o: -o["share"])[:top]:
        row = rates[op["node"]]
        rate = (
            f"  {row['gflops']:.1f} GFLOP/s, {row['kind']} {row['shape']}" if row["flops"] else ""
        )
        lines.append(
            f"    {op['share']:5.1f}% {op['mean_us']:9.1f} us  {op['node']}: {op['provider']}{rate}"
        )
    return "\n".join(lines)


def _percent(rate: float, peak: float) -> str:
    return f"{100 * rate / peak:.0f}%" if peak else "-"


def _away_side(
    back: Sequence[tuple[str, float]], away: Sequence[tuple[str, float]]
) -> dict[str, Any]:
    """One side's ops (name, us) back to back and after time away, matched by name."""
    after = dict(away)
    ops = [{"node": n, "back_to_back_us": us, "away_us": after.get(n, 0.0)} for n, us in back]
    return {
        "back_to_back_us": sum(us for _, us in back),
        "away_us": sum(us for _, us in away),
        "ops": ops,
    }


def profile_away(
    result: harness.BenchmarkResult,
    source: str,
    runs: int,
    onnxruntime: bool = True,
    top: int = 5,
    env: Mapping[str, str] | None = None,
) -> str:
    """--profile-away: the CPU delegate's kernels (ET_CPU_PROFILE, fresh processes) and, with
    `onnxruntime`, ONNX Runtime's nodes (its profiler) back to back and after time away; the
    totals and the ops that added the most, into `result.details["profile_away"]` too."""
    model, size = result.name.split("/")
    sides: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    try:
        # Only the ops: no roofline, so no GEMM peak to measure.
        ours = [profiled_ops(source, model, size, runs, away=a, env=env).ops for a in (False, True)]
        sides[BASELINE] = _away_side(*[[(op.node, op.mean_us) for op in ops] for ops in ours])
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        errors[BASELINE] = str(exc)
    if onnxruntime:
        net, inputs = create(source, model, size)
        try:
            peer = [
                onnxruntime_peer.profile_nodes(net, inputs, runs, away=a) for a in (False, True)
            ]
            sides[onnxruntime_peer.NAME] = _away_side(
                *[[(n["node"], n["us"]) for n in p["nodes"]] for p in peer]
            )
        except RuntimeError as exc:
            errors[onnxruntime_peer.NAME] = str(exc)
    result.details["profile_away"] = {"runs": runs, **sides, "errors": errors}
    lines = [
        f"  after time away ({runs} profiled calls each way, fresh processes for ours; every call "
        "after gc.collect() against back to back), kernel time per call:"
    ]
    for name, side in sides.items():
        added = side["away_us"] - side["back_to_back_us"]
        lines.append(
            f"    {name}: {side['back_to_back_us']:.0f} -> {side['away_us']:.0f} us "
            f"({added:+.0f}); most added:"
        )
        worst = sorted(side["ops"], key=lambda o: o["back_to_back_us"] - o["away_us"])[:top]
        lines.extend(
            f"      {op['away_us'] - op['back_to_back_us']:+8.1f} us  "
            f"{op['back_to_back_us']:8.1f} -> {op['away_us']:8.1f}  {op['node']}"
            for op in worst
        )
    lines.extend(f"    {name}: profile failed: {text}" for name, text in errors.items())
    return "\n".join(lines)


def _achieved(result: harness.BenchmarkResult, roof: dict[str, Any]) -> str:
    """The model's FLOPs over the timed medians of the delegates: what the whole call reaches."""
    rates = {
        v.name: op_cost.gflops(roof["flops"], v.median_ms * 1e3)
        for v in result.variants
        if v.median_ms and v.name in (BASELINE, XNNPACK)
    }
    result.details["achieved_gflops"] = rates
    text = ", ".join(
        f"{name} {rate:.1f} GFLOP/s ({_percent(rate, roof['peak_gflops'])})"
        for name, rate in rates.items()
    )
    return "    whole call at the timed median: " + (text or "not timed")


@dataclass(frozen=True)
class Options:
    """What `add_arguments`'s options ask for (`options_from`)."""

    runs: int = 0  # --profile: profiled runs per model; 0, no profile
    away_runs: int = 0  # --profile-away: profiled runs each way; 0, none
    env: dict[str, str] = field(default_factory=dict)  # --profile-env, in the profiled processes


def report(
    result: harness.BenchmarkResult, source: str, options: Options, onnxruntime: bool = True
) -> list[str]:
    """A benchmark's lines under its table: with `options.runs` (--profile), the profile of its
    model (the result's name, "model/size") and what the whole call reaches at the timed medians;
    with `options.away_runs` (--profile-away), `profile_away` (ONNX Runtime's side with
    `onnxruntime`). Both go into `result.details` too."""
    lines = []
    if options.runs > 0:
        model, size = result.name.split("/")
        try:
            figures = profile(source, model, size, options.runs, env=options.env)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            result.details["profile_error"] = str(exc)
            lines.append(f"  per-op profile failed: {exc}")
        else:
            result.details["profile"] = figures
            lines.append(render_profile(figures))
            lines.append(_achieved(result, figures["roofline"]))
    if options.away_runs > 0:
        lines.append(profile_away(result, source, options.away_runs, onnxruntime, env=options.env))
    return lines


def parse_assignment(text: str, flag: str) -> tuple[str, str]:
    """`NAME=VALUE` of `flag`; a ValueError naming the flag and the text otherwise."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ValueError(f"{flag} wants NAME=VALUE, got {text!r}")
    return name, value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--profile, --profile-away, --profile-runs and --profile-env (read with `options_from`)."""
    parser.add_argument(
        "--profile",
        action="store_true",
        help="after each table, profile the CPU delegate per op (ET_CPU_PROFILE), fresh process",
    )
    parser.add_argument(
        "--profile-away",
        action="store_true",
        help="after each table, each op's time back to back and after time away (gc.collect() "
        "before every call), the CPU delegate's and ONNX Runtime's",
    )
    parser.add_argument(
        "--profile-runs", type=int, default=10, help="profiled runs per model (default 10)"
    )
    parser.add_argument(
        "--profile-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set this environment variable in the profiled processes only (e.g. "
        "ET_CPU_ONEDNN_BLOCKS=0: a fused block's convolutions timed one by one); repeat for more",
    )


def options_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Options:
    """`add_arguments`'s options; a parser error when --profile-runs is below 1 or a
    --profile-env is not NAME=VALUE."""
    if (args.profile or args.profile_away) and args.profile_runs < 1:
        parser.error(f"--profile-runs must be at least 1, got {args.profile_runs}")
    try:
        env = dict(parse_assignment(text, "--profile-env") for text in args.profile_env)
    except ValueError as exc:
        parser.error(str(exc))
    return Options(
        runs=args.profile_runs if args.profile else 0,
        away_runs=args.profile_runs if args.profile_away else 0,
        env=env,
    )


def child_main(arguments: Sequence[str]) -> int:
    """SOURCE MODEL SIZE RUNS [back-to-back|away]: `_child`."""
    if len(arguments) not in (4, 5) or arguments[0] not in SOURCES:
        print(
            f"usage: op_profile {CHILD_FLAG} {{{','.join(SOURCES)}}} MODEL SIZE RUNS "
            f"[{BACK_TO_BACK}|{AWAY}]",
            file=sys.stderr,
        )
        return 2
    source, model, size, runs = arguments[:4]
    mode = arguments[4] if len(arguments) == 5 else BACK_TO_BACK
    return _child(source, model, size, int(runs), away=mode == AWAY)


if __name__ == "__main__":
    if sys.argv[1:2] == [CHILD_FLAG]:
        raise SystemExit(child_main(sys.argv[2:]))
    print(__doc__, file=sys.stderr)
    raise SystemExit(2)
