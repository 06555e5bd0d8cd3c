"""Our int8 depthwise convolution (kernels/depthwise_int8.h) against a numpy integer reference,
byte for byte, through the C ABI (etdnn_depthwise_int8_run): every depthwise layer of the
MobileNetV2-shaped example (u8 activations, as XNNPACK's quantizer gives them), s8 activations,
channel counts with and without a 32-lane tail, odd sizes narrower than a register block,
padding 0-2, stride 1 and 2 (and a row stride the column stride does not share), 5x5 kernels,
ReLU / ReLU6 / no clamp, with and without bias, extreme zero points; and the shapes it declines.

The reference is the header's arithmetic: the int32 sum of (x - input zero point) * w, exact;
float32 y = acc * (input_scale * weight_scale) + bias (two roundings), the clamp, rint (half to
even) of y * float32(1 / output_scale) plus the zero point, clipped to the quant range.
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
    channels: int
    size: tuple[int, int]  # input (H, W)
    kernel: int = 3
    stride: tuple[int, int] = (1, 1)
    padding: int = 1
    signed: bool = False
    bias: bool = True
    clamp: tuple[float, float] = (0.0, 6.0)  # ReLU6, as MobileNetV2 fuses it
    input_zero_point: int | None = None  # None: drawn
    output_zero_point: int | None = None


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(library_path())
    vp = ctypes.c_void_p
    lib.etdnn_depthwise_int8_run.restype = ctypes.c_int
    lib.etdnn_depthwise_int8_run.argtypes = [vp] * 7
    lib.etdnn_last_error.restype = ctypes.c_char_p
    return lib


def _output_size(case: Case) -> tuple[int, int]:
    (h, w), k, p = case.size, case.kernel, case.padding
    return (h + 2 * p - k) // case.stride[0] + 1, (w + 2 * p - k) // case.stride[1] + 1


def _draw(case: Case, seed: int) -> dict[str, np.ndarray | float | int]:
    rng = np.random.default_rng(seed)
    low, high = int8_range(case.signed)
    in_zp = case.input_zero_point
    out_zp = case.output_zero_point
    return {
        "x": rng.integers(low, high + 1, size=(*case.size, case.channels)),
        "w": rng.integers(-127, 128, size=(case.channels, case.kernel, case.kernel)),
        "ws": rng.uniform(0.002, 0.02, size=case.channels).astype(np.float32),
        "bias": rng.normal(0.0, 1.0, size=case.channels).astype(np.float32),
        "in_scale": float(np.float32(rng.uniform(0.01, 0.05))),
        "in_zp": int(rng.integers(low, high + 1)) if in_zp is None else in_zp,
        "out_scale": float(np.float32(rng.uniform(0.01, 0.05))),
        "out_zp": int(rng.integers(low, high + 1)) if out_zp is None else out_zp,
    }


def _reference(case: Case, d: dict[str, np.ndarray | float | int]) -> np.ndarray:
    x = np.asarray(d["x"], dtype=np.int64)
    w = np.asarray(d["w"], dtype=np.int64)
    k, p = case.kernel, case.padding
    out_h, out_w = _output_size(case)
    sh, sw = case.stride
    # Padding is the input zero point: it contributes exactly 0 once the zero point is taken off.
    padded = np.pad(x - int(d["in_zp"]), ((p, p + k), (p, p + k), (0, 0)))
    acc = np.zeros((out_h, out_w, case.channels), dtype=np.int64)
    for ky in range(k):
        for kx in range(k):
            window = padded[ky : ky + sh * out_h : sh, kx : kx + sw * out_w : sw]
            acc += window[:out_h, :out_w] * w[:, ky, kx]
    assert np.abs(acc).max(initial=0) < 2**24  # exact in float32 and int32
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
    q = np.rint(y * inverse).astype(np.int64) + int(d["out_zp"])
    qmin, qmax = int8_range(case.signed)
    return np.clip(q, qmin, qmax)


def _run(lib: ctypes.CDLL, case: Case, d: dict[str, np.ndarray | float | int]) -> np.ndarray | None:
    out_h, out_w = _output_size(case)
    geometry = np.array(
        [
            case.channels,
            *case.size,
            out_h,
            out_w,
            case.kernel,
            *case.stride,
            case.padding,
            case.padding,
        ],
        dtype=np.int64,
    )
    quant = int8_quant(
        [d["in_scale"], d["in_zp"], d["out_scale"], d["out_zp"]], case.signed, case.clamp
    )
    act = np.int8 if case.signed else np.uint8
    x = np.ascontiguousarray(np.asarray(d["x"]).astype(act))
    w = np.ascontiguousarray(np.asarray(d["w"]).astype(np.int8))
    ws = np.ascontiguousarray(d["ws"], dtype=np.float32)
    bias = np.ascontiguousarray(d["bias"], dtype=np.float32)
    out = np.zeros((out_h, out_w, case.channels), dtype=act)
    status = lib.etdnn_depthwise_int8_run(
        geometry.ctypes.data,
        quant.ctypes.data,
        w.ctypes.data,
        ws.ctypes.data,
        bias.ctypes.data if case.bias else None,
        x.ctypes.data,
        out.ctypes.data,
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


# The depthwise layers of tools/lower/examples.py's MobileNetV2-shaped net at full size.
MOBILENET_V2 = [
    Case(32, (112, 112)),
    Case(96, (112, 112), stride=(2, 2)),
    Case(144, (56, 56)),
    Case(144, (56, 56), stride=(2, 2)),
    Case(192, (28, 28)),
    Case(192, (28, 28), stride=(2, 2)),
    Case(384, (14, 14)),
]


@pytest.mark.parametrize("case", MOBILENET_V2, ids=str)
def test_mobilenet_v2_layers(lib: ctypes.CDLL, case: Case) -> None:
    _check(lib, case)


EDGES = [
    # Channel tails: fewer than a group, a group plus a few, odd counts.
    Case(1, (5, 7)),
    Case(7, (9, 4)),
    Case(33, (6, 13)),
    Case(47, (11, 11), stride=(2, 2)),
    Case(100, (3, 3)),
    # Sizes narrower than a register block, a single pixel, the 8 / 4 / 2 / 1 block mix.
    Case(16, (1, 1)),
    Case(40, (2, 15)),
    Case(24, (15, 2)),
    # Padding 0 and 2, row and column strides that differ, 5x5 kernels.
    Case(48, (9, 10), padding=0),
    Case(48, (9, 10), padding=2),
    Case(40, (13, 17), stride=(2, 1)),
    Case(40, (13, 17), stride=(1, 2)),
    Case(72, (14, 14), kernel=5, padding=2),
    Case(72, (15, 15), kernel=5, stride=(2, 2), padding=2),
    Case(20, (7, 9), kernel=5, padding=1),
    # s8 activations, no clamp, ReLU, no bias.
    Case(96, (10, 12), signed=True),
    Case(33, (7, 7), signed=True, stride=(2, 2), clamp=(-INF, INF)),
    Case(64, (9, 9), clamp=(0.0, INF), bias=False),
    Case(30, (8, 8), signed=True, kernel=5, padding=2, clamp=(-1.0, 1.0)),
    # Zero points at the ends of the range: padding must still read as 0.
    Case(32, (6, 6), input_zero_point=255, output_zero_point=0),
    Case(32, (6, 6), input_zero_point=0, output_zero_point=255, clamp=(-INF, INF)),
    Case(35, (5, 6), signed=True, input_zero_point=-128, output_zero_point=127),
]


@pytest.mark.parametrize("case", EDGES, ids=str)
def test_edge_cases(lib: ctypes.CDLL, case: Case) -> None:
    for seed in range(2):
        _check(lib, case, seed)


def test_rounding_ties_go_to_even(lib: ctypes.CDLL) -> None:
    """Unit scales and integer sums put y / output_scale on x.5 often: half to even, like rint."""
    case = Case(32, (6, 6), bias=False, clamp=(-INF, INF), input_zero_point=0)
    d = _draw(case, 3)
    d.update(ws=np.full(32, 0.5, dtype=np.float32), in_scale=1.0, out_scale=1.0)
    got = _run(lib, case, d)
    if got is None:
        pytest.skip("no AVX-512 VNNI here")
    np.testing.assert_array_equal(got, _reference(case, d))


@pytest.mark.parametrize(
    "case",
    [
        Case(16, (8, 8), kernel=7, padding=3),
        Case(16, (8, 8), stride=(1, 3)),
        Case(16, (8, 8), kernel=1, padding=0),
    ],
    ids=str,
)
def test_declines_other_kernels_and_strides(lib: ctypes.CDLL, case: Case) -> None:
    assert _run(lib, case, _draw(case, 0)) is None
