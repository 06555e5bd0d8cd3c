"""Runs transform passes on an ExportedProgram, then the constant hygiene passes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch.export import ExportedProgram

from backends.transforms.lift_constants import LiftConstantsPass
from backends.transforms.pass_report import PassReport
from backends.transforms.prune_unused_constants import PruneUnusedConstantsPass

# A pass edits the program in place and says what it did.
ProgramPass = Callable[[ExportedProgram], PassReport]


def constant_hygiene_passes() -> list[ProgramPass]:
    """The passes that leave constants lifted and the unused ones dropped, in order."""
    return [LiftConstantsPass(), PruneUnusedConstantsPass()]


def run_passes(ep: ExportedProgram, passes: Sequence[ProgramPass]) -> list[PassReport]:
    """Runs `passes` in order on `ep` in place, then lifts and prunes constants.

    Returns one report per pass run, hygiene passes included (last). A pass that returns
    something other than a PassReport is an error naming the pass.
    """
    reports = []
    for program_pass in [*passes, *constant_hygiene_passes()]:
        report = program_pass(ep)
        if not isinstance(report, PassReport):
            name = getattr(program_pass, "__name__", type(program_pass).__name__)
            raise TypeError(f"pass {name} returned {type(report).__name__}, expected a PassReport")
        reports.append(report)
    return reports
