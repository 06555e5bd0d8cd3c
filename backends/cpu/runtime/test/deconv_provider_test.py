"""Transposed convolution (aten.convolution with transposed=True) on the Optimized (oneDNN)
provider: generated ConvTranspose1d/2d/3d shapes (groups, depthwise, stride 1-3, padding,
output_padding, dilation, non-square kernels and strides, odd sizes, bias, batch 1 and 2) give
the Reference provider's and eager's results within provider_compare's tolerance, with fused
ReLU / hardtanh / residual adds, split into pieces or whole, between channels-last convolutions;
non-constant weights are declined with a reason."""

import functools
import random
from typing import Any

import pytest
import torch

from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import lower_to_pte
from backends.cpu.runtime.test.provider_compare import (
    assert_close_scaled,
    placed,
    run_both,
    run_pte,
    run_pte_both,
)

CONV = "aten::convolution.out"


class Deconv(torch.nn.Module):
    """A transposed convolution, then an optional activation and residual add."""

    def __init__(self, deconv: torch.nn.Module, act: str, add: bool) -> None:
        super().__init__()
        self.deconv = deconv
        self.act = act
        self.add = add

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        y = self.deconv(x)
        if self.add:
            y = y + residual
        if self.act == "relu":
            y = torch.relu(y)
        elif self.act == "hardtanh":
            y = torch.nn.functional.hardtanh(y, -0.5, 0.5)
        return y


def random_case(rng: random.Random, dims: int) -> tuple[Deconv, tuple[torch.Tensor, torch.Tensor]]:
    """One transposed convolution of `dims` spatial dims with random parameters and post-ops,
    and its input and residual."""
    groups = rng.choice([1, 1, 2, 3])
    depthwise = groups == 1 and rng.random() < 0.3
    c_in = rng.randint(2, 6) if depthwise else groups * rng.randint(1, 4)
    c_out = c_in if depthwise else groups * rng.randint(1, 4)
    if depthwise:
        groups = c_in
    kernel = tuple(rng.randint(1, 4) for _ in range(dims))
    stride = tuple(rng.randint(1, 3) for _ in range(dims))
    dilation = tuple(rng.randint(1, 2) for _ in range(dims))
    padding = tuple(rng.randint(0, (k - 1) * d) for k, d in zip(kernel, dilation, strict=True))
    # torch: output_padding < max(stride, dilation).
    output_padding = tuple(
        rng.randint(0, max(s, d) - 1) for s, d in zip(stride, dilation, strict=True)
    )
    size = tuple(rng.randint(1, 5 if dims == 3 else 9) for _ in range(dims))
    # oneDNN refuses stride 1 with an output_padding beyond the padding (a negative right
    # padding; the provider declines it) and the Reference provider has no 3D convolution.
    if dims == 3:
        output_padding = tuple(
            0 if s == 1 and op > p else op
            for s, op, p in zip(stride, output_padding, padding, strict=True)
        )
    # No empty outputs (eager gives an empty tensor, the provider declines).
    padding = tuple(
        p if (n - 1) * s - 2 * p + d * (k - 1) + op + 1 >= 1 else 0
        for p, n, s, d, k, op in zip(
            padding, size, stride, dilation, kernel, output_padding, strict=True
        )
    )
    deconv_class = {
        1: torch.nn.ConvTranspose1d,
        2: torch.nn.ConvTranspose2d,
        3: torch.nn.ConvTranspose3d,
    }[dims]
    # torch's stubs type the size arguments per rank (int or a tuple of that rank).
    sizes: list[Any] = [kernel, stride, padding, output_padding, dilation]
    deconv = deconv_class(
        c_in,
        c_out,
        sizes[0],
        sizes[1],
        sizes[2],
        sizes[3],
        groups,
        rng.random() < 0.5,
        sizes[4],
    )
    x = torch.randn(rng.choice([1, 2]), c_in, *size)
    with torch.no_grad():
        residual = torch.randn_like(deconv(x))
    act = rng.choice(["none", "relu", "hardtanh"])
    return Deconv(deconv, act, rng.random() < 0.4).eval(), (x, residual)


class Many(torch.nn.Module):
    """Independent cases in one model (one lowering for all: lowering dominates test time)."""

    def __init__(self, cases: list[torch.nn.Module]) -> None:
        super().__init__()
        self.cases = torch.nn.ModuleList(cases)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(case(inputs[2 * i], inputs[2 * i + 1]) for i, case in enumerate(self.cases))


def _check(
    model: torch.nn.Module, inputs: tuple[Any, ...], with_reference: bool = True
) -> list[str]:
    out_opt, out_ref, placement = run_both(model, inputs, with_reference=with_reference)
    with torch.no_grad():
        assert_close_scaled(out_opt[0], out_ref[0])
        assert_close_scaled(out_opt[0], model(*inputs))
    return placement


def _placed_optimized(placement: list[str]) -> list[str]:
    return [line for line in placed(placement, CONV, "Optimized") if "fused" not in line]


@functools.cache
def _generated_program(dims: int, count: int) -> tuple[Many, tuple[torch.Tensor, ...], bytes]:
    """`count` generated transposed convolutions of `dims` spatial dims as one model, its inputs
    and its .pte, lowered once for both splits (the switches are read when the delegate binds)."""
    rng = random.Random(dims)
    torch.manual_seed(dims)
    cases = [random_case(rng, dims) for _ in range(count)]
    model = Many([case for case, _ in cases]).eval()
    inputs = tuple(t for _, pair in cases for t in pair)
    return model, inputs, lower_to_pte(model, inputs)[0]


@pytest.mark.parametrize("split", ["whole", "pieces"])
@pytest.mark.parametrize("dims, count", [(2, 40), (1, 20), (3, 12)])
def test_generated_transposed_convolutions_match_reference_and_eager(
    dims: int, count: int, split: str
) -> None:
    model, inputs, pte = _generated_program(dims, count)
    with torch.no_grad():
        expected = model(*inputs)
    with pytest.MonkeyPatch.context() as patch:
        if split == "pieces":
            # Every deconvolution split as finely as allowed (images, bands of output rows).
            patch.setenv("ET_CPU_ONEDNN_TASK_FLOPS", "0")
            patch.setenv("ET_CPU_ONEDNN_THREADS", "2")
        if dims < 3:
            out_opt, out_ref, placement = run_pte_both(pte, inputs)
        else:
            # ExecuTorch's portable convolution has no 3D case: there eager is the reference.
            out_opt = run_pte(pte, inputs, reference_only=False)
            placement = loader.last_placement()
            out_ref = list(expected)
    for i in range(count):
        assert_close_scaled(out_opt[i], out_ref[i])
        assert_close_scaled(out_opt[i], expected[i])
    # oneDNN has no deconvolution for a few parameter sets (seen: stride 1 with an output_padding
    # beyond the padding, i.e. a negative right padding); those must be declined with its reason.
    declined = [line for line in placement if "declined" in line]
    assert all("prepare_deconv: could not create a primitive" in line for line in declined), (
        declined
    )
    assert len(_placed_optimized(placement)) + len(declined) == count, placement
    assert len(declined) <= count // 10, declined
    (summary,) = [line for line in placement if line.startswith("Optimized(oneDNN): ")]
    if split == "pieces":
        split_ops = int(summary.split("work sharing, ")[1].split()[0])
        assert split_ops > count // 4, summary


class Decoder(torch.nn.Module):
    """conv -> ConvTranspose2d + BN + ReLU -> conv: a UNet decoder step, the deconvolution's
    input and output kept channels-last between the convolutions."""

    def __init__(self, c: int, kernel: int, stride: int, padding: int, out_pad: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, c, 3, padding=1)
        self.up = torch.nn.ConvTranspose2d(c, c // 2, kernel, stride, padding, out_pad, bias=False)
        self.bn = torch.nn.BatchNorm2d(c // 2)
        self.conv2 = torch.nn.Conv2d(c // 2, 4, 3, padding=1)
        assert self.bn.running_mean is not None and self.bn.running_var is not None
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv1(x))
        y = torch.relu(self.bn(self.up(y)))
        return self.conv2(y)


@pytest.mark.parametrize("chain", ["1", "0"])
@pytest.mark.parametrize(
    "c, kernel, stride, padding, out_pad, size",
    # UNet's 2x2 stride 2; 3x3 stride 2 with output_padding; odd sizes, larger channels.
    [(32, 2, 2, 0, 0, 16), (16, 3, 2, 1, 1, 11), (48, 4, 3, 1, 2, 7)],
)
def test_decoder_step_is_one_call_and_stays_channels_last(
    c: int, kernel: int, stride: int, padding: int, out_pad: int, size: int, chain: str
) -> None:
    torch.manual_seed(c)
    model = Decoder(c, kernel, stride, padding, out_pad).eval()
    x = torch.randn(1, 3, size, size)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ET_CPU_ONEDNN_CHAIN", chain)
        placement = _check(model, (x,))
    # Three convolutions (the transposed one with BN folded in), each with its ReLU fused.
    assert len(_placed_optimized(placement)) == 3, placement
    (summary,) = [line for line in placement if line.startswith("Optimized(oneDNN): ")]
    chained = int(summary.split(", ")[1].split()[0])
    # conv1's and the deconvolution's outputs stay channels-last (only oneDNN reads them).
    assert chained == (2 if chain == "1" else 0), summary


def test_transposed_convolution_with_runtime_weight_is_declined() -> None:
    class Net(torch.nn.Module):
        def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.conv_transpose2d(x, w, stride=2)

    x = torch.randn(1, 4, 5, 5)
    w = torch.randn(4, 3, 2, 2)
    out_opt, out_ref, placement = run_both(Net(), (x, w))
    assert_close_scaled(out_opt[0], out_ref[0])
    declined = placed(placement, CONV, "Reference")
    assert declined and "weight and bias must be constants" in declined[0], placement
