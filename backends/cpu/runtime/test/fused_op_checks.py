"""What the tests of preprocess's fused float ops share (rotary_test, rms_norm_test,
safe_softmax_test): the kernels a program's payloads name, a run with the op's environment switch
set or unset, and the check that each provider runs the op and matches the expected output."""

from typing import Any

import pytest
import torch
from executorch.extension.pybindings import portable_lib

from backends.cpu.runtime import loader
from backends.cpu.serialization.schema import fb

_BUFFERS: list[bytes] = []  # the runtime does not own a program's buffer


def payload_kernels(payloads: list[bytes]) -> list[str]:
    """The kernel of every op in the delegate payloads, in order."""
    kernels = []
    for payload in payloads:
        graph = fb.Graph.GetRootAs(payload, 0)
        kernels += [graph.Ops(i).Kernel().decode() for i in range(graph.OpsLength())]
    return kernels


def run_with_switch(
    pte: bytes, inputs: tuple[torch.Tensor, ...], variable: str, value: str | None
) -> tuple[Any, list[str]]:
    """Loads `pte` and runs it once with `variable` set to `value` (None: unset) while the
    delegate initializes; its outputs and the placement lines."""
    with pytest.MonkeyPatch.context() as patch:
        if value is None:
            patch.delenv(variable, raising=False)
        else:
            patch.setenv(variable, value)
        loader.load_cpu_backend()
        _BUFFERS.append(pte)
        module: Any = portable_lib._load_for_executorch_from_buffer(pte)
        outputs = module.forward(list(inputs))  # init (reads the switch) runs here
        return outputs, loader.last_placement()


def placements_of(kernel: str, placement: list[str]) -> list[str]:
    return [line for line in placement if kernel in line]


def check_both_providers(
    pte: bytes,
    inputs: tuple[torch.Tensor, ...],
    kernel: str,
    variable: str,
    count: int,
    expected: torch.Tensor,
    tolerance: float = 1e-5,
) -> None:
    """The program's one output matches `expected` with `count` ops of `kernel` on the Optimized
    provider (`variable` unset), then all on the Reference provider (`variable`=0)."""
    for value, provider in [(None, "Optimized"), ("0", "Reference")]:
        (actual,), placement = run_with_switch(pte, inputs, variable, value)
        lines = placements_of(kernel, placement)
        assert len(lines) == count and all(f": {provider}" in line for line in lines), lines
        assert not torch.isnan(actual).any()
        torch.testing.assert_close(actual, expected, rtol=tolerance, atol=tolerance)
