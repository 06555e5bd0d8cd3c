"""Bazel targets of this package (see tools/build_defs/runtime.bzl for the runtime.* shim).

End-to-end tests: lower with the real tool, run on the real ExecuTorch runtime with the CPU
delegate, compare with eager. The example models' files share one target (each test process
pays ~5.5 s to import torch and ExecuTorch; the four examples run in ~18 s together).
"""

load("//tools/build_defs:runtime.bzl", "runtime")

_EXAMPLES = [
    "index",
    "mlp_bn",
    "mobilenet",
    "resnet",
]

# The command-line tests' files: cli_<name>_test.py.
_CLI_TESTS = [
    "compare",
    "default",
    "profile",
]

def define_common_targets():
    """The shared helper, the examples' test, the regressions and the command-line tests."""
    runtime.python_library(
        name = "lower_e2e",
        srcs = ["lower_e2e.py"],
        deps = ["//tools/lower:lower_lib"],
    )

    runtime.python_test(
        name = "examples_test",
        size = "medium",
        srcs = ["example_{}_test.py".format(example) for example in _EXAMPLES],
        deps = [":lower_e2e"],
    )

    runtime.python_library(
        name = "lower_binary",
        srcs = ["lower_binary.py"],
    )

    # These run the real binary in a subprocess, the way `bazel run //tools/lower` does; one
    # test process for the three files (each process pays ~5.5 s to import torch and ExecuTorch).
    runtime.python_test(
        name = "cli_test",
        size = "medium",
        srcs = ["cli_{}_test.py".format(name) for name in _CLI_TESTS],
        deps = [
            ":lower_binary",
            "//tools/lower:examples",
        ],
        # The binary, and where the tests find it.
        data = ["//tools/lower"],
        env = {"LOWER_BINARY": "$(rootpath //tools/lower)"},
    )

    # Issues 17 and 19: each zoo family (tools/bench/zoo.py, small size) lowered by
    # CpuPartitioner with nothing left out, run on the runtime, compared with eager. One target:
    # three, split by -k selections, each paid the ~5.5 s import of torch and ExecuTorch.
    runtime.python_test(
        name = "zoo_families_test",
        size = "medium",
        srcs = ["zoo_families_test.py"],
        deps = [
            "//backends/cpu/partition:cpu_partitioner",
            "//backends/cpu/runtime:loader",
            "//backends/cpu/serialization:graph_reader",
            "//tools/bench:zoo",
        ],
    )

    runtime.python_test(
        name = "regressions_test",
        size = "medium",
        srcs = ["regressions_test.py"],
        deps = [":lower_e2e"],
    )
