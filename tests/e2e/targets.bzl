"""Bazel targets of this package (see tools/build_defs/runtime.bzl for the runtime.* shim).

End-to-end tests: lower with the real tool, run on the real ExecuTorch runtime with the CPU
delegate, compare with eager. One target per example model so each stays well under a minute.
"""

load("//tools/build_defs:runtime.bzl", "runtime")

_EXAMPLES = [
    "index",
    "mlp_bn",
    "mobilenet",
    "resnet",
]

def define_common_targets():
    """The shared helper, one test per example, the regressions and the command-line test."""
    runtime.python_library(
        name = "lower_e2e",
        srcs = ["lower_e2e.py"],
        deps = ["//tools/lower:lower_lib"],
    )

    for example in _EXAMPLES:
        runtime.python_test(
            name = "example_{}_test".format(example),
            size = "medium",
            srcs = ["example_{}_test.py".format(example)],
            deps = [":lower_e2e"],
        )

    runtime.python_library(
        name = "lower_binary",
        srcs = ["lower_binary.py"],
    )

    # These run the real binary in a subprocess, the way `bazel run //tools/lower` does.
    for name in ["cli_default_test", "cli_compare_test"]:
        runtime.python_test(
            name = name,
            size = "medium",
            srcs = [name + ".py"],
            data = ["//tools/lower"],
            env = {"LOWER_BINARY": "$(rootpath //tools/lower)"},
            deps = [
                ":lower_binary",
                "//tools/lower:examples",
            ],
        )

    runtime.python_test(
        name = "regressions_test",
        size = "medium",
        srcs = ["regressions_test.py"],
        deps = [":lower_e2e"],
    )
