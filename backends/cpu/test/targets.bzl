"""Tests of the CPU delegate's ahead-of-time side (partitioner, preprocess, payload format)."""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """One pytest target per concern, so each stays well under a minute."""
    runtime.python_library(
        name = "models",
        srcs = ["models.py"],
    )

    runtime.python_test(
        name = "routes_test",
        srcs = ["routes_test.py"],
        size = "small",
        deps = [
            "//backends/cpu:routes",
            "//backends/cpu/serialization:graph_reader",
            "//backends/cpu/serialization:graph_writer",
            "//backends/cpu/serialization:schema",
        ],
    )

    runtime.python_test(
        name = "partitioner_test",
        srcs = ["partitioner_test.py"],
        deps = [
            ":models",
            "//backends/cpu:routes",
            "//backends/cpu/partition:cpu_partitioner",
            "//backends/cpu/serialization:graph_reader",
        ],
    )

    runtime.python_test(
        name = "debug_handle_map_test",
        srcs = ["debug_handle_map_test.py"],
        deps = [
            ":models",
            "//backends/cpu:cpu_backend",
            "//backends/cpu:profiling_events",
            "//backends/cpu:routes",
            "//backends/cpu/partition:cpu_partitioner",
        ],
    )

    runtime.python_test(
        name = "preprocess_test",
        srcs = ["preprocess_test.py"],
        deps = [
            ":models",
            "//backends/cpu:cpu_backend",
            "//backends/cpu:routes",
            "//backends/cpu/partition:cpu_partitioner",
            "//backends/cpu/serialization:graph_reader",
        ],
    )

    runtime.python_test(
        name = "pte_size_test",
        srcs = ["pte_size_test.py"],
        deps = [
            ":models",
            "//backends/cpu/partition:cpu_partitioner",
            "//backends/cpu/serialization:graph_reader",
        ],
    )

    runtime.python_test(
        name = "bad_input_test",
        srcs = ["bad_input_test.py"],
        deps = [
            "//backends/cpu:cpu_backend",
            "//backends/cpu/serialization:graph_reader",
            "//backends/cpu/serialization:graph_writer",
            "//backends/cpu/serialization:schema",
        ],
    )

    # Runs lowered programs on the C++ runtime (issue #6) and compares with eager PyTorch.
    runtime.python_test(
        name = "run_compare_test",
        srcs = ["run_compare_test.py"],
        deps = [
            ":models",
            "//backends/cpu/partition:cpu_partitioner",
            "//backends/cpu/runtime:loader",
            "//backends/cpu/serialization:graph_reader",
        ],
    )

    # One tiny program per route family, run on the runtime: guards each op's argument encoding.
    # One target (~10 s alone): two, split by a -k selection, each paid the ~5.5 s import of
    # torch and ExecuTorch.
    runtime.python_test(
        name = "ops_run_test",
        srcs = ["ops_run_test.py"],
        deps = [
            ":models",
            "//backends/cpu/runtime:loader",
            "//backends/cpu/runtime:lowered_program",
            "//backends/cpu/serialization:graph_reader",
        ],
    )
