"""PruneUnusedConstantsPass: unused parameters, buffers and constants leave every table."""

from __future__ import annotations

import torch
from torch.export.graph_signature import InputKind

from backends.transforms.program_checks import check_program_consistency
from backends.transforms.prune_unused_constants import PruneUnusedConstantsPass
from backends.transforms.test.bn_test_util import eager, export, run_program


class _Unused(torch.nn.Module):
    used_scratch: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.used = torch.nn.Parameter(torch.randn(4))
        self.unused_param = torch.nn.Parameter(torch.randn(8))
        self.register_buffer("unused_buffer", torch.randn(16))
        self.register_buffer("unused_scratch", torch.randn(32), persistent=False)
        self.register_buffer("used_scratch", torch.randn(4), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.used + self.used_scratch


def test_unused_parameter_buffer_and_non_persistent_buffer_are_dropped() -> None:
    model = _Unused().eval()
    inputs = (torch.randn(2, 4),)
    ep = export(model, inputs)
    report = PruneUnusedConstantsPass()(ep)
    check_program_consistency(ep)
    assert report.changed and report.folded == 3
    assert sorted(report.removed_constants) == ["unused_buffer", "unused_param", "unused_scratch"]
    assert sorted(ep.state_dict) == ["used"]
    assert sorted(ep.constants) == ["used_scratch"]
    kinds = [s.kind for s in ep.graph_signature.input_specs]
    assert kinds == [InputKind.PARAMETER, InputKind.BUFFER, InputKind.USER_INPUT]
    torch.testing.assert_close(run_program(ep, inputs), eager(model, inputs))


def test_mutated_buffers_are_kept() -> None:
    """Training-mode batch norm updates its statistics: those buffers are outputs, not garbage."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)).train()
    ep = export(model, (torch.randn(3, 4),))
    before = sorted(ep.state_dict)
    report = PruneUnusedConstantsPass()(ep)
    check_program_consistency(ep)
    assert sorted(ep.state_dict) == before
    assert report.folded == 0


def test_second_run_is_a_no_op() -> None:
    ep = export(_Unused().eval(), (torch.randn(2, 4),))
    PruneUnusedConstantsPass()(ep)
    code = ep.graph_module.code
    report = PruneUnusedConstantsPass()(ep)
    assert not report.changed and ep.graph_module.code == code
