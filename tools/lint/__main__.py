"""`python -m tools.lint PATHS...` from a checkout (see cli.py)."""

import sys

from tools.lint.cli import main

sys.exit(main())
