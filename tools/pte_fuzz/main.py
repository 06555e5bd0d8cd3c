"""`bazel run //tools/pte_fuzz -- [--program NAME] [--cases N] [--seed S] [--json FILE]`

Whole-file mutation fuzzing of delegated `.pte` programs: each case mutates the whole file (biased
toward the delegate payloads and the named data), loads it and runs it in a forked child, and
counts how it ended. Crashing cases are kept with their recipe and can be replayed exactly.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import hashlib
import json
import os
import re
import sys
import time
from typing import Any

EPILOG = """\
examples:
  bazel run //tools/pte_fuzz                                   1000 cases of each program
  nice -n 19 bazel run //tools/pte_fuzz -- --cases 10000 --json long.json
  bazel run //tools/pte_fuzz -- --replay cnn:0:4711            one case again, in this process
  bazel run //tools/pte_fuzz -- --attribute --work-dir W       crashes kept in W/crashes: whose?
  bazel run //tools/pte_fuzz -- --recheck --work-dir W         W's kept cases on this build

cases:
  Case PROGRAM:SEED:INDEX is one mutation (mutations.py: byte flips of 1/4/16 bytes, boundary
  integers, truncation, inserted and deleted ranges) of PROGRAM's .pte, drawn from a generator
  seeded with the three; the same id gives the same bytes on every run (the .pte is rebuilt the
  same way, its sha256 is in every kept case). Programs: cnn (ResNet-like, Optimized/oneDNN
  provider), index (int64 gather/scatter, masks, integer math), two_delegates (two CpuBackend
  delegates with a portable op between).

outcomes:
  ran       loaded and ran (outputs are not checked: the file is damaged)
  error     the runtime refused the file with an error (the clean outcome)
  crash     the child died by a signal or a sanitizer; kept in WORK/crashes/ID.{pte,json}
  timeout   still running after --timeout seconds; kept like a crash, and run again in a fresh
            interpreter (no fork): when it ends there, it is counted as timeout_fork_only (a
            lock or thread pool the fork left behind) and does not fail the run
  skipped   the method declares an input larger than 64 MiB; not run

exit codes:
  0  no case crashed or timed out (with --allow-upstream: none but crashes inside ExecuTorch)
  1  at least one case crashed or timed out (see the summary and WORK/crashes)
  2  bad command line (unknown program, malformed case id, missing file)
  3  setup failed: a program did not build, or its unmutated .pte does not run

Relative paths are resolved against the directory `bazel run` was started from. Progress goes to
stderr, the summary to stdout (--json FILE writes the full result; --json - prints it instead).
"""

EXIT_OK, EXIT_CRASHES, EXIT_USAGE, EXIT_SETUP = 0, 1, 2, 3
_CASE_ID = re.compile(r"^([a-z_]+):(\d+):(\d+)$")


def build_parser() -> argparse.ArgumentParser:
    from tools.pte_fuzz.programs import PROGRAMS

    parser = argparse.ArgumentParser(
        prog="pte_fuzz",
        description="Mutate delegated .pte files anywhere; load and run each in a child; keep "
        "the crashes.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--program",
        action="append",
        choices=PROGRAMS,
        help="program to fuzz (repeatable; default: all three)",
    )
    parser.add_argument("--cases", type=int, default=1000, help="cases per program (1000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the case ids (0)")
    parser.add_argument("--start", type=int, default=0, help="index of the first case (0)")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds a case may run (20)")
    parser.add_argument(
        "--work-dir",
        default="/tmp/pte_fuzz",
        help="built programs (PROGRAM.pte, PROGRAM.inputs.pt) and crashes/ (/tmp/pte_fuzz)",
    )
    parser.add_argument(
        "--json", metavar="FILE", help="write the full result as JSON ('-': stdout)"
    )
    parser.add_argument(
        "--replay",
        metavar="ID",
        help="run case PROGRAM:SEED:INDEX in this process (no fork), print its outcome",
    )
    parser.add_argument(
        "--run-file",
        metavar="PTE",
        help="load and run this .pte in this process with --program's sample inputs",
    )
    parser.add_argument(
        "--attribute",
        action="store_true",
        help="after the run (or alone, with --cases 0), replay each kept crash under gdb and say "
        "whose code it is in",
    )
    parser.add_argument(
        "--max-attributions", type=int, default=20, help="crashes to replay under gdb (20)"
    )
    parser.add_argument(
        "--recheck",
        action="store_true",
        help="instead of new cases, run every case kept in WORK/crashes again with this build "
        "(after a fix) and print how each ends now",
    )
    parser.add_argument(
        "--allow-upstream",
        action="store_true",
        help="exit 0 when every crash is attributed to ExecuTorch itself (verdict executorch or "
        "executorch-via-ours, see attribution.py)",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="check each file as tools/lower does before loading it (its layout check, then "
        "ExecuTorch's program verifier, InternalConsistency); without it, the pybindings path "
        "a user's script takes, which does not apply its program_verification argument",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return parser


def _resolve(path: str) -> str:
    base = os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd())
    return os.path.normpath(os.path.join(base, os.path.expanduser(path)))


# --- programs -------------------------------------------------------------------------------------


def load_program(name: str, work: str) -> tuple[bytes, tuple[Any, ...]]:
    """PROGRAM.pte and its sample inputs, built once and kept in the work directory."""
    import torch

    pte_path = os.path.join(work, f"{name}.pte")
    inputs_path = os.path.join(work, f"{name}.inputs.pt")
    if not (os.path.isfile(pte_path) and os.path.isfile(inputs_path)):
        from tools.pte_fuzz.programs import build

        try:
            built = build(name)
        except Exception as exc:
            raise SetupError(f"pte_fuzz: program {name} did not build: {exc}") from exc
        os.makedirs(work, exist_ok=True)
        with open(pte_path + ".tmp", "wb") as handle:
            handle.write(built.pte)
        torch.save(built.inputs, inputs_path)
        os.replace(pte_path + ".tmp", pte_path)
    with open(pte_path, "rb") as handle:
        data = handle.read()
    return data, tuple(torch.load(inputs_path))


# --- running -------------------------------------------------------------------------------------


class SetupError(RuntimeError):
    """A program did not build, or its unmutated .pte does not run (exit code 3)."""


class Progress:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.last = 0.0

    def say(self, text: str, force: bool = False) -> None:
        now = time.monotonic()
        if not self.quiet and (force or now - self.last >= 5.0):
            self.last = now
            print(text, file=sys.stderr, flush=True)


def _error_kind(outcome: Any) -> str:
    """A clean error's category: who refused the file, at which stage, numbers blanked out."""
    if outcome.cpu_error:
        text = "CPU delegate: " + outcome.cpu_error
    else:
        text = f"ExecuTorch ({outcome.stage}): " + outcome.message
    return re.sub(r"\d+", "N", text)[:160]


@dataclasses.dataclass(frozen=True)
class FuzzPlan:
    """Which cases to run: PROGRAM:SEED:INDEX for INDEX in [start, start + cases)."""

    cases: int
    seed: int = 0
    start: int = 0
    timeout: float = 20.0
    verify: bool = False  # ExecuTorch's program verifier before the load (--verify)


def fuzz_program(name: str, plan: FuzzPlan, work: str, progress: Progress) -> dict[str, Any]:
    """Runs the plan's cases of program `name`; the result document of that program.

    Raises SetupError when the unmutated program does not run."""
    from tools.lower.pte_layout import read_layout
    from tools.pte_fuzz import mutations
    from tools.pte_fuzz.attribution import frames_of, judge
    from tools.pte_fuzz.fork_server import run_case

    data, samples = load_program(name, work)
    layout = read_layout(data)
    digest = hashlib.sha256(data).hexdigest()
    crash_dir = os.path.join(work, "crashes")
    os.makedirs(crash_dir, exist_ok=True)
    stderr_path = os.path.join(work, f".{name}.child_stderr")
    baseline = run_case(data, samples, plan.timeout, stderr_path, plan.verify)
    if baseline.status != "ran":
        raise SetupError(
            f"pte_fuzz: the unmutated {name} program does not run ({baseline.status}: "
            f"{baseline.message} {baseline.cpu_error})"
        )
    counts: collections.Counter[str] = collections.Counter()
    by_area: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    errors: collections.Counter[str] = collections.Counter()
    kept: list[dict[str, Any]] = []
    started = time.monotonic()
    for index in range(plan.start, plan.start + plan.cases):
        recipe = mutations.draw(plan.seed, name, index, layout)
        outcome = run_case(
            mutations.apply(data, recipe), samples, plan.timeout, stderr_path, plan.verify
        )
        counts[outcome.status] += 1
        by_area[recipe["area"]][outcome.status] += 1
        if outcome.status == "error":
            errors[_error_kind(outcome)] += 1
        if outcome.status in ("crash", "timeout"):
            case_id = f"{name}:{plan.seed}:{index}"
            record: dict[str, Any] = {
                "case": case_id,
                "program": name,
                "program_sha256": digest,
                "recipe": recipe,
                "mutation": mutations.describe(recipe),
                "verify": plan.verify,
                "outcome": outcome.to_dict(),
            }
            if outcome.status == "crash":
                record["attribution"] = judge(frames_of(outcome.stderr_tail)).to_dict()
            stem = os.path.join(crash_dir, case_id.replace(":", "-"))
            with open(stem + ".pte", "wb") as handle:
                handle.write(mutations.apply(data, recipe))
            if outcome.status == "timeout":
                record["fresh_process"] = _in_fresh_process(
                    name, stem + ".pte", work, plan.timeout, plan.verify
                )
                if record["fresh_process"] != "timeout":
                    counts["timeout_fork_only"] += 1
            with open(stem + ".json", "w") as handle:
                json.dump(record, handle, indent=2)
            kept.append(record)
            verdict = record.get("attribution", {}).get("verdict", "-")
            progress.say(
                f"[{name}] {case_id}: {outcome.status} ({outcome.message}, {verdict}): "
                f"{record['mutation']}",
                force=True,
            )
        done = index - plan.start + 1
        rate = done / max(time.monotonic() - started, 1e-9)
        progress.say(
            f"[{name}] {done}/{plan.cases} "
            + " ".join(f"{k} {counts[k]}" for k in ("ran", "error", "crash", "timeout"))
            + f" ({rate:.1f} cases/s)"
        )
    return {
        "program": name,
        "program_sha256": digest,
        "file_bytes": layout.file_size,
        "regions": [r.__dict__ for r in layout.regions],
        "cases": plan.cases,
        "seconds": round(time.monotonic() - started, 1),
        "counts": dict(counts),
        "by_area": {area: dict(c) for area, c in by_area.items()},
        "top_errors": errors.most_common(12),
        "kept": kept,
    }


# --- replay and attribution -----------------------------------------------------------------------


def _run_in_process(data: bytes, samples: tuple[Any, ...], verify: bool) -> int:
    """Loads and runs `data` here (no fork): for gdb and for a person reproducing a case."""
    from executorch.extension.pybindings import portable_lib

    from backends.cpu.runtime import loader
    from tools.lower.runtime_check import verify_program
    from tools.pte_fuzz import fork_server

    fork_server._fill_dtypes()
    try:
        if verify:
            verify_program(data)
        module = portable_lib._load_for_executorch_from_buffer(data)
        meta = module.method_meta("forward")
        inputs = [
            fork_server._input_for(
                meta.input_tensor_meta(i), samples[i] if i < len(samples) else None
            )
            for i in range(meta.num_inputs())
        ]
        module.forward(inputs)
    except Exception as exc:
        print(f"error: {type(exc).__name__}: {exc}\nCPU delegate: {loader.last_error()}")
        return EXIT_OK
    print("ran")
    return EXIT_OK


def _in_fresh_process(
    program: str, pte_path: str, work: str, timeout_s: float, verify: bool
) -> str:
    """How the case ends in a new interpreter (no fork): ran, error, crash or timeout. A case
    that hangs only in a forked child met a lock or thread pool the fork left behind."""
    import subprocess

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        result = subprocess.run(
            _replay_command(program, pte_path, work, verify),
            env=env,
            capture_output=True,
            text=True,
            timeout=max(120.0, 3 * timeout_s),  # imports included
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "timeout"
    if result.returncode != 0:
        return "crash"
    return "ran" if result.stdout.strip().endswith("ran") else "error"


def _replay_command(program: str, pte_path: str, work: str, verify: bool) -> list[str]:
    main = os.path.abspath(__file__)
    command = [sys.executable, main, "--program", program, "--work-dir", work]
    return command + ["--run-file", pte_path] + (["--verify"] if verify else [])


def _attribute(work: str, limit: int, timeout_s: float) -> list[dict[str, Any]]:
    from tools.pte_fuzz.attribution import backtrace, frames_of, judge

    crash_dir = os.path.join(work, "crashes")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    results = []
    names = (
        sorted(n for n in os.listdir(crash_dir) if n.endswith(".json"))
        if os.path.isdir(crash_dir)
        else []
    )
    for name in names[:limit]:
        path = os.path.join(crash_dir, name)
        with open(path) as handle:
            record = json.load(handle)
        if record["outcome"]["status"] != "crash":
            continue
        stderr = record["outcome"].get("stderr_tail", "")
        frames = frames_of(stderr)  # the child's own backtrace, or a sanitizer's report
        if not frames:
            pte = path[: -len(".json")] + ".pte"
            frames = frames_of(
                backtrace(
                    _replay_command(record["program"], pte, work, record.get("verify", False)),
                    env,
                    max(120.0, timeout_s * 4),
                )
            )
        verdict = judge(frames)
        record["attribution"] = verdict.to_dict()
        with open(path, "w") as handle:
            json.dump(record, handle, indent=2)
        results.append(
            {"case": record["case"], "mutation": record["mutation"], **verdict.to_dict()}
        )
        print(f"{record['case']}: {verdict.verdict} at {verdict.where}", file=sys.stderr)
    return results


def recheck(work: str, timeout_s: float, verify: bool = False) -> list[dict[str, Any]]:
    """Every kept case of WORK/crashes run again (forked; a timeout also in a fresh process);
    with `verify`, behind ExecuTorch's program verifier (--verify)."""
    from tools.pte_fuzz.attribution import frames_of, judge
    from tools.pte_fuzz.fork_server import run_case

    crash_dir = os.path.join(work, "crashes")
    names = sorted(n for n in os.listdir(crash_dir) if n.endswith(".json"))
    samples_of: dict[str, tuple[Any, ...]] = {}
    rows = []
    for name in names:
        with open(os.path.join(crash_dir, name)) as handle:
            record = json.load(handle)
        program = record["program"]
        if program not in samples_of:
            samples_of[program] = load_program(program, work)[1]
        pte = os.path.join(crash_dir, name[: -len(".json")] + ".pte")
        with open(pte, "rb") as handle:
            outcome = run_case(
                handle.read(), samples_of[program], timeout_s, pte + ".stderr", verify
            )
        row = {"case": record["case"], "before": record["outcome"]["status"], "now": outcome.status}
        if outcome.status == "crash":
            row["verdict"] = judge(frames_of(outcome.stderr_tail)).verdict
        if outcome.status == "timeout":
            row["fresh_process"] = _in_fresh_process(program, pte, work, timeout_s, verify)
        if outcome.status == "error":
            row["error"] = outcome.cpu_error or outcome.message
        rows.append(row)
    return rows


# --- report --------------------------------------------------------------------------------------


def _function(frame: str) -> str:
    """The function of a frame, demangled when c++filt is there, without the library path."""
    import shutil
    import subprocess

    name = frame.split(" from ")[0].removesuffix(" ()").strip()
    if name.startswith("_Z") and shutil.which("c++filt"):
        name = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()
    library = frame.split(" from ")[1].rsplit("/", 1)[-1] if " from " in frame else ""
    return f"{name} ({library})" if library else name


def _summary(results: list[dict[str, Any]], attributions: list[dict[str, Any]]) -> str:
    lines = []
    for result in results:
        counts = result["counts"]
        lines.append(
            f"{result['program']}: {result['cases']} cases in {result['seconds']} s: "
            + ", ".join(
                f"{counts.get(k, 0)} {k}"
                for k in ("error", "ran", "crash", "timeout", "timeout_fork_only", "skipped")
            )
        )
        for area, area_counts in sorted(result["by_area"].items()):
            lines.append(
                f"  {area:>10}: " + ", ".join(f"{v} {k}" for k, v in sorted(area_counts.items()))
            )
        for kind, count in result["top_errors"][:6]:
            lines.append(f"  {count:6d} x {kind}")
        for record in result["kept"]:
            verdict = record.get("attribution", {})
            lines.append(
                f"  KEPT {record['case']} {record['outcome']['status']} "
                f"({record['outcome']['message']}): {record['mutation']}"
                + (f"\n       {verdict['verdict']} at {verdict['where']}" if verdict else "")
            )
        faults = collections.Counter(
            (r["attribution"]["verdict"], _function(r["attribution"]["where"]))
            for r in result["kept"]
            if "attribution" in r
        )
        for (verdict, where), count in faults.most_common():
            lines.append(f"  crashes: {count} x {verdict} at {where}")
    if attributions:
        verdicts = collections.Counter(a["verdict"] for a in attributions)
        lines.append("attribution: " + ", ".join(f"{v} {k}" for k, v in sorted(verdicts.items())))
        for a in attributions:
            lines.append(f"  {a['case']}: {a['verdict']} at {a['where']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    # Before torch is imported: one thread, so that forking stays safe (fork_server.py).
    from tools.lower import quiet

    quiet.silence_dependency_noise()
    parser = build_parser()
    args = parser.parse_args(argv)
    from tools.pte_fuzz.fork_server import prepare_parent
    from tools.pte_fuzz.programs import PROGRAMS

    work = _resolve(args.work_dir)
    programs = args.program or list(PROGRAMS)
    if args.replay or args.run_file:
        prepare_parent()
        from tools.lower.pte_layout import read_layout
        from tools.pte_fuzz import mutations

        if args.replay:
            match = _CASE_ID.match(args.replay)
            if not match or match.group(1) not in PROGRAMS:
                parser.error(f"--replay {args.replay!r}: expected PROGRAM:SEED:INDEX")
            program, seed, index = match.group(1), int(match.group(2)), int(match.group(3))
            data, samples = load_program(program, work)
            recipe = mutations.draw(seed, program, index, read_layout(data))
            print(f"{args.replay}: {mutations.describe(recipe)}")
            return _run_in_process(mutations.apply(data, recipe), samples, args.verify)
        path = _resolve(args.run_file)
        if not os.path.isfile(path):
            parser.error(f"--run-file {path}: no such file")
        _, samples = load_program(programs[0], work)
        with open(path, "rb") as handle:
            return _run_in_process(handle.read(), samples, args.verify)
    if args.cases < 0:
        parser.error("--cases must be >= 0")
    if args.recheck:
        prepare_parent()
        rows = recheck(work, args.timeout, args.verify)
        if args.json:
            with open(_resolve(args.json), "w") as handle:
                json.dump(rows, handle, indent=2)
        tally = collections.Counter(
            (r["before"], r["now"], r.get("verdict", r.get("fresh_process", ""))) for r in rows
        )
        for (before, now, detail), count in sorted(tally.items()):
            print(f"{count:6d} x {before} -> {now} {detail}".rstrip())
        for row in rows:
            if row["now"] == "error" and row["before"] == "crash":
                print(f"  {row['case']}: now an error: {row['error'][:150]}")
        still_bad = [
            r
            for r in rows
            if (
                r["now"] == "crash"
                and r.get("verdict") not in ("executorch", "executorch-via-ours")
            )
            or r.get("fresh_process") in ("timeout", "crash")
        ]
        return EXIT_CRASHES if still_bad else EXIT_OK
    library = prepare_parent()
    progress = Progress(args.quiet)
    progress.say(f"pte_fuzz: CPU delegate runtime {library}", force=True)
    plan = FuzzPlan(args.cases, args.seed, args.start, args.timeout, args.verify)
    results = []
    try:
        for name in programs:
            results.append(fuzz_program(name, plan, work, progress))
    except SetupError as exc:
        print(exc, file=sys.stderr)
        return EXIT_SETUP
    attributions = _attribute(work, args.max_attributions, args.timeout) if args.attribute else []
    document = {
        "seed": args.seed,
        "start": args.start,
        "library": library,
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
        "verify": args.verify,
        "results": results,
        "attributions": attributions,
    }
    if args.json == "-":
        json.dump(document, sys.stdout, indent=2)
        print()
    else:
        print(_summary(results, attributions))
        if args.json:
            with open(_resolve(args.json), "w") as handle:
                json.dump(document, handle, indent=2)
    upstream = ("executorch", "executorch-via-ours") if args.allow_upstream else ()
    bad = [
        record
        for result in results
        for record in result["kept"]
        if (
            record["outcome"]["status"] == "crash"
            and record.get("attribution", {}).get("verdict") not in upstream
        )
        or record.get("fresh_process") in ("timeout", "crash")
    ]
    return EXIT_CRASHES if bad else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
