"""Per-tensor quantize / dequantize on the optimized provider's own loops (quantize_convert.h):
the bytes and floats of ExecuTorch's portable quantized kernels exactly, on int8 and uint8, with
zero points, a narrowed range, halfway values (ties to even), values far outside the range and
lengths that leave a scalar tail after the 16-wide loop."""

from typing import Any

import pytest
import torch
from executorch.exir import to_edge, to_edge_transform_and_lower
from torch import nn

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.runtime import loader
from backends.cpu.runtime.test.int8_compare import load


class RoundTrip(nn.Module):
    def __init__(self, scale: float, zero_point: int, low: int, high: int, dtype: torch.dtype):
        super().__init__()
        self.qparams = (scale, zero_point, low, high, dtype)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = torch.ops.quantized_decomposed.quantize_per_tensor(x, *self.qparams)
        # relu keeps the dequantized float inside the delegate's graph as a computed value.
        y = torch.ops.quantized_decomposed.dequantize_per_tensor(q, *self.qparams)
        return q, torch.relu(y)


CASES = [
    (0.0173, 0, -128, 127, torch.int8),
    (0.05, -7, -128, 127, torch.int8),
    (0.1, 128, 0, 255, torch.uint8),
    (0.03125, 3, -100, 90, torch.int8),  # an exact power of two: many exact ties
]


def _inputs(scale: float, count: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    wide = torch.randn(count, generator=generator) * 200 * scale
    ties = (torch.randint(-300, 300, (count,), generator=generator) + 0.5) * scale
    return torch.cat([wide, ties, torch.tensor([0.0, -0.0, 1e9, -1e9])])


@pytest.mark.parametrize("case", CASES, ids=[f"{c[4]}-zp{c[1]}" for c in CASES])
def test_round_trip_matches_the_portable_kernels_exactly(case: Any) -> None:
    import torchao.quantization.pt2e  # noqa: F401  (registers quantized_decomposed ops)

    loader.load_cpu_backend()
    x = _inputs(case[0], 1000).reshape(1, -1)  # 2004 elements: a tail of 4 after 16-wide rows
    module = RoundTrip(*case)
    exported = torch.export.export(module, (x,))
    partitioner = CpuPartitioner()
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    assert not partitioner.report.left_out, partitioner.report
    delegated = load(bytes(edge.to_executorch().buffer))
    got = delegated.forward([x])
    placement = loader.last_placement()
    converts = [line for line in placement if "quantize_per_tensor" in line]
    assert len(converts) == 2 and all("Optimized" in line for line in converts), placement
    reference = load(bytes(to_edge(torch.export.export(module, (x,))).to_executorch().buffer))
    want = reference.forward([x])
    assert got[0].dtype == case[4]
    assert torch.equal(got[0], want[0]), (got[0].int() - want[0].int()).abs().max()
    assert torch.equal(got[1], want[1]), (got[1] - want[1]).abs().max()
