"""Issue 47: the first call at a new size makes no new oneDNN matmul kernel for a linear of 32 rows
or more in a program with symbolic dimensions (a static program keeps plans sized for its one
shape). Such a linear runs in row tiles of 32 rows (split_linear_tiles): one primitive whose shape
does not depend on the row count, which every size's graph shares, plus one for the rows left over
(made once per remainder; a remainder of 1-4 rows runs on row_gemm, which reads its rows at each
run). The loader's matmul_primitive_stats counts the matmul primitives the
plans make that are new to the process (oneDNN generates a kernel) and those seen before. Results
against eager at several sizes, a Llama-style decoder among them, from the plain `to_executorch()`
flow.
"""

import functools
import os
from typing import Any

# The shape plans: a graph that resizes in place (the default, resize_in_place_test) compiles none.
os.environ["ET_CPU_RESIZE_IN_PLACE"] = "0"

import pytest
import torch
from torch.export import Dim

from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import (
    assert_single_output_close,
    load,
    lower_to_pte,
)
from tools.bench.zoo_sequence import LlamaLike

ATOL = 1e-4
RTOL = 1e-4
MAX_ROWS = 256
FEATURES = 64
VOCAB = 64
MAX_TOKENS = 128


def _has_avx512() -> bool:
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        return "avx512f" in cpuinfo.read()


# Row tiles need oneDNN's brgemm (AVX-512 here) and a work pool (two threads or more).
TILES_POSSIBLE = _has_avx512() and len(os.sched_getaffinity(0)) >= 2


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(FEATURES, 2 * FEATURES)
        self.down = torch.nn.Linear(2 * FEATURES, FEATURES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def _lower_pte(model: torch.nn.Module, example: torch.Tensor, dims: dict[int, Dim]) -> bytes:
    return lower_to_pte(model, (example,), dynamic_shapes=(dims,))[0]


def _lower(model: torch.nn.Module, example: torch.Tensor, dims: dict[int, Dim]) -> Any:
    return load(_lower_pte(model, example, dims))


def _rows(size: int) -> torch.Tensor:
    return torch.randn(size, FEATURES, generator=torch.Generator().manual_seed(size))


def _new_primitives(module: Any, model: torch.nn.Module, size: int) -> tuple[int, int]:
    """(new, reused) matmul primitives of the first call at `size` (checked against eager)."""
    new_before, reused_before = loader.matmul_primitive_stats()
    assert_single_output_close(module, model, _rows(size), atol=ATOL, rtol=RTOL)
    new_after, reused_after = loader.matmul_primitive_stats()
    return new_after - new_before, reused_after - reused_before


@pytest.mark.skipif(not TILES_POSSIBLE, reason="row tiles need AVX-512 and two threads")
def test_a_new_size_makes_no_new_matmul_kernel_for_whole_tiles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ET_CPU_ROW_TILES", "1")
    torch.manual_seed(0)
    model = Mlp().eval()
    module = _lower(model, _rows(8), {0: Dim("rows", min=1, max=MAX_ROWS)})
    _new_primitives(module, model, MAX_ROWS)  # init: the graph at the bound
    for size in (64, 96, 224):  # whole tiles: the base's tile primitives serve them
        new, reused = _new_primitives(module, model, size)
        assert new == 0 and reused > 0, (size, new, reused)
    # 66 = 2 tiles + 2 rows: the 2 rows on row_gemm, which reads its rows at each run.
    new, _ = _new_primitives(module, model, 66)
    assert new == 0, new
    # 70 = 2 tiles + 6 rows: one kernel for the 6 rows per linear shape, made once ...
    new, _ = _new_primitives(module, model, 70)
    assert 0 < new <= 2, new
    # ... and reused by another size with the same remainder.
    new, _ = _new_primitives(module, model, 134)
    assert new == 0, new


@pytest.mark.skipif(not TILES_POSSIBLE, reason="row tiles need AVX-512 and two threads")
def test_without_row_tiles_a_new_size_makes_new_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    # The counter can see what the tiles save: switched off, a new row count is a new shape.
    torch.manual_seed(1)
    model = Mlp().eval()
    module = _lower(model, _rows(8), {0: Dim("rows", min=1, max=MAX_ROWS)})
    monkeypatch.setenv("ET_CPU_ROW_TILES", "0")
    _new_primitives(module, model, MAX_ROWS)
    new, _ = _new_primitives(module, model, 160)
    assert new > 0, new


@pytest.mark.skipif(not TILES_POSSIBLE, reason="row tiles need AVX-512 and two threads")
def test_a_static_program_keeps_plans_sized_for_its_one_shape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Row tiles are for graphs whose sizes vary: a static graph's linears keep the plan fastest at
    # their one row count (a 32-row tile re-reads the weights per tile). Linear shapes no other
    # test uses: a dynamic program makes their tile primitives, after which a static program of
    # 11 whole tiles would make no new primitive if it ran in tiles; its own row bands are new.
    monkeypatch.setenv("ET_CPU_ROW_TILES", "1")
    torch.manual_seed(2)
    width = 80
    model = torch.nn.Sequential(
        torch.nn.Linear(width, 2 * width), torch.nn.ReLU(), torch.nn.Linear(2 * width, width)
    ).eval()

    def rows(count: int) -> torch.Tensor:
        return torch.randn(count, width, generator=torch.Generator().manual_seed(count))

    dynamic = _lower(model, rows(8), {0: Dim("rows", min=1, max=MAX_ROWS)})
    assert_single_output_close(dynamic, model, rows(MAX_ROWS), atol=ATOL, rtol=RTOL)
    new_before, _ = loader.matmul_primitive_stats()
    static = _lower(model, rows(11 * 32), {})
    assert_single_output_close(static, model, rows(11 * 32), atol=ATOL, rtol=RTOL)
    new_after, _ = loader.matmul_primitive_stats()
    assert new_after > new_before, (new_before, new_after)


class ResidualCnn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.conv = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.head = torch.nn.Conv2d(16, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.stem(x))
        return self.head(torch.relu(self.conv(y) + y))


@functools.cache
def _decoder_case() -> tuple[torch.nn.Module, bytes, list[torch.Tensor]]:
    torch.manual_seed(0)
    model = LlamaLike(vocab=VOCAB, dim=64, depth=2, heads=2, hidden=128, max_tokens=MAX_TOKENS)
    pte = _lower_pte(
        model.eval(), torch.randint(0, VOCAB, (1, 8)), {1: Dim("tokens", min=1, max=MAX_TOKENS)}
    )
    sizes = (MAX_TOKENS, 1, 16, 45, 64, 100, 33, MAX_TOKENS)
    inputs = [
        torch.randint(0, VOCAB, (1, s), generator=torch.Generator().manual_seed(s)) for s in sizes
    ]
    return model, pte, inputs


@functools.cache
def _cnn_case() -> tuple[torch.nn.Module, bytes, list[torch.Tensor]]:
    torch.manual_seed(0)
    model = ResidualCnn().eval()
    pte = _lower_pte(model, torch.randn(2, 3, 32, 32), {0: Dim("batch", min=1, max=12)})
    batches = (12, 1, 2, 5, 8, 12)
    inputs = [
        torch.randn(b, 3, 32, 32, generator=torch.Generator().manual_seed(b)) for b in batches
    ]
    return model, pte, inputs


@pytest.mark.parametrize("value", ["1", "0"])
@pytest.mark.parametrize(
    "case, switch", [("decoder", "ET_CPU_ROW_TILES"), ("cnn", "ET_CPU_CONV_IMAGE_TILES")]
)
def test_matches_eager_at_several_sizes(
    monkeypatch: pytest.MonkeyPatch, case: str, switch: str, value: str
) -> None:
    # The decoder's linears in row tiles (the default) or not; the CNN's convolutions with one
    # single-image primitive per image (ET_CPU_CONV_IMAGE_TILES=1, off by default) or not.
    monkeypatch.setenv(switch, value)
    # Each case lowered once for both values: a new program of it reads the switch when its
    # delegate binds (the first forward).
    model, pte, inputs = _decoder_case() if case == "decoder" else _cnn_case()
    module = load(pte)
    for x in inputs:
        assert_single_output_close(module, model, x, atol=ATOL, rtol=RTOL)
