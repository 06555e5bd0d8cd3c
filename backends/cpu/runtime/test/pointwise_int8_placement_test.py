"""Where a PT2E int8 program's 1x1 convolutions run: on our int8 1x1 kernel
(kernels/pointwise_int8.h) by default when they are stride 1, unpadded, with input and output
chained channels-last and a multiple of 4 input channels; on oneDNN otherwise (here one writing
the NCHW graph output) and for all of them with
ET_CPU_OWN_POINTWISE_INT8=0. Real torch.export, XNNPACK's quantizer, the CPU partitioner,
ExecuTorch's runtime: the Optimized provider's summary counts the kernel, the switch set to 1
places them as the default does, and the program stays within issue 18's criterion of the
undelegated one on either kernel."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from executorch.exir import to_edge, to_edge_transform_and_lower
from torch import nn

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.quantization import quantize_ptq
from backends.cpu.runtime import loader
from backends.cpu.runtime.test.int8_compare import assert_within_one_step, load

_SWITCH = "ET_CPU_OWN_POINTWISE_INT8"
_COUNT = " pointwise_int8:avx512_vnni"


def _has_vnni() -> bool:
    cpuinfo = Path("/proc/cpuinfo")
    return cpuinfo.exists() and "avx512_vnni" in cpuinfo.read_text()


class Mobile(nn.Module):
    """depthwise_int8_placement_test's chain: the 1x1 expand between two chained depthwise
    convolutions is channels-last on both sides (ours); the last 1x1 (reading a oneDNN
    depthwise's output, writing the NCHW graph output) stays on oneDNN."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Conv2d(3, 3, 3, padding=1, groups=3)
        self.stem = nn.Conv2d(3, 32, 3, stride=2, padding=1)
        self.dw1 = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.expand = nn.Conv2d(32, 144, 1)  # ours: 3 + 3 + 3 vectors
        self.dw2 = nn.Conv2d(144, 144, 3, stride=2, padding=1, groups=144)
        self.dw3 = nn.Conv2d(144, 144, 5, padding=2, groups=144)
        self.dw4 = nn.Conv2d(144, 144, 7, padding=3, groups=144)
        self.project = nn.Conv2d(144, 24, 1)  # writes the graph output: oneDNN

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.stem(torch.relu(self.first(x))))
        y = torch.relu(self.dw1(y))
        y = torch.relu(self.expand(y))
        y = torch.relu(self.dw2(y))
        y = self.dw3(y)
        y = torch.relu(self.dw4(y))
        return self.project(y)


OURS = 1  # expand


def _input(generator: torch.Generator) -> torch.Tensor:
    return torch.randn(1, 3, 30, 27, generator=generator)


def _summary(placement: list[str]) -> str:
    (line,) = [entry for entry in placement if entry.startswith("Optimized(oneDNN): ")]
    return line


def _count(placement: list[str]) -> int:
    summary = _summary(placement)
    if _COUNT not in summary:
        return 0
    return int(summary.split(_COUNT)[0].split(", ")[-1])


@pytest.fixture(scope="module")
def programs() -> Iterator[dict[str, Any]]:
    loader.load_cpu_backend()
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    samples = [(_input(generator),) for _ in range(4)]
    quantized = quantize_ptq(Mobile().eval(), samples)
    exported = torch.export.export(quantized, samples[0])
    partitioner = CpuPartitioner()
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    assert not partitioner.report.left_out, partitioner.report
    pte = bytes(edge.to_executorch().buffer)
    loaded: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as env:
        # The switch is read when the delegate binds its kernels, on the first forward.
        for name, switch in (("default", None), ("ours", "1"), ("onednn", "0")):
            if switch is None:
                env.delenv(_SWITCH, raising=False)
            else:
                env.setenv(_SWITCH, switch)
            loaded[name] = load(pte)
            loaded[name].forward(list(samples[0]))
            loaded[f"{name} placement"] = loader.last_placement()
    loaded["reference"] = load(bytes(to_edge(exported).to_executorch().buffer))
    (output,) = [n for n in exported.graph.nodes if n.op == "output"]
    loaded["output_scale"] = float(output.args[0][0].args[1])
    yield loaded


def test_chained_1x1_convolutions_run_on_our_kernel_by_default(programs: dict[str, Any]) -> None:
    expected = OURS if _has_vnni() else 0
    assert _count(programs["default placement"]) == expected, _summary(
        programs["default placement"]
    )


def test_switch_on_places_as_the_default(programs: dict[str, Any]) -> None:
    assert _count(programs["ours placement"]) == _count(programs["default placement"])


def test_switch_off_keeps_onednn(programs: dict[str, Any]) -> None:
    assert _count(programs["onednn placement"]) == 0, _summary(programs["onednn placement"])


@pytest.mark.parametrize("name", ["default", "onednn"])
def test_program_matches_the_undelegated_one(programs: dict[str, Any], name: str) -> None:
    generator = torch.Generator().manual_seed(1)
    assert_within_one_step(
        programs[name], programs["reference"], lambda: _input(generator), programs["output_scale"]
    )
