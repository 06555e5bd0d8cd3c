"""int8 ops split on the provider's work pool (quantized_kernels.cc): convolutions into bands of
output rows (split_rows), each a convolution of its own over a slice of the same NHWC buffers,
padded only at the image's edges; linears into blocks of output columns (split_columns), each
with its own block of the weights, scales and bias. A split must give exactly the bytes of the
whole op (ET_CPU_ONEDNN_INT8_SPLIT=0), and stay within issue 18's criterion against the
undelegated program. Convolutions: band edges inside the padding, in a strided or dilated
window, fewer output rows than bands, 1x1 convolutions whose bands lay the weights out their
own way (on oneDNN: ET_CPU_OWN_POINTWISE_INT8=0; our 1x1 kernel in pixel slices otherwise).
Linears: blocks of unequal width, a layer too narrow to
split, no bias."""

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import nn

from backends.cpu.runtime.test.int8_compare import (
    add_reference,
    assert_within_one_step,
    load,
    lower_quantized,
)

_SPLIT = "ET_CPU_ONEDNN_INT8_SPLIT"
_THREADS = "ET_CPU_ONEDNN_THREADS"
_OWN_POINTWISE = "ET_CPU_OWN_POINTWISE_INT8"

MakeInput = Callable[[torch.Generator], torch.Tensor]


class Geometries(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)  # 19 rows -> 10
        self.wide = nn.Conv2d(16, 16, 5, padding=2)
        self.dilated = nn.Conv2d(16, 32, 3, padding=2, dilation=2)
        self.depthwise = nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=32)  # 10 -> 5 rows
        self.pointwise = nn.Conv2d(32, 24, 1)
        self.tail = nn.Conv2d(24, 8, 3, stride=2)  # 5 -> 2 rows: fewer rows than bands

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.stem(x))
        y = torch.relu(self.wide(y))
        y = nn.functional.relu6(self.dilated(y))
        y = torch.relu(self.depthwise(y))
        return self.tail(self.pointwise(y))


class Pointwise(nn.Module):
    """MobileNetV2's 14x14 stage: 1x1 convolutions whose row bands (3-4 rows) choose another
    weight blocking than the whole op, so split_rows lays the weights out the bands' way."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 64, 3, padding=1)
        self.expand = nn.Conv2d(64, 384, 1)
        self.project = nn.Conv2d(384, 64, 1)
        self.narrow = nn.Conv2d(64, 192, 1)
        self.back = nn.Conv2d(192, 64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.stem(x))
        y = self.project(nn.functional.relu6(self.expand(y)))
        return self.back(nn.functional.relu6(self.narrow(y)))


class Columns(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wide = nn.Linear(40, 328)  # 5 blocks of 64 in 4 bands, the last 2 blocks + 8 columns
        self.plain = nn.Linear(328, 192, bias=False)  # 3 bands
        self.narrow = nn.Linear(192, 100)  # one block: whole

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.wide(x))
        y = nn.functional.relu6(self.plain(y))
        return self.narrow(y)


def _image(generator: torch.Generator) -> torch.Tensor:
    return torch.randn(1, 3, 19, 23, generator=generator)


def _image14(generator: torch.Generator) -> torch.Tensor:
    return torch.randn(1, 3, 14, 14, generator=generator)


def _rows(generator: torch.Generator) -> torch.Tensor:
    return torch.randn(7, 40, generator=generator)


def _programs(
    make_model: Callable[[], nn.Module], make_input: MakeInput, own_pointwise: str = "1"
) -> dict[str, Any]:
    """The model quantized and lowered, loaded split and whole (1x1 convolutions on our kernel
    or, with `own_pointwise` "0", on oneDNN's), and undelegated."""
    torch.manual_seed(0)  # before the model's initial weights
    pte, exported, samples = lower_quantized(make_model(), make_input)
    loaded: dict[str, Any] = {"make_input": make_input}
    with pytest.MonkeyPatch.context() as env:
        env.setenv(_THREADS, "2")  # a pool of 2 (capped at the CPUs: one CPU has no pool)
        env.setenv(_OWN_POINTWISE, own_pointwise)
        # Each program binds its kernels (and reads the switch) on its first forward.
        for name, split in (("split", "1"), ("whole", "0")):
            env.setenv(_SPLIT, split)
            loaded[name] = load(pte)
            loaded[name].forward(list(samples[0]))
    return add_reference(loaded, exported)


@pytest.fixture(scope="module", params=["conv", "pointwise", "pointwise_onednn", "linear"])
def programs(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    if request.param == "conv":
        yield _programs(Geometries, _image)
    elif request.param == "pointwise":
        yield _programs(Pointwise, _image14)
    elif request.param == "pointwise_onednn":
        yield _programs(Pointwise, _image14, own_pointwise="0")
    else:
        yield _programs(Columns, _rows)


def test_split_gives_the_bytes_of_the_whole_op(programs: dict[str, Any]) -> None:
    generator = torch.Generator().manual_seed(1)
    for _ in range(5):
        x = programs["make_input"](generator)
        split = programs["split"].forward([x])[0]
        whole = programs["whole"].forward([x])[0]
        assert torch.equal(split, whole), (split - whole).abs().max()


def test_split_program_matches_the_undelegated_one(programs: dict[str, Any]) -> None:
    generator = torch.Generator().manual_seed(2)
    assert_within_one_step(
        programs["split"],
        programs["reference"],
        lambda: programs["make_input"](generator),
        programs["output_scale"],
    )
