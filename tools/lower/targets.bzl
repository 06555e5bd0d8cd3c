"""Bazel targets of this package (see tools/build_defs/runtime.bzl for the runtime.* shim).

`bazel run //tools/lower -- --help`: lower a model to a .pte on the CPU delegate, run it, report.
"""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """The lowering tool: example models, the pipeline, the report, the CLI and its tests."""
    runtime.python_library(
        name = "examples",
        srcs = ["examples.py"],
        visibility = ["//visibility:public"],
        deps = ["//tools/bench:llm_models"],  # the llm example's decoder
    )

    runtime.python_library(
        name = "lower_lib",
        srcs = [
            "cpu_delegate.py",
            "errors.py",
            "lowering.py",
            "main.py",
            "pipeline.py",
            "profile_chart.py",
            "profiling.py",
            "program_facts.py",
            "program_io.py",
            "pte_layout.py",
            "quantize.py",
            "quiet.py",
            "report.py",
            "runtime_check.py",
            "size_check.py",
            "target_setup.py",
        ],
        visibility = ["//visibility:public"],
        deps = [
            ":examples",
            "//backends/cpu:quantization",
            "//backends/cpu:symbolic_dims",
            "//backends/cpu/partition:cpu_partitioner",
            "//backends/cpu/runtime:loader",
            "//backends/transforms:program_constants",
            "//tools/bench:harness",
        ],
    )

    runtime.python_binary(
        name = "lower",
        main = "main.py",
        visibility = ["//visibility:public"],
        deps = [":lower_lib"],
    )

    runtime.python_test(
        name = "lower_test",
        # Lowers and runs a model: 60 s (small) was too tight on a busy machine.
        size = "medium",
        srcs = ["lower_test.py"],
        deps = [":lower_lib"],
    )
