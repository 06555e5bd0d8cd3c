"""A permute_copy whose only reader is a bmm / mm operand (through views) is folded into the
product (issue 45): the runtime offers the product the permute's input with the permuted strides,
the Optimized provider's oneDNN matmul reads it in place, and the permute never runs (its output
shares its input's bytes, like a view). Attention's q @ k^T (prefill and a one-row decode), its
softmax(...) @ v after the head split, with batch and head dims; permutes that must not fold (a
second reader, views that cannot express the strides) still run and stay correct.
"""

import pytest
import torch

from backends.cpu.runtime.test.lowered_program import lower_to_pte
from backends.cpu.runtime.test.provider_compare import (
    CaseRun,
    assert_close_scaled,
    run_cases,
    run_pte_both,
)

PERMUTE = "aten::permute_copy.out"


class QKt(torch.nn.Module):
    """Scores q @ k^T of [batch, heads, rows, dim] q against [batch, heads, keys, dim] k."""

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        # The add keeps k an intermediate (the arena holds the permute's input).
        return torch.matmul(q * 0.5, (k + 1.0).transpose(-2, -1))


class AttentionV(torch.nn.Module):
    """softmax(scores) @ v with v split into heads from [batch, keys, heads * dim]."""

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.heads = heads

    def forward(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        batch, keys, width = x.shape
        v = (x + 1.0).view(batch, keys, self.heads, width // self.heads).transpose(1, 2)
        return torch.matmul(torch.softmax(scores, dim=-1), v)


class Sdpa(torch.nn.Module):
    """torch's scaled_dot_product_attention: its decomposition scales k^T by sqrt(scale) between
    the transpose and the product."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k + 1.0, v)


class ConvThenScores(torch.nn.Module):
    """A Conv1d's (N, C, L) output transposed to (N, L, C) into a product: the delegate keeps a
    convolution's output channels-last when only its own kernels read it, which the product
    reading the bytes in place must prevent."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(6, 16, 3, padding=1)

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.matmul(self.conv(x).transpose(1, 2), w)


class MatrixTransposed(torch.nn.Module):
    """mm: a @ b^T of two 2-D activations."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.mm(a + 1.0, (b * 2.0).t())


class TransposeReadTwice(torch.nn.Module):
    """k^T also read by an add: the permute must run (its output is materialized)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kt = (k + 1.0).transpose(-2, -1)
        return torch.matmul(q, kt), kt + 2.0


def _permute_lines(run: CaseRun) -> list[str]:
    return [line for line in run.placement if f" {PERMUTE}: " in line]


def test_folded_permutes_match_eager_and_do_not_run() -> None:
    torch.manual_seed(3)
    cases: list[tuple[torch.nn.Module, tuple[torch.Tensor, ...]]] = [
        # prefill: 17 query rows against 17 keys, 3 heads of 8
        (QKt(), (torch.randn(1, 3, 17, 8), torch.randn(1, 3, 17, 8))),
        # decode: one query row against 20 cached keys
        (QKt(), (torch.randn(1, 4, 1, 16), torch.randn(1, 4, 20, 16))),
        # batch 2 x 2 heads
        (QKt(), (torch.randn(2, 2, 9, 12), torch.randn(2, 2, 11, 12))),
        # a single head: bmm with a batch of 1
        (QKt(), (torch.randn(1, 1, 5, 24), torch.randn(1, 1, 7, 24))),
        # softmax(...) @ v, batch 1: the head split folds as well
        (AttentionV(heads=3), (torch.randn(1, 3, 10, 10), torch.randn(1, 10, 3 * 8))),
        (MatrixTransposed(), (torch.randn(13, 20), torch.randn(30, 20))),
        (ConvThenScores(), (torch.randn(1, 6, 20), torch.randn(1, 16, 5))),
        # attention itself, prefill and a one-row decode
        (Sdpa(), (torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8))),
        (Sdpa(), (torch.randn(1, 2, 1, 8), torch.randn(1, 2, 9, 8), torch.randn(1, 2, 9, 8))),
    ]
    runs = run_cases(cases)
    for index, run in enumerate(runs):
        assert_close_scaled(run.optimized[0], run.expected[0])
        assert_close_scaled(run.optimized[0], run.reference[0])
        lines = _permute_lines(run)
        assert lines, (index, run.placement)
        folded = [line for line in lines if ": folded into " in line]
        if isinstance(cases[index][0], Sdpa):
            # k^T folds into the product; the decomposition's two permutes of the output compose
            # into one, which runs (no product reads it)
            into_products = [line for line in folded if "folded into aten_bmm" in line]
            assert len(into_products) == 1, (index, lines)
            assert len(lines) - len(folded) == 1, (index, lines)
        else:
            assert folded == lines, (index, lines)
        products = [
            line for line in run.placement if "aten::bmm.out" in line or "aten::mm.out" in line
        ]
        assert products and all(": Optimized" in line for line in products), (index, products)


def test_permutes_that_must_not_fold_still_run_correctly() -> None:
    torch.manual_seed(4)
    cases: list[tuple[torch.nn.Module, tuple[torch.Tensor, ...]]] = [
        # the transposed k has a second reader
        (TransposeReadTwice(), (torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8))),
        # batch 2: [B, S, H, D] -> [B, H, S, D] viewed as [B * H, S, D] has no strides
        (AttentionV(heads=2), (torch.randn(2, 2, 6, 6), torch.randn(2, 6, 2 * 4))),
    ]
    runs = run_cases(cases)
    for index, run in enumerate(runs):
        for got, ref, want in zip(run.optimized, run.reference, run.expected, strict=True):
            assert_close_scaled(got, want)
            assert_close_scaled(got, ref)
        lines = _permute_lines(run)
        assert lines, (index, run.placement)
        assert not any("folded into" in line for line in lines), (index, lines)


def test_switch_off_keeps_the_copy() -> None:
    torch.manual_seed(5)
    model = QKt().eval()
    inputs = (torch.randn(1, 2, 4, 8), torch.randn(1, 2, 6, 8))
    pte, _ = lower_to_pte(model, inputs)
    expected = model(*inputs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ET_CPU_FOLD_PERMUTE", "0")
        out_opt, out_ref, placement = run_pte_both(pte, inputs)
    assert_close_scaled(out_opt[0], expected)
    assert_close_scaled(out_ref[0], expected)
    lines = [line for line in placement if f" {PERMUTE}: " in line]
    assert lines and not any("folded into" in line for line in lines), lines
    out_on, _, placement_on = run_pte_both(pte, inputs)
    assert_close_scaled(out_on[0], expected)
    assert any("folded into" in line for line in placement_on), placement_on


class PermuteChain(torch.nn.Module):
    """SDPA's output permutes (2, 0, 1, 3) then (1, 2, 0, 3), then the head merge's transpose."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = (x + 1.0).permute(2, 0, 1, 3).permute(1, 2, 0, 3).transpose(1, 2)
        return y * 2.0


class PermuteChainReadTwice(torch.nn.Module):
    """The middle permute's output has a second reader: only the first permute composes."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        middle = (x + 1.0).permute(0, 2, 1, 3)
        return middle.permute(3, 1, 2, 0) * 2.0, middle * 3.0


def test_permute_chains_compose_into_one_copy() -> None:
    torch.manual_seed(6)
    runs = run_cases(
        [
            (PermuteChain(), (torch.randn(2, 3, 5, 4),)),
            (PermuteChainReadTwice(), (torch.randn(2, 3, 5, 4),)),
        ]
    )
    for index, (run, runs_left) in enumerate(zip(runs, (1, 2), strict=True)):
        for got, ref, want in zip(run.optimized, run.reference, run.expected, strict=True):
            assert torch.equal(got, want) and torch.equal(ref, want), index
        lines = _permute_lines(run)
        folded = [line for line in lines if ": folded into " in line]
        assert len(lines) - len(folded) == runs_left, (index, lines)


class ScaledTranspose3d(torch.nn.Module):
    """k^T scaled before a 3-D product: (0, 2, 1) is the permute whose output the delegate could
    keep channels-last for its reader; folded, every value on the way must stay plain."""

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.matmul(q + 1.0, (k + 1.0).transpose(1, 2) * 0.25)


def test_scaled_transpose_of_a_3d_operand_matches_eager() -> None:
    torch.manual_seed(8)
    (run,) = run_cases([(ScaledTranspose3d(), (torch.randn(2, 7, 12), torch.randn(2, 9, 12)))])
    assert_close_scaled(run.optimized[0], run.expected[0])
    assert_close_scaled(run.optimized[0], run.reference[0])
    assert _permute_lines(run), run.placement
