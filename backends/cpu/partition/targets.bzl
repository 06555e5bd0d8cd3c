"""Bazel targets of the CPU delegate's partitioner."""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """Per-node support decisions and CpuPartitioner."""
    runtime.python_library(
        name = "node_support",
        srcs = ["node_support.py"],
        deps = [
            "//backends/cpu:routes",
            "//backends/cpu:symbolic_dims",
            "//backends/cpu/torchao:fusion",
        ],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "cpu_partitioner",
        srcs = ["cpu_partitioner.py"],
        deps = [
            ":node_support",
            "//backends/cpu:cpu_backend",
            "//backends/cpu:routes",
            "//backends/cpu:symbolic_dims",
            "//backends/cpu/torchao:graph",
        ],
        visibility = ["//visibility:public"],
    )
