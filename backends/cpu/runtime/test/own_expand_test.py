"""The expand stage of fused inverted residual blocks on our own AVX-512 1x1 kernel
(kernels/pointwise_conv.h, ET_CPU_OWN_EXPAND): few input channels (8-40), hidden channel counts
with and without a 16-channel tail, every activation the mobile networks use, stride 1 and 2,
batch 1 and 2, in row bands (blocks with a project; squeeze-excite blocks on one thread) and in
channel slices (squeeze-excite blocks on a small image, two threads).

All cases are one lowered program (one lowering); it is loaded once per setting of the switches
and every output is compared with eager float64 within 1e-4 relative.
"""

import copy
from typing import Any

import pytest
import torch

from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import LoweredCases, load, lower_cases
from backends.cpu.runtime.test.provider_compare import assert_close_scaled

_ACTS = {
    "relu": torch.nn.ReLU,
    "relu6": torch.nn.ReLU6,
    "hardswish": torch.nn.Hardswish,
    "silu": torch.nn.SiLU,
    "none": torch.nn.Identity,
}


class InvertedResidual(torch.nn.Module):
    """1x1 expand -> act -> depthwise -> act -> 1x1 project [+ input]: one block in row bands."""

    def __init__(
        self, c_in: int, hidden: int, c_out: int, kernel: int, stride: int, act: str
    ) -> None:
        super().__init__()
        self.expand = torch.nn.Conv2d(c_in, hidden, 1)
        self.depthwise = torch.nn.Conv2d(
            hidden, hidden, kernel, stride, kernel // 2, groups=hidden, bias=False
        )
        self.project = torch.nn.Conv2d(hidden, c_out, 1)
        self.act = _ACTS[act]()
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.project(self.act(self.depthwise(self.act(self.expand(x)))))
        return x + y if self.residual else y


class SqueezeExcite(torch.nn.Module):
    """MobileNetV3 / EfficientNet's block: the provider fuses expand + depthwise (no project)."""

    def __init__(self, c_in: int, hidden: int, kernel: int, stride: int, act: str) -> None:
        super().__init__()
        self.expand = torch.nn.Conv2d(c_in, hidden, 1)
        self.depthwise = torch.nn.Conv2d(hidden, hidden, kernel, stride, kernel // 2, groups=hidden)
        self.reduce = torch.nn.Conv2d(hidden, hidden // 4, 1)
        self.restore = torch.nn.Conv2d(hidden // 4, hidden, 1)
        self.project = torch.nn.Conv2d(hidden, 16, 1)
        self.act = _ACTS[act]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.depthwise(self.act(self.expand(x))))
        scale = torch.nn.functional.adaptive_avg_pool2d(h, 1)
        scale = torch.sigmoid(self.restore(torch.relu(self.reduce(scale))))
        return self.project(h * scale)


# (model, K = its expand's input channels, batch, height, width). Hidden 72, 120, 88, 40: a
# 16-channel tail. The squeeze-excite blocks' images are small enough for channel slices on two
# threads (expanded image + depthwise output of a slice <= 1 MiB), row bands on one. K = 72 is
# past the default's K <= 64: oneDNN's unless ET_CPU_OWN_EXPAND=all.
_CASES: list[tuple[torch.nn.Module, int, int, int, int]] = [
    (InvertedResidual(8, 48, 8, 3, 1, "relu6"), 8, 1, 20, 18),
    (InvertedResidual(16, 72, 24, 3, 2, "hardswish"), 16, 2, 17, 15),
    (InvertedResidual(24, 144, 24, 5, 1, "silu"), 24, 1, 16, 16),
    (InvertedResidual(40, 120, 40, 3, 2, "relu"), 40, 2, 14, 12),
    (InvertedResidual(16, 96, 16, 3, 1, "none"), 16, 1, 12, 13),
    (SqueezeExcite(16, 96, 3, 2, "silu"), 16, 2, 24, 24),
    (SqueezeExcite(24, 88, 5, 1, "hardswish"), 24, 1, 14, 14),
    (SqueezeExcite(40, 240, 5, 2, "silu"), 40, 1, 14, 14),
    (SqueezeExcite(8, 40, 3, 1, "relu6"), 8, 2, 9, 9),
    (SqueezeExcite(72, 144, 3, 1, "relu"), 72, 1, 8, 8),
]
_SMALL_K = sum(1 for _, k, *_ in _CASES if k <= 64)


@pytest.fixture(scope="module")
def lowered() -> LoweredCases:
    torch.manual_seed(7)
    cases: list[tuple[torch.nn.Module, tuple[Any, ...]]] = []
    for model, k, batch, height, width in _CASES:
        model.eval()
        with torch.no_grad():  # weights and biases of either sign, outputs of order 1
            for p in model.parameters():
                p.normal_(0.0, 0.3)
        cases.append((model, (torch.randn(batch, k, height, width),)))
    return lower_cases(cases)


def _expected64(lowered: LoweredCases) -> list[torch.Tensor]:
    out = []
    for (model, *_), x in zip(_CASES, lowered.inputs, strict=True):
        with torch.no_grad():
            out.append(copy.deepcopy(model).double()(x.double()).float())
    return out


def _summary_count(placement: list[str], what: str) -> int:
    (line,) = [entry for entry in placement if entry.startswith("Optimized(oneDNN): ")]
    return int(line.split(f" {what}")[0].split(", ")[-1])


@pytest.mark.parametrize(
    ("own", "threads", "expands"),
    [
        ("unset", "2", _SMALL_K),  # squeeze-excite blocks in channel slices
        ("unset", "1", _SMALL_K),  # all in row bands
        ("all", "2", len(_CASES)),
        ("0", "2", 0),
    ],
)
def test_block_expands_on_our_pointwise_kernel_match_float64(
    lowered: LoweredCases, own: str, threads: str, expands: int
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        if own == "unset":
            patch.delenv("ET_CPU_OWN_EXPAND", raising=False)
        else:
            patch.setenv("ET_CPU_OWN_EXPAND", own)
        patch.setenv("ET_CPU_ONEDNN_THREADS", threads)
        patch.setenv("ET_CPU_ONEDNN_TASK_FLOPS", "0")  # as many row pieces as allowed
        patch.setenv("ET_CPU_OWN_SE", "0")
        patch.setenv("ET_CPU_SE_GATE_FOLD", "0")
        outputs = load(lowered.pte).forward(list(lowered.inputs))
        placement = loader.last_placement()
    assert _summary_count(placement, "inverted residual blocks fused") == len(_CASES), placement
    assert _summary_count(placement, "block expands") == expands, placement
    for got, want in zip(outputs, _expected64(lowered), strict=True):
        assert_close_scaled(got, want)
