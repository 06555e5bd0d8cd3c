"""Issue 43: Python threads each calling their own delegated program at once (float CNN, int8 CNN,
decoder, dynamic-batch CNN at every batch size) get the single-threaded outputs exactly, and the
process exits cleanly afterwards. Before the fix every run with two or more threads died with
SIGSEGV at exit (ExecuTorch's bindings leave std::cout on a dead buffer; stream_exit_guard.cc)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backends.cpu.runtime import loader

_CHILD = Path(__file__).with_name("concurrent_calls.py")


def _programs_folder() -> Path:
    # The genrule's outputs, in this test's runfiles.
    root = Path(os.environ.get("TEST_SRCDIR", ".")) / "et_cpu_plugin"
    return root / "backends" / "cpu" / "runtime" / "stress_pte"


@pytest.mark.parametrize("threads", [1, 2, 4, 8])
def test_threads_match_and_the_process_exits_cleanly(threads: int) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    env["ET_CPU_BACKEND_LIBRARY"] = loader.default_library_path()
    command = [sys.executable, str(_CHILD), "--threads", str(threads), "--calls", "8"]
    done = subprocess.run(
        [*command, str(_programs_folder())],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    # A negative code is the signal that killed the process (-11: SIGSEGV at exit).
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["mismatches"] == [] and report["failures"] == [], report
    assert report["calls"] == threads * 8
