"""The command line: exit codes, every output format's shape, --fix, syntax errors, -m entry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from tools.lint.cli import main
from tools.lint.test.fixture_tree import load_fixture

REPO = Path(__file__).absolute().parents[3]

# The parts of the SARIF 2.1.0 schema (sarif-schema-2.1.0.json) a consumer relies on. No SARIF
# schema package is among the pinned dependencies, so the required properties are restated here.
_LOCATION = {
    "type": "object",
    "required": ["physicalLocation"],
    "properties": {
        "physicalLocation": {
            "type": "object",
            "required": ["artifactLocation", "region"],
            "properties": {
                "artifactLocation": {
                    "type": "object",
                    "required": ["uri"],
                    "properties": {"uri": {"type": "string"}},
                },
                "region": {
                    "type": "object",
                    "required": ["startLine"],
                    "properties": {
                        "startLine": {"type": "integer", "minimum": 1},
                        "startColumn": {"type": "integer", "minimum": 1},
                    },
                },
            },
        },
        "message": {"type": "object", "required": ["text"]},
    },
}
SARIF_SUBSET_SCHEMA = {
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "version": {"const": "2.1.0"},
        "$schema": {"type": "string"},
        "runs": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["tool", "results"],
                "properties": {
                    "tool": {
                        "type": "object",
                        "required": ["driver"],
                        "properties": {
                            "driver": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {
                                    "rules": {
                                        "type": "array",
                                        "items": {"type": "object", "required": ["id"]},
                                    }
                                },
                            }
                        },
                    },
                    "results": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["message", "ruleId", "locations"],
                            "properties": {
                                "level": {"enum": ["none", "note", "warning", "error"]},
                                "message": {"type": "object", "required": ["text"]},
                                "locations": {"type": "array", "items": _LOCATION},
                                "relatedLocations": {"type": "array", "items": _LOCATION},
                            },
                        },
                    },
                },
            },
        },
    },
}


def _tree(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = load_fixture(name).write(tmp_path)
    monkeypatch.chdir(root)
    monkeypatch.delenv("BUILD_WORKING_DIRECTORY", raising=False)
    return root


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_text_diagnostic_and_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _tree("regression", tmp_path, monkeypatch)
    code, out, _ = _run(["."], capsys)
    assert code == 1
    assert out.splitlines()[0].startswith(
        "backends/transforms/targets.bzl:20:5: duplicate target 'fuse_batch_norm_with_linear' "
        "in package '//backends/transforms' (first registered at "
        "backends/transforms/targets.bzl:12); call chain: backends/transforms/BUCK:5 in "
        "<module> -> backends/transforms/targets.bzl:20 in define_common_targets"
    )
    assert len(out.splitlines()) == 1  # TARGETS and BUCK reach the same call: reported once


def test_clean_tree_exits_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _tree("two_build_systems", tmp_path, monkeypatch)
    assert _run(["."], capsys)[:2] == (0, "")


def test_json_parses_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _tree("top_level", tmp_path, monkeypatch)
    code, out, _ = _run(["--format=json", "."], capsys)
    assert code == 1
    findings = json.loads(out)["findings"]
    assert [(f["path"], f["line"], f["name"]) for f in findings] == [
        ("app/BUILD.bazel", 7, "server"),
        ("app/BUILD.bazel", 11, "util_test"),
    ]
    assert findings[0]["first"] == {"path": "app/BUILD.bazel", "line": 3}
    assert findings[0]["rule"] == "duplicate-target" and findings[0]["column"] == 1
    assert findings[1]["first"] == {"path": "app/BUILD.bazel", "line": 9}


def test_sarif_matches_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _tree("labels", tmp_path, monkeypatch)
    code, out, _ = _run(["--format=sarif", "."], capsys)
    assert code == 1
    log = json.loads(out)
    jsonschema.validate(log, SARIF_SUBSET_SCHEMA)
    run = log["runs"][0]
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert {r["ruleId"] for r in run["results"]} == {"unknown-local-label"}
    for result in run["results"]:
        assert rule_ids[result["ruleIndex"]] == result["ruleId"]


def test_github_annotations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _tree("modes", tmp_path, monkeypatch)
    code, out, _ = _run(["--format=github", "."], capsys)
    assert code == 1
    (line,) = out.splitlines()
    assert line.startswith("::error file=pkg/BUCK,line=14,col=1,title=duplicate-target::")
    assert "duplicate target 'twice_fbcode'" in line


def test_disable_a_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _tree("labels", tmp_path, monkeypatch)
    assert _run(["--disable=unknown-local-label", "."], capsys)[:2] == (0, "")


def test_syntax_error_has_location_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _tree("unreached", tmp_path, monkeypatch)
    (root / "pkg" / "broken.bzl").write_text("def f(:\n    pass\n")
    code, out, err = _run(["."], capsys)
    assert code == 2
    assert out.startswith("pkg/broken.bzl:1:7: Parse error: unexpected symbol ':' here")
    assert "Traceback" not in out + err


def test_loaded_file_with_syntax_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _tree("regression", tmp_path, monkeypatch)
    target = root / "backends" / "transforms" / "targets.bzl"
    target.write_text(target.read_text().replace('name = "fuse_batch_norm_with_conv",', "name ="))
    code, out, _ = _run(["--format=json", "."], capsys)
    assert code == 2
    (finding,) = json.loads(out)["findings"]
    assert finding["rule"] == "syntax-error"
    assert (finding["path"], finding["line"]) == ("backends/transforms/targets.bzl", 6)


def test_missing_path_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _tree("unreached", tmp_path, monkeypatch)
    code, out, _ = _run(["no/such/dir"], capsys)
    assert code == 2 and "no such file or directory" in out


def test_fix_removes_exactly_the_duplicate_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _tree("regression", tmp_path, monkeypatch)
    target = root / "backends" / "transforms" / "targets.bzl"
    before = target.read_bytes().splitlines(keepends=True)
    code, out, err = _run(["--fix", "."], capsys)
    assert (code, out) == (0, "")
    assert "fixed: backends/transforms/targets.bzl:20: deleted lines 19-26" in err
    after = target.read_bytes().splitlines(keepends=True)
    # The diff is exactly the removed block (with its blank separator line).
    assert after == before[:18] + before[26:]
    assert b"".join(before[18:26]).decode() == (
        "\n"
        "    runtime.python_library(\n"
        '        name = "fuse_batch_norm_with_linear",\n'
        '        srcs = ["fuse_batch_norm_with_linear.py"],\n'
        "        deps = [\n"
        '            ":fuse_batch_norm_with_conv",\n'
        "        ],\n"
        "    )\n"
    )
    assert _run(["."], capsys)[:2] == (0, "")


def test_fix_leaves_differing_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _tree("top_level", tmp_path, monkeypatch)
    before = (root / "app" / "BUILD.bazel").read_bytes()
    code, _, err = _run(["--fix", "."], capsys)
    assert code == 1
    assert (root / "app" / "BUILD.bazel").read_bytes() == before
    assert "not fixed: app/BUILD.bazel:7: duplicate 'server' left for a person" in err


def test_verbose_says_what_it_could_not_resolve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _tree("unknown_loads", tmp_path, monkeypatch)
    code, _, err = _run(["-v", "."], capsys)
    assert code == 1
    assert "load('@other//defs:rules.bzl') not resolved in the tree" in err
    assert "undefined global 'undefined_prelude_rule'" in err
    assert "evaluation stopped" in err


def test_python_dash_m_entry_point(tmp_path: Path) -> None:
    root = load_fixture("regression").write(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("BUILD_WORKING_DIRECTORY", None)
    proc = subprocess.run(
        [sys.executable, "-m", "tools.lint", "--format=json", str(root)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["findings"][0]["name"] == "fuse_batch_norm_with_linear"


def test_undecodable_file_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _tree("unreached", tmp_path, monkeypatch)
    (root / "pkg" / "BUILD.bazel").write_bytes(b'cc_library(name = "\xff")\n')
    code, out, err = _run(["."], capsys)
    assert code == 2
    assert out.startswith("pkg/BUILD.bazel:1:1: not UTF-8")
    assert "Traceback" not in out + err


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[loaded.x]\nkind = "macro"\n', "loaded.x.kind: expected one of"),
        (
            '[loaded.gen]\nkind = "rule"\noutputs = ["out"]\n',
            "loaded.gen.outputs: expected a table, got ['out']",
        ),
    ],
)
def test_broken_repo_config_exit_2(
    toml: str,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = _tree("unreached", tmp_path, monkeypatch)
    (root / ".target-lint.toml").write_text(toml)
    code, _, err = _run(["."], capsys)
    assert code == 2
    assert message in err
