"""Our AVX-512 depthwise convolution (kernels/depthwise_conv.h) against torch, through the C ABI's
convolution plan: channels-last in and out, kernels 3x3 / 5x5 (and 7x7 / 3x5 / 1x1 on the
one-pixel path), stride 1 and 2, padding 0-2, channel counts with and without a tail, odd and
even sizes, every in-register post-op, with and without bias, split over the pool or not; and
what stays on oneDNN (the switch off, a plain input or output, dilation, a residual add).

Reference: F.conv2d in float64, the activation in float64. Tolerance 1e-5 relative (the kernel
sums at most 25 float32 products; the vector sigmoid is within 4e-6 relative).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F

from backends.cpu.runtime.providers.optimized.test.onednn_ctypes import (
    ADD,
    HARDSWISH,
    IN_REGISTER_POST_OPS,
    RELU,
    SILU,
    PostOp,
    Provider,
)
from backends.cpu.runtime.providers.optimized.test.own_conv_checks import (
    assert_close,
    conv_reference,
    run_conv,
    splitting_provider,
    vector_provider,
)

_run = functools.partial(run_conv, family="depthwise", depthwise=True)
_expected = functools.partial(conv_reference, depthwise=True)

ACTIVATIONS = IN_REGISTER_POST_OPS
NAMES = list(ACTIVATIONS)
CHANNELS = [8, 16, 24, 40, 72, 120, 528]
# (H, W): odd and even, narrower than a register block of pixels and wider than two.
SIZES = [(1, 1), (3, 2), (5, 7), (8, 6), (13, 19), (6, 24)]


@pytest.fixture(scope="module")
def provider() -> Provider:
    return vector_provider("depthwise")


@pytest.fixture(scope="module")
def splitting() -> Provider:
    return splitting_provider()


@pytest.fixture(autouse=True)
def own_depthwise_everywhere() -> Iterator[None]:
    """ET_CPU_OWN_DEPTHWISE=all: every shape the kernel covers runs on it (unset, only the
    classes where it measured faster than oneDNN's)."""
    before = os.environ.get("ET_CPU_OWN_DEPTHWISE")
    os.environ["ET_CPU_OWN_DEPTHWISE"] = "all"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("ET_CPU_OWN_DEPTHWISE", None)
        else:
            os.environ["ET_CPU_OWN_DEPTHWISE"] = before


@pytest.fixture
def own_depthwise_off(own_depthwise_everywhere: None) -> Iterator[None]:
    os.environ["ET_CPU_OWN_DEPTHWISE"] = "0"
    yield


@pytest.fixture
def own_depthwise_default(own_depthwise_everywhere: None) -> Iterator[None]:
    """ET_CPU_OWN_DEPTHWISE unset: the classes where the kernel measured faster than oneDNN's."""
    del os.environ["ET_CPU_OWN_DEPTHWISE"]
    yield


def _inputs(
    batch: int, channels: int, size: tuple[int, int], kernel: tuple[int, int], seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, channels, *size, generator=generator)
    weight = torch.randn(channels, 1, *kernel, generator=generator) / (kernel[0] * kernel[1]) ** 0.5
    bias = torch.randn(channels, generator=generator)
    return x.contiguous(memory_format=torch.channels_last), weight, bias


@pytest.mark.parametrize("channels", CHANNELS)
@pytest.mark.parametrize("padding", [0, 1, 2])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("kernel", [3, 5])
def test_against_torch(
    provider: Provider, kernel: int, stride: int, padding: int, channels: int
) -> None:
    """Every size; the activations and bias / no bias take turns across sizes and cases."""
    case = kernel * 100 + stride * 10 + padding + channels
    for i, size in enumerate(SIZES):
        if min(size) + 2 * padding < kernel:
            continue  # torch: an empty output
        name = NAMES[(case + i) % len(NAMES)]
        post_ops, activation = ACTIVATIONS[name]
        x, weight, bias = _inputs(1, channels, size, (kernel, kernel), case + i)
        use_bias = bias if (case + i) % 2 else None
        actual = _run(provider, x, weight, use_bias, stride, padding, post_ops)
        expected = _expected(x, weight, use_bias, stride, padding, activation)
        try:
            assert_close(actual, expected)
        except AssertionError as error:
            raise AssertionError(f"size {size}, {name}, bias {use_bias is not None}") from error


@pytest.mark.parametrize("use_bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("kernel", "stride"), [(3, 1), (3, 2), (5, 1), (5, 2)])
def test_every_activation(
    provider: Provider, kernel: int, stride: int, name: str, use_bias: bool
) -> None:
    post_ops, activation = ACTIVATIONS[name]
    padding = kernel // 2
    x, weight, bias = _inputs(1, 40, (11, 20), (kernel, kernel), kernel + stride)
    x = x * 4.0  # reach both sides of every activation's bends
    actual = _run(provider, x, weight, bias if use_bias else None, stride, padding, post_ops)
    expected = _expected(x, weight, bias if use_bias else None, stride, padding, activation)
    assert_close(actual, expected)


@pytest.mark.parametrize(
    ("kernel", "stride", "padding"),
    [
        ((7, 7), 1, 3),
        ((7, 7), 2, 3),
        ((3, 5), 1, 1),
        ((1, 1), 1, 0),
        ((3, 3), 3, 1),
        ((4, 4), 1, 2),
    ],
    ids=["7x7", "7x7_s2", "3x5", "1x1", "3x3_s3", "4x4_even"],
)
def test_other_kernels(
    provider: Provider, kernel: tuple[int, int], stride: int, padding: int
) -> None:
    """Kernel widths and strides with and without a specialization (the one-pixel path)."""
    x, weight, bias = _inputs(1, 24, (9, 18), kernel, 7)
    plan = provider.conv(
        list(x.shape),
        weight,
        bias,
        [stride, stride],
        [padding, padding],
        [1, 1],
        groups=24,
        post_ops=[PostOp(RELU)],
        input_channels_last=True,
        output="channels_last",
    )
    assert plan.describe().startswith("depthwise:avx512")
    expected = torch.relu(
        F.conv2d(
            x.double(), weight.double(), bias.double(), stride=stride, padding=padding, groups=24
        )
    ).float()
    assert_close(plan.run(x), expected)


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("output", ["channels_last", "best"])
def test_split_over_the_pool(splitting: Provider, batch: int, output: str) -> None:
    """Row slices that cross image boundaries (batch 3, min_task_flops=0)."""
    if not splitting.has_vector_activation(SILU):
        pytest.skip("no AVX-512F")
    x, weight, bias = _inputs(batch, 72, (15, 15), (5, 5), batch)
    plan = splitting.conv(
        list(x.shape),
        weight,
        bias,
        [1, 1],
        [2, 2],
        [1, 1],
        groups=72,
        post_ops=[PostOp(SILU)],
        input_channels_last=True,
        output=output,
    )
    assert plan.describe().startswith("depthwise:avx512")
    assert plan.pieces > 1
    assert plan.output_is_channels_last
    assert_close(plan.run(x), _expected(x, weight, bias, 1, 2, F.silu))


def test_mobile_shapes(provider: Provider) -> None:
    """The classes of MobileNetV2/V3 and EfficientNet (smaller spatially, same channels)."""
    for channels, size, kernel, stride in [
        (96, 24, 3, 2),
        (144, 14, 3, 1),
        (240, 10, 5, 1),
        (528, 14, 5, 1),
        (480, 14, 3, 1),
        (960, 7, 3, 1),
        (672, 14, 5, 2),
    ]:
        x, weight, bias = _inputs(1, channels, (size, size), (kernel, kernel), channels)
        padding = kernel // 2
        actual = _run(provider, x, weight, bias, stride, padding, [PostOp(HARDSWISH)])
        assert_close(actual, _expected(x, weight, bias, stride, padding, F.hardswish))


@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "own"),
    [
        ((3, 3), (1, 1), (1, 1), True),
        ((3, 3), (2, 2), (1, 1), True),
        ((5, 5), (1, 1), (2, 2), True),
        ((5, 5), (2, 2), (2, 2), True),
        ((3, 3), (2, 1), (0, 1), True),
        ((5, 5), (1, 2), (2, 1), True),
        ((7, 7), (1, 1), (3, 3), False),
        ((3, 5), (1, 1), (1, 2), False),
        ((3, 3), (3, 3), (1, 1), False),
        ((1, 1), (1, 1), (0, 0), False),
    ],
    ids=["3x3", "3x3_s2", "5x5", "5x5_s2", "3x3_s21", "5x5_s12", "7x7", "3x5", "3x3_s3", "1x1"],
)
@pytest.mark.parametrize("batch", [1, 8])
def test_default_takes_the_blocked_classes(
    provider: Provider,
    own_depthwise_default: None,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    own: bool,
    batch: int,
) -> None:
    """Unset switch: square 3x3 / 5x5 at stride 1 or 2 (either way) on ours, with ReLU6,
    hardswish and SiLU as the mobile networks fuse them; every other kernel on oneDNN's."""
    for name, (post_ops, activation) in [
        ("relu6", ACTIVATIONS["relu6"]),
        ("hardswish", ACTIVATIONS["hardswish"]),
        ("silu", ACTIVATIONS["silu"]),
    ]:
        x, weight, bias = _inputs(batch, 40, (13, 10), kernel, batch + len(name))
        plan = provider.conv(
            list(x.shape),
            weight,
            bias,
            list(stride),
            list(padding),
            [1, 1],
            groups=40,
            post_ops=post_ops,
            input_channels_last=True,
            output="channels_last",
        )
        assert plan.describe().startswith("depthwise:avx512") == own, plan.describe()
        expected = activation(
            F.conv2d(
                x.double(),
                weight.double(),
                bias.double(),
                stride=stride,
                padding=padding,
                groups=40,
            )
        ).float()
        assert_close(plan.run(x), expected)


def test_silu_fast_by_default_exact_division_when_switched_off(
    provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SiLU epilogue runs silu16_fast (rcp14 and a Newton step) unless
    ET_CPU_DEPTHWISE_FAST_SILU=0 (read when the kernel is made: silu16's division); both match
    torch, and they are not the same bits (the switch reaches the kernel)."""
    post_ops, activation = ACTIVATIONS["silu"]
    x, weight, bias = _inputs(1, 40, (11, 20), (3, 3), 7)
    x = x * 4.0
    monkeypatch.delenv("ET_CPU_DEPTHWISE_FAST_SILU", raising=False)
    fast = _run(provider, x, weight, bias, 1, 1, post_ops)
    monkeypatch.setenv("ET_CPU_DEPTHWISE_FAST_SILU", "0")
    exact = _run(provider, x, weight, bias, 1, 1, post_ops)
    expected = _expected(x, weight, bias, 1, 1, activation)
    assert_close(fast, expected)
    assert_close(exact, expected)
    assert not torch.equal(fast, exact)


def test_switch_off_keeps_onednn(provider: Provider, own_depthwise_off: None) -> None:
    x, weight, bias = _inputs(1, 40, (9, 9), (3, 3), 1)
    actual = _run(provider, x, weight, bias, 1, 1, [PostOp(RELU)], own=False)
    assert_close(actual, _expected(x, weight, bias, 1, 1, torch.relu))


def test_what_stays_on_onednn(provider: Provider) -> None:
    x, weight, bias = _inputs(1, 40, (9, 9), (3, 3), 2)
    relu = [PostOp(RELU)]
    expected = _expected(x, weight, bias, 1, 1, torch.relu)
    # A plain input or a plain output: oneDNN (its staging reorders).
    assert_close(_run(provider, x, weight, bias, 1, 1, relu, own=False, output="plain"), expected)
    assert_close(
        _run(provider, x, weight, bias, 1, 1, relu, own=False, input_channels_last=False),
        expected,
    )
    # Dilation 2.
    dilated = _run(provider, x, weight, bias, 1, 2, relu, own=False, dilation=2)
    expected_dilated = torch.relu(
        F.conv2d(x.double(), weight.double(), bias.double(), padding=2, dilation=2, groups=40)
    ).float()
    assert_close(dilated, expected_dilated)
    # A residual add.
    plan = provider.conv(
        list(x.shape),
        weight,
        bias,
        [1, 1],
        [1, 1],
        [1, 1],
        groups=40,
        post_ops=[PostOp(ADD)],
        input_channels_last=True,
        output="channels_last",
    )
    assert not plan.describe().startswith("depthwise:avx512")
    residual = torch.randn(1, 40, 9, 9).contiguous(memory_format=torch.channels_last)
    expected_sum = _expected(x, weight, bias, 1, 1, lambda y: y) + residual
    torch.testing.assert_close(plan.run(x, residual=residual), expected_sum, rtol=1e-4, atol=1e-4)
