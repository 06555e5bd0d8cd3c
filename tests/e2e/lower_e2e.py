"""Shared steps of the end-to-end tests: run the lowering tool's command line in this process, the
way `bazel run //tools/lower` does, and read back its JSON report."""

import json
from pathlib import Path
from typing import Any

import torch

from tools.lower import main as cli
from tools.lower.lowering import CPU, Lowered, target_setup
from tools.lower.lowering import lower as lower_program
from tools.lower.runtime_check import load_program, run_eager, run_program


def lower(args: list[str], workdir: Path) -> tuple[int, dict[str, Any] | None]:
    """Runs `lower ARGS --json` in ``workdir``; returns the exit code and the report (if any)."""
    report = workdir / "report.json"
    code = cli.main([*args, "--json", str(report), "--quiet"])
    return code, json.loads(report.read_text()) if report.exists() else None


def assert_fully_delegated(report: dict[str, Any]) -> None:
    """Every op ran inside the CPU delegate and every batch norm was folded away."""
    delegation = report["delegation"]
    assert delegation["not_delegated_count"] == 0, delegation["not_delegated"]
    assert delegation["delegated_count"] > 0
    assert report["batch_norms"]["left"] == 0, report["batch_norms"]
    assert report["check"]["matches_eager"], report["check"]["outputs"]


def lower_and_run(
    model: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    workdir: Path,
    dynamic_shapes: Any = None,
) -> tuple[Lowered, list[torch.Tensor], list[torch.Tensor]]:
    """Exports ``model``, lowers it for the CPU delegate, runs the .pte from a file on the
    ExecuTorch runtime; returns the lowering, the runtime's outputs and eager's outputs."""
    model = model.eval()
    with torch.no_grad():
        program = torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes)
    setup = target_setup(CPU)
    lowered = lower_program(program, CPU, setup)
    path = workdir / "model.pte"
    path.write_bytes(lowered.pte)
    setup.prepare_runtime()
    module = load_program(str(path))
    _alive.append(module)
    actual = run_program(module, inputs, str(path))
    return lowered, actual, run_eager(model, inputs)


# Loaded programs stay alive for the session: freeing one while the delegate holds views of its
# data is not what these tests are about.
_alive: list[Any] = []
