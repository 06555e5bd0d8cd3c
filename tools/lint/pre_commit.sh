#!/usr/bin/env sh
# pre-commit entry (see .pre-commit-hooks.yaml): runs the target linter from this checkout with the
# Python given in $TARGET_LINT_PYTHON (default python3), which needs `starlark-pyo3` installed.
set -eu
checkout="$(cd "$(dirname "$0")/../.." && pwd)"
PYTHONPATH="${checkout}${PYTHONPATH:+:${PYTHONPATH}}" exec "${TARGET_LINT_PYTHON:-python3}" -m tools.lint "$@"
