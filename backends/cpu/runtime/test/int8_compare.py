"""Shared by the int8 model tests: loading .pte bytes, and issue 18's criterion against the same
quantized program without a delegate (>= 99.9% of outputs equal, the rest one step apart)."""

from collections.abc import Callable
from typing import Any

import torch
from executorch.extension.pybindings import portable_lib

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
