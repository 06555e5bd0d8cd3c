"""Keeps the expand benchmark runnable: two rows (one SiLU, one ReLU6) on one thread, ours and
oneDNN's timed, the outputs compared by the benchmark itself."""

import pytest

from backends.cpu.runtime.providers.optimized.test.onednn_ctypes import SILU, Provider
from tools.bench import expand_bench


def test_the_bench_times_ours_and_onednns(capsys: pytest.CaptureFixture[str]) -> None:
    if not Provider(num_threads=1).has_vector_activation(SILU):
        pytest.skip("no AVX-512F on this CPU: the expand stays on oneDNN")
    args = ["--only", "40->240 @28 s1", "--only", "32->192", "--rounds", "1", "--runs", "2"]
    assert expand_bench.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith(("40->240", "32->192"))]
    assert len(rows) == 2, lines
    for row in rows:
        pixels, ours, theirs, ratio = (float(value) for value in row.split()[5:9])
        assert pixels > 0 and ours > 0 and theirs > 0
        assert ratio == pytest.approx(ours / theirs, abs=0.01)
