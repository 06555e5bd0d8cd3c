"""Keeps the dynamic-shape benchmark runnable: every size has the four paths (ours, XNNPACK's
dynamic program, XNNPACK's static anchor, eager); the CNN at batch 8 and at the batch bound runs
end to end with two repeats, with ours / XNNPACK against both programs; the exit code counts our
failures and the anchor's, not XNNPACK's dynamic program's."""

import json
from pathlib import Path

import pytest

from tools.bench import dynamic_shape_bench, harness

PATHS = ["cpu delegate", "xnnpack", "xnnpack static", "eager"]


def test_every_size_has_ours_xnnpack_its_static_anchor_and_eager() -> None:
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
        assert [v.name for v in bench.variants] == PATHS
        assert bench.baseline == "xnnpack"
        size = int(bench.name.rsplit("seq", 1)[-1].rsplit("batch", 1)[-1])
        # The anchor is exported at exactly the table's size.
        assert all(v.kwargs["size"] == size for v in bench.variants)
        assert bench.variants[2].kwargs["path"] == "xnnpack static"


def _run(tmp_path: Path, name: str, *extra: str) -> tuple[int, dict]:
    out = tmp_path / "dynamic.json"
    args = ["--only", name, "--repeats", "2", "--warmup", "1", "--no-memory", "--quiet", *extra]
    code = dynamic_shape_bench.main([*args, "--json", str(out)])
    (bench,) = json.loads(out.read_text())["benchmarks"]
    return code, bench


def test_the_bench_runs_the_cnn_and_reports_the_first_call(tmp_path: Path) -> None:
    code, bench = _run(tmp_path, "cnn/batch8", "--first-call-runs", "2", "--alternating-calls", "0")
    assert code == 0
    assert [v["name"] for v in bench["variants"]] == PATHS
    assert all(v["error"] is None and v["median_ms"] > 0 for v in bench["variants"])
    medians = {v["name"]: v["median_ms"] for v in bench["variants"]}
    ratios = bench["details"]["ours_over_xnnpack"]
    for path in ("xnnpack", "xnnpack static"):
        assert ratios[path] == pytest.approx(medians["cpu delegate"] / medians[path])
    first = bench["details"]["first_call_at_new_size"]
    assert set(first) == {"cpu delegate", "xnnpack"}  # the static anchor has no other size
    for f in first.values():
        assert f["runs"] == 2
        assert 0 < f["first_min_ms"] <= f["first_ms"] <= f["first_max_ms"]
        assert 0 < f["second_min_ms"] <= f["second_ms"] <= f["second_max_ms"]
        assert 0 < f["first_cpu_min_ms"] <= f["first_cpu_ms"] <= f["first_cpu_max_ms"]


def test_at_the_batch_bound_the_static_anchor_gives_the_ratio(tmp_path: Path) -> None:
    # The documented flow: ours runs at batch 16 = the exported max; ExecuTorch 1.5's XNNPACK
    # dynamic program is planned for 15 and fails there (its column says FAILED; if this starts
    # passing, update the module docstring). The static anchor runs, so batch 16 has a ratio, and
    # the peer's failure does not fail the run.
    code, bench = _run(
        tmp_path, "cnn/batch16", "--first-call-runs", "1", "--alternating-calls", "60"
    )
    by_name = {v["name"]: v for v in bench["variants"]}
    assert by_name["xnnpack"]["error"] is not None, "XNNPACK now runs at the bound"
    for path in ("cpu delegate", "xnnpack static", "eager"):
        assert by_name[path]["error"] is None and by_name[path]["median_ms"] > 0, path
    assert code == 0
    ratios = bench["details"]["ours_over_xnnpack"]
    assert ratios["xnnpack"] is None
    expected = by_name["cpu delegate"]["median_ms"] / by_name["xnnpack static"]["median_ms"]
    assert ratios["xnnpack static"] == pytest.approx(expected)
    assert "error" not in bench["details"]["first_call_at_new_size"]["cpu delegate"]
    memory = bench["details"]["memory_alternating_sizes"]["cpu delegate"]
    assert memory["sizes"] == [1, 8, 16] and memory["calls"] == 60
    # Every size's plan exists after the first round; 60 more calls keep what they had.
    assert abs(memory["growth_mib"]) < 8.0, memory


def _result(errors: dict[str, str], details: dict | None = None) -> harness.BenchmarkResult:
    variants = [harness.VariantResult(name=name, error=errors.get(name)) for name in PATHS]
    return harness.BenchmarkResult(
        name="cnn/batch16",
        baseline="xnnpack",
        notes="",
        variants=variants,
        load_before=(0.0, 0.0, 0.0),
        load_after=(0.0, 0.0, 0.0),
        wall_s=0.0,
        details=details or {},
    )


def test_only_our_runs_the_anchor_and_eager_fail_the_run() -> None:
    failures = dynamic_shape_bench.failures
    assert failures(_result({"xnnpack": "planned for 15"})) == []
    for path in ("cpu delegate", "xnnpack static", "eager"):
        (line,) = failures(_result({"xnnpack": "planned for 15", path: "broke"}))
        assert path in line and "broke" in line
    first = {"first_call_at_new_size": {"cpu delegate": {"error": "broke"}}}
    assert len(failures(_result({}, first))) == 1
    memory = {"memory_alternating_sizes": {"cpu delegate": {"skipped": {16: "broke"}}}}
    assert len(failures(_result({}, memory))) == 1
    peer = {"first_call_at_new_size": {"xnnpack": {"error": "planned for 15"}}}
    assert failures(_result({}, peer)) == []
