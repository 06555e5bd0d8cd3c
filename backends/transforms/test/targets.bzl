"""Bazel targets of this package (see tools/build_defs/runtime.bzl for the runtime.* shim)."""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """This package's targets: one test per transform module or family of modules.

    The two batch-norm folds share one, and so do the four constant-hygiene passes.
    """

    # Batch-norm folding and constant hygiene (issue #3).
    runtime.python_library(
        name = "bn_test_util",
        srcs = ["bn_test_util.py"],
        deps = [
            "//backends/transforms:batch_norm_match",
            "//backends/transforms:fuse_batch_norm_with_conv",
            "//backends/transforms:fuse_batch_norm_with_linear",
            "//backends/transforms:pass_report",
            "//backends/transforms:pipeline",
            "//backends/transforms:program_checks",
        ],
    )

    # The two batch-norm folds and their pitfalls in one test process (each process pays ~5.5 s
    # to import torch and ExecuTorch; the three files run in ~15 s together).
    runtime.python_test(
        name = "batch_norm_folding_test",
        srcs = [
            "bn_folding_pitfalls_test.py",
            "fuse_batch_norm_with_conv_test.py",
            "fuse_batch_norm_with_linear_test.py",
        ],
        deps = [
            "//backends/transforms:fuse_batch_norm_with_conv",
            "//backends/transforms:fuse_batch_norm_with_linear",
            "//backends/transforms:program_checks",
            ":bn_test_util",
        ],
    )

    # The constant-hygiene passes (folding constant subgraphs, dropping identity copies, lifting
    # and pruning constants) in one test process: each process pays ~5.5 s to import torch and
    # ExecuTorch.
    runtime.python_test(
        name = "constant_hygiene_test",
        srcs = [
            "fold_constant_subgraphs_test.py",
            "lift_constants_test.py",
            "prune_unused_constants_test.py",
            "remove_identity_copies_test.py",
        ],
        deps = [
            "//backends/transforms:fold_constant_subgraphs",
            "//backends/transforms:lift_constants",
            "//backends/transforms:program_checks",
            "//backends/transforms:prune_unused_constants",
            "//backends/transforms:remove_identity_copies",
            ":bn_test_util",
        ],
    )

    runtime.python_test(
        name = "pass_report_test",
        srcs = ["pass_report_test.py"],
        deps = [
            "//backends/transforms:pass_report",
        ],
    )

    runtime.python_test(
        name = "program_checks_test",
        srcs = ["program_checks_test.py"],
        deps = [
            "//backends/transforms:program_checks",
            ":bn_test_util",
        ],
    )

    runtime.python_test(
        name = "pipeline_test",
        srcs = ["pipeline_test.py"],
        deps = [
            "//backends/transforms:pipeline",
            "//backends/transforms:program_checks",
            ":bn_test_util",
        ],
    )

    runtime.python_test(
        name = "exir_adapter_test",
        srcs = ["exir_adapter_test.py"],
        deps = [
            "//backends/transforms:exir_adapter",
            "//backends/transforms:fuse_batch_norm_with_conv",
            "//backends/transforms:pass_report",
            "//backends/transforms:program_checks",
            ":bn_test_util",
        ],
    )

    # QAT conv-batch-norm folding (issue #4): the real pt2e flow, whose convert_pt2e dominates the
    # run time, so one target per weight granularity lets Bazel run them side by side.
    for granularity in ["per_tensor", "per_channel"]:
        runtime.python_test(
            name = "fuse_qat_conv_bn_{}_test".format(granularity),
            srcs = ["fuse_qat_conv_bn_test.py"],
            data = ["fuse_qat_conv_bn_sequences.json"],
            env = {"QAT_WEIGHT_GRANULARITY": granularity},
            size = "large",
            deps = [
                "//backends/transforms:batch_norm_match",
                "//backends/transforms:fuse_qat_conv_bn",
                "//backends/transforms:program_checks",
                "//backends/transforms:qat_conv_output_quantizer",
            ],
        )
