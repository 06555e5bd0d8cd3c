"""One virtualenv per requirements.lock digest, shared by every Bazel output base on the machine.

Called by the `python_venv` repository rule (python_venv.bzl) with the system Python. The venv lives
in `ROOT/venv-<lock sha256>`; the rule symlinks it into its external repository. A second clone (or
an expunged output base) therefore reuses the environment instead of installing ~1.9 GB again.

Why not "build in a temporary directory, then rename": a venv is not relocatable (pip writes its
absolute path into the shebangs of console scripts), so it is built at its final path, under an
exclusive lock (`venv-<digest>.lock`, so concurrent builds of the same lock wait for each other),
and committed by a stamp file written last with an atomic rename. A directory without a valid stamp
(an interrupted build) is deleted and built again. Reuse is verified: stamp digest equal to the
lock's, the key files present, and every distribution the lock pins installed at its version.

Output: one JSON object on stdout, {"venv", "digest", "action": "reused" | "built", "seconds"}.
Exit codes: 0 the venv is ready; 1 it could not be built or verified (reason on stderr); 2 usage.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

STAMP = ".et_cpu_plugin-venv"
# Files every venv has; what the lock pins is checked through the installed distributions (and
# python_venv.bzl checks the native files it links).
KEY_FILES = ("pyvenv.cfg", "bin/python3")
_DISTRIBUTIONS = (
    "import importlib.metadata as m, json; "
    "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
)


class VenvError(Exception):
    """The shared venv could not be built or verified."""


def lock_digest(lock: Path) -> str:
    return hashlib.sha256(lock.read_bytes()).hexdigest()


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(lock: Path) -> dict[str, str]:
    """`name==version` pins of the lock file, names normalized as pip does (PEP 503)."""
    pins = {}
    for line in lock.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^ \\;]+)", line)
        if match:
            pins[_normalize(match.group(1))] = match.group(2)
    return pins


def problems(venv: Path, lock: Path, digest: str) -> list[str]:
    """Why `venv` is not a complete environment of `lock` (empty: it is)."""
    stamp = venv / STAMP
    if not stamp.is_file():
        return [f"no stamp {stamp} (never finished)"]
    if stamp.read_text().strip() != digest:
        return [f"stamp {stamp} is for another lock"]
    found = [f"missing {venv / name}" for name in KEY_FILES if not (venv / name).exists()]
    if found:
        return found
    listed = subprocess.run(
        [str(venv / "bin/python3"), "-c", _DISTRIBUTIONS], capture_output=True, text=True
    )
    if listed.returncode != 0:
        return [f"{venv}/bin/python3 does not run: {listed.stderr.strip()[-500:]}"]
    installed = {_normalize(k): v for k, v in json.loads(listed.stdout).items()}
    return [
        f"{name}=={version} not installed (found {installed.get(name, 'none')})"
        for name, version in sorted(pinned(lock).items())
        if installed.get(name) != version
    ]


def _run(command: list[str], what: str, timeout: float) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise VenvError(
            f"{what} failed (exit {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )


def build(venv: Path, lock: Path, digest: str, python: str, timeout: float) -> None:
    if venv.exists():
        shutil.rmtree(venv)
    _run([python, "-m", "venv", str(venv)], "python -m venv", timeout)
    _run(
        [
            str(venv / "bin/python3"),
            *("-m", "pip", "install", "--quiet", "--no-deps", "--require-hashes"),
            *("--no-warn-script-location", "-r", str(lock)),
        ],
        "pip install -r requirements.lock",
        timeout,
    )
    # Commit: the stamp appears whole, after everything else is in place.
    partial = venv / (STAMP + ".partial")
    partial.write_text(digest + "\n")
    os.replace(partial, venv / STAMP)
    left = problems(venv, lock, digest)
    if left:
        (venv / STAMP).unlink()
        raise VenvError(f"{venv} is incomplete after installing {lock}: " + "; ".join(left))


def ensure(root: Path, lock: Path, python: str, timeout: float) -> dict[str, object]:
    """The verified venv of `lock` under `root`, built first if it is missing or incomplete."""
    start = time.monotonic()
    digest = lock_digest(lock)
    venv = root / f"venv-{digest}"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"venv-{digest}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        action = "reused"
        if problems(venv, lock, digest):
            build(venv, lock, digest, python, timeout)
            action = "built"
    return {
        "venv": str(venv),
        "digest": digest,
        "action": action,
        "seconds": round(time.monotonic() - start, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="shared_venv",
        description=__doc__.split("\n\n")[0],
        epilog="Exit codes: 0 venv ready (JSON on stdout), 1 build or verification failed, 2 usage",
    )
    parser.add_argument("--lock", required=True, type=Path, help="requirements.lock to install")
    parser.add_argument("--root", required=True, type=Path, help="directory holding the venvs")
    parser.add_argument("--python", required=True, help="interpreter that creates the venv")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per step (3600)")
    args = parser.parse_args(argv)
    try:
        print(json.dumps(ensure(args.root, args.lock, args.python, args.timeout)))
    except (OSError, VenvError, subprocess.TimeoutExpired) as error:
        print(f"shared_venv: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
