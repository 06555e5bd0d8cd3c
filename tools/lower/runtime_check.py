"""Running a `.pte` on the ExecuTorch runtime and checking its outputs against eager PyTorch.

Floating-point outputs must match within ``atol + rtol * |expected|`` element-wise (the
`torch.allclose` rule); integer and bool outputs must match exactly, dtype and shape included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree

from tools.lower.errors import ExitCode, LowerError
from tools.lower.pte_layout import read_layout

DEFAULT_ATOL = 1e-4
DEFAULT_RTOL = 1e-4


@dataclass(frozen=True)
class OutputCheck:
    """How one output of the `.pte` compares with eager."""

    index: int
    dtype: str
    shape: tuple[int, ...]
    exact_required: bool
    ok: bool
    max_abs_error: float | None
    problem: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "exact_required": self.exact_required,
            "ok": self.ok,
            "max_abs_error": self.max_abs_error,
            "problem": self.problem,
        }


def verify_program(data: bytes) -> None:
    """The checks a `.pte` passes before anything loads it; raises ValueError (LayoutError for
    the first) naming what is off.

    1. Its headers, segments and named data (pte_layout): offsets outside the file, and a bad
       file identifier, which ExecuTorch would log as raw bytes (not UTF-8: the Python log
       sink throws and the process aborts).
    2. ExecuTorch's flatbuffer verifier over the whole program (InternalConsistency). The
       pybindings loaders accept `program_verification` but do not apply it (executorch
       1.5.1: a damaged file they load then crashes the process in Program::load, Method::init
       or PteDataMap::get_data); `executorch.runtime` applies it."""
    from executorch.runtime import Runtime, Verification

    read_layout(data)
    try:
        Runtime.get().load_program(data, verification=Verification.InternalConsistency)
    except Exception as exc:
        raise ValueError(f"ExecuTorch's program verifier refused it ({exc})") from None


class LoadedProgram:
    """A program loaded from bytes that passed `verify_program`, holding those bytes for as long
    as it lives: the runtime does not own a buffer it loads from (FACTS.md's pitfall). Loading the
    verified bytes, not the file again, means what runs is what was checked."""

    def __init__(self, module: Any, data: bytes) -> None:
        self._module = module
        self._data = data

    def forward(self, inputs: Sequence[Any]) -> Any:
        return self._module.forward(inputs)

    def __getattr__(self, name: str) -> Any:  # the rest of the pybindings module's methods
        return getattr(self._module, name)


def load_program(path: str) -> LoadedProgram:
    """Reads a `.pte` once, checks it with `verify_program` and loads those same bytes.

    ExecuTorch's runtime crashes the process on damaged files it has not verified instead of
    returning an error, so nothing unverified reaches it."""
    from executorch.extension.pybindings import portable_lib

    try:
        with open(path, "rb") as handle:
            data = handle.read()
        verify_program(data)
    except (OSError, ValueError) as exc:
        raise LowerError(
            ExitCode.LOWERING_FAILED, f"{path}: not a loadable .pte, not loaded ({exc})"
        ) from None
    try:
        return LoadedProgram(portable_lib._load_for_executorch_from_buffer(data), data)
    except Exception as exc:
        raise LowerError(
            ExitCode.LOWERING_FAILED, f"{path}: the ExecuTorch runtime could not load it ({exc})"
        ) from None


def run_program(module: Any, inputs: Sequence[torch.Tensor], where: str) -> list[torch.Tensor]:
    try:
        return list(module.forward(list(inputs)))
    except Exception as exc:
        raise LowerError(
            ExitCode.LOWERING_FAILED, f"{where}: running forward on the runtime failed ({exc})"
        ) from None


def run_eager(model: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    with torch.no_grad():
        result = model(*inputs)
    leaves = pytree.tree_leaves(result)
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def compare_outputs(
    actual: Sequence[torch.Tensor],
    expected: Sequence[torch.Tensor],
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
) -> list[OutputCheck]:
    """One check per expected output; a missing or extra output is a failed check."""
    checks: list[OutputCheck] = []
    for index, want in enumerate(expected):
        exact = not want.dtype.is_floating_point
        dtype = _dtype_name(want)

        def check(ok: bool, error: float | None, problem: str = "") -> OutputCheck:
            return OutputCheck(index, dtype, tuple(want.shape), exact, ok, error, problem)  # noqa: B023

        if index >= len(actual):
            checks.append(check(False, None, "missing"))
            continue
        got = actual[index]
        if got.dtype != want.dtype or got.shape != want.shape:
            problem = f"got {_dtype_name(got)}{list(got.shape)}, expected {dtype}{list(want.shape)}"
            checks.append(check(False, None, problem))
            continue
        diff = (got.double() - want.double()).abs()
        max_error = float(diff.max()) if diff.numel() else 0.0
        if exact:
            ok = bool(torch.equal(got, want))
        else:
            ok = bool(torch.allclose(got, want, atol=atol, rtol=rtol, equal_nan=True))
        checks.append(check(ok, max_error))
    for index in range(len(expected), len(actual)):
        checks.append(
            OutputCheck(
                index=index,
                dtype=_dtype_name(actual[index]),
                shape=tuple(actual[index].shape),
                exact_required=False,
                ok=False,
                max_abs_error=None,
                problem="extra output eager does not produce",
            )
        )
    return checks


def _dtype_name(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).replace("torch.", "")
