"""Runs the real `//tools/lower` binary in a subprocess, the way `bazel run //tools/lower` does."""

import os
import subprocess
from pathlib import Path


def run_lower_binary(args: list[str], workdir: Path) -> subprocess.CompletedProcess[str]:
    """Runs the binary named by $LOWER_BINARY with ``args``, from (and relative to) ``workdir``."""
    # Relative to the runfiles tree, the working directory when the test starts.
    binary = os.path.abspath(os.environ["LOWER_BINARY"])
    env = dict(os.environ)
    env["BUILD_WORKING_DIRECTORY"] = str(workdir)  # what `bazel run` sets
    return subprocess.run(
        [binary, *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
