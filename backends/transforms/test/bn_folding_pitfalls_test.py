"""The cases where public batch-norm fusions go wrong (torch 2.13 / executorch 1.5.1): each must
come out either fused and correct or untouched and correct, with exactly the right constants."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch

from backends.transforms.test.bn_test_util import (
    ATOL,
    RTOL,
    batch_norm_count,
    eager,
    export,
    fusion_passes,
    randomize_batch_norms,
    run_checked,
    run_program,
    state_bytes,
)

F32 = 4  # bytes per float32 element


class SharedWeightTwoBatchNorms(torch.nn.Module):
    """Two convs read one weight, each followed by its own batch norm."""

    weight: torch.nn.Parameter

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 3, 3, 3))
        self.bn1 = torch.nn.BatchNorm2d(4)
        self.bn2 = torch.nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.bn1(torch.nn.functional.conv2d(x, self.weight))
        b = self.bn2(torch.nn.functional.conv2d(x * 2, self.weight))
        return a - b


class CalledTwice(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = torch.nn.Sequential(
            torch.nn.Conv2d(3, 3, 3, padding=1), torch.nn.BatchNorm2d(3)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(self.block(x))


class ConvFeedsAdd(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return self.bn(y) + y


class Rank3LinearBatchNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 6)
        self.bn = torch.nn.BatchNorm1d(5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.linear(x))


def _seq(*modules: torch.nn.Module) -> torch.nn.Module:
    return torch.nn.Sequential(*modules)


@dataclasses.dataclass
class Case:
    make: Callable[[], torch.nn.Module]
    inputs: tuple[torch.Tensor, ...]
    folded: int
    # (tensor count, bytes) the state dict + constants must hold after the whole pipeline.
    state: tuple[int, int] | None
    train: bool = False
    # A fragment of the reason the report must give for leaving the batch norm alone.
    skip_reason: str | None = None


def _untouched_state(model: torch.nn.Module, train: bool) -> tuple[int, int]:
    """What an unfused program keeps: every parameter and running statistic; the (unused in
    eval) num_batches_tracked counters are pruned."""
    tensors = [
        t
        for name, t in model.state_dict().items()
        if train or not name.endswith("num_batches_tracked")
    ]
    return len(tensors), sum(t.numel() * t.element_size() for t in tensors)


CASES = {
    # Two fused weights (4x3x3x3) and two fused biases; the shared original goes.
    "shared_weight_two_bns": Case(
        SharedWeightTwoBatchNorms, (torch.randn(1, 3, 6, 6),), 2, (4, F32 * 2 * (108 + 4))
    ),
    # One fused weight and bias, shared by both calls.
    "same_module_called_twice": Case(
        CalledTwice, (torch.randn(1, 3, 6, 6),), 2, (2, F32 * (81 + 3))
    ),
    "transposed_equal_in_out": Case(
        lambda: _seq(torch.nn.ConvTranspose2d(4, 4, 3, stride=2), torch.nn.BatchNorm2d(4)),
        (torch.randn(1, 4, 5, 5),),
        1,
        (2, F32 * (4 * 4 * 9 + 4)),
    ),
    "grouped_transposed": Case(
        lambda: _seq(torch.nn.ConvTranspose2d(4, 6, 3, groups=2), torch.nn.BatchNorm2d(6)),
        (torch.randn(1, 4, 5, 5),),
        1,
        (2, F32 * (4 * 3 * 9 + 6)),
    ),
    "bn1d_after_rank3_linear": Case(
        Rank3LinearBatchNorm, (torch.randn(2, 5, 4),), 0, None, skip_reason="rank 3"
    ),
    "conv_output_feeds_add": Case(
        ConvFeedsAdd, (torch.randn(1, 3, 6, 6),), 0, None, skip_reason="also read by"
    ),
    "conv_relu_bn": Case(
        lambda: _seq(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.BatchNorm2d(4)),
        (torch.randn(1, 3, 6, 6),),
        0,
        None,
    ),
    "bn_affine_false": Case(
        lambda: _seq(torch.nn.Conv2d(3, 4, 3, bias=False), torch.nn.BatchNorm2d(4, affine=False)),
        (torch.randn(1, 3, 6, 6),),
        1,
        (2, F32 * (4 * 27 + 4)),
    ),
    "bn_track_running_stats_false": Case(
        lambda: _seq(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4, track_running_stats=False)),
        (torch.randn(2, 3, 6, 6),),
        0,
        None,
        skip_reason="training",
    ),
    "bn_training_mode": Case(
        lambda: _seq(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)),
        (torch.randn(2, 3, 6, 6),),
        0,
        None,
        train=True,
        skip_reason="training",
    ),
    "padding_same": Case(
        lambda: _seq(torch.nn.Conv2d(3, 4, 3, padding="same", dilation=2), torch.nn.BatchNorm2d(4)),
        (torch.randn(1, 3, 7, 7),),
        1,
        (2, F32 * (4 * 27 + 4)),
    ),
    "conv3d": Case(
        lambda: _seq(torch.nn.Conv3d(2, 3, 2, groups=1), torch.nn.BatchNorm3d(3)),
        (torch.randn(1, 2, 4, 4, 4),),
        1,
        (2, F32 * (3 * 2 * 8 + 3)),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_pitfall_case_is_fused_correctly_or_left_alone(name: str) -> None:
    case = CASES[name]
    torch.manual_seed(0)
    model = randomize_batch_norms(case.make(), torch.Generator().manual_seed(7))
    model.train(case.train)
    expected = eager(model, case.inputs)
    ep = export(model, case.inputs)
    bns_before = batch_norm_count(ep)
    reports = run_checked(ep, fusion_passes())

    folded = reports[0].folded + reports[1].folded
    assert folded == case.folded, [r.to_dict() for r in reports]
    assert batch_norm_count(ep) == bns_before - folded
    actual = run_program(ep, case.inputs)
    scale = max(1.0, float(expected.abs().max()))
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL * scale)
    skipped = [s.reason for r in reports for s in r.skipped]
    if case.skip_reason is not None:
        assert len(skipped) == 1 and case.skip_reason in skipped[0], skipped
    state = case.state if case.state is not None else _untouched_state(model, case.train)
    assert state_bytes(ep) == state, sorted(ep.state_dict)


def test_shared_weight_is_never_written_in_place() -> None:
    model = randomize_batch_norms(SharedWeightTwoBatchNorms(), torch.Generator().manual_seed(8))
    model.eval()
    inputs = (torch.randn(1, 3, 6, 6),)
    ep = export(model, inputs)
    original = ep.state_dict["weight"]
    snapshot = original.detach().clone()
    run_checked(ep, fusion_passes())
    assert torch.equal(original, snapshot)
    assert torch.equal(model.weight, snapshot)
