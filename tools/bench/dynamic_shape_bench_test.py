"""Keeps the dynamic-shape benchmark runnable: every size has the three paths, and the CNN at
batch 8 runs end to end with two repeats, first call at a new size reported per path."""

import json
from pathlib import Path

from tools.bench import dynamic_shape_bench


def test_every_size_has_ours_xnnpack_and_eager() -> None:
    names = [bench.name for bench in dynamic_shape_bench.benchmarks()]
    assert names == [
        "llama/seq1",
        "llama/seq16",
        "llama/seq128",
        "llama/seq512",
        "cnn/batch1",
        "cnn/batch8",
        "cnn/batch16",
        "mobilenet_v3/batch1",
        "mobilenet_v3/batch8",
        "mobilenet_v3/batch16",
    ]
    for bench in dynamic_shape_bench.benchmarks():
        assert [v.name for v in bench.variants] == ["cpu delegate", "xnnpack", "eager"]
        assert bench.baseline == "xnnpack"


def test_the_bench_runs_the_cnn_and_reports_the_first_call(tmp_path: Path) -> None:
    out = tmp_path / "dynamic.json"
    args = ["--only", "cnn/batch8", "--repeats", "2", "--warmup", "1", "--no-memory", "--quiet"]
    args += ["--first-call-runs", "2", "--alternating-calls", "0"]
    assert dynamic_shape_bench.main([*args, "--json", str(out)]) == 0
    (bench,) = json.loads(out.read_text())["benchmarks"]
    assert all(v["error"] is None and v["median_ms"] > 0 for v in bench["variants"])
    first = bench["details"]["first_call_at_new_size"]
    assert set(first) == {"cpu delegate", "xnnpack"}
    for f in first.values():
        assert f["runs"] == 2
        assert 0 < f["first_min_ms"] <= f["first_ms"] <= f["first_max_ms"]
        assert 0 < f["second_min_ms"] <= f["second_ms"] <= f["second_max_ms"]
        assert 0 < f["first_cpu_min_ms"] <= f["first_cpu_ms"] <= f["first_cpu_max_ms"]


def test_at_the_batch_bound_ours_runs_and_memory_stays_flat(tmp_path: Path) -> None:
    # The documented flow: ours runs at batch 16 = the exported max; ExecuTorch 1.5's XNNPACK
    # program is planned for 15 and fails there (the run exits 1, its column says FAILED).
    out = tmp_path / "dynamic.json"
    args = ["--only", "cnn/batch16", "--repeats", "2", "--warmup", "1", "--no-memory", "--quiet"]
    args += ["--first-call-runs", "1", "--alternating-calls", "60"]
    dynamic_shape_bench.main([*args, "--json", str(out)])
    (bench,) = json.loads(out.read_text())["benchmarks"]
    ours = next(v for v in bench["variants"] if v["name"] == "cpu delegate")
    assert ours["error"] is None and ours["median_ms"] > 0
    assert "error" not in bench["details"]["first_call_at_new_size"]["cpu delegate"]
    memory = bench["details"]["memory_alternating_sizes"]["cpu delegate"]
    assert memory["sizes"] == [1, 8, 16] and memory["calls"] == 60
    # Every size's plan exists after the first round; 60 more calls keep what they had.
    assert abs(memory["growth_mib"]) < 8.0, memory
