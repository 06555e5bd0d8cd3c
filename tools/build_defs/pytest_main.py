"""Entry point of every `runtime.python_test`: runs pytest on the test files given as arguments."""

import os
import sys

import pytest


def main() -> int:
    # Keep pytest from writing caches into the (read-only) runfiles tree.
    # Third-party deprecation noise would bury our own output; pytest still counts warnings.
    args = ["-p", "no:cacheprovider", "-q", "--disable-warnings", *sys.argv[1:]]
    xml = os.environ.get("XML_OUTPUT_FILE")
    if xml:
        args.append(f"--junitxml={xml}")
    return pytest.main(args)


if __name__ == "__main__":
    sys.exit(main())
