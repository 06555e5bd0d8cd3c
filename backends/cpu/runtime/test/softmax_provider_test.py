"""Softmax and log-softmax on the Optimized (oneDNN) provider: over every dim of 2-D to 4-D
tensors, on plain graph inputs and on a channels-last activation between convolutions (softmax
over channels, as a segmentation head does), against the Reference provider (ExecuTorch's
kernels) and eager within provider_compare's tolerance.
"""

from collections.abc import Callable

import torch

from backends.cpu.runtime.test.provider_compare import check_placed_cases

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


_SHAPES = [((7, 33), -1), ((7, 33), 0), ((2, 50, 40), -1), ((2, 50, 40), 1), ((1, 3, 5, 17), 2)]


def test_softmax_runs_on_the_provider() -> None:
    cases: list[tuple[torch.nn.Module, tuple[torch.Tensor, ...], str, str]] = []
    for shape, dim in _SHAPES:
        for name in sorted(KERNELS):
            torch.manual_seed(len(shape) + dim)
            # Wide logits: softmax must subtract the row maximum to stay finite.
            x = torch.randn(*shape) * 30.0
            cases.append((Softmax(name, dim), (x,), KERNELS[name], "Optimized(oneDNN)"))
    check_placed_cases(cases)  # one lowering for all of them


def test_softmax_over_channels_between_convolutions() -> None:
    cases: list[tuple[torch.nn.Module, tuple[torch.Tensor, ...], str, str]] = []
    for name in sorted(KERNELS):
        torch.manual_seed(3)
        x = torch.randn(1, 6, 9, 11)
        cases.append((Softmax(name, 1, convs=True), (x,), KERNELS[name], "Optimized(oneDNN)"))
    check_placed_cases(cases)
