"""cache_hits.py on execution logs and console output in the format Bazel 4.2.3 writes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tools.ci import cache_hits


def _spawn(output: str, *, hit: bool = False, **changes: Any) -> dict[str, Any]:
    spawn: dict[str, Any] = {
        "commandArgs": ["/usr/bin/gcc", "-c", "a.cc"],
        "environmentVariables": [{"name": "PATH", "value": "/bin:/usr/bin"}],
        "inputs": [{"path": "a.cc", "digest": {"hash": "aa", "sizeBytes": "1"}}],
        "listedOutputs": [output],
        "remotable": True,
        "cacheable": True,
        "remoteCacheable": True,
        "progressMessage": f"Compiling {output}",
        "mnemonic": "CppCompile",
        "runner": "remote cache hit" if hit else "processwrapper-sandbox",
        "remoteCacheHit": hit,
        "exitCode": 0,
    }
    spawn.update(changes)
    return spawn


SECOND_OK = """\
DEBUG: /x/third_party/python/python_venv.bzl:174:10: python_venv: reusing /c/venv-ab (0.5 s)
INFO: Elapsed time: 30.0s, Critical Path: 1.0s
INFO: 7 processes: 3 remote cache hit, 4 internal.
//a:a_test                                                   (cached) PASSED in 1.0s
//a:b_test                                                   (cached) PASSED in 2.0s
INFO: Build completed successfully, 7 total actions
"""
FIRST = "INFO: Elapsed time: 300.0s, Critical Path: 1.0s\n"


def test_all_hits_pass_and_are_counted() -> None:
    second = [_spawn("a.o", hit=True), _spawn("b.o", hit=True)]
    report = cache_hits.check(FIRST, [_spawn("a.o"), _spawn("b.o")], SECOND_OK, second)
    assert (report.hits, report.misses, report.problems) == (2, [], [])
    assert (report.tests, report.tests_cached) == (2, 2)
    assert report.processes == "7 processes: 3 remote cache hit, 4 internal."
    assert report.elapsed == (300.0, 30.0)


def test_a_miss_names_the_input_that_differs() -> None:
    changed = [{"path": "a.cc", "digest": {"hash": "bb", "sizeBytes": "1"}}]
    report = cache_hits.check(FIRST, [_spawn("a.o")], SECOND_OK, [_spawn("a.o", inputs=changed)])
    assert report.misses == [{"action": "Compiling a.o", "cause": "input a.cc: content differs"}]


def test_a_miss_names_an_environment_difference_and_an_extra_input() -> None:
    env = [{"name": "PATH", "value": "/home/me/bin:/bin"}]
    inputs = [*_spawn("a.o")["inputs"], {"path": "b.h", "digest": {"hash": "cc"}}]
    (miss,) = cache_hits.check(
        FIRST, [_spawn("a.o")], SECOND_OK, [_spawn("a.o", environmentVariables=env, inputs=inputs)]
    ).misses
    assert miss["cause"] == (
        "environment PATH: '/bin:/usr/bin' vs '/home/me/bin:/bin'; input b.h: only in the second"
    )


def test_a_miss_the_first_build_never_ran() -> None:
    (miss,) = cache_hits.check(FIRST, [], SECOND_OK, [_spawn("a.o")]).misses
    assert miss["cause"].startswith("not run by the first build")


def test_an_identical_action_that_failed_first() -> None:
    (miss,) = cache_hits.check(
        FIRST, [_spawn("a.o", exitCode=1)], SECOND_OK, [_spawn("a.o")]
    ).misses
    assert miss["cause"] == "same action, but it failed in the first build (exit 1)"


def test_uncacheable_spawns_are_listed_not_failed() -> None:
    external = _spawn("t.xml", cacheable=False, progressMessage="Testing //a:ext_test")
    report = cache_hits.check(FIRST, [external], SECOND_OK, [external])
    assert (report.uncacheable, report.misses) == (["Testing //a:ext_test"], [])


def test_test_xml_generation_is_listed_not_failed() -> None:
    xml = _spawn(
        "t/test.xml",
        mnemonic="TestRunner",
        progressMessage="Testing //a:t",
        commandArgs=["external/bazel_tools/tools/test/generate-xml.sh", "t/test.log", "0", "0"],
    )
    report = cache_hits.check(FIRST, [], SECOND_OK, [xml])
    assert (report.regenerated_xml, report.misses) == (["Testing //a:t"], [])


def test_a_reinstalled_venv_and_a_failed_run_are_problems() -> None:
    log = SECOND_OK.replace("python_venv: reusing", "python_venv: installed requirements.lock into")
    log = log.replace("INFO: Build completed successfully", "FAILED: Build did NOT complete")
    problems = cache_hits.check(FIRST, [], log, []).problems
    assert problems == [
        "the second run did not complete successfully",
        "the second clone installed the venv again (python_venv line)",
    ]


def test_main_reads_a_concatenated_json_execution_log(tmp_path: Path) -> None:
    logs = {}
    for name, spawns in (("first", [_spawn("a.o")]), ("second", [_spawn("a.o", hit=True)])):
        (tmp_path / f"{name}.exec").write_text("\n".join(json.dumps(s, indent=2) for s in spawns))
        logs[name] = tmp_path / f"{name}.log"
    logs["first"].write_text(FIRST)
    logs["second"].write_text(SECOND_OK)
    args = ["--first-log", str(logs["first"]), "--first-exec", str(tmp_path / "first.exec")]
    args += ["--second-log", str(logs["second"]), "--second-exec", str(tmp_path / "second.exec")]
    assert cache_hits.main(args) == 0
    assert cache_hits.main([*args[:2], "--first-exec", str(tmp_path / "missing"), *args[4:]]) == 2
