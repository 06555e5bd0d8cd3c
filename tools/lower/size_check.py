"""`--check-sizes`: a program with bounded dynamic dimensions, run at several sizes within its
bounds (each symbol at its smallest, its largest and two sizes between) from one `.pte`, each
against eager PyTorch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.export import ExportedProgram

from backends.cpu import symbolic_dims
from tools.lower.errors import ExitCode, LowerError
from tools.lower.runtime_check import compare_outputs, run_eager, run_program

# Where between its bounds each symbol is put, in checking order: the extremes first.
_FRACTIONS = (0.0, 1.0, 1.0 / 3.0, 2.0 / 3.0)


@dataclass(frozen=True)
class SizeCheck:
    """One run of the `.pte` at concrete sizes."""

    sizes: dict[str, int]  # symbol -> its value
    input_shapes: tuple[tuple[int, ...], ...]
    ok: bool
    max_abs_error: float | None
    problem: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "sizes": dict(self.sizes),
            "input_shapes": [list(s) for s in self.input_shapes],
            "ok": self.ok,
            "max_abs_error": self.max_abs_error,
            "problem": self.problem,
        }


def _user_inputs(program: ExportedProgram) -> list[torch.fx.Node]:
    names = set(program.graph_signature.user_inputs)
    return [n for n in program.graph.nodes if n.op == "placeholder" and n.name in names]


def symbol_bounds(program: ExportedProgram, where: str) -> dict[str, symbolic_dims.SymbolBounds]:
    """The bounds of every symbol in the program's input shapes; LowerError if one has none."""
    bounds: dict[str, symbolic_dims.SymbolBounds] = {}
    for node in _user_inputs(program):
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor):
            continue
        for dim in value.shape:
            if isinstance(dim, torch.SymInt):
                try:
                    _, found = symbolic_dims.affine_size(dim)
                except symbolic_dims.UnsupportedSize as error:
                    raise LowerError(
                        ExitCode.BAD_INPUT, f"{where}: --check-sizes: input '{node.name}': {error}"
                    ) from None
                bounds.update({b.name: b for b in found})
    return bounds


def size_points(bounds: dict[str, symbolic_dims.SymbolBounds]) -> list[dict[str, int]]:
    """Symbol values to check: every symbol at the same fraction of its range, distinct only."""
    points: list[dict[str, int]] = []
    for fraction in _FRACTIONS:
        point = {
            name: b.min + round(fraction * (b.max - b.min)) for name, b in sorted(bounds.items())
        }
        if point not in points:
            points.append(point)
    return points


def inputs_at(
    program: ExportedProgram,
    samples: Sequence[torch.Tensor],
    sizes: dict[str, int],
    generator: torch.Generator,
) -> tuple[torch.Tensor, ...]:
    """Fresh inputs of the program's input shapes at `sizes`, with the samples' value ranges
    (integer inputs such as token ids stay valid indices)."""
    made = []
    for node, sample in zip(_user_inputs(program), samples, strict=True):
        value = node.meta["val"]
        shape = [
            symbolic_dims.value_at(symbolic_dims.affine_size(d)[0], sizes) for d in value.shape
        ]
        if sample.dtype.is_floating_point:
            made.append(torch.randn(shape, generator=generator).to(sample.dtype))
        elif sample.dtype == torch.bool:
            made.append(torch.randint(0, 2, shape, generator=generator).bool())
        else:
            low, high = (int(sample.min()), int(sample.max())) if sample.numel() else (0, 0)
            made.append(torch.randint(low, high + 1, shape, generator=generator).to(sample.dtype))
    return tuple(made)


def check_sizes(
    program: ExportedProgram,
    module: Any,
    eager: torch.nn.Module,
    samples: Sequence[torch.Tensor],
    atol: float,
    rtol: float,
    where: str,
) -> list[SizeCheck]:
    """Runs the loaded `.pte` (`module`) at every size of `size_points`; [] for a static program."""
    bounds = symbol_bounds(program, where)
    generator = torch.Generator().manual_seed(0)
    checks = []
    for sizes in size_points(bounds):
        inputs = inputs_at(program, samples, sizes, generator)
        shapes = tuple(tuple(t.shape) for t in inputs)
        try:
            actual = run_program(module, inputs, where)
        except LowerError as error:
            checks.append(SizeCheck(sizes, shapes, False, None, error.message))
            continue
        outputs = compare_outputs(actual, run_eager(eager, inputs), atol, rtol)
        errors = [c.max_abs_error for c in outputs if c.max_abs_error is not None]
        problems = "; ".join(f"output {c.index}: {c.problem}" for c in outputs if c.problem)
        checks.append(
            SizeCheck(
                sizes, shapes, all(c.ok for c in outputs), max(errors, default=None), problems
            )
        )
    return checks
