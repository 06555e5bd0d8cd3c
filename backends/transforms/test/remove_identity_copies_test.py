"""RemoveIdentityCopiesPass: copies that change nothing leave Edge programs; real ones stay."""

from __future__ import annotations

import torch

from backends.transforms.program_checks import check_program_consistency
from backends.transforms.remove_identity_copies import RemoveIdentityCopiesPass
from backends.transforms.test.bn_test_util import eager, run_program, to_edge_program


def _ops(ep: torch.export.ExportedProgram) -> list[str]:
    return [
        str(node.target).split(".")[-2] if "." in str(node.target) else str(node.target)
        for node in ep.graph.nodes
        if node.op == "call_function"
    ]


class _Attention(torch.nn.Module):
    """4-D matmuls (expand_copy + view_copy + bmm in Edge), a no-op contiguous, a real expand."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        scores = (q @ k.transpose(-2, -1)).contiguous()
        return scores + bias.expand(2, 3, 5, 5) * 2.0


def test_identity_expands_go_and_the_broadcasting_one_stays() -> None:
    torch.manual_seed(0)
    inputs = (torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4), torch.randn(1, 1, 5, 5))
    ep = to_edge_program(_Attention().eval(), inputs)
    before = _ops(ep).count("expand_copy")
    report = RemoveIdentityCopiesPass()(ep)
    check_program_consistency(ep)
    after = _ops(ep).count("expand_copy")
    assert report.changed and report.folded >= 2
    assert before - after >= 2 and after == 1  # bias [1,1,5,5] -> [2,3,5,5] really broadcasts
    torch.testing.assert_close(run_program(ep, inputs), eager(_Attention(), inputs))


class _CloneOut(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(x)
        return y.clone(), y.permute(0, 1) * 2.0


def test_a_copy_feeding_the_output_stays() -> None:
    inputs = (torch.randn(3, 4),)
    ep = to_edge_program(_CloneOut().eval(), inputs)
    report = RemoveIdentityCopiesPass()(ep)
    check_program_consistency(ep)
    assert [s.reason for s in report.skipped] == ["identity copy feeds the graph output"]
    assert "permute_copy" not in _ops(ep)  # the identity permute went
    out = ep.module()(*inputs)
    torch.testing.assert_close(out[0], torch.relu(inputs[0]))
    torch.testing.assert_close(out[1], torch.relu(inputs[0]) * 2.0)


def test_nothing_to_do_reports_unchanged() -> None:
    inputs = (torch.randn(2, 3),)
    ep = to_edge_program(torch.nn.Linear(3, 4).eval(), inputs)
    report = RemoveIdentityCopiesPass()(ep)
    assert not report.changed and report.folded == 0
