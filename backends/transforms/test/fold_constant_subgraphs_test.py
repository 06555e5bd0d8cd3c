"""FoldConstantSubgraphsPass: input-independent ops (the causal mask of SDPA, full_like) become
constants computed once; everything that reads a caller's input stays."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from backends.transforms.fold_constant_subgraphs import FoldConstantSubgraphsPass
from backends.transforms.program_checks import check_program_consistency
from backends.transforms.test.bn_test_util import eager, op_names, run_checked, to_edge_program

_MASK_OPS = ("arange", "full.default", "logical_and", "le.Scalar", "full_like", "scalar_tensor")


class _CausalAttention(torch.nn.Module):
    """Two causal SDPA calls: each builds the same mask and a full_like guard."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        first = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(first, k, v, is_causal=True)


def _count(ep: torch.export.ExportedProgram, fragment: str) -> int:
    return sum(1 for name in op_names(ep) if fragment in name)


def test_the_causal_mask_is_folded_once_and_results_match_eager() -> None:
    torch.manual_seed(0)
    inputs = tuple(torch.randn(1, 2, 6, 4) for _ in range(3))
    ep = to_edge_program(_CausalAttention().eval(), inputs)
    assert all(_count(ep, op) > 0 for op in ("arange", "logical_and", "full_like"))
    constants_before = len(ep.constants)
    (report, *_) = run_checked(ep, [FoldConstantSubgraphsPass()])
    assert report.changed and report.folded > 0
    for op in _MASK_OPS:
        assert _count(ep, op) == 0, f"{op} left: {op_names(ep)}"
    # What reads the scores stays: the guard against fully masked rows and the softmax.
    assert _count(ep, "eq.Scalar") == 2 and _count(ep, "_softmax") == 2
    # The two blocks' masks are one constant, and so are their zeros (a 0-dim splat).
    assert len(report.added_constants) == 2
    added = [ep.constants[name] for name in report.added_constants]
    assert sorted(t.dim() for t in added) == [0, 2]
    assert len(ep.constants) == constants_before + 2
    torch.testing.assert_close(ep.module()(*inputs), eager(_CausalAttention(), inputs))


class _LargeExpand(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.row: torch.Tensor
        self.register_buffer("row", torch.arange(8.0).reshape(1, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.row.expand(64, 8) * 2.0


def test_a_result_much_larger_than_its_inputs_stays_computed() -> None:
    inputs = (torch.randn(64, 8),)
    ep = to_edge_program(_LargeExpand().eval(), inputs)
    report = FoldConstantSubgraphsPass(max_new_bytes=256)(ep)
    check_program_consistency(ep)
    assert [s.reason for s in report.skipped] == ["result of 2048 bytes (too large to store)"]
    assert _count(ep, "expand_copy") == 1
    torch.testing.assert_close(ep.module()(*inputs), eager(_LargeExpand(), inputs))
    # With room for it, expand and mul fold into one [64, 8] constant.
    ep = to_edge_program(_LargeExpand().eval(), inputs)
    report = FoldConstantSubgraphsPass()(ep)
    check_program_consistency(ep)
    assert report.folded == 2 and op_names(ep) == ["aten.add.Tensor"]
    torch.testing.assert_close(ep.module()(*inputs), eager(_LargeExpand(), inputs))


class _InputOnly(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 3.0


def test_nothing_input_independent_reports_unchanged() -> None:
    inputs = (torch.randn(2, 3),)
    ep = to_edge_program(_InputOnly().eval(), inputs)
    report = FoldConstantSubgraphsPass()(ep)
    assert not report.changed and report.folded == 0 and not report.added_constants


def test_ops_of_a_bounded_dynamic_size_stay_computed() -> None:
    """With a dynamic sequence length the mask and the full_like guard have symbolic shapes:
    their values change call to call, so nothing of them may become a constant."""
    from executorch.exir import to_edge

    seq = torch.export.Dim("seq", min=2, max=16)
    inputs = tuple(torch.randn(1, 2, 6, 4) for _ in range(3))
    shapes = tuple({2: seq} for _ in inputs)
    exported = torch.export.export(_CausalAttention().eval(), inputs, dynamic_shapes=shapes)
    ep = to_edge(exported).exported_program()
    full_likes = _count(ep, "full_like")
    assert full_likes > 0
    report = FoldConstantSubgraphsPass()(ep)
    check_program_consistency(ep)
    assert _count(ep, "full_like") == full_likes
    assert "symbolic shape" in {s.reason for s in report.skipped}
    for length in (3, 11):
        sized = tuple(torch.randn(1, 2, length, 4) for _ in range(3))
        torch.testing.assert_close(ep.module()(*sized), eager(_CausalAttention(), sized))
