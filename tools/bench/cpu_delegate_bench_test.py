"""Keeps cpu_delegate_bench's --profile honest on the examples' MobileNetV2-shaped model (small
size, two timed rounds, no ONNX Runtime): the profile runs in a fresh process on the program the
CPU delegate path lowers, its per-op times add up to the runtime's kernel time per call, its
roofline has the depthwise and 1x1 classes with their FLOPs (the costs name the profiled ops;
with the blocks unfused by --profile-env ET_CPU_ONEDNN_BLOCKS=0, and inside the fused chains by
default), and the text under the table names the kernel classes."""

import json
from pathlib import Path
from typing import Any

import pytest

from tools.bench import cpu_delegate_bench, op_cost, op_profile


def test_the_mobilenet_profile_has_its_kernel_classes_and_adds_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    quick = ["--repeats", "2", "--warmup", "1", "--no-memory", "--quiet", "--no-onnxruntime"]
    args = ["--size", "small", "--only", "mobilenet/small", *quick]
    # Each inverted residual block's three convolutions timed on their own.
    unfused = ["--profile-env", "ET_CPU_ONEDNN_BLOCKS=0"]
    code = cpu_delegate_bench.main(
        [*args, "--profile", "--profile-runs", "3", *unfused, "--json", str(out)]
    )
    assert code == 0
    (bench,) = json.loads(out.read_text())["benchmarks"]
    assert bench["name"] == "mobilenet/small"
    figures = bench["details"]["profile"]
    assert figures["runs"] == 3 and not figures["away"]
    assert figures["env"] == {"ET_CPU_ONEDNN_BLOCKS": "0"}
    roof = _check_profile(figures)
    classes = {row["kind"]: row for row in roof["per_class"]}
    assert op_cost.FUSED_CHAIN not in classes and not roof["chain_flops"], classes
    for kind in (op_cost.DEPTHWISE_CONV, op_cost.POINTWISE_CONV):
        assert kind in classes, classes
        assert classes[kind]["flops"] > 0 and classes[kind]["gflops"] > 0, classes[kind]
    assert bench["details"]["achieved_gflops"]["cpu delegate"] > 0
    text = capsys.readouterr().out
    assert "(ET_CPU_PROFILE, 3 runs, fresh process, ET_CPU_ONEDNN_BLOCKS=0)" in text
    assert "against the GEMM peak" in text
    for kind in (op_cost.DEPTHWISE_CONV, op_cost.POINTWISE_CONV, op_cost.MEMORY_BOUND):
        assert f"    {kind} " in text, text
    # By default each block is one kernel (a fused chain): the same FLOPs, the depthwise and 1x1
    # ones inside the chains.
    fused_figures = op_profile.profile(op_profile.EXAMPLES, "mobilenet", "small", 3)
    fused = _check_profile(fused_figures)
    assert fused["flops"] == roof["flops"]
    assert op_cost.FUSED_CHAIN in {row["kind"] for row in fused["per_class"]}, fused
    chains = fused["chain_flops"]
    assert chains[op_cost.DEPTHWISE_CONV] > 0 and chains[op_cost.POINTWISE_CONV] > 0, chains
    assert "fused conv chains' FLOPs" in op_profile.render_profile(fused_figures)


def _check_profile(figures: dict[str, Any]) -> dict[str, Any]:
    """Asserts what holds for every profile; returns its roofline."""
    ops = figures["ops"]
    # Every op line of the runtime's table was read: their means (after the first call, 0.1 us
    # each on the line) add up to the kernel time per call it measures around the same kernels.
    kernels = figures["call"]["kernels"]
    assert abs(sum(op["mean_us"] for op in ops) - kernels) <= 0.05 * len(ops) + 0.05, figures
    assert figures["total_us"] == pytest.approx(sum(op["mean_us"] for op in ops))
    assert figures["call"]["python_us"] >= figures["call"]["total"] >= kernels > 0
    assert sum(row["ops"] for row in figures["per_kernel"]) == len(ops)
    assert abs(sum(figures["per_provider_share"].values()) - 100.0) < 1.0
    roof: dict[str, Any] = figures["roofline"]
    assert roof["peak_gflops"] > 0 and roof["flops"] > 0
    assert sum(row["flops"] for row in roof["per_class"]) == roof["flops"]
    assert sum(row["us"] for row in roof["per_class"]) == pytest.approx(figures["total_us"])
    # The costs come from the program profiled: every convolution op it timed has its FLOPs.
    rows = {row["node"]: row for row in roof["ops"]}
    convolutions = [op["node"] for op in ops if op["kernel"] == "aten::convolution.out"]
    assert convolutions and all(rows[node]["flops"] > 0 for node in convolutions), rows
    return roof


def test_profile_runs_below_one_is_an_argument_error() -> None:
    with pytest.raises(SystemExit) as exit_info:
        cpu_delegate_bench.main(["--profile", "--profile-runs", "0"])
    assert exit_info.value.code == 2


def test_a_profile_env_wants_name_equals_value() -> None:
    with pytest.raises(SystemExit) as exit_info:
        cpu_delegate_bench.main(["--profile", "--profile-env", "ET_CPU_ONEDNN_BLOCKS"])
    assert exit_info.value.code == 2


def test_the_profiled_process_wants_a_known_source() -> None:
    assert op_profile.child_main(["hub", "mobilenet", "small", "2"]) == 2
    with pytest.raises(ValueError, match="unknown model source"):
        op_profile.create("hub", "mobilenet", "small")
