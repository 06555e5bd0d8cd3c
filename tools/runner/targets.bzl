"""Bazel targets of the C++ program runner (see tools/build_defs/runtime.bzl for the runtime.* shim).

`./bazelw run //tools/runner -- MODEL.pte [--inputs ...] [--iterations N] [--etdump OUT.etdp]`
"""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """The runner binary and its test against the Python runtime."""
    runtime.cxx_binary(
        name = "runner",
        srcs = [
            "options.cc",
            "options.h",
            "runner_main.cc",
        ],
        copts = ["-std=c++17", "-O2", "-Wall"],
        visibility = ["//visibility:public"],
        deps = [
            # The delegate, statically: its static initializers register CpuBackend and the
            # providers (alwayslink) with the wheel's libexecutorch.so.
            "//backends/cpu/runtime:runtime_lib",
            "//backends/cpu/runtime/providers/optimized:provider",
            ":tensor_io",
            "@et_py//:executorch",
            "@et_runtime_libs//:etdump",
            "@et_runtime_libs//:kernels",
        ],
    )

    # Inputs from a method's metadata (random or raw files) and output checksums; also used by
    # the runtime's concurrency stress test.
    runtime.cxx_library(
        name = "tensor_io",
        srcs = ["tensor_io.cc"],
        hdrs = ["tensor_io.h"],
        copts = ["-std=c++17", "-O2", "-Wall"],
        visibility = ["//backends/cpu/runtime:__pkg__"],
        deps = ["@et_py//:executorch"],
    )

    # .pte files written by //tools/lower (a float and an integer example), run by the runner and
    # by the Python runtime on the same inputs; the runner's bad-input errors.
    runtime.python_test(
        name = "runner_test",
        srcs = ["test/runner_test.py"],
        data = [
            ":runner",
            "//tools/pte_fuzz:upstream_reproducers",
        ],
        deps = [
            "//backends/cpu/runtime:loader",
            "//tools/lower:lower_lib",
        ],
    )
