"""Checks that a second clone's `bazel test //...` took every cacheable result from the cache.

Reads what Bazel itself reports for the two runs of tools/ci/two_clone_cache.sh: the console output
(the "INFO: N processes: ..." line, the test summary, the elapsed time, the venv line of
python_venv.bzl) and the execution logs (--execution_log_json_file), which list every spawn Bazel
ran or took from the cache. A spawn of the second run that executed although it is cacheable is a
miss; the first run's spawn with the same outputs names its cause (a differing input, argument or
environment variable, or "not run by the first build").

Usage: python3 tools/ci/cache_hits.py --first-log L1 --first-exec E1 \
           --second-log L2 --second-exec E2
Exit codes: 0 no miss (the hit counts are printed); 1 misses (listed with causes) or the second run
failed or installed the venv again; 2 usage or unreadable input. --json prints the result as JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Spawn = dict[str, Any]


def read_exec_log(path: Path) -> list[Spawn]:
    """The spawns of a JSON execution log (a stream of concatenated JSON objects)."""
    text = path.read_text()
    decoder = json.JSONDecoder()
    spawns: list[Spawn] = []
    at = 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return spawns
        spawn, at = decoder.raw_decode(text, at)
        spawns.append(spawn)


def _key(spawn: Spawn) -> tuple[str, str]:
    """Identifies an action across the two clones: its mnemonic and its outputs' exec paths."""
    return spawn.get("mnemonic", ""), "\n".join(sorted(spawn.get("listedOutputs", [])))


def _inputs(spawn: Spawn) -> dict[str, str]:
    return {i["path"]: i.get("digest", {}).get("hash", "") for i in spawn.get("inputs", [])}


def _env(spawn: Spawn) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in spawn.get("environmentVariables", [])}


def _describe(spawn: Spawn) -> str:
    return spawn.get("progressMessage") or f"{spawn.get('mnemonic')} {_key(spawn)[1][:80]}"


def cause(miss: Spawn, first: Spawn | None) -> str:
    """Why the second run could not take `miss` from the first run's results."""
    if first is None:
        return "not run by the first build (up to date in its output base, or a new action)"
    reasons = []
    if first.get("commandArgs") != miss.get("commandArgs"):
        reasons.append("command line differs")
    env_a, env_b = _env(first), _env(miss)
    reasons += [
        f"environment {name}: {env_a.get(name)!r} vs {env_b.get(name)!r}"
        for name in sorted(env_a.keys() | env_b.keys())
        if env_a.get(name) != env_b.get(name)
    ]
    in_a, in_b = _inputs(first), _inputs(miss)
    changed = sorted(p for p in in_a.keys() | in_b.keys() if in_a.get(p) != in_b.get(p))
    reasons += [
        f"input {p}: " + ("only in the second" if p not in in_a else "only in the first")
        if p not in in_a or p not in in_b
        else f"input {p}: content differs"
        for p in changed[:5]
    ]
    if len(changed) > 5:
        reasons.append(f"... {len(changed) - 5} more differing inputs")
    if not reasons:
        if not (first.get("remoteCacheable") or first.get("remoteCacheHit")):
            return "same action, but the first build could not upload it (not remote-cacheable)"
        if first.get("exitCode", 0) != 0:
            return f"same action, but it failed in the first build (exit {first.get('exitCode')})"
        return "same action and inputs: the first build's upload did not reach the cache"
    return "; ".join(reasons)


@dataclass
class Report:
    processes: str = ""
    elapsed: tuple[float | None, float | None] = (None, None)
    tests: int = 0
    tests_cached: int = 0
    hits: int = 0
    misses: list[dict[str, str]] = field(default_factory=list)
    uncacheable: list[str] = field(default_factory=list)
    regenerated_xml: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _is_xml_generation(spawn: Spawn) -> bool:
    """Bazel's test.xml writer for a test that wrote none: its command line holds this run's test
    duration (0 for a result from the cache), so its key never matches the first run's. The test
    itself was not run again."""
    args = spawn.get("commandArgs") or [""]
    return spawn.get("mnemonic") == "TestRunner" and args[0].endswith("/generate-xml.sh")


def _elapsed(log: str) -> float | None:
    found = re.findall(r"INFO: Elapsed time: ([0-9.]+)s", log)
    return float(found[-1]) if found else None


def check(first_log: str, first: list[Spawn], second_log: str, second: list[Spawn]) -> Report:
    report = Report(elapsed=(_elapsed(first_log), _elapsed(second_log)))
    found = re.findall(r"INFO: (\d+ processes?: [^\n]*)", second_log)
    report.processes = found[-1].strip() if found else ""
    results = re.findall(r"^//\S+ +(\(cached\) )?PASSED", second_log, re.MULTILINE)
    report.tests = len(results)
    report.tests_cached = sum(1 for cached in results if cached)
    if not re.search(r"^INFO: Build completed successfully", second_log, re.MULTILINE):
        report.problems.append("the second run did not complete successfully")
    if re.search(r"^//\S+ +(FAILED|TIMEOUT|NO STATUS)", second_log, re.MULTILINE):
        report.problems.append("tests failed in the second run")
    if "python_venv: installed" in second_log:
        report.problems.append("the second clone installed the venv again (python_venv line)")
    elif "python_venv: reusing" not in second_log:
        report.problems.append("no 'python_venv: reusing' line in the second run")
    by_key = {_key(spawn): spawn for spawn in first}
    for spawn in second:
        if spawn.get("remoteCacheHit"):
            report.hits += 1
        elif not (spawn.get("cacheable") and spawn.get("remoteCacheable")):
            report.uncacheable.append(_describe(spawn))
        elif _is_xml_generation(spawn):
            report.regenerated_xml.append(_describe(spawn))
        else:
            report.misses.append(
                {"action": _describe(spawn), "cause": cause(spawn, by_key.get(_key(spawn)))}
            )
    return report


def _print(report: Report) -> None:
    first, second = report.elapsed
    print(f"cache_hits: second clone: {report.processes or '(no processes line)'}")
    print(
        f"cache_hits: spawns from the remote cache: {report.hits}; tests: "
        f"{report.tests_cached} of {report.tests} passed (cached)"
    )
    if first and second:
        print(
            f"cache_hits: elapsed: first {first:.0f} s, second {second:.0f} s "
            f"({100 * second / first:.0f}% of the first)"
        )
    for name in report.uncacheable:
        print(f"cache_hits: executed, not cacheable by its tags: {name}")
    for name in report.regenerated_xml:
        print(f"cache_hits: executed, test.xml written anew from the cached log: {name}")
    for miss in report.misses:
        print(f"cache_hits: MISS {miss['action']}: {miss['cause']}")
    for problem in report.problems:
        print(f"cache_hits: error: {problem}")
    ok = not report.misses and not report.problems
    print("cache_hits: " + ("OK, no cacheable action ran again" if ok else "FAILED"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="cache_hits",
        description=__doc__.split("\n\n")[0],
        epilog="Exit codes: 0 no miss; 1 misses, failed or venv reinstalled; 2 usage/input.",
    )
    parser.add_argument("--first-log", type=Path, required=True, help="console output, run 1")
    parser.add_argument("--first-exec", type=Path, required=True, help="execution log, run 1")
    parser.add_argument("--second-log", type=Path, required=True, help="console output, run 2")
    parser.add_argument("--second-exec", type=Path, required=True, help="execution log, run 2")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    try:
        report = check(
            args.first_log.read_text(errors="replace"),
            read_exec_log(args.first_exec),
            args.second_log.read_text(errors="replace"),
            read_exec_log(args.second_exec),
        )
    except (OSError, ValueError) as error:
        print(f"cache_hits: error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.__dict__, indent=2))
    else:
        _print(report)
    return 1 if report.misses or report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
