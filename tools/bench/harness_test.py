"""Tests of the benchmark harness: interleaved timing, ratios, per-variant memory, failures."""

import json
import subprocess
import sys
import time

import pytest

from tools.bench import harness


def make_sleeper(ms: float) -> harness.Runner:
    return lambda: time.sleep(ms / 1e3)


def make_allocator(mib: int) -> harness.Runner:
    def run() -> int:
        block = bytearray(mib * 1024 * 1024)
        block[::4096] = b"\x01" * len(block[::4096])  # touch every page so it counts in RSS
        return len(block)

    return run


def make_broken() -> harness.Runner:
    raise RuntimeError("cannot set this variant up")


def _quick(memory: bool = False) -> harness.Options:
    return harness.Options(repeats=5, warmup=1, memory=memory)


def test_ratios_follow_medians_against_the_named_baseline() -> None:
    bench = harness.Benchmark(
        name="sleep",
        baseline="slow",
        variants=[
            harness.Variant("slow", make_sleeper, {"ms": 20}),
            harness.Variant("fast", make_sleeper, {"ms": 5}),
        ],
    )
    result = harness.run_benchmark(bench, _quick())
    slow, fast = result.variants
    assert slow.ratio_to_baseline == pytest.approx(1.0)
    assert len(slow.samples_ms) == len(fast.samples_ms) == 5
    assert fast.median_ms is not None and slow.median_ms is not None
    assert fast.median_ms < slow.median_ms
    assert fast.ratio_to_baseline is not None and fast.ratio_to_baseline < 0.8
    assert len(result.load_before) == 3


def test_budget_takes_a_slow_variant_out_of_the_rotation() -> None:
    bench = harness.Benchmark(
        name="budget",
        baseline="quick",
        variants=[
            harness.Variant("quick", make_sleeper, {"ms": 1}),
            harness.Variant("slow", make_sleeper, {"ms": 30}),
        ],
    )
    options = harness.Options(repeats=10, warmup=0, min_repeats=3, budget_s=0.05, memory=False)
    result = harness.run_benchmark(bench, options)
    quick, slow = result.variants
    assert len(slow.samples_ms) == 3
    assert len(quick.samples_ms) > 3


def test_peak_memory_is_measured_per_variant_in_a_fresh_process() -> None:
    small = harness.measure_peak_memory(harness.Variant("small", make_allocator, {"mib": 1}))
    large = harness.measure_peak_memory(harness.Variant("large", make_allocator, {"mib": 120}))
    assert small.memory_error is None, small.memory_error
    assert large.memory_error is None, large.memory_error
    assert small.peak_rss_over_import_mib is not None
    assert large.peak_rss_over_import_mib is not None
    assert large.peak_rss_over_import_mib - small.peak_rss_over_import_mib > 100


def test_a_failing_variant_is_reported_and_the_others_still_run() -> None:
    bench = harness.Benchmark(
        name="mixed",
        baseline="ok",
        variants=[
            harness.Variant("ok", make_sleeper, {"ms": 1}),
            harness.Variant("bad", make_broken),
        ],
    )
    result = harness.run_benchmark(bench, _quick())
    ok, bad = result.variants
    assert ok.median_ms is not None
    assert bad.error == "RuntimeError: cannot set this variant up"
    assert "bad: FAILED: RuntimeError: cannot set this variant up" in harness.render_text([result])


def test_main_prints_a_table_writes_json_and_signals_failure(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    def benchmarks() -> list[harness.Benchmark]:
        return [
            harness.Benchmark(
                name="one",
                baseline="a",
                variants=[
                    harness.Variant("a", make_sleeper, {"ms": 2}),
                    harness.Variant("b", make_broken),
                ],
            )
        ]

    out = tmp_path / "r.json"
    code = harness.main(
        benchmarks, ["--repeats", "3", "--no-memory", "--quiet", "--json", str(out)]
    )
    assert code == 1
    table = capsys.readouterr().out
    assert "== one  (baseline: a;" in table
    assert "load average" in table
    data = json.loads(out.read_text())
    assert [v["name"] for v in data["benchmarks"][0]["variants"]] == ["a", "b"]
    assert data["benchmarks"][0]["variants"][0]["ratio_to_baseline"] == pytest.approx(1.0)


def test_details_from_after_each_reach_the_json(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    def benchmarks() -> list[harness.Benchmark]:
        variants = [harness.Variant("a", make_sleeper, {"ms": 1})]
        return [harness.Benchmark(name="one", baseline="a", variants=variants)]

    def after_each(result: harness.BenchmarkResult) -> str:
        result.details["delegated"] = {"nodes": 3, "of": 4}
        return "  delegated 3/4"

    out = tmp_path / "r.json"
    args = harness.build_parser("t").parse_args(
        ["--repeats", "2", "--no-memory", "--quiet", "--json", str(out)]
    )
    assert harness.run_main(args, benchmarks, after_each=after_each) == 0
    assert "  delegated 3/4" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["benchmarks"][0]["details"] == {"delegated": {"nodes": 3, "of": 4}}


def make_child_spinner(ms: float) -> harness.Runner:
    """A call whose CPU is spent in a child process (as a benchmarked command-line tool's is)."""
    spin = f"import time\nend = time.process_time() + {ms / 1e3}\n"
    code = spin + "while time.process_time() < end:\n    pass\n"
    return lambda: subprocess.run([sys.executable, "-c", code], check=True)


def test_cpu_clock_counts_waited_children_and_not_sleep() -> None:
    bench = harness.Benchmark(
        name="cpu",
        baseline="child",
        clock="cpu",
        variants=[
            harness.Variant("child", make_child_spinner, {"ms": 150}),
            harness.Variant("sleep", make_sleeper, {"ms": 150}),
        ],
    )
    result = harness.run_benchmark(bench, harness.Options(repeats=3, warmup=0, memory=False))
    child, sleep = result.variants
    assert child.median_ms is not None and sleep.median_ms is not None
    assert child.median_ms >= 150  # the child's spin counts (its interpreter start-up too)
    assert sleep.median_ms < 50  # sleeping costs no CPU
    assert "times are CPU time" in harness.render_text([result])


def test_bad_benchmark_definitions_are_rejected() -> None:
    with pytest.raises(ValueError, match="baseline 'zzz' is not one of"):
        harness.Benchmark("x", [harness.Variant("a", make_sleeper)], baseline="zzz")
    with pytest.raises(ValueError, match="clock 'gpu' is not one of wall, cpu"):
        harness.Benchmark("x", [harness.Variant("a", make_sleeper)], baseline="a", clock="gpu")
    with pytest.raises(ValueError, match="module-level function"):
        harness.factory_reference(lambda: lambda: None)


def test_background_load_runs_busy_processes_only_inside_the_block() -> None:
    """--background-load N: N processes burn CPU while timing, and none outlives the run."""
    with harness.background_load(2):
        start = time.process_time()
        children = _child_pids()
        assert len(children) >= 2
    time.sleep(0.1)
    assert not (set(children) & set(_child_pids()))
    assert time.process_time() - start < 1.0  # the load is in the children, not in us


def _child_pids() -> list[int]:
    import os

    me = str(os.getpid())
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me and fields[0] != "Z":
                pids.append(int(entry))
    return pids


def make_counter(calls: list[int]) -> harness.Runner:
    return lambda: calls.append(1)


def test_settling_adds_one_untimed_call_before_each_timed_call() -> None:
    for settle, expected in ((True, 1 + 2 * 4), (False, 1 + 4)):
        calls: list[int] = []
        bench = harness.Benchmark(
            name="count",
            baseline="c",
            variants=[harness.Variant("c", make_counter, {"calls": calls})],
        )
        options = harness.Options(repeats=4, warmup=1, memory=False, settle=settle)
        result = harness.run_benchmark(bench, options)
        assert len(result.variants[0].samples_ms) == 4
        assert len(calls) == expected, (settle, len(calls))


def test_wait_until_threads_idle_outwaits_a_spinning_thread() -> None:
    import threading

    # Bounds far from the figures a quiet machine gives (~1 ms, ~300 ms) so that a loaded machine,
    # whose scheduler delays sleeps and deschedules the spinner, cannot fail the test: polls of
    # 20 ms see a spinner that gets even a fifth of a core as busy.
    assert harness.wait_until_threads_idle(timeout_s=2.0, poll_s=0.02) < 1.0  # nothing else runs

    def spin(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    spinner = threading.Thread(target=spin, args=(0.3,))
    spinner.start()
    waited = harness.wait_until_threads_idle(timeout_s=5.0, poll_s=0.02)
    spinner.join()
    assert waited >= 0.15, waited  # it waited for the spinner, not just one poll
    assert waited < 5.0, waited  # and stopped before the timeout


def test_executorch_runner_returns_the_runtimes_buffers_unless_cloning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A real program on ExecuTorch's runtime: by default the runner's output is the runtime's own
    buffer (the next call overwrites it); with --clone-outputs each call returns its own copy."""
    import torch
    from executorch.exir import to_edge
    from executorch.extension.pybindings import portable_lib

    class Double(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2.0

    exported = torch.export.export(Double(), (torch.zeros(4),))
    pte = bytes(to_edge(exported).to_executorch().buffer)  # the module reads it: keep it alive
    module = portable_lib._load_for_executorch_from_buffer(pte)
    ones, threes = torch.ones(4), torch.full((4,), 3.0)
    for cloned in (False, True):
        monkeypatch.setenv(harness.CLONE_OUTPUTS_ENV, "1" if cloned else "0")
        first = harness.executorch_runner(module, [ones])()
        assert isinstance(first, list)
        kept = first[0].clone()
        torch.testing.assert_close(kept, ones * 2.0)
        harness.executorch_runner(module, [threes])()
        # The runtime's buffer now holds the second call's output; a clone still holds the first.
        torch.testing.assert_close(first[0], kept if cloned else threes * 2.0)
