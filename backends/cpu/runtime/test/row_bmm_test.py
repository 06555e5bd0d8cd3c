"""One-row batched products (decode attention) on the Optimized provider's row_bmm kernel
(providers/optimized/kernels/row_bmm.cc) instead of oneDNN's matmul: q @ k^T with k read through
the folded transpose (k contiguous: a dot product per output), softmax(...) @ v with the head
split folded (the output's dim contiguous), both from [keys, heads, dim] and [heads, keys, dim]
caches (each loop order), plain bmm with one row, sizes that leave partial
vectors (k and n not multiples of 16, one-element dims), several heads shared out on the pool;
against eager and the Reference provider. ET_CPU_ROW_BMM=0 keeps oneDNN (same results up to
float rounding), and products of several rows never take it."""

import pytest
import torch

from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import lower_cases
from backends.cpu.runtime.test.provider_compare import assert_close_scaled, run_cases, run_pte


class QKt(torch.nn.Module):
    """q @ k^T, [batch, heads, 1, dim] against [batch, heads, keys, dim] (k from a cache-like
    [batch, keys, heads, dim] tensor, transposed)."""

    def forward(self, q: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        k = (cache + 1.0).transpose(1, 2)
        return torch.matmul(q * 0.5, k.transpose(-2, -1))


class ProbsV(torch.nn.Module):
    """softmax(scores) @ v, v from a [batch, keys, heads, dim] cache, transposed."""

    def forward(self, scores: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        return torch.softmax(scores, dim=-1) @ (cache - 0.5).transpose(1, 2)


class QKtHeadsFirst(torch.nn.Module):
    """q @ k^T with k from a [batch, heads, keys, dim] cache (llm_models.KVCache's layout): each
    head's keys contiguous."""

    def forward(self, q: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        return torch.matmul(q * 0.5, (cache + 1.0).transpose(-2, -1))


class ProbsVHeadsFirst(torch.nn.Module):
    """softmax(scores) @ v with v a [batch, heads, keys, dim] cache."""

    def forward(self, scores: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        return torch.matmul(torch.softmax(scores, dim=-1), cache + 1.0)


class PlainBmm(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a + 1.0, b * 2.0)


class Rows(torch.nn.Module):
    """Several rows: oneDNN's matmul as before."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a + 1.0, b)


CASES: list[tuple[torch.nn.Module, tuple[torch.Tensor, ...]]] = [
    # the large decoder's shapes: 32 heads of 64, 256 cached positions
    (QKt(), (torch.randn(1, 32, 1, 64), torch.randn(1, 256, 32, 64))),
    (ProbsV(), (torch.randn(1, 32, 1, 256), torch.randn(1, 256, 32, 64))),
    # partial vectors: dim 20 / 7, 37 and 1 keys, 3 heads
    (QKt(), (torch.randn(1, 3, 1, 20), torch.randn(1, 37, 3, 20))),
    (QKt(), (torch.randn(1, 3, 1, 7), torch.randn(1, 1, 3, 7))),
    # 19 heads: a run of 16 summed together, then 3 alone
    (QKt(), (torch.randn(1, 19, 1, 40), torch.randn(1, 21, 19, 40))),
    (ProbsV(), (torch.randn(1, 3, 1, 37), torch.randn(1, 37, 3, 20))),
    (ProbsV(), (torch.randn(1, 5, 1, 9), torch.randn(1, 9, 5, 33))),
    # [heads, keys, dim] caches (the bench's): heads outermost; 16 keys at a time and a tail,
    # v rows of 64 and of 80 outputs (a second chunk of 16)
    (QKtHeadsFirst(), (torch.randn(1, 32, 1, 64), torch.randn(1, 32, 256, 64))),
    (QKtHeadsFirst(), (torch.randn(1, 4, 1, 20), torch.randn(1, 4, 37, 20))),
    (ProbsVHeadsFirst(), (torch.randn(1, 32, 1, 256), torch.randn(1, 32, 256, 64))),
    (ProbsVHeadsFirst(), (torch.randn(1, 3, 1, 19), torch.randn(1, 3, 19, 80))),
    # plain operands, one row, both k and n past a vector
    (PlainBmm(), (torch.randn(6, 1, 70), torch.randn(6, 70, 45))),
    (Rows(), (torch.randn(4, 3, 16), torch.randn(4, 16, 8))),
]


def _summary(cases: list[tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]) -> str:
    """The Optimized session's summary line of the cases' program."""
    lowered = lower_cases(cases)
    run_pte(lowered.pte, lowered.inputs, reference_only=False)
    lines = [line for line in loader.last_placement() if line.startswith("Optimized(")]
    assert len(lines) == 1, loader.last_placement()
    return lines[0]


def test_one_row_products_run_on_row_bmm_and_match() -> None:
    torch.manual_seed(7)
    for index, run in enumerate(run_cases(CASES)):
        assert_close_scaled(run.optimized[0], run.expected[0])
        assert_close_scaled(run.optimized[0], run.reference[0])
        products = [line for line in run.placement if "aten::bmm.out" in line]
        assert products and all(": Optimized" in line for line in products), (index, products)
    # every one-row product (12 of the 13 cases) on row_bmm, the several-row one on oneDNN
    summary = _summary(CASES)
    assert " 12 row_bmm, " in summary, summary


def test_switched_off_keeps_onednn(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(8)
    monkeypatch.setenv("ET_CPU_ROW_BMM", "0")
    for run in run_cases(CASES[:3]):
        assert_close_scaled(run.optimized[0], run.expected[0])
    summary = _summary(CASES[:3])
    assert " 0 row_bmm, " in summary, summary
