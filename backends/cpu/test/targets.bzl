"""Tests of the CPU delegate's ahead-of-time side (partitioner, preprocess, payload format)."""

load("//tools/build_defs:runtime.bzl", "runtime")

# pytest -k expression selecting ops_run_test.py's float-heavy cases (conv, matmul, pooling, ...).
_FLOAT_CASES = "conv or linear or addmm or mm or pool or reductions or batch_norm or clamp or sigmoid"

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
    # Two targets over the same file keep each well under a minute on a busy machine.
    for name, selection in [
        ("ops_run_float_test", _FLOAT_CASES),
        ("ops_run_other_test", "not (" + _FLOAT_CASES + ")"),
    ]:
        runtime.python_test(
            name = name,
            srcs = ["ops_run_test.py"],
            # Bazel splits test args like a shell would: quote the expression.
            args = ["-k", "'" + selection + "'"],
            deps = [
                ":models",
                "//backends/cpu/runtime:loader",
                "//backends/cpu/runtime:lowered_program",
                "//backends/cpu/serialization:graph_reader",
            ],
        )
