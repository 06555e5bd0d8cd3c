"""Shared by the int8 model tests: loading .pte bytes, issue 18's criterion against the same
quantized program without a delegate (>= 99.9% of outputs equal, the rest one step apart), and
what the kernel placement tests share (a model lowered once and loaded under each setting of a
kernel switch, our kernels counted in the Optimized provider's summary)."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from executorch.extension.pybindings import portable_lib
from torch import nn

from backends.cpu.quantization import StepAgreement

_BUFFERS: list[bytes] = []  # the runtime does not own a program's buffer


def load(pte: bytes) -> Any:
    """The loaded program; its bytes are kept alive for the process."""
    _BUFFERS.append(pte)
    return portable_lib._load_for_executorch_from_buffer(pte)


def assert_within_one_step(
    delegated: Any,
    reference: Any,
    make_input: Callable[[], torch.Tensor],
    step: float | torch.Tensor,
    runs: int = 20,
) -> None:
    """Both programs' first outputs on `runs` inputs, measured in quantization steps `step` (a
    scale, or per-channel scales broadcastable to the output)."""
    agreement = StepAgreement()
    for _ in range(runs):
        x = make_input()
        agreement.add(delegated.forward([x])[0], reference.forward([x])[0], step)
    equal, total, worst = agreement.equal, agreement.outputs, agreement.worst_steps
    print(f"against portable: {equal}/{total} outputs equal, at most {worst:.0f} step apart")
    assert worst <= 1, f"outputs differ by {worst} quantization steps"
    assert equal >= 0.999 * total, f"{equal}/{total} outputs equal"


def has_vnni() -> bool:
    """Whether this CPU has AVX-512 VNNI (our int8 kernels decline every shape without)."""
    cpuinfo = Path("/proc/cpuinfo")
    return cpuinfo.exists() and "avx512_vnni" in cpuinfo.read_text()


def optimized_summary(placement: list[str]) -> str:
    """The Optimized provider's summary line of a placement."""
    (line,) = [entry for entry in placement if entry.startswith("Optimized(oneDNN): ")]
    return line


def kernel_count(placement: list[str], implementation: str) -> int:
    """How many ops the summary counts on our kernel `implementation` (0 when not listed)."""
    summary = optimized_summary(placement)
    marker = f" {implementation}"
    if marker not in summary:
        return 0
    return int(summary.split(marker)[0].split(", ")[-1])


def assert_kernel_count(placement: list[str], implementation: str, expected: int) -> None:
    """The summary counts `expected` ops on our kernel `implementation`."""
    got = kernel_count(placement, implementation)
    assert got == expected, f"{got} != {expected}: {optimized_summary(placement)}"


def assert_matches_the_reference(
    programs: dict[str, Any], name: str, make_input: Callable[[torch.Generator], torch.Tensor]
) -> None:
    """Issue 18's criterion for the program loaded as `name` by switch_programs, on seeded
    inputs."""
    generator = torch.Generator().manual_seed(1)
    assert_within_one_step(
        programs[name],
        programs["reference"],
        lambda: make_input(generator),
        programs["output_scale"],
    )


def lower_quantized(
    model: nn.Module, make_input: Callable[[torch.Generator], torch.Tensor]
) -> tuple[bytes, Any, list[tuple[torch.Tensor]]]:
    """`model` quantized with PT2E on 4 seeded samples and lowered whole to the delegate: the
    .pte bytes, the exported quantized program and the samples."""
    from executorch.exir import to_edge_transform_and_lower

    from backends.cpu.partition.cpu_partitioner import CpuPartitioner
    from backends.cpu.quantization import quantize_ptq
    from backends.cpu.runtime import loader

    loader.load_cpu_backend()
    generator = torch.Generator().manual_seed(0)
    samples = [(make_input(generator),) for _ in range(4)]
    quantized = quantize_ptq(model.eval(), samples)
    exported = torch.export.export(quantized, samples[0])
    partitioner = CpuPartitioner()
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    assert not partitioner.report.left_out, partitioner.report
    return bytes(edge.to_executorch().buffer), exported, samples


def add_reference(loaded: dict[str, Any], exported: Any) -> dict[str, Any]:
    """`loaded` with the undelegated program ("reference") and the output's scale
    ("output_scale") of `exported` added."""
    from executorch.exir import to_edge

    loaded["reference"] = load(bytes(to_edge(exported).to_executorch().buffer))
    (output,) = [n for n in exported.graph.nodes if n.op == "output"]
    loaded["output_scale"] = float(output.args[0][0].args[1])
    return loaded


def switch_programs(
    model: nn.Module,
    make_input: Callable[[torch.Generator], torch.Tensor],
    switch: str,
    settings: dict[str, str | None],
) -> dict[str, Any]:
    """`model` lowered (lower_quantized), loaded once per setting of the environment variable
    `switch` (name -> value, None: unset) with its placement ("<name> placement"), and the
    reference (add_reference)."""
    from backends.cpu.runtime import loader

    pte, exported, samples = lower_quantized(model, make_input)
    loaded: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as env:
        # The switch is read when the delegate binds its kernels, on the first forward.
        for name, value in settings.items():
            if value is None:
                env.delenv(switch, raising=False)
            else:
                env.setenv(switch, value)
            loaded[name] = load(pte)
            loaded[name].forward(list(samples[0]))
            loaded[f"{name} placement"] = loader.last_placement()
    return add_reference(loaded, exported)


class MobileChain(nn.Module):
    """Depthwise and 1x1 convolutions in MobileNetV2's places and a few that stay on oneDNN (the
    depthwise and 1x1 placement tests' model; on mobile_input)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Conv2d(3, 3, 3, padding=1, groups=3)  # reads the NCHW input: oneDNN
        self.stem = nn.Conv2d(3, 32, 3, stride=2, padding=1)
        self.dw1 = nn.Conv2d(32, 32, 3, padding=1, groups=32)  # ours
        self.expand = nn.Conv2d(32, 144, 1)  # our 1x1 (chained both sides)
        self.dw2 = nn.Conv2d(144, 144, 3, stride=2, padding=1, groups=144)  # ours (channel tail)
        self.dw3 = nn.Conv2d(144, 144, 5, padding=2, groups=144)  # ours (5x5)
        self.dw4 = nn.Conv2d(144, 144, 7, padding=3, groups=144)  # 7x7: oneDNN
        self.dilated = nn.Conv2d(144, 144, 3, padding=2, dilation=2, groups=144)  # oneDNN
        self.project = nn.Conv2d(144, 24, 1)  # writes the NCHW graph output: oneDNN

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.stem(torch.relu(self.first(x))))
        y = torch.relu(self.dw1(y))
        y = torch.relu(self.expand(y))
        y = torch.relu(self.dw2(y))
        y = self.dw3(y)
        y = torch.relu(self.dw4(y))
        y = torch.relu(self.dilated(y))
        return self.project(y)


def mobile_input(generator: torch.Generator) -> torch.Tensor:
    """MobileChain's input."""
    return torch.randn(1, 3, 30, 27, generator=generator)
