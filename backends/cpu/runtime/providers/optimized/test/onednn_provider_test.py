"""The oneDNN provider against torch eager on generated shapes, through its C ABI.

Tolerance: |provider - eager| <= 1e-4 + 1e-4 * |eager| elementwise, fp32, with weights scaled by
1/sqrt(fan_in) so outputs are O(1). oneDNN and torch sum in different orders; nothing else differs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.cpu.runtime.providers.optimized.test.onednn_ctypes import (
    ADD,
    CLAMP,
    IN_REGISTER_POST_OPS,
    RELU,
    Plan,
    PostOp,
    Provider,
    ProviderError,
)
from backends.cpu.runtime.providers.optimized.test.own_conv_checks import (
    conv_reference,
    run_conv,
    vector_provider,
)

ATOL = 1e-4
RTOL = 1e-4
_SETTINGS = settings(max_examples=40, derandomize=True, deadline=None)


@pytest.fixture(scope="module", params=["pieces", "openmp"])
def provider(request: pytest.FixtureRequest) -> Provider:
    """Every case runs twice: split into as many pieces as allowed on the work-sharing pool
    (min_task_flops=0, so even tiny test shapes split), and whole on oneDNN's OpenMP team."""
    if request.param == "pieces":
        return Provider(num_threads=2, min_task_flops=0)
    return Provider(num_threads=2, work_sharing=False)


def _apply_post_ops(
    y: torch.Tensor, post_ops: Sequence[PostOp], residual: torch.Tensor | None
) -> torch.Tensor:
    for op in post_ops:
        if op.kind == ADD:
            assert residual is not None
            y = y + residual
        elif op.kind == RELU:
            y = torch.relu(y)
        else:
            y = torch.clamp(y, op.lo, op.hi)
    return y


def _assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)


_POST_OPS = st.sampled_from(
    [
        (),
        (PostOp(RELU),),
        (PostOp(CLAMP, 0.0, 6.0),),
        (PostOp(CLAMP, -0.5, 0.5),),
        (PostOp(ADD),),
        (PostOp(ADD), PostOp(RELU)),
    ]
)


@dataclass(frozen=True)
class ConvCase:
    batch: int
    in_channels: int
    out_channels: int
    groups: int
    kernel: list[int]
    stride: list[int]
    padding: list[int]
    dilation: list[int]
    size: list[int]
    bias: bool
    post_ops: tuple[PostOp, ...]
    output: str


@st.composite
def conv_cases(draw: st.DrawFn, rank: int) -> ConvCase:
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    depthwise = draw(st.booleans()) and groups == 1
    in_channels = draw(st.integers(1, 5)) * groups
    if depthwise:
        groups = in_channels = draw(st.integers(1, 20))
        out_channels = in_channels * draw(st.sampled_from([1, 2]))
    else:
        out_channels = draw(st.integers(1, 5)) * groups
    kernel = [draw(st.integers(1, 3)) for _ in range(rank)]
    stride = [draw(st.integers(1, 3)) for _ in range(rank)]
    dilation = [draw(st.integers(1, 2)) for _ in range(rank)]
    padding = [draw(st.integers(0, k)) for k in kernel]
    # Smallest extent with a non-empty output, up to 12.
    size = [
        draw(st.integers(max(1, d * (k - 1) + 1 - 2 * p), 12))
        for k, d, p in zip(kernel, dilation, padding, strict=True)
    ]
    return ConvCase(
        batch=draw(st.integers(1, 2)),
        in_channels=in_channels,
        out_channels=out_channels,
        groups=groups,
        kernel=kernel,
        stride=stride,
        padding=padding,
        dilation=dilation,
        size=size,
        bias=draw(st.booleans()),
        post_ops=draw(_POST_OPS),
        output=draw(st.sampled_from(["plain", "channels_last", "best"])),
    )


def _hits_onednn_sum_crash(case: ConvCase) -> bool:
    """The one shape class supports_conv refuses: oneDNN 2.6 segfaults on it."""
    add_and_more = any(op.kind == ADD for op in case.post_ops) and len(case.post_ops) > 1
    padding_covers_kernel = any(
        p >= d * (k - 1) + 1
        for p, d, k in zip(case.padding, case.dilation, case.kernel, strict=True)
    )
    return add_and_more and padding_covers_kernel


def _check_conv_case(provider: Provider, case: ConvCase, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    rank = len(case.kernel)
    x = torch.randn([case.batch, case.in_channels, *case.size], generator=generator)
    fan_in = case.in_channels // case.groups * math.prod(case.kernel)
    w = torch.randn(
        [case.out_channels, case.in_channels // case.groups, *case.kernel], generator=generator
    )
    w = (w / math.sqrt(fan_in)).contiguous()
    b = torch.randn(case.out_channels, generator=generator) if case.bias else None
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[rank]
    expected = conv(x, w, b, case.stride, case.padding, case.dilation, case.groups)
    residual = torch.randn(expected.shape, generator=generator)
    expected = _apply_post_ops(expected, case.post_ops, residual)

    prepare = functools.partial(
        provider.conv,
        x.shape,
        w,
        b,
        case.stride,
        case.padding,
        case.dilation,
        case.groups,
        case.post_ops,
        output=case.output,
    )
    if _hits_onednn_sum_crash(case):
        with pytest.raises(ProviderError, match=r"crashes oneDNN 2\.6"):
            prepare()
        return
    plan = prepare()
    assert plan.output_shape == tuple(expected.shape)
    uses_residual = any(op.kind == ADD for op in case.post_ops)
    actual = _run_to_plain(provider, plan, x, residual if uses_residual else None)
    _assert_close(actual, expected)
    if case.output == "channels_last" and rank == 2 and not uses_residual:
        # NHWC output is a channels-last torch tensor: torch reads it without any conversion.
        direct = plan.run(x)
        assert direct.is_contiguous(memory_format=torch.channels_last)
        _assert_close(direct, expected)


def _run_to_plain(
    provider: Provider, plan: Plan, x: torch.Tensor, residual: torch.Tensor | None
) -> torch.Tensor:
    """Runs `plan`; a blocked output (and residual) goes through the provider's reorders."""
    if plan.output_is_plain:
        return plan.run(x, residual=residual)
    blocked_residual = None
    if residual is not None:
        to_blocked = provider.reorder_from_plain(plan)
        blocked_residual = to_blocked.run_into(torch.empty(plan.output_bytes // 4), residual)
    blocked = plan.run(x, residual=blocked_residual)
    return provider.reorder_to_plain(plan).run(blocked)


@pytest.mark.parametrize("rank", [1, 2])
def test_conv_matches_torch(provider: Provider, rank: int) -> None:
    @_SETTINGS
    @given(case=conv_cases(rank), seed=st.integers(0, 2**16))
    def check(case: ConvCase, seed: int) -> None:
        _check_conv_case(provider, case, seed)

    check()


def test_conv3d_matches_torch(provider: Provider) -> None:
    @settings(max_examples=8, derandomize=True, deadline=None)
    @given(case=conv_cases(3), seed=st.integers(0, 2**16))
    def check(case: ConvCase, seed: int) -> None:
        _check_conv_case(provider, case, seed)

    check()


def test_conv1d_as_2d_with_unit_height(provider: Provider) -> None:
    """A runtime may lower conv1d to conv2d over [N, C, 1, L]; both routes agree with eager."""
    torch.manual_seed(1)
    x = torch.randn(2, 8, 50)
    w = torch.randn(16, 4, 5) / math.sqrt(20)
    b = torch.randn(16)
    expected = F.conv1d(x, w, b, stride=2, padding=2, dilation=2, groups=2)
    plan = provider.conv(
        (2, 8, 1, 50), w.unsqueeze(2).contiguous(), b, [1, 2], [0, 2], [1, 2], groups=2
    )
    _assert_close(plan.run(x.unsqueeze(2).contiguous()).squeeze(2), expected)


def test_resnet_block_stays_blocked_between_convs(provider: Provider) -> None:
    """conv-relu -> conv + residual -> relu with every activation in oneDNN's layout."""
    torch.manual_seed(2)
    x = torch.randn(1, 32, 28, 28)
    w1 = torch.randn(32, 32, 3, 3) / math.sqrt(288)
    w2 = torch.randn(32, 32, 3, 3) / math.sqrt(288)
    b1, b2 = torch.randn(32), torch.randn(32)
    eye = torch.eye(32).reshape(32, 32, 1, 1).contiguous()
    stem = provider.conv(x.shape, eye, None, [1, 1], [0, 0], [1, 1], output="best")
    conv1 = provider.conv(
        x.shape,
        w1,
        b1,
        [1, 1],
        [1, 1],
        [1, 1],
        post_ops=[PostOp(RELU)],
        input_from=stem,
        output="best",
    )
    conv2 = provider.conv(
        x.shape,
        w2,
        b2,
        [1, 1],
        [1, 1],
        [1, 1],
        post_ops=[PostOp(ADD), PostOp(RELU)],
        input_from=conv1,
        output="best",
    )
    assert not conv1.output_is_plain
    assert conv2.same_output_layout(stem)
    identity = stem.run(x)
    hidden = conv1.run(identity)
    out = conv2.run(hidden, residual=identity)
    actual = provider.reorder_to_plain(conv2).run(out)
    expected = F.relu(F.conv2d(F.relu(F.conv2d(x, w1, b1, padding=1)), w2, b2, padding=1) + x)
    _assert_close(actual, expected)


def test_channels_last_input_and_output(provider: Provider) -> None:
    torch.manual_seed(5)
    x = torch.randn(1, 24, 20, 20).to(memory_format=torch.channels_last)
    w = torch.randn(24, 1, 3, 3) / 3.0
    plan = provider.conv(
        x.shape,
        w,
        None,
        [2, 2],
        [1, 1],
        [1, 1],
        groups=24,
        post_ops=[PostOp(CLAMP, 0.0, 6.0)],
        input_channels_last=True,
        output="channels_last",
    )
    assert plan.output_is_channels_last
    expected = torch.clamp(F.conv2d(x, w, None, 2, 1, 1, 24), 0.0, 6.0)
    _assert_close(plan.run(x), expected)


def test_residual_may_alias_the_output(provider: Provider) -> None:
    torch.manual_seed(3)
    x = torch.randn(1, 8, 10, 10)
    w = torch.randn(8, 8, 1, 1) / math.sqrt(8)
    residual = torch.randn(1, 8, 10, 10)
    plan = provider.conv(x.shape, w, None, [1, 1], [0, 0], [1, 1], post_ops=[PostOp(ADD)])
    buffer = residual.clone()
    plan.run_into(buffer, x, residual=buffer)
    _assert_close(buffer, F.conv2d(x, w) + residual)


@dataclass(frozen=True)
class LinearCase:
    rows: int
    k: int
    n: int
    bias: bool
    k_by_n: bool
    post_ops: tuple[PostOp, ...]


@st.composite
def linear_cases(draw: st.DrawFn) -> LinearCase:
    return LinearCase(
        rows=draw(st.integers(1, 40)),
        k=draw(st.integers(1, 70)),
        n=draw(st.sampled_from([1, 5, 64, 70, 130, 200])),
        bias=draw(st.booleans()),
        k_by_n=draw(st.booleans()),
        post_ops=draw(_POST_OPS),
    )


@_SETTINGS
@given(case=linear_cases(), seed=st.integers(0, 2**16))
def test_linear_and_addmm_match_torch(provider: Provider, case: LinearCase, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(case.rows, case.k, generator=generator)
    w = torch.randn(case.n, case.k, generator=generator) / math.sqrt(case.k)
    b = torch.randn(case.n, generator=generator) if case.bias else None
    residual = torch.randn(case.rows, case.n, generator=generator)
    expected = _apply_post_ops(F.linear(x, w, b), case.post_ops, residual)
    given_weight = w.t().contiguous() if case.k_by_n else w
    plan = provider.linear(case.rows, given_weight, b, case.post_ops, weight_is_k_by_n=case.k_by_n)
    uses_residual = any(op.kind == ADD for op in case.post_ops)
    actual = plan.run(x, residual=residual if uses_residual else None)
    _assert_close(actual, expected)


@pytest.mark.parametrize(
    "batch,m,k,n", [(1, 7, 33, 5), (1, 64, 64, 64), (3, 5, 17, 9), (4, 32, 8, 1)]
)
def test_mm_and_bmm_match_torch(provider: Provider, batch: int, m: int, k: int, n: int) -> None:
    torch.manual_seed(4)
    shape_a = [m, k] if batch == 1 else [batch, m, k]
    shape_b = [k, n] if batch == 1 else [batch, k, n]
    a, b = torch.randn(shape_a), torch.randn(shape_b) / math.sqrt(k)
    plan = provider.matmul(batch, m, k, n, [PostOp(CLAMP, -1.0, 1.0)])
    _assert_close(plan.run(a, b), torch.clamp(torch.matmul(a, b), -1.0, 1.0))


_BASE_CONV = ConvCase(1, 4, 6, 1, [3, 3], [1, 1], [0, 0], [1, 1], [8, 8], False, (), "plain")


@pytest.mark.parametrize(
    "case,message",
    [
        (replace(_BASE_CONV, groups=3), "groups 3 must divide in_channels 4"),
        (replace(_BASE_CONV, size=[2, 2], kernel=[5, 5]), "empty output"),
        (replace(_BASE_CONV, post_ops=(PostOp(ADD), PostOp(ADD))), "only one residual add"),
        (replace(_BASE_CONV, post_ops=(PostOp(CLAMP, 1.0, -1.0),)), "clamp min"),
        (replace(_BASE_CONV, dilation=[1, 0]), "at spatial dim 1"),
    ],
)
def test_unsupported_conv_is_rejected_with_a_reason(
    provider: Provider, case: ConvCase, message: str
) -> None:
    w = torch.randn(case.out_channels, max(1, case.in_channels // case.groups), *case.kernel)
    with pytest.raises(ProviderError, match=message):
        provider.conv(
            (case.batch, case.in_channels, *case.size),
            w,
            None,
            case.stride,
            case.padding,
            case.dilation,
            case.groups,
            case.post_ops,
        )


def test_mismatched_spatial_ranks_are_rejected_before_the_c_call(provider: Provider) -> None:
    with pytest.raises(ValueError, match=r"stride \[1\] must have 2 entries"):
        provider.conv((1, 4, 8, 8), torch.randn(4, 4, 3, 3), None, [1], [0, 0], [1, 1])


def test_missing_residual_is_an_error_not_a_crash(provider: Provider) -> None:
    plan = provider.linear(2, torch.randn(3, 4), None, [PostOp(ADD)])
    with pytest.raises(ProviderError, match="needs a residual"):
        plan.run(torch.randn(2, 4))


def test_default_provider_splits_large_ops_only() -> None:
    """Work sharing is the default: a ResNet-sized conv, a wide linear and a bmm split into
    pieces; an op below the default piece size, and every op without work sharing, do not."""
    shared = Provider(num_threads=2)
    assert shared.work_sharing
    x_shape = (1, 64, 56, 56)
    w = torch.randn(64, 64, 3, 3)
    conv = shared.conv(
        x_shape, w, None, [1, 1], [1, 1], [1, 1], input_channels_last=True, output="channels_last"
    )
    assert conv.pieces > 1, conv.describe()
    assert "pieces" in conv.describe()
    assert shared.linear(32, torch.randn(1024, 1024), None).pieces > 1
    assert shared.matmul(8, 64, 64, 64, []).pieces > 1
    assert shared.linear(1, torch.randn(10, 16), None).pieces == 1
    openmp = Provider(num_threads=2, work_sharing=False)
    assert not openmp.work_sharing
    assert openmp.conv(x_shape, w, None, [1, 1], [1, 1], [1, 1]).pieces == 1
    single = Provider(num_threads=1)
    assert single.conv(x_shape, w, None, [1, 1], [1, 1], [1, 1]).pieces == 1


def test_split_plan_gives_the_same_result_every_run() -> None:
    """Pieces are claimed by whichever thread is free: the result must not depend on who ran
    which piece (200 runs of a 12-piece conv with a residual add, bitwise equal)."""
    shared = Provider(num_threads=2, min_task_flops=0)
    torch.manual_seed(7)
    w, b = torch.randn(32, 16, 3, 3) / 12, torch.randn(32)
    plan = shared.conv(
        (1, 16, 24, 24),
        w,
        b,
        [1, 1],
        [1, 1],
        [1, 1],
        post_ops=[PostOp(ADD), PostOp(RELU)],
        input_channels_last=True,
        output="channels_last",
    )
    assert plan.pieces > 2
    x = torch.randn(1, 16, 24, 24).contiguous(memory_format=torch.channels_last)
    residual = torch.randn(1, 32, 24, 24).contiguous(memory_format=torch.channels_last)
    first = plan.run(x, residual=residual)
    expected = torch.relu(F.conv2d(x, w, b, padding=1) + residual)
    _assert_close(first, expected)
    for _ in range(200):
        assert torch.equal(plan.run(x, residual=residual), first)


@pytest.mark.parametrize("output", ["channels_last", "plain"])
@pytest.mark.parametrize("post_ops", [(), (PostOp(ADD), PostOp(RELU)), (PostOp(CLAMP, 0.0, 6.0),)])
@pytest.mark.parametrize("shares", ["1", "0"])
def test_weight_heavy_conv_splits_by_output_channels(
    output: str, post_ops: tuple[PostOp, ...], shares: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conv whose weights outweigh its activations (a deep CNN layer) splits into blocks of
    output channels, each with its own weights, copied into place; a plain output goes through
    the staging buffer (and so does the residual). Memory: the weights are held once. One block
    per thread by default; up to two with ET_CPU_CONV_CHANNEL_SHARES=0 (read at prepare)."""
    monkeypatch.setenv("ET_CPU_CONV_CHANNEL_SHARES", shares)
    shared = Provider(num_threads=2, min_task_flops=0)
    torch.manual_seed(11)
    w, b = torch.randn(72, 48, 3, 3) / 20, torch.randn(72)
    plan = shared.conv(
        (1, 48, 5, 5),
        w,
        b,
        [1, 1],
        [1, 1],
        [1, 1],
        post_ops=post_ops,
        input_channels_last=True,
        output=output,
    )
    # 72 channels: blocks of 32 and 40, or of 16, 16, 16 and 24.
    assert plan.pieces == (2 if shares == "1" else 4), plan.describe()
    assert plan.weights_bytes == shared.weights_bytes
    assert w.numel() * 4 <= plan.weights_bytes < 2 * w.numel() * 4
    x = torch.randn(1, 48, 5, 5).contiguous(memory_format=torch.channels_last)
    layout = torch.channels_last if output == "channels_last" else torch.contiguous_format
    residual = torch.randn(1, 72, 5, 5).contiguous(memory_format=layout)
    uses_residual = any(op.kind == ADD for op in post_ops)
    expected = _apply_post_ops(F.conv2d(x, w, b, padding=1), post_ops, residual)
    _assert_close(plan.run(x, residual=residual if uses_residual else None), expected)


def test_thread_setting_leaves_torch_threads_alone() -> None:
    """The provider sets OpenMP threads around its calls only; torch's setting survives."""
    provider = Provider(num_threads=2)
    assert provider.num_threads == 2
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        plan = provider.linear(8, torch.randn(16, 16), None)
        plan.run(torch.randn(8, 16))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_memory_accounting_covers_reordered_weights(provider: Provider) -> None:
    fresh = Provider(num_threads=1)
    w = torch.randn(64, 32, 3, 3)
    plan = fresh.conv((1, 32, 16, 16), w, torch.randn(64), [1, 1], [1, 1], [1, 1])
    assert plan.weights_bytes >= w.numel() * 4 + 64 * 4
    assert fresh.weights_bytes == plan.weights_bytes
    assert fresh.scratchpad_bytes >= plan.scratchpad_bytes
    assert fresh.isa().startswith(("avx", "sse"))


@pytest.mark.parametrize("threads", [1, 2])
def test_plain_graph_input_is_reordered_in_bands_by_the_pool(
    threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stem conv reads the graph's NCHW input: with work sharing its conversion to the
    primitive's layout runs as bands of rows on the pool (default piece size), with the same
    result as the single-threaded reorder; one thread converts it in one call. (On oneDNN:
    ET_CPU_OWN_STEM=0; our stem kernel reads the plain input directly, stem_conv_test.)"""
    monkeypatch.setenv("ET_CPU_OWN_STEM", "0")
    shared = Provider(num_threads=threads)
    torch.manual_seed(3)
    w, b = torch.randn(32, 3, 3, 3) / 5, torch.randn(32)
    plan = shared.conv((1, 3, 224, 224), w, b, [2, 2], [1, 1], [1, 1], output="channels_last")
    assert ("input reordered in 4 bands" in plan.describe()) == (threads == 2), plan.describe()
    x = torch.randn(1, 3, 224, 224)
    _assert_close(plan.run(x), F.conv2d(x, w, b, stride=2, padding=1))
    # Odd row counts give unequal bands; a 3D input splits its only spatial dim.
    fine = Provider(num_threads=2, min_task_flops=0)
    odd = fine.conv((1, 3, 37, 29), w, None, [1, 1], [1, 1], [1, 1], output="channels_last")
    assert "bands" in odd.describe(), odd.describe()
    x = torch.randn(1, 3, 37, 29)
    _assert_close(odd.run(x), F.conv2d(x, w, None, padding=1))
    w1 = torch.randn(8, 3, 5) / 4
    line = fine.conv((2, 3, 50), w1, None, [1], [2], [1], output="plain")
    assert "bands" in line.describe(), line.describe()
    x = torch.randn(2, 3, 50)
    _assert_close(line.run(x), F.conv1d(x, w1, None, padding=2))


# Our weight-streaming 3x3 convolution (kernels/stream_conv.h) on the convolution plan: both
# values of ET_CPU_OWN_STREAM_CONV ("all": every shape it covers on ours; "0": oneDNN's) against
# F.conv2d in float64, the module's tolerance (sums of up to 9 x 96 products of weights scaled by
# 1/sqrt(fan-in)). Shapes: rows of 7 and of 14 / 28 pixels (two register blocks a row), stride 1
# and 2, input channels over one weight chunk (64) and not a multiple of 16, batch 1 and 2, the
# in-register post-ops, with and without a bias, whole and split over the pool.
_STREAM_CASES = [  # c_in, c_out, stride, input size, batch
    (96, 64, 1, 7, 1),
    (40, 32, 2, 14, 2),
    (64, 96, 1, 14, 1),
    (24, 32, 2, 28, 1),
    (32, 32, 1, 28, 2),
]


@pytest.mark.parametrize("switch", ["all", "0"])
@pytest.mark.parametrize("case", _STREAM_CASES)
@pytest.mark.parametrize("post", ["relu", "none", "relu6", "silu"])
def test_stream_conv_against_torch(
    monkeypatch: pytest.MonkeyPatch,
    switch: str,
    case: tuple[int, int, int, int, int],
    post: str,
) -> None:
    monkeypatch.setenv("ET_CPU_OWN_STREAM_CONV", switch)
    monkeypatch.setenv("ET_CPU_WINOGRAD", "0")  # its stride-1 shapes would go to Winograd first
    c_in, c_out, stride, size, batch = case
    post_ops, activation = IN_REGISTER_POST_OPS[post]
    gen = torch.Generator().manual_seed(c_in * 100 + c_out + stride)
    x = torch.randn(batch, c_in, size, size, generator=gen)
    weight = torch.randn(c_out, c_in, 3, 3, generator=gen) / math.sqrt(9 * c_in)
    bias = None if post == "none" else torch.randn(c_out, generator=gen)
    for provider in (vector_provider("stream_conv"), Provider(num_threads=2, min_task_flops=0)):
        own = switch == "all"
        actual = run_conv(
            provider, x, weight, bias, stride, 1, post_ops, family="stream_conv", own=own
        )
        expected = conv_reference(x, weight, bias, stride, 1, activation)
        torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL)


def test_stream_conv_default_and_declines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset switch: rows of 7 pixels with weights outweighing the activations (ResNet-50-style
    stage 4's 3x3 256@7 and its stride-2 256@14) on ours; 14-pixel rows (stage 3's 128@14, even
    with heavier weights: 256@14) on oneDNN's; and what the kernel does not cover stays on
    oneDNN's with the switch at "all"."""
    provider = vector_provider("stream_conv")
    monkeypatch.delenv("ET_CPU_OWN_STREAM_CONV", raising=False)
    monkeypatch.setenv("ET_CPU_WINOGRAD", "0")
    relu = [PostOp(RELU)]
    for c, stride, size, own in [
        (256, 1, 7, True),
        (256, 2, 14, True),
        (128, 1, 14, False),
        (256, 1, 14, False),
    ]:
        x = torch.randn(1, c, size, size)
        weight = torch.randn(c, c, 3, 3) / math.sqrt(9 * c)
        run_conv(provider, x, weight, None, stride, 1, relu, family="stream_conv", own=own)
    monkeypatch.setenv("ET_CPU_OWN_STREAM_CONV", "all")
    x = torch.randn(1, 32, 14, 14)
    weight = torch.randn(32, 32, 3, 3) / math.sqrt(9 * 32)
    # (padding, input channels-last, output): padding 0, a plain input, a plain output.
    declined: list[tuple[int, bool, str]] = [
        (0, True, "channels_last"),
        (1, False, "channels_last"),
        (1, True, "plain"),
    ]
    for padding, channels_last, output in declined:
        run_conv(
            provider,
            x,
            weight,
            None,
            1,
            padding,
            relu,
            channels_last,
            family="stream_conv",
            own=False,
            output=output,
        )
    # 48 output channels (not a multiple of the 32-channel block), a 5x5 kernel, 13-wide rows.
    for c_out, kernel, size in [(48, 3, 14), (32, 5, 14), (32, 3, 13)]:
        w = torch.randn(c_out, 32, kernel, kernel) / math.sqrt(kernel * kernel * 32)
        xs = torch.randn(1, 32, size, size)
        run_conv(provider, xs, w, None, 1, kernel // 2, relu, family="stream_conv", own=False)


# Our Winograd F(2x2, 3x3) convolution (kernels/winograd_conv.h) on the convolution plan: both
# values of ET_CPU_WINOGRAD ("all": every shape it covers on ours; "0": oneDNN's) against
# F.conv2d in float64 with the module's tolerance (F(2x2, 3x3) in float32 stays within ~1e-6
# relative here: the transforms only add and halve). Shapes: odd extents (tiles cut at the
# right and bottom edges), a width of 1, input channels not a multiple of 16 and over one
# 16-channel chunk, 48 output channels (a 32- and a 16-channel block), batch 2 (tile groups
# across images), whole and split over the pool (by tile groups, and by channel blocks: few
# tiles, or 128 -> 64 at 14x14, whose transformed weights outweigh its transformed input).
_WINOGRAD_CASES = [  # c_in, c_out, height, width, batch
    (16, 16, 5, 7, 1),
    (20, 48, 9, 6, 2),
    (64, 32, 14, 13, 1),
    (40, 64, 3, 1, 1),
    (128, 64, 14, 14, 1),
]


@pytest.mark.parametrize("switch", ["all", "0"])
@pytest.mark.parametrize("case", _WINOGRAD_CASES)
@pytest.mark.parametrize("post", ["relu", "none", "relu6", "silu", "add_relu"])
def test_winograd_conv_against_torch(
    monkeypatch: pytest.MonkeyPatch,
    switch: str,
    case: tuple[int, int, int, int, int],
    post: str,
) -> None:
    monkeypatch.setenv("ET_CPU_WINOGRAD", switch)
    c_in, c_out, height, width, batch = case
    gen = torch.Generator().manual_seed(c_in * 100 + c_out + height)
    x = torch.randn(batch, c_in, height, width, generator=gen)
    weight = torch.randn(c_out, c_in, 3, 3, generator=gen) / math.sqrt(9 * c_in)
    bias = None if post == "none" else torch.randn(c_out, generator=gen)
    residual = torch.randn(batch, c_out, height, width, generator=gen)
    if post == "add_relu":
        post_ops = [PostOp(ADD), PostOp(RELU)]
        expected = torch.relu(conv_reference(x, weight, bias, 1, 1, lambda y: y) + residual)
    else:
        post_ops, activation = IN_REGISTER_POST_OPS[post]
        expected = conv_reference(x, weight, bias, 1, 1, activation)
    for provider in (vector_provider("winograd"), Provider(num_threads=2, min_task_flops=0)):
        actual = run_conv(
            provider,
            x,
            weight,
            bias,
            1,
            1,
            post_ops,
            family="winograd",
            own=switch == "all",
            residual=residual if post == "add_relu" else None,
        )
        torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL)


def test_winograd_conv_bands_same_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run walks its tile groups in bands (ET_CPU_WINOGRAD_BAND_KIB, read at prepare; the
    default, 64 KiB, is one group a band from 32 channels on): each output is the same sum in the
    same order whatever the band, so one group a band (16 KiB), several with a partial last band
    (256 KiB: 4 of the 15 groups a band) and the whole batch in one (1 MiB) agree bitwise, whole
    and split over the pool, and match torch."""
    monkeypatch.setenv("ET_CPU_WINOGRAD", "all")
    gen = torch.Generator().manual_seed(46)
    # 20 x 20 x 2 images: 2 x 10 x 10 tiles, 15 groups of 14 (the last one partial).
    x = torch.randn(2, 32, 20, 20, generator=gen)
    weight = torch.randn(48, 32, 3, 3, generator=gen) / math.sqrt(9 * 32)
    bias = torch.randn(48, generator=gen)
    relu = [PostOp(RELU)]
    expected = conv_reference(x, weight, bias, 1, 1, torch.relu)
    for provider in (vector_provider("winograd"), Provider(num_threads=2, min_task_flops=0)):
        outputs = []
        for kib in ["16", "256", "1024"]:
            monkeypatch.setenv("ET_CPU_WINOGRAD_BAND_KIB", kib)
            outputs.append(
                run_conv(provider, x, weight, bias, 1, 1, relu, family="winograd", own=True)
            )
        torch.testing.assert_close(outputs[0], expected, rtol=RTOL, atol=ATOL)
        for other in outputs[1:]:
            assert torch.equal(other, outputs[0])


@pytest.mark.parametrize(
    "switch, c_in, c_out, size, by_blocks",
    [
        # Unset: by blocks when the transformed weights outweigh the transformed input (16 x
        # 128 x 128 against 16 x 56 tiles x 128 at 14x14) or there are fewer than 2 tile groups
        # per thread (2 groups at 8x8); by tile groups otherwise (64 -> 64 at 28x28: 196 tiles).
        (None, 128, 128, 14, True),
        (None, 64, 64, 28, False),
        (None, 64, 64, 8, True),
        ("0", 128, 128, 14, False),
        ("0", 64, 64, 8, True),
        ("all", 64, 64, 28, True),
        ("all", 32, 32, 28, False),  # one block of 32 channels: nothing to share by blocks
    ],
)
def test_winograd_conv_split(
    monkeypatch: pytest.MonkeyPatch,
    switch: str | None,
    c_in: int,
    c_out: int,
    size: int,
    by_blocks: bool,
) -> None:
    """How a run on 2 threads shares out (ET_CPU_WINOGRAD_BY_BLOCKS, read at prepare): the plan's
    description says `by blocks` exactly when the rule (or the switch) asks for it, and the
    output matches torch either way."""
    monkeypatch.setenv("ET_CPU_WINOGRAD", "all")
    if switch is None:
        monkeypatch.delenv("ET_CPU_WINOGRAD_BY_BLOCKS", raising=False)
    else:
        monkeypatch.setenv("ET_CPU_WINOGRAD_BY_BLOCKS", switch)
    gen = torch.Generator().manual_seed(c_in + size)
    x = torch.randn(1, c_in, size, size, generator=gen)
    weight = torch.randn(c_out, c_in, 3, 3, generator=gen) / math.sqrt(9 * c_in)
    provider = Provider(num_threads=2, min_task_flops=0)
    plans: list[Plan] = []
    relu = [PostOp(RELU)]
    actual = run_conv(provider, x, weight, None, 1, 1, relu, family="winograd", plans=plans)
    assert ("by blocks" in plans[0].describe()) == by_blocks, plans[0].describe()
    expected = conv_reference(x, weight, None, 1, 1, torch.relu)
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL)


def test_winograd_conv_default_and_declines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset switch: 16 or more input channels with transformed weights of at most 2 MiB on
    ours (ResNet-50-style 32@56, UNet's 16@128-style 16 -> 16, a 256 -> 128 concatenation); 8
    input channels, and 256 -> 256 (4 MiB: stage 4's 3x3 stays on StreamConv) on the others;
    and what the kernel does not cover stays off it with the switch at "all"."""
    provider = vector_provider("winograd")
    monkeypatch.delenv("ET_CPU_WINOGRAD", raising=False)
    relu = [PostOp(RELU)]
    for c_in, c_out, size, own in [
        (32, 32, 28, True),
        (16, 16, 16, True),
        (256, 128, 4, True),
        (8, 16, 16, False),
        (256, 256, 7, False),
    ]:
        x = torch.randn(1, c_in, size, size)
        weight = torch.randn(c_out, c_in, 3, 3) / math.sqrt(9 * c_in)
        run_conv(provider, x, weight, None, 1, 1, relu, family="winograd", own=own)
    monkeypatch.setenv("ET_CPU_WINOGRAD", "all")
    x = torch.randn(1, 32, 10, 10)
    weight = torch.randn(32, 32, 3, 3) / math.sqrt(9 * 32)
    # stride 2, padding 0, dilation 2, a plain input, a plain output.
    for stride, padding, dilation, channels_last, output in [
        (2, 1, 1, True, "channels_last"),
        (1, 0, 1, True, "channels_last"),
        (1, 2, 2, True, "channels_last"),
        (1, 1, 1, False, "channels_last"),
        (1, 1, 1, True, "plain"),
    ]:
        run_conv(
            provider,
            x,
            weight,
            None,
            stride,
            padding,
            relu,
            channels_last,
            family="winograd",
            own=False,
            output=output,
            dilation=dilation,
        )
    # 24 output channels (not a multiple of 16), a 5x5 kernel, one filter per channel (groups
    # 32: the depthwise kernel's).
    for c_out, kernel, depthwise in [(24, 3, False), (32, 5, False), (32, 3, True)]:
        w = torch.randn(c_out, 1 if depthwise else 32, kernel, kernel) / kernel
        actual = run_conv(
            provider,
            x,
            w,
            None,
            1,
            kernel // 2,
            relu,
            family="winograd",
            own=False,
            depthwise=depthwise,
        )
        expected = conv_reference(x, w, None, 1, kernel // 2, torch.relu, depthwise=depthwise)
        torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL)
