"""Bazel targets of this package (see tools/build_defs/runtime.bzl for the runtime.* shim).

`bazel run //tools/pte_fuzz -- --help`: whole-file mutation fuzzing of delegated .pte programs.
"""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """The fuzzer, its parts and its smoke test."""

    # Native backtraces of crashing cases (see crash_backtrace.cc), loaded by fork_server.py.
    runtime.cxx_binary(
        name = "libcrash_backtrace.so",
        srcs = ["crash_backtrace.cc"],
        copts = [
            "-std=c++17",
            "-O1",
        ],
        linkshared = True,
    )
    runtime.python_library(
        name = "pte_fuzz_lib",
        srcs = [
            "attribution.py",
            "fork_server.py",
            "main.py",
            "mutations.py",
            "programs.py",
        ],
        data = [":libcrash_backtrace.so"],
        deps = [
            "//backends/cpu/runtime:loader",
            "//tools/lower:lower_lib",
        ],
    )

    runtime.python_binary(
        name = "pte_fuzz",
        main = "main.py",
        deps = [":pte_fuzz_lib"],
    )

    # Files that crashed inside ExecuTorch itself; the runner's test loads them too.
    runtime.filegroup(
        name = "upstream_reproducers",
        srcs = native.glob(["upstream/*.pte"]),
        visibility = ["//tools/runner:__pkg__"],
    )

    # A few hundred seeded mutations of the three programs (the long run is the binary above).
    runtime.python_test(
        name = "pte_fuzz_smoke_test",
        srcs = ["pte_fuzz_smoke_test.py"],
        data = native.glob(["upstream/*", "regressions/*"]),
        deps = [":pte_fuzz_lib"],
    )

    # The same on the sanitized runtime (ASan + UBSan; Reference provider only).
    runtime.sh_test(
        name = "sanitized_smoke_test",
        srcs = ["sanitized_smoke_test.sh"],
        args = [
            "$(rootpath :pte_fuzz)",
            "$(rootpath //backends/cpu/runtime:libcpu_backend_sanitized.so)",
        ],
        data = [
            ":pte_fuzz",
            "//backends/cpu/runtime:libcpu_backend_sanitized.so",
        ],
        # Imports under ASan are slow: ~1 min alone, ~3 min on a loaded 2-core machine.
        timeout = "long",
    )
