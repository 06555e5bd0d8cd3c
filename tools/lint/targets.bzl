"""Bazel targets of the target linter (see tools/build_defs/runtime.bzl for the runtime.* shim)."""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """The linter's library, its `bazel run` binary, its tests and the repo's own lint."""
    runtime.python_library(
        name = "lint_lib",
        srcs = [
            "__main__.py",
            "cli.py",
            "config.py",
            "evaluator.py",
            "findings.py",
            "file_targets.py",
            "fixer.py",
            "formats.py",
            "globbing.py",
            "linter.py",
            "prelude.py",
            "workspace.py",
        ],
        data = ["default_config.toml"],
        visibility = ["//visibility:public"],
    )

    # `./bazelw run //tools/lint -- PATHS...`
    runtime.python_binary(
        name = "lint",
        main = "__main__.py",
        deps = [":lint_lib"],
    )

    runtime.python_library(
        name = "fixture_tree",
        srcs = ["test/fixture_tree.py"],
        data = native.glob(["test/fixtures/*.txtar"]),
    )

    runtime.python_test(
        name = "lint_test",
        size = "small",
        srcs = [
            "test/cli_test.py",
            "test/lint_test.py",
            "test/property_test.py",
        ],
        deps = [
            ":fixture_tree",
            ":lint_lib",
        ],
    )

    # The file-target fixture against real Bazel (./bazelw's 4.2.3): one `bazel query` in batch
    # mode over the fixture tree, with its own output root in the test's temporary directory.
    runtime.python_test(
        name = "bazel_agreement_test",
        # ~10 s, mostly the JVM's start-up; medium leaves room on a loaded machine.
        size = "medium",
        srcs = ["test/bazel_agreement_test.py"],
        deps = [
            ":fixture_tree",
            ":lint_lib",
        ],
    )

    # The linter as a Python package: builds its wheel from pyproject.toml, installs it into a
    # fresh virtualenv offline (its dependency from @et_wheels) and runs `target-lint`.
    runtime.python_test(
        name = "wheel_test",
        size = "small",
        srcs = ["test/wheel_test.py"],
        data = [
            "README.md",
            "//:.pre-commit-hooks.yaml",
            "//:pyproject.toml",
            "//third_party/python:requirements.lock",
            "@et_wheels//:wheels",
        ],
        deps = [
            ":fixture_tree",
            ":lint_lib",
        ],
    )

    # Lints this repository's own build files and checks that //:all_starlark_sources covers
    # every package. It reads the checkout, and cannot declare it as inputs: a glob stops at
    # package boundaries, so "every package" could only be listed through the filegroup under
    # test, and a package missing there would be missing from the inputs too (a cached pass
    # would hide exactly what the test looks for). So it is never cached: tag "external".
    runtime.python_test(
        name = "repo_lint_test",
        size = "small",
        srcs = ["test/repo_lint_test.py"],
        data = ["BUILD.bazel"],
        tags = ["external"],
        deps = [":lint_lib"],
    )
