"""Command line of the target linter: `target-lint PATHS` (installed), `bazel run //tools/lint --
PATHS` or `python -m tools.lint PATHS` (a checkout).

Exit status: 0 clean, 1 findings, 2 input it could not read or parse (or bad usage).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .config import REPO_CONFIG_NAME, ConfigError, load_config
from .findings import CHECKS, RULE_DESCRIPTIONS
from .fixer import apply_fixes
from .formats import FORMATS, render
from .linter import lint

EXIT_CLEAN, EXIT_FINDINGS, EXIT_INPUT_ERROR = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="target-lint",
        description="Finds target names registered twice in one Buck/Bazel package, Bazel file "
        "targets that clash, and local labels that name nothing, by evaluating BUILD, "
        "BUILD.bazel, BUCK, TARGETS and .bzl files.",
        epilog="checks: "
        + "; ".join(f"{c}: {RULE_DESCRIPTIONS[c]}" for c in CHECKS)
        + " Exit status: 0 clean, 1 findings, 2 unreadable or unparsable input.",
    )
    parser.add_argument("paths", nargs="*", default=["."], help="files or directories to lint")
    parser.add_argument("--format", choices=FORMATS, default="text", help="output format")
    parser.add_argument(
        "--disable",
        action="append",
        default=[],
        choices=CHECKS,
        help="switch a check off (repeatable)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        help=f"TOML describing the repo's wrappers (default: {REPO_CONFIG_NAME} at the root)",
    )
    parser.add_argument(
        "--fix", action="store_true", help="delete byte-identical duplicate registration blocks"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="say what could not be resolved"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # `bazel run` starts us in the runfiles tree; paths are meant relative to the user's shell.
    cwd = Path(os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd())
    paths = [cwd / p for p in args.paths]
    try:
        # An explicit --config applies everywhere; otherwise each root's own file is used.
        config = load_config(cwd / args.config) if args.config is not None else None
    except ConfigError as e:
        print(f"target-lint: configuration error: {e}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    checks = set(CHECKS) - set(args.disable)

    try:
        result = lint(paths, config, checks, cwd)
    except ConfigError as e:
        print(f"target-lint: configuration error: {e}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    if args.fix and result.findings and not result.errors:
        outcome = apply_fixes(result.findings, cwd)
        for line in outcome.applied:
            print(f"fixed: {line}", file=sys.stderr)
        for line in outcome.skipped:
            print(f"not fixed: {line}", file=sys.stderr)
        if outcome.applied:
            result = lint(paths, config, checks, cwd)

    sys.stdout.write(render(args.format, result.findings, result.errors))
    if args.verbose:
        for note in result.notes:
            print(f"note: {note}", file=sys.stderr)
    if args.verbose or args.format == "text":
        print(
            f"target-lint: {result.packages} packages, {result.files} files, "
            f"{len(result.findings)} findings, {len(result.errors)} unreadable",
            file=sys.stderr,
        )
    if result.errors:
        return EXIT_INPUT_ERROR
    return EXIT_FINDINGS if result.findings else EXIT_CLEAN
