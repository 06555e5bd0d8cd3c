"""Lets our passes run inside ExecuTorch's pass managers, e.g. through
`to_edge_transform_and_lower(ep, transform_passes=edge_transform_passes([...]))`.

Why an adapter: exir hands a plain callable only the graph module, so a pass that adds or drops
constants must be an `ExportedProgramPassBase` to see the program. Its pass manager runs passes on
a shallow copy (`copy.copy`) of the program: graph module, signature, state dict and constants
table are the same objects in both. Our passes therefore edit those objects in place (the
signature's `input_specs` list included) and never rebind them, so the copy exir keeps and the
original stay consistent with each other whichever one is used afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence

from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch.export import ExportedProgram

from backends.transforms.pass_report import PassReport
from backends.transforms.pipeline import ProgramPass, constant_hygiene_passes


class ExirProgramPass(ExportedProgramPassBase):
    """Wraps one of our passes; each run's PassReport is appended to `reports`."""

    def __init__(self, program_pass: ProgramPass, reports: list[PassReport] | None = None) -> None:
        self.program_pass = program_pass
        self.reports: list[PassReport] = reports if reports is not None else []
        # exir names passes in its error messages by `type(pass).__name__` or `__name__`.
        self.__name__ = type(program_pass).__name__

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        report = self.program_pass(exported_program)
        self.reports.append(report)
        return ExportedProgramPassResult(exported_program, report.changed)


def edge_transform_passes(
    passes: Sequence[ProgramPass], reports: list[PassReport] | None = None
) -> list[ExirProgramPass]:
    """`passes` followed by the constant hygiene passes, ready for `transform_passes=`.

    Pass a list as `reports` to collect every pass's PassReport (one per pass and method).
    """
    shared = reports if reports is not None else []
    return [ExirProgramPass(p, shared) for p in [*passes, *constant_hygiene_passes()]]
