"""Issue 17's benchmark: the held-out model zoo (`tools/bench/zoo.py`: MobileNetV3-, EfficientNet-,
ResNet-50-style, UNet, conv1d speech) on the CPU delegate vs the XNNPACK delegate vs ONNX Runtime
(`onnxruntime_peer.py`: the model through `torch.onnx.export`, the CPU execution provider with as
many threads as torch) vs eager PyTorch, at the zoo's full size by default. Ratios are against the
CPU delegate, measured interleaved in one run; peak memory is per path, each in a fresh process.
Under each table: the fraction of the Edge ops the CPU partitioner delegated (from its report;
also in the JSON as ``details``) and the ops XNNPACK left outside its delegate.

Two timing regimes (the harness's; run both before drawing conclusions on a shared machine):

    # settled (default): before every timed call, wait until the other threads are idle and make
    # one untimed call, so no variant is timed against its predecessor's spinning thread pool
    ./bazelw run //tools/bench:zoo_bench -- [--only unet/full] [--repeats 10] [--json out.json]

    # not settled: variants alternate call by call, each timed right after the previous one
    # (what an application switching between models sees)
    ./bazelw run //tools/bench:zoo_bench -- --no-settle [--repeats 10]

A/B a runtime switch in the same run (the variant's delegate initializes with the variable set):

    ./bazelw run //tools/bench:zoo_bench -- --variant-env ET_CPU_VECTOR_ACTIVATIONS=0

Add a variant with a switch nothing reads (``--variant-env ET_CPU_UNUSED_SWITCH=1``): the same
delegate twice, its ratio is the run's noise floor to judge the A/B against.

Other options: ``--no-onnxruntime`` (leave the ONNX Runtime column out), ``--size small`` (the
test size), ``--no-memory`` (skip the memory subprocesses),
``--profile [--profile-runs N]``: after each table, one extra run per model in a fresh process
with ``ET_CPU_PROFILE=1`` (the runtime times every kernel call and prints its table when the
delegate is destroyed): which provider ran each op and its share of the kernel time, summed per
kernel and provider, plus the top ops, and where one call's time goes: the wall time of
Python's ``run_method`` (back to back, Python's collector off), the delegates' share of it and,
inside them, the kernels and the time before, between and after them. The profiled run is not
one of the timed ones (profiling adds two clock reads per op). The profile also says how far
each op, each kernel class (dense, 1x1, depthwise, transposed convolution, GEMM, memory-bound) and
the whole call are from the GEMM peak: FLOPs from the payload's shapes (`op_cost.py`) over the
measured time, against float32 `torch.mm` at 1024^3 measured in the same run.
``--profile-away`` (with or without ``--profile``): where a call after time away loses its time,
op by op. The CPU delegate is profiled again with every call made after ``gc.collect()`` (the gap
before each timed call in the harness, what the alternating regime times), and ONNX Runtime
(unless ``--no-onnxruntime``) both ways with its own profiler (`enable_profiling`); under the
table each side's kernel time back to back and after time away, and the ops that added the most.
"""

from __future__ import annotations

import collections
import gc
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from tools.bench import harness, onnxruntime_peer, op_cost, zoo

BASELINE = "cpu delegate"
XNNPACK = "xnnpack"
ONNXRUNTIME = onnxruntime_peer.NAME
EAGER = "eager"
_PEERS = [ONNXRUNTIME]  # --no-onnxruntime empties it
_SIZE = ["full"]  # --size rewrites it before the benchmarks are built
_PROFILE_RUNS = [0]  # --profile sets the number of profiled runs per model
_AWAY_RUNS = [0]  # --profile-away sets them: back to back vs after time away, ours and ORT's
_VARIANT_ENV: list[tuple[str, str]] = []  # --variant-env NAME=VALUE, in order
# What the CPU delegate's factory learned while lowering, per benchmark name ("model/size").
_DELEGATION: dict[str, dict[str, Any]] = {}
_XNNPACK_OUTSIDE: dict[str, dict[str, int]] = {}
_COSTS: dict[str, dict[str, op_cost.OpCost]] = {}  # node name -> its FLOPs and kernel class
_GEMM_PEAK: list[float] = []  # measured once, at the first profile
# The runtime does not own a loaded program's bytes: keep them alive with the module.
_KEEP: list[bytes] = []
_PROFILE_CHILD_FLAG = "--profile-child"


def _outer_ops(program: Any) -> dict[str, int]:
    """Ops of a lowered program that run outside any delegate: op key -> count."""
    import operator

    from backends.cpu.routes import op_key

    counts: collections.Counter[str] = collections.Counter()
    for node in program.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if node.target is torch.ops.higher_order.executorch_call_delegate:
            continue
        counts[op_key(node.target) or str(node.target)] += 1
    return dict(counts)


def lower(model: str, size: str, path: str) -> tuple[bytes, tuple[torch.Tensor, ...]]:
    """Exports the zoo model and lowers it for `path` (cpu delegate or xnnpack); returns the .pte
    bytes and the inputs. Records the delegation figures of the lowering."""
    from executorch.exir import to_edge_transform_and_lower

    net, inputs = zoo.create(model, size)
    with torch.no_grad():
        exported = torch.export.export(net, inputs)
    name = f"{model}/{size}"
    if path == BASELINE:
        from backends.cpu.partition.cpu_partitioner import CpuPartitioner

        partitioner = CpuPartitioner()
        edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
        report = partitioner.report
        total = len(report.claimed) + len(report.left_out)
        left_out = collections.Counter(f"{n.op} ({n.reason.value})" for n in report.left_out)
        _DELEGATION[name] = {
            "delegated_nodes": len(report.claimed),
            "total_nodes": total,
            "fraction": len(report.claimed) / total if total else 0.0,
            "partitions": report.partitions,
            "left_out": dict(left_out),
        }
        _COSTS[name] = op_cost.program_costs(edge.exported_program())
    elif path == XNNPACK:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
        _XNNPACK_OUTSIDE[name] = _outer_ops(edge.exported_program())
    else:
        raise ValueError(f"unknown path {path!r}")
    return bytes(edge.to_executorch().buffer), inputs


def make_program(
    model: str, size: str, path: str, env: Mapping[str, str] | None = None
) -> harness.Runner:
    """Lowers the zoo model for `path`, loads it on ExecuTorch's runtime, runs forward. `env`
    is set while the delegate initializes (the runtime's switches are read at init), then
    restored."""
    from executorch.extension.pybindings import portable_lib

    from backends.cpu.runtime import loader

    pte, inputs = lower(model, size, path)
    _KEEP.append(pte)
    # The memory and profile subprocesses load the same library.
    os.environ.setdefault(loader.ENV_LIBRARY, loader.load_cpu_backend())
    module = portable_lib._load_for_executorch_from_buffer(pte)
    args = list(inputs)
    with harness.environment(dict(env or {})):
        module.forward(args)  # loads the method: the delegate's init runs here
    return harness.executorch_runner(module, args)


def parse_variant_env(text: str) -> tuple[str, str]:
    """`NAME=VALUE` of --variant-env; a ValueError naming the text otherwise."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ValueError(f"--variant-env wants NAME=VALUE, got {text!r}")
    return name, value


def make_eager(model: str, size: str) -> harness.Runner:
    """The zoo model's forward in eager PyTorch under torch.no_grad()."""
    net, inputs = zoo.create(model, size)

    def run() -> object:
        with torch.no_grad():
            return net(*inputs)

    return run


def make_onnxruntime(model: str, size: str) -> harness.Runner:
    """The zoo model exported to ONNX and run on ONNX Runtime's CPU provider."""
    net, inputs = zoo.create(model, size)
    return onnxruntime_peer.make_runner(net.eval(), inputs)


def benchmarks() -> list[harness.Benchmark]:
    size = _SIZE[0]
    out = []
    for model, entry in zoo.ZOO.items():
        kwargs = {"model": model, "size": size}
        shapes = " x ".join(str(spec) for spec in entry.inputs[size])
        # --variant-env: the CPU delegate again with a runtime switch set, timed side by side.
        switched = [
            harness.Variant(
                f"{BASELINE} {name}={value}",
                make_program,
                {**kwargs, "path": BASELINE, "env": {name: value}},
            )
            for name, value in _VARIANT_ENV
        ]
        out.append(
            harness.Benchmark(
                name=f"{model}/{size}",
                baseline=BASELINE,
                variants=[
                    harness.Variant(BASELINE, make_program, {**kwargs, "path": BASELINE}),
                    *switched,
                    harness.Variant(XNNPACK, make_program, {**kwargs, "path": XNNPACK}),
                    *[harness.Variant(ONNXRUNTIME, make_onnxruntime, kwargs) for _ in _PEERS],
                    harness.Variant(EAGER, make_eager, kwargs),
                ],
                notes=f"{entry.description}; inputs {shapes}; "
                f"torch threads {torch.get_num_threads()}"
                + (f"; {onnxruntime_peer.describe()}" if _PEERS else ""),
            )
        )
    return out


# --- per-op profile -------------------------------------------------------------------------------


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


def _profile_child(model: str, size: str, runs: int, away: bool = False) -> int:
    """In a fresh process with ET_CPU_PROFILE=1: lower, run `runs` times as the harness times
    them (outputs not cloned), back to back or (`away`) each after `gc.collect()`, destroy the
    delegate (the runtime prints its profile table on stderr then); print the op placement and
    the mean wall time of a call after the first (the runtime's convention) as JSON."""
    from executorch.extension.pybindings import portable_lib

    from backends.cpu.runtime import loader

    pte, inputs = lower(model, size, BASELINE)
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
    print(json.dumps({"placement": placement, "call_us": 1e6 * sum(later) / len(later)}))
    return 0


def profiled_ops(
    model: str, size: str, runs: int, timeout_s: float = 600.0, away: bool = False
) -> tuple[list[ProfiledOp], list[str], dict[str, float]]:
    """Runs the CPU delegate on the zoo model `runs` times (`away`: each after `gc.collect()`) in
    a fresh process with ET_CPU_PROFILE=1 (`_profile_child`); returns its ops, the op placement
    and one call's parts (Python's run_method as `python_us`, and `parse_calls`'s)."""
    env = dict(os.environ)
    env["ET_CPU_PROFILE"] = "1"
    # The child must import what this process imports (Bazel sets sys.path in a launcher stub).
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    command = [sys.executable, "-m", "tools.bench.zoo_bench", _PROFILE_CHILD_FLAG]
    proc = subprocess.run(
        [*command, model, size, str(runs), "away" if away else "back-to-back"],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )
    ops = parse_profile(proc.stderr)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not ops or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"profile of {model}/{size} failed (exit {proc.returncode}): {tail}")
    child = json.loads(lines[-1])
    return ops, child["placement"], {"python_us": child["call_us"], **parse_calls(proc.stderr)}


def profile(
    model: str, size: str, runs: int, timeout_s: float = 600.0, away: bool = False
) -> dict[str, Any]:
    """`profiled_ops`'s ops (provider, mean us, share), the shares summed per kernel and
    provider, how many ops were fused into the op before them, one call's parts and the roofline
    (measuring the GEMM peak at the first profile)."""
    ops, placement, call = profiled_ops(model, size, runs, timeout_s, away)
    by_kernel: dict[tuple[str, str], list[float]] = {}
    for op in ops:
        entry = by_kernel.setdefault((op.kernel, _provider_group(op.provider)), [0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += op.mean_us
        entry[2] += op.share
    per_provider: dict[str, float] = collections.defaultdict(float)
    for op in ops:
        per_provider[_provider_group(op.provider)] += op.share
    costs = _COSTS.get(f"{model}/{size}", {})
    if not _GEMM_PEAK:
        _GEMM_PEAK.append(op_cost.gemm_peak_gflops())
    op_rows = [asdict(op) for op in ops]
    return {
        "runs": runs,
        "away": away,
        "roofline": roofline(op_rows, placement, costs, _GEMM_PEAK[0]),
        "total_us": sum(op.mean_us for op in ops),
        "per_provider_share": dict(per_provider),
        "per_kernel": [
            {"kernel": k, "provider": p, "ops": int(n), "us": us, "share": share}
            for (k, p), (n, us, share) in sorted(by_kernel.items(), key=lambda kv: -kv[1][2])
        ],
        "fused_ops": sum(1 for line in placement if ": fused into " in line),
        "ops": op_rows,
        # Per call: Python's run_method, the delegates' share of it and its parts.
        "call": call,
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
    FLOPs fused into one of another class (an inverted residual block) counts as a fused chain."""
    owner = {m["node"]: m["owner"] for m in map(_FUSED_LINE.match, placement) if m}
    flops: dict[str, int] = collections.defaultdict(int)
    kinds: dict[str, set[str]] = collections.defaultdict(set)
    for name, cost in costs.items():
        timed = owner.get(name, name)
        flops[timed] += cost.flops
        if cost.flops:
            kinds[timed].add(cost.kind)
    rows = []
    classes: dict[str, list[float]] = {}
    for op in ops:
        node = op["node"]
        own = costs.get(node)
        kind = own.kind if own is not None else op_cost.MEMORY_BOUND
        if len(kinds[node]) > 1:
            kind = op_cost.FUSED_CHAIN
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
        "ops": rows,
    }


def render_profile(figures: dict[str, Any], top: int = 5) -> str:
    lines = [
        f"  per-op profile (ET_CPU_PROFILE, {figures['runs']} runs, fresh process): "
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


# --- summary under each table ---------------------------------------------------------------------


def summary(result: harness.BenchmarkResult) -> str:
    """Delegated fraction, what XNNPACK left outside, and (with --profile) the per-op profile;
    the same figures go into `result.details` (the JSON)."""
    lines = []
    delegation = _DELEGATION.get(result.name)
    if delegation is not None:
        result.details["cpu_delegate"] = delegation
        left = ", ".join(f"{op} x{n}" for op, n in delegation["left_out"].items()) or "nothing"
        lines.append(
            f"  cpu delegate: {delegation['delegated_nodes']}/{delegation['total_nodes']} Edge "
            f"ops delegated ({100 * delegation['fraction']:.1f}%) in "
            f"{delegation['partitions']} partition(s); left out: {left}"
        )
    outside = _XNNPACK_OUTSIDE.get(result.name)
    if outside is not None:
        result.details["xnnpack_ops_outside"] = outside
        text = ", ".join(f"{op} x{n}" for op, n in outside.items()) or "nothing"
        lines.append(f"  xnnpack: ops outside its delegate: {text}")
    if _PROFILE_RUNS[0] > 0:
        model, size = result.name.split("/")
        try:
            figures = profile(model, size, _PROFILE_RUNS[0])
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            result.details["profile_error"] = str(exc)
            lines.append(f"  per-op profile failed: {exc}")
        else:
            result.details["profile"] = figures
            lines.append(render_profile(figures))
            lines.append(_achieved(result, figures["roofline"]))
    if _AWAY_RUNS[0] > 0:
        lines.append(profile_away(result, _AWAY_RUNS[0]))
    return "\n".join(lines)


# --- after time away, op by op ----------------------------------------------------------------


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


def profile_away(result: harness.BenchmarkResult, runs: int, top: int = 5) -> str:
    """--profile-away: the CPU delegate's kernels (ET_CPU_PROFILE, fresh processes) and, unless
    left out, ONNX Runtime's nodes (its profiler) back to back and after time away; the totals
    and the ops that added the most, into `result.details["profile_away"]` too."""
    model, size = result.name.split("/")
    sides: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    try:
        # Only the ops: no roofline, so no GEMM peak to measure.
        ours = [profiled_ops(model, size, runs, away=a)[0] for a in (False, True)]
        sides[BASELINE] = _away_side(*[[(op.node, op.mean_us) for op in ops] for ops in ours])
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        errors[BASELINE] = str(exc)
    if ONNXRUNTIME in _PEERS:
        net, inputs = zoo.create(model, size)
        try:
            peer = [
                onnxruntime_peer.profile_nodes(net, inputs, runs, away=a) for a in (False, True)
            ]
            sides[ONNXRUNTIME] = _away_side(
                *[[(n["node"], n["us"]) for n in p["nodes"]] for p in peer]
            )
        except RuntimeError as exc:
            errors[ONNXRUNTIME] = str(exc)
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


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] == _PROFILE_CHILD_FLAG:
        model, size, runs, mode = arguments[1:5]
        return _profile_child(model, size, int(runs), away=mode == "away")
    parser = harness.build_parser(__doc__ or "")
    parser.add_argument("--size", default="full", choices=zoo.SIZES, help="zoo size (full)")
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
        "--variant-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="also time the CPU delegate initialized with this environment variable set (e.g. "
        "ET_CPU_VECTOR_ACTIVATIONS=0), side by side with the others; repeat for more variants",
    )
    parser.add_argument(
        "--no-onnxruntime",
        action="store_true",
        help="leave ONNX Runtime out (it is timed beside XNNPACK by default)",
    )
    args = parser.parse_args(arguments)
    _PEERS[:] = [] if args.no_onnxruntime else [ONNXRUNTIME]
    try:
        _VARIANT_ENV[:] = [parse_variant_env(text) for text in args.variant_env]
    except ValueError as exc:
        parser.error(str(exc))
    _SIZE[0] = args.size
    if (args.profile or args.profile_away) and args.profile_runs < 1:
        parser.error(f"--profile-runs must be at least 1, got {args.profile_runs}")
    _PROFILE_RUNS[0] = args.profile_runs if args.profile else 0
    _AWAY_RUNS[0] = args.profile_runs if args.profile_away else 0
    return harness.run_main(args, benchmarks, after_each=summary)


if __name__ == "__main__":
    raise SystemExit(main())
