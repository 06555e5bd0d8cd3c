"""Our float32 1x1 kernel (kernels/pointwise_conv.h, BlockPlan's expand stage) against a float64
reference, through the C ABI: few input channels, output channels with and without a 16-channel
tail and one column group or several, pixel counts with and without whole tiles, every in-register
post-op chain, and the ET_CPU_OWN_EXPAND=0 switch.

Tolerance: 1e-4 relative and absolute (float32 sums of at most 72 products).
"""

from __future__ import annotations

import math

import pytest
import torch

from backends.cpu.runtime.providers.optimized.test.onednn_ctypes import (
    ADD,
    IN_REGISTER_POST_OPS,
    SILU,
    PostOp,
    Provider,
)


@pytest.fixture(scope="module")
def provider() -> Provider:
    provider = Provider(num_threads=1)
    if not provider.has_vector_activation(SILU):
        pytest.skip("no AVX-512F on this CPU: the expand stays on oneDNN")
    return provider


def _run(provider: Provider, pixels: int, k: int, n: int, act: str, bias: bool, seed: int) -> None:
    post_ops, reference = IN_REGISTER_POST_OPS[act]
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(pixels, k, generator=generator)
    weight = torch.randn(n, k, generator=generator) * (2.0 / math.sqrt(k))
    b = torch.randn(n, generator=generator) if bias else None
    result = provider.pointwise_conv(x, weight, b, post_ops)
    assert result is not None
    got, _ = result
    want = x.double() @ weight.double().t()
    if b is not None:
        want = want + b.double()
    torch.testing.assert_close(got, reference(want).float(), rtol=1e-4, atol=1e-4)


# K, N: 16-multiples of one, two (96 = 64 + 32) and four column groups; tails of 8 and 4
# channels in a 1-, 2-, 3- and 4-vector last group.
@pytest.mark.parametrize(
    ("k", "n"),
    [(8, 48), (16, 96), (24, 144), (40, 240), (16, 72), (24, 88), (40, 120), (8, 36), (72, 200)],
    ids=lambda v: str(v),
)
@pytest.mark.parametrize("act", ["none", "relu6", "hardswish", "silu"])
def test_pointwise_kernel_matches_float64(provider: Provider, k: int, n: int, act: str) -> None:
    # 53 pixels: a chunk of 48 and 5 more, none of them a whole 6-, 8- or 12-pixel tile.
    _run(provider, 53, k, n, act, bias=True, seed=k * 1000 + n)


@pytest.mark.parametrize("pixels", [1, 5, 6, 12, 47, 48, 96, 100])
@pytest.mark.parametrize("act", sorted(IN_REGISTER_POST_OPS))
def test_pointwise_kernel_every_tile_split_and_post_op(
    provider: Provider, pixels: int, act: str
) -> None:
    # 130 = 64 + 64 + 2: two whole groups and a one-vector group with a 2-channel tail.
    _run(provider, pixels, 16, 130, act, bias=pixels % 2 == 0, seed=pixels)


def test_switch_off_declines(provider: Provider, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ET_CPU_OWN_EXPAND", "0")
    assert provider.pointwise_conv(torch.randn(4, 8), torch.randn(16, 8), None) is None


def test_residual_add_is_not_taken(provider: Provider) -> None:
    # The expand never adds: a residual post-op is the kernel's to decline.
    x, weight = torch.randn(4, 8), torch.randn(16, 8)
    assert provider.pointwise_conv(x, weight, None, [PostOp(ADD)]) is None
