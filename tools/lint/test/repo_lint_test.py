"""This repository's own build files lint clean, and the buildifier test sees every package.

The test reads the checkout itself (found through the runfiles symlink of tools/lint/BUILD.bazel),
limited to files git tracks, so colleagues' uncommitted work does not decide its outcome.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tools.lint.config import load_config
from tools.lint.evaluator import Evaluator
from tools.lint.findings import CHECKS
from tools.lint.linter import lint
from tools.lint.workspace import collect_files

ENTRY_NAMES = ("BUILD", "BUILD.bazel", "BUCK", "TARGETS")


def _checkout() -> Path:
    marker = (Path(__file__).absolute().parent.parent / "BUILD.bazel").resolve()
    root = marker.parents[2]
    assert (root / "WORKSPACE").is_file(), f"no checkout found from {marker}"
    return root


def _tracked_build_files(root: Path) -> list[Path]:
    """Build files git tracks (all of them under the tree when git is not available)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", "*BUILD", "*BUILD.bazel", "*BUCK", "*TARGETS", "*.bzl"],
            cwd=root,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split("\0")
        return [root / p for p in listed if p and (root / p).is_file()]
    except (OSError, subprocess.CalledProcessError):
        return collect_files(root, root, ENTRY_NAMES, ".bzl")


def test_repository_lints_clean() -> None:
    root = _checkout()
    files = _tracked_build_files(root)
    assert any(f.name == "BUILD.bazel" for f in files)
    result = lint(files, load_config(), set(CHECKS), cwd=root)
    assert [str(e) for e in result.errors] == []
    assert [f"{f.location.path}:{f.location.line}: {f.message}" for f in result.findings] == []
    assert result.packages >= 10


def _covered_packages(root: Path) -> set[str]:
    """Packages whose `:starlark_sources` the root `all_starlark_sources` filegroup lists."""
    evaluator = Evaluator(root, load_config())
    run = evaluator.evaluate_entry(root / "BUILD.bazel")
    (group,) = run.by_name["all_starlark_sources"]
    covered = set()
    for label in group.labels:
        if label == ":starlark_sources":
            covered.add("")
        elif label.startswith("//") and label.endswith(":starlark_sources"):
            covered.add(label[2:].partition(":")[0])
    return covered


def _uncovered_packages(root: Path) -> list[str]:
    packages = {
        f.parent.relative_to(root).as_posix().removeprefix(".")
        for f in _tracked_build_files(root)
        if f.name == "BUILD.bazel"
    }
    return sorted(packages - _covered_packages(root))


def test_every_package_is_covered_by_all_starlark_sources() -> None:
    missing = _uncovered_packages(_checkout())
    assert missing == [], (
        "BUILD.bazel packages the buildifier test skips; add "
        + ", ".join(f'"//{p}:starlark_sources"' for p in missing)
        + " to all_starlark_sources in the root BUILD.bazel"
    )


def test_coverage_check_finds_a_missing_package(tmp_path: Path) -> None:
    (tmp_path / "WORKSPACE").write_text("")
    (tmp_path / "BUILD.bazel").write_text(
        'filegroup(name = "starlark_sources")\n'
        'filegroup(name = "all_starlark_sources", srcs = [":starlark_sources", '
        '"//a:starlark_sources", "@rules_cc//:starlark_sources"])\n'
    )
    for package in ("a", "b/c"):
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "BUILD.bazel").write_text("")
    assert _uncovered_packages(tmp_path) == ["b/c"]
