"""Keeps the depthwise benchmark runnable: two layers (3x3 and 5x5) and MobileNetV3's stem at
batch 1 on one thread, ours and oneDNN's each prepared as asked (the benchmark checks the plan
it got) and timed."""

import pytest

from backends.cpu.runtime.providers.optimized.test.onednn_ctypes import SILU, Provider
from tools.bench import depthwise_bench


def test_the_bench_times_ours_and_onednns(capsys: pytest.CaptureFixture[str]) -> None:
    if not Provider(num_threads=1).has_vector_activation(SILU):
        pytest.skip("no AVX-512F on this CPU: depthwise convolutions stay on oneDNN")
    args = ["--only", "7x7x960 k3", "--only", "14x14x672 k5 s2", "--only", "x3->16", "--batch", "1"]
    assert depthwise_bench.main([*args, "--threads", "1", "--runs", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith(("7x7x960", "14x14x672", "stem"))]
    assert len(rows) == 3, lines
    for row in rows:
        ours, theirs, ratio = (float(value) for value in row.split()[-3:])
        assert ours > 0.05 and theirs > 0.05, row
        # The ratio is printed from the unrounded times: it lies within what the printed times
        # (to 0.05 us) allow, each end widened by its own rounding (to 0.005).
        lowest = (ours - 0.05) / (theirs + 0.05) - 0.005
        highest = (ours + 0.05) / (theirs - 0.05) + 0.005
        assert lowest <= ratio <= highest, row
    assert lines[-1].startswith("geomean ours / oneDNN: ")
