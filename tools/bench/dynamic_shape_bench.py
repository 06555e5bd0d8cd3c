"""Issues 20, 46 and 47's benchmark: programs exported with bounded dynamic dimensions, one `.pte`
per path serving every size, on the CPU delegate vs XNNPACK (which lowers the same dynamic program)
vs eager. Every `.pte` comes from the documented flow, `to_edge_transform_and_lower(...)
.to_executorch()`, nothing else. A Llama-style decoder (tools/bench/zoo_sequence.py) with a
dynamic sequence length (max 512) at 1, 16, 128 and 512 tokens, a small CNN and the zoo's
MobileNetV3-style network (224x224, issue 46) with a dynamic batch (max 16) at 1, 8 and 16: one
table per size, measured interleaved in one run (the shared harness), ratios ("x baseline")
against XNNPACK's dynamic program. At a bound that program cannot run (ExecuTorch 1.5 plans its
batch for 15: batch 16 fails), its column says FAILED with the runtime's error.

The anchor every size has: "xnnpack static", XNNPACK lowered (same flow) from the model exported
with static shapes at exactly the table's size, what an XNNPACK user who needs that size would
ship (one `.pte` per size, running at no other). Under each table, ours / XNNPACK of the timed
medians against both programs: the dynamic one where it ran, the static one at every size
(JSON: `details["ours_over_xnnpack"]`, keyed by variant, None where that program failed).

Then the first call at a new size, reported separately (our delegate compiles a graph for it, its
re-planning cost; XNNPACK reshapes its runtime; the static anchor has no other size, so it is left
out): a fresh module called at another size first (so its own initialization is not counted),
then timed on its first and second call at the table's size. Several fresh modules per path
(--first-call-runs), the paths interleaved; medians, min-max and ours / XNNPACK of the first-call
medians. Beside the wall time, the first call's CPU time on the calling thread (where compiling
happens): a shared machine's load stretches the wall time, much less that.

After each model's last table, memory over many calls (--alternating-calls, default 1000): per
dynamic path, a fresh module called round-robin at every size of the model it can run, its
resident set size (RSS) read after the first round and after the last call; the growth between
them is what the calls leaked or kept.

Exit code: 1 when one of our runs fails (a timed variant, the first call at a new size, the memory
check), or the static XNNPACK anchor or eager does; XNNPACK's dynamic program failing (at batch 16)
is shown as FAILED and kept in the JSON, but is the peer's limit, not the run's failure; 2 for bad
arguments; 0 otherwise.

    ./bazelw run //tools/bench:dynamic_shape_bench -- [--only llama/seq128] [--repeats 10]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch

from tools.bench import harness, zoo
from tools.bench.zoo_sequence import LlamaLike

OURS = "cpu delegate"
XNNPACK = "xnnpack"
XNNPACK_STATIC = "xnnpack static"  # exported with static shapes at the table's size: the anchor
EAGER = "eager"
SEQUENCE_LENGTHS = (1, 16, 128, 512)
BATCHES = (1, 8, 16)
BATCH_MODELS = ("cnn", "mobilenet_v3")
MAX_TOKENS = 512
MAX_BATCH = 16
VOCAB = 256

_KEEP: list[bytes] = []  # the runtime does not own a program's buffer
# (model, path, size) -> the .pte; size None for the dynamic paths' one .pte of every size
_PTE: dict[tuple[str, str, int | None], bytes] = {}
FIRST_CALL_RUNS = 3  # fresh modules per path for the first-call figures (--first-call-runs)
ALTERNATING_CALLS = 1000  # calls per path of the memory check (--alternating-calls)


class SmallCnn(torch.nn.Module):
    """Two convolutions (one strided), ReLU, max pooling, flatten, a linear, on 3x32x32 images."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(64 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv1(x))
        y = torch.max_pool2d(torch.relu(self.conv2(y)), 2)
        return self.fc(y.flatten(1))


def _model(model: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], dict[int, Any]]:
    """The eval model, an export example and its dynamic dimension."""
    torch.manual_seed(0)
    if model == "llama":
        net = LlamaLike(vocab=VOCAB, dim=128, depth=2, heads=4, hidden=256, max_tokens=MAX_TOKENS)
        example = (torch.randint(0, VOCAB, (1, 8)),)
        return net.eval(), example, {1: torch.export.Dim("tokens", min=1, max=MAX_TOKENS)}
    batch = {0: torch.export.Dim("batch", min=1, max=MAX_BATCH)}
    if model == "cnn":
        return SmallCnn().eval(), (torch.randn(2, 3, 32, 32),), batch
    if model == "mobilenet_v3":
        mobile, _ = zoo.create("mobilenet_v3", "full")
        return mobile.eval(), (torch.randn(2, 3, 224, 224),), batch
    raise ValueError(f"unknown model {model!r}")


def inputs_at(model: str, size: int) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(size)
    if model == "llama":
        return (torch.randint(0, VOCAB, (1, size), generator=generator),)
    side = 224 if model == "mobilenet_v3" else 32
    return (torch.randn(size, 3, side, side, generator=generator),)


def lower(model: str, path: str, size: int | None = None) -> bytes:
    """The model's `.pte` for `path`, lowered once per process: for ours and XNNPACK the one
    exported with the dynamic dimension, for XNNPACK_STATIC the one exported with static shapes at
    `size`; fully delegated for ours."""
    static = path == XNNPACK_STATIC
    if static and size is None:
        raise ValueError(f"{model}: {XNNPACK_STATIC} is exported at one size; pass it")
    key = (model, path, size if static else None)
    if key in _PTE:
        return _PTE[key]
    from executorch.exir import to_edge_transform_and_lower

    net, example, shapes = _model(model)
    if static:
        assert size is not None  # checked above; for mypy
        exported = torch.export.export(net, inputs_at(model, size))
    else:
        exported = torch.export.export(net, example, dynamic_shapes=(shapes,))
    if path == OURS:
        from backends.cpu.partition.cpu_partitioner import CpuPartitioner

        partitioner = CpuPartitioner()
        edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
        if partitioner.report.left_out:
            raise RuntimeError(f"{model}: left out of the CPU delegate: {partitioner.report}")
    elif path in (XNNPACK, XNNPACK_STATIC):
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    else:
        raise ValueError(f"unknown path {path!r}")
    _PTE[key] = bytes(edge.to_executorch().buffer)  # the documented flow, no helper
    _KEEP.append(_PTE[key])
    return _PTE[key]


def _load(model: str, path: str, size: int | None = None) -> Any:
    from executorch.extension.pybindings import portable_lib

    from backends.cpu.runtime import loader

    pte = lower(model, path, size)
    loader.load_cpu_backend()
    return portable_lib._load_for_executorch_from_buffer(pte)


def first_call_ms(model: str, path: str, size: int, other: int) -> dict[str, float]:
    """A fresh module called at `other` first, then its first and second call at `size`: wall
    times, and the first call's CPU time on the calling thread."""
    module = _load(model, path)
    module.forward(list(inputs_at(model, other)))
    args = list(inputs_at(model, size))
    cpu_start = time.thread_time()
    start = time.perf_counter()
    module.forward(args)
    first = time.perf_counter() - start
    first_cpu = time.thread_time() - cpu_start
    start = time.perf_counter()
    module.forward(args)
    second = time.perf_counter() - start
    return {"first_ms": first * 1e3, "second_ms": second * 1e3, "first_cpu_ms": first_cpu * 1e3}


def make_program(model: str, path: str, size: int) -> harness.Runner:
    """The timed call of `path`'s program at `size`, as the harness times ExecuTorch programs:
    the runtime's own output buffers unless --clone-outputs."""
    module = _load(model, path, size)
    args = list(inputs_at(model, size))
    module.forward(args)
    return harness.executorch_runner(module, args)


def make_eager(model: str, size: int) -> harness.Runner:
    net, _, _ = _model(model)
    args = inputs_at(model, size)

    def run() -> object:
        with torch.no_grad():
            return net(*args)

    return run


def _sizes() -> list[tuple[str, str, int]]:
    batched = [(model, "batch", b) for model in BATCH_MODELS for b in BATCHES]
    return [("llama", "seq", n) for n in SEQUENCE_LENGTHS] + batched


def _name(model: str, unit: str, size: int) -> str:
    return f"{model}/{unit}{size}"


def _entry(name: str) -> tuple[str, str, int]:
    """(model, unit, size) of the benchmark named `name`."""
    return next(entry for entry in _sizes() if _name(*entry) == name)


def benchmarks() -> list[harness.Benchmark]:
    out = []
    for model, unit, size in _sizes():
        kwargs = {"model": model, "size": size}
        bound = MAX_TOKENS if model == "llama" else MAX_BATCH
        out.append(
            harness.Benchmark(
                name=_name(model, unit, size),
                baseline=XNNPACK,
                variants=[
                    harness.Variant(OURS, make_program, {**kwargs, "path": OURS}),
                    harness.Variant(XNNPACK, make_program, {**kwargs, "path": XNNPACK}),
                    harness.Variant(
                        XNNPACK_STATIC, make_program, {**kwargs, "path": XNNPACK_STATIC}
                    ),
                    harness.Variant(EAGER, make_eager, kwargs),
                ],
                notes=f"ours and xnnpack: one .pte for {unit} 1..{bound}, run at {size}; "
                f"{XNNPACK_STATIC}: exported with static shapes at {unit} {size} (one .pte per "
                f"size); torch threads {torch.get_num_threads()}",
            )
        )
    return out


def first_call_figures(model: str, size: int, other: int, runs: int) -> dict[str, dict[str, Any]]:
    """Per path: the medians, minima and maxima of `runs` first_call_ms, the paths interleaved
    (a shared machine's load then falls on both alike); {"error": ...} for a path that fails."""
    samples: dict[str, list[dict[str, float]]] = {OURS: [], XNNPACK: []}
    errors: dict[str, str] = {}
    for _ in range(runs):
        for path, taken in samples.items():
            if path in errors:
                continue
            try:
                taken.append(first_call_ms(model, path, size, other))
            except Exception as exc:  # e.g. XNNPACK's program at a bound it was not planned for
                errors[path] = str(exc).splitlines()[0][:200]
    figures: dict[str, dict[str, Any]] = {}
    for path, taken in samples.items():
        if path in errors:
            figures[path] = {"error": errors[path]}
            continue
        figures[path] = {"runs": len(taken)}
        for key in ("first_ms", "second_ms", "first_cpu_ms"):
            values = [t[key] for t in taken]
            figures[path][key] = statistics.median(values)
            figures[path][key.replace("_ms", "_min_ms")] = min(values)
            figures[path][key.replace("_ms", "_max_ms")] = max(values)
    return figures


def _rss_mib() -> float:
    """This process's resident set size now (not its peak), from /proc/self/statm."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def alternating_memory(model: str, path: str, calls: int) -> dict[str, Any]:
    """A fresh module of `path` called round-robin at the model's sizes (those it can run) for
    `calls` calls: its RSS after the first round and after the last call, in MiB."""
    sizes = [size for m, _, size in _sizes() if m == model]
    module = _load(model, path)
    runnable, skipped = [], {}
    for size in sizes:
        try:
            module.forward(list(inputs_at(model, size)))
            runnable.append(size)
        except Exception as exc:
            skipped[size] = str(exc).splitlines()[0][:200]
    if not runnable:
        return {"error": f"runs at none of {sizes}", "skipped": skipped}
    args = {size: list(inputs_at(model, size)) for size in runnable}
    rounds = max(1, calls // len(runnable))
    first = _rss_mib()
    for index in range(rounds * len(runnable)):
        module.forward(args[runnable[index % len(runnable)]])
    last = _rss_mib()
    return {
        "sizes": runnable,
        "skipped": skipped,
        "calls": rounds * len(runnable),
        "rss_after_first_round_mib": first,
        "rss_after_last_call_mib": last,
        "growth_mib": last - first,
    }


def memory_summary(model: str, calls: int, details: dict[str, Any]) -> str:
    figures = {path: alternating_memory(model, path, calls) for path in (OURS, XNNPACK)}
    details["memory_alternating_sizes"] = figures
    lines = [f"  memory over {calls} calls alternating sizes (fresh module per path):"]
    for path, f in figures.items():
        if "error" in f:
            lines.append(f"    {path:<14} {f['error']}")
            continue
        skipped = f"; cannot run at {sorted(f['skipped'])}" if f["skipped"] else ""
        lines.append(
            f"    {path:<14} sizes {f['sizes']}: RSS "
            f"{f['rss_after_first_round_mib']:.1f} MiB after the first round, "
            f"{f['rss_after_last_call_mib']:.1f} MiB after call {f['calls']} "
            f"({f['growth_mib']:+.1f} MiB){skipped}"
        )
    return "\n".join(lines)


def ratio_summary(result: harness.BenchmarkResult, unit: str, size: int) -> str:
    """Ours / XNNPACK of the timed medians, against its dynamic program and against the static
    anchor; into `result.details["ours_over_xnnpack"]` (None where a program has no median)."""
    medians = {v.name: v.median_ms for v in result.variants}
    ours = medians[OURS]
    ratios: dict[str, float | None] = {}
    for path in (XNNPACK, XNNPACK_STATIC):
        theirs = medians[path]
        ratios[path] = ours / theirs if ours and theirs else None
    result.details["ours_over_xnnpack"] = ratios

    def text(path: str) -> str:
        ratio = ratios[path]
        return f"{ratio:.3f}x" if ratio is not None else "n/a (no median)"

    return (
        f"  ours / xnnpack at {unit} {size} (timed medians): {text(XNNPACK)} its dynamic program, "
        f"{text(XNNPACK_STATIC)} its static program exported at {size}"
    )


def failures(result: harness.BenchmarkResult) -> list[str]:
    """What fails the run (exit 1) in `result`: a timed variant's error, except XNNPACK's dynamic
    program's (the peer's limit), and ours' first call at a new size or memory check failing
    (read from `details`, which `summary` filled)."""
    out = [
        f"{result.name}: {v.name}: {v.error}"
        for v in result.variants
        if v.error is not None and v.name != XNNPACK
    ]
    first = result.details.get("first_call_at_new_size", {}).get(OURS, {})
    if "error" in first:
        out.append(f"{result.name}: {OURS} first call at a new size: {first['error']}")
    memory = result.details.get("memory_alternating_sizes", {}).get(OURS, {})
    if "error" in memory or memory.get("skipped"):
        why = memory.get("error") or f"cannot run at {sorted(memory['skipped'])}"
        out.append(f"{result.name}: {OURS} memory check: {why}")
    return out


def summary(
    result: harness.BenchmarkResult,
    runs: int = FIRST_CALL_RUNS,
    alternating_calls: int = ALTERNATING_CALLS,
) -> str:
    """The first call at the table's size, per path (not one of the timed calls); after the
    model's last size, the memory over `alternating_calls` calls alternating sizes."""
    model, unit, size = _entry(result.name)
    lines = [ratio_summary(result, unit, size)]
    other = 2 if size != 2 else 3
    figures = first_call_figures(model, size, other, runs)
    result.details["first_call_at_new_size"] = figures
    ok = [f for f in figures.values() if "error" not in f]
    ratio = (
        f"{figures[OURS]['first_ms'] / figures[XNNPACK]['first_ms']:.2f}x"
        if len(ok) == len(figures)
        else "n/a"
    )
    lines.append(
        f"  first call at {unit} {size} after a call at {other} (fresh module, medians of "
        f"{runs} [min-max]); ours / xnnpack first call {ratio}:"
    )
    for path, f in figures.items():
        if "error" in f:
            lines.append(f"    {path:<14} FAILED: {f['error']}")
            continue
        lines.append(
            f"    {path:<14} first {f['first_ms']:9.2f} ms [{f['first_min_ms']:.2f}-"
            f"{f['first_max_ms']:.2f}] (thread cpu {f['first_cpu_ms']:.2f}), second "
            f"{f['second_ms']:9.2f} ms [{f['second_min_ms']:.2f}-{f['second_max_ms']:.2f}]"
        )
    last_size = [s for m, _, s in _sizes() if m == model][-1]
    if alternating_calls > 0 and size == last_size:
        lines.append(memory_summary(model, alternating_calls, result.details))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = harness.build_parser(__doc__ or "")
    parser.epilog = (
        "Timings are interleaved across variants; ratios are median(variant) / median(baseline) "
        "from the same run. Exit codes: 0 our runs, the static XNNPACK anchor and eager ran (a "
        "failure of XNNPACK's dynamic program, e.g. at batch 16, is reported, not counted), 1 "
        "one of them failed, 2 bad arguments."
    )
    parser.add_argument(
        "--first-call-runs",
        type=int,
        default=FIRST_CALL_RUNS,
        help="fresh modules per path for the first call at a new size",
    )
    parser.add_argument(
        "--alternating-calls",
        type=int,
        default=ALTERNATING_CALLS,
        help="calls per path of the memory check after each model's last size (0: skip)",
    )
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.first_call_runs < 1:
        parser.error("--first-call-runs must be at least 1")
    if args.alternating_calls < 0:
        parser.error("--alternating-calls must be at least 0")
    results: list[harness.BenchmarkResult] = []

    def after_each(result: harness.BenchmarkResult) -> str:
        results.append(result)
        return summary(result, runs=args.first_call_runs, alternating_calls=args.alternating_calls)

    code = harness.run_main(args, benchmarks, after_each=after_each)
    if code == 2:  # nothing selected
        return code
    failed = [line for result in results for line in failures(result)]
    for line in failed:
        print(f"failed: {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
