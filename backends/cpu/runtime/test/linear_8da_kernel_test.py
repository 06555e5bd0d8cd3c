"""The Optimized provider's `et_cpu_quant::linear_8da` kernel (providers/optimized/kernels/
linear_8da_vnni.cc) against the Reference provider's scalar kernel (runtime/linear_8da.cc) on the
same lowered program: many shapes (K from 32 to past 4096, N not a multiple of 16, 1-17, 33, 37,
128 and 197 rows), group sizes 32 / 64 / 128 / per channel, 4- and 8-bit weights with and without
zero points and bias, inputs with constant, zero, huge and tiny rows; once per instruction set
this CPU runs (ET_CPU_LINEAR_8DA_ISA caps it), and on AVX-512 VNNI once per many-row tile shape
(ET_CPU_LINEAR_8DA_TILE), and on its one-row path once per decode option
(ET_CPU_LINEAR_8DA_GEMV, ET_CPU_LINEAR_8DA_PREFETCH). The integer products are exact and the
float steps are the reference's, in its order: the outputs must be equal."""

import ctypes
import gc
from typing import Any

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.extension.pybindings import portable_lib
from torch import nn
from torch.export import Dim
from torchao.quantization import quantize_
from torchao.quantization.granularity import PerAxis, PerGroup
from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig
from torchao.quantization.quant_primitives import MappingType

from backends.cpu import symbolic_dims
from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import lower_cases
from backends.cpu.runtime.test.provider_compare import run_pte

KERNEL = "et_cpu_quant::linear_8da.out"
INT4: torch.dtype = torch.int4  # type: ignore[attr-defined]


def _cpu_has(feature: str) -> bool:
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("flags"):
                return feature in line.split()
    return False


# The paths this CPU runs, best first: the kernel's implementation name and the cap that forces it.
ISAS = [
    name
    for name, flags in (
        ("avx512_vnni", ("avx512f", "avx512bw", "avx512vl", "avx512_vnni")),
        ("avx2", ("avx2", "fma")),
    )
    if all(_cpu_has(flag) for flag in flags)
]


def _model(k: int, n: int, group: int, bits: int, zero_points: bool, bias: bool) -> nn.Module:
    model = nn.Linear(k, n, bias=bias)
    with torch.no_grad():
        model.weight.mul_(torch.linspace(0.2, 3.0, k))  # uneven groups
        if bias:
            model.bias.normal_()
    granularity: Any = PerAxis(0) if group == k else PerGroup(group)
    config = Int8DynamicActivationIntxWeightConfig(
        weight_dtype=INT4 if bits == 4 else torch.int8,
        weight_granularity=granularity,
        weight_mapping_type=MappingType.ASYMMETRIC if zero_points else MappingType.SYMMETRIC,
    )
    quantize_(model, config)
    return model.eval()


def _input(rows: int, k: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k, generator=generator)
    special = [
        torch.zeros(k),  # all zero: the scale is eps
        torch.full((k,), 2.5),  # constant positive
        torch.full((k,), -0.75),  # constant negative
        torch.randn(k, generator=generator) * 1e4,  # large range
        torch.randn(k, generator=generator) * 1e-30,  # below eps * 255
        torch.rand(k, generator=generator) + 1.0,  # all positive: zero point -128
        -torch.rand(k, generator=generator) * 7.0,  # all negative: zero point 127
    ]
    for row, values in zip(range(1, rows, 2), special, strict=False):
        x[row] = values
    return x


# (K, N, group, bits, zero points, bias, rows): every group kind and bit width, N not a multiple
# of 16, row counts that leave partial row tiles, K past 4096.
CASES = [
    (32, 17, 32, 4, False, True, 1),
    (64, 33, 32, 4, True, False, 2),
    (96, 40, 32, 4, False, False, 5),
    (96, 5, 96, 4, True, True, 3),
    (256, 96, 64, 4, False, True, 37),
    (256, 50, 128, 4, True, True, 9),
    (256, 130, 256, 4, False, False, 1),
    (4128, 72, 32, 4, False, True, 1),
    (4128, 24, 4128, 4, True, False, 6),
    (4096, 40, 128, 4, True, True, 4),
    # One row (decode) with weight zero points, 4 bits: N leaving 1-3 single blocks after the
    # chunks of 4 blocks, 2048 x 200 with its groups of 64 (not unrolled).
    (64, 70, 32, 4, True, True, 1),
    (2048, 200, 64, 4, True, False, 1),
    (1024, 112, 32, 4, False, False, 1),
    (32, 17, 32, 8, False, True, 1),
    (64, 33, 64, 8, True, False, 7),
    (96, 40, 96, 8, False, True, 13),
    (256, 100, 128, 8, True, True, 37),
    (4128, 24, 32, 8, True, False, 1),
    (128, 64, 32, 8, False, False, 2),
    # The many-row path (8 rows and more on AVX-512 VNNI): every row count up to 17 (partial row
    # tiles of every height), 33, 128, 197; N leaving a partial chunk of blocks and a partial
    # block; weights unpacked once per chunk (4 bits) or read as packed (8 bits).
    (64, 40, 32, 4, False, True, 8),
    (128, 72, 32, 4, True, False, 10),
    (96, 200, 32, 4, False, True, 11),
    (256, 56, 64, 4, False, False, 12),
    (64, 24, 64, 4, True, True, 14),
    (160, 88, 32, 4, False, True, 15),
    (96, 130, 96, 4, True, False, 16),
    (2080, 40, 32, 4, False, True, 17),
    (256, 104, 32, 4, False, False, 33),
    (512, 130, 32, 4, False, True, 128),
    (320, 88, 32, 4, True, True, 197),
    (128, 72, 32, 8, False, True, 8),
    (96, 56, 32, 8, True, False, 17),
    (64, 136, 64, 8, False, True, 33),
]

# The many-row tile shapes (rows x blocks) besides the default that the VNNI path is checked
# with (ET_CPU_LINEAR_8DA_TILE).
GEMM_TILES = ["1x1", "3x3", "4x2", "5x4", "7x1", "8x2", "8x4"]


def _lowered() -> Any:
    cases = [
        (_model(k, n, group, bits, zp, bias), (_input(rows, k, seed),))
        for seed, (k, n, group, bits, zp, bias, rows) in enumerate(CASES)
    ]
    return lower_cases(cases)


@pytest.fixture(scope="module")
def lowered() -> Any:
    torch.manual_seed(0)
    return _lowered()


def _on_optimized(placement: list[str]) -> int:
    return sum(1 for line in placement if f" {KERNEL}: Optimized" in line)


def _summary_count(placement: list[str], isa: str) -> int:
    """How many kernels the Optimized session's summary line says run on linear_8da:`isa`."""
    for line in placement:
        if line.startswith("Optimized(") and f" linear_8da:{isa}" in line:
            return int(line.split(f" linear_8da:{isa}")[0].rsplit(" ", 1)[-1])
    return 0


def _run(lowered: Any, isa: str | None, monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    if isa is None:
        monkeypatch.delenv("ET_CPU_LINEAR_8DA_ISA", raising=False)
    else:
        monkeypatch.setenv("ET_CPU_LINEAR_8DA_ISA", isa)
    return run_pte(lowered.pte, lowered.inputs, reference_only=False)


@pytest.mark.skipif(not ISAS, reason="this CPU has neither AVX2 nor AVX-512 VNNI")
@pytest.mark.parametrize("isa", ISAS)
def test_fast_kernel_equals_the_scalar_reference(
    lowered: Any, isa: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = run_pte(lowered.pte, lowered.inputs, reference_only=True)
    fast = _run(lowered, isa, monkeypatch)
    placement = loader.last_placement()
    assert _on_optimized(placement) == len(CASES), placement
    assert _summary_count(placement, isa) == len(CASES), placement
    for case, (got, want, expected) in enumerate(
        zip(fast, reference, lowered.expected, strict=True)
    ):
        assert torch.isfinite(got).all(), CASES[case]
        # Same integers, same float operations in the same order: equal, not just close.
        assert torch.equal(got, want), (CASES[case], float((got - want).abs().max()))
        # And torchao's eager model agrees up to float32 rounding over K.
        scale = max(1.0, float(expected.abs().max()))
        torch.testing.assert_close(got, expected, atol=1e-4 * scale, rtol=1e-4)


@pytest.mark.skipif("avx512_vnni" not in ISAS, reason="this CPU has no AVX-512 VNNI")
@pytest.mark.parametrize("tile", GEMM_TILES)
def test_every_many_row_tile_equals_the_scalar_reference(
    lowered: Any, tile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = run_pte(lowered.pte, lowered.inputs, reference_only=True)
    monkeypatch.setenv("ET_CPU_LINEAR_8DA_TILE", tile)
    fast = _run(lowered, "avx512_vnni", monkeypatch)
    for case, (got, want) in enumerate(zip(fast, reference, strict=True)):
        assert torch.equal(got, want), (tile, CASES[case], float((got - want).abs().max()))


# The one-row path's options on AVX-512 VNNI (Linear8daDecodeOptions): the general tile instead
# of the decode kernel, and software prefetch distances (none, one line, past a group's weights).
DECODE_OPTIONS = [
    {"ET_CPU_LINEAR_8DA_GEMV": "0"},
    {"ET_CPU_LINEAR_8DA_PREFETCH": "0"},
    {"ET_CPU_LINEAR_8DA_PREFETCH": "64"},
    {"ET_CPU_LINEAR_8DA_PREFETCH": "4096"},
]


@pytest.mark.skipif("avx512_vnni" not in ISAS, reason="this CPU has no AVX-512 VNNI")
@pytest.mark.parametrize(
    "options", DECODE_OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items())
)
def test_decode_options_equal_the_scalar_reference(
    lowered: Any, options: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = run_pte(lowered.pte, lowered.inputs, reference_only=True)
    for name, value in options.items():
        monkeypatch.setenv(name, value)
    fast = _run(lowered, "avx512_vnni", monkeypatch)
    for case, (got, want) in enumerate(zip(fast, reference, strict=True)):
        assert torch.equal(got, want), (options, CASES[case], float((got - want).abs().max()))


def test_switched_off_or_unsupported_runs_the_scalar_kernel(
    lowered: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = _run(lowered, "none", monkeypatch)
    placement = loader.last_placement()
    assert _on_optimized(placement) == 0, placement
    assert all(_summary_count(placement, isa) == 0 for isa in ISAS), placement
    reference = run_pte(lowered.pte, lowered.inputs, reference_only=True)
    for got, want in zip(fast, reference, strict=True):
        assert torch.equal(got, want)


def test_default_provider_takes_the_best_isa(lowered: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    if not ISAS:
        pytest.skip("no AVX2")
    _run(lowered, None, monkeypatch)
    placement = loader.last_placement()
    assert _on_optimized(placement) == len(CASES), placement
    assert _summary_count(placement, ISAS[0]) == len(CASES), placement


def test_group_sizes_the_kernel_declines_fall_back() -> None:
    # group 4 of 4-bit weights (not a multiple of 8): the Reference provider's kernel runs it.
    torch.manual_seed(3)
    cases = [(_model(16, 9, 4, 4, False, True), (_input(3, 16, 9),))]
    low = lower_cases(cases)
    got = run_pte(low.pte, low.inputs, reference_only=False)
    placement = loader.last_placement()
    declined = [line for line in placement if f" {KERNEL}: Reference (declined by" in line]
    assert len(declined) == 1 and "group size not a multiple of 8" in declined[0], placement
    torch.testing.assert_close(got[0], low.expected[0], atol=1e-4, rtol=1e-4)


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


_BUFFERS: list[bytes] = []  # the programs' bytes outlive their modules


def test_shape_plans_share_the_packed_weights() -> None:
    # Rows dynamic: each of the 8 sizes compiles its own plan and binds the linear again. The
    # packed weights (2048 x 2048 int4 + scales + sums: ~3 MiB) come from the WeightCache, not a
    # new packing per size (~24 MiB).
    torch.manual_seed(4)
    model = _model(2048, 2048, 32, 4, False, True)
    loader.load_cpu_backend()
    partitioner = CpuPartitioner()
    exported = torch.export.export(
        model, (torch.randn(4, 2048),), dynamic_shapes=({0: Dim("rows", min=1, max=32)},)
    )
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    assert partitioner.report.left_out == (), partitioner.report
    pte = bytes(symbolic_dims.to_executorch(edge).buffer)
    _BUFFERS.append(pte)
    module = portable_lib._load_for_executorch_from_buffer(pte)
    inputs = [torch.randn(rows, 2048) for rows in (32, *range(1, 9))]
    module.forward([inputs[0]])
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    before = _rss_kib()
    for x in inputs[1:]:
        module.forward([x])
    gc.collect()
    grown = _rss_kib() - before
    assert grown < 8 * 1024, f"RSS grew by {grown} KiB over 8 sizes"
    for x in inputs:
        (got,) = module.forward([x])
        with torch.no_grad():
            expected = model(x)
        scale = max(1.0, float(expected.abs().max()))
        torch.testing.assert_close(got, expected, atol=1e-4 * scale, rtol=1e-4)
