"""What the int8 kernel tests share (depthwise_int8_test, pointwise_int8_test,
quantized_add_test): the value range of u8 / s8, the float64 quantization array the
`etdnn_*_int8_run` / `etdnn_quantized_add_run` entry points of the C ABI (onednn_c_api.h) read,
their status codes, and the byte-for-byte comparison with a numpy integer reference.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

# The C ABI's int8 entry points return 0 (ran), 1 (failed: etdnn_last_error says why) or 2 (the
# kernel declines the case on this CPU).
_FAILED = 1
_DECLINED = 2


def int8_range(signed: bool) -> tuple[int, int]:
    """The values of s8 (signed) or u8."""
    return (-128, 127) if signed else (0, 255)


def int8_quant(
    scales_and_zero_points: Sequence[np.ndarray | float | int],
    signed: bool,
    clamp: tuple[float, float],
) -> np.ndarray:
    """The quantization array the entry points read: the operands' and the output's scales and
    zero points (in the entry point's order; scalars or 0-d arrays), the output's range, the
    clamp, and 1 for s8."""
    qmin, qmax = int8_range(signed)
    values = [float(np.asarray(v)) for v in scales_and_zero_points]
    return np.array([*values, qmin, qmax, *clamp, 1.0 if signed else 0.0], dtype=np.float64)


def int8_result(lib: ctypes.CDLL, status: int, out: np.ndarray) -> np.ndarray | None:
    """`out` as int64 when the call ran; None when the kernel declined the case on this CPU;
    raises with the library's message when the call failed."""
    if status == _FAILED:
        raise RuntimeError(lib.etdnn_last_error().decode())
    if status == _DECLINED:
        return None
    return out.astype(np.int64)


def byte_mismatches(got: np.ndarray, expected: np.ndarray, what: object) -> str | None:
    """None when every byte equals the reference's, else what differs and where."""
    differ = got != expected
    count = int(differ.sum())
    if count == 0:
        return None
    first = tuple(int(i) for i in np.argwhere(differ)[0])
    return (
        f"{what}: {count} of {expected.size} bytes differ (first at {first}: "
        f"{int(got[first])} vs {int(expected[first])})"
    )
