"""The file-target fixture against real Bazel: the Bazel this repository runs (4.2.3, what
./bazelw runs) rejects exactly the packages the linter reports, at the line it reports, accepts the
twins, and declares exactly the outputs the linter models.

One `bazel query --keep_going '//...:*'` over the whole fixture tree (batch mode: no server left
behind; the output root is the test's own temporary directory; nothing is downloaded).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tools.lint.config import load_config
from tools.lint.evaluator import Evaluator
from tools.lint.findings import FILE_TARGET_CONFLICT
from tools.lint.linter import lint
from tools.lint.test.fixture_tree import FixtureTree, load_fixture

# ./bazelw's Bazel: Debian's bazel-bootstrap 4.2.3 (its /etc/bazel/bazelrc names the install base).
BAZEL = Path("/usr/bin/bazel-4")
_FRAME_RE = re.compile(r'^\s+File "(?P<path>[^"]+)", line (?P<line>\d+), column \d+, in ')
_ERROR_RE = re.compile(r"^Error in \w+: (?P<message>.*)$")
_BROKEN_RE = re.compile(r"^ERROR: package contains errors: (?P<package>\S+)$")


@dataclass(frozen=True)
class BazelView:
    rejected: set[str]  # packages Bazel could not load
    stops: dict[str, tuple[str, int, str]]  # package -> (path, line, message) of its error
    generated: set[str]  # "pkg:name" of every generated file of the packages it loaded


@dataclass(frozen=True)
class Setup:
    fixture: FixtureTree
    root: Path
    bazel: BazelView


def _query(root: Path, output_root: Path) -> BazelView:
    proc = subprocess.run(
        [
            str(BAZEL),
            "--nohome_rc",
            "--noworkspace_rc",
            "--batch",
            f"--output_user_root={output_root}",
            "query",
            "--keep_going",
            "--experimental_repository_disable_download",
            "--output=label_kind",
            "//...:*",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    # 0: everything loaded; 3: --keep_going went past packages that failed to load.
    assert proc.returncode in (0, 3), f"bazel query exited {proc.returncode}:\n{proc.stderr}"
    rejected: set[str] = set()
    stops: dict[str, tuple[str, int, str]] = {}
    frame: tuple[str, int] | None = None
    prefix = str(root) + "/"
    for line in proc.stderr.splitlines():
        if match := _FRAME_RE.match(line):
            frame = (match["path"].removeprefix(prefix), int(match["line"]))
        elif (match := _ERROR_RE.match(line)) and frame is not None:
            package = frame[0].rpartition("/")[0]
            stops.setdefault(package, (frame[0], frame[1], match["message"]))
            frame = None
        elif match := _BROKEN_RE.match(line):
            rejected.add(match["package"])
    generated = {  # of the packages that loaded ("pkg:name")
        label
        for line in proc.stdout.splitlines()
        if line.startswith("generated file //")
        for label in [line.removeprefix("generated file //")]
        if label.partition(":")[0] not in rejected
    }
    return BazelView(rejected=rejected, stops=stops, generated=generated)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    assert BAZEL.is_file(), f"no Bazel at {BAZEL} (./bazelw installs Debian's bazel-bootstrap)"
    fixture = load_fixture("file_targets")
    root = fixture.write(tmp_path_factory.mktemp("tree"))
    return Setup(fixture, root, _query(root, tmp_path_factory.mktemp("bazel")))


def _bazel_packages(fixture: FixtureTree) -> set[str]:
    return {p.rpartition("/")[0] for p in fixture.files if p.endswith("/BUILD")}


def test_bazel_rejects_exactly_the_packages_the_linter_reports(setup: Setup) -> None:
    reported = {e.path.rpartition("/")[0] for e in setup.fixture.expected}
    assert reported, "the fixture has no rejected package"
    assert setup.bazel.rejected == reported
    accepted = _bazel_packages(setup.fixture) - reported
    assert len(accepted) >= 8, "the fixture has too few twins that Bazel accepts"


def test_bazel_stops_where_the_linter_reports(setup: Setup) -> None:
    expected = {e.path.rpartition("/")[0]: e for e in setup.fixture.expected}
    for package, finding in sorted(expected.items()):
        path, line, message = setup.bazel.stops[package]
        assert (path, line) == (finding.path, finding.line), (package, message)
        assert f"'{finding.name}'" in message or f":{finding.name}'" in message, (package, message)


def test_the_linter_reports_what_bazel_rejects(setup: Setup) -> None:
    """The fixture's expectations are the linter's findings (lint_test checks them too; here
    they meet Bazel's verdict in one place)."""
    result = lint([setup.root], None, {FILE_TARGET_CONFLICT}, cwd=setup.root)
    assert result.errors == []
    reported = {f.location.path.rpartition("/")[0] for f in result.findings}
    assert reported == setup.bazel.rejected


def test_the_linters_outputs_are_bazels_generated_files(setup: Setup) -> None:
    """Native rules' implicit outputs (the configuration's table), genrule outs, attr.output()
    and rule(outputs = ...): the linter's file targets of each package Bazel loaded."""
    evaluator = Evaluator(setup.root, load_config())
    modelled = set()
    for package in _bazel_packages(setup.fixture) - setup.bazel.rejected:
        run = evaluator.evaluate_entry(setup.root / package / "BUILD")
        assert run.files is not None and run.files.conflicts == []
        modelled |= {f"{package}:{t.name}" for t in run.files.files.values() if not t.source}
    assert "native_outputs:jb_deploy.jar" in modelled
    assert modelled == setup.bazel.generated
