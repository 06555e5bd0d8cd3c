"""The linter installs like any Python tool: its wheel, built from the repository's pyproject.toml,
installs into a fresh virtualenv with its one dependency from local wheel files only, and the
`target-lint` command it gives reports what Bazel rejects, with the documented exit codes.

Offline by construction: setuptools (the build backend) is the pinned environment's own
(`--no-build-isolation`), starlark-pyo3 and its dependency are the lock's wheels that @et_wheels
downloaded when Bazel fetched it, and pip runs with `--no-index` and none of the machine's settings.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tools.lint.test.fixture_tree import load_fixture

LINT = Path(__file__).absolute().parent.parent  # tools/lint in the runfiles tree
REPO = LINT.parents[1]
RUNFILES = REPO.parent
# The linter's package as the wheel has it: its modules and its default configuration.
PACKAGE_FILES = [*sorted(p.name for p in LINT.glob("*.py")), "default_config.toml"]


@dataclass(frozen=True)
class Installed:
    wheel: Path  # the wheel the build made
    venv: Path  # the fresh virtualenv it is installed in

    @property
    def command(self) -> Path:
        return self.venv / "bin" / "target-lint"


def _run(command: list[str | Path], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Runs a command with nothing of this checkout on its import path, and pip with no settings
    of the machine's (no index or wheel directory but those the command names)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "BUILD_WORKING_DIRECTORY") and not k.startswith("PIP_")
    }
    env["PIP_CONFIG_FILE"] = os.devnull
    return subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """Builds the wheel from a copy of its sources (the build writes beside them) and installs it
    into a fresh virtualenv."""
    source = tmp_path_factory.mktemp("source")
    shutil.copy(REPO / "pyproject.toml", source)
    (source / "tools" / "lint").mkdir(parents=True)
    for name in [*PACKAGE_FILES, "README.md"]:
        shutil.copy(LINT / name, source / "tools" / "lint" / name)
    dist = tmp_path_factory.mktemp("dist")
    pip: list[str | Path] = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    built = _run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", dist, source]
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = dist.glob("target_lint-*.whl")
    venv = tmp_path_factory.mktemp("venv")
    created = _run([sys.executable, "-m", "venv", "--without-pip", venv])
    assert created.returncode == 0, created.stderr
    wheels = RUNFILES / "et_wheels" / "wheels"
    assert list(wheels.glob("starlark_pyo3-*.whl")), f"no starlark-pyo3 wheel in {wheels}"
    # This pip installs into the new virtualenv (--python), from the two directories only.
    install: list[str | Path] = [
        "install",
        "--no-index",
        "--find-links",
        dist,
        "--find-links",
        wheels,
    ]
    done = _run([*pip, "--python", venv / "bin" / "python", *install, "target-lint"])
    assert done.returncode == 0, done.stdout + done.stderr
    return Installed(wheel=wheel, venv=venv)


def test_the_wheel_holds_the_package_and_its_command(installed: Installed) -> None:
    wheel = zipfile.ZipFile(installed.wheel)
    names = wheel.namelist()
    package = sorted(n for n in names if n.startswith("target_lint/"))
    assert package == sorted(f"target_lint/{f}" for f in [*PACKAGE_FILES, "README.md"])
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert "target-lint = target_lint.cli:main" in wheel.read(entry_points).decode()


def test_installed_command_reports_what_bazel_rejects(installed: Installed, tmp_path: Path) -> None:
    """The file-target fixture (bazel_agreement_test holds it against Bazel): exit 1 and its
    findings, from the virtualenv's package, not from this checkout."""
    fixture = load_fixture("file_targets")
    root = fixture.write(tmp_path)
    proc = _run([installed.command, "--format=json", "."], cwd=root)
    assert proc.returncode == 1, proc.stderr
    findings = json.loads(proc.stdout)["findings"]
    found = {(f["rule"], f["path"], f["line"], f["name"]) for f in findings}
    assert found == {(e.rule, e.path, e.line, e.name) for e in fixture.expected}
    python = installed.venv / "bin" / "python"
    where = _run([python, "-c", "import target_lint; print(target_lint.__file__)"])
    assert where.stdout.startswith(str(installed.venv)), where.stdout + where.stderr


def test_installed_command_exit_codes(installed: Installed, tmp_path: Path) -> None:
    root = load_fixture("two_build_systems").write(tmp_path)
    assert _run([installed.command, "."], cwd=root).returncode == 0
    (root / "broken").mkdir()
    (root / "broken" / "BUILD").write_text("cc_library(name = \n")
    broken = _run([installed.command, "."], cwd=root)
    assert broken.returncode == 2 and broken.stdout.startswith("broken/BUILD:"), broken.stdout
    helped = _run([installed.command, "--help"])
    assert helped.returncode == 0 and "file-target-conflict" in helped.stdout


def test_pre_commit_hook_runs_the_installed_command(installed: Installed, tmp_path: Path) -> None:
    """pre-commit's `language: python` installs the repository (`pip install .`, this wheel) and
    runs the hook's entry with its args in the repository being checked."""
    hooks = (REPO / ".pre-commit-hooks.yaml").read_text()
    assert re.search(r"^  language: python$", hooks, re.MULTILINE)
    entry = re.search(r"^  entry: (\S+)$", hooks, re.MULTILINE)
    args = re.search(r"^  args: (\[.*\])$", hooks, re.MULTILINE)
    assert entry is not None and args is not None
    root = load_fixture("regression").write(tmp_path)
    command = [
        installed.venv / "bin" / entry.group(1),
        "--format=github",
        *json.loads(args.group(1)),
    ]
    proc = _run(command, cwd=root)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("::error file=backends/transforms/targets.bzl,line=20,")


def test_dependency_is_pinned_as_in_the_lock() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    lock = (REPO / "third_party" / "python" / "requirements.lock").read_text()
    pinned = re.search(r"^starlark-pyo3==(\S+) ", lock, re.MULTILINE)
    assert pinned is not None
    assert project["dependencies"] == [f"starlark-pyo3=={pinned.group(1)}"]
    assert project["scripts"] == {"target-lint": "target_lint.cli:main"}
