"""Keeps the int8 benchmark runnable: its seven variants per model, and one model end to end at the
small size with two repeats, nothing left out by the CPU partitioner."""

import json
from pathlib import Path

from tools.bench import int8_bench


def test_every_model_has_the_seven_variants_against_xnnpack_int8() -> None:
    int8_bench._SIZE[0] = "small"
    for bench in int8_bench.benchmarks():
        assert [v.name for v in bench.variants] == [
            "cpu int8",
            "cpu int8 whole",
            "cpu int8 portable q/dq",
            "cpu int8 omp2",
            "xnnpack int8",
            "xnnpack fp32",
            "cpu fp32",
        ]
        assert bench.baseline == "xnnpack int8"


def test_the_bench_runs_small_and_reports_what_was_left_out(tmp_path: Path) -> None:
    out = tmp_path / "int8.json"
    args = ["--size", "small", "--only", "resnet/small", "--repeats", "2", "--warmup", "1"]
    code = int8_bench.main([*args, "--no-memory", "--quiet", "--json", str(out)])
    assert code == 0
    (bench,) = json.loads(out.read_text())["benchmarks"]
    by_name = {v["name"]: v for v in bench["variants"]}
    assert set(by_name) == {
        "cpu int8",
        "cpu int8 whole",
        "cpu int8 portable q/dq",
        "cpu int8 omp2",
        "xnnpack int8",
        "xnnpack fp32",
        "cpu fp32",
    }
    assert all(v["error"] is None and v["median_ms"] > 0 for v in by_name.values())
    assert bench["details"]["left_out"] == {}
