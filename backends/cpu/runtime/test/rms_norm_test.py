"""Issue 45: RMSNorm (`x * rsqrt(mean(x^2, -1, keepdim) + eps) [* weight]`) is fused by preprocess
(backends/cpu/fuse_rms_norm.py) into one `et_cpu_quant::rms_norm` op, run by the Optimized
provider's AVX-512 kernel (providers/optimized/kernels/rms_norm.h) or, with ET_CPU_RMS_NORM=0, by
the Reference provider's built-in scalar loop (runtime/rms_norm.cc). Real torch.export, the real
partitioner and runtime, against eager: D of 16-lane multiples and not (40, 77), the hand-written
Llama form (eps a lifted tensor constant), torch.nn.RMSNorm with and without a weight (eps an
add.Scalar, default eps), a dynamic sequence length, the zoo's Llama-style decoder, and look-alikes
(mean over another dim, squares read elsewhere) left alone; a [1, D] weight stays a separate mul.

Tolerance 1e-5: the kernels sum the squares in another order than torch (and fuse square and
add), which moves the row's scale by a few ulps.
"""

from typing import Any

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from torch import nn
from torch.export import Dim

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.runtime import loader
from backends.cpu.runtime.test.fused_op_checks import (
    check_both_providers,
    payload_kernels,
    placements_of,
    run_with_switch,
)
from backends.cpu.runtime.test.lowered_program import load, lower_to_pte
from tools.bench import zoo

KERNEL = "et_cpu_quant::rms_norm.out"
SWITCH = "ET_CPU_RMS_NORM"
UNFUSED = ("aten::pow.Tensor_Scalar_out", "aten::rsqrt.out", "aten::mean.out")


class LlamaNorm(nn.Module):
    """The hand-written Llama form: eps is a Python float added to a tensor (a lifted constant)."""

    def __init__(self, dim: int, weight: torch.Tensor | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim) if weight is None else weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Norms(nn.Module):
    """A linear into the three norm forms, each read by the next linear."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.llama = LlamaNorm(dim)
        self.torch_norm = nn.RMSNorm(dim, eps=1e-5)
        with torch.no_grad():
            self.torch_norm.weight.uniform_(0.5, 1.5)
        self.plain = nn.RMSNorm(dim, elementwise_affine=False)  # eps None: finfo(float32).eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.llama(self.a(x) * 3.0)
        x = self.torch_norm(self.b(x))
        return self.plain(self.c(x))


class MeanOverSeq(nn.Module):
    """Normalizes over the sequence dim, not the last: left as it is."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6)


class SquaresReadTwice(nn.Module):
    """The squares also feed another output: left as it is."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        squares = x.pow(2)
        return x * torch.rsqrt(squares.mean(-1, keepdim=True) + 1e-6), squares + 1.0


class RowWeight(nn.Module):
    """A [1, D] weight: the norm is fused without it, the weight mul stays."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def _check_providers(
    pte: bytes, inputs: tuple[torch.Tensor, ...], count: int, expected: Any
) -> None:
    check_both_providers(pte, inputs, KERNEL, SWITCH, count, expected)


@pytest.mark.parametrize("dim", [32, 40, 77, 288])
def test_rms_norm_forms_are_one_op_matching_eager(dim: int) -> None:
    torch.manual_seed(dim)
    model = Norms(dim).eval()
    x = torch.randn(2, 9, dim)
    with torch.no_grad():
        expected = model(x)
    pte, payloads = lower_to_pte(model, (x,))
    kernels = payload_kernels(payloads)
    assert kernels.count(KERNEL) == 3, kernels
    assert not set(UNFUSED) & set(kernels), kernels
    # Only the input's `* 3.0` is left: x * scale and the weights' muls are in the norms.
    assert kernels.count("aten::mul.out") == 1, kernels
    _check_providers(pte, (x,), 3, expected)


def test_rms_norm_with_a_dynamic_sequence() -> None:
    torch.manual_seed(3)
    model = Norms(40).eval()
    loader.load_cpu_backend()
    partitioner = CpuPartitioner()
    exported = torch.export.export(
        model, (torch.randn(1, 8, 40),), dynamic_shapes=({1: Dim("seq", min=1, max=64)},)
    )
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    assert partitioner.report.left_out == (), partitioner.report
    module = load(bytes(edge.to_executorch().buffer))
    for seq in [1, 5, 64]:
        x = torch.randn(1, seq, 40)
        (actual,) = module.forward([x])
        with torch.no_grad():
            torch.testing.assert_close(actual, model(x), rtol=1e-5, atol=1e-5)
    lines = placements_of(KERNEL, loader.last_placement())
    assert len(lines) == 3 and all(": Optimized" in line for line in lines), lines


@pytest.mark.parametrize("model", [MeanOverSeq(), SquaresReadTwice()], ids=["seq", "shared"])
def test_look_alikes_are_left_alone(model: nn.Module) -> None:
    torch.manual_seed(4)
    x = torch.randn(2, 5, 24)
    pte, payloads = lower_to_pte(model.eval(), (x,))
    kernels = payload_kernels(payloads)
    assert KERNEL not in kernels and "aten::rsqrt.out" in kernels, kernels
    actual, _ = run_with_switch(pte, (x,), SWITCH, None)
    expected = model(x)
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    for got, want in zip(actual, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_row_weight_stays_a_mul() -> None:
    torch.manual_seed(5)
    model = RowWeight(24).eval()
    x = torch.randn(3, 24)
    pte, payloads = lower_to_pte(model, (x,))
    kernels = payload_kernels(payloads)
    assert kernels.count(KERNEL) == 1 and kernels.count("aten::mul.out") == 1, kernels
    with torch.no_grad():
        expected = model(x)
    _check_providers(pte, (x,), 1, expected)


def test_zoo_llama_norms_fused_and_matching_eager() -> None:
    model, inputs = zoo.create("llama", "small", seed=0)
    with torch.no_grad():
        expected = model(*inputs)
    pte, payloads = lower_to_pte(model, tuple(inputs))
    kernels = payload_kernels(payloads)
    assert kernels.count(KERNEL) == 5, kernels  # 2 a layer, 2 layers, and the final norm
    assert not set(UNFUSED) & set(kernels), kernels
    _check_providers(pte, tuple(inputs), 5, expected)
