"""Bazel targets of the torchao patterns the CPU delegate fuses (8da4w and weight-only)."""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """The shared weight matcher, the patterns, and the partition check / preprocess fusion."""
    runtime.python_library(
        name = "graph",
        srcs = ["graph.py"],
        deps = ["//backends/transforms:program_constants"],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "patterns",
        srcs = [
            "linear_8da.py",
            "weight_only.py",
        ],
        deps = [":graph"],
    )

    # The partitioner's check of each torchao node and the preprocess pass (FuseTorchaoOps).
    runtime.python_library(
        name = "fusion",
        srcs = ["fusion.py"],
        deps = [
            ":graph",
            ":patterns",
            "//backends/cpu:quantized_ops",
            "//backends/transforms:pass_report",
            "//backends/transforms:program_constants",
        ],
        visibility = ["//visibility:public"],
    )
