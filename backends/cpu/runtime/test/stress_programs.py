"""The concurrency stress tests' programs (issue 43), fully delegated to the CPU delegate: a float
MobileNetV3-style CNN, an int8 CNN (PT2E), a Llama-style decoder and a CNN with a bounded dynamic
batch. `stress_programs --out DIR` writes them as DIR/NAME.pte (a build step: the C++ stress test
and the Python one read the same files)."""

import argparse
import os
from collections.abc import Callable, Sequence

import torch
from executorch.exir import EdgeProgramManager, to_edge_transform_and_lower
from torch import nn
from torch.export import Dim

from backends.cpu import symbolic_dims
from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.quantization import quantize_ptq
from tools.bench import zoo

DYNAMIC_MAX_BATCH = 4


class SmallCnn(nn.Module):
    """Convolutions (one strided), ReLU, max pooling, a linear: int8 and dynamic-batch stand-in."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv1(x))
        y = torch.max_pool2d(torch.relu(self.conv2(y)), 2)
        return self.fc(y.flatten(1))


def _lowered(exported: torch.export.ExportedProgram) -> EdgeProgramManager:
    partitioner = CpuPartitioner()
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    if partitioner.report.left_out:
        raise RuntimeError(f"not fully delegated: {partitioner.report}")
    return edge


def _zoo(name: str) -> bytes:
    model, inputs = zoo.create(name, "small")
    edge = _lowered(torch.export.export(model, inputs))
    return bytes(edge.to_executorch().buffer)


def int8_cnn() -> bytes:
    torch.manual_seed(0)
    samples = [(torch.randn(1, 3, 16, 16),) for _ in range(4)]
    quantized = quantize_ptq(SmallCnn().eval(), samples)
    edge = _lowered(torch.export.export(quantized, samples[0]))
    return bytes(edge.to_executorch().buffer)


def dynamic_cnn() -> bytes:
    torch.manual_seed(0)
    model = SmallCnn().eval()
    example = (torch.randn(2, 3, 16, 16),)
    shapes = ({0: Dim("batch", min=1, max=DYNAMIC_MAX_BATCH)},)
    edge = _lowered(torch.export.export(model, example, dynamic_shapes=shapes))
    return bytes(symbolic_dims.to_executorch(edge).buffer)


def example_inputs(name: str, batch: int = 1) -> tuple[torch.Tensor, ...]:
    """Seeded inputs of program `name` (`batch`: the dynamic CNN's batch size)."""
    generator = torch.Generator().manual_seed(batch)
    if name == "float_cnn":
        return (torch.randn(1, 3, 32, 32, generator=generator),)
    if name == "int8_cnn":
        return (torch.randn(1, 3, 16, 16, generator=generator),)
    if name == "decoder":
        return (torch.randint(0, 64, (1, 12), generator=generator),)
    if name == "dynamic_cnn":
        return (torch.randn(batch, 3, 16, 16, generator=generator),)
    raise ValueError(f"unknown stress program {name!r}; known: {', '.join(PROGRAMS)}")


PROGRAMS: dict[str, Callable[[], bytes]] = {
    "float_cnn": lambda: _zoo("mobilenet_v3"),
    "int8_cnn": int8_cnn,
    "decoder": lambda: _zoo("llama"),
    "dynamic_cnn": dynamic_cnn,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="folder for NAME.pte (created)")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    for name, make in PROGRAMS.items():
        with open(os.path.join(args.out, f"{name}.pte"), "wb") as f:
            f.write(make())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
