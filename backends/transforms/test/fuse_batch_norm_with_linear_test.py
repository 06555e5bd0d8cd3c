"""FuseBatchNormWithLinearPass: numerics against eager, and each case where folding is inexact."""

from __future__ import annotations

import typing
from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.transforms.fuse_batch_norm_with_linear import (
    FuseBatchNormWithLinearPass,
    fold_into_linear_weights,
)
from backends.transforms.program_checks import check_program_consistency
from backends.transforms.test.bn_test_util import (
    ATOL,
    RTOL,
    batch_norm_count,
    eager,
    export,
    op_names,
    randomize_batch_norms,
    run_checked,
    run_program,
    state_bytes,
    to_edge_program,
)


def assert_matches_eager(actual: torch.Tensor, expected: torch.Tensor) -> None:
    scale = max(1.0, float(expected.abs().max()))
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL * scale)


@st.composite
def linear_bn_cases(draw: st.DrawFn) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    in_features = draw(st.integers(1, 16))
    out_features = draw(st.integers(1, 16))
    bias = draw(st.booleans())
    affine = draw(st.booleans())
    eps = draw(st.sampled_from([1e-5, 1e-3, 0.1]))
    batch = draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**16))
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(in_features, out_features, bias=bias),
        torch.nn.BatchNorm1d(out_features, eps=eps, affine=affine),
    )
    randomize_batch_norms(model, generator).eval()
    return model, (torch.randn(batch, in_features, generator=generator),)


@settings(max_examples=30, derandomize=True, deadline=None)
@given(linear_bn_cases())
def test_fused_program_matches_eager_aten(
    case: tuple[torch.nn.Module, tuple[torch.Tensor, ...]],
) -> None:
    model, inputs = case
    ep = export(model, inputs)
    reports = run_checked(ep, [FuseBatchNormWithLinearPass()])
    assert reports[0].folded == 1 and not reports[0].skipped
    assert batch_norm_count(ep) == 0
    assert_matches_eager(run_program(ep, inputs), eager(model, inputs))
    linear = typing.cast(torch.nn.Linear, next(iter(model.children())))
    assert state_bytes(ep) == (2, 4 * (linear.weight.numel() + linear.out_features))


@pytest.mark.parametrize("keep_linear", [True, False], ids=["edge_linear", "edge_addmm"])
@pytest.mark.parametrize("bias", [True, False])
def test_fused_program_matches_eager_edge(keep_linear: bool, bias: bool) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(6, 5, bias=bias), torch.nn.BatchNorm1d(5))
    randomize_batch_norms(model, torch.Generator().manual_seed(3)).eval()
    inputs = (torch.randn(4, 6),)
    ep = to_edge_program(model, inputs, keep_linear=keep_linear)
    reports = run_checked(ep, [FuseBatchNormWithLinearPass()])
    assert reports[0].folded == 1 and batch_norm_count(ep) == 0
    if not keep_linear and not bias:
        # to_edge turned the bias-free linear into mm; the fold made it an addmm with a bias.
        assert "aten.mm.default" not in op_names(ep) and "aten.addmm.default" in op_names(ep)
    assert_matches_eager(run_program(ep, inputs), eager(model, inputs))


def test_fold_math_matches_torch_nn_utils_fusion() -> None:
    linear = torch.nn.Linear(4, 3)
    bn = randomize_batch_norms(torch.nn.BatchNorm1d(3), torch.Generator().manual_seed(4)).eval()
    reference = torch.nn.utils.fusion.fuse_linear_bn_eval(linear.eval(), bn)
    assert bn.running_var is not None and bn.running_mean is not None
    scale = bn.weight * torch.rsqrt(bn.running_var + bn.eps)
    shift = bn.bias - bn.running_mean * scale
    with torch.no_grad():
        w, b = fold_into_linear_weights(linear.weight, linear.bias, scale, shift)
    torch.testing.assert_close(w, reference.weight, rtol=0, atol=1e-6)
    torch.testing.assert_close(b, reference.bias, rtol=0, atol=1e-6)


class _Rank3(torch.nn.Module):
    """BatchNorm1d over (N, C=L, F): normalises the sequence axis, not linear's output."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 6)
        self.bn = torch.nn.BatchNorm1d(5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.linear(x))


class _OutputAlsoUsed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 6)
        self.bn = torch.nn.BatchNorm1d(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        return self.bn(y) * y


class _WeightFromInput(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(6)

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return self.bn(torch.nn.functional.linear(x, w))


class _StatsFromInput(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 6)

    def forward(self, x: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
        var = torch.ones(6)
        return torch.nn.functional.batch_norm(self.linear(x), mean, var, training=False)


def _bn_linear_train() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6)).train()


def _bn_linear_no_stats() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6, track_running_stats=False)
    ).eval()


@pytest.mark.parametrize(
    ("make_model", "inputs", "reason"),
    [
        (lambda: _Rank3().eval(), (torch.randn(2, 5, 4),), "rank 3"),
        (lambda: _OutputAlsoUsed().eval(), (torch.randn(3, 4),), "also read by"),
        (lambda: _WeightFromInput().eval(), (torch.randn(3, 4), torch.randn(6, 4)), "weight"),
        (lambda: _StatsFromInput().eval(), (torch.randn(3, 4), torch.randn(6)), "running_mean"),
        (_bn_linear_train, (torch.randn(3, 4),), "training"),
        (_bn_linear_no_stats, (torch.randn(3, 4),), "training"),
    ],
    ids=["rank3", "output_also_used", "weight_input", "stats_input", "training", "no_stats"],
)
def test_skip_cases_leave_graph_unchanged(
    make_model: Callable[[], torch.nn.Module], inputs: tuple[torch.Tensor, ...], reason: str
) -> None:
    model = randomize_batch_norms(make_model(), torch.Generator().manual_seed(5))
    expected = eager(model, inputs)
    ep = export(model, inputs)
    before = ep.graph_module.code
    report = FuseBatchNormWithLinearPass()(ep)
    check_program_consistency(ep)
    assert not report.changed and report.folded == 0
    assert len(report.skipped) == 1 and reason in report.skipped[0].reason, report.skipped
    assert ep.graph_module.code == before
    assert_matches_eager(run_program(ep, inputs), expected)


def test_batch_norm_read_beyond_getitem_0_is_skipped() -> None:
    """native_batch_norm's mean/var outputs in use: erasing the batch norm would lose them."""

    class _UsesSaveMean(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 6)
            self.register_buffer("mean", torch.randn(6))
            self.register_buffer("var", torch.rand(6) + 0.5)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            out, save_mean, _ = torch.ops.aten.native_batch_norm(
                self.linear(x), None, None, self.mean, self.var, False, 0.1, 1e-5
            )
            return out, save_mean

    model = _UsesSaveMean().eval()
    inputs = (torch.randn(3, 4),)
    ep = export(model, inputs)
    before = ep.graph_module.code
    report = FuseBatchNormWithLinearPass()(ep)
    assert report.folded == 0 and "getitem(0)" in report.skipped[0].reason
    assert ep.graph_module.code == before
