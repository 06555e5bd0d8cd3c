"""Issue 47: the first call at a new size compiles a graph for it (a shape plan) that reuses the
weights its base graph (planned at the upper bounds) prepared: oneDNN reorders and packings are
found in the delegate's weight cache, not made again, and the results still match eager at the
smallest, the largest and a size between. A MobileNetV3-style CNN (fused inverted residual
blocks, prepared once at finalize in a shape plan) with a dynamic batch, and a Llama-style decoder
(linears) with a dynamic sequence length, both from the documented plain `to_executorch()` flow.
"""

import os
from typing import Any

# The shape plans: a graph that resizes in place (the default, resize_in_place_test) compiles none.
os.environ["ET_CPU_RESIZE_IN_PLACE"] = "0"

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.extension.pybindings import portable_lib
from torch.export import Dim

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import assert_single_output_close
from tools.bench.zoo import MobileNetV3Like
from tools.bench.zoo_sequence import LlamaLike

ATOL = 1e-4
RTOL = 1e-4
MAX_BATCH = 16
MAX_TOKENS = 64
IMAGE = (3, 32, 32)
VOCAB = 64


def _lower(model: torch.nn.Module, example: torch.Tensor, dims: dict[int, Dim]) -> bytes:
    exported = torch.export.export(model, (example,), dynamic_shapes=(dims,))
    partitioner = CpuPartitioner()
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    assert partitioner.report.left_out == (), partitioner.report
    return bytes(edge.to_executorch().buffer)


def _cnn() -> tuple[torch.nn.Module, bytes]:
    torch.manual_seed(0)
    model = MobileNetV3Like(width=0.5, blocks=5, head=64, classes=10).eval()
    batch = Dim("batch", min=1, max=MAX_BATCH)
    return model, _lower(model, torch.randn(2, *IMAGE), {0: batch})


def _decoder() -> tuple[torch.nn.Module, bytes]:
    torch.manual_seed(0)
    model = LlamaLike(vocab=VOCAB, dim=64, depth=2, heads=2, hidden=128, max_tokens=MAX_TOKENS)
    tokens = Dim("tokens", min=1, max=MAX_TOKENS)
    return model.eval(), _lower(model.eval(), torch.randint(0, VOCAB, (1, 8)), {1: tokens})


@pytest.fixture(scope="module")
def programs() -> dict[str, tuple[torch.nn.Module, bytes]]:
    loader.load_cpu_backend()
    return {"cnn": _cnn(), "decoder": _decoder()}


def _input(name: str, size: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(size)
    if name == "cnn":
        return torch.randn(size, *IMAGE, generator=generator)
    return torch.randint(0, VOCAB, (1, size), generator=generator)


def _check(module: Any, model: torch.nn.Module, x: torch.Tensor) -> None:
    assert_single_output_close(module, model, x, atol=ATOL, rtol=RTOL)


def _made_at_new_sizes(
    name: str, model: torch.nn.Module, pte: bytes, sizes: tuple[int, ...]
) -> tuple[int, int, int]:
    """Bytes of weights prepared by init (plus the first call, at the bound), then by the first
    calls at `sizes` (each a new size: one shape-plan miss each), and the cache hits of those."""
    largest = MAX_BATCH if name == "cnn" else MAX_TOKENS
    _, _, before_init = loader.weight_cache_stats()
    module = portable_lib._load_for_executorch_from_buffer(pte)
    _check(module, model, _input(name, largest))  # init: the graph for the upper bounds
    hits_before, _, after_init = loader.weight_cache_stats()
    _, misses_before = loader.shape_plan_stats()
    for size in sizes:
        _check(module, model, _input(name, size))
        _check(module, model, _input(name, size))  # the cached shape plan
    hits_after, _, after_sizes = loader.weight_cache_stats()
    _, misses_after = loader.shape_plan_stats()
    assert misses_after - misses_before == len(sizes)
    del module
    return after_init - before_init, after_sizes - after_init, hits_after - hits_before


@pytest.mark.parametrize("name", ["cnn", "decoder"])
def test_a_new_size_reuses_the_prepared_weights_and_matches_eager(
    programs: dict[str, tuple[torch.nn.Module, bytes]], name: str
) -> None:
    model, pte = programs[name]
    between = (7, 12) if name == "cnn" else (23, 45)
    at_init, at_sizes, hits = _made_at_new_sizes(name, model, pte, between)
    weights = sum(p.numel() * 4 for p in model.parameters())
    assert at_init >= weights // 2, (at_init, weights)  # the counter sees the prepared weights
    # Two new sizes compiled, on the same kernels as the base: every reordered weight is the
    # base's (found in the weight cache), none made again.
    assert hits > 0
    assert at_sizes == 0, (at_sizes, at_init)


@pytest.mark.parametrize("name", ["cnn", "decoder"])
def test_the_smallest_size_prepares_at_most_one_more_copy(
    programs: dict[str, tuple[torch.nn.Module, bytes]], name: str
) -> None:
    # One row (a batch of 1, one token): linears run on RowGemm, which packs its own copy of
    # their weights once (the convolutions still take the base's). Never more than that.
    model, pte = programs[name]
    at_init, at_sizes, hits = _made_at_new_sizes(name, model, pte, (1,))
    linears = sum(
        m.weight.numel() * 4 + (m.bias.numel() * 4 if m.bias is not None else 0)
        for m in model.modules()
        if isinstance(m, torch.nn.Linear)
    )
    assert at_sizes <= linears + 4096 * 16, (at_sizes, linears, at_init)
    if name == "cnn":
        assert hits > 0  # the convolutions' weights


def test_without_the_weight_cache_a_new_size_prepares_its_weights_again(
    programs: dict[str, tuple[torch.nn.Module, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The contrast that shows what the counter measures (ET_CPU_WEIGHT_CACHE is read at init).
    monkeypatch.setenv("ET_CPU_WEIGHT_CACHE", "0")
    model, pte = programs["decoder"]
    at_init, at_sizes, hits = _made_at_new_sizes("decoder", model, pte, (1, 23))
    assert hits == 0
    assert at_sizes >= at_init, (at_sizes, at_init)


def test_shape_plans_prepared_at_bind_too_match_eager(
    programs: dict[str, tuple[torch.nn.Module, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # ET_CPU_SHAPE_PLAN_DEFER=0: a new size's kernels (fused blocks included) prepared at bind
    # and again at finalize, as before the deferral.
    monkeypatch.setenv("ET_CPU_SHAPE_PLAN_DEFER", "0")
    model, pte = programs["cnn"]
    module = portable_lib._load_for_executorch_from_buffer(pte)
    for size in (MAX_BATCH, 1, 9, MAX_BATCH):
        _check(module, model, _input("cnn", size))
