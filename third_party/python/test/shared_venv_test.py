"""shared_venv.py against real virtualenvs: one pinned wheel (typing_extensions, from @et_wheels)
installed with pip --no-index into venvs under the test's temporary directory. Each build costs
a `python -m venv` with pip (~10-20 s), so the tests share builds where they can."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from third_party.python import shared_venv

RUNFILES = Path(__file__).absolute().parents[4]
LOCK = RUNFILES / "et_cpu_plugin" / "third_party/python/requirements.lock"
WHEELS = RUNFILES / "et_wheels" / "wheels"
SCRIPT = RUNFILES / "et_cpu_plugin" / "third_party/python/shared_venv.py"


def _pin(name: str) -> str:
    """The lock's requirement of `name`, hash included, as one line."""
    text = LOCK.read_text().replace("\\\n", " ")
    (line,) = [entry for entry in text.splitlines() if entry.startswith(name + "==")]
    return line


def _write_lock(path: Path, comment: str) -> Path:
    path.write_text(f"# {comment}\n{_pin('typing_extensions')}\n")
    return path


@pytest.fixture(scope="module", autouse=True)
def offline_pip() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PIP_NO_INDEX", "1")
        patch.setenv("PIP_FIND_LINKS", str(WHEELS))
        yield


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """One venv built from a one-pin lock; its `lock` and `root` are in the result too."""
    base = tmp_path_factory.mktemp("built")
    lock = _write_lock(base / "requirements.lock", "one pin")
    result = shared_venv.ensure(base / "cache", lock, sys.executable, timeout=600)
    return {**result, "lock": lock, "root": base / "cache"}


def test_a_build_is_stamped_and_verified(built: dict[str, object]) -> None:
    assert built["action"] == "built"
    venv, lock = Path(str(built["venv"])), Path(str(built["lock"]))
    assert venv.name == "venv-" + shared_venv.lock_digest(lock)
    assert (venv / shared_venv.STAMP).read_text().strip() == built["digest"]
    assert shared_venv.problems(venv, lock, str(built["digest"])) == []


def test_the_same_lock_reuses_it(built: dict[str, object]) -> None:
    lock = Path(str(built["lock"]))
    again = shared_venv.ensure(Path(str(built["root"])), lock, sys.executable, timeout=600)
    assert (again["action"], again["venv"]) == ("reused", built["venv"])


def test_a_lock_change_builds_a_new_venv(built: dict[str, object], tmp_path: Path) -> None:
    lock = _write_lock(tmp_path / "requirements.lock", "one pin, re-locked")
    new = shared_venv.ensure(Path(str(built["root"])), lock, sys.executable, timeout=600)
    assert new["action"] == "built"
    assert new["venv"] != built["venv"]
    assert Path(str(built["venv"]), shared_venv.STAMP).is_file()  # the old lock's stays


def _view(venv: Path, at: Path, stamp: str | None) -> Path:
    """A venv at `at` that runs `venv`'s interpreter and packages, with its own stamp."""
    (at / "bin").mkdir(parents=True)
    (at / "pyvenv.cfg").write_text((venv / "pyvenv.cfg").read_text())
    (at / "bin/python3").symlink_to(venv / "bin/python3")
    (at / "lib").symlink_to(venv / "lib")
    if stamp is not None:
        (at / shared_venv.STAMP).write_text(stamp + "\n")
    return at


def test_verification_names_a_pin_the_venv_lacks(built: dict[str, object], tmp_path: Path) -> None:
    other = tmp_path / "other.lock"
    other.write_text(re.sub(r"==[^ ]+", "==0.0.1", _pin("typing_extensions")) + "\n")
    digest = shared_venv.lock_digest(other)
    view = _view(Path(str(built["venv"])), tmp_path / "view", digest)
    installed = _pin("typing_extensions").split("==")[1].split()[0]
    assert shared_venv.problems(view, other, digest) == [
        f"typing-extensions==0.0.1 not installed (found {installed})"
    ]
    assert shared_venv.problems(view, Path(str(built["lock"])), str(built["digest"])) == [
        f"stamp {view / shared_venv.STAMP} is for another lock"
    ]


def test_an_interrupted_build_is_built_again_once_by_concurrent_runs(tmp_path: Path) -> None:
    lock = _write_lock(tmp_path / "requirements.lock", "interrupted")
    partial = tmp_path / "c" / f"venv-{shared_venv.lock_digest(lock)}"
    (partial / "bin").mkdir(parents=True)  # what a build killed before its stamp leaves
    assert shared_venv.problems(partial, lock, shared_venv.lock_digest(lock)) == [
        f"no stamp {partial / shared_venv.STAMP} (never finished)"
    ]
    command = [sys.executable, str(SCRIPT), "--lock", str(lock), "--root", str(tmp_path / "c")]
    command += ["--python", sys.executable]
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    results = [json.loads(run.communicate()[0]) for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    assert sorted(str(r["action"]) for r in results) == ["built", "reused"]
    assert shared_venv.problems(partial, lock, shared_venv.lock_digest(lock)) == []


def test_cli_reports_a_failed_build(tmp_path: Path) -> None:
    lock = _write_lock(tmp_path / "requirements.lock", "no python")
    command = [sys.executable, str(SCRIPT), "--lock", str(lock), "--root", str(tmp_path / "c")]
    run = subprocess.run(
        [*command, "--python", "/nonexistent/python3"], capture_output=True, text=True
    )
    assert run.returncode == 1
    assert run.stderr.startswith("shared_venv: ") and "/nonexistent/python3" in run.stderr
