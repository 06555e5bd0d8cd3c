"""`--fix`: deletes a registration block that is byte-identical to an earlier one in its file.

That is the real fix for the regression this linter exists for (a merge re-added a block).
Anything else, e.g. two different blocks with one name or a name built in a loop, needs a
person. Blocks are located with Python's `ast` (Starlark's syntax is a subset of it here),
only when `--fix` is asked for, so the checks themselves stay on the Starlark interpreter.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from .findings import DUPLICATE_TARGET, Finding


@dataclass(frozen=True)
class FixOutcome:
    applied: list[str]  # what was deleted, one line each
    skipped: list[str]  # findings left for a person, with why


def _statement_spans(source: str) -> dict[int, tuple[int, int]] | None:
    """Call statements by first line -> (first line, last line), 1-based inclusive."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    spans: dict[int, tuple[int, int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            end = node.end_lineno or node.lineno
            spans[node.lineno] = (node.lineno, end)
    return spans


def apply_fixes(findings: list[Finding], cwd: Path) -> FixOutcome:
    applied: list[str] = []
    skipped: list[str] = []
    by_file: dict[str, list[Finding]] = {}
    for finding in findings:
        if finding.rule == DUPLICATE_TARGET:
            by_file.setdefault(finding.location.path, []).append(finding)
    for shown, file_findings in sorted(by_file.items()):
        path = cwd / shown
        data = path.read_bytes()
        lines = data.splitlines(keepends=True)
        spans = _statement_spans(data.decode("utf-8", errors="replace"))
        deletions: dict[int, tuple[int, int]] = {}
        for finding in file_findings:
            where = f"{shown}:{finding.location.line}"
            first = finding.first
            reason = None
            if spans is None:
                reason = "the file does not parse as a block structure the fixer understands"
            elif first is None or first.path != shown:
                reason = "first registration is in another file"
            elif first.line == finding.location.line:
                reason = "both registrations come from the same call (a loop or a macro)"
            elif finding.location.line not in spans or first.line not in spans:
                reason = "the registration is not a call statement of its own"
            if reason is None and spans is not None and first is not None:
                start, end = spans[finding.location.line]
                first_start, first_end = spans[first.line]
                if lines[start - 1 : end] != lines[first_start - 1 : first_end]:
                    reason = "the block differs from the first one"
                else:
                    # Take the blank separator line along so spacing stays as before.
                    if start > 1 and not lines[start - 2].strip():
                        start -= 1
                    deletions[start] = (start, end)
                    applied.append(
                        f"{where}: deleted lines {start}-{end}, a copy of the block at "
                        f"{first.path}:{first.line} registering '{finding.name}'"
                    )
                    continue
            skipped.append(f"{where}: duplicate '{finding.name}' left for a person: {reason}")
        if deletions:
            for start, end in sorted(deletions.values(), reverse=True):
                del lines[start - 1 : end]
            path.write_bytes(b"".join(lines))
    return FixOutcome(applied=applied, skipped=skipped)
