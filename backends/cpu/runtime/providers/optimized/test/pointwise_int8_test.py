"""Our int8 1x1 convolution (kernels/pointwise_int8.h) against a numpy integer reference, byte for
byte, through the C ABI (etdnn_pointwise_int8_run): every 1x1 layer of the MobileNetV2-shaped
example (s8 activations, as XNNPACK's quantizer gives them here), u8 activations, output channel
counts with and without a 16-lane tail and in every column grouping (4, 3, 2, 1 vectors: widths
of 3, 6 and 9 vectors go in groups of 3), pixel counts around each group's pixel block (6, 8,
12), the work pool's slicing (1, 3, 4 slices of 24-pixel blocks), ReLU / ReLU6 / no clamp, with
and without bias, zero points at the range ends; and what it declines (K not a multiple of 4, the
switch off). The kernel is on by default (ET_CPU_OWN_POINTWISE_INT8=0: off); the fixture sets
the switch to 1 all the same.

The reference is the header's arithmetic: the int32 sum of (x - input zero point) * w, exact;
float32 y = acc * (input_scale * weight_scale) + bias (two roundings), the clamp, rint (half to
even) of y * float32(1 / output_scale) plus the zero point, clipped to the quant range.
"""

from __future__ import annotations

import ctypes
import math
import os
from collections.abc import Iterator
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
SWITCH = "ET_CPU_OWN_POINTWISE_INT8"


@dataclass(frozen=True)
class Case:
    k: int
    n: int
    pixels: int
    signed: bool = True
    bias: bool = True
    clamp: tuple[float, float] = (-INF, INF)
    pieces: int = 1
    input_zero_point: int | None = None  # None: drawn
    output_zero_point: int | None = None


@pytest.fixture(scope="module")
def lib() -> Iterator[ctypes.CDLL]:
    # The kernel is opt-in (read at each call).
    saved = os.environ.get(SWITCH)
    os.environ[SWITCH] = "1"
    lib = ctypes.CDLL(library_path())
    vp = ctypes.c_void_p
    lib.etdnn_pointwise_int8_run.restype = ctypes.c_int
    lib.etdnn_pointwise_int8_run.argtypes = [vp] * 7 + [ctypes.c_int64] * 2
    lib.etdnn_last_error.restype = ctypes.c_char_p
    yield lib
    if saved is None:
        del os.environ[SWITCH]
    else:
        os.environ[SWITCH] = saved


Drawn = dict[str, np.ndarray | float | int]


def _draw(case: Case, seed: int) -> Drawn:
    rng = np.random.default_rng(seed)
    low, high = int8_range(case.signed)
    in_zp, out_zp = case.input_zero_point, case.output_zero_point
    return {
        "x": rng.integers(low, high + 1, size=(case.pixels, case.k)),
        "w": rng.integers(-127, 128, size=(case.n, case.k)),
        "ws": rng.uniform(0.002, 0.02, size=case.n).astype(np.float32),
        "bias": rng.normal(0.0, 1.0, size=case.n).astype(np.float32),
        "in_scale": float(np.float32(rng.uniform(0.01, 0.05))),
        "in_zp": int(rng.integers(low, high + 1)) if in_zp is None else in_zp,
        "out_scale": float(np.float32(rng.uniform(0.02, 0.2))),
        "out_zp": int(rng.integers(low, high + 1)) if out_zp is None else out_zp,
    }


def _reference(case: Case, d: Drawn) -> np.ndarray:
    x = np.asarray(d["x"], dtype=np.int64) - int(d["in_zp"])
    w = np.asarray(d["w"], dtype=np.int64)
    acc = x @ w.T
    assert np.abs(acc).max(initial=0) < 2**31
    scale = np.float32(d["in_scale"]) * np.asarray(d["ws"], dtype=np.float32)
    bias = np.asarray(d["bias"], dtype=np.float32) if case.bias else np.float32(0.0)
    y = acc.astype(np.float32) * scale
    y = (y + bias).astype(np.float32)
    low, high = case.clamp
    if math.isfinite(low):
        y = np.maximum(y, np.float32(low))
    if math.isfinite(high):
        y = np.minimum(y, np.float32(high))
    inverse = np.float32(1.0 / float(np.float32(d["out_scale"])))
    q = np.rint((y * inverse).astype(np.float32)).astype(np.int64) + int(d["out_zp"])
    qmin, qmax = int8_range(case.signed)
    return np.clip(q, qmin, qmax)


def _run(lib: ctypes.CDLL, case: Case, d: Drawn) -> np.ndarray | None:
    shape = np.array([case.k, case.n], dtype=np.int64)
    quant = int8_quant(
        [d["in_scale"], d["in_zp"], d["out_scale"], d["out_zp"]], case.signed, case.clamp
    )
    act = np.int8 if case.signed else np.uint8
    x = np.ascontiguousarray(np.asarray(d["x"]).astype(act))
    w = np.ascontiguousarray(np.asarray(d["w"]).astype(np.int8))
    ws = np.ascontiguousarray(d["ws"], dtype=np.float32)
    bias = np.ascontiguousarray(d["bias"], dtype=np.float32)
    out = np.zeros((case.pixels, case.n), dtype=act)
    status = lib.etdnn_pointwise_int8_run(
        shape.ctypes.data,
        quant.ctypes.data,
        w.ctypes.data,
        ws.ctypes.data,
        bias.ctypes.data if case.bias else None,
        x.ctypes.data,
        out.ctypes.data,
        case.pixels,
        case.pieces,
    )
    return int8_result(lib, status, out)


def _check(lib: ctypes.CDLL, case: Case, seed: int = 0) -> None:
    d = _draw(case, seed)
    got = _run(lib, case, d)
    if got is None:
        pytest.skip("no AVX-512 VNNI here: the kernel declines every shape")
    expected = _reference(case, d)
    mismatch = byte_mismatches(got, expected, case)
    assert mismatch is None, mismatch


RELU6 = (0.0, 6.0)
# The 1x1 layers of tools/lower/examples.py's MobileNetV2-shaped net at full size (pixels = H * W;
# the 112x112 ones cut to a quarter of the rows, as a pool band), ReLU6 after the expands.
MOBILENET_V2 = [
    Case(32, 32, 28 * 112, clamp=RELU6),
    Case(32, 16, 28 * 112),
    Case(16, 96, 28 * 112, clamp=RELU6, pieces=4),
    Case(96, 24, 56 * 56, pieces=4),
    Case(24, 144, 56 * 56, clamp=RELU6),
    Case(144, 24, 56 * 56),
    Case(144, 32, 28 * 28, pieces=3),
    Case(32, 192, 28 * 28, clamp=RELU6),
    Case(192, 32, 28 * 28),
    Case(192, 64, 14 * 14),
    Case(64, 384, 14 * 14, clamp=RELU6, pieces=4),
    Case(384, 64, 14 * 14),
    Case(384, 96, 14 * 14),
]

EDGES = [
    # Output tails: fewer than a vector, a vector plus a few, a block plus a tail.
    Case(4, 1, 7),
    Case(8, 17, 13),
    Case(12, 70, 11, pieces=3),
    Case(20, 200, 25),
    # Pixel counts around the 6-pixel block.
    Case(16, 48, 1),
    Case(16, 48, 5),
    Case(16, 48, 6),
    Case(16, 48, 7, pieces=2),
    # Column groups: 3 + 3 (96 channels), 4 + 3 (112), 4 + 1 with a tail (70), 3 + 3 + 3 with
    # a tail (140), 2 (32) and 1 (16) with their 8- and 12-pixel blocks, and the pixels around
    # them (and a slice edge inside a block's worth).
    Case(24, 96, 8),
    Case(24, 96, 17, pieces=3),
    Case(28, 112, 23),
    Case(36, 70, 13),
    Case(8, 140, 31, pieces=2),
    Case(52, 32, 11),
    Case(52, 32, 12),
    Case(52, 32, 25, pieces=2),
    Case(44, 16, 12),
    Case(44, 16, 37, pieces=3),
    # u8 activations, no bias, ReLU, a clamp narrower than the grid.
    Case(64, 80, 50, signed=False, clamp=RELU6),
    Case(40, 64, 30, signed=False, bias=False),
    Case(40, 64, 30, clamp=(0.0, INF)),
    Case(40, 64, 30, clamp=(-0.5, 0.25)),
    # Zero points at the range ends.
    Case(64, 64, 40, input_zero_point=-128, output_zero_point=127),
    Case(64, 64, 40, input_zero_point=127, output_zero_point=-128),
    Case(64, 64, 40, signed=False, input_zero_point=255, output_zero_point=0),
    Case(64, 64, 40, signed=False, input_zero_point=0, output_zero_point=255),
]


@pytest.mark.parametrize("case", MOBILENET_V2 + EDGES, ids=str)
def test_matches_the_integer_reference(lib: ctypes.CDLL, case: Case) -> None:
    _check(lib, case)


@pytest.mark.parametrize("seed", range(1, 4))
def test_drawn_inputs(lib: ctypes.CDLL, seed: int) -> None:
    _check(lib, Case(48, 136, 100, clamp=RELU6, pieces=seed), seed)


def test_declines_k_not_a_multiple_of_4_and_when_switched_off(lib: ctypes.CDLL) -> None:
    taken = Case(8, 16, 4)
    if _run(lib, taken, _draw(taken, 0)) is None:
        pytest.skip("no AVX-512 VNNI here")
    case = Case(6, 16, 4)
    assert _run(lib, case, _draw(case, 0)) is None
    os.environ[SWITCH] = "0"
    try:
        assert _run(lib, taken, _draw(taken, 0)) is None
    finally:
        os.environ[SWITCH] = "1"


def test_on_by_default(lib: ctypes.CDLL) -> None:
    taken = Case(8, 16, 4)
    del os.environ[SWITCH]
    try:
        got = _run(lib, taken, _draw(taken, 0))
    finally:
        os.environ[SWITCH] = "1"
    if got is None:
        assert _run(lib, taken, _draw(taken, 0)) is None, "declined only without the switch"
        pytest.skip("no AVX-512 VNNI here")
    mismatch = byte_mismatches(got, _reference(taken, _draw(taken, 0)), taken)
    assert mismatch is None, mismatch
