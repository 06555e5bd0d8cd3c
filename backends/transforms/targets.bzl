"""Bazel targets of this package (see tools/build_defs/runtime.bzl for the runtime.* shim)."""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """This package's targets: one library per transform module."""

    # Batch-norm folding and constant hygiene (issue #3).
    runtime.python_library(
        name = "pass_report",
        srcs = ["pass_report.py"],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "program_constants",
        srcs = ["program_constants.py"],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "program_checks",
        srcs = ["program_checks.py"],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "batch_norm_match",
        srcs = ["batch_norm_match.py"],
        deps = [":program_constants"],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "fuse_batch_norm_with_conv",
        srcs = ["fuse_batch_norm_with_conv.py"],
        deps = [
            ":batch_norm_match",
            ":pass_report",
            ":program_constants",
        ],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "fuse_batch_norm_with_linear",
        srcs = ["fuse_batch_norm_with_linear.py"],
        deps = [
            ":batch_norm_match",
            ":pass_report",
            ":program_constants",
        ],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "fold_constant_subgraphs",
        srcs = ["fold_constant_subgraphs.py"],
        deps = [
            ":pass_report",
            ":program_constants",
        ],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "remove_identity_copies",
        srcs = ["remove_identity_copies.py"],
        deps = [":pass_report"],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "lift_constants",
        srcs = ["lift_constants.py"],
        deps = [
            ":pass_report",
            ":program_constants",
        ],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "prune_unused_constants",
        srcs = ["prune_unused_constants.py"],
        deps = [
            ":pass_report",
            ":program_constants",
        ],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "pipeline",
        srcs = ["pipeline.py"],
        deps = [
            ":lift_constants",
            ":pass_report",
            ":prune_unused_constants",
        ],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "exir_adapter",
        srcs = ["exir_adapter.py"],
        deps = [
            ":pass_report",
            ":pipeline",
        ],
        visibility = ["//visibility:public"],
    )

    # QAT conv-batch-norm folding (issue #4).
    runtime.python_library(
        name = "qat_conv_output_quantizer",
        srcs = ["qat_conv_output_quantizer.py"],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "fuse_qat_conv_bn",
        srcs = ["fuse_qat_conv_bn.py"],
        deps = [
            ":batch_norm_match",
            ":pass_report",
            ":program_constants",
        ],
        visibility = ["//visibility:public"],
    )
