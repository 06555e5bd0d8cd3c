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

# pytest -k expressions selecting zoo_families_test.py's mobile families (the slowest to lower)
# and the transformer and sequence families (issue 19).
_MOBILE_FAMILIES = "mobilenet_v3 or efficientnet"
_SEQUENCE_FAMILIES = "vit or llama or text_cnn"

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
    for name in ["cli_default_test", "cli_compare_test", "cli_profile_test"]:
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

    # Issues 17 and 19: each zoo family (tools/bench/zoo.py, small size) lowered by
    # CpuPartitioner with nothing left out, run on the runtime, compared with eager. Three targets
    # over the same file keep each well under a minute on a busy machine.
    for name, selection in [
        ("zoo_families_mobile_test", _MOBILE_FAMILIES),
        ("zoo_families_sequence_test", _SEQUENCE_FAMILIES),
        ("zoo_families_other_test", "not (" + _MOBILE_FAMILIES + " or " + _SEQUENCE_FAMILIES + ")"),
    ]:
        runtime.python_test(
            name = name,
            size = "medium",
            srcs = ["zoo_families_test.py"],
            # Bazel splits test args like a shell would: quote the expression.
            args = ["-k", "'" + selection + "'"],
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
