"""Where a PT2E int8 program's depthwise convolutions run: on our int8 depthwise kernel
(kernels/depthwise_int8.h) when their input and output are chained channels-last, on oneDNN
otherwise (a depthwise reading the NCHW graph input, a 7x7 kernel, a dilated one) and for all of
them with ET_CPU_OWN_DEPTHWISE_INT8=0. Real torch.export, XNNPACK's quantizer, the CPU
partitioner, ExecuTorch's runtime: the Optimized provider's summary counts the kernel, and the
program stays within issue 18's criterion of the undelegated one, on either kernel."""

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from backends.cpu.runtime.test.int8_compare import (
    MobileChain,
    assert_kernel_count,
    assert_matches_the_reference,
    has_vnni,
    mobile_input,
    switch_programs,
)

_SWITCH = "ET_CPU_OWN_DEPTHWISE_INT8"
_KERNEL = "depthwise_int8:avx512_vnni"


OURS = 3  # MobileChain's dw1, dw2, dw3


@pytest.fixture(scope="module")
def programs() -> Iterator[dict[str, Any]]:
    torch.manual_seed(0)  # before the model's initial weights
    yield switch_programs(MobileChain(), mobile_input, _SWITCH, {"ours": "1", "onednn": "0"})


def test_chained_depthwise_convolutions_run_on_our_kernel(programs: dict[str, Any]) -> None:
    assert_kernel_count(programs["ours placement"], _KERNEL, OURS if has_vnni() else 0)


def test_switch_off_keeps_onednn(programs: dict[str, Any]) -> None:
    assert_kernel_count(programs["onednn placement"], _KERNEL, 0)


@pytest.mark.parametrize("name", ["ours", "onednn"])
def test_program_matches_the_undelegated_one(programs: dict[str, Any], name: str) -> None:
    assert_matches_the_reference(programs, name, mobile_input)
