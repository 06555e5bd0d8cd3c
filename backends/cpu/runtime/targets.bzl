"""Bazel targets of the CPU delegate's C++ runtime (see tools/build_defs/runtime.bzl)."""

load("//tools/build_defs:runtime.bzl", "runtime")

_COPTS = [
    "-std=c++17",
    "-O2",
    "-Wall",
    # executorch's event-tracer hooks compile to nothing without it; with it, a kernel call logs
    # a profiling event only when the program was loaded with a tracer (ETDump).
    "-DET_EVENT_TRACER_ENABLED",
]

_RUNTIME_SRCS = [
    "argument_checks.cc",
    "builtin_kernels.cc",
    "compiled_graph.cc",
    "dynamic_shapes.cc",
    "error_report.cc",
    "kernel_provider.cc",
    "kernel_signature.cc",
    "linear_8da.cc",
    "linear_wo.cc",
    "memory_planner.cc",
    "packed_weight.cc",
    "payload_reader.cc",
    "quantized_op_check.cc",
    "reference_provider.cc",
    "rms_norm.cc",
    "rotary.cc",
    "safe_softmax.cc",
    "state_kernels.cc",
    "stream_exit_guard.cc",
]

_RUNTIME_HDRS = [
    "argument_checks.h",
    "builtin_kernels.h",
    "compiled_graph.h",
    "dynamic_shapes.h",
    "error_report.h",
    "kernel_provider.h",
    "kernel_signature.h",
    "linear_8da.h",
    "linear_wo.h",
    "memory_planner.h",
    "packed_weight.h",
    "payload_reader.h",
    "quantized_op_check.h",
    "reference_provider.h",
    "rms_norm.h",
    "rotary.h",
    "safe_softmax.h",
    "state_kernels.h",
]

# The fuzz smoke compiles the read path itself, sanitized, with small size limits (a hostile
# shape is then rejected before it can become a multi-GB allocation).
_FUZZ_COPTS = [
    "-std=c++17",
    "-O1",
    "-g",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=undefined",
    "-DET_CPU_MAX_TENSOR_BYTES=(size_t{1}<<26)",
    "-DET_CPU_MAX_ARENA_BYTES=(size_t{1}<<28)",
]

# The concurrency stress tests' programs (test/stress_programs.py).
_STRESS_PROGRAMS = ["decoder", "dynamic_cnn", "float_cnn", "int8_cnn"]

# What the int8 model tests share: quantize with PT2E, lower, compare with the undelegated program.
_INT8_MODEL_TEST_DEPS = [
    ":int8_compare",
    ":loader",
    "//backends/cpu:quantization",
    "//backends/cpu/partition:cpu_partitioner",
    "//backends/cpu/serialization:graph_reader",
]

def define_common_targets():
    """The runtime library, its Python loader and its tests."""

    # Argument signatures of every kernel a route may name, from torch's and the executorch
    # wheel's schemas (the venv interpreter runs the generator; nothing is downloaded).
    runtime.python_binary(
        name = "gen_kernel_signatures",
        main = "gen_kernel_signatures.py",
        deps = ["//backends/cpu:quantized_ops"],
    )

    runtime.genrule(
        name = "kernel_signatures",
        outs = ["kernel_signatures.inc"],
        cmd = "$(location :gen_kernel_signatures) --out $@",
        tools = [":gen_kernel_signatures"],
    )

    # The delegate's environment switch readers (switches.h): header-only, no dependencies, so
    # the runtime and the Optimized provider's :plans (which do not depend on each other) share
    # them.
    runtime.cxx_library(
        name = "switches",
        hdrs = ["switches.h"],
        visibility = ["//visibility:public"],
    )

    runtime.cxx_library(
        name = "runtime_lib",
        srcs = _RUNTIME_SRCS + ["cpu_backend.cc"],
        hdrs = _RUNTIME_HDRS,
        textual_hdrs = [":kernel_signatures"],
        copts = _COPTS,
        # Static initializers register the backend and the Reference provider.
        alwayslink = True,
        visibility = ["//visibility:public"],
        deps = [
            ":switches",
            "//backends/cpu/serialization:schema_cc",
            "@et_py//:executorch",
        ],
    )

    # The library loader.py puts into the process: registers "CpuBackend" with the runtime.
    runtime.cxx_binary(
        name = "libcpu_backend.so",
        linkshared = True,
        visibility = ["//visibility:public"],
        deps = [
            ":runtime_lib",
            "//backends/cpu/runtime/providers/optimized:provider",
        ],
    )

    runtime.python_library(
        name = "loader",
        srcs = ["loader.py"],
        data = [":libcpu_backend.so"],
        visibility = ["//visibility:public"],
    )

    # Fuzzing: payload_fuzzer.cc is the libFuzzer target (fuzz/run_libfuzzer.sh fuzzes it with
    # clang); the smoke binary drives it with a fixed budget of deterministic mutations.
    runtime.cxx_binary(
        name = "payload_fuzz_smoke",
        srcs = _RUNTIME_SRCS + _RUNTIME_HDRS + [
            "fuzz/fuzz_smoke_main.cc",
            "fuzz/payload_fuzzer.cc",
            ":kernel_signatures",
        ],
        copts = _FUZZ_COPTS,
        linkopts = ["-fsanitize=address,undefined"],
        deps = [
            ":switches",
            "//backends/cpu/serialization:schema_cc",
            "@et_py//:executorch",
        ],
    )

    # The runtime sanitized, as a library for a Python process that preloads libasan
    # (tools/pte_fuzz's sanitized smoke): whole .pte files through init and execute. Only the
    # Reference provider: the oneDNN provider is not in it.
    runtime.cxx_binary(
        name = "libcpu_backend_sanitized.so",
        srcs = _RUNTIME_SRCS + _RUNTIME_HDRS + [
            "cpu_backend.cc",
            ":kernel_signatures",
        ],
        copts = _FUZZ_COPTS,
        linkopts = ["-fsanitize=address,undefined"],
        linkshared = True,
        visibility = ["//visibility:public"],
        deps = [
            ":switches",
            "//backends/cpu/serialization:schema_cc",
            "@et_py//:executorch",
        ],
    )

    runtime.sh_test(
        name = "payload_fuzz_smoke_test",
        size = "small",
        srcs = ["fuzz/payload_fuzz_smoke_test.sh"],
        args = ["$(rootpath :payload_fuzz_smoke)"],
        data = [":payload_fuzz_smoke"],
    )

    # Hand-built payloads in real .pte programs (see test/handmade_payload.py).
    runtime.python_library(
        name = "handmade_payload",
        srcs = ["test/handmade_payload.py"],
        deps = ["//backends/cpu/serialization:schema"],
    )

    runtime.python_test(
        name = "runtime_contract_test",
        srcs = ["test/runtime_contract_test.py"],
        deps = [
            ":handmade_payload",
            ":loader",
            "//backends/cpu:routes",
        ],
    )

    runtime.python_test(
        name = "hostile_payload_test",
        srcs = ["test/hostile_payload_test.py"],
        deps = [
            ":handmade_payload",
            ":loader",
            "//backends/cpu/serialization:schema",
        ],
    )

    # Models lowered by the real AOT side, run on the real runtime.
    runtime.python_library(
        name = "lowered_program",
        srcs = ["test/lowered_program.py"],
        # backends/cpu/test's ops_run_test lowers its cases together too (lower_cases);
        # tools/bench's linear_8da_bench lowers and loads its programs with it.
        visibility = [
            "//backends/cpu/test:__pkg__",
            "//tools/bench:__pkg__",
        ],
        deps = [
            ":loader",
            "//backends/cpu/partition:cpu_partitioner",
            "//backends/cpu/serialization:graph_reader",
            "//backends/cpu/serialization:schema",
        ],
    )

    # Float and integer programs in one test process (each process pays ~5.5 s to import torch
    # and ExecuTorch).
    runtime.python_test(
        name = "lowered_models_test",
        srcs = [
            "test/lowered_float_test.py",
            "test/lowered_integer_test.py",
        ],
        deps = [":lowered_program"],
    )

    # Bounded dynamic dimensions (issue 20): a CNN with a dynamic batch, a Llama-style decoder with
    # a dynamic sequence length, each one .pte run at many sizes against eager.
    runtime.python_test(
        name = "dynamic_shape_test",
        size = "medium",
        srcs = ["test/dynamic_shape_test.py"],
        deps = [
            ":lowered_program",
            ":loader",
            "//backends/cpu/partition:cpu_partitioner",
            "//backends/cpu/serialization:graph_reader",
            "//backends/cpu/serialization:schema",
            "//tools/bench:zoo",
        ],
    )

    # Issue 47: ET_CPU_RESIZE_IN_PLACE=1, a new size taken in place on the graph compiled for the
    # bounds (no shape plan): a Llama-style decoder against eager at many sizes, memory flat.
    runtime.python_test(
        name = "resize_in_place_test",
        size = "medium",
        srcs = ["test/resize_in_place_test.py"],
        deps = [
            ":lowered_program",
            ":loader",
            "//backends/cpu/partition:cpu_partitioner",
            "//tools/bench:zoo",
        ],
    )

    # Issue 47: the same bounded dynamic dims with the plain documented flow (no helper):
    # edge.to_executorch() plans the exported bounds; MobileNetV3-style CNN and a decoder.
    runtime.python_test(
        name = "plain_dynamic_flow_test",
        size = "medium",
        srcs = ["test/plain_dynamic_flow_test.py"],
        deps = [
            ":lowered_program",
            ":loader",
            "//backends/cpu:symbolic_dims",
            "//backends/cpu/partition:cpu_partitioner",
            "//tools/bench:zoo",
        ],
    )

    # Issue 47: a new size's first call reuses the weights the base graph prepared (the weight
    # cache's counters), fused blocks deferred to finalize; results against eager.
    runtime.python_test(
        name = "shape_plan_weights_test",
        size = "medium",
        srcs = ["test/shape_plan_weights_test.py"],
        deps = [
            ":lowered_program",
            ":loader",
            "//backends/cpu/partition:cpu_partitioner",
            "//tools/bench:zoo",
        ],
    )

    # Issue 47: a linear of 32 rows or more runs in row tiles, so a new size makes no new oneDNN
    # matmul kernel (the matmul primitive counters); a decoder against eager at several sizes.
    runtime.python_test(
        name = "shape_plan_primitives_test",
        size = "medium",
        srcs = ["test/shape_plan_primitives_test.py"],
        deps = [
            ":lowered_program",
            ":loader",
            "//backends/cpu/partition:cpu_partitioner",
            "//tools/bench:zoo",
        ],
    )

    # Issue 43: threads x programs x calls, to process exit. The programs (float CNN, int8 CNN,
    # decoder, dynamic-batch CNN) are lowered once at build time; the C++ test runs them with
    # ExecuTorch's Module and, under --config=asan / --config=tsan, is the sanitizer stress test;
    # the Python test calls them from Python threads through ExecuTorch's bindings.
    runtime.python_library(
        name = "stress_programs_lib",
        srcs = ["test/stress_programs.py"],
        deps = [
            "//backends/cpu:quantization",
            "//backends/cpu:symbolic_dims",
            "//backends/cpu/partition:cpu_partitioner",
            "//tools/bench:zoo",
        ],
    )

    runtime.python_binary(
        name = "stress_programs",
        main = "test/stress_programs.py",
        deps = [":stress_programs_lib"],
    )

    runtime.genrule(
        name = "stress_program_files",
        outs = ["stress_pte/%s.pte" % name for name in _STRESS_PROGRAMS],
        cmd = "$(location :stress_programs) --out $(@D)/stress_pte",
        tools = [":stress_programs"],
    )

    # switches.h's readers (switch_number's bad values, opted_in_reach): milliseconds.
    runtime.cxx_test(
        name = "switches_test",
        size = "small",
        srcs = ["test/switches_test.cc"],
        copts = _COPTS,
        deps = [":switches"],
    )

    runtime.cxx_test(
        name = "concurrent_runs_test",
        size = "medium",
        srcs = ["test/concurrent_runs.cc"],
        args = [
            "--threads",
            "8",
            "--calls",
            "6",
            "--min-task-flops",
            "1",
            "$(rootpaths :stress_program_files)",
        ],
        copts = _COPTS,
        data = [":stress_program_files"],
        deps = [
            ":runtime_lib",
            "//backends/cpu/runtime/providers/optimized:provider",
            "//tools/runner:tensor_io",
            "@et_py//:executorch",
            "@et_runtime_libs//:kernels",
        ],
    )

    runtime.python_test(
        name = "concurrent_calls_test",
        size = "medium",
        srcs = [
            "test/concurrent_calls.py",
            "test/concurrent_calls_test.py",
        ],
        data = [":stress_program_files"],
        deps = [
            ":loader",
            ":stress_programs_lib",
        ],
    )

    # Linears the partitioner leaves out are decomposed and run outside; claimed ones stay whole.
    runtime.python_test(
        name = "left_out_linear_test",
        # 20 generated stacks, each lowered: ~200 s alone on the shared 2-core machine, over the
        # medium timeout when the suite runs beside it.
        size = "large",
        srcs = ["test/left_out_linear_test.py"],
        deps = [
            ":lowered_program",
            "//backends/cpu/serialization:graph_reader",
        ],
    )

    runtime.python_library(
        name = "int8_compare",
        srcs = ["test/int8_compare.py"],
        deps = [
            ":loader",
            "//backends/cpu:quantization",
            "//backends/cpu/partition:cpu_partitioner",
        ],
    )

    # PT2E-quantized models on the int8 ops, and the int8 ops' payload checks.
    runtime.python_test(
        name = "quantized_model_test",
        size = "medium",
        srcs = ["test/quantized_model_test.py"],
        deps = _INT8_MODEL_TEST_DEPS,
    )

    # A small Llama-style decoder for the torchao tests.
    runtime.python_library(
        name = "llama_like",
        srcs = ["test/llama_like.py"],
    )

    # torchao's 8da4w linears and a small decoder made of them, fully delegated (issue 45).
    runtime.python_test(
        name = "torchao_8da4w_test",
        size = "medium",
        srcs = ["test/torchao_8da4w_test.py"],
        deps = [
            ":llama_like",
            ":lowered_program",
            "//backends/cpu/serialization:graph_reader",
        ],
    )

    # torchao's weight-only linears and embeddings (IntxWeightOnlyConfig), and a decoder with a
    # weight-only embedding and 8da4w linears, fully delegated (issue 45).
    runtime.python_test(
        name = "torchao_weight_only_test",
        size = "medium",
        srcs = ["test/torchao_weight_only_test.py"],
        deps = [
            ":llama_like",
            ":loader",
            ":lowered_program",
            "//backends/cpu/partition:cpu_partitioner",
            "//backends/cpu/serialization:schema",
        ],
    )

    # The Optimized provider's linear_8da kernel against the scalar reference, per ISA (issue 45).
    runtime.python_test(
        name = "linear_8da_kernel_test",
        size = "medium",
        srcs = ["test/linear_8da_kernel_test.py"],
        deps = [
            ":loader",
            ":lowered_program",
            ":provider_compare",
            "//backends/cpu:symbolic_dims",
            "//backends/cpu/partition:cpu_partitioner",
        ],
    )

    # A Llama-style decoder with a KV cache (mutable buffers written at input_pos), float32 and
    # torchao 8da4w: prefill then 32 decode steps in one dynamic-length program (issue 45).
    runtime.python_test(
        name = "kv_cache_decoder_test",
        size = "medium",
        srcs = ["test/kv_cache_decoder_test.py"],
        deps = [
            ":loader",
            ":lowered_program",
            "//backends/cpu/partition:cpu_partitioner",
            "//backends/cpu/serialization:graph_reader",
            "//backends/cpu/serialization:schema",
            "//tools/bench:llm_models",
        ],
    )

    # The QAT flow (QATConvOutputQuantizer, FuseQATConvBN) fully delegated on the int8 ops.
    runtime.python_test(
        name = "qat_model_test",
        size = "medium",
        srcs = ["test/qat_model_test.py"],
        deps = _INT8_MODEL_TEST_DEPS,
    )

    # Per-tensor quantize / dequantize on our own loops: the portable kernels' values exactly.
    runtime.python_test(
        name = "quantize_convert_test",
        srcs = ["test/quantize_convert_test.py"],
        deps = [
            ":int8_compare",
            ":loader",
            "//backends/cpu/partition:cpu_partitioner",
        ],
    )

    # int8 convolutions in row bands and linears in column blocks on the work pool: the bytes
    # of the whole op.
    runtime.python_test(
        name = "int8_split_test",
        size = "medium",
        srcs = ["test/int8_split_test.py"],
        deps = [
            ":int8_compare",
            ":loader",
            "//backends/cpu:quantization",
            "//backends/cpu/partition:cpu_partitioner",
        ],
    )

    # Issue 46: int8 depthwise convolutions on our kernel where chained channels-last, oneDNN
    # elsewhere and with the switch off; both within issue 18's criterion.
    runtime.python_test(
        name = "depthwise_int8_placement_test",
        size = "medium",
        srcs = ["test/depthwise_int8_placement_test.py"],
        deps = [
            ":int8_compare",
            ":loader",
            "//backends/cpu:quantization",
            "//backends/cpu/partition:cpu_partitioner",
        ],
    )

    # Issue 46: int8 1x1 convolutions on our kernel by default where it covers them, oneDNN
    # elsewhere and with the switch off; both within issue 18's criterion.
    runtime.python_test(
        name = "pointwise_int8_placement_test",
        size = "medium",
        srcs = ["test/pointwise_int8_placement_test.py"],
        deps = [
            ":int8_compare",
            ":loader",
            "//backends/cpu:quantization",
            "//backends/cpu/partition:cpu_partitioner",
        ],
    )

    # PT2E float islands as int8 ops (max pool, add): the float ops' bytes, plain and chained.
    runtime.python_test(
        name = "int8_island_test",
        size = "medium",
        srcs = ["test/int8_island_test.py"],
        deps = _INT8_MODEL_TEST_DEPS,
    )

    runtime.python_test(
        name = "quantized_payload_test",
        srcs = ["test/quantized_payload_test.py"],
        deps = [
            ":handmade_payload",
            ":loader",
            "//backends/cpu:quantized_ops",
        ],
    )

    # The Optimized (oneDNN) provider against the Reference provider, in the real runtime.
    runtime.python_library(
        name = "provider_compare",
        srcs = ["test/provider_compare.py"],
        deps = [
            ":lowered_program",
            "//backends/cpu:routes",
            "//backends/cpu/serialization:graph_writer",
        ],
    )

    # provider_compare's all-Reference run (one .pte, providers reset at init) against a
    # program lowered with every route on Reference.
    runtime.python_test(
        name = "provider_compare_test",
        srcs = ["test/provider_compare_test.py"],
        deps = [":provider_compare"],
    )

    runtime.python_test(
        name = "optimized_provider_test",
        srcs = ["test/optimized_provider_test.py"],
        # ~2 min alone; on a busy 2-core machine it came within seconds of the 300 s default.
        timeout = "long",
        deps = [
            ":provider_compare",
            "//tools/lower:examples",
        ],
    )

    # Activations: standalone and fused on the Optimized provider, built-in Reference kernels.
    runtime.python_test(
        name = "activation_provider_test",
        srcs = ["test/activation_provider_test.py"],
        deps = [":provider_compare"],
    )

    # native_layer_norm on the Optimized provider.
    runtime.python_test(
        name = "layer_norm_provider_test",
        srcs = ["test/layer_norm_provider_test.py"],
        deps = [":provider_compare"],
    )

    # permute_copy on the Optimized provider's copy loops.
    runtime.python_test(
        name = "permute_provider_test",
        srcs = ["test/permute_provider_test.py"],
        deps = [":provider_compare"],
    )

    # A permute read only by a bmm / mm operand is folded into the product (issue 45).
    runtime.python_test(
        name = "permute_fold_test",
        srcs = ["test/permute_fold_test.py"],
        deps = [":provider_compare"],
    )

    # One-row bmm (decode attention) on our row_bmm kernel instead of oneDNN (issue 45).
    runtime.python_test(
        name = "row_bmm_test",
        srcs = ["test/row_bmm_test.py"],
        deps = [
            ":loader",
            ":lowered_program",
            ":provider_compare",
        ],
    )

    # Delegate state (issue 45): mutated buffers owned by the delegate, updated in place, one copy
    # per loaded program; the ET_CPU_DELEGATE_BUFFERS=0 / delegate_buffers=False fallback.
    runtime.python_test(
        name = "delegate_state_test",
        srcs = ["test/delegate_state_test.py"],
        deps = [
            ":loader",
            ":lowered_program",
            "//backends/cpu/partition:cpu_partitioner",
            "//backends/cpu/serialization:graph_reader",
        ],
    )

    # Views of intermediates share their bytes (plan_arena) instead of copying.
    runtime.python_test(
        name = "view_alias_test",
        srcs = ["test/view_alias_test.py"],
        deps = [":provider_compare"],
    )

    # Attention-mask ops, reductions and embedding on the Optimized provider's own loops.
    runtime.python_test(
        name = "sequence_ops_provider_test",
        srcs = ["test/sequence_ops_provider_test.py"],
        deps = [":provider_compare"],
    )

    # Elementwise math (pow, rsqrt, exp, scalar arithmetic) on the Optimized provider.
    runtime.python_test(
        name = "elementwise_math_test",
        srcs = ["test/elementwise_math_test.py"],
        deps = [":provider_compare"],
    )

    runtime.python_test(
        name = "deconv_provider_test",
        srcs = ["test/deconv_provider_test.py"],
        # ~250 s alone on a busy 2-core machine, 326 s at load 8: past the 300 s default.
        timeout = "long",
        deps = [":provider_compare"],
    )

    runtime.python_test(
        name = "mobile_stem_test",
        size = "medium",
        srcs = ["test/mobile_stem_test.py"],
        deps = [
            ":loader",
            ":lowered_program",
            ":provider_compare",
            "//backends/cpu/partition:cpu_partitioner",
            "//tools/bench:zoo",
        ],
    )

    runtime.python_library(
        name = "fused_op_checks",
        srcs = ["test/fused_op_checks.py"],
        deps = [
            ":loader",
            "//backends/cpu/serialization:schema",
        ],
    )

    runtime.python_test(
        name = "rms_norm_test",
        size = "medium",
        srcs = ["test/rms_norm_test.py"],
        deps = [
            ":fused_op_checks",
            ":loader",
            ":lowered_program",
            "//backends/cpu:fuse_rms_norm",
            "//backends/cpu/partition:cpu_partitioner",
            "//backends/cpu/serialization:schema",
            "//tools/bench:zoo",
        ],
    )

    runtime.python_test(
        name = "rotary_test",
        size = "medium",
        srcs = ["test/rotary_test.py"],
        deps = [
            ":fused_op_checks",
            ":loader",
            ":lowered_program",
            "//backends/cpu/partition:cpu_partitioner",
            "//backends/cpu/serialization:schema",
            "//tools/bench:zoo",
        ],
    )

    runtime.python_test(
        name = "safe_softmax_test",
        size = "medium",
        srcs = ["test/safe_softmax_test.py"],
        deps = [
            ":fused_op_checks",
            ":loader",
            ":lowered_program",
            "//backends/cpu/partition:cpu_partitioner",
            "//backends/cpu/serialization:schema",
            "//tools/bench:zoo",
        ],
    )

    runtime.python_library(
        name = "small_zoo_program",
        srcs = ["test/small_zoo_program.py"],
        deps = [
            ":lowered_program",
            "//tools/bench:zoo",
        ],
    )

    # The squeeze-excite tail's kernel and its gate folded into the next 1x1 convolution: one
    # process, whose zoo programs (small_zoo_program) both files run, lowered once.
    runtime.python_test(
        name = "squeeze_excite_test",
        size = "medium",
        srcs = [
            "test/se_gate_fold_test.py",
            "test/squeeze_excite_test.py",
        ],
        deps = [
            ":loader",
            ":lowered_program",
            ":provider_compare",
            ":small_zoo_program",
            "//backends/cpu/partition:cpu_partitioner",
            "//tools/bench:zoo",
        ],
    )

    runtime.python_test(
        name = "inverted_residual_block_test",
        srcs = ["test/inverted_residual_block_test.py"],
        # ~4 min on a busy 2-core machine, past the 300 s default when the load is higher.
        timeout = "long",
        deps = [":provider_compare"],
    )

    runtime.python_test(
        name = "own_expand_test",
        srcs = ["test/own_expand_test.py"],
        deps = [":provider_compare"],
    )

    runtime.python_test(
        name = "binary_ops_test",
        size = "large",  # ~17 lowerings, run Optimized and all-Reference
        srcs = ["test/binary_ops_test.py"],
        deps = [":provider_compare"],
    )

    # Issue 21: per-op events in ETDump, linked to the program through the ETRecord.
    runtime.python_test(
        name = "profiling_events_test",
        srcs = ["test/profiling_events_test.py"],
        deps = [
            ":provider_compare",
            "//backends/cpu:profiling_events",
            "//tools/lower:examples",
        ],
    )

    runtime.python_test(
        name = "softmax_provider_test",
        srcs = ["test/softmax_provider_test.py"],
        deps = [":provider_compare"],
    )

    # oneDNN's verbose log names the implementation of every primitive run: the layout
    # combinations in here must not fall to its reference kernels.
    runtime.python_test(
        name = "onednn_implementation_test",
        srcs = ["test/onednn_implementation_test.py"],
        env = {"ONEDNN_VERBOSE": "1"},
        deps = [":provider_compare"],
    )

    runtime.python_test(
        name = "pool_resample_cat_test",
        size = "large",  # ~10 lowerings, run Optimized and all-Reference
        srcs = ["test/pool_resample_cat_test.py"],
        deps = [":provider_compare"],
    )
