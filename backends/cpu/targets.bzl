"""Bazel targets of the CPU delegate's ahead-of-time side (route table and CpuBackend)."""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """The route table and CpuBackend.preprocess."""
    runtime.python_library(
        name = "routes",
        srcs = ["routes.py"],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "profiling_events",
        srcs = ["profiling_events.py"],
        deps = ["//backends/cpu/serialization:schema"],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "cpu_backend",
        srcs = ["cpu_backend.py"],
        deps = [
            ":profiling_events",
            "//backends/cpu/serialization:graph_writer",
            "//backends/transforms:fuse_batch_norm_with_conv",
            "//backends/transforms:fuse_batch_norm_with_linear",
            "//backends/transforms:pass_report",
            "//backends/transforms:pipeline",
            "//backends/transforms:remove_identity_copies",
        ],
        visibility = ["//visibility:public"],
    )
