"""Runs each mutated `.pte` in a forked child of one warm process and classifies how it ended.

The parent imports ExecuTorch's runtime and registers the CPU delegate once; every case is then a
`fork()` (copy-on-write, milliseconds) instead of a fresh interpreter (tens of seconds of imports
on a loaded machine). The child loads the bytes with `_load_for_executorch_from_buffer`, builds
inputs of the shapes the method declares and runs `forward`; it reports through a pipe. The parent
must not have run an OpenMP parallel region before forking (GNU libgomp does not survive fork),
so it never runs a program itself and pins torch and oneDNN to one thread.

Outcomes: `ran`; `error` (the runtime refused the file: an exception, message kept); `crash`
(killed by a signal: SIGSEGV, SIGBUS, SIGABRT from an abort or a sanitizer, ...); `timeout`
(still running after the time limit); `skipped` (the method declares an input too large to make).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
from typing import Any

# Bytes of one declared input the child will allocate at most; beyond it the case is skipped.
MAX_INPUT_BYTES = 1 << 26
_EXIT_RAN = 0
_EXIT_ERROR = 3
_EXIT_SKIPPED = 4
_EXIT_CHILD_BUG = 5


@dataclasses.dataclass
class Outcome:
    status: str  # ran | error | crash | timeout | skipped
    stage: str = ""  # where the child was: load, meta, inputs, forward
    message: str = ""  # the exception's first line, or the signal's name
    cpu_error: str = ""  # the CPU runtime's last error (loader.last_error()), if any
    stderr_tail: str = ""  # the child's last stderr lines (sanitizer reports), for crashes

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def prepare_parent(threads: int = 1) -> str:
    """Imports the runtime and registers the CPU delegate, single-threaded (call before torch is
    imported for the first time, so the thread settings hold); returns the library's path."""
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    os.environ.setdefault("ET_CPU_ONEDNN_THREADS", str(threads))
    import torch
    from executorch.extension.pybindings import portable_lib  # noqa: F401

    from backends.cpu.runtime import loader

    torch.set_num_threads(threads)
    library = loader.load_cpu_backend()
    if "asan" not in os.environ.get("LD_PRELOAD", ""):
        _install_crash_backtrace()  # a sanitizer prints its own report
    return library


def _install_crash_backtrace() -> None:
    """Native backtraces on fatal signals, inherited by every forked child (crash_backtrace.cc)."""
    import ctypes

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libcrash_backtrace.so")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} is missing: build //tools/pte_fuzz:libcrash_backtrace.so")
    if ctypes.CDLL(path).pte_fuzz_install_crash_backtrace() != 0:
        raise OSError("pte_fuzz: installing the crash backtrace handlers failed")


def _input_for(meta: Any, sample: Any) -> Any:
    """A tensor of the declared shape and dtype: the sample when it fits, else seeded data."""
    import torch

    sizes = tuple(int(s) for s in meta.sizes())
    dtype = _TORCH_DTYPES.get(int(meta.dtype()))
    if dtype is None:
        raise ValueError(f"declared input dtype {int(meta.dtype())} has no torch dtype here")
    if sample is not None and tuple(sample.shape) == sizes and sample.dtype == dtype:
        return sample
    count = 1
    for size in sizes:
        count *= max(size, 0)
    if count * torch.empty((), dtype=dtype).element_size() > MAX_INPUT_BYTES:
        raise OverflowError(f"declared input of shape {list(sizes)} is too large to make")
    if dtype.is_floating_point:
        return torch.randn(sizes, generator=torch.Generator().manual_seed(0)).to(dtype)
    return torch.zeros(sizes, dtype=dtype)  # zeros are in range for any index input


# ExecuTorch ScalarType numbers (c10's) of the dtypes an input may have.
_TORCH_DTYPES: dict[int, Any] = {}


def _fill_dtypes() -> None:
    import torch

    numbers = {0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64}
    numbers.update({5: torch.float16, 6: torch.float32, 7: torch.float64, 11: torch.bool})
    numbers[15] = torch.bfloat16
    _TORCH_DTYPES.update(numbers)


def _child(data: bytes, samples: tuple[Any, ...], write_fd: int, verify: bool) -> int:
    from executorch.extension.pybindings import portable_lib

    from backends.cpu.runtime import loader
    from tools.lower.runtime_check import verify_program

    stage = "verify" if verify else "load"
    report: dict[str, str] = {}
    try:
        if verify:
            verify_program(data)
            stage = "load"
        module = portable_lib._load_for_executorch_from_buffer(data)
        stage = "meta"
        meta = module.method_meta("forward")
        stage = "inputs"
        _fill_dtypes()
        inputs = [
            _input_for(meta.input_tensor_meta(i), samples[i] if i < len(samples) else None)
            for i in range(meta.num_inputs())
        ]
        stage = "forward"
        module.forward(inputs)
        code = _EXIT_RAN
    except OverflowError as exc:
        report["message"] = str(exc)
        code = _EXIT_SKIPPED
    except Exception as exc:  # the runtime refused the file: a clean error
        first_line = (str(exc).strip().splitlines() or [""])[0]
        report["message"] = f"{type(exc).__name__}: {first_line}"
        code = _EXIT_ERROR
    report["stage"] = stage
    report["cpu_error"] = loader.last_error()
    os.write(write_fd, json.dumps(report).encode())
    return code


def run_case(
    data: bytes,
    samples: tuple[Any, ...],
    timeout_s: float,
    stderr_path: str,
    verify: bool = False,
) -> Outcome:
    """Runs one file in a forked child; the child's stderr goes to `stderr_path`. With `verify`,
    the child runs ExecuTorch's program verifier first, as tools/lower and tools/runner do."""
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = _EXIT_CHILD_BUG
        try:
            os.close(read_fd)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            log = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(log, 2)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.setitimer(signal.ITIMER_REAL, timeout_s)
            code = _child(data, samples, write_fd, verify)
        finally:
            os._exit(code)
    os.close(write_fd)
    chunks = []
    while chunk := os.read(read_fd, 65536):
        chunks.append(chunk)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    report = json.loads(b"".join(chunks) or b"{}")
    outcome = Outcome(
        status="",
        stage=report.get("stage", ""),
        message=report.get("message", ""),
        cpu_error=report.get("cpu_error", ""),
    )
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        outcome.status = "timeout" if sig == signal.SIGALRM else "crash"
        outcome.message = signal.Signals(sig).name
    else:
        code = os.WEXITSTATUS(status)
        outcome.status = {_EXIT_RAN: "ran", _EXIT_ERROR: "error", _EXIT_SKIPPED: "skipped"}.get(
            code, "crash"
        )
        if outcome.status == "crash":
            # A sanitizer reports and exits (ASAN_OPTIONS exitcode): a crash all the same.
            outcome.message = f"exit code {code}"
    if outcome.status == "crash":
        outcome.stderr_tail = _tail(stderr_path)
    return outcome


def _tail(path: str, lines: int = 120) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError:
        return ""
