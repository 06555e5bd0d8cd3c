"""PassReport: JSON-serialisable and printable."""

from __future__ import annotations

import json

from backends.transforms.pass_report import PassReport


def test_report_round_trips_through_json() -> None:
    report = PassReport(pass_name="FuseBatchNormWithConvPass")
    report.folded = 2
    report.changed = True
    report.skip("batch_norm_3", "batch norm in training mode")
    report.added_constants.append("conv_fused_weight")
    data = json.loads(json.dumps(report.to_dict()))
    assert data == {
        "pass_name": "FuseBatchNormWithConvPass",
        "changed": True,
        "folded": 2,
        "skipped": [{"node": "batch_norm_3", "reason": "batch norm in training mode"}],
        "added_constants": ["conv_fused_weight"],
        "removed_constants": [],
    }
    assert report.summary() == "FuseBatchNormWithConvPass: folded 2, skipped 1, constants +1 -0"


def test_fresh_report_is_unchanged() -> None:
    report = PassReport(pass_name="X")
    assert not report.changed and report.folded == 0 and report.skipped == []
    assert report.summary() == "X: folded 0, skipped 0"
