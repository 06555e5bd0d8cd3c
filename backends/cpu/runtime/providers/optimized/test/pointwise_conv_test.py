"""Our float32 1x1 kernel (kernels/pointwise_conv.h, BlockPlan's expand stage) against a float64
reference, through the C ABI: few input channels, output channels with and without a 16-channel
tail and one column group or several, pixel counts with and without whole tiles, every in-register
post-op chain, the ET_CPU_OWN_EXPAND=0 switch and ET_CPU_POINTWISE_WIDE_TAIL both ways (the same
bits). Then its weight stream (run_stream) as prepare_conv runs a weight-heavy 1x1 convolution on
it, on 2 threads, against eager torch's conv2d in float64: stride 1 and 2, a residual add before
or after the activation, inlined hardswish and SiLU, an odd count of column groups shared in half
groups, and both values of ET_CPU_STREAM_1X1 and of ET_CPU_STREAM_TILE_FIT (which must change no
bits). Last, ET_CPU_EVEN_SHARES both ways: a partial last column group shared in equal shares of
the work (the same bits) and 3 pieces on 2 threads rounded down to 2 (the same values). Then
the 1x1s split by pixels (ET_CPU_POINTWISE_BY_PIXELS unset, "0" and "all"; the residual added
in place) against float64 eager.

Tolerance: 1e-4 relative and absolute (float32 sums of at most 72 products; 2e-4 for the
stream's sums of up to 160; 5e-4 for the pixel split's sums of up to 512).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from backends.cpu.runtime.providers.optimized.test.onednn_ctypes import (
    ADD,
    IN_REGISTER_POST_OPS,
    RELU,
    SILU,
    Plan,
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


# A one-vector last group after a full one (N = 64 g + 1 to 16) joins it in 4-pixel x 5-vector
# tiles; 40 -> 200 (64 x 3 + 8) and 16 -> 96 (a 2-vector last group) keep their own tiles.
@pytest.mark.parametrize(
    ("k", "n"), [(16, 72), (24, 80), (24, 144), (16, 130), (40, 200), (16, 96)]
)
@pytest.mark.parametrize("pixels", [1, 3, 4, 7, 53, 100])
def test_wide_tail_tiles_change_no_bits(
    provider: Provider, monkeypatch: pytest.MonkeyPatch, k: int, n: int, pixels: int
) -> None:
    generator = torch.Generator().manual_seed(k * 100 + n + pixels)
    x = torch.randn(pixels, k, generator=generator)
    weight = torch.randn(n, k, generator=generator) * (2.0 / math.sqrt(k))
    bias = torch.randn(n, generator=generator)
    post_ops, reference = IN_REGISTER_POST_OPS["hardswish"]
    results = {}
    for switch in ("1", "0"):
        monkeypatch.setenv("ET_CPU_POINTWISE_WIDE_TAIL", switch)
        result = provider.pointwise_conv(x, weight, bias, post_ops)
        assert result is not None
        results[switch] = result[0]
    want = reference(x.double() @ weight.double().t() + bias.double()).float()
    torch.testing.assert_close(results["1"], want, rtol=1e-4, atol=1e-4)
    # The same products in the same order per lane: the tiling changes no bits.
    assert torch.equal(results["1"], results["0"])


def test_switch_off_declines(provider: Provider, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ET_CPU_OWN_EXPAND", "0")
    assert provider.pointwise_conv(torch.randn(4, 8), torch.randn(16, 8), None) is None


def test_residual_add_is_not_taken(provider: Provider) -> None:
    # The expand never adds: a residual post-op is the kernel's to decline.
    x, weight = torch.randn(4, 8), torch.randn(16, 8)
    assert provider.pointwise_conv(x, weight, None, [PostOp(ADD)]) is None


@pytest.fixture(scope="module")
def two_threads() -> Provider:
    return Provider(num_threads=2)


# Weight-heavy shapes (weights > input + output): 8 groups and an 8-channel tail at 7x7 (49
# pixels: 8 whole tiles and one single; 9 groups on 2 threads: shared in half groups), 4 groups
# from a stride-2 gather, 2 groups of 1 and 4 vectors at 3x3.
STREAM_SHAPES = [(96, 520, 7, 1), (160, 256, 6, 2), (128, 80, 3, 1)]
# The post-ops with the add first (inlined add + ReLU / SiLU), alone, after the activation
# (generic), an inlined hardswish.
STREAM_POST_OPS = {
    "add_relu": ([PostOp(ADD), PostOp(RELU)], lambda y, r: (y + r).relu()),
    "add_silu": ([PostOp(ADD), PostOp(SILU)], lambda y, r: F.silu(y + r)),
    "hardswish": (IN_REGISTER_POST_OPS["hardswish"][0], lambda y, r: F.hardswish(y)),
    "add": ([PostOp(ADD)], lambda y, r: y + r),
    "hardswish_add": (
        [IN_REGISTER_POST_OPS["hardswish"][0][0], PostOp(ADD)],
        lambda y, r: torch.nn.functional.hardswish(y) + r,
    ),
    "relu": ([PostOp(RELU)], lambda y, r: y.relu()),
}


def _channels_last_1x1(
    provider: Provider,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    stride: int,
    post_ops: list[PostOp],
) -> Plan:
    """A 1x1 convolution plan, channels-last in and out, no padding."""
    return provider.conv(
        list(x.shape),
        weight,
        bias,
        [stride, stride],
        [0, 0],
        [1, 1],
        post_ops=post_ops,
        input_channels_last=True,
        output="channels_last",
    )


@pytest.mark.parametrize(("cin", "cout", "size", "stride"), STREAM_SHAPES, ids=str)
@pytest.mark.parametrize("post", sorted(STREAM_POST_OPS))
@pytest.mark.parametrize("switch", ["1", "0"])
def test_weight_stream_conv_matches_eager(
    two_threads: Provider,
    monkeypatch: pytest.MonkeyPatch,
    cin: int,
    cout: int,
    size: int,
    stride: int,
    post: str,
    switch: str,
) -> None:
    monkeypatch.setenv("ET_CPU_STREAM_1X1", switch)
    post_ops, reference = STREAM_POST_OPS[post]
    generator = torch.Generator().manual_seed(cin + cout + size)
    x = torch.randn(1, cin, size, size, generator=generator)
    x = x.contiguous(memory_format=torch.channels_last)
    weight = torch.randn(cout, cin, 1, 1, generator=generator) * (2.0 / math.sqrt(cin))
    bias = torch.randn(cout, generator=generator)
    plan = _channels_last_1x1(two_threads, x, weight, bias, stride, post_ops)
    assert ("pointwise_stream" in plan.describe()) == (switch == "1"), plan.describe()
    out = plan.new_output()
    residual = torch.randn(out.shape, generator=generator)
    residual = residual.contiguous(memory_format=torch.channels_last)
    has_add = any(op.kind == ADD for op in post_ops)
    plan.run_into(out, x, residual=residual if has_add else None)
    want = F.conv2d(x.double(), weight.double(), bias.double(), stride=stride)
    torch.testing.assert_close(
        out, reference(want, residual.double()).float(), rtol=2e-4, atol=2e-4
    )


def test_weight_stream_tile_fit_changes_no_bits(
    two_threads: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MobileNetV3's last 1x1 kind: 9 column groups on 2 threads in half groups, hardswish
    # inlined; ET_CPU_STREAM_TILE_FIT=0 runs whole groups through the generic epilogue.
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(1, 96, 7, 7, generator=generator).contiguous(memory_format=torch.channels_last)
    weight = torch.randn(520, 96, 1, 1, generator=generator) * (2.0 / math.sqrt(96))
    bias = torch.randn(520, generator=generator)
    outs = []
    for switch in ["1", "0"]:
        monkeypatch.setenv("ET_CPU_STREAM_TILE_FIT", switch)
        plan = _channels_last_1x1(
            two_threads, x, weight, bias, 1, IN_REGISTER_POST_OPS["hardswish"][0]
        )
        assert ("in half groups" in plan.describe()) == (switch == "1"), plan.describe()
        out = plan.new_output()
        plan.run_into(out, x)
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    want = F.hardswish(F.conv2d(x.double(), weight.double(), bias.double()))
    torch.testing.assert_close(outs[0], want.float(), rtol=2e-4, atol=2e-4)


def test_weight_stream_leaves_activation_heavy_convs(two_threads: Provider) -> None:
    # 64 -> 64 at 14x14: activations outweigh the weights, so oneDNN keeps it by default.
    plan = two_threads.conv(
        [1, 64, 14, 14],
        torch.randn(64, 64, 1, 1),
        None,
        [1, 1],
        [0, 0],
        [1, 1],
        input_channels_last=True,
        output="channels_last",
    )
    assert "pointwise_stream" not in plan.describe()


def test_weight_stream_equal_shares_of_unequal_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    # MobileNetV3's 576 -> 96 projection at 7x7 with its residual add: one column group of 4
    # vectors and one of 2. With ET_CPU_EVEN_SHARES (default) each thread takes half the
    # vectors x pixels (the first group cut at pixel 36); "0" gives one thread a group each
    # (2:1). The same bits either way, and float64 eager's values.
    generator = torch.Generator().manual_seed(11)
    x = torch.randn(1, 576, 7, 7, generator=generator).contiguous(memory_format=torch.channels_last)
    weight = torch.randn(96, 576, 1, 1, generator=generator) * (2.0 / math.sqrt(576))
    bias = torch.randn(96, generator=generator)
    residual = torch.randn(1, 96, 7, 7, generator=generator)
    residual = residual.contiguous(memory_format=torch.channels_last)
    outs = []
    for switch in ["1", "0"]:
        monkeypatch.setenv("ET_CPU_EVEN_SHARES", switch)
        provider = Provider(num_threads=2)  # the switch is read when the Provider is made
        plan = _channels_last_1x1(provider, x, weight, bias, 1, [PostOp(ADD)])
        described = plan.describe()
        assert "pointwise_stream" in described and plan.pieces == 2, described
        assert ("in equal shares of unequal groups" in described) == (switch == "1"), described
        out = plan.new_output()
        plan.run_into(out, x, residual=residual)
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    want = F.conv2d(x.double(), weight.double(), bias.double()) + residual.double()
    torch.testing.assert_close(outs[0], want.float(), rtol=2e-4, atol=2e-4)


def test_even_shares_round_three_pieces_down_to_two(monkeypatch: pytest.MonkeyPatch) -> None:
    # 240 -> 40 at 14x14 (MobileNetV3's folded-gate projections): 3.8 MFLOP, 3 pieces of the
    # default 1 MFLOP on 2 threads, one thread running 2 of them; ET_CPU_EVEN_SHARES (default)
    # makes it 2. The same values either way (float64 eager's).
    generator = torch.Generator().manual_seed(12)
    x = torch.randn(1, 240, 14, 14, generator=generator)
    x = x.contiguous(memory_format=torch.channels_last)
    weight = torch.randn(40, 240, 1, 1, generator=generator) * (2.0 / math.sqrt(240))
    bias = torch.randn(40, generator=generator)
    want = F.conv2d(x.double(), weight.double(), bias.double()).float()
    pieces = {}
    for switch in ["1", "0"]:
        monkeypatch.setenv("ET_CPU_EVEN_SHARES", switch)
        provider = Provider(num_threads=2)
        plan = _channels_last_1x1(provider, x, weight, bias, 1, [])
        pieces[switch] = plan.pieces
        out = plan.new_output()
        plan.run_into(out, x)
        torch.testing.assert_close(out, want, rtol=2e-4, atol=2e-4)
    assert pieces == {"1": 2, "0": 3}, pieces


# ResNet-50-style stage-3 1x1s at 14x14 (weights 0.52 of the activations: split by pixels by
# default) with ReLU, and with the residual added in place (the output buffer holds the
# residual, as the runtime's "adds in place"); a 64 -> 256 1x1 at 28x28 (weights 0.07 of the
# activations), which the default leaves on oneDNN. Sums of up to 512 products: 5e-4 relative
# and absolute against float64.
PIXEL_SHAPES = [(512, 128, 14, "relu", True), (128, 512, 14, "add_relu", True)]
PIXEL_SHAPES += [(64, 256, 28, "add_relu", False)]


@pytest.mark.parametrize(("cin", "cout", "size", "post", "default"), PIXEL_SHAPES, ids=str)
@pytest.mark.parametrize("switch", ["", "0", "all"])
def test_pixel_split_conv_matches_eager(
    two_threads: Provider,
    monkeypatch: pytest.MonkeyPatch,
    cin: int,
    cout: int,
    size: int,
    post: str,
    default: bool,
    switch: str,
) -> None:
    monkeypatch.setenv("ET_CPU_POINTWISE_BY_PIXELS", switch)
    post_ops, reference = STREAM_POST_OPS[post]
    generator = torch.Generator().manual_seed(cin + 3 * cout + size)
    x = torch.randn(1, cin, size, size, generator=generator)
    x = x.contiguous(memory_format=torch.channels_last)
    weight = torch.randn(cout, cin, 1, 1, generator=generator) * (2.0 / math.sqrt(cin))
    bias = torch.randn(cout, generator=generator)
    plan = _channels_last_1x1(two_threads, x, weight, bias, 1, post_ops)
    described = plan.describe()
    wanted = switch == "all" or (switch == "" and default)
    assert ("pointwise_by_pixels" in described) == wanted, described
    if wanted:
        assert plan.pieces == 2, described
    residual = torch.randn(1, cout, size, size, generator=generator)
    residual = residual.contiguous(memory_format=torch.channels_last)
    out = plan.new_output()
    has_add = any(op.kind == ADD for op in post_ops)
    out.copy_(residual)
    plan.run_into(out, x, residual=out if has_add else None)
    want = F.conv2d(x.double(), weight.double(), bias.double())
    torch.testing.assert_close(
        out, reference(want, residual.double()).float(), rtol=5e-4, atol=5e-4
    )
