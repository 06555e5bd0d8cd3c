"""Maps ExecuTorch's `runtime.*` build macros onto Bazel's native rules.

Each package keeps its targets in `targets.bzl` as `define_common_targets()`, written against
`runtime.python_library`, `runtime.cxx_binary` and friends, the way ExecuTorch's Buck files are.
A thin `BUILD.bazel` loads that file and calls the function; this shim supplies Bazel's meaning.
"""

_PYTEST_MAIN = "//tools/build_defs:pytest_main.py"

def _python_library(name, srcs = [], deps = [], data = [], visibility = None, **kwargs):
    native.py_library(
        name = name,
        srcs = srcs,
        deps = deps,
        data = data,
        srcs_version = "PY3",
        visibility = visibility,
        **kwargs
    )

def _python_binary(name, main, srcs = [], deps = [], data = [], visibility = None, **kwargs):
    native.py_binary(
        name = name,
        main = main,
        srcs = srcs if main in srcs else srcs + [main],
        deps = deps,
        data = data,
        python_version = "PY3",
        srcs_version = "PY3",
        visibility = visibility,
        **kwargs
    )

def _python_test(name, srcs, deps = [], data = [], args = [], size = "medium", **kwargs):
    """A pytest-driven py_test: every file in `srcs` is collected by pytest."""
    native.py_test(
        name = name,
        main = _PYTEST_MAIN,
        srcs = srcs + [_PYTEST_MAIN],
        deps = deps,
        data = data,
        args = args + ["$(rootpath {})".format(src) for src in srcs],
        python_version = "PY3",
        srcs_version = "PY3",
        size = size,
        **kwargs
    )

def _cxx_library(name, **kwargs):
    native.cc_library(name = name, **kwargs)

def _cxx_binary(name, **kwargs):
    native.cc_binary(name = name, **kwargs)

def _cxx_test(name, **kwargs):
    native.cc_test(name = name, **kwargs)

def _filegroup(name, **kwargs):
    native.filegroup(name = name, **kwargs)

def _genrule(name, **kwargs):
    native.genrule(name = name, **kwargs)

def _sh_test(name, **kwargs):
    native.sh_test(name = name, **kwargs)

def _sh_binary(name, **kwargs):
    native.sh_binary(name = name, **kwargs)

runtime = struct(
    cxx_binary = _cxx_binary,
    cxx_library = _cxx_library,
    cxx_test = _cxx_test,
    filegroup = _filegroup,
    genrule = _genrule,
    python_binary = _python_binary,
    python_library = _python_library,
    python_test = _python_test,
    sh_binary = _sh_binary,
    sh_test = _sh_test,
)

def starlark_sources(name = "starlark_sources"):
    """Declares this package's Starlark files as a filegroup, for the buildifier test.

    Args:
      name: the filegroup's name; the root BUILD.bazel expects the default.
    """
    native.filegroup(
        name = name,
        srcs = native.glob(["BUILD.bazel", "BUILD", "*.bzl", "BUCK", "TARGETS"]),
        visibility = ["//:__pkg__"],
    )
