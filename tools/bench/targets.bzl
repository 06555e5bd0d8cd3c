"""Bazel targets of this package (see tools/build_defs/runtime.bzl for the runtime.* shim).

The shared benchmark harness, its test, and one `runtime.python_binary` per issue's benchmark
(`bazel run //tools/bench:NAME -- --help`). Add your benchmark's block below; keep the others.
"""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """The harness library and the benchmarks built on it."""
    runtime.python_library(
        name = "harness",
        srcs = ["harness.py"],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "eager_runner",
        srcs = ["eager_runner.py"],
        deps = [
            ":harness",
            "//tools/lower:examples",
        ],
    )

    runtime.python_test(
        name = "harness_test",
        size = "small",
        srcs = ["harness_test.py"],
        deps = [":harness"],
    )

    # Issues #7, #23: the target linter vs. buildifier -lint=warn (CPU, start-up included).
    runtime.python_binary(
        name = "lint_bench",
        main = "lint_bench.py",
        args = [
            "--buildifier",
            "$(rootpath @buildifier//:buildifier)",
        ],
        data = ["@buildifier"],
        deps = [
            ":harness",
            "//tools/lint:lint_lib",
        ],
    )

    # Issue #8: every example model on the CPU delegate, no delegate, XNNPACK and eager.
    runtime.python_library(
        name = "lower_bench_lib",
        srcs = ["lower_bench.py"],
        deps = [
            ":eager_runner",
            ":harness",
            "//tools/lower:examples",
            "//tools/lower:lower_lib",
        ],
    )

    runtime.python_binary(
        name = "lower_bench",
        main = "lower_bench.py",
        deps = [":lower_bench_lib"],
    )

    runtime.python_test(
        name = "lower_bench_test",
        size = "medium",
        srcs = ["lower_bench_test.py"],
        deps = [":lower_bench_lib"],
    )

    # Issue #3: batch-norm folding pipeline time on 1,000- and 10,000-block conv-BN chains.
    runtime.python_binary(
        name = "transforms_bench",
        main = "transforms_bench.py",
        deps = [
            ":harness",
            "//backends/transforms:fuse_batch_norm_with_conv",
            "//backends/transforms:pipeline",
        ],
    )

    # Issue #9: the oneDNN provider vs eager and XNNPACK (networks, layers, GEMM GFLOP/s).
    runtime.python_binary(
        name = "onednn_bench",
        main = "onednn_bench.py",
        deps = [
            ":harness",
            "//backends/cpu/runtime/providers/optimized/test:onednn_ctypes",
        ],
    )

    # Issue 46: our depthwise convolution against oneDNN's on the mobile networks' layers.
    runtime.python_binary(
        name = "depthwise_bench",
        main = "depthwise_bench.py",
        deps = ["//backends/cpu/runtime/providers/optimized/test:onednn_ctypes"],
    )

    runtime.python_test(
        name = "depthwise_bench_test",
        srcs = [
            "depthwise_bench.py",
            "depthwise_bench_test.py",
        ],
        deps = ["//backends/cpu/runtime/providers/optimized/test:onednn_ctypes"],
    )

    # Issue 46: our 1x1 kernel for the blocks' expand against oneDNN's, on one band of rows.
    runtime.python_binary(
        name = "expand_bench",
        main = "expand_bench.py",
        deps = ["//backends/cpu/runtime/providers/optimized/test:onednn_ctypes"],
    )

    runtime.python_test(
        name = "expand_bench_test",
        srcs = [
            "expand_bench.py",
            "expand_bench_test.py",
        ],
        deps = ["//backends/cpu/runtime/providers/optimized/test:onednn_ctypes"],
    )

    # Issue #6: the C++ CPU delegate runtime vs no delegate, XNNPACK and eager (ratios, peak memory),
    # with an optional per-op profile (--profile, op_profile.py).
    runtime.python_library(
        name = "cpu_delegate_bench_lib",
        srcs = ["cpu_delegate_bench.py"],
        deps = [
            ":eager_runner",
            ":harness",
            ":onnxruntime_peer",
            ":op_profile",
            "//backends/cpu/runtime:loader",
            "//tools/lower:examples",
        ],
    )

    runtime.python_binary(
        name = "cpu_delegate_bench",
        main = "cpu_delegate_bench.py",
        deps = [":cpu_delegate_bench_lib"],
    )

    runtime.python_test(
        name = "cpu_delegate_bench_test",
        size = "medium",
        srcs = ["cpu_delegate_bench_test.py"],
        deps = [
            ":cpu_delegate_bench_lib",
            ":op_cost",
            ":op_profile",
        ],
    )

    # Issue 17: the held-out model zoo (MobileNetV3-, EfficientNet-, ResNet-50-style, UNet,
    # conv1d speech) on the CPU delegate vs XNNPACK vs eager, with delegated fractions and an
    # optional per-op profile (--profile).
    runtime.python_library(
        name = "zoo",
        srcs = ["zoo.py", "zoo_sequence.py"],
        visibility = ["//visibility:public"],
        deps = ["//tools/lower:examples"],
    )

    # Issue 45: the Llama-style KV-cache decoder shared by the KV-cache tests and llm_bench.
    runtime.python_library(
        name = "llm_models",
        srcs = ["llm_models.py"],
        visibility = ["//visibility:public"],
    )

    # Issue 45: KV-cache decode tokens/s and prefill time, CPU delegate vs XNNPACK vs eager, float
    # or torchao 8da4w, against the memory-bandwidth limit.
    runtime.python_library(
        name = "llm_bench_lib",
        srcs = ["llm_bench.py"],
        deps = [
            ":harness",
            ":llm_models",
            "//backends/cpu/partition:cpu_partitioner",
            "//backends/cpu/runtime:loader",
        ],
    )

    runtime.python_binary(
        name = "llm_bench",
        main = "llm_bench.py",
        deps = [":llm_bench_lib"],
    )

    runtime.python_test(
        name = "llm_bench_test",
        size = "medium",
        srcs = ["llm_bench_test.py"],
        deps = [":llm_bench_lib"],
    )

    # Issue #18: int8 (PT2E) on the CPU delegate vs XNNPACK int8, XNNPACK fp32 and our fp32.
    runtime.python_library(
        name = "int8_bench_lib",
        srcs = ["int8_bench.py"],
        deps = [
            ":harness",
            "//backends/cpu:quantization",
            "//backends/cpu/partition:cpu_partitioner",
            "//backends/cpu/runtime:loader",
            "//tools/lower:examples",
            "//tools/lower:lower_lib",  # quantize.sqnr_db, as the lowering tool reports it
        ],
    )

    runtime.python_binary(
        name = "int8_bench",
        main = "int8_bench.py",
        deps = [":int8_bench_lib"],
    )

    runtime.python_test(
        name = "int8_bench_test",
        size = "medium",
        srcs = ["int8_bench_test.py"],
        deps = [":int8_bench_lib"],
    )

    # Issue #45: the linear_8da kernel (torchao 8da4w linears), decode GEMV and prefill GEMM.
    runtime.python_binary(
        name = "linear_8da_bench",
        main = "linear_8da_bench.py",
        srcs = ["linear_8da_bench.py"],
        deps = [
            ":llm_bench_lib",
            "//backends/cpu/runtime:lowered_program",
        ],
    )

    # What each payload op computes (FLOPs, kernel class): the profile's distance to the GEMM peak
    # (op_profile.py).
    runtime.python_library(
        name = "op_cost",
        srcs = ["op_cost.py"],
        deps = ["//backends/cpu/serialization:graph_reader"],
    )

    runtime.python_test(
        name = "op_cost_test",
        size = "medium",
        srcs = ["op_cost_test.py"],
        deps = [
            ":op_cost",
            "//backends/cpu/partition:cpu_partitioner",
        ],
    )

    # Issues 20 and 46: bounded dynamic dimensions (Llama sequence length, CNN and MobileNetV3
    # batch), one .pte per path, CPU delegate vs XNNPACK vs eager per size, with XNNPACK lowered
    # from a static export at each size as the anchor; plus the first call at a new size.
    runtime.python_library(
        name = "dynamic_shape_bench_lib",
        srcs = ["dynamic_shape_bench.py"],
        deps = [
            ":harness",
            ":zoo",
            "//backends/cpu:symbolic_dims",
            "//backends/cpu/partition:cpu_partitioner",
            "//backends/cpu/runtime:loader",
        ],
    )

    runtime.python_binary(
        name = "dynamic_shape_bench",
        main = "dynamic_shape_bench.py",
        deps = [":dynamic_shape_bench_lib"],
    )

    runtime.python_test(
        name = "dynamic_shape_bench_test",
        size = "medium",
        srcs = ["dynamic_shape_bench_test.py"],
        deps = [":dynamic_shape_bench_lib"],
    )

    # ONNX Runtime as a benchmark peer (benchmark-only dependencies of the lock).
    runtime.python_library(
        name = "onnxruntime_peer",
        srcs = ["onnxruntime_peer.py"],
        deps = [":harness"],
    )

    # The CPU delegate's per-op profile and roofline of a zoo or examples model, in a fresh
    # process (`python -m tools.bench.op_profile --child ...`): zoo_bench's and
    # cpu_delegate_bench's --profile and --profile-away.
    runtime.python_library(
        name = "op_profile",
        srcs = ["op_profile.py"],
        deps = [
            ":harness",
            ":onnxruntime_peer",
            ":op_cost",
            ":zoo",
            "//backends/cpu/partition:cpu_partitioner",
            "//backends/cpu/runtime:loader",
            "//tools/lower:examples",
        ],
    )

    runtime.python_library(
        name = "zoo_bench_lib",
        srcs = ["zoo_bench.py"],
        deps = [
            ":harness",
            ":onnxruntime_peer",
            ":op_profile",
            ":zoo",
            "//backends/cpu:routes",
            "//backends/cpu/runtime:loader",
        ],
    )

    runtime.python_binary(
        name = "zoo_bench",
        main = "zoo_bench.py",
        deps = [":zoo_bench_lib"],
    )

    runtime.python_test(
        name = "zoo_bench_test",
        size = "medium",
        srcs = ["zoo_bench_test.py"],
        deps = [
            ":op_profile",
            ":zoo_bench_lib",
        ],
    )
