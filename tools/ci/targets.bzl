"""Bazel targets of the CI scripts' Python checker (the scripts themselves run from .ci/run)."""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """The remote-cache checker as a library, and its test."""
    runtime.python_library(
        name = "cache_hits_lib",
        srcs = ["cache_hits.py"],
    )

    runtime.python_test(
        name = "cache_hits_test",
        size = "small",
        srcs = ["test/cache_hits_test.py"],
        deps = [":cache_hits_lib"],
    )
