"""Bazel targets of the et_cpu_plugin wheel (see tools/build_defs/runtime.bzl for the runtime.* shim).

`./bazelw build //:wheel` writes bazel-bin/tools/wheel/et_cpu_plugin-VERSION-py3-none-PLATFORM.whl.
"""

load("//tools/build_defs:runtime.bzl", "runtime")
load(":wheel.bzl", "plugin_wheel")

# buildifier: disable=unnamed-macro (the package convention: a thin BUILD.bazel calls this; the
# check only fires here because plugin_wheel is a rule of ours, not a runtime.* shim call)
def define_common_targets():
    """The wheel builder, the wheel and the test that installs it into a fresh virtualenv."""
    runtime.python_binary(
        name = "build_wheel",
        main = "build_wheel.py",
    )

    plugin_wheel(
        name = "wheel",
        dist_name = "et_cpu_plugin",
        version = "0.1.0",
        summary = "ExecuTorch CPU delegate: CpuPartitioner for lowering, its C++ runtime library",
        readme = "README.md",
        lock = "//third_party/python:requirements.lock",
        # What the packaged code imports (the lock's versions; build_wheel.py reads them there).
        requires = [
            "torch",
            "executorch",
            "flatbuffers",
            "onednn-cpu-gomp",
        ],
        package_init = "package_init.py",
        packages = ["backends"],
        deps = [
            "//backends/cpu:profiling_events",
            "//backends/cpu/partition:cpu_partitioner",
            "//backends/cpu/runtime:loader",
            "//backends/cpu/serialization:graph_reader",
        ],
        data = ["//backends/cpu/serialization:schema_fbs"],
        libraries = ["//backends/cpu/runtime:libcpu_backend.so"],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "build_wheel_lib",
        srcs = ["build_wheel.py"],
    )

    # Builds nothing itself: installs //tools/wheel:wheel into a fresh virtualenv that sees the
    # pinned torch/executorch and nothing of this checkout, lowers and runs models there, and runs
    # README.md's "Use it from Python" snippet as written.
    runtime.python_test(
        name = "wheel_install_test",
        size = "medium",
        srcs = ["test/wheel_install_test.py"],
        data = [
            "test/installed_models.py",
            ":wheel",
            "//:README.md",
            "//third_party/python:requirements.lock",
        ],
        deps = [":build_wheel_lib"],
    )
