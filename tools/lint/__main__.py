"""`python -m target_lint` (installed), `python -m tools.lint` (a checkout) and the program of
`bazel run //tools/lint`.

Exit status: see cli.py.
"""

import importlib.util
import sys

if importlib.util.find_spec("starlark") is None:
    print(
        "target-lint: needs the starlark-pyo3 package: pip install starlark-pyo3", file=sys.stderr
    )
    sys.exit(2)

# Imported after the dependency check, on purpose. `bazel run` runs this file as a script (no
# package); the modules themselves import each other relatively, so they work under either name.
if __package__:
    from .cli import main
else:
    from tools.lint.cli import main

sys.exit(main())
