"""Bazel targets of this package (see tools/build_defs/runtime.bzl for the runtime.* shim)."""

load("//tools/build_defs:runtime.bzl", "runtime")

def define_common_targets():
    runtime.python_test(
        name = "smoke_export_test",
        srcs = ["smoke_export_test.py"],
    )

    runtime.cxx_binary(
        name = "libsmoke_backend.so",
        srcs = ["smoke_backend.cc"],
        copts = ["-std=c++17"],
        linkshared = True,
        deps = ["@et_py//:executorch"],
    )

    runtime.python_test(
        name = "backend_registration_test",
        srcs = ["backend_registration_test.py"],
        data = [":libsmoke_backend.so"],
        env = {"SMOKE_BACKEND_SO": "$(rootpath :libsmoke_backend.so)"},
    )
