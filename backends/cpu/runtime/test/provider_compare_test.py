"""The all-Reference run of provider_compare (the optimized .pte with every op put on Reference at
init, ET_CPU_REFERENCE_ONLY=1) equals a program lowered with every route on Reference: the same
outputs to the bit and the same placement, on models whose optimized run uses the Optimized
provider (fused convolutions, channels-last layouts, broadcasts, pooling, softmax) or declines
an op to Reference."""

from typing import Any

import pytest
import torch

from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import load, lower_to_pte
from backends.cpu.runtime.test.provider_compare import (
    reference_routes,
    run_both,
    run_cases,
    run_pte,
)


class Mixed(torch.nn.Module):
    """conv + relu + residual add (fused), a broadcast gate, pooling, softmax, an add with
    alpha 2 (declined by oneDNN) and a second output."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(self.conv1(x))
        z = self.conv2(y) + y
        pooled = torch.nn.functional.avg_pool2d(z * gate, 2)
        return torch.softmax(pooled, dim=1), torch.add(pooled, y[:, :, :4, :4], alpha=2.0)


class Integer(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * b + a


_CASES: dict[str, tuple[torch.nn.Module, tuple[Any, ...]]] = {
    "mixed": (Mixed(), (torch.randn(2, 3, 8, 8), torch.rand(2, 8, 1, 1) + 0.5)),
    "integer": (Integer(), (torch.randint(-9, 9, (3, 4)), torch.randint(-9, 9, (1, 4)))),
}


@pytest.mark.parametrize("name", sorted(_CASES))
def test_forced_reference_equals_a_reference_lowering(name: str) -> None:
    torch.manual_seed(0)
    model, inputs = _CASES[name]
    model.eval()
    pte, _ = lower_to_pte(model, inputs)
    run_pte(pte, inputs, reference_only=False)
    optimized_placement = loader.last_placement()
    forced = run_pte(pte, inputs, reference_only=True)
    forced_placement = loader.last_placement()
    with reference_routes():
        reference_pte, _ = lower_to_pte(model, inputs)
    assert reference_pte != pte  # the provider ids differ
    lowered = run_pte(reference_pte, inputs, reference_only=False)
    lowered_placement = loader.last_placement()

    assert forced_placement == lowered_placement
    assert all(line.endswith(": Reference") for line in forced_placement), forced_placement
    assert len(forced) == len(lowered)
    for got, want in zip(forced, lowered, strict=True):
        assert got.dtype == want.dtype
        assert torch.equal(got, want), (got, want)
    if name == "mixed":
        # The switch is what put the ops on Reference: without it the same .pte uses oneDNN.
        assert any(": Optimized(oneDNN)" in line for line in optimized_placement)
        assert any("fused into" in line for line in optimized_placement)
    else:
        assert any("declined" in line for line in optimized_placement), optimized_placement


def test_the_switch_is_off_unless_it_is_1() -> None:
    model, inputs = _CASES["mixed"]
    pte, _ = lower_to_pte(model.eval(), inputs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ET_CPU_REFERENCE_ONLY", "0")
        load(pte).forward(list(inputs))
    assert any(": Optimized(oneDNN)" in line for line in loader.last_placement())


def test_run_cases_gives_each_case_what_run_both_gives_it() -> None:
    torch.manual_seed(1)
    cases = [_CASES["mixed"], _CASES["integer"], (Integer(), (torch.randn(2, 5), torch.randn(5)))]
    runs = run_cases(cases)
    assert len(runs) == len(cases)
    for (model, inputs), run in zip(cases, runs, strict=True):
        optimized, reference, placement = run_both(model.eval(), inputs)
        for got, want in zip(run.optimized + run.reference, optimized + reference, strict=True):
            assert torch.equal(got, want), (got, want)
        # Node names differ between the programs; kernels and placements do not.
        ops = [line for line in placement if line.startswith("aten_")]
        assert [line.split(" ", 1)[1] for line in run.placement] == [
            line.split(" ", 1)[1] for line in ops
        ]
