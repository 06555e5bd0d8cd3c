"""Bazel targets of the CI scripts' Python checker and of the repository's hygiene checks (the
scripts themselves run from .ci/run)."""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """The remote-cache checker as a library, its test, and the registry-host check."""
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

    # No package registry's host name in any tracked file (reads the checkout through the
    # runfiles symlink of BUILD.bazel, as //tools/lint:repo_lint_test does).
    runtime.python_test(
        name = "registry_hosts_test",
        size = "small",
        srcs = ["test/registry_hosts_test.py"],
        data = ["BUILD.bazel"],
        tags = ["external"],
    )
