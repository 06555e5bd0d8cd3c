"""Bazel targets of the CPU delegate's ahead-of-time side (route table and CpuBackend)."""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """The route table and CpuBackend.preprocess."""
    runtime.python_library(
        name = "routes",
        srcs = ["routes.py"],
        deps = [":quantized_ops"],
        visibility = ["//visibility:public"],
    )

    # The delegate's int8 ops (schemas, reference semantics) and the preprocess pass that
    # rewrites PT2E quantized groups into them.
    runtime.python_library(
        name = "quantized_ops",
        srcs = ["quantized_ops.py"],
        visibility = ["//visibility:public"],
    )

    # Symbolic sizes the delegate runs (affine in bounded symbols), for partitioner and writer.
    runtime.python_library(
        name = "symbolic_dims",
        srcs = ["symbolic_dims.py"],
        deps = [":routes"],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "quantization",
        srcs = ["quantization.py"],
        visibility = ["//visibility:public"],
        deps = [
            "//backends/transforms:fuse_qat_conv_bn",
            "//backends/transforms:qat_conv_output_quantizer",
        ],
    )

    runtime.python_library(
        name = "quantized_fusion",
        srcs = ["quantized_fusion.py"],
        deps = [
            ":quantized_ops",
            ":routes",
            "//backends/transforms:pass_report",
            "//backends/transforms:program_constants",
        ],
        visibility = ["//visibility:public"],
    )

    # What the preprocess fusions below share: matching Edge nodes, replacing a matched subgraph.
    runtime.python_library(
        name = "graph_match",
        srcs = ["graph_match.py"],
        deps = [
            ":routes",
            "//backends/transforms:pass_report",
            "//backends/transforms:program_constants",
        ],
        visibility = ["//visibility:public"],
    )

    # Preprocess: rotary embeddings (rotate-half form) as one et_cpu_quant::rotary op.
    runtime.python_library(
        name = "fuse_rotary",
        srcs = ["fuse_rotary.py"],
        deps = [
            ":quantized_ops",
            ":graph_match",
            "//backends/transforms:pass_report",
        ],
        visibility = ["//visibility:public"],
    )

    # Preprocess: RMSNorm (pow, mean, add eps, rsqrt, mul, mul by weight) as one
    # et_cpu_quant::rms_norm op.
    runtime.python_library(
        name = "fuse_rms_norm",
        srcs = ["fuse_rms_norm.py"],
        deps = [
            ":quantized_ops",
            ":graph_match",
            "//backends/transforms:pass_report",
            "//backends/transforms:program_constants",
        ],
        visibility = ["//visibility:public"],
    )

    # Preprocess: SDPA's softmax and its fully-masked-row guard (eq, logical_not, any,
    # logical_not, where) as one et_cpu_quant::safe_softmax op.
    runtime.python_library(
        name = "fuse_safe_softmax",
        srcs = ["fuse_safe_softmax.py"],
        deps = [
            ":quantized_ops",
            ":graph_match",
            "//backends/transforms:pass_report",
            "//backends/transforms:program_constants",
        ],
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
            ":fuse_rms_norm",
            ":fuse_rotary",
            ":fuse_safe_softmax",
            ":profiling_events",
            ":quantized_fusion",
            ":symbolic_dims",
            "//backends/cpu/serialization:graph_writer",
            "//backends/cpu/torchao:fusion",
            "//backends/transforms:fold_constant_subgraphs",
            "//backends/transforms:fuse_batch_norm_with_conv",
            "//backends/transforms:fuse_batch_norm_with_linear",
            "//backends/transforms:pass_report",
            "//backends/transforms:pipeline",
            "//backends/transforms:remove_identity_copies",
        ],
        visibility = ["//visibility:public"],
    )
