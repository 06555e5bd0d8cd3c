"""Runs the checks over paths: evaluates every entry file, collects and de-duplicates findings."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .config import REPO_CONFIG_NAME, Config, load_config
from .evaluator import Evaluator, InputError, PackageRun, Registration
from .findings import (
    DUPLICATE_TARGET,
    FILE_TARGET_CONFLICT,
    UNKNOWN_LOCAL_LABEL,
    Finding,
    Location,
)
from .workspace import collect_files, find_root


@dataclass
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    packages: int = 0
    files: int = 0


def _display_for(root: Path, cwd: Path) -> Callable[[str], str]:
    """Maps root-relative paths to paths relative to the user's directory (when below it)."""

    def display(rel: str) -> str:
        full = root / rel
        try:
            return os.path.relpath(full, cwd) if full.is_relative_to(cwd) else str(full)
        except ValueError:
            return str(full)

    return display


def _bad_labels(evaluator: Evaluator, run: PackageRun) -> list[tuple[Registration, str]]:
    """`":name"` labels that name neither a target nor a file of the package."""
    package_dir = os.path.join(evaluator.root, run.package)
    known = run.outputs
    bad = []
    for regs in run.by_name.values():
        for reg in regs:
            if not _may_hold_local_label(reg.attributes):
                continue  # most registrations: no need to take their attributes apart
            for label in reg.labels:
                if not label.startswith(":"):
                    continue  # labels of other packages: not this check's business
                target = label[1:].split("[", 1)[0]  # Buck sub-targets: ":lib[shared]"
                if not target or target in run.by_name or target in known:
                    continue
                if not os.path.exists(os.path.join(package_dir, target)):
                    bad.append((reg, label))
    return bad


def _may_hold_local_label(attributes: str) -> bool:
    """Whether the repr of a call's attributes may hold a string starting with ":" (a string
    opens after "[", "(", "{" or a space; a key's closing quote is followed by ": ")."""
    return any(opening in attributes for opening in (' ":', '[":', '(":', '{":'))


def _label_findings(
    evaluator: Evaluator, run: PackageRun, display: Callable[[str], str]
) -> list[Finding]:
    findings = []
    for reg, label in _bad_labels(evaluator, run):
        site = evaluator.site(run.package, reg)
        line = _line_of(evaluator, site.path, site.line, f'"{label}"')
        text = evaluator.line_text(site.path, line)
        column = text.find(f'"{label}"') + 1 if f'"{label}"' in text else 1
        if evaluator.suppressed(site.path, line, UNKNOWN_LOCAL_LABEL):
            continue
        findings.append(
            Finding(
                rule=UNKNOWN_LOCAL_LABEL,
                message=f"label '{label}' in {reg.kind}(name = '{reg.name}') names no target "
                f"or file in package '//{run.package}'",
                location=Location(display(site.path), line, column),
                name=label,
                package="//" + run.package,
            )
        )
    return findings


def _line_of(evaluator: Evaluator, path: str, start: int, needle: str) -> int:
    """The first line at or after `start` (within the call's reach) that contains `needle`."""
    for line in range(start, start + 200):
        text = evaluator.line_text(path, line)
        if needle in text:
            return line
        if not text and evaluator.line_text(path, line + 1) == "":
            break
    return start


def lint(
    paths: Iterable[Path],
    config: Config | None,
    checks: set[str],
    cwd: Path,
) -> LintResult:
    """Lints every BUILD/BUILD.bazel/BUCK/TARGETS/.bzl file under `paths`.

    Without `config`, each workspace root uses its `.target-lint.toml` merged over the defaults.
    Raises ConfigError for a root whose configuration file is broken.
    """
    result = LintResult()
    evaluators: dict[Path, Evaluator] = {}
    seen: set[tuple[str, str, int, int, str]] = set()
    for path in paths:
        if not path.exists():
            result.errors.append(InputError(str(path), 1, 1, "no such file or directory"))
            continue
        root = find_root(path.resolve())
        if root not in evaluators:
            evaluators[root] = Evaluator(root, config or _root_config(root))
        evaluator = evaluators[root]
        display = _display_for(root, cwd)
        entry_files = evaluator.config.entry_files
        files = collect_files(path, root, entry_files, evaluator.config.extension_suffix)
        result.files += len(files)
        # Entry files first: the .bzl files they load are parsed then, the rest afterwards.
        files.sort(key=lambda f: f.name not in entry_files)
        for file in files:
            try:
                if file.name in entry_files:
                    result.packages += 1
                    for finding in _check_entry(evaluator, file, checks, display, result.notes):
                        key = (finding.rule, *_key(finding.location), finding.name)
                        if key not in seen:  # TARGETS and BUCK may reach the same call
                            seen.add(key)
                            result.findings.append(finding)
                else:
                    evaluator.check_syntax(file)
            except InputError as error:
                shown = InputError(display(error.path), error.line, error.column, error.message)
                if all(str(shown) != str(e) for e in result.errors):
                    result.errors.append(shown)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as error:  # pyo3 panics derive from BaseException
                # A bug (ours or the interpreter's) must still name the file, not dump a trace.
                where = display(evaluator.rel(file))
                message = f"internal error: {type(error).__name__}: {error}"
                result.errors.append(InputError(where, 1, 1, message))
    for evaluator in evaluators.values():
        result.notes.extend(evaluator.notes)
    result.notes = list(dict.fromkeys(result.notes))
    result.findings.sort(key=Finding.sort_key)
    return result


def _check_entry(
    evaluator: Evaluator,
    file: Path,
    checks: set[str],
    display: Callable[[str], str],
    notes: list[str],
) -> list[Finding]:
    run = evaluator.evaluate_entry(file)
    check_labels = UNKNOWN_LOCAL_LABEL in checks
    if check_labels and run.incomplete:
        check_labels = False
        notes.append(
            f"{display(run.entry)}: label check skipped, evaluation incomplete "
            f"({run.incomplete[0]})"
        )
    check_files = FILE_TARGET_CONFLICT in checks
    dirty = (
        (DUPLICATE_TARGET in checks and run.duplicates)
        or (check_files and run.files is not None and run.files.conflicts)
        or (check_labels and _bad_labels(evaluator, run))
    )
    if not dirty:
        return []
    # Findings need call stacks: evaluate once more, recording them (same registrations).
    run = evaluator.evaluate_entry(file, detailed=True)
    found: list[Finding] = []
    if DUPLICATE_TARGET in checks:
        found += evaluator.duplicate_findings(run, display)
    if check_files:
        found += evaluator.file_target_findings(run, display)
    if check_labels:
        found += _label_findings(evaluator, run, display)
    return found


def _root_config(root: Path) -> Config:
    repo_config = root / REPO_CONFIG_NAME
    return load_config(repo_config if repo_config.is_file() else None)


def _key(location: Location) -> tuple[str, int, int]:
    return (location.path, location.line, location.column)
