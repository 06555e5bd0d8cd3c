"""Bazel targets of the pinned Python environment's own tooling (see python_venv.bzl)."""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """The shared-venv builder as a library, and its test."""
    runtime.python_library(
        name = "shared_venv_lib",
        srcs = ["shared_venv.py"],
    )

    # Builds small venvs (one pinned wheel from @et_wheels, pip --no-index) in the test's temporary
    # directory: build, reuse, lock change, interrupted build, concurrent builds.
    runtime.python_test(
        name = "shared_venv_test",
        size = "medium",
        srcs = ["test/shared_venv_test.py"],
        data = [
            "requirements.lock",
            "@et_wheels//:wheels",
        ],
        deps = [":shared_venv_lib"],
    )
