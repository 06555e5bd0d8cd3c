"""Whose code a crash is in: a native backtrace of the crashing case, replayed under gdb (or the
sanitizer's report), judged by the frame that faulted.

The faulting frame is the first one outside the C/C++ runtime (libc, libstdc++, libgcc: abort and
unwinding machinery). Verdicts:
- `ours`: it is in the CPU delegate's library (libcpu_backend.so, backends/cpu/runtime/), or in
  code without a library (oneDNN's JIT kernels) or in oneDNN, with our library below it on the
  stack: our runtime handed over what it should have refused;
- `executorch-via-ours`: in an ExecuTorch library, called from ours (e.g. the program's named
  data map answering our `get_data`): upstream code, reached through our runtime; read each one;
- `executorch`: in an ExecuTorch library with none of ours below (e.g. while parsing the
  program, before any delegate runs);
- `other`, or `unknown` when there is no backtrace.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess

_OURS = ("libcpu_backend", "backends/cpu/runtime/", "et_cpu_plugin::")
_EXECUTORCH = ("libexecutorch", "_portable_lib", "executorch/extension/pybindings")
_C_RUNTIME = (
    "libc.so",
    "libstdc++",
    "libgcc_s",
    "raise.c",
    "abort.c",
    "pthread_kill",
    "__pthread_kill",
    "__GI_raise",
    "__GI_abort",
    "__gxx_personality",
    "_Unwind_",
    "__cxa_",
    "std::terminate",
)
_ONEDNN = ("libdnnl", "dnnl::")
_FRAME = re.compile(r"^#(\d+)\s+(?:0x[0-9a-f]+ in )?(.*)$")  # gdb, and sanitizers' reports
# glibc's backtrace_symbols_fd (crash_backtrace.cc): "LIB(SYMBOL+0xOFF) [0xADDR]" or "[0xADDR]".
_GLIBC_FRAME = re.compile(
    r"^(?P<lib>[^()\[]*)(?:\((?P<symbol>[^+)]*)(?:\+0x[0-9a-f]+)?\))?\s*\[0x[0-9a-f]+\]$"
)
_GLIBC_HEADER = "pte_fuzz: fatal signal, native backtrace follows"
# Frames of the reporting machinery itself (the handler and the signal trampoline).
_REPORTER = ("libcrash_backtrace",)


@dataclasses.dataclass
class Attribution:
    verdict: str  # ours | executorch | other | unknown
    top_frames: list[str]
    where: str  # the first frame that decided the verdict

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def frames_of(text: str) -> list[str]:
    """The frame lines (#0 ...) of a gdb `bt` or a sanitizer report, in order."""
    if _GLIBC_HEADER in text:
        return _glibc_frames(text.split(_GLIBC_HEADER, 1)[1])
    frames = []
    for line in text.splitlines():
        match = _FRAME.match(line.strip())
        if match:
            frames.append(match.group(2).strip())
    return frames


def _glibc_frames(text: str) -> list[str]:
    frames: list[str] = []
    for line in text.splitlines():
        match = _GLIBC_FRAME.match(line.strip())
        if not match:
            continue
        lib, symbol = match.group("lib").strip(), match.group("symbol") or ""
        if _is(lib, _REPORTER) or (not frames and "libc.so" in lib and not symbol):
            continue  # the handler, then the signal trampoline in libc
        frames.append(f"{symbol or '??'} () from {lib}" if lib else "?? ()")
    return frames


def _is(frame: str, marks: tuple[str, ...]) -> bool:
    return any(mark in frame for mark in marks)


def judge(frames: list[str]) -> Attribution:
    top = [_short(f) for f in frames[:12]]
    if not frames:
        return Attribution("unknown", top, "")
    start = next((i for i, f in enumerate(frames) if not _is(f, _C_RUNTIME)), 0)
    fault = frames[start]
    ours_below = any(_is(f, _OURS) for f in frames[start:])
    if _is(fault, _OURS):
        verdict = "ours"
    elif _is(fault, _EXECUTORCH):
        verdict = "executorch-via-ours" if ours_below else "executorch"
    elif ours_below and (
        _is(fault, _ONEDNN) or (fault.startswith("?? ()") and " from " not in fault)
    ):
        verdict = "ours"
    elif ours_below:
        verdict = "other-via-ours"
    else:
        verdict = "other"
    return Attribution(verdict, top, _short(fault))


def _short(frame: str) -> str:
    """A frame without its argument values (they make lines long and differ run to run)."""
    frame = re.sub(r"\(([^()]|\([^()]*\))*\)", "()", frame, count=1)
    return frame[:240]


def backtrace(command: list[str], env: dict[str, str], timeout_s: float) -> str:
    """gdb's backtrace of `command` at its first fatal signal ("" if gdb did not stop)."""
    gdb = [
        "gdb",
        "-batch",
        "-nx",
        "-iex",
        "set debuginfod enabled off",
        "-ex",
        "set pagination off",
        # Python's own and oneDNN's handled signals are not what we are after.
        "-ex",
        "handle SIGALRM SIGCHLD SIGPIPE nostop noprint pass",
        "-ex",
        "run",
        "-ex",
        "bt 40",
        "--args",
        *command,
    ]
    try:
        result = subprocess.run(
            gdb, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(gdb failed: {exc})"
    return result.stdout
