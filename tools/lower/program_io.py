"""Getting a program to lower: load a `.pt2`, or export a built-in example; and its sample inputs.

Every failure a user can cause (missing file, a file that is not an exported program, inputs that
cannot be sampled) is a `LowerError` with one line that names the file or the input.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass

import torch
from torch.export import ExportedProgram

from backends.cpu import symbolic_dims
from tools.lower.errors import ExitCode, LowerError
from tools.lower.examples import get_example


@dataclass
class SourceProgram:
    """A program to lower, its sample inputs, and what produced both (for the report)."""

    label: str
    program: ExportedProgram
    inputs: tuple[torch.Tensor, ...]
    inputs_origin: str
    eager: torch.nn.Module


def export_example(name: str, size: str) -> SourceProgram:
    """Exports the built-in example ``name`` at ``size`` with its deterministic sample inputs."""
    try:
        example = get_example(name)
        model = example.model(size)
        inputs = example.sample_inputs(size)
    except ValueError as exc:
        raise LowerError(ExitCode.BAD_INPUT, str(exc)) from None
    with torch.no_grad():
        program = torch.export.export(model, inputs)
    return SourceProgram(
        label=f"example {name} ({size})",
        program=program,
        inputs=inputs,
        inputs_origin=f"seeded sample inputs of example {name!r}",
        eager=model,
    )


def load_pt2(path: str) -> SourceProgram:
    """Loads a program saved with `torch.export.save` and samples inputs for it."""
    if not os.path.exists(path):
        raise LowerError(ExitCode.BAD_INPUT, f"{path}: no such file")
    if os.path.isdir(path):
        raise LowerError(ExitCode.BAD_INPUT, f"{path}: is a directory, expected a .pt2 file")
    if not zipfile.is_zipfile(path):
        raise LowerError(
            ExitCode.BAD_INPUT,
            f"{path}: not an exported program (expected a .pt2 archive written by "
            "torch.export.save)",
        )
    try:
        program = torch.export.load(path)
    except Exception as exc:  # torch raises many types for a foreign or damaged archive
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise LowerError(
            ExitCode.BAD_INPUT,
            f"{path}: not a loadable exported program ({type(exc).__name__}: {first[:200]})",
        ) from None
    inputs, origin = sample_inputs(program, path)
    return SourceProgram(
        label=os.path.basename(path),
        program=program,
        inputs=inputs,
        inputs_origin=origin,
        eager=program.module(),
    )


def sample_inputs(program: ExportedProgram, where: str) -> tuple[tuple[torch.Tensor, ...], str]:
    """The program's saved example inputs if it has them, else seeded random tensors of the
    static shapes and dtypes its graph declares. Raises LowerError when neither is possible."""
    saved = program.example_inputs
    if saved is not None:
        args, kwargs = saved
        if kwargs:
            raise LowerError(
                ExitCode.BAD_INPUT,
                f"{where}: keyword inputs ({', '.join(kwargs)}) are not supported; "
                "export with positional inputs",
            )
        if all(isinstance(a, torch.Tensor) for a in args):
            return tuple(args), "example inputs saved with the program"
    generator = torch.Generator().manual_seed(0)
    sampled: list[torch.Tensor] = []
    user_inputs = set(program.graph_signature.user_inputs)
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in user_inputs:
            continue
        sampled.append(_sample_one(node.name, node.meta.get("val"), generator, where))
    return tuple(sampled), "seeded random inputs of the declared shapes (no saved example inputs)"


def _sample_one(name: str, value: object, generator: torch.Generator, where: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise LowerError(
            ExitCode.BAD_INPUT,
            f"{where}: cannot sample input '{name}': it is a {type(value).__name__}, not a tensor",
        )
    shape: list[int] = []
    for dim in value.shape:
        if isinstance(dim, torch.SymInt):
            try:  # a bounded dynamic dimension is sampled at its upper bound
                affine, bounds = symbolic_dims.affine_size(dim)
                dim = symbolic_dims.evaluate(affine, {b.name: b for b in bounds}, upper=True)
            except symbolic_dims.UnsupportedSize:
                pass
        if not isinstance(dim, int):
            raise LowerError(
                ExitCode.BAD_INPUT,
                f"{where}: cannot sample input '{name}': dimension {dim} is dynamic without an "
                "upper bound; save the program with example inputs or export with "
                "torch.export.Dim(..., max=N)",
            )
        shape.append(dim)
    dtype = value.dtype
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64):
        # Small non-negative values: plausible as indices into any non-empty dimension.
        return torch.randint(0, 2, shape, generator=generator).to(dtype)
    raise LowerError(ExitCode.BAD_INPUT, f"{where}: cannot sample input '{name}' of dtype {dtype}")
