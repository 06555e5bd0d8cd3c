"""Bazel targets of this package (see tools/build_defs/runtime.bzl for the runtime.* shim)."""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    runtime.cxx_binary(
        name = "libsmoke_backend.so",
        srcs = ["smoke_backend.cc"],
        copts = ["-std=c++17"],
        linkshared = True,
        deps = ["@et_py//:executorch"],
    )

    # Both smoke checks in one test process (each process pays ~5.5 s to import torch and
    # ExecuTorch): the export round trip, and a C++ backend registering with the runtime.
    runtime.python_test(
        name = "smoke_test",
        srcs = [
            "backend_registration_test.py",
            "smoke_export_test.py",
        ],
        data = [":libsmoke_backend.so"],
        env = {"SMOKE_BACKEND_SO": "$(rootpath :libsmoke_backend.so)"},
    )
