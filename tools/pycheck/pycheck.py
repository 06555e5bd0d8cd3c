"""`./bazelw run //tools/pycheck`: ruff (lint and format) and mypy over the repo's Python files.

Runs on the working tree (BUILD_WORKSPACE_DIRECTORY), with the tools from the pinned virtualenv.
Exit codes: 0 clean, 1 findings, 2 could not run. `--fix` applies ruff's fixes and formatting.
"""

import argparse
import os
import subprocess
import sys


def _python_files(root: str) -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return [path for path in listed if not path.startswith("third_party/stand_ins/")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pycheck", description=__doc__.splitlines()[0])
    parser.add_argument("--fix", action="store_true", help="apply ruff fixes and formatting")
    parser.add_argument("--no-mypy", action="store_true", help="skip the (slower) type check")
    args = parser.parse_args(argv)

    root = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or os.getcwd()
    try:
        files = _python_files(root)
    except (OSError, subprocess.CalledProcessError) as error:
        print(f"pycheck: cannot list Python files under {root}: {error}", file=sys.stderr)
        return 2
    if not files:
        print("pycheck: no Python files")
        return 0

    python = sys.executable
    steps = [
        ("ruff check", ["ruff", "check", *(["--fix"] if args.fix else [])]),
        ("ruff format", ["ruff", "format", *([] if args.fix else ["--check"])]),
    ]
    if not args.no_mypy:
        steps.append(("mypy", ["mypy"]))
    failed = False
    for name, command in steps:
        print(f"pycheck: {name} ({len(files)} files)", flush=True)
        run = subprocess.run([python, "-m", *command, *files], cwd=root)
        failed |= run.returncode != 0
    print("pycheck: " + ("findings above" if failed else "clean"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
