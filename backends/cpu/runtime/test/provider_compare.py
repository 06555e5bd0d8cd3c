"""Runs a model on the CPU delegate twice, with the route table's providers and with every route
forced to Reference (ExecuTorch's kernels), for tests that compare the Optimized provider with
the reference; plus the tolerance they compare with."""

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import hypothesis
import pytest
import torch

from backends.cpu import routes
from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import load, lower_cases, lower_to_pte
from backends.cpu.serialization import graph_writer

# oneDNN accumulates in a different order (blocked K, FMA) than ExecuTorch's loops: rounding
# differences grow with the reduction length, so the bound is relative to the output's scale.
ATOL = 1e-4
RTOL = 1e-4


def assert_close_scaled(actual: torch.Tensor, expected: torch.Tensor) -> None:
    scale = max(1.0, float(expected.detach().abs().max()))
    torch.testing.assert_close(actual, expected, atol=ATOL * scale, rtol=RTOL)


def _reference_route(target: object) -> routes.Route | None:
    route = routes.route_for(target)
    if route is None:
        return None
    return dataclasses.replace(route, provider=routes.Provider.REFERENCE)


@contextlib.contextmanager
def reference_routes() -> Iterator[None]:
    """Within: lowerings route every op to Reference (ExecuTorch's kernels)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(graph_writer, "route_for", _reference_route)
        yield


# The runtime's switch that puts every op of a payload on Reference when a delegate is initialized.
ENV_REFERENCE_ONLY = "ET_CPU_REFERENCE_ONLY"


def run_pte(pte: bytes, inputs: tuple[Any, ...], reference_only: bool) -> list[torch.Tensor]:
    """`pte` run once, with the payload's providers or (`reference_only`) every op on Reference."""
    with pytest.MonkeyPatch.context() as patch:
        # A delegate reads the switch in init, which portable_lib runs on the first forward.
        if reference_only:
            patch.setenv(ENV_REFERENCE_ONLY, "1")
        else:
            patch.delenv(ENV_REFERENCE_ONLY, raising=False)
        return list(load(pte).forward(list(inputs)))


def run_both(
    model: torch.nn.Module, inputs: tuple[Any, ...], with_reference: bool = True
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[str]]:
    """Outputs with the route table's providers, outputs all-Reference (eager's when
    `with_reference` is false), and the placement log of the optimized lowering.

    All-Reference runs the same .pte with the providers reset at init (ENV_REFERENCE_ONLY): a
    lowering with every route on Reference writes the same payload but for the provider ids
    (provider_compare_test holds the two equal)."""
    pte, _ = lower_to_pte(model, inputs)
    if not with_reference:
        out_opt = run_pte(pte, inputs, reference_only=False)
        placement = _placement()
        expected = model(*inputs)
        return (
            out_opt,
            list(expected if isinstance(expected, tuple) else [expected]),
            placement,
        )
    return run_pte_both(pte, inputs)


def _placement() -> list[str]:
    placement = loader.last_placement()
    placement.append(f"provider bytes: {loader.last_provider_bytes()}")
    return placement


def run_pte_both(
    pte: bytes, inputs: tuple[Any, ...]
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[str]]:
    """run_both on a lowered .pte: for running one lowering under several runtime switches."""
    out_opt = run_pte(pte, inputs, reference_only=False)
    placement = _placement()
    return out_opt, run_pte(pte, inputs, reference_only=True), placement


def placed(placement: list[str], kernel: str, where: str) -> list[str]:
    return [line for line in placement if f" {kernel}: {where}" in line]


def check_placed(
    model: torch.nn.Module, inputs: tuple[Any, ...], kernel: str, where: str
) -> list[str]:
    """Asserts the model's first output matches all-Reference and eager (assert_close_scaled)
    and that `kernel` was placed on `where`; returns those placement lines."""
    return check_placed_cases([(model, inputs, kernel, where)])[0]


def check_placed_cases(
    cases: Sequence[tuple[torch.nn.Module, tuple[Any, ...], str, str]],
) -> list[list[str]]:
    """check_placed for each (model, inputs, kernel, where), all in one lowering (run_cases)."""
    runs = run_cases([(model, inputs) for model, inputs, _, _ in cases])
    lines = []
    for index, ((_, _, kernel, where), run) in enumerate(zip(cases, runs, strict=True)):
        expected = run.expected[0]
        assert run.optimized[0].shape == expected.shape, (index, kernel)
        assert_close_scaled(run.optimized[0], run.reference[0])
        assert_close_scaled(run.optimized[0], expected)
        case_lines = placed(run.placement, kernel, where)
        assert case_lines, (index, kernel, where, run.placement)
        lines.append(case_lines)
    return lines


@dataclasses.dataclass
class CaseRun:
    """One case of run_cases: its outputs with the route table's providers, all-Reference and
    eager, and the placement lines of its own ops."""

    optimized: list[torch.Tensor]
    reference: list[torch.Tensor]
    expected: list[torch.Tensor]
    placement: list[str]


def run_cases(
    cases: Sequence[tuple[torch.nn.Module, tuple[Any, ...]]], with_reference: bool = True
) -> list[CaseRun]:
    """run_both for many independent cases at the cost of one lowering (lower_cases): each case
    gets its outputs (as reference eager's when `with_reference` is false) and the placement
    lines of its ops. The program-wide summary lines are in no case's placement."""
    lowered = lower_cases(cases)
    flat = lowered.inputs
    out_opt = run_pte(lowered.pte, flat, reference_only=False)
    placement = loader.last_placement()
    out_ref = (
        run_pte(lowered.pte, flat, reference_only=True) if with_reference else lowered.expected
    )
    runs = [CaseRun([], [], [], []) for _ in cases]
    for case, got, reference, want in zip(
        lowered.output_cases, out_opt, out_ref, lowered.expected, strict=True
    ):
        assert got.shape == want.shape, (case, got.shape, want.shape)
        runs[case].optimized.append(got)
        runs[case].reference.append(reference)
        runs[case].expected.append(want)
    for line in placement:
        owner = lowered.op_cases.get(line.split(" ", 1)[0])
        if owner is not None:
            runs[owner].placement.append(line)
    return runs


def generated_examples(max_examples: int, *strategies: Any) -> list[tuple[Any, ...]]:
    """The examples Hypothesis would run a `@given(*strategies)` test on (derandomized), drawn up
    front so that run_cases can lower them together."""
    examples: list[tuple[Any, ...]] = []

    @hypothesis.settings(max_examples=max_examples, derandomize=True, deadline=None, database=None)
    @hypothesis.given(hypothesis.strategies.tuples(*strategies))
    def collect(example: tuple[Any, ...]) -> None:
        examples.append(example)

    collect()
    return examples
