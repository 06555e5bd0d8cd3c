"""Where a PT2E int8 program's 1x1 convolutions run: on our int8 1x1 kernel
(kernels/pointwise_int8.h) by default when they are stride 1, unpadded, with input and output
chained channels-last and a multiple of 4 input channels; on oneDNN otherwise (here one writing
the NCHW graph output) and for all of them with
ET_CPU_OWN_POINTWISE_INT8=0. Real torch.export, XNNPACK's quantizer, the CPU partitioner,
ExecuTorch's runtime: the Optimized provider's summary counts the kernel, the switch set to 1
places them as the default does, and the program stays within issue 18's criterion of the
undelegated one on either kernel."""

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from backends.cpu.runtime.test.int8_compare import (
    MobileChain,
    assert_kernel_count,
    assert_matches_the_reference,
    has_vnni,
    kernel_count,
    mobile_input,
    switch_programs,
)

_SWITCH = "ET_CPU_OWN_POINTWISE_INT8"
_KERNEL = "pointwise_int8:avx512_vnni"


OURS = 1  # MobileChain's expand (the project writes the graph output)


@pytest.fixture(scope="module")
def programs() -> Iterator[dict[str, Any]]:
    torch.manual_seed(0)  # before the model's initial weights
    yield switch_programs(
        MobileChain(), mobile_input, _SWITCH, {"default": None, "ours": "1", "onednn": "0"}
    )


def test_chained_1x1_convolutions_run_on_our_kernel_by_default(programs: dict[str, Any]) -> None:
    assert_kernel_count(programs["default placement"], _KERNEL, OURS if has_vnni() else 0)


def test_switch_on_places_as_the_default(programs: dict[str, Any]) -> None:
    assert kernel_count(programs["ours placement"], _KERNEL) == kernel_count(
        programs["default placement"], _KERNEL
    )


def test_switch_off_keeps_onednn(programs: dict[str, Any]) -> None:
    assert_kernel_count(programs["onednn placement"], _KERNEL, 0)


@pytest.mark.parametrize("name", ["default", "onednn"])
def test_program_matches_the_undelegated_one(programs: dict[str, Any], name: str) -> None:
    assert_matches_the_reference(programs, name, mobile_input)
