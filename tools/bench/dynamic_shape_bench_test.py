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
    ]
    for bench in dynamic_shape_bench.benchmarks():
        assert [v.name for v in bench.variants] == ["cpu delegate", "xnnpack", "eager"]
        assert bench.baseline == "xnnpack"


def test_the_bench_runs_the_cnn_and_reports_the_first_call(tmp_path: Path) -> None:
    out = tmp_path / "dynamic.json"
    args = ["--only", "cnn/batch8", "--repeats", "2", "--warmup", "1", "--no-memory", "--quiet"]
    args += ["--first-call-runs", "2"]
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
