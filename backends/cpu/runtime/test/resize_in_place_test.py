"""Issue 47, resizing in place (the default; ET_CPU_RESIZE_IN_PLACE=0 turns it off): a program
exported with torch.export.Dim(max=...) and lowered by the documented flow, loaded by the plain
runtime, takes each new size on its one graph compiled for the bounds (tensors resized, plans
prepared again, the attention products on tile_bmm) instead of compiling a shape plan. Checked
against eager at the bounds and between, alternating many times; no shape plan compiled; nothing
made per call after the first round (weights, matmul primitives); resident memory flat. A small
MobileNetV3-style CNN with a dynamic batch resizes in place too, its convolutions, blocks,
squeeze-excite and pooling prepared for one image and kept at every batch (nothing prepared
again but the linear head), each batch's images in one round of the pool, so even a batch called
again in a row compiles no shape plan; oneDNN convolutions over small images (8x8) run a batch in
tiles of 8, 4 and 2 images and match eager at batches 1, 5, 16 and 7 (with
ET_CPU_CONV_BATCH_TILES=0 image by image, and the second call in a row compiles a shape plan);
with ET_CPU_CONV_PER_IMAGE=0 its kernels cannot resize and it keeps the shape plans, as does a
graph compiled with ET_CPU_RESIZE_IN_PLACE=0. Linears of a few rows
(and a tile's remainder of a few) run on row_gemm reading their rows at each run: a new such
count prepares nothing; 5-31 run in small tiles for their first call, the same count called
again in a row prepares its primitive (ET_CPU_SMALL_ROW_TILES=all keeps the tiles), but a head
whose weights stream from memory (2 MiB or more) keeps every such count on row_gemm in blocks of
up to 8 rows. A torchao-quantized
decoder (8da4w, weight-only linear and embedding) resizes in place too. A resize failing halfway
(the test hook ET_CPU_TEST_FAIL_RESIZE_AT) turns the graph back to its bounds and to shape plans,
its results still right."""

import ctypes
import functools
import gc
import os
from typing import Any

# Read when the delegate compiles (first forward): the default (on) for every test but the one
# that turns it off for its own program.
os.environ.pop("ET_CPU_RESIZE_IN_PLACE", None)

import pytest
import torch
from executorch.extension.pybindings import portable_lib
from torch import nn
from torch.export import Dim
from torchao.quantization import quantize_
from torchao.quantization.granularity import PerAxis, PerGroup
from torchao.quantization.quant_api import (
    Int8DynamicActivationIntxWeightConfig,
    IntxWeightOnlyConfig,
)

from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import assert_single_output_close, lower_to_pte
from tools.bench.zoo_sequence import LlamaLike

ATOL = 1e-4
RTOL = 1e-4
MAX_TOKENS = 192
VOCAB = 96
# The bounds, sizes between them (row-tile remainders, odd head products' tails) and repeats.
TOKENS = (1, MAX_TOKENS, 17, 64, 1, 33, MAX_TOKENS - 1, 2, 100)
ROUNDS = 3
MEMORY_CALLS = 400

_BUFFERS: list[bytes] = []  # the runtime does not own a program's buffer


def _lower(model: torch.nn.Module, example: torch.Tensor, dims: dict[int, Any]) -> bytes:
    pte, _ = lower_to_pte(model, (example,), dynamic_shapes=(dims,))
    _BUFFERS.append(pte)
    return pte


def _load(model: torch.nn.Module, example: torch.Tensor, dims: dict[int, Any]) -> Any:
    return portable_lib._load_for_executorch_from_buffer(_lower(model, example, dims))


@functools.cache
def _small_llama_pte() -> tuple[torch.nn.Module, bytes]:
    """A one-layer decoder (dynamic tokens, 1 to 64) and its .pte, lowered once: the tests that
    run it under their own switches each load a new program from it (its delegate compiles,
    reading the switches, at that program's first forward)."""
    torch.manual_seed(6)
    model = LlamaLike(vocab=VOCAB, dim=32, depth=1, heads=2, hidden=64, max_tokens=64).eval()
    return model, _lower(model, torch.randint(0, VOCAB, (1, 8)), {1: Dim("tokens", min=1, max=64)})


def _small_llama() -> tuple[torch.nn.Module, Any]:
    """The one-layer decoder and a new program of its .pte (a delegate of its own)."""
    model, pte = _small_llama_pte()
    return model, portable_lib._load_for_executorch_from_buffer(pte)


@pytest.fixture(scope="module")
def llama() -> tuple[torch.nn.Module, Any]:
    torch.manual_seed(0)
    model = LlamaLike(vocab=VOCAB, dim=64, depth=2, heads=2, hidden=128, max_tokens=MAX_TOKENS)
    model = model.eval()
    module = _load(
        model, torch.randint(0, VOCAB, (1, 8)), {1: Dim("tokens", min=1, max=MAX_TOKENS)}
    )
    return model, module


def _has_avx512() -> bool:
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        return "avx512f" in cpuinfo.read()


def _tokens(length: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(length))


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


def test_llama_resizes_in_place_and_matches_eager_at_every_size(llama: Any) -> None:
    model, module = llama
    assert_single_output_close(module, model, _tokens(MAX_TOKENS), atol=ATOL, rtol=RTOL)
    placement = loader.last_placement()
    assert any("new sizes resized in place" in line for line in placement), placement[:2]
    _, misses = loader.shape_plan_stats()
    for _ in range(ROUNDS):
        for length in TOKENS:
            assert_single_output_close(module, model, _tokens(length), atol=ATOL, rtol=RTOL)
    # Every size ran on the one graph: no shape plan was compiled.
    assert loader.shape_plan_stats()[1] == misses


def test_after_one_round_a_size_makes_no_weights_nor_primitives(llama: Any) -> None:
    model, module = llama
    for length in TOKENS:  # each size once: its remainder primitives, row_gemm packing
        module.forward([_tokens(length)])
    weights = loader.weight_cache_stats()[1:]
    primitives = loader.matmul_primitive_stats()[0]
    for length in reversed(TOKENS):
        assert_single_output_close(module, model, _tokens(length), atol=ATOL, rtol=RTOL)
    assert loader.weight_cache_stats()[1:] == weights
    assert loader.matmul_primitive_stats()[0] == primitives


def test_memory_stays_flat_over_calls_alternating_between_sizes(llama: Any) -> None:
    model, module = llama
    inputs = [_tokens(length) for length in TOKENS]
    for x in inputs:
        module.forward([x])
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    before = _rss_kib()
    for call in range(MEMORY_CALLS):
        module.forward([inputs[call % len(inputs)]])
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    grown = _rss_kib() - before
    assert grown < 4 * 1024, f"RSS grew by {grown} KiB over {MEMORY_CALLS} calls"
    for x in inputs:  # still right after them
        assert_single_output_close(module, model, x, atol=ATOL, rtol=RTOL)


class _Cnn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def test_a_graph_whose_kernels_cannot_resize_keeps_the_shape_plans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Convolutions with plans of the whole batch (read at bind, the compile at the first call).
    monkeypatch.setenv("ET_CPU_CONV_PER_IMAGE", "0")
    torch.manual_seed(4)
    model = _Cnn().eval()
    module = _load(model, torch.randn(2, 3, 8, 8), {0: Dim("batch", min=1, max=8)})
    assert_single_output_close(module, model, torch.randn(8, 3, 8, 8), atol=ATOL, rtol=RTOL)
    monkeypatch.delenv("ET_CPU_CONV_PER_IMAGE")
    placement = loader.last_placement()
    assert any("shape plans cached" in line for line in placement), placement[:2]
    _, misses = loader.shape_plan_stats()
    for batch in (1, 5, 8, 1):
        assert_single_output_close(module, model, torch.randn(batch, 3, 8, 8), atol=ATOL, rtol=RTOL)
    assert loader.shape_plan_stats()[1] == misses + 2  # sizes 1 and 5 compiled


class _SmallMobile(torch.nn.Module):
    """MobileNetV3-style on 3x32x32: a strided stem with hardswish, a depthwise convolution and
    its squeeze-excite (whose gate folds into the 1x1 convolution after it), an inverted residual
    block with its residual add, max pooling, a global average pool and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        conv = torch.nn.Conv2d
        self.stem = conv(3, 16, 3, stride=2, padding=1)
        self.depthwise = conv(16, 16, 3, padding=1, groups=16)
        self.se_reduce = conv(16, 8, 1)
        self.se_expand = conv(8, 16, 1)
        self.pointwise = conv(16, 24, 1)
        self.expand = conv(24, 72, 1)
        self.block_depthwise = conv(72, 72, 3, padding=1, groups=72)
        self.project = conv(72, 24, 1)
        self.head = torch.nn.Linear(24, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = torch.nn.functional
        y = f.hardswish(self.stem(x))
        y = f.relu(self.depthwise(y))
        gate = f.adaptive_avg_pool2d(y, 1)
        gate = f.hardsigmoid(self.se_expand(f.relu(self.se_reduce(gate))))
        y = self.pointwise(y * gate)
        y = y + self.project(f.relu6(self.block_depthwise(f.relu6(self.expand(y)))))
        y = f.max_pool2d(y, 2)
        return self.head(f.adaptive_avg_pool2d(y, 1).flatten(1))


def test_a_small_cnn_resizes_its_batch_in_place_keeping_its_convolution_plans() -> None:
    torch.manual_seed(9)
    model = _SmallMobile().eval()
    module = _load(model, torch.randn(2, 3, 32, 32), {0: Dim("batch", min=1, max=16)})
    images = torch.randn(16, 3, 32, 32, generator=torch.Generator().manual_seed(16))
    assert_single_output_close(module, model, images, atol=ATOL, rtol=RTOL)
    placement = loader.last_placement()
    assert any("new sizes resized in place" in line for line in placement), placement[:2]
    # Every op on the Optimized provider but the flatten (a view: no copy).
    on_reference = [line for line in placement if ": Reference" in line]
    assert [line for line in on_reference if "aliases its input" not in line] == [], placement
    summary = placement[-1]
    for part in (
        " 1 inverted residual blocks fused",
        " 1 squeeze-excite tails",
        " 1 squeeze-excite gates folded",
    ):
        assert part in summary, summary
    _, misses = loader.shape_plan_stats()
    prepared = loader.resize_prepare_count()
    batches = (1, 5, 16, 2, 16)
    for batch in batches:
        x = torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(batch))
        assert_single_output_close(module, model, x, atol=ATOL, rtol=RTOL)
    # Every batch on the one graph (no shape plan), nothing prepared again at a new batch but
    # the linear head (whose rows are the batch).
    assert loader.shape_plan_stats()[1] == misses
    assert loader.resize_prepare_count() - prepared == len(batches)
    # A batch called again in a row stays in place too: every kernel runs the batch's images in
    # one round of the pool (or in tiles of images), as fast as plans of the whole batch, so no
    # shape plan is worth compiling.
    five = torch.randn(5, 3, 32, 32, generator=torch.Generator().manual_seed(55))
    for x in (five, five, five, images[:1], five):
        assert_single_output_close(module, model, x, atol=ATOL, rtol=RTOL)
    assert loader.shape_plan_stats()[1] == misses


class _SmallImages(torch.nn.Module):
    """oneDNN convolutions over 8x8 images (64 pixels: the size that runs in tiles of 8, 4 and 2
    images): a 3x3 with ReLU, a 1x1 with its residual add, a global average and a linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.pointwise = torch.nn.Conv2d(16, 16, 1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        y = y + self.pointwise(y)
        return self.fc(y.mean((2, 3)))


def test_small_images_run_in_tiles_of_images_and_compile_no_shape_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch.manual_seed(12)
    model = _SmallImages().eval()
    dims = {0: Dim("batch", min=1, max=16)}
    module = _load(model, torch.randn(2, 8, 8, 8), dims)
    _, misses = loader.shape_plan_stats()
    # Tiles largest first, then single images: 5 = 4 + 1, 16 = 8 + 8, 7 = 4 + 2 + 1. Each batch
    # called twice in a row: still no shape plan (nothing runs its images apart).
    for batch in (1, 1, 5, 5, 16, 16, 7, 7, 1):
        x = torch.randn(batch, 8, 8, 8, generator=torch.Generator().manual_seed(batch))
        assert_single_output_close(module, model, x, atol=ATOL, rtol=RTOL)
    assert any("new sizes resized in place" in line for line in loader.last_placement())
    assert loader.shape_plan_stats()[1] == misses
    # Without the tiles (read at prepare) the convolutions run image by image: the second call
    # at a batch in a row compiles its shape plan (plans of the whole batch), right as well.
    monkeypatch.setenv("ET_CPU_CONV_BATCH_TILES", "0")
    untiled = _load(model, torch.randn(2, 8, 8, 8), dims)
    five = torch.randn(5, 8, 8, 8, generator=torch.Generator().manual_seed(5))
    for x in (five, five, five):
        assert_single_output_close(untiled, model, x, atol=ATOL, rtol=RTOL)
    assert loader.shape_plan_stats()[1] == misses + 1


class _Products(torch.nn.Module):
    """Products whose n is the dynamic size (x @ x^T) and one with 37 columns (a 32-column tile
    and a 5-column tail), k of 40 and of the dynamic size."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 40, 37) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = torch.bmm(x, x.transpose(1, 2))  # (3, s, s)
        return torch.bmm(torch.bmm(scores, x), self.w)  # (3, s, 40) @ (3, 40, 37)


def test_batched_products_on_tile_bmm_match_eager_at_every_size() -> None:
    torch.manual_seed(5)
    model = _Products().eval()
    module = _load(model, torch.randn(3, 8, 40), {1: Dim("s", min=1, max=100)})
    _, misses = loader.shape_plan_stats()
    for rows in (100, 1, 5, 64, 33, 100, 7, 1):
        x = torch.randn(3, rows, 40, generator=torch.Generator().manual_seed(rows)) * 0.3
        assert_single_output_close(module, model, x, atol=ATOL, rtol=RTOL)
    placement = loader.last_placement()
    assert any("new sizes resized in place" in line for line in placement), placement[:2]
    assert any(", 3 tile_bmm," in line for line in placement), placement[-1]
    assert loader.shape_plan_stats()[1] == misses


def test_switched_off_a_decoder_compiles_shape_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    model, module = _small_llama()
    monkeypatch.setenv("ET_CPU_RESIZE_IN_PLACE", "0")
    assert_single_output_close(module, model, _tokens(64), atol=ATOL, rtol=RTOL)
    monkeypatch.delenv("ET_CPU_RESIZE_IN_PLACE")  # read once, at the compile above
    placement = loader.last_placement()
    assert any("shape plans cached" in line for line in placement), placement[:2]
    assert not any(", 1 tile_bmm," in line or ", 2 tile_bmm," in line for line in placement)
    _, misses = loader.shape_plan_stats()
    for length in (5, 64, 5, 17):
        assert_single_output_close(module, model, _tokens(length), atol=ATOL, rtol=RTOL)
    assert loader.shape_plan_stats()[1] == misses + 2  # sizes 5 and 17 compiled


def test_alternating_between_two_sizes_prepares_no_linear_again(llama: Any) -> None:
    model, module = llama
    for length in (17, 40):  # each size once: its plans made
        module.forward([_tokens(length)])
    made = loader.matmul_primitive_stats()
    for _ in range(3):
        for length in (17, 40):
            assert_single_output_close(module, model, _tokens(length), atol=ATOL, rtol=RTOL)
    # The linears' plans of both sizes kept: no matmul primitive made nor looked up again.
    assert loader.matmul_primitive_stats() == made


class _Arithmetic(torch.nn.Module):
    """Activations our plain loop runs in a graph resized in place (clamp, abs, sqrt, x ** 1.5;
    the RMS step fuses into rms_norm)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(24, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x) * 0.5 + 1.0
        scale = torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-5)
        return torch.clamp(y * scale, -2.0, 2.0) + torch.sqrt(y.abs()) + y.abs().pow(1.5)


def test_arithmetic_activations_match_eager_at_every_size() -> None:
    torch.manual_seed(7)
    model = _Arithmetic().eval()
    module = _load(model, torch.randn(8, 24), {0: Dim("rows", min=1, max=300)})
    _, misses = loader.shape_plan_stats()
    for rows in (300, 1, 7, 64, 7, 299, 1):
        x = torch.randn(rows, 24, generator=torch.Generator().manual_seed(rows))
        assert_single_output_close(module, model, x, atol=ATOL, rtol=RTOL)
    placement = loader.last_placement()
    assert any("new sizes resized in place" in line for line in placement), placement[:2]
    assert loader.shape_plan_stats()[1] == misses


@pytest.mark.skipif(not _has_avx512(), reason="row_gemm, which reads the rows, needs AVX-512")
@pytest.mark.parametrize("switch", [None, "ET_CPU_SMALL_ROW_TILES=all"])
def test_a_new_row_count_below_a_row_tile_prepares_no_linear(
    llama: Any, monkeypatch: pytest.MonkeyPatch, switch: str | None
) -> None:
    # The linears' one plan that reads its rows, made when the session first prepares them (at
    # the bounds; the switches read then): 1-4 rows on row_gemm, 5-31 in 8-, 16- or 24-row tiles
    # of oneDNN primitives and row_gemm for the rest. By default those stand in for a first call
    # at 5-31 rows only: called again in a row at that count, the linears prepare a primitive of
    # it (faster in the steady state) unless the tiles cover it whole (8, 16, 24); with
    # ET_CPU_SMALL_ROW_TILES=all they keep the tiles.
    # (ET_CPU_VARIABLE_ROWS=all, every count below 32 on row_gemm, takes the same path as the
    # leftover rows here; left out for CI time.)
    if switch is None:
        model, module = llama
    else:
        name, value = switch.split("=")
        monkeypatch.setenv(name, value)
        model, module = _small_llama()
    module.forward([_tokens(40)])
    made = loader.matmul_primitive_stats()
    _, misses = loader.shape_plan_stats()
    for length in (2, 4, 1, 3, 9, 31, 16, 5, 23, 8):
        assert_single_output_close(module, model, _tokens(length), atol=ATOL, rtol=RTOL)
    # No oneDNN primitive made nor looked up for these first calls.
    assert loader.matmul_primitive_stats() == made
    # Called again in a row: at 45 (a row tile and 13 rows after it) by default the primitives
    # of the rows after the tile now, once; at 8 and 24 (whole small tiles, as fast as a
    # primitive of the count) none; with =all none anywhere.
    for length in (8, 24, 45):
        if length != 8:  # its first call
            assert_single_output_close(module, model, _tokens(length), atol=ATOL, rtol=RTOL)
            assert loader.matmul_primitive_stats() == made
        assert_single_output_close(module, model, _tokens(length), atol=ATOL, rtol=RTOL)
        if switch is None and length % 8 != 0:
            assert sum(loader.matmul_primitive_stats()) > sum(made)
            made = loader.matmul_primitive_stats()
        assert loader.matmul_primitive_stats() == made
        assert_single_output_close(module, model, _tokens(length), atol=ATOL, rtol=RTOL)
        assert loader.matmul_primitive_stats() == made
    assert_single_output_close(module, model, _tokens(12), atol=ATOL, rtol=RTOL)
    assert loader.matmul_primitive_stats() == made
    assert loader.shape_plan_stats()[1] == misses


class _Head(torch.nn.Module):
    """MobileNetV3's classifier head (576 -> 1024, hardswish, 1024 -> 1000): weights of 2.4 and
    4 MB, streamed from L3 or memory at every call."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = torch.nn.Linear(576, 1024)
        self.out = torch.nn.Linear(1024, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.nn.functional.hardswish(self.hidden(x)))


@pytest.mark.skipif(not _has_avx512(), reason="row_gemm, which reads the rows, needs AVX-512")
def test_a_head_takes_every_batch_below_a_row_tile_in_wide_row_gemm_blocks() -> None:
    # Issue 46: a head whose weights stream from L3 or memory runs every count below a row tile on
    # row_gemm in blocks of up to 8 rows (each weight read once per block, on the pool's threads),
    # for good: a count called again in a row prepares no primitive of it (5, 12: small tiles and
    # a primitive of the count before), and every batch matches eager.
    torch.manual_seed(14)
    model = _Head().eval()
    module = _load(model, torch.randn(2, 576), {0: Dim("batch", min=1, max=16)})
    x16 = torch.randn(16, 576, generator=torch.Generator().manual_seed(16))
    assert_single_output_close(module, model, x16, atol=ATOL, rtol=RTOL)
    made = loader.matmul_primitive_stats()
    _, misses = loader.shape_plan_stats()
    for batch in (8, 8, 5, 5, 12, 12, 1, 16, 7, 7):
        x = torch.randn(batch, 576, generator=torch.Generator().manual_seed(batch))
        assert_single_output_close(module, model, x, atol=ATOL, rtol=RTOL)
    assert loader.matmul_primitive_stats() == made
    assert loader.shape_plan_stats()[1] == misses


def test_a_resize_failing_halfway_falls_back_to_the_bounds_and_shape_plans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, module = _small_llama()
    # Read when the Optimized session opens (the compile at the first call): its second resize
    # fails after preparing half its kernels again.
    monkeypatch.setenv("ET_CPU_TEST_FAIL_RESIZE_AT", "2")
    assert_single_output_close(module, model, _tokens(64), atol=ATOL, rtol=RTOL)
    monkeypatch.delenv("ET_CPU_TEST_FAIL_RESIZE_AT")
    placement = loader.last_placement()
    assert any("new sizes resized in place" in line for line in placement), placement[:2]
    _, misses = loader.shape_plan_stats()
    assert_single_output_close(module, model, _tokens(5), atol=ATOL, rtol=RTOL)  # in place
    assert loader.shape_plan_stats()[1] == misses
    # The failing resize: the graph back at its bounds, a shape plan for 17.
    assert_single_output_close(module, model, _tokens(17), atol=ATOL, rtol=RTOL)
    assert loader.shape_plan_stats()[1] == misses + 1
    for length in (64, 5, 17, 30, 64, 1):
        assert_single_output_close(module, model, _tokens(length), atol=ATOL, rtol=RTOL)
    assert loader.shape_plan_stats()[1] == misses + 4  # 5, 30 and 1 compiled; 64 the bounds'


def test_a_quantized_decoder_resizes_in_place_and_matches_torchao() -> None:
    # torchao's Llama recipe: the embedding int8 weight-only (embedding_wo), the linears 8da4w
    # (linear_8da) but the head int8 weight-only (linear_wo); each reads its sizes at each run.
    torch.manual_seed(9)
    model = LlamaLike(vocab=VOCAB, dim=64, depth=1, heads=2, hidden=128, max_tokens=64).eval()
    int8: torch.dtype = torch.int8
    quantize_(
        model,
        IntxWeightOnlyConfig(weight_dtype=int8, granularity=PerGroup(32)),
        filter_fn=lambda module, fqn: isinstance(module, nn.Embedding),
    )
    quantize_(
        model,
        IntxWeightOnlyConfig(weight_dtype=int8, granularity=PerAxis(0)),
        filter_fn=lambda module, fqn: fqn == "head",
    )
    quantize_(
        model,
        Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int4,  # type: ignore[attr-defined]
            weight_granularity=PerGroup(32),
        ),
        filter_fn=lambda module, fqn: isinstance(module, nn.Linear) and fqn != "head",
    )
    module = _load(model, torch.randint(0, VOCAB, (1, 8)), {1: Dim("tokens", min=1, max=64)})
    # float32 sums in another order than eager's (and a token's int8 quantization of values that
    # differ by such rounding): within 1e-4 of logits of magnitude ~1.
    assert_single_output_close(module, model, _tokens(64), atol=1e-4, rtol=1e-4)
    placement = loader.last_placement()
    assert any("new sizes resized in place" in line for line in placement), placement[:2]
    _, misses = loader.shape_plan_stats()
    for length in (1, 17, 5, 64, 33):
        assert_single_output_close(module, model, _tokens(length), atol=1e-4, rtol=1e-4)
    assert loader.shape_plan_stats()[1] == misses  # every size on the one graph
