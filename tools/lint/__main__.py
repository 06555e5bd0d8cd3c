"""`python -m tools.lint PATHS...` from a checkout (see cli.py)."""

import importlib.util
import sys

if importlib.util.find_spec("starlark") is None:
    print(
        "target-lint: needs the starlark-pyo3 package: pip install starlark-pyo3", file=sys.stderr
    )
    sys.exit(2)

# Imported after the dependency check, on purpose.
from tools.lint.cli import main

sys.exit(main())
