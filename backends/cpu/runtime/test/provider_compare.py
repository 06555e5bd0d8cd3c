"""Runs a model on the CPU delegate twice, with the route table's providers and with every route
forced to Reference (ExecuTorch's kernels), for tests that compare the Optimized provider with
the reference; plus the tolerance they compare with."""

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from backends.cpu import routes
from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import lower
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


def run_both(
    model: torch.nn.Module, inputs: tuple[Any, ...], with_reference: bool = True
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[str]]:
    """Outputs with the route table's providers, outputs all-Reference (eager's when
    `with_reference` is false), and the placement log of the optimized lowering."""
    optimized, _ = lower(model, inputs)
    out_opt = optimized.forward(list(inputs))
    placement = loader.last_placement()
    placement.append(f"provider bytes: {loader.last_provider_bytes()}")
    if not with_reference:
        expected = model(*inputs)
        return (
            list(out_opt),
            list(expected if isinstance(expected, tuple) else [expected]),
            placement,
        )
    with torch.no_grad(), reference_routes():
        reference, _ = lower(model, inputs)
    out_ref = reference.forward(list(inputs))
    return list(out_opt), list(out_ref), placement


def placed(placement: list[str], kernel: str, where: str) -> list[str]:
    return [line for line in placement if f" {kernel}: {where}" in line]


def check_placed(
    model: torch.nn.Module, inputs: tuple[Any, ...], kernel: str, where: str
) -> list[str]:
    """Asserts the model's first output matches all-Reference and eager (assert_close_scaled)
    and that `kernel` was placed on `where`; returns those placement lines."""
    out_opt, out_ref, placement = run_both(model, inputs)
    with torch.no_grad():
        expected = model(*inputs)
    assert out_opt[0].shape == expected.shape
    assert_close_scaled(out_opt[0], out_ref[0])
    assert_close_scaled(out_opt[0], expected)
    lines = placed(placement, kernel, where)
    assert lines, placement
    return lines
