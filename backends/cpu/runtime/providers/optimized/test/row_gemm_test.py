"""Our few-row product kernel (row_gemm.h) against torch, through the C ABI: batch-1 linears and
1x1 convolutions over one pixel, every in-register post-op, split over the pool or not.

Tolerance: float32 sums of up to 1024 products in another order than torch's, so 1e-4 relative
and absolute as in the other provider tests (observed differences are around 1e-6).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F

from backends.cpu.runtime.providers.optimized.test.onednn_ctypes import (
    ADD,
    CLAMP,
    HARDSIGMOID,
    HARDSWISH,
    LEAKY_RELU,
    RELU,
    SIGMOID,
    SILU,
    PostOp,
    Provider,
)

# Each in-register post-op and what torch computes for it.
ACTIVATIONS: dict[str, tuple[PostOp, Callable[[torch.Tensor], torch.Tensor]]] = {
    "relu": (PostOp(RELU), torch.relu),
    "clamp": (PostOp(CLAMP, -1.0, 2.0), lambda y: y.clamp(-1.0, 2.0)),
    "sigmoid": (PostOp(SIGMOID), torch.sigmoid),
    "silu": (PostOp(SILU), F.silu),
    "hardswish": (PostOp(HARDSWISH), F.hardswish),
    "hardsigmoid": (PostOp(HARDSIGMOID), F.hardsigmoid),
    "leaky_relu": (PostOp(LEAKY_RELU, 0.1), lambda y: F.leaky_relu(y, 0.1)),
}


def _assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def provider() -> Provider:
    provider = Provider(num_threads=2)
    if not provider.has_vector_activation(SILU):
        pytest.skip("no AVX-512F on this CPU: few-row products stay on oneDNN")
    return provider


@pytest.fixture(scope="module")
def splitting() -> Provider:
    """A provider that splits every op it can (min_task_flops=0): the column groups share out."""
    return Provider(num_threads=2, min_task_flops=0)


@pytest.fixture
def row_gemm_off() -> Iterator[None]:
    os.environ["ET_CPU_ROW_GEMM"] = "0"
    try:
        yield
    finally:
        del os.environ["ET_CPU_ROW_GEMM"]


def _linear_inputs(rows: int, k: int, n: int, seed: int) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(seed)
    return torch.randn(rows, k), torch.randn(n, k) / math.sqrt(k), torch.randn(n)


@pytest.mark.parametrize("rows", [1, 2, 3, 4])
@pytest.mark.parametrize(
    ("k", "n"),
    [(1024, 1000), (96, 300), (7, 5), (33, 64), (64, 65), (16, 17)],
    ids=lambda v: str(v),
)
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no_bias"])
def test_linear_matches_torch(
    provider: Provider, rows: int, k: int, n: int, with_bias: bool
) -> None:
    x, weight, bias = _linear_inputs(rows, k, n, rows * 1000 + n)
    plan = provider.linear(rows, weight, bias if with_bias else None)
    assert plan.describe().startswith("row_gemm:avx512")
    expected = F.linear(x, weight, bias if with_bias else None)
    _assert_close(plan.run(x), expected)


def test_addmm_weight_layout(provider: Provider) -> None:
    x, weight, bias = _linear_inputs(2, 200, 130, 7)
    plan = provider.linear(2, weight.t().contiguous(), bias, weight_is_k_by_n=True)
    assert plan.describe().startswith("row_gemm:avx512")
    _assert_close(plan.run(x), torch.addmm(bias, x, weight.t()))


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("rows", [1, 3])
def test_every_post_op_in_registers(provider: Provider, name: str, rows: int) -> None:
    post_op, reference = ACTIVATIONS[name]
    x, weight, bias = _linear_inputs(rows, 96, 75, rows)
    x = x * 3.0  # reach both sides of every activation's knees
    plan = provider.linear(rows, weight, bias, [post_op])
    assert plan.describe().startswith("row_gemm:avx512")
    _assert_close(plan.run(x), reference(F.linear(x, weight, bias)))


def test_residual_add_then_activation(provider: Provider) -> None:
    x, weight, bias = _linear_inputs(2, 128, 90, 11)
    residual = torch.randn(2, 90)
    plan = provider.linear(2, weight, bias, [PostOp(ADD), PostOp(HARDSWISH)])
    expected = F.hardswish(F.linear(x, weight, bias) + residual)
    _assert_close(plan.run(x, residual=residual), expected)
    # In place: the residual is the output buffer itself.
    out = residual.clone()
    _assert_close(plan.run_into(out, x, residual=out), expected)


def test_split_over_the_pool_matches_and_writes_nothing_past_the_output(
    splitting: Provider,
) -> None:
    x, weight, bias = _linear_inputs(1, 512, 1000, 3)
    plan = splitting.linear(1, weight, bias, [PostOp(RELU)])
    assert plan.describe().startswith("row_gemm:avx512, ") and plan.pieces > 1
    buffer = torch.full((1000 + 64,), 123.0)
    out = buffer[:1000].view(1, 1000)
    plan.run_into(out, x)
    _assert_close(out, torch.relu(F.linear(x, weight, bias)))
    assert torch.equal(buffer[1000:], torch.full((64,), 123.0))


@pytest.fixture(scope="module")
def sizes_vary(provider: Provider) -> Provider:
    """A provider of a graph whose sizes vary: a few rows read at each run (LinearVariableRows)."""
    return Provider(num_threads=2, sizes_vary=True)


@pytest.mark.parametrize("graph", ["static", "sizes vary"])
@pytest.mark.parametrize("switch", ["1", "0"])
def test_head_split_by_its_weight_stream(
    provider: Provider, sizes_vary: Provider, switch: str, graph: str
) -> None:
    """MobileNetV3's 576 -> 1024 head: 1.2 MFLOP (one piece by flops) but 2.4 MB of weights, so
    split on the pool unless ET_CPU_ROW_GEMM_STREAM_SPLIT=0 (read at prepare); in a graph whose
    sizes vary too (the plan reading its rows at each run: a dynamic batch at 1)."""
    x, weight, bias = _linear_inputs(1, 576, 1024, 19)
    os.environ["ET_CPU_ROW_GEMM_STREAM_SPLIT"] = switch
    try:
        on = sizes_vary if graph == "sizes vary" else provider
        plan = on.linear(1, weight, bias, [PostOp(HARDSWISH)])
    finally:
        del os.environ["ET_CPU_ROW_GEMM_STREAM_SPLIT"]
    assert plan.describe().startswith("row_gemm:avx512")
    assert ("rows read at each run" in plan.describe()) == (graph == "sizes vary")
    assert (plan.pieces > 1) == (switch == "1")
    _assert_close(plan.run(x), F.hardswish(F.linear(x, weight, bias)))


@pytest.mark.parametrize("rows", [1, 3])
def test_cold_stream_same_numbers(provider: Provider, rows: int) -> None:
    """A 576 -> 1000 head (2.3 MB packed: a cold stream, prefetched further ahead unless
    ET_CPU_ROW_GEMM_COLD_STREAM=0, read at prepare; on huge pages either way, from the weight
    arena) computes bitwise what the plain
    stream does (the prefetches and the memory change, not the arithmetic), and matches torch."""
    x, weight, bias = _linear_inputs(rows, 576, 1000, 23)
    plans = {}
    for switch in ("1", "0"):
        os.environ["ET_CPU_ROW_GEMM_COLD_STREAM"] = switch
        try:
            plans[switch] = provider.linear(rows, weight, bias, [PostOp(HARDSWISH)])
        finally:
            del os.environ["ET_CPU_ROW_GEMM_COLD_STREAM"]
        assert plans[switch].describe().startswith("row_gemm:avx512")
    cold, plain = plans["1"].run(x), plans["0"].run(x)
    assert torch.equal(cold, plain)
    _assert_close(cold, F.hardswish(F.linear(x, weight, bias)))


def _huge_page_advised_bytes() -> int:
    """Bytes of this process's mappings advised MADV_HUGEPAGE ("hg" in /proc/self/smaps)."""
    total = size = 0
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if line.startswith("Size:"):
                size = int(line.split()[1]) * 1024
            elif line.startswith("VmFlags:") and "hg" in line.split()[1:]:
                total += size
    return total


def test_weights_on_huge_page_slabs(provider: Provider) -> None:
    """A small packing (256 -> 128, 128 KiB: far under the cold stream's 2 MiB bar) comes from the
    weight arena's slabs (weight_arena.h), which are advised as huge pages, unless
    ET_CPU_HUGE_WEIGHTS=0 (read at prepare: heap memory, as before); freed with its plan; the
    numbers are bitwise the same either way."""
    x, weight, bias = _linear_inputs(1, 256, 128, 29)
    packed_bytes = 256 * 128 * 4
    _, before = provider.weight_arena_stats()
    on = provider.linear(1, weight, bias, [PostOp(HARDSWISH)])
    slabs, after = provider.weight_arena_stats()
    assert after - before >= packed_bytes
    assert slabs >= after and slabs % (2 << 20) == 0
    assert _huge_page_advised_bytes() >= slabs
    os.environ["ET_CPU_HUGE_WEIGHTS"] = "0"
    try:
        off = provider.linear(1, weight, bias, [PostOp(HARDSWISH)])
    finally:
        del os.environ["ET_CPU_HUGE_WEIGHTS"]
    assert provider.weight_arena_stats()[1] == after
    for plan in (on, off):
        assert plan.describe().startswith("row_gemm:avx512")
    y = on.run(x)
    assert torch.equal(y, off.run(x))
    _assert_close(y, F.hardswish(F.linear(x, weight, bias)))
    del on
    assert provider.weight_arena_stats()[1] <= after - packed_bytes


def test_no_huge_pages_of_its_own(provider: Provider) -> None:
    """With ET_CPU_HUGE_WEIGHTS=0 a cold stream (576 -> 1000, 2.3 MB packed) is heap memory like
    every other prepared weight: the arena is the one way weights get huge pages, so no mapping
    is advised as huge pages for it."""
    _, weight, bias = _linear_inputs(1, 576, 1000, 31)
    advised = _huge_page_advised_bytes()
    os.environ["ET_CPU_HUGE_WEIGHTS"] = "0"
    try:
        head = provider.linear(1, weight, bias, [PostOp(HARDSWISH)])
    finally:
        del os.environ["ET_CPU_HUGE_WEIGHTS"]
    assert head.describe().startswith("row_gemm:avx512")
    assert _huge_page_advised_bytes() == advised


def test_more_rows_or_switched_off_stay_on_onednn(provider: Provider, row_gemm_off: None) -> None:
    x, weight, bias = _linear_inputs(1, 64, 64, 5)
    plan = provider.linear(1, weight, bias)
    assert "row_gemm" not in plan.describe()
    _assert_close(plan.run(x), F.linear(x, weight, bias))


def test_five_rows_stay_on_onednn(provider: Provider) -> None:
    """5-8 rows take RowGemm only for a weight streamed from L3 or memory (2 MiB or more packed):
    a small one stays on oneDNN's brgemm."""
    x, weight, bias = _linear_inputs(5, 64, 64, 6)
    plan = provider.linear(5, weight, bias)
    assert "row_gemm" not in plan.describe()
    _assert_close(plan.run(x), F.linear(x, weight, bias))


# Heads of 2 MiB or more packed: every last-group shape (1024: whole groups; 1000: 40 columns, 3
# vectors, the last partial; 1009: 49, 4 vectors; 1040: 16, one vector).
WIDE_HEADS = [(576, 1024), (1024, 1000), (560, 1009), (544, 1040)]


@pytest.mark.parametrize("rows", [5, 6, 7, 8])
@pytest.mark.parametrize(("k", "n"), WIDE_HEADS, ids=lambda v: str(v))
def test_wide_rows_match_torch(provider: Provider, rows: int, k: int, n: int) -> None:
    """5-8 rows of a head (issue 46: MobileNetV3 at batch 8) on RowGemm in passes of 2 vectors,
    each weight read once for all the rows, against float64 torch; a split pool writes nothing past
    the output."""
    x, weight, bias = _linear_inputs(rows, k, n, rows * 100 + n)
    plan = provider.linear(rows, weight, bias, [PostOp(HARDSWISH)])
    assert plan.describe().startswith("row_gemm:avx512, ") and plan.pieces > 1
    buffer = torch.full((rows * n + 64,), 123.0)
    out = buffer[: rows * n].view(rows, n)
    plan.run_into(out, x)
    expected = F.hardswish(F.linear(x.double(), weight.double(), bias.double()))
    _assert_close(out, expected.float())
    assert torch.equal(buffer[rows * n :], torch.full((64,), 123.0))


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_wide_rows_every_post_op_and_residual(provider: Provider, name: str) -> None:
    post_op, reference = ACTIVATIONS[name]
    x, weight, bias = _linear_inputs(8, 576, 1000, 31)
    x = x * 3.0  # reach both sides of every activation's knees
    residual = torch.randn(8, 1000)
    plan = provider.linear(8, weight, bias, [PostOp(ADD), post_op])
    assert plan.describe().startswith("row_gemm:avx512")
    expected = reference(F.linear(x, weight, bias) + residual)
    _assert_close(plan.run(x, residual=residual), expected)
    out = residual.clone()  # in place: the residual is the output buffer
    _assert_close(plan.run_into(out, x, residual=out), expected)


@pytest.mark.parametrize("rows", [5, 8, 12, 16, 24, 31])
def test_sizes_vary_head_in_wide_blocks(sizes_vary: Provider, rows: int) -> None:
    """In a graph whose sizes vary, a head's every count below a row tile runs on RowGemm in
    blocks of up to 8 rows, for good (no brgemm small tile of 8 rows on one thread, no primitive
    of the count), split on the pool, against float64 torch."""
    x, weight, bias = _linear_inputs(rows, 576, 1024, rows)
    plan = sizes_vary.linear(rows, weight, bias, [PostOp(HARDSWISH)])
    assert plan.describe() == "row_gemm:avx512 in blocks of up to 8 rows (rows read at each run)"
    assert plan.pieces > 1
    expected = F.hardswish(F.linear(x.double(), weight.double(), bias.double()))
    _assert_close(plan.run(x), expected.float())


@pytest.mark.parametrize("rows", [8, 16])
def test_wide_switched_off_keeps_onednn(
    provider: Provider, sizes_vary: Provider, monkeypatch: pytest.MonkeyPatch, rows: int
) -> None:
    """ET_CPU_ROW_GEMM_WIDE=0 (read at prepare): a head of 8 or 16 rows stays on oneDNN (brgemm
    small tiles in a graph whose sizes vary, the primitive of the count in a static one), with the
    same results within the tolerance."""
    monkeypatch.setenv("ET_CPU_ROW_GEMM_WIDE", "0")
    x, weight, bias = _linear_inputs(rows, 576, 1024, rows + 1)
    expected = F.hardswish(F.linear(x, weight, bias))
    varying = sizes_vary.linear(rows, weight, bias, [PostOp(HARDSWISH)])
    assert "brgemm tiles of 8 rows" in varying.describe()
    _assert_close(varying.run(x), expected)
    static = provider.linear(rows, weight, bias, [PostOp(HARDSWISH)])
    assert "row_gemm" not in static.describe()
    _assert_close(static.run(x), expected)


def test_small_weight_sizes_vary_keeps_small_tiles(sizes_vary: Provider) -> None:
    """A weight that stays in cache (a small decoder's projection) keeps the brgemm small tiles at
    8 rows: the wide blocks are for streamed heads only."""
    x, weight, bias = _linear_inputs(8, 128, 256, 41)
    plan = sizes_vary.linear(8, weight, bias)
    assert "brgemm tiles of 8 rows" in plan.describe()
    _assert_close(plan.run(x), F.linear(x, weight, bias))


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("input_channels_last", [False, True], ids=["plain_in", "nhwc_in"])
@pytest.mark.parametrize("output", ["plain", "channels_last", "best"])
def test_one_pixel_pointwise_convolution(
    provider: Provider, batch: int, input_channels_last: bool, output: str
) -> None:
    # Squeeze-excite's second convolution: 144 -> 576 over the pooled pixel, hardsigmoid gate.
    torch.manual_seed(batch)
    x = torch.randn(batch, 144, 1, 1)
    weight = torch.randn(576, 144, 1, 1) / 12.0
    bias = torch.randn(576)
    plan = provider.conv(
        list(x.shape),
        weight,
        bias,
        [1, 1],
        [0, 0],
        [1, 1],
        post_ops=[PostOp(HARDSIGMOID)],
        input_channels_last=input_channels_last,
        output=output,
    )
    assert plan.describe().startswith("row_gemm:avx512")
    expected = F.hardsigmoid(F.conv2d(x, weight, bias))
    _assert_close(plan.run(x).reshape(expected.shape), expected)


def test_one_sample_conv1d(provider: Provider) -> None:
    torch.manual_seed(4)
    x = torch.randn(1, 40, 1)
    weight = torch.randn(24, 40, 1) / 6.0
    plan = provider.conv(list(x.shape), weight, None, [1], [0], [1], post_ops=[PostOp(RELU)])
    assert plan.describe().startswith("row_gemm:avx512")
    expected = torch.relu(F.conv1d(x, weight))
    _assert_close(plan.run(x), expected)


@pytest.mark.parametrize(
    ("size", "kernel", "padding", "groups"),
    [(2, 1, 0, 1), (1, 3, 1, 1), (1, 1, 0, 2)],
    ids=["two_pixels", "padded_3x3", "grouped"],
)
def test_other_convolutions_stay_on_onednn(
    provider: Provider, size: int, kernel: int, padding: int, groups: int
) -> None:
    torch.manual_seed(size + kernel)
    x = torch.randn(1, 32, size, size)
    weight = torch.randn(48, 32 // groups, kernel, kernel) / 8.0
    plan = provider.conv(
        list(x.shape), weight, None, [1, 1], [padding, padding], [1, 1], groups=groups
    )
    assert "row_gemm" not in plan.describe()
    expected = F.conv2d(x, weight, padding=padding, groups=groups)
    _assert_close(plan.run(x), expected)
