"""End to end through the real `//tools/lower` binary, as a user runs it: no arguments (README's
main-job command), and a bad path."""

from pathlib import Path

from tests.e2e.lower_binary import run_lower_binary


def test_no_arguments_lowers_the_default_example_end_to_end(tmp_path: Path) -> None:
    proc = run_lower_binary(["--runs", "2"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "resnet.pte").stat().st_size > 0
    out = proc.stdout
    assert "Lowered example resnet (small) for the CPU delegate" in out
    assert "0 not delegated" in out and "Batch norms folded: 6 of 6" in out
    assert "Check: MATCHES eager" in out and "Delegate arena:" in out
    assert "[lower" in proc.stderr  # progress goes to stderr, not into the report
    assert "Traceback" not in proc.stderr
    # Issue 21: nothing but our own lines: the tool's progress and the CPU runtime's init line
    # (dependencies' warnings, e.g. torchao's "Failed to load ...", are filtered; -v shows them).
    for line in proc.stderr.splitlines():
        assert line.startswith(("[lower ", "[CpuBackend info] ")), line


def test_a_missing_model_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = run_lower_binary(["nope.pt2"], tmp_path)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip().splitlines()[-1] == f"lower: error: {tmp_path}/nope.pt2: no such file"
    )
    assert "Traceback" not in proc.stderr
