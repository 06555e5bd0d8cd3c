"""Our AVX-512 stem convolution (kernels/stem_conv.h) against torch, through the C ABI's
convolution plan: 1 to 4 input channels, plain or channels-last input, channels-last output;
kernels 3x3 / 5x5 / 7x7 (and 3x5, 1x1), strides 1 to 3, padding 0-3, output channel counts with
and without a tail and with several chunks of vectors, odd and even sizes (narrower than a block
of pixels and wider than two), every in-register post-op, with and without bias, batch 1 and 3,
split over the pool or not; ResNet's 7x7 stride 2 stem on ours and oneDNN's; the default's
class; what stays on oneDNN (the switch off, a plain output, dilation, a residual add, more than
4 input channels, groups).

Reference: F.conv2d in float64, the activation in float64. Tolerance 1e-5 relative and absolute
(the kernel sums at most 7 x 7 x 4 = 196 float32 products of weights scaled by 1/sqrt(fan-in);
the vector sigmoid is within 4e-6 relative).
"""

from __future__ import annotations

import functools
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

_run = functools.partial(run_conv, family="stem")
_expected = conv_reference

ACTIVATIONS = IN_REGISTER_POST_OPS
NAMES = list(ACTIVATIONS)
# Output channels: one vector, a tail, two (MobileNetV2's 32), a tail after two, a chunk of four
# and one more vector, and a tail after that.
OUT_CHANNELS = [16, 8, 32, 40, 80, 72]
SIZES = [(1, 1), (5, 7), (8, 6), (13, 19), (30, 33)]


@pytest.fixture(scope="module")
def provider() -> Provider:
    return vector_provider("stem")


@pytest.fixture(scope="module")
def splitting() -> Provider:
    return splitting_provider()


@pytest.fixture(autouse=True)
def own_stem_everywhere(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """ET_CPU_OWN_STEM=all: every shape the kernel covers runs on it."""
    monkeypatch.setenv("ET_CPU_OWN_STEM", "all")
    yield


def _inputs(
    batch: int, c_in: int, c_out: int, size: tuple[int, int], kernel: tuple[int, int], seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, c_in, *size, generator=generator)
    fan_in = c_in * kernel[0] * kernel[1]
    weight = torch.randn(c_out, c_in, *kernel, generator=generator) / fan_in**0.5
    bias = torch.randn(c_out, generator=generator)
    return x, weight, bias


@pytest.mark.parametrize("channels_last_input", [True, False], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("c_in", [1, 2, 3, 4])
@pytest.mark.parametrize(("kernel", "stride"), [(3, 1), (3, 2), (5, 2), (7, 2), (3, 3)])
def test_against_torch(
    provider: Provider, kernel: int, stride: int, c_in: int, channels_last_input: bool
) -> None:
    """Every size, output channel count and padding 0 to kernel // 2; the activations and bias /
    no bias take turns across the cases."""
    case = kernel * 100 + stride * 10 + c_in
    for i, size in enumerate(SIZES):
        for j, c_out in enumerate(OUT_CHANNELS):
            padding = (i + j) % (kernel // 2 + 1)
            if min(size) + 2 * padding < kernel:
                continue  # torch: an empty output
            n = case + i * len(OUT_CHANNELS) + j
            name = NAMES[n % len(NAMES)]
            post_ops, activation = ACTIVATIONS[name]
            x, weight, bias = _inputs(1, c_in, c_out, size, (kernel, kernel), n)
            use_bias = bias if n % 2 else None
            actual = _run(
                provider, x, weight, use_bias, stride, padding, post_ops, channels_last_input
            )
            expected = _expected(x, weight, use_bias, stride, padding, activation)
            try:
                assert_close(actual, expected)
            except AssertionError as error:
                raise AssertionError(
                    f"size {size}, c_out {c_out}, padding {padding}, {name}, "
                    f"bias {use_bias is not None}"
                ) from error


@pytest.mark.parametrize("use_bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("name", NAMES)
def test_every_activation(provider: Provider, name: str, use_bias: bool) -> None:
    """The mobile stem (3 -> 16 and 3 -> 32, 3x3 stride 2, padding 1) with every post-op,
    inputs scaled to reach both sides of every activation's bends."""
    post_ops, activation = ACTIVATIONS[name]
    for c_out, channels_last_input in [(16, False), (32, True)]:
        x, weight, bias = _inputs(1, 3, c_out, (40, 38), (3, 3), c_out)
        x = x * 4.0
        b = bias if use_bias else None
        actual = _run(provider, x, weight, b, 2, 1, post_ops, channels_last_input)
        assert_close(actual, _expected(x, weight, b, 2, 1, activation))


@pytest.mark.parametrize(
    ("kernel", "stride", "padding"),
    [((3, 5), (1, 2), (1, 2)), ((5, 3), (2, 1), (0, 1)), ((1, 1), (1, 1), (0, 0))],
    ids=["3x5", "5x3", "1x1"],
)
def test_unequal_kernels_and_strides(
    provider: Provider,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
) -> None:
    x, weight, bias = _inputs(2, 3, 24, (17, 22), kernel, 5)
    plan = provider.conv(
        list(x.shape),
        weight,
        bias,
        list(stride),
        list(padding),
        [1, 1],
        post_ops=[PostOp(HARDSWISH)],
        input_channels_last=False,
        output="channels_last",
    )
    assert plan.describe().startswith("stem:avx512"), plan.describe()
    y = F.conv2d(x.double(), weight.double(), bias.double(), stride=stride, padding=padding)
    assert_close(plan.run(x), F.hardswish(y).float())


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("channels_last_input", [True, False], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("output", ["channels_last", "best"])
def test_split_over_the_pool(
    splitting: Provider, batch: int, channels_last_input: bool, output: str
) -> None:
    """Row slices that cross image boundaries (batch 3, min_task_flops=0)."""
    if not splitting.has_vector_activation(SILU):
        pytest.skip("no AVX-512F")
    x, weight, bias = _inputs(batch, 3, 32, (31, 28), (3, 3), batch)
    actual = _run(
        splitting, x, weight, bias, 2, 1, [PostOp(SILU)], channels_last_input, output=output
    )
    assert_close(actual, _expected(x, weight, bias, 2, 1, F.silu))
    plan = splitting.conv(
        list(x.shape),
        weight,
        bias,
        [2, 2],
        [1, 1],
        [1, 1],
        input_channels_last=True,
        output=output,
    )
    assert plan.pieces > 1


@pytest.mark.parametrize("own", ["all", "0"])
@pytest.mark.parametrize("splits", [False, True], ids=["one_task", "split"])
@pytest.mark.parametrize("c_out", [32, 64])
def test_resnet_stem_7x7(
    provider: Provider,
    splitting: Provider,
    monkeypatch: pytest.MonkeyPatch,
    c_out: int,
    splits: bool,
    own: str,
) -> None:
    """ResNet's 7x7 stride 2 padding 3 stem with ReLU on a plain 2 x 3 x 70 x 62 input, ours
    (staged rows: 35 output rows in bands of 16, 31 columns in blocks of 14 and one ending at the
    row's end) and oneDNN's, whole or in row slices over the pool."""
    if splits and not splitting.has_vector_activation(SILU):
        pytest.skip("no AVX-512F")
    monkeypatch.setenv("ET_CPU_OWN_STEM", own)
    x, weight, bias = _inputs(2, 3, c_out, (70, 62), (7, 7), c_out + len(own))
    chosen = splitting if splits else provider
    actual = _run(chosen, x, weight, bias, 2, 3, [PostOp(RELU)], False, own=own == "all")
    assert_close(actual, _expected(x, weight, bias, 2, 3, torch.relu))


@pytest.mark.parametrize("batch", [1, 8])
def test_default_takes_the_stems(
    provider: Provider, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    """Unset switch: 3x3 at stride 2 up to 32 output channels on ours (the stems of MobileNetV2 /
    V3 and EfficientNet-B0), other kernels (ResNet's 7x7 3 -> 32 and 3 -> 64 too), stride 1 and
    wider outputs on oneDNN's."""
    monkeypatch.delenv("ET_CPU_OWN_STEM")
    for c_out, kernel, stride, own in [
        (16, 3, 2, True),
        (32, 3, 2, True),
        (24, 5, 2, False),
        (32, 7, 2, False),
        (64, 7, 2, False),
        (16, 3, 1, False),
        (48, 3, 2, False),
    ]:
        for name in ["relu6", "hardswish", "silu"]:
            post_ops, activation = ACTIVATIONS[name]
            x, weight, bias = _inputs(batch, 3, c_out, (21, 18), (kernel, kernel), c_out)
            padding = kernel // 2
            actual = _run(provider, x, weight, bias, stride, padding, post_ops, False, own=own)
            assert_close(actual, _expected(x, weight, bias, stride, padding, activation))


def test_what_stays_on_onednn(provider: Provider, monkeypatch: pytest.MonkeyPatch) -> None:
    x, weight, bias = _inputs(1, 3, 16, (20, 20), (3, 3), 11)
    relu = [PostOp(RELU)]
    reference = _expected(x, weight, bias, 2, 1, torch.relu)
    # A plain output.
    plain = _run(provider, x, weight, bias, 2, 1, relu, False, own=False, output="plain")
    assert_close(plain, reference)
    # Dilation.
    dilated = _run(provider, x, weight, bias, 2, 2, relu, True, own=False, dilation=2)
    y = F.conv2d(x.double(), weight.double(), bias.double(), stride=2, padding=2, dilation=2)
    assert_close(dilated, y.relu().float())
    # A residual add.
    plan = provider.conv(
        list(x.shape),
        weight,
        bias,
        [2, 2],
        [1, 1],
        [1, 1],
        post_ops=[PostOp(ADD)],
        input_channels_last=True,
        output="channels_last",
    )
    assert not plan.describe().startswith("stem:avx512"), plan.describe()
    # Five input channels; groups.
    x5, w5, b5 = _inputs(1, 5, 16, (20, 20), (3, 3), 12)
    _run(provider, x5, w5, b5, 2, 1, relu, True, own=False)
    plan = provider.conv(
        [1, 4, 20, 20],
        torch.randn(16, 2, 3, 3),
        None,
        [2, 2],
        [1, 1],
        [1, 1],
        groups=2,
        input_channels_last=True,
        output="channels_last",
    )
    assert not plan.describe().startswith("stem:avx512"), plan.describe()
    # The switch off.
    monkeypatch.setenv("ET_CPU_OWN_STEM", "0")
    assert_close(_run(provider, x, weight, bias, 2, 1, relu, False, own=False), reference)
