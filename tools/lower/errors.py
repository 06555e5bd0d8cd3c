"""The lowering tool's exit codes, and the one error its steps raise for a user-facing failure."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Documented in `lower --help`; scripts and tests rely on these numbers."""

    OK = 0
    # The .pte was written and ran, but its outputs differ from eager PyTorch beyond the tolerance.
    MISMATCH = 1
    # Bad command line or input: a missing or foreign model file, inputs that cannot be sampled,
    # an output path that cannot be written.
    BAD_INPUT = 2
    # Exporting, lowering, serializing, loading or running the program failed.
    LOWERING_FAILED = 3


class LowerError(Exception):
    """A failure to report as one line (no traceback) with the given exit code."""

    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
