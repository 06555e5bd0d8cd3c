"""Bazel targets of this package (see tools/build_defs/runtime.bzl for the runtime.* shim)."""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    runtime.python_binary(
        name = "pycheck",
        main = "pycheck.py",
    )
