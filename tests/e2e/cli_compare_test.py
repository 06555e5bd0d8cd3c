"""End to end through the real `//tools/lower` binary: a saved .pt2 given by a relative path,
lowered and timed side by side with XNNPACK, no delegate and eager (--compare), with --json."""

import json
from pathlib import Path

import torch

from tests.e2e.lower_binary import run_lower_binary
from tools.lower.examples import get_example


def test_a_saved_program_at_a_relative_path_with_compare_and_json(tmp_path: Path) -> None:
    example = get_example("mlp_bn")
    program = torch.export.export(example.model("small"), example.sample_inputs("small"))
    torch.export.save(program, str(tmp_path / "mlp.pt2"))
    args = ["mlp.pt2", "-o", "out/mlp.pte", "--compare", "--runs", "3", "--json", "r.json"]
    (tmp_path / "out").mkdir()
    proc = run_lower_binary(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["inputs_origin"] == "example inputs saved with the program"
    assert report["output_path"] == str(tmp_path / "out" / "mlp.pte")
    assert report["batch_norms"] == {"before": 2, "left": 0, "folded": 2}
    paths = {t["name"]: t for t in report["timings"]}
    assert set(paths) == {
        "CPU delegate",
        "XNNPACK delegate",
        "no delegate (portable kernels)",
        "eager",
    }
    assert paths["CPU delegate"]["ratio_to_primary"] == 1.0
    for row in paths.values():
        assert row["error"] is None and row["median_ms"] > 0 and row["samples"] >= 3
    assert paths["XNNPACK delegate"]["matches_eager"] is True
    assert paths["no delegate (portable kernels)"]["delegated_ops"] == 0
