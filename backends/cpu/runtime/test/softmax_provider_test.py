"""Softmax and log-softmax on the Optimized (oneDNN) provider: over every dim of 2-D to 4-D
tensors, on plain graph inputs and on a channels-last activation between convolutions (softmax
over channels, as a segmentation head does), against the Reference provider (ExecuTorch's
kernels) and eager within provider_compare's tolerance; on our AVX-512 kernel and, with
ET_CPU_VECTOR_SOFTMAX=0, on oneDNN's.
"""

from collections.abc import Callable

import pytest
import torch

from backends.cpu.runtime.test.lowered_program import lower_to_pte
from backends.cpu.runtime.test.provider_compare import (
    assert_close_scaled,
    check_placed_cases,
    placed,
    run_pte_both,
)

F = torch.nn.functional

KERNELS = {"softmax": "aten::_softmax.out", "log_softmax": "aten::_log_softmax.out"}


class Softmax(torch.nn.Module):
    def __init__(self, name: str, dim: int, convs: bool = False) -> None:
        super().__init__()
        self.fn: Callable[..., torch.Tensor] = getattr(F, name)
        self.dim = dim
        self.pre = torch.nn.Conv2d(6, 6, 3, padding=1) if convs else None
        self.post = torch.nn.Conv2d(6, 4, 1) if convs else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre is not None:
            x = self.pre(x)
        y = self.fn(x, dim=self.dim)
        return self.post(y) if self.post is not None else y


# Rows of 33 and 40 (partial vectors), attention-sized rows, middle axes with inner runs of 17
# and 40 (one full and one partial 16-lane block), a size-1 axis, a 1-D tensor.
_SHAPES = [
    ((7, 33), -1),
    ((7, 33), 0),
    ((2, 50, 40), -1),
    ((2, 50, 40), 1),
    ((1, 3, 5, 17), 2),
    ((1, 3, 50, 50), -1),
    ((2, 4, 3, 40), 1),
    ((6, 1, 5), 1),
    ((37,), 0),
]
_KERNEL_SWITCH = "ET_CPU_VECTOR_SOFTMAX"


@pytest.mark.parametrize("switch", ["1", "0"])
def test_softmax_runs_on_the_provider(switch: str) -> None:
    cases: list[tuple[torch.nn.Module, tuple[torch.Tensor, ...], str, str]] = []
    for shape, dim in _SHAPES:
        for name in sorted(KERNELS):
            torch.manual_seed(len(shape) + dim)
            # Wide logits: softmax must subtract the row maximum to stay finite.
            x = torch.randn(*shape) * 30.0
            cases.append((Softmax(name, dim), (x,), KERNELS[name], "Optimized(oneDNN)"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(_KERNEL_SWITCH, switch)  # read when the delegate's plans are prepared
        check_placed_cases(cases)  # one lowering for all of them


class _Each(torch.nn.Module):
    """Every module applied to the same input, one output each."""

    def __init__(self, modules: list[torch.nn.Module]) -> None:
        super().__init__()
        self.each = torch.nn.ModuleList(modules)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(m(x) for m in self.each)


def _summary(placement: list[str]) -> str:
    (line,) = [line for line in placement if line.startswith("Optimized(oneDNN): ")]
    return line


def test_softmax_kernel_special_values_and_switch() -> None:
    """On our kernel a NaN or an infinity makes its whole row NaN, as in torch; a row of -inf
    too; other rows match. The summary counts the softmaxes on our kernel: all of them, none with
    the switch off."""
    torch.manual_seed(5)
    x = torch.randn(2, 3, 9, 21) * 10.0
    x[0, 0, 1, 4] = float("nan")
    x[0, 1, 2, 7] = float("inf")
    x[1, 2, 3, :] = float("-inf")
    x[1, 0, :, 5] = float("-inf")  # one -inf per row: a zero in each output row
    model = _Each([Softmax(name, dim) for name in sorted(KERNELS) for dim in (1, 3)]).eval()
    pte, _ = lower_to_pte(model, (x,))
    with torch.no_grad():
        expected = model(x)
    for switch, count in (("1", 4), ("0", 0)):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(_KERNEL_SWITCH, switch)
            out, reference, placement = run_pte_both(pte, (x,))
        assert f", {count} softmax" in _summary(placement), placement
        assert len(placed(placement, KERNELS["softmax"], "Optimized(oneDNN)")) == 2, placement
        if switch == "0":
            continue  # oneDNN's kernel places NaNs its own way
        for got, ref, want in zip(out, reference, expected, strict=True):
            assert torch.equal(got.isnan(), want.isnan()), switch
            finite = ~want.isnan() & ~want.isinf()
            assert torch.equal(got.isinf() & ~want.isnan(), want.isinf()), switch
            assert_close_scaled(got[finite], want[finite])
            assert_close_scaled(got[finite], ref[finite])


def test_softmax_over_channels_between_convolutions() -> None:
    cases: list[tuple[torch.nn.Module, tuple[torch.Tensor, ...], str, str]] = []
    for name in sorted(KERNELS):
        torch.manual_seed(3)
        x = torch.randn(1, 6, 9, 11)
        cases.append((Softmax(name, 1, convs=True), (x,), KERNELS[name], "Optimized(oneDNN)"))
    check_placed_cases(cases)
