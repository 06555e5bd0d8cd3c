"""Bazel targets of this package (see tools/build_defs/runtime.bzl for the runtime.* shim)."""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """This package's targets (placeholder until its issue lands)."""
    runtime.filegroup(
        name = "placeholder",
        srcs = [],
    )
