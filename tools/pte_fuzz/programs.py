"""The delegated programs the fuzzer mutates, each lowered by the lowering tool's own pipeline.

- `cnn`: the ResNet-like example (small); its convolutions run on the Optimized (oneDNN) provider.
- `index`: the integer/index example: int64 gather/scatter, bool masks, integer math.
- `two_delegates`: conv -> ReLU -> atan -> conv -> linear; `atan` has no CPU route, so the program
  holds two CpuBackend delegates with a portable op between them.

Imports torch: call from a process that does not fork afterwards (see fork_server.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

PROGRAMS = ("cnn", "index", "two_delegates")


@dataclasses.dataclass(frozen=True)
class BuiltProgram:
    name: str
    pte: bytes
    inputs: tuple[torch.Tensor, ...]
    delegates: int


class _TwoDelegates(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.second = torch.nn.Conv2d(8, 8, 3, stride=2)
        self.head = torch.nn.Linear(8 * 7 * 7, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.atan(torch.relu(self.first(x)))  # atan: no route, between two delegates
        return self.head(torch.relu(self.second(hidden)).flatten(1))


def _two_delegates() -> tuple[torch.export.ExportedProgram, tuple[torch.Tensor, ...]]:
    torch.manual_seed(7)
    model = _TwoDelegates().eval()
    inputs = (torch.randn(1, 3, 16, 16),)
    with torch.no_grad():
        return torch.export.export(model, inputs), inputs


def _example(name: str) -> Callable[[], tuple[torch.export.ExportedProgram, tuple]]:
    def export() -> tuple[torch.export.ExportedProgram, tuple[torch.Tensor, ...]]:
        from tools.lower.program_io import export_example

        source = export_example(name, "small")
        return source.program, source.inputs

    return export


_EXPORTERS = {
    "cnn": _example("resnet"),
    "index": _example("index"),
    "two_delegates": _two_delegates,
}


def build(name: str) -> BuiltProgram:
    """Exports and lowers program `name` for the CPU delegate (deterministic: seeded weights)."""
    if name not in _EXPORTERS:
        raise ValueError(f"unknown program {name!r}; known: {', '.join(PROGRAMS)}")
    from tools.lower.lowering import CPU, lower

    program, inputs = _EXPORTERS[name]()
    lowered = lower(program, CPU)
    return BuiltProgram(name, bytes(lowered.pte), tuple(inputs), lowered.delegation.subgraphs)
