"""Float32 linears that read the same input (attention's q/k/v projections, SwiGLU's w1 and w3)
run as one product (issue 45): the runtime offers the later ones to the first one's provider
(SiblingOp), the Optimized provider computes them in one job on its pool, each writing its own
out tensor (no copies), and their own ops never run. Checked on a Llama-style decoder at a
prefill of 128 rows (bands of rows shared out together) and 20 rows (the plans run one after the
other), against eager and all-Reference; ET_CPU_FUSE_SIBLING_LINEARS=0 turns it off.

Tolerance: assert_close_scaled (1e-4 relative to the output's scale), as every float test of the
Optimized provider: the grouped products run the same oneDNN kernels as lone ones.
"""

import pytest
import torch
from torch import nn

from backends.cpu.runtime.test.llama_like import Decoder
from backends.cpu.runtime.test.lowered_program import lower_to_pte
from backends.cpu.runtime.test.provider_compare import (
    assert_close_scaled,
    run_cases,
    run_pte_both,
)

LINEAR = "aten::linear.out"
SWITCH = "ET_CPU_FUSE_SIBLING_LINEARS"


def _linear_lines(placement: list[str]) -> list[str]:
    return [line for line in placement if f" {LINEAR}: " in line]


def _computed_by(placement: list[str]) -> dict[str, str]:
    """Sibling linear node -> the linear node that computes it."""
    siblings = {}
    for line in _linear_lines(placement):
        if ": computed by " in line:
            node = line.split(" ", 1)[0]
            siblings[node] = line.split(": computed by ", 1)[1].split(" ", 1)[0]
    return siblings


class SharedInput(nn.Module):
    """Three linears of different widths (two with a bias) on one input, a fourth on another
    value, and a ReLU the first linear fuses: GQA-like q / k / v."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(48, 64, bias=False)
        self.k = nn.Linear(48, 32)
        self.v = nn.Linear(48, 32)
        self.other = nn.Linear(64, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * 2.0
        q = torch.relu(self.q(h))
        k = self.k(h)
        v = self.v(h)
        return self.other(q) + torch.cat([k, v], dim=-1)[..., :16]


@pytest.mark.parametrize("split_all", [False, True])
def test_decoder_prefill_fuses_qkv_and_swiglu_and_matches_eager(split_all: bool) -> None:
    """split_all (ET_CPU_ONEDNN_TASK_FLOPS=0): every product that can be split into bands of rows
    is, so every group of 64 rows or more runs as one job of bands on the pool."""
    torch.manual_seed(11)
    decoder = Decoder(vocab=96, dim=128, layers=2).eval()
    cases: list[tuple[nn.Module, tuple[torch.Tensor, ...]]] = [
        (decoder, (torch.randint(0, 96, (1, 128)),)),
        (decoder, (torch.randint(0, 96, (1, 20)),)),
        (SharedInput().eval(), (torch.randn(1, 70, 48),)),
    ]
    with pytest.MonkeyPatch.context() as patch:
        if split_all:
            patch.setenv("ET_CPU_ONEDNN_TASK_FLOPS", "0")
        runs = run_cases(cases)
    for index, run in enumerate(runs):
        assert_close_scaled(run.optimized[0], run.expected[0])
        assert_close_scaled(run.optimized[0], run.reference[0])
        siblings = _computed_by(run.placement)
        lines = _linear_lines(run.placement)
        if index < 2:
            # per block: wk and wv computed by wq, w3 by w1 (6 of the 14 layer linears + head)
            assert len(siblings) == 6, (index, lines)
            heads = sorted(set(siblings.values()))
            assert len(heads) == 4, (index, siblings)
            assert sorted(list(siblings.values()).count(h) for h in heads) == [1, 1, 2, 2]
        else:
            # k and v computed by q (which also fused its ReLU); `other` reads another value
            assert len(siblings) == 2 and len(set(siblings.values())) == 1, lines
        # every other linear runs on Optimized itself
        for line in lines:
            assert ": computed by " in line or ": Optimized" in line, (index, line)


def test_switch_off_runs_each_linear_and_matches() -> None:
    torch.manual_seed(12)
    model = Decoder(vocab=64, dim=32, layers=1).eval()
    inputs = (torch.randint(0, 64, (1, 96)),)
    pte, _ = lower_to_pte(model, inputs)
    expected = model(*inputs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(SWITCH, "0")
        out_off, out_ref, placement_off = run_pte_both(pte, inputs)
    assert not _computed_by(placement_off), _linear_lines(placement_off)
    out_on, _, placement_on = run_pte_both(pte, inputs)
    assert len(_computed_by(placement_on)) == 3, _linear_lines(placement_on)
    for got in (out_off[0], out_on[0]):
        assert_close_scaled(got, expected)
        assert_close_scaled(got, out_ref[0])
    assert_close_scaled(out_on[0], out_off[0])


def test_one_row_decode_keeps_linears_apart() -> None:
    """A single row (decode) stays on the per-linear kernels (RowGemm's few-row path)."""
    torch.manual_seed(13)
    (run,) = run_cases([(SharedInput().eval(), (torch.randn(1, 1, 48),))])
    assert_close_scaled(run.optimized[0], run.expected[0])
    assert not _computed_by(run.placement), _linear_lines(run.placement)
