"""Bazel targets of the CPU delegate's oneDNN provider (see tools/build_defs/runtime.bzl)."""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """The provider library, its C ABI for ctypes, and its tests."""

    # oneDNN 3.2 from the pinned wheels (@et_py//:onednn, see third_party/python/python_venv.bzl).
    # oneDNN runs on OpenMP: libgomp, which torch's wheel also ships under the same soname, so one
    # OpenMP runtime serves both in one process; omp.h and libgomp come with g++.
    runtime.cxx_library(
        name = "onednn",
        linkopts = [
            "-lgomp",
            "-pthread",
        ],
        deps = ["@et_py//:onednn"],
    )

    # The optimized provider the CPU delegate runtime links: #include
    # "backends/cpu/runtime/providers/onednn/onednn_provider.h".
    runtime.cxx_library(
        name = "onednn_provider",
        srcs = [
            "binary_plan.cc",
            "block_plan.cc",
            "channel_binary.cc",
            "channel_binary.h",
            "concat_plan.cc",
            "conv_common.cc",
            "conv_plan.cc",
            "deconv_plan.cc",
            "eltwise_plan.cc",
            "layer_norm_plan.cc",
            "layout.cc",
            "linear_plan.cc",
            "matmul_plan.cc",
            "onednn_internal.h",
            "onednn_provider.cc",
            "permute_plan.cc",
            "pieces.cc",
            "pooling_plan.cc",
            "resampling_plan.cc",
            "row_gemm.cc",
            "row_gemm.h",
            "softmax_plan.cc",
            "vector_activations.cc",
            "weight_cache.cc",
            "work_pool.cc",
        ],
        # The plans' interface, plus the slicing, vector helpers, switches and work pool that the
        # int8 kernels, reductions and gathers of :onednn_kernel_provider and the C ABI also use.
        hdrs = [
            "onednn_provider.h",
            "slices.h",
            "vector_activations.h",
            "vector_math.h",
            "weight_cache.h",
            "work_pool.h",
        ],
        copts = [
            "-std=c++17",
            "-O2",
        ],
        visibility = ["//visibility:public"],
        deps = [":onednn"],
    )

    # The runtime's Optimized provider (KernelProvider id 1) on top of the plans above; linked
    # into libcpu_backend.so, registered by a static initializer.
    runtime.cxx_library(
        name = "onednn_kernel_provider",
        srcs = [
            "embedding.cc",
            "embedding.h",
            "mask_ops.cc",
            "mask_ops.h",
            "onednn_kernel_provider.cc",
            "quantize_convert.cc",
            "quantize_convert.h",
            "quantized_kernels.cc",
            "quantized_kernels.h",
            "reductions.cc",
            "reductions.h",
        ],
        copts = [
            "-std=c++17",
            "-O2",
            "-Wall",
        ],
        alwayslink = True,
        visibility = ["//visibility:public"],
        deps = [
            ":onednn_provider",
            "//backends/cpu/runtime:runtime_lib",
            "@et_py//:executorch",
        ],
    )

    # A C ABI over the provider for Python (ctypes) tests and benchmarks.
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
        deps = [":onednn_provider"],
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
        deps = [":onednn_ctypes"],
    )

    runtime.python_test(
        name = "row_gemm_test",
        srcs = ["row_gemm_test.py"],
        data = [":libonednn_provider_c.so"],
        env = {"ONEDNN_PROVIDER_SO": "$(rootpath :libonednn_provider_c.so)"},
        deps = [":onednn_ctypes"],
    )

    runtime.python_test(
        name = "vector_activations_test",
        srcs = ["vector_activations_test.py"],
        data = [":libonednn_provider_c.so"],
        env = {"ONEDNN_PROVIDER_SO": "$(rootpath :libonednn_provider_c.so)"},
        deps = [":onednn_ctypes"],
    )
