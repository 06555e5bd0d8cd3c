"""Benchmark of the target linter (tools/lint) against `buildifier -lint=warn` on the same tree.

Generates a deterministic tree of 600 packages, each with a `targets.bzl` of 30 registrations
(`runtime.*` calls, a loop, and macros loaded from shared and per-package `.bzl` files) and a thin
`BUILD.bazel`; every 50th package repeats a block (the regression). Both tools read every file of
the tree; the linter also evaluates loads and macros. Goal (issue #7): the linter under 2 s for
the whole tree on one core, so the linter runs in-process (one Python thread) and buildifier
with GOMAXPROCS=1.

    ./bazelw run //tools/bench:lint_bench -- [--packages N] [harness options]
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.bench import harness
from tools.lint.config import load_config
from tools.lint.findings import CHECKS
from tools.lint.linter import lint

RULES_PER_PACKAGE = 30
DUPLICATE_EVERY = 50

_RUNTIME_BZL = '''"""Shared rule wrappers (the runtime.* shim of the generated tree)."""

def _python_library(name, srcs = [], deps = [], **kwargs):
    native.py_library(name = name, srcs = srcs, deps = deps, **kwargs)

def _cxx_library(name, srcs = [], deps = [], **kwargs):
    native.cc_library(name = name, srcs = srcs, deps = deps, **kwargs)

def _python_test(name, srcs = [], deps = [], **kwargs):
    native.py_test(name = name, srcs = srcs, deps = deps, **kwargs)

runtime = struct(
    cxx_library = _cxx_library,
    python_library = _python_library,
    python_test = _python_test,
)
'''

_MACROS_BZL = '''"""Shared macros: a library with its test."""

load("//build_defs:runtime.bzl", "runtime")

def py_lib_with_test(name, srcs, deps = []):
    """A library and a test of it."""
    runtime.python_library(name = name, srcs = srcs, deps = deps)
    runtime.python_test(name = name + "_test", srcs = ["test_" + srcs[0]], deps = [":" + name])
'''

_DEFS_BZL = '''"""Per-package macro: a group of kernels."""

load("//build_defs:runtime.bzl", "runtime")

def kernels(prefix, ops):
    """One cxx_library per op."""
    for op in ops:
        runtime.cxx_library(name = "{}_{}".format(prefix, op), srcs = [op + ".cc"])
'''

_BUILD = """load(":targets.bzl", "define_common_targets")

define_common_targets()
"""


def _targets_bzl(index: int) -> str:
    """30 registrations: 20 direct calls, 3 macro calls (6), a loop of 4 via a package macro."""
    lines = [
        f'"""Targets of generated package {index}."""',
        "",
        'load("//build_defs:macros.bzl", "py_lib_with_test")',
        'load("//build_defs:runtime.bzl", "runtime")',
        'load(":defs.bzl", "kernels")',
        "",
        "def define_common_targets():",
        '    """The package\'s targets."""',
    ]
    blocks = []
    for i in range(20):
        rule = "python_library" if i % 2 else "cxx_library"
        ext = "py" if i % 2 else "cc"
        dep = f'\n        deps = [":lib_{i - 1}"],' if i else ""
        blocks.append(
            f"    runtime.{rule}(\n"
            f'        name = "lib_{i}",\n'
            f'        srcs = ["lib_{i}.{ext}"],{dep}\n'
            "    )\n"
        )
    if index % DUPLICATE_EVERY == 0:
        blocks.append(blocks[3])  # the regression: a merge re-added a block
    for i in range(3):
        blocks.append(f'    py_lib_with_test(name = "mod_{i}", srcs = ["mod_{i}.py"])\n')
    blocks.append('    kernels("k", ["add", "mul", "sub", "div"])\n')
    return "\n".join(lines) + "\n" + "\n".join(blocks)


def generate_tree(root: Path, packages: int) -> int:
    """Writes the tree under `root`; returns the number of duplicates it contains."""
    (root / "WORKSPACE").write_text("")
    (root / "build_defs").mkdir(parents=True, exist_ok=True)
    (root / "build_defs" / "BUILD.bazel").write_text("")
    (root / "build_defs" / "runtime.bzl").write_text(_RUNTIME_BZL)
    (root / "build_defs" / "macros.bzl").write_text(_MACROS_BZL)
    for index in range(packages):
        package = root / f"pkg_{index:04d}"
        package.mkdir(exist_ok=True)
        (package / "BUILD.bazel").write_text(_BUILD)
        (package / "targets.bzl").write_text(_targets_bzl(index))
        (package / "defs.bzl").write_text(_DEFS_BZL)
    return len(range(0, packages, DUPLICATE_EVERY))


def _tree(packages: int) -> tuple[Path, int]:
    """The generated tree for `packages` (made once per process, reused by every variant)."""
    root = Path(tempfile.gettempdir()) / f"lint_bench_tree_{packages}_{os.getpid()}"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root, generate_tree(root, packages)


def _starlark_files(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*") if p.name == "BUILD.bazel" or p.suffix == ".bzl")


def make_target_lint(packages: int) -> harness.Runner:
    root, duplicates = _tree(packages)
    config = load_config()

    def run() -> int:
        result = lint([root], config, set(CHECKS), cwd=root)
        found = sum(1 for f in result.findings if f.rule == "duplicate-target")
        if result.errors or found != duplicates:
            raise RuntimeError(f"expected {duplicates} duplicates, got {result.findings[:3]}")
        return found

    run()  # checks the tree and the findings once before timing
    return run


def make_buildifier(packages: int, buildifier: str) -> harness.Runner:
    root, _ = _tree(packages)
    files = _starlark_files(root)
    env = {**os.environ, "GOMAXPROCS": "1"}

    def run() -> int:
        proc = subprocess.run(
            [buildifier, "-mode=check", "-lint=warn", *files],
            capture_output=True,
            env=env,
            check=False,
        )
        if proc.returncode not in (0, 4):  # 4: lint warnings or formatting found
            raise RuntimeError(f"buildifier failed ({proc.returncode}): {proc.stderr[:500]!r}")
        return proc.returncode

    return run


def _find_buildifier(given: str | None) -> str | None:
    if given:
        return str(Path(given).absolute())
    return shutil.which("buildifier")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--packages", type=int, default=600)
    parser.add_argument("--buildifier", help="buildifier binary (default: from PATH)")
    own, rest = parser.parse_known_args(argv)
    buildifier = _find_buildifier(own.buildifier)
    variants = [harness.Variant("target-lint", make_target_lint, {"packages": own.packages})]
    baseline = "target-lint"
    if buildifier is not None:
        variants.append(
            harness.Variant(
                "buildifier -lint=warn",
                make_buildifier,
                {"packages": own.packages, "buildifier": buildifier},
            )
        )
        baseline = "buildifier -lint=warn"
    else:
        print("lint_bench: no buildifier found; pass --buildifier PATH", file=sys.stderr)

    def benchmarks() -> list[harness.Benchmark]:
        # Wall time on a shared 2-core machine depends on the neighbours; the CPU time of one
        # run (the linter is single-threaded) is the figure to hold against the 2 s goal.
        run = make_target_lint(own.packages)
        started = time.process_time()
        run()
        cpu_s = time.process_time() - started
        return [
            harness.Benchmark(
                name=f"lint {own.packages} packages x {RULES_PER_PACKAGE} rules",
                variants=variants,
                baseline=baseline,
                notes=f"goal: target-lint under 2 s on one core; one run took {cpu_s:.2f} s CPU",
            )
        ]

    return harness.main(benchmarks, rest, description=__doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
