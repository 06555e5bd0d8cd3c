"""Our one-pass int8 add (kernels/quantized_add.h) against a numpy float32 reference of its
arithmetic, byte for byte, through the C ABI (etdnn_quantized_add_run): the sizes of the
MobileNetV2-shaped example's residual adds, lengths around the 16- and 64-element steps (the
masked tail), the work pool's slicing (1, 3 and 4 slices give the same bytes), u8 and s8, no clamp,
ReLU and ReLU6, extreme zero points, and grids whose sums land exactly on half steps (round half to
even).

The reference is what the chunked q/dq loops it replaces compute (quantize_convert.h, the
portable kernels' arithmetic): float32 (q - zero point) * scale for each operand, their float32
sum, the clamp, rint(y * float32(1 / output scale)) + output zero point, clipped to the range.
The end-to-end check against the undelegated program's float ops is
//backends/cpu/runtime:int8_island_test.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

import numpy as np
import pytest

from backends.cpu.runtime.providers.optimized.test.int8_ctypes import (
    byte_mismatches,
    int8_quant,
    int8_range,
    int8_result,
)
from backends.cpu.runtime.providers.optimized.test.onednn_ctypes import library_path

INF = math.inf


@dataclass(frozen=True)
class Case:
    count: int
    signed: bool = True
    clamp: tuple[float, float] = (-INF, INF)
    pieces: int = 1
    scales: tuple[float, float, float] | None = None  # a, b, output; None: drawn
    zero_points: tuple[int, int, int] | None = None  # None: drawn


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(library_path())
    lib.etdnn_quantized_add_run.restype = ctypes.c_int
    lib.etdnn_quantized_add_run.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 2
    lib.etdnn_last_error.restype = ctypes.c_char_p
    return lib


Drawn = dict[str, np.ndarray | tuple[float, ...] | tuple[int, ...]]


def _draw(case: Case, seed: int) -> Drawn:
    rng = np.random.default_rng(seed)
    low, high = int8_range(case.signed)
    act = np.int8 if case.signed else np.uint8
    scales = case.scales or tuple(float(np.float32(s)) for s in rng.uniform(0.005, 0.08, size=3))
    zero_points = case.zero_points or tuple(int(z) for z in rng.integers(low, high + 1, size=3))
    return {
        "a": rng.integers(low, high + 1, size=case.count).astype(act),
        "b": rng.integers(low, high + 1, size=case.count).astype(act),
        "scales": scales,
        "zero_points": zero_points,
    }


def _reference(case: Case, d: Drawn) -> np.ndarray:
    sa, sb, so = (np.float32(s) for s in d["scales"])
    za, zb, zo = d["zero_points"]
    a = (np.asarray(d["a"]).astype(np.int32) - za).astype(np.float32) * sa
    b = (np.asarray(d["b"]).astype(np.int32) - zb).astype(np.float32) * sb
    y = (a + b).astype(np.float32)
    low, high = case.clamp
    if math.isfinite(low):
        y = np.maximum(y, np.float32(low))
    if math.isfinite(high):
        y = np.minimum(y, np.float32(high))
    inverse = np.float32(1.0) / so
    q = np.rint((y * inverse).astype(np.float32)).astype(np.int64) + int(zo)
    qmin, qmax = int8_range(case.signed)
    return np.clip(q, qmin, qmax)


def _run(lib: ctypes.CDLL, case: Case, d: Drawn) -> np.ndarray | None:
    sa, sb, so = d["scales"]
    za, zb, zo = d["zero_points"]
    quant = int8_quant([sa, za, sb, zb, so, zo], case.signed, case.clamp)
    a = np.ascontiguousarray(d["a"])
    b = np.ascontiguousarray(d["b"])
    out = np.zeros(case.count, dtype=a.dtype)
    status = lib.etdnn_quantized_add_run(
        quant.ctypes.data, a.ctypes.data, b.ctypes.data, out.ctypes.data, case.count, case.pieces
    )
    return int8_result(lib, status, out)


def _check(lib: ctypes.CDLL, case: Case, seed: int = 0) -> None:
    d = _draw(case, seed)
    got = _run(lib, case, d)
    if got is None:
        pytest.skip("no AVX-512 BW here: the int8 add runs on the q/dq loops")
    expected = _reference(case, d)
    mismatch = byte_mismatches(got, expected, case)
    assert mismatch is None, mismatch


# The residual adds of tools/lower/examples.py's MobileNetV2-shaped net (H * W * C), split as the
# work pool of 2 threads splits them (4 slices) and whole.
MOBILENET_V2 = [
    Case(56 * 56 * 24, pieces=4),
    Case(28 * 28 * 32, pieces=3),
    Case(14 * 14 * 64),
    Case(14 * 14 * 96, signed=False),
    Case(56 * 56 * 24, signed=False),
]

EDGES = [
    Case(1),
    Case(15),
    Case(16),
    Case(17, signed=False),
    Case(63),
    Case(64, signed=False),
    Case(65),
    Case(1000, pieces=3),
    Case(4099, pieces=4, signed=False),
    # Clamps: ReLU, ReLU6, a clamp narrower than the output grid's range.
    Case(3001, clamp=(0.0, INF)),
    Case(3001, clamp=(0.0, 6.0), signed=False),
    Case(3001, clamp=(-0.5, 0.75)),
    # Extreme zero points.
    Case(2050, zero_points=(-128, 127, -128)),
    Case(2050, zero_points=(255, 0, 255), signed=False),
    Case(2050, zero_points=(0, 255, 0), signed=False, clamp=(0.0, INF)),
    # Exact half steps: sums on multiples of 0.25 requantized to a step of 0.5 or 1 (ties to even).
    Case(5000, scales=(0.5, 0.25, 1.0)),
    Case(5000, scales=(0.25, 0.25, 0.5), signed=False),
    Case(5000, scales=(0.125, 0.5, 0.25), zero_points=(3, -7, 0)),
]


@pytest.mark.parametrize("case", MOBILENET_V2 + EDGES, ids=str)
def test_int8_add_matches_the_reference(lib: ctypes.CDLL, case: Case) -> None:
    _check(lib, case)


@pytest.mark.parametrize("seed", range(1, 6))
def test_drawn_grids(lib: ctypes.CDLL, seed: int) -> None:
    rng = np.random.default_rng(seed)
    signed = bool(seed % 2)
    clamp = [(-INF, INF), (0.0, INF), (0.0, 6.0)][seed % 3]
    _check(lib, Case(int(rng.integers(1, 20000)), signed=signed, clamp=clamp, pieces=seed), seed)


def test_ties_round_to_even(lib: ctypes.CDLL) -> None:
    """The tie grid really produces halves, and they go to the even neighbour."""
    case = Case(4, scales=(0.5, 0.5, 1.0), zero_points=(0, 0, 0))
    d: Drawn = {
        "a": np.array([1, 3, -1, -3], dtype=np.int8),
        "b": np.array([0, 0, 0, 0], dtype=np.int8),
        "scales": case.scales or (),
        "zero_points": case.zero_points or (),
    }
    got = _run(lib, case, d)
    if got is None:
        pytest.skip("no AVX-512 BW here")
    assert got.tolist() == [0, 2, 0, -2]
