"""run_passes: runs the given passes, then lift and prune, on the program in place."""

from __future__ import annotations

import pytest
import torch
from torch.export import ExportedProgram

from backends.transforms.pipeline import run_passes
from backends.transforms.program_checks import check_program_consistency
from backends.transforms.test.bn_test_util import (
    batch_norm_count,
    export,
    fusion_passes,
    randomize_batch_norms,
    state_bytes,
)


def _program() -> ExportedProgram:
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3),
        torch.nn.BatchNorm2d(8),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 4 * 4, 5),
        torch.nn.BatchNorm1d(5),
    )
    randomize_batch_norms(model, torch.Generator().manual_seed(10)).eval()
    return export(model, (torch.randn(2, 3, 6, 6),))


def test_pipeline_reports_every_pass_and_leaves_only_fused_constants() -> None:
    ep = _program()
    reports = run_passes(ep, fusion_passes())
    check_program_consistency(ep)
    names = [r.pass_name for r in reports]
    assert names == [
        "FuseBatchNormWithConvPass",
        "FuseBatchNormWithLinearPass",
        "LiftConstantsPass",
        "PruneUnusedConstantsPass",
    ]
    assert [r.folded for r in reports[:2]] == [1, 1]
    assert batch_norm_count(ep) == 0
    assert state_bytes(ep) == (4, 4 * (8 * 27 + 8 + 5 * 128 + 5))
    assert sorted(ep.state_dict) == sorted(reports[0].added_constants + reports[1].added_constants)


def test_pass_returning_something_else_is_named_in_the_error() -> None:
    def bad_pass(ep: ExportedProgram) -> None:
        return None

    with pytest.raises(TypeError, match="bad_pass returned NoneType, expected a PassReport"):
        run_passes(_program(), [bad_pass])  # type: ignore[list-item]
