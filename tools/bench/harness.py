"""The one benchmark harness every issue's benchmark extends.

These machines are shared and noisy (2 cores, several users), so a figure is only meaningful next to
its comparison measured in the same run. The harness therefore:

- times the compared variants *interleaved* (round r runs every variant once, in a rotating order),
  and reports per-variant medians and the ratio of each median to a named baseline variant;
- settles before each timed call (``--no-settle`` turns it off): waits (at most 50 ms) until the
  process's other threads are idle, then makes one untimed call. Thread pools spin after their work
  (libgomp's, behind eager PyTorch, kept 1.5 cores busy for ~10 ms here), so without it a variant
  would be timed against its predecessor's spinning threads; the untimed call then lets every
  variant start warm (caches, its own threads awake) after that pause alike;
- collects garbage (``gc.collect()``) before every timed call, in both regimes. With torch and
  three runtimes loaded that takes ~190 ms, so every timed call comes after time away, and what
  slows a call is that time, not what ran in between (2026-12-06, quiet, MobileNetV3-style on the
  CPU delegate, ms: right after its previous call 1.01-1.09, after a 48 MB memory scrub 1.15,
  after a 40 ms busy loop or sleep 1.63-1.66, after ``gc.collect()`` 1.91; XNNPACK 1.34 / 1.85
  and ONNX Runtime 1.33 / 2.08 right after / 40 ms after): other tenants of the shared L3 evict
  the working set meanwhile. The settled regime's one untimed call recovers part of it (1.43
  after the collection; after two calls 1.10). Freezing the collector after setup instead
  (``gc.freeze()``, tried) shortens the gaps, but then eager PyTorch's spinning OpenMP team runs
  into the next variant's call (alternating: each runtime 1.2-1.8x slower, maxima up to 3x), so
  it stays;
- measures peak memory of each variant in its own fresh subprocess, so one variant's allocations
  never inflate another's: the peak RSS of the process (``VmHWM``; ``ru_maxrss`` where the peak
  cannot be reset) and the peak over the RSS after imports ("+import": the kernel's high-water mark
  is reset once the factory's module is imported, so importing torch does not hide the variant);
- times ExecuTorch programs through ``executorch_runner``: the outputs are the runtime's own
  buffers (``forward(..., clone_outputs=False)``), as ONNX Runtime's runner returns its own. The
  Python bindings' default clone copies large outputs on torch's OpenMP team, whose threads then
  spin for milliseconds on the other core, into the next timed call (a Llama prefill's 128 x 8000
  logits: 16.6 vs 13.6 ms for the same program). ``--clone-outputs`` times the default instead;
- times wall-clock by default; ``Benchmark(clock="cpu")`` times CPU instead: this process's plus
  that of the child processes a call waited for (a variant that runs a tool as a subprocess is
  timed with the tool's start-up, and a neighbour's load does not count as the variant's time);
- records how long each variant's factory took (for lowering benchmarks: the lowering time);
- notes the background load (``os.getloadavg`` before and after), so a reader can discount a noisy
  run;
- prints a text table, and with ``--json FILE`` (``-`` for stdout) writes the same data as JSON.

API (a benchmark script is a few lines)::

    from tools.bench import harness

    def make_eager(size: int) -> harness.Runner:      # module-level factory: setup happens here
        model, x = build(size)
        return lambda: model(x)                       # the runner: one timed call

    def benchmarks() -> list[harness.Benchmark]:
        return [
            harness.Benchmark(
                name="mlp",
                baseline="eager",
                variants=[
                    harness.Variant("eager", make_eager, {"size": 64}),
                    harness.Variant("other", make_other, {"size": 64}),
                ],
            )
        ]

    if __name__ == "__main__":
        raise SystemExit(harness.main(benchmarks, description="What this measures."))

Contract:

- ``Variant.factory`` is a module-level function (it is re-imported by name in the memory
  subprocess; a factory defined in the ``__main__`` script is loaded from that script's file). It
  takes ``Variant.kwargs`` (JSON-serialisable) and returns a zero-argument runner. Setup work
  (export, lowering, loading) belongs in the factory; the runner does only the work to time.
- A runner may return anything; the harness drops the result only after the timer stopped, so
  freeing outputs is never counted.
- ``Benchmark.baseline`` names one of its variants; ratios are
  ``median(variant) / median(baseline)`` (so 0.5 means twice as fast as the baseline).
- Slow variants do not stall a run: a variant leaves the rotation once it has ``min_repeats``
  samples and has used up ``budget_s`` seconds of timed calls; its median is over the samples taken.
- ``main(benchmarks, argv)`` parses the common options (``--repeats``, ``--warmup``,
  ``--budget``, ``--only``, ``--no-memory``, ``--json``, ``--no-settle``, ``--clone-outputs``,
  ``--background-load N``:
  N busy processes while timing, to measure how each variant degrades on a shared machine), runs
  and prints, and returns the process exit code: 0 when every variant ran, 1 when any variant
  failed (its error is shown in the table instead of figures). A script with options of its own
  adds them to ``build_parser()`` and calls ``run_main(args, benchmarks, after_each)``;
  ``after_each(result)`` returns text printed under the table and may fill ``result.details``
  (JSON-serialisable), which goes into the JSON document.
- ``run_benchmark(benchmark, options)`` returns a ``BenchmarkResult``; ``render_text`` and
  ``to_json`` turn results into the table and the JSON document for callers with their own CLI.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

Runner = Callable[[], object]
Factory = Callable[..., Runner]

_CHILD_FLAG = "--harness-memory-child"


def _cpu_seconds() -> float:
    """CPU time of this process plus that of every child process it has waited for."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


# What a timed call is measured in: wall-clock time, or CPU time (this process's and its waited
# children's) for tools whose cost on a shared machine is what matters.
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": _cpu_seconds}


@dataclass(frozen=True)
class Variant:
    """One way of doing the benchmarked work: a name, a factory and the factory's arguments."""

    name: str
    factory: Factory
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Benchmark:
    """Variants compared side by side, with ratios against the variant named ``baseline``."""

    name: str
    variants: Sequence[Variant]
    baseline: str
    notes: str = ""
    clock: str = "wall"  # or "cpu": see CLOCKS

    def __post_init__(self) -> None:
        if self.clock not in CLOCKS:
            known = ", ".join(CLOCKS)
            raise ValueError(f"benchmark {self.name!r}: clock {self.clock!r} is not one of {known}")
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"benchmark {self.name!r}: duplicate variant names in {names}")
        if self.baseline not in names:
            raise ValueError(
                f"benchmark {self.name!r}: baseline {self.baseline!r} is not one of {names}"
            )


@dataclass(frozen=True)
class Options:
    """How hard to measure. Defaults suit a model that runs in milliseconds to a few seconds."""

    repeats: int = 15
    warmup: int = 2
    min_repeats: int = 3
    budget_s: float = 30.0
    memory: bool = True
    memory_timeout_s: float = 600.0
    settle: bool = True  # quiet threads + one untimed call before every timed call


@dataclass
class VariantResult:
    """Figures for one variant; ``error`` is set (and figures are None) when it failed."""

    name: str
    setup_s: float | None = None
    samples_ms: list[float] = field(default_factory=list)
    median_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    ratio_to_baseline: float | None = None
    peak_rss_mib: float | None = None
    peak_rss_over_import_mib: float | None = None
    memory_error: str | None = None
    error: str | None = None


@dataclass
class BenchmarkResult:
    name: str
    baseline: str
    notes: str
    variants: list[VariantResult]
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    wall_s: float
    clock: str = "wall"
    # Figures a benchmark script derives beyond the timings (``after_each`` may add them, e.g. how
    # much of a model was delegated); written with the JSON.
    details: dict[str, Any] = field(default_factory=dict)


# --- factories by reference (for the memory subprocess) -------------------------------------------


def factory_reference(factory: Factory) -> dict[str, str]:
    """How a child process finds ``factory`` again: by module name, or by file for ``__main__``."""
    module_name = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", "")
    if not module_name or "<locals>" in qualname or "<lambda>" in qualname:
        raise ValueError(f"factory {factory!r} must be a module-level function")
    if module_name == "__main__":
        main_file = getattr(sys.modules["__main__"], "__file__", None)
        if not main_file:
            raise ValueError(f"factory {qualname} lives in a __main__ without a file")
        return {"file": os.path.abspath(main_file), "qualname": qualname}
    return {"module": module_name, "qualname": qualname}


def resolve_factory(reference: Mapping[str, str]) -> Factory:
    """The inverse of ``factory_reference``."""
    if "module" in reference:
        target: Any = importlib.import_module(reference["module"])
    else:
        # Not named __main__, so the script's `if __name__ == "__main__"` block does not run.
        spec = importlib.util.spec_from_file_location("_harness_bench_script", reference["file"])
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load benchmark script {reference['file']}")
        target = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = target
        spec.loader.exec_module(target)
    for part in reference["qualname"].split("."):
        target = getattr(target, part)
    return target


def _maxrss_mib() -> float:
    # Linux reports ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _proc_status_mib(field_name: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """Resets the kernel's high-water mark to the current RSS (Linux >= 4.0: clear_refs "5"), so
    the peak measured next belongs to the variant, not to importing torch."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _memory_child(payload: str) -> int:
    """Runs in a fresh interpreter: set one variant up, run it, print its peak RSS as JSON."""
    request = json.loads(payload)
    factory = resolve_factory(request["factory"])
    gc.collect()
    resettable = _reset_peak_rss()
    after_import = (_proc_status_mib("VmRSS") if resettable else None) or _maxrss_mib()
    runner = factory(**request["kwargs"])
    result = None
    for _ in range(max(1, int(request["calls"]))):
        result = runner()
    del result
    peak = (_proc_status_mib("VmHWM") if resettable else None) or _maxrss_mib()
    print(json.dumps({"peak_rss_mib": peak, "after_import_mib": after_import}))
    return 0


def measure_peak_memory(
    variant: Variant, calls: int = 2, timeout_s: float = 600.0
) -> VariantResult:
    """Peak RSS of a fresh process that sets ``variant`` up and calls its runner ``calls`` times."""
    out = VariantResult(name=variant.name)
    payload = json.dumps(
        {
            "factory": factory_reference(variant.factory),
            "kwargs": dict(variant.kwargs),
            "calls": calls,
        }
    )
    env = dict(os.environ)
    # The child must import what the parent imports (Bazel sets sys.path in a launcher stub).
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tools.bench.harness", _CHILD_FLAG, payload],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        out.memory_error = f"memory subprocess timed out after {timeout_s:.0f} s"
        return out
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        out.memory_error = f"memory subprocess exited {proc.returncode}: {tail}"
        return out
    figures = json.loads(lines[-1])
    out.peak_rss_mib = figures["peak_rss_mib"]
    out.peak_rss_over_import_mib = figures["peak_rss_mib"] - figures["after_import_mib"]
    return out


# --- timing ---------------------------------------------------------------------------------------


def _short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:160]


def run_benchmark(
    benchmark: Benchmark,
    options: Options = Options(),  # frozen, so safe as a default
    progress: Callable[[str], None] | None = None,
) -> BenchmarkResult:
    """Set every variant up, time them interleaved, then measure memory one subprocess each."""
    say = progress or (lambda _msg: None)
    started = time.perf_counter()
    load_before = os.getloadavg()
    results = {v.name: VariantResult(name=v.name) for v in benchmark.variants}
    runners: dict[str, Runner] = {}

    for variant in benchmark.variants:
        say(f"[{benchmark.name}] setting up {variant.name}")
        t0 = time.perf_counter()
        try:
            runner = variant.factory(**variant.kwargs)
            # Setup time is the factory's alone (e.g. export + lowering), without warm-up calls.
            results[variant.name].setup_s = time.perf_counter() - t0
            for _ in range(options.warmup):
                runner()
        except Exception as exc:  # a failed variant is reported, the others still run
            results[variant.name].error = _short_error(exc)
            say(f"[{benchmark.name}] {variant.name} failed: {_short_error(exc)}")
            if os.environ.get("HARNESS_TRACEBACK"):
                traceback.print_exc()
            continue
        runners[variant.name] = runner

    clock = CLOCKS[benchmark.clock]
    spent = dict.fromkeys(runners, 0.0)
    active = list(runners)
    keep_alive: object = None
    for round_index in range(options.repeats):
        if not active:
            break
        say(f"[{benchmark.name}] round {round_index + 1}/{options.repeats}")
        shift = round_index % len(active)
        for name in active[shift:] + active[:shift]:
            gc.collect()
            try:
                if options.settle:
                    wait_until_threads_idle()
                    runners[name]()
                t0 = clock()
                keep_alive = runners[name]()
            except Exception as exc:
                results[name].error = _short_error(exc)
                spent[name] = float("inf")
                continue
            elapsed = clock() - t0
            keep_alive = None
            spent[name] += elapsed
            results[name].samples_ms.append(elapsed * 1e3)
        active = [
            n
            for n in active
            if results[n].error is None
            and not (
                len(results[n].samples_ms) >= options.min_repeats and spent[n] >= options.budget_s
            )
        ]
    del keep_alive
    runners.clear()
    gc.collect()

    for r in results.values():
        if r.samples_ms and r.error is None:
            r.median_ms = statistics.median(r.samples_ms)
            r.min_ms = min(r.samples_ms)
            r.max_ms = max(r.samples_ms)
    base = results[benchmark.baseline].median_ms
    for r in results.values():
        if r.median_ms is not None and base:
            r.ratio_to_baseline = r.median_ms / base

    if options.memory:
        for variant in benchmark.variants:
            if results[variant.name].error is not None:
                continue
            say(f"[{benchmark.name}] peak memory of {variant.name} (fresh process)")
            mem = measure_peak_memory(variant, timeout_s=options.memory_timeout_s)
            results[variant.name].peak_rss_mib = mem.peak_rss_mib
            results[variant.name].peak_rss_over_import_mib = mem.peak_rss_over_import_mib
            results[variant.name].memory_error = mem.memory_error

    return BenchmarkResult(
        name=benchmark.name,
        baseline=benchmark.baseline,
        notes=benchmark.notes,
        variants=[results[v.name] for v in benchmark.variants],
        load_before=load_before,
        load_after=os.getloadavg(),
        wall_s=time.perf_counter() - started,
        clock=benchmark.clock,
    )


# --- rendering ------------------------------------------------------------------------------------


def _fmt(value: float | None, spec: str) -> str:
    if value is None:
        return "-".rjust(int(spec.split(".")[0]))  # keep the column aligned
    return format(value, spec)


def render_text(results: Sequence[BenchmarkResult], environment: bool = True) -> str:
    """A fixed-width table per benchmark, with the load note and any errors underneath; first a
    line describing the environment unless ``environment`` is False."""
    lines: list[str] = [_environment_line()] if environment else []
    header = (
        f"{'variant':<22} {'median ms':>11} {'min ms':>10} {'max ms':>10} {'n':>3} "
        f"{'x baseline':>10} {'setup s':>8} {'peak MiB':>9} {'+import MiB':>11}"
    )
    for res in results:
        lines.append("")
        clock = "; times are CPU time" if res.clock == "cpu" else ""
        lines.append(f"== {res.name}  (baseline: {res.baseline}{clock}; wall {res.wall_s:.1f} s)")
        if res.notes:
            lines.append(f"   {res.notes}")
        lines.append(header)
        lines.append("-" * len(header))
        problems: list[str] = []
        for v in res.variants:
            lines.append(
                f"{v.name:<22} {_fmt(v.median_ms, '11.3f')} {_fmt(v.min_ms, '10.3f')} "
                f"{_fmt(v.max_ms, '10.3f')} {len(v.samples_ms):>3} "
                f"{_fmt(v.ratio_to_baseline, '10.3f')} {_fmt(v.setup_s, '8.2f')} "
                f"{_fmt(v.peak_rss_mib, '9.0f')} {_fmt(v.peak_rss_over_import_mib, '11.0f')}"
            )
            if v.error:
                problems.append(f"   {v.name}: FAILED: {v.error}")
            if v.memory_error:
                problems.append(f"   {v.name}: memory not measured: {v.memory_error}")
        lines.extend(problems)
        lines.append(
            "   load average (1/5/15 min) before: "
            + " ".join(f"{x:.2f}" for x in res.load_before)
            + ", after: "
            + " ".join(f"{x:.2f}" for x in res.load_after)
            + f" on {os.cpu_count()} cores"
        )
    return "\n".join(lines)


def _environment() -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    torch_module = sys.modules.get("torch")
    if torch_module is not None:
        env["torch"] = getattr(torch_module, "__version__", "?")
        env["torch_threads"] = torch_module.get_num_threads()
    env["executorch_outputs"] = "cloned" if clone_outputs() else "own"
    return env


def _environment_line() -> str:
    return "# " + ", ".join(f"{k}={v}" for k, v in _environment().items())


def to_json(results: Sequence[BenchmarkResult]) -> dict[str, Any]:
    """The machine-readable report: environment plus every benchmark's figures and samples."""
    return {"environment": _environment(), "benchmarks": [asdict(r) for r in results]}


# --- command line ---------------------------------------------------------------------------------


def build_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=description,
        epilog="Timings are interleaved across variants; ratios are median(variant) / "
        "median(baseline) from the same run. Exit codes: 0 all variants ran, 1 a variant "
        "failed, 2 bad arguments.",
    )
    defaults = Options()
    parser.add_argument("--repeats", type=int, default=defaults.repeats, help="timed rounds")
    parser.add_argument(
        "--warmup", type=int, default=defaults.warmup, help="untimed calls per variant"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=defaults.budget_s,
        help="seconds of timed calls after which a variant leaves the rotation (once it has "
        f"{defaults.min_repeats} samples)",
    )
    parser.add_argument(
        "--only", action="append", default=[], help="run only benchmarks with this name (repeat)"
    )
    parser.add_argument(
        "--no-memory", action="store_true", help="skip the per-variant peak-memory subprocesses"
    )
    parser.add_argument(
        "--json", metavar="FILE", help="also write the results as JSON ('-': stdout)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument(
        "--no-settle",
        action="store_true",
        help="time each call right after the previous variant's, without waiting for its "
        "threads to go idle and without the untimed call before it",
    )
    parser.add_argument(
        "--clone-outputs",
        action="store_true",
        help="time ExecuTorch programs with the Python bindings' default output clone (copied on "
        "torch's OpenMP threads, which then spin into the next call); default: the runtime's "
        "own output buffers, as ONNX Runtime returns",
    )
    parser.add_argument(
        "--background-load",
        type=int,
        default=0,
        metavar="N",
        help="run N busy-looping processes while timing (what a shared machine does to the "
        "variants); default 0",
    )
    return parser


def _other_threads_cpu_ns() -> int | None:
    """CPU time (ns) the process's threads other than the calling one have used; None without
    Linux's per-thread schedstat."""
    me = str(threading.get_native_id())
    total = 0
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tids:
        if tid == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as stat:
                total += int(stat.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile, or no schedstat
    return total


def wait_until_threads_idle(timeout_s: float = 0.05, poll_s: float = 0.0005) -> float:
    """Waits until the process's other threads used < 10% of a core over one poll interval (or
    `timeout_s` passed); returns the seconds waited."""
    start = time.perf_counter()
    before = _other_threads_cpu_ns()
    if before is None:
        return 0.0
    while time.perf_counter() - start < timeout_s:
        time.sleep(poll_s)
        now = _other_threads_cpu_ns()
        if now is None or now - before < poll_s * 1e9 * 0.1:
            break
        before = now
    return time.perf_counter() - start


CLONE_OUTPUTS_ENV = "HARNESS_CLONE_OUTPUTS"


def executorch_runner(module: Any, args: Sequence[Any], method: str = "forward") -> Runner:
    """The timed call of a loaded ExecuTorch program (a pybindings module): `method` on `args`,
    returning the runtime's own output buffers (valid until the next call), or clones of them when
    --clone-outputs (HARNESS_CLONE_OUTPUTS=1, inherited by the memory subprocesses) is set."""
    inputs = list(args)
    clone = clone_outputs()
    return lambda: module.run_method(method, inputs, clone_outputs=clone)


def clone_outputs() -> bool:
    """Whether timed ExecuTorch calls clone their outputs (--clone-outputs)."""
    return os.environ.get(CLONE_OUTPUTS_ENV) == "1"


@contextmanager
def environment(env: Mapping[str, str | None]) -> Iterator[None]:
    """`env`'s variables set (None: unset) for the duration of the block, then restored."""
    saved = {name: os.environ.get(name) for name in env}
    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


@contextmanager
def background_load(processes: int) -> Iterator[None]:
    """`processes` busy-looping Python processes for the duration of the block."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def main(
    benchmarks: Callable[[], Sequence[Benchmark]],
    argv: Sequence[str] | None = None,
    description: str = "Benchmark",
) -> int:
    """Parse the common options, run the selected benchmarks, print the table; return exit code."""
    return run_main(build_parser(description).parse_args(argv), benchmarks)


def run_main(
    args: argparse.Namespace,
    benchmarks: Callable[[], Sequence[Benchmark]],
    after_each: Callable[[BenchmarkResult], str] | None = None,
) -> int:
    """`main` for a script that parsed `build_parser`'s options plus its own: runs the selected
    benchmarks, prints each table (then `after_each(result)`, e.g. derived figures), writes the
    JSON; returns the exit code."""
    if args.clone_outputs:
        os.environ[CLONE_OUTPUTS_ENV] = "1"
    options = Options(
        repeats=args.repeats,
        warmup=args.warmup,
        budget_s=args.budget,
        memory=not args.no_memory,
        settle=not args.no_settle,
    )

    def progress(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    selected = [b for b in benchmarks() if not args.only or b.name in args.only]
    if not selected:
        print(f"error: no benchmark named {args.only}", file=sys.stderr)
        return 2
    # Tables go out as each benchmark finishes (a full run can take many minutes); with --json -
    # stdout carries only the JSON document, so the tables go to stderr.
    table_stream = sys.stderr if args.json == "-" else sys.stdout
    print(_environment_line(), file=table_stream, flush=True)
    results: list[BenchmarkResult] = []
    if args.background_load:
        print(f"# background load: {args.background_load} busy processes", file=table_stream)
    for bench in selected:
        with background_load(args.background_load):
            results.append(run_benchmark(bench, options, progress))
        print(render_text(results[-1:], environment=False), file=table_stream, flush=True)
        if after_each is not None:
            print(after_each(results[-1]), file=table_stream, flush=True)
    if args.json == "-":
        print(json.dumps(to_json(results), indent=2))
    elif args.json:
        path = args.json
        if not os.path.isabs(path) and os.environ.get("BUILD_WORKING_DIRECTORY"):
            path = os.path.join(os.environ["BUILD_WORKING_DIRECTORY"], path)
        with open(path, "w") as f:
            json.dump(to_json(results), f, indent=2)
    failed = any(v.error for r in results for v in r.variants)
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == _CHILD_FLAG:
        sys.exit(_memory_child(sys.argv[2]))
    print(
        "harness.py is a library; run a benchmark script that calls harness.main", file=sys.stderr
    )
    sys.exit(2)
