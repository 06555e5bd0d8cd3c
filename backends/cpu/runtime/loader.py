"""Loads the CPU delegate's C++ runtime into this process so ExecuTorch programs can use it.

Call `load_cpu_backend()` before loading a `.pte` that has CpuBackend delegates; the library
registers "CpuBackend" with the runtime that `executorch.extension.pybindings.portable_lib` uses.
The library's arena figures and last error message are readable through the functions below.
"""

import ctypes
import os
import threading

# Where the library sits in the Bazel runfiles tree (workspace name, package, target).
_RUNFILES_PATH = os.path.join("et_cpu_plugin", "backends", "cpu", "runtime", "libcpu_backend.so")
# Overrides the default location (e.g. a library built outside Bazel).
ENV_LIBRARY = "ET_CPU_BACKEND_LIBRARY"

_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL] = {}


class CpuBackendNotFoundError(FileNotFoundError):
    """The runtime library is not where it was looked for; the message lists the places."""


def default_library_path() -> str:
    """The library's path: $ET_CPU_BACKEND_LIBRARY, else the Bazel runfiles copy, else the one
    beside this file (where the installed et_cpu_plugin wheel has it).

    Raises CpuBackendNotFoundError listing every candidate that was tried.
    """
    candidates = []
    if os.environ.get(ENV_LIBRARY):
        candidates.append(os.environ[ENV_LIBRARY])
    runfiles_roots = ("RUNFILES_DIR", "TEST_SRCDIR", "PYTHON_RUNFILES")
    for root in (os.environ.get(name) for name in runfiles_roots):
        if root:
            candidates.append(os.path.join(root, _RUNFILES_PATH))
    # Runfiles trees hold the library beside this file (Bazel's Python stub does not always
    # export RUNFILES_DIR to the program it runs).
    candidates.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "libcpu_backend.so"))
    # `bazel run` / a plain py_binary: runfiles beside the entry script.
    import sys

    if sys.argv and sys.argv[0]:
        candidates.append(os.path.join(os.path.abspath(sys.argv[0]) + ".runfiles", _RUNFILES_PATH))
    for candidate in candidates:
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    raise CpuBackendNotFoundError(
        "CPU delegate runtime library not found; tried: "
        + (", ".join(candidates) or "(no candidates)")
        + f". Build //backends/cpu/runtime:libcpu_backend.so or set {ENV_LIBRARY}."
    )


def load_cpu_backend(path: str | None = None) -> str:
    """Loads the runtime library (idempotent) and returns its absolute path.

    `path` defaults to `default_library_path()`. portable_lib is imported first: the library links
    against the same libexecutorch.so and must register into the registry portable_lib uses.
    """
    # ExecuTorch's quantized kernels (quantize/dequantize): the delegate's Reference provider binds
    # them for PT2E-quantized programs; loading the library registers them with the same runtime.
    import executorch.kernels.quantized  # noqa: F401
    from executorch.extension.pybindings import portable_lib  # noqa: F401

    resolved = os.path.abspath(path) if path else default_library_path()
    with _lock:
        if resolved not in _loaded:
            if not os.path.isfile(resolved):
                raise CpuBackendNotFoundError(f"CPU delegate runtime library not found: {resolved}")
            library = _open(resolved)
            library.et_cpu_runtime_last_arena_bytes.restype = ctypes.c_uint64
            library.et_cpu_runtime_live_arena_bytes.restype = ctypes.c_uint64
            library.et_cpu_runtime_last_error.restype = ctypes.c_size_t
            library.et_cpu_runtime_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
            library.et_cpu_runtime_kernel_status.restype = ctypes.c_int
            library.et_cpu_runtime_kernel_status.argtypes = [ctypes.c_char_p]
            library.et_cpu_runtime_last_provider_bytes.restype = ctypes.c_uint64
            library.et_cpu_runtime_last_placement.restype = ctypes.c_size_t
            library.et_cpu_runtime_last_placement.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
            library.et_cpu_runtime_max_fused_steps.restype = ctypes.c_uint64
            library.et_cpu_runtime_shape_plan_hits.restype = ctypes.c_uint64
            library.et_cpu_runtime_shape_plan_misses.restype = ctypes.c_uint64
            # The bindings send ExecuTorch's log to std::cerr, pointed at whichever Python call
            # is in progress: not safe from other threads (issue 43). Our lines go to stderr.
            library.et_cpu_runtime_log_to_stderr.restype = None
            library.et_cpu_runtime_log_to_stderr()
            _loaded[resolved] = library
    return resolved


# Shared libraries the runtime library needs that come from pinned wheels, by distribution. In
# the Bazel tree its rpath finds them; installed from the wheel it has no usable rpath, so they
# are loaded first from where pip put them (a loaded soname satisfies the library's NEEDED entry).
# libexecutorch.so needs nothing here: importing portable_lib has loaded it.
_WHEEL_DEPENDENCIES = {"onednn-cpu-gomp": "libdnnl.so.3"}


def _wheel_dependency(distribution: str, filename: str) -> str | None:
    from importlib import metadata

    try:
        files = metadata.distribution(distribution).files or []
    except metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == filename:
            return str(file.locate())
    return None


def _open(path: str) -> ctypes.CDLL:
    try:
        return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as first_error:
        found = {d: _wheel_dependency(d, f) for d, f in _WHEEL_DEPENDENCIES.items()}
        missing = [f"{_WHEEL_DEPENDENCIES[d]} (from {d})" for d, p in found.items() if p is None]
        if missing:
            raise OSError(f"{first_error}; not installed: {', '.join(missing)}") from first_error
        for dependency in found.values():
            ctypes.CDLL(dependency, mode=ctypes.RTLD_GLOBAL)
        return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def _library() -> ctypes.CDLL:
    with _lock:
        if not _loaded:
            raise RuntimeError("the CPU delegate runtime is not loaded: call load_cpu_backend()")
        return next(iter(_loaded.values()))


def last_arena_bytes() -> int:
    """Intermediate-arena bytes of the most recently initialized CpuBackend delegate."""
    return int(_library().et_cpu_runtime_last_arena_bytes())


def shape_plan_stats() -> tuple[int, int]:
    """(hits, misses) of the shape plans of delegates with symbolic dimensions, process-wide.

    A miss is a call at a size with no compiled graph yet (it compiles one: the re-planning cost).
    """
    library = _library()
    return int(library.et_cpu_runtime_shape_plan_hits()), int(
        library.et_cpu_runtime_shape_plan_misses()
    )


def weight_cache_stats() -> tuple[int, int, int]:
    """(hits, made, made_bytes) of the Optimized provider's prepared constants, process-wide.

    A hit is a reordered or packed weight found alive in a delegate's weight cache (a graph
    compiled for a new size reusing its base's); made counts those reordered or packed, with
    their bytes. (0, 0, 0) from a runtime built without the Optimized provider.
    """
    hits, made, made_bytes = _optimized_counters(
        "et_cpu_runtime_weight_cache_hits",
        "et_cpu_runtime_weights_made",
        "et_cpu_runtime_weights_made_bytes",
    )
    return hits, made, made_bytes


def _optimized_counters(*names: str) -> list[int]:
    """The uint64 counters `names` the Optimized provider exports; zeros without it."""
    library = _library()
    if not all(hasattr(library, name) for name in names):
        return [0] * len(names)
    counters = [getattr(library, name) for name in names]
    for counter in counters:
        counter.restype = ctypes.c_uint64
    return [int(counter()) for counter in counters]


def matmul_primitive_stats() -> tuple[int, int]:
    """(new, reused) matmul primitives the Optimized provider's plans made, process-wide.

    New: of operands, kernel and post-ops no plan of the process had made before (oneDNN generates
    a kernel for it, the cost of a size nobody compiled); reused: seen before. (0, 0) from a
    runtime built without the Optimized provider.
    """
    made, reused = _optimized_counters(
        "et_cpu_runtime_matmul_primitives_new", "et_cpu_runtime_matmul_primitives_reused"
    )
    return made, reused


def resize_prepare_count() -> int:
    """Kernels the Optimized provider prepared again when a graph resized in place, process-wide.

    A graph resized in place keeps the kernels whose plan fits every size (a CNN's, prepared for
    one image); the others are prepared again at each new size. 0 from a runtime built without
    the Optimized provider.
    """
    return _optimized_counters("et_cpu_runtime_resize_prepares")[0]


def live_arena_bytes() -> int:
    """Intermediate-arena bytes of every CpuBackend delegate currently alive in this process."""
    return int(_library().et_cpu_runtime_live_arena_bytes())


def last_provider_bytes() -> int:
    """Bytes the providers of the most recent init hold beside the arena (reordered weights,
    scratchpads, conversion buffers)."""
    return int(_library().et_cpu_runtime_last_provider_bytes())


def max_fused_steps() -> int:
    """How many ops after an op a provider may fuse at most: one profiling event covers them."""
    return int(_library().et_cpu_runtime_max_fused_steps())


def last_placement() -> list[str]:
    """One line per op of the most recently initialized delegate: "<node> <kernel>: <provider>",
    "...: fused into <node> (<provider>)" or "...: Reference (declined by <provider>: <why>)"."""
    library = _library()
    size = int(library.et_cpu_runtime_last_placement(None, 0))
    buffer = ctypes.create_string_buffer(size + 1)
    library.et_cpu_runtime_last_placement(buffer, len(buffer))
    return buffer.value.decode("utf-8", errors="replace").splitlines()


def last_error() -> str:
    """The runtime's most recent init/execute error message ("" if none)."""
    library = _library()
    buffer = ctypes.create_string_buffer(1024)
    library.et_cpu_runtime_last_error(buffer, len(buffer))
    return buffer.value.decode("utf-8", errors="replace")


_KERNEL_STATUS = {0: "ok", 1: "no out-variant schema", 2: "not in the operator registry"}


def kernel_status(kernel: str) -> str:
    """Whether the runtime can bind `kernel` (e.g. "aten::add.out"): "ok" or why not."""
    return _KERNEL_STATUS[int(_library().et_cpu_runtime_kernel_status(kernel.encode()))]
