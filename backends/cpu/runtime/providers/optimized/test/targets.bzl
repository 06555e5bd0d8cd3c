"""Bazel targets of the Optimized provider's tests (see tools/build_defs/runtime.bzl)."""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """A C ABI over the plans for ctypes, the plan and kernel tests, the bind-table test."""

    # A C ABI over the plans (onednn_c_api.h) for Python (ctypes) tests and benchmarks.
    runtime.cxx_binary(
        name = "libonednn_provider_c.so",
        srcs = [
            "onednn_c_api.cc",
            "onednn_c_api.h",
        ],
        copts = [
            "-std=c++17",
            "-O2",
        ],
        linkshared = True,
        deps = ["//backends/cpu/runtime/providers/optimized:plans"],
    )

    runtime.python_library(
        name = "onednn_ctypes",
        srcs = ["onednn_ctypes.py"],
        data = [":libonednn_provider_c.so"],
        visibility = ["//visibility:public"],
    )

    runtime.python_test(
        name = "onednn_provider_test",
        srcs = ["onednn_provider_test.py"],
        data = [":libonednn_provider_c.so"],
        env = {"ONEDNN_PROVIDER_SO": "$(rootpath :libonednn_provider_c.so)"},
        deps = [
            ":onednn_ctypes",
            ":own_conv_checks",
        ],
    )

    runtime.python_test(
        name = "row_gemm_test",
        srcs = ["row_gemm_test.py"],
        data = [":libonednn_provider_c.so"],
        env = {"ONEDNN_PROVIDER_SO": "$(rootpath :libonednn_provider_c.so)"},
        deps = [":onednn_ctypes"],
    )

    runtime.python_test(
        name = "pointwise_conv_test",
        srcs = ["pointwise_conv_test.py"],
        data = [":libonednn_provider_c.so"],
        env = {"ONEDNN_PROVIDER_SO": "$(rootpath :libonednn_provider_c.so)"},
        deps = [":onednn_ctypes"],
    )

    runtime.python_test(
        name = "depthwise_conv_test",
        srcs = ["depthwise_conv_test.py"],
        data = [":libonednn_provider_c.so"],
        env = {"ONEDNN_PROVIDER_SO": "$(rootpath :libonednn_provider_c.so)"},
        deps = [
            ":onednn_ctypes",
            ":own_conv_checks",
        ],
    )

    runtime.python_library(
        name = "own_conv_checks",
        srcs = ["own_conv_checks.py"],
        deps = [":onednn_ctypes"],
    )

    runtime.python_library(
        name = "int8_ctypes",
        srcs = ["int8_ctypes.py"],
    )

    runtime.python_test(
        name = "depthwise_int8_test",
        srcs = ["depthwise_int8_test.py"],
        data = [":libonednn_provider_c.so"],
        env = {"ONEDNN_PROVIDER_SO": "$(rootpath :libonednn_provider_c.so)"},
        deps = [
            ":int8_ctypes",
            ":onednn_ctypes",
        ],
    )

    runtime.python_test(
        name = "pointwise_int8_test",
        srcs = ["pointwise_int8_test.py"],
        data = [":libonednn_provider_c.so"],
        env = {"ONEDNN_PROVIDER_SO": "$(rootpath :libonednn_provider_c.so)"},
        deps = [
            ":int8_ctypes",
            ":onednn_ctypes",
        ],
    )

    runtime.python_test(
        name = "quantized_add_test",
        srcs = ["quantized_add_test.py"],
        data = [":libonednn_provider_c.so"],
        env = {"ONEDNN_PROVIDER_SO": "$(rootpath :libonednn_provider_c.so)"},
        deps = [
            ":int8_ctypes",
            ":onednn_ctypes",
        ],
    )

    runtime.python_test(
        name = "stem_conv_test",
        srcs = ["stem_conv_test.py"],
        data = [":libonednn_provider_c.so"],
        env = {"ONEDNN_PROVIDER_SO": "$(rootpath :libonednn_provider_c.so)"},
        deps = [
            ":onednn_ctypes",
            ":own_conv_checks",
        ],
    )

    runtime.python_test(
        name = "vector_activations_test",
        srcs = ["vector_activations_test.py"],
        data = [":libonednn_provider_c.so"],
        env = {"ONEDNN_PROVIDER_SO": "$(rootpath :libonednn_provider_c.so)"},
        deps = [":onednn_ctypes"],
    )

    # The bind table (bind_table.cc) against backends/cpu/routes.py, through the runtime library.
    runtime.python_test(
        name = "bind_table_test",
        srcs = ["bind_table_test.py"],
        deps = [
            "//backends/cpu:routes",
            "//backends/cpu/runtime:loader",
        ],
    )
