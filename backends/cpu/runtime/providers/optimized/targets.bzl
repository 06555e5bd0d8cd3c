"""Bazel targets of the CPU delegate's Optimized provider (see tools/build_defs/runtime.bzl).

The layout (README.md): the provider itself here (session, bind table, one binder file per op
family), oneDNN plans in onednn/, our own kernels in kernels/, shared machinery in common/; the
C ABI for ctypes and the Python tests are the package test/.
"""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """oneDNN, the plans library, the provider the runtime links."""

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

    # Everything below the binders: the oneDNN plans behind onednn/onednn_provider.h, our own
    # kernels and the shared machinery (work pool, weight cache, layouts, pieces). No runtime
    # types: test/'s C ABI links it alone.
    runtime.cxx_library(
        name = "plans",
        srcs = [
            "common/layout.cc",
            "common/pieces.cc",
            "common/weight_arena.cc",
            "common/weight_cache.cc",
            "common/work_pool.cc",
            "kernels/channel_binary.cc",
            "kernels/channel_binary.h",
            "kernels/conv_window.h",
            "kernels/depthwise_conv.cc",
            "kernels/depthwise_int8.cc",
            "kernels/linear_8da_vnni.cc",
            "kernels/permute_plan.cc",
            "kernels/pointwise_conv.cc",
            "kernels/pointwise_int8.cc",
            "kernels/quantized_add.cc",
            "kernels/row_bmm.cc",
            "kernels/row_gemm.cc",
            "kernels/tile_bmm.cc",
            "kernels/stem_conv.cc",
            "kernels/stem_conv.h",
            "kernels/stream_conv.cc",
            "kernels/stream_conv.h",
            "kernels/winograd_conv.cc",
            "kernels/winograd_conv.h",
            "kernels/squeeze_excite.cc",
            "kernels/squeeze_excite.h",
            "kernels/vector_epilogue.h",
            "kernels/vector_activations.cc",
            "onednn/binary_plan.cc",
            "onednn/block_plan.cc",
            "onednn/concat_plan.cc",
            "onednn/conv_common.cc",
            "onednn/conv_plan.cc",
            "onednn/deconv_plan.cc",
            "onednn/eltwise_plan.cc",
            "onednn/layer_norm_plan.cc",
            "onednn/linear_plan.cc",
            "onednn/matmul_plan.cc",
            "onednn/onednn_internal.h",
            "onednn/onednn_provider.cc",
            "onednn/pooling_plan.cc",
            "onednn/resampling_plan.cc",
            "onednn/softmax_plan.cc",
        ],
        # The plans' interface, plus the slicing, vector helpers, switches and work pool that the
        # int8 kernels, reductions and gathers of :provider and the C ABI also use.
        hdrs = [
            "common/aligned_buffer.h",
            "common/slices.h",
            "common/switches.h",
            "common/weight_arena.h",
            "common/weight_cache.h",
            "common/work_pool.h",
            "kernels/depthwise_conv.h",
            "kernels/depthwise_int8.h",
            "kernels/pointwise_conv.h",
            "kernels/pointwise_int8.h",
            "kernels/quantized_add.h",
            "kernels/linear_8da_vnni.h",
            "kernels/row_bmm.h",
            "kernels/row_gemm.h",
            "kernels/tile_bmm.h",
            "kernels/vector_activations.h",
            "kernels/vector_math.h",
            "onednn/onednn_provider.h",
        ],
        copts = [
            "-std=c++17",
            "-O2",
        ],
        visibility = ["//visibility:public"],
        deps = [
            ":onednn",
            "//backends/cpu/runtime:switches",
        ],
    )

    # The runtime's Optimized provider (KernelProvider id 1) on top of :plans; linked into
    # libcpu_backend.so, registered by a static initializer.
    runtime.cxx_library(
        name = "provider",
        srcs = [
            "bind_convolution.cc",
            "bind_elementwise.cc",
            "bind_linear.cc",
            "bind_normalization.cc",
            "bind_pooling.cc",
            "bind_quantized.cc",
            "bind_reductions.cc",
            "bind_rms_norm.cc",
            "bind_rotary.cc",
            "bind_squeeze_excite.cc",
            "bind_table.cc",
            "bind_table.h",
            "binders.h",
            "binding.cc",
            "binding.h",
            "kernels/embedding.cc",
            "kernels/embedding.h",
            "kernels/mask_ops.cc",
            "kernels/mask_ops.h",
            "kernels/quantize_convert.cc",
            "kernels/quantize_convert.h",
            "kernels/reductions.cc",
            "kernels/reductions.h",
            "kernels/rms_norm.cc",
            "kernels/rms_norm.h",
            "kernels/rotary.cc",
            "kernels/rotary.h",
            "onednn/quantized_kernels.cc",
            "onednn/quantized_kernels.h",
            "provider.cc",
            "session.cc",
            "session.h",
        ],
        copts = [
            "-std=c++17",
            "-O2",
            "-Wall",
        ],
        alwayslink = True,
        visibility = ["//visibility:public"],
        deps = [
            ":plans",
            "//backends/cpu/runtime:runtime_lib",
            "@et_py//:executorch",
        ],
    )
