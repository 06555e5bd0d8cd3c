"""Keeps the zoo benchmark runnable: one benchmark per zoo model with its four paths; one model
runs end to end at the small size with two repeats (and a --variant-env variant), its delegation
figures and --profile's per-op placement and shares land in the JSON."""

import json
import os
from pathlib import Path

import pytest

from tools.bench import op_profile, zoo, zoo_bench


def test_there_is_one_benchmark_per_zoo_model_with_four_paths() -> None:
    zoo_bench._SIZE[0] = "small"
    benches = zoo_bench.benchmarks()
    assert [b.name for b in benches] == [f"{name}/small" for name in zoo.ZOO]
    for bench in benches:
        assert [v.name for v in bench.variants] == [
            "cpu delegate",
            "xnnpack",
            "onnxruntime",
            "eager",
        ]
        assert bench.baseline == "cpu delegate"


def test_the_bench_runs_and_reports_delegation_and_the_per_op_profile(tmp_path: Path) -> None:
    # The quickest model to lower; every family's lowering and results are checked by
    # tests/e2e/zoo_families_test.py.
    out = tmp_path / "zoo.json"
    quick = ["--repeats", "2", "--warmup", "1", "--no-memory", "--quiet"]
    profile = ["--profile", "--profile-away", "--profile-runs", "2", "--json", str(out)]
    switch = ["--variant-env", "ET_CPU_VECTOR_ACTIVATIONS=0"]
    args = ["--size", "small", "--only", "speech_conv1d/small", *quick, *profile, *switch]
    code = zoo_bench.main(args)
    zoo_bench._VARIANT_ENV.clear()
    assert code == 0
    # The switch is set only while that variant's delegate initializes.
    assert "ET_CPU_VECTOR_ACTIVATIONS" not in os.environ
    (bench,) = json.loads(out.read_text())["benchmarks"]
    assert bench["name"] == "speech_conv1d/small"
    by_name = {v["name"]: v for v in bench["variants"]}
    assert set(by_name) == {
        "cpu delegate",
        "cpu delegate ET_CPU_VECTOR_ACTIVATIONS=0",
        "xnnpack",
        "onnxruntime",
        "eager",
    }
    for variant in by_name.values():
        assert variant["error"] is None and len(variant["samples_ms"]) == 2, variant
    assert by_name["cpu delegate"]["ratio_to_baseline"] == 1.0
    delegation = bench["details"]["cpu_delegate"]
    assert delegation["fraction"] == 1.0 and delegation["left_out"] == {}
    # XNNPACK has no log_softmax: it stays outside its delegate.
    assert bench["details"]["xnnpack_ops_outside"] == {"aten._log_softmax.default": 1}
    figures = bench["details"]["profile"]
    assert figures["runs"] == 2 and figures["total_us"] > 0
    # One call's wall time in Python, of which the delegate's: its kernels and the rest.
    call = figures["call"]
    assert call["python_us"] >= call["total"] >= call["kernels"] > 0, call
    assert abs(sum(figures["per_provider_share"].values()) - 100.0) < 1.0
    kernels = {(row["kernel"], row["provider"]) for row in figures["per_kernel"]}
    assert ("aten::_log_softmax.out", "Optimized(oneDNN)") in kernels
    assert ("aten::permute_copy.out", "Optimized(oneDNN)") in kernels  # our copy loops
    # The distance to the GEMM peak: conv1d k=5/3 stack (dense) with a 1x1 head; log_softmax and
    # the permute carry no FLOPs.
    roof = figures["roofline"]
    assert roof["peak_gflops"] > 0 and roof["flops"] > 0 and roof["gflops"] > 0
    classes = {row["kind"]: row for row in roof["per_class"]}
    assert set(classes) == {"dense conv (k>1)", "1x1 conv", "memory-bound"}
    assert classes["memory-bound"]["flops"] == 0
    assert sum(row["flops"] for row in roof["per_class"]) == roof["flops"]
    assert bench["details"]["achieved_gflops"]["cpu delegate"] > 0
    # --profile-away: both sides' ops back to back and after gc.collect(), matched by name.
    away = bench["details"]["profile_away"]
    assert away["runs"] == 2 and away["errors"] == {}, away
    for side in ("cpu delegate", "onnxruntime"):
        figures = away[side]
        assert figures["back_to_back_us"] > 0 and figures["away_us"] > 0, (side, figures)
        assert figures["ops"] and all(op["away_us"] > 0 for op in figures["ops"]), (side, figures)
    ours = {op["node"] for op in away["cpu delegate"]["ops"]}
    assert ours == {op["node"] for op in bench["details"]["profile"]["ops"]}


def test_profile_lines_parse() -> None:
    text = (
        "CpuBackend profile (ET_CPU_PROFILE): 5 runs, mean us per run, ...\n"
        "      21.6 us   2.9%  aten_convolution_default aten::convolution.out: Optimized(oneDNN)\n"
        "     137.9 us  18.3%  aten_convolution_default_9 aten::convolution.out: Reference "
        "(declined by Optimized(oneDNN): convolution: transposed)\n"
        "     751.4 us total\n"
    )
    first, second = op_profile.parse_profile(text)
    assert (first.node, first.kernel, first.provider) == (
        "aten_convolution_default",
        "aten::convolution.out",
        "Optimized(oneDNN)",
    )
    assert (first.mean_us, first.share) == (21.6, 2.9)
    assert second.provider.startswith("Reference (declined by Optimized(oneDNN)")


def test_call_lines_parse_and_sum_over_delegates() -> None:
    line = (
        "     {} us per call in the delegate (mean after the first): kernels {}, outside them {} "
        "(entry {}, between kernels {}, exit {})"
    )
    text = "\n".join(
        [
            line.format("100.0", "90.0", "10.0", "1.0", "8.0", "1.0"),
            "     90.0 us total",
            line.format("50.5", "40.0", "10.5", "0.5", "9.5", "0.5"),
        ]
    )
    assert op_profile.parse_calls(text) == {
        "total": 150.5,
        "kernels": 130.0,
        "entry": 1.5,
        "between": 17.5,
        "exit": 1.5,
    }
    assert op_profile.parse_calls("     90.0 us total") == {}


def test_variant_env_wants_name_equals_value() -> None:
    assert zoo_bench.parse_variant_env("ET_CPU_ONEDNN_BLOCKS=0") == ("ET_CPU_ONEDNN_BLOCKS", "0")
    assert zoo_bench.parse_variant_env("A=b=c") == ("A", "b=c")
    for bad in ("ET_CPU_ONEDNN_BLOCKS", "=0"):
        with pytest.raises(ValueError, match="NAME=VALUE"):
            zoo_bench.parse_variant_env(bad)
