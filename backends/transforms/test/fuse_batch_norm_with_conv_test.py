"""FuseBatchNormWithConvPass: numerics against eager on generated convs, graph and state checks."""

from __future__ import annotations

import copy
import typing

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.transforms.fuse_batch_norm_with_conv import (
    FuseBatchNormWithConvPass,
    fold_into_conv_weights,
)
from backends.transforms.program_checks import check_program_consistency
from backends.transforms.test.bn_test_util import (
    ATOL,
    RTOL,
    batch_norm_count,
    eager,
    export,
    randomize_batch_norms,
    run_checked,
    run_program,
    state_bytes,
    to_edge_program,
)

_CONV = {1: torch.nn.Conv1d, 2: torch.nn.Conv2d, 3: torch.nn.Conv3d}
_CONV_T = {1: torch.nn.ConvTranspose1d, 2: torch.nn.ConvTranspose2d, 3: torch.nn.ConvTranspose3d}
_BN = {1: torch.nn.BatchNorm1d, 2: torch.nn.BatchNorm2d, 3: torch.nn.BatchNorm3d}


def assert_matches_eager(actual: torch.Tensor, expected: torch.Tensor) -> None:
    # Tolerance scales with the output's magnitude: random BN stats can amplify it.
    scale = max(1.0, float(expected.abs().max()))
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL * scale)


@st.composite
def conv_bn_cases(draw: st.DrawFn) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    dim = draw(st.sampled_from([1, 2, 2, 3]))
    transposed = draw(st.booleans())
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    depthwise = draw(st.booleans())
    in_per_group = 1 if depthwise else draw(st.integers(1, 3))
    out_per_group = draw(st.integers(1, 3))
    kernel = draw(st.integers(1, 3))
    stride = draw(st.integers(1, 2))
    dilation = draw(st.integers(1, 2))
    same = not transposed and stride == 1 and draw(st.booleans())
    padding: typing.Any = "same" if same else draw(st.integers(0, 1))
    bias = draw(st.booleans())
    affine = draw(st.booleans())
    eps = draw(st.sampled_from([1e-5, 1e-3, 0.1]))
    batch = draw(st.integers(1, 2))
    seed = draw(st.integers(0, 2**16))
    size = 6 if dim < 3 else 4
    in_channels, out_channels = groups * in_per_group, groups * out_per_group
    conv_cls = _CONV_T[dim] if transposed else _CONV[dim]
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    conv = conv_cls(
        in_channels,
        out_channels,
        kernel,
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        bias=bias,
    )
    model = torch.nn.Sequential(conv, _BN[dim](out_channels, eps=eps, affine=affine))
    randomize_batch_norms(model, generator).eval()
    x = torch.randn(batch, in_channels, *([size] * dim), generator=generator)
    return model, (x,)


@settings(max_examples=30, derandomize=True, deadline=None)
@given(conv_bn_cases())
def test_fused_program_matches_eager_aten(
    case: tuple[torch.nn.Module, tuple[torch.Tensor, ...]],
) -> None:
    model, inputs = case
    ep = export(model, inputs)
    reports = run_checked(ep, [FuseBatchNormWithConvPass()])
    assert reports[0].folded == 1 and not reports[0].skipped
    assert batch_norm_count(ep) == 0
    assert_matches_eager(run_program(ep, inputs), eager(model, inputs))
    # Exactly the fused weight and bias remain: nothing of the original conv or the BN.
    conv = typing.cast(torch.nn.modules.conv._ConvNd, next(iter(model.children())))
    assert state_bytes(ep) == (2, 4 * (conv.weight.numel() + conv.out_channels))


@settings(max_examples=6, derandomize=True, deadline=None)
@given(conv_bn_cases())
def test_fused_program_matches_eager_edge(
    case: tuple[torch.nn.Module, tuple[torch.Tensor, ...]],
) -> None:
    model, inputs = case
    ep = to_edge_program(model, inputs)
    assert batch_norm_count(ep) == 1
    reports = run_checked(ep, [FuseBatchNormWithConvPass()])
    assert reports[0].folded == 1
    assert batch_norm_count(ep) == 0
    assert_matches_eager(run_program(ep, inputs), eager(model, inputs))


def test_fold_math_matches_torch_nn_utils_fusion_for_plain_conv() -> None:
    conv = torch.nn.Conv2d(4, 6, 3)
    bn = randomize_batch_norms(torch.nn.BatchNorm2d(6), torch.Generator().manual_seed(1)).eval()
    reference = torch.nn.utils.fusion.fuse_conv_bn_eval(copy.deepcopy(conv).eval(), bn)
    assert bn.running_var is not None and bn.running_mean is not None
    scale = bn.weight * torch.rsqrt(bn.running_var + bn.eps)
    shift = bn.bias - bn.running_mean * scale
    with torch.no_grad():
        w, b = fold_into_conv_weights(conv.weight, conv.bias, scale, shift, False, 1)
    torch.testing.assert_close(w, reference.weight, rtol=0, atol=1e-6)
    torch.testing.assert_close(b, reference.bias, rtol=0, atol=1e-6)


class _ConvOutputAlsoAdded(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return self.bn(y) + y


class _WeightFromInput(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return self.bn(torch.nn.functional.conv2d(x, w))


@pytest.mark.parametrize(
    ("model", "inputs", "reason"),
    [
        (_ConvOutputAlsoAdded(), (torch.randn(1, 3, 6, 6),), "also read by"),
        (_WeightFromInput(), (torch.randn(1, 3, 6, 6), torch.randn(4, 3, 3, 3)), "weight"),
    ],
    ids=["conv_output_feeds_add", "weight_is_user_input"],
)
def test_skip_cases_leave_graph_unchanged(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], reason: str
) -> None:
    randomize_batch_norms(model, torch.Generator().manual_seed(2)).eval()
    ep = export(model, inputs)
    before = ep.graph_module.code
    report = FuseBatchNormWithConvPass()(ep)
    check_program_consistency(ep)
    assert not report.changed and report.folded == 0
    assert len(report.skipped) == 1 and reason in report.skipped[0].reason
    assert ep.graph_module.code == before
    assert_matches_eager(run_program(ep, inputs), eager(model, inputs))
