"""End to end: the built-in `mlp_bn` example lowered by the tool, run on the ExecuTorch runtime,
checked against eager."""

from pathlib import Path

from tests.e2e.lower_e2e import assert_fully_delegated, lower


def test_mlp_bn_lowers_runs_and_matches_eager_on_the_cpu_delegate(tmp_path: Path) -> None:
    out = tmp_path / "mlp_bn.pte"
    code, report = lower(["--example", "mlp_bn", "-o", str(out), "--runs", "2"], tmp_path)
    assert code == 0, report
    assert report is not None and out.stat().st_size == report["pte_bytes"]
    assert report["target"] == "cpu"
    assert_fully_delegated(report)
