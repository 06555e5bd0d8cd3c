"""PT2E's float islands between int8 ops as int8 ops (quantized_fusion.py):
`dequantize -> max_pool2d -> quantize` on one grid as et_cpu_quant::max_pool2d (oneDNN's int8
pooling) and `dequantize(a) + dequantize(b) -> [relu] -> quantize` as et_cpu_quant::add (our
loops). Both give exactly the bytes of the undelegated program's float ops, in plain and in
channels-last layouts (between int8 convolutions the activations stay NHWC), with padding,
stride, dilation and ceil_mode; a pool whose output grid differs and a broadcasting add stay
float islands."""

from typing import Any

import pytest
import torch
from executorch.exir import to_edge, to_edge_transform_and_lower
from torch import nn

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.quantization import quantize_ptq
from backends.cpu.runtime import loader
from backends.cpu.runtime.test.int8_compare import assert_within_one_step, load
from backends.cpu.serialization.graph_reader import cpu_payloads, read_payload

_POOL = "et_cpu_quant::max_pool2d.out"
_ADD = "et_cpu_quant::add.out"
_Q = torch.ops.quantized_decomposed.quantize_per_tensor
_DQ = torch.ops.quantized_decomposed.dequantize_per_tensor


class _Pools(nn.Module):
    """Hand-quantized pools on a program input: (scale, zero point) in and out of each."""

    def __init__(self, second_grid: tuple[float, int]) -> None:
        super().__init__()
        self.second_grid = second_grid

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = _Q(x, 0.03, 4, -128, 127, torch.int8)
        y = nn.functional.max_pool2d(_DQ(q, 0.03, 4, -128, 127, torch.int8), 3, 2, 1)
        y = _DQ(_Q(y, 0.03, 4, -128, 127, torch.int8), 0.03, 4, -128, 127, torch.int8)
        u = _Q(x, 0.05, 120, 0, 255, torch.uint8)
        z = nn.functional.max_pool2d(_DQ(u, 0.05, 120, 0, 255, torch.uint8), 2, ceil_mode=True)
        u = _Q(z, 0.05, 120, 0, 255, torch.uint8)
        z = nn.functional.max_pool2d(_DQ(u, 0.05, 120, 0, 255, torch.uint8), 2, 1, dilation=2)
        grid = (*self.second_grid, 0, 255, torch.uint8)
        z = _DQ(_Q(z, *grid), *grid)
        return y, z


class _Adds(nn.Module):
    """Hand-quantized adds on program inputs: three grids, a ReLU, a ReLU6 requantized on its
    grid, and a broadcasting add that stays float."""

    def forward(
        self, x: torch.Tensor, y: torch.Tensor, row: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a = _DQ(_Q(x, 0.03, 4, -128, 127, torch.int8), 0.03, 4, -128, 127, torch.int8)
        b = _DQ(_Q(y, 0.05, -9, -128, 127, torch.int8), 0.05, -9, -128, 127, torch.int8)
        s = _DQ(
            _Q(torch.relu(a + b), 0.04, -100, -128, 127, torch.int8),
            0.04,
            -100,
            -128,
            127,
            torch.int8,
        )
        t = _Q(a + b, 0.02, 7, -128, 127, torch.int8)
        t = nn.functional.relu6(_DQ(t, 0.02, 7, -128, 127, torch.int8))
        t = _DQ(_Q(t, 0.02, 7, -128, 127, torch.int8), 0.02, 7, -128, 127, torch.int8)
        r = _DQ(_Q(row, 0.05, -9, -128, 127, torch.int8), 0.05, -9, -128, 127, torch.int8)
        u = _DQ(_Q(a + r, 0.04, 0, -128, 127, torch.int8), 0.04, 0, -128, 127, torch.int8)
        return s, t, u


class _ConvPoolConv(nn.Module):
    """Pools and adds between int8 convolutions: an add of a convolution (NHWC) and a program
    input (plain), a ResNet block whose add and pools keep NHWC, a pool a float mean also reads."""

    def __init__(self) -> None:
        super().__init__()
        self.mix = nn.Conv2d(3, 3, 3, padding=1)
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.conv = nn.Conv2d(16, 16, 3, padding=1)
        self.tail = nn.Conv2d(16, 8, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(self.mix(x) + x)
        y = nn.functional.max_pool2d(torch.relu(self.stem(y)), 3, 2, 1)
        y = torch.relu(self.conv(y) + y)
        y = nn.functional.max_pool2d(y, 2, ceil_mode=True)
        return self.tail(y), y.mean(dim=(2, 3))


def _lower(model: nn.Module, x: torch.Tensor) -> tuple[bytes, list[str], Any]:
    partitioner = CpuPartitioner()
    exported = torch.export.export(model, (x,))
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    assert not partitioner.report.left_out, partitioner.report
    payloads = cpu_payloads(edge.exported_program())
    kernels = [op.kernel for payload in payloads for op in read_payload(payload).ops]
    reference = load(bytes(to_edge(torch.export.export(model, (x,))).to_executorch().buffer))
    return bytes(edge.to_executorch().buffer), kernels, reference


@pytest.fixture(scope="module", autouse=True)
def _runtime() -> None:
    import torchao.quantization.pt2e  # noqa: F401  (registers quantized_decomposed ops)

    loader.load_cpu_backend()


def test_pools_give_the_bytes_of_the_float_pool() -> None:
    x = torch.randn(1, 5, 13, 11)
    pte, kernels, reference = _lower(_Pools((0.05, 120)), x)
    assert kernels.count(_POOL) == 3, kernels
    delegated = load(pte)
    generator = torch.Generator().manual_seed(1)
    for _ in range(5):
        x = torch.randn(1, 5, 13, 11, generator=generator) * 3
        for got, want in zip(delegated.forward([x]), reference.forward([x]), strict=True):
            assert torch.equal(got, want), (got - want).abs().max()


def test_a_pool_requantized_on_another_grid_stays_float() -> None:
    _, kernels, _ = _lower(_Pools((0.07, 100)), torch.randn(1, 5, 13, 11))
    assert kernels.count(_POOL) == 2, kernels  # the dilated one
    assert "aten::max_pool2d_with_indices.out" in kernels


def test_adds_give_the_bytes_of_the_float_add() -> None:
    inputs = (torch.randn(2, 6, 5, 7), torch.randn(2, 6, 5, 7), torch.randn(7))
    partitioner = CpuPartitioner()
    exported = torch.export.export(_Adds(), inputs)
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    assert not partitioner.report.left_out, partitioner.report
    payloads = cpu_payloads(edge.exported_program())
    kernels = [op.kernel for payload in payloads for op in read_payload(payload).ops]
    assert kernels.count(_ADD) == 2, kernels  # not the broadcasting one
    assert kernels.count("aten::add.out") == 1, kernels
    delegated = load(bytes(edge.to_executorch().buffer))
    reference = load(bytes(to_edge(torch.export.export(_Adds(), inputs)).to_executorch().buffer))
    generator = torch.Generator().manual_seed(1)
    for _ in range(5):
        x, y = (torch.randn(2, 6, 5, 7, generator=generator) * 3 for _ in range(2))
        args = [x, y, torch.randn(7, generator=generator)]
        for got, want in zip(delegated.forward(args), reference.forward(args), strict=True):
            assert torch.equal(got, want), (got - want).abs().max()


def test_pools_and_adds_between_int8_convolutions() -> None:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    samples = [(torch.randn(1, 3, 17, 15, generator=generator),) for _ in range(4)]
    quantized = quantize_ptq(_ConvPoolConv().eval(), samples)
    pte, kernels, reference = _lower(quantized, samples[0][0])
    assert kernels.count(_POOL) == 2 and kernels.count(_ADD) == 2, kernels
    assert "aten::max_pool2d_with_indices.out" not in kernels
    assert "aten::add.out" not in kernels
    programs = {}
    with pytest.MonkeyPatch.context() as env:
        for chain in ("1", "0"):  # NHWC between the int8 kernels, and plain everywhere
            env.setenv("ET_CPU_ONEDNN_CHAIN", chain)
            programs[chain] = load(pte)
            programs[chain].forward(list(samples[0]))  # binds (reads the switch) here
    for _ in range(3):
        x = torch.randn(1, 3, 17, 15, generator=generator)
        outputs = zip(programs["1"].forward([x]), programs["0"].forward([x]), strict=True)
        for chained, plain in outputs:
            assert torch.equal(chained, plain)
    exported = torch.export.export(quantized, samples[0])
    (output,) = [n for n in exported.graph.nodes if n.op == "output"]
    assert_within_one_step(
        programs["1"],
        reference,
        lambda: torch.randn(1, 3, 17, 15, generator=generator),
        float(output.args[0][0].args[1]),
    )
