"""The fusions through `to_edge_transform_and_lower(..., transform_passes=...)`, down to a `.pte`
run on the ExecuTorch runtime, and what constant hygiene saves in `.pte` bytes."""

from __future__ import annotations

import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

from backends.transforms.exir_adapter import ExirProgramPass, edge_transform_passes
from backends.transforms.fuse_batch_norm_with_conv import FuseBatchNormWithConvPass
from backends.transforms.pass_report import PassReport
from backends.transforms.program_checks import check_program_consistency, constant_bytes
from backends.transforms.test.bn_test_util import (
    ATOL,
    RTOL,
    batch_norm_count,
    eager,
    export,
    fusion_passes,
    randomize_batch_norms,
)

CHANNELS = 32


class SharedWeight(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(CHANNELS, CHANNELS, 3, 3) * 0.1)
        self.bn1 = torch.nn.BatchNorm2d(CHANNELS)
        self.bn2 = torch.nn.BatchNorm2d(CHANNELS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.bn1(torch.nn.functional.conv2d(x, self.weight, padding=1))
        b = self.bn2(torch.nn.functional.conv2d(a, self.weight, padding=1))
        return b


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return randomize_batch_norms(SharedWeight(), torch.Generator().manual_seed(9)).eval()


INPUTS = (torch.randn(1, CHANNELS, 6, 6),)
WEIGHT_BYTES = 4 * CHANNELS * CHANNELS * 9
IDEAL_CONSTANT_BYTES = 2 * (WEIGHT_BYTES + 4 * CHANNELS)  # two fused weights, two fused biases


def _run_pte(pte: bytes) -> torch.Tensor:
    module = _load_for_executorch_from_buffer(pte)  # `pte` stays referenced while module runs
    return module.forward(INPUTS)[0]


def test_transform_passes_fuse_prune_and_run_on_the_runtime() -> None:
    model = _model()
    reports: list[PassReport] = []
    manager = to_edge_transform_and_lower(
        export(model, INPUTS), transform_passes=edge_transform_passes(fusion_passes(), reports)
    )
    edge = manager.exported_program()
    check_program_consistency(edge)
    assert batch_norm_count(edge) == 0
    assert [r.pass_name for r in reports] == [
        "FuseBatchNormWithConvPass",
        "FuseBatchNormWithLinearPass",
        "LiftConstantsPass",
        "PruneUnusedConstantsPass",
    ]
    assert reports[0].folded == 2
    assert constant_bytes(edge) == IDEAL_CONSTANT_BYTES

    pte = manager.to_executorch().buffer
    expected = eager(model, INPUTS)
    scale = max(1.0, float(expected.abs().max()))
    torch.testing.assert_close(_run_pte(pte), expected, rtol=RTOL, atol=ATOL * scale)
    # The program is little beyond its constants: no original weight or BN statistics inside.
    assert IDEAL_CONSTANT_BYTES < len(pte) < IDEAL_CONSTANT_BYTES + 8 * 1024


def test_without_hygiene_the_pte_carries_originals_and_statistics() -> None:
    """Fusion alone (as upstream passes do it) leaves the shared original weight and every BN
    statistic in the program: to_edge pruned unused parameters before the fusion ran and never
    prunes buffers."""
    fusion_only = to_edge_transform_and_lower(
        export(_model(), INPUTS), transform_passes=[ExirProgramPass(FuseBatchNormWithConvPass())]
    )
    with_hygiene = to_edge_transform_and_lower(
        export(_model(), INPUTS),
        transform_passes=edge_transform_passes([FuseBatchNormWithConvPass()]),
    )
    leftover = constant_bytes(fusion_only.exported_program()) - IDEAL_CONSTANT_BYTES
    # The original weight, 2 x (weight, bias, mean, var) floats and 2 int64 counters.
    assert leftover == WEIGHT_BYTES + 2 * 4 * 4 * CHANNELS + 2 * 8
    pte_fusion_only = len(fusion_only.to_executorch().buffer)
    pte_with_hygiene = len(with_hygiene.to_executorch().buffer)
    assert pte_fusion_only - pte_with_hygiene >= leftover
    assert pte_fusion_only > 1.45 * pte_with_hygiene


def test_mlp_with_bias_free_linear_folds_through_transform_passes() -> None:
    """to_edge decomposes linear into addmm / mm (no bias); both fold, and the .pte runs."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16, bias=False),
        torch.nn.BatchNorm1d(16),
        torch.nn.ReLU(),
        torch.nn.Linear(16, 4),
        torch.nn.BatchNorm1d(4),
    )
    randomize_batch_norms(model, torch.Generator().manual_seed(11)).eval()
    inputs = (torch.randn(5, 8),)
    reports: list[PassReport] = []
    manager = to_edge_transform_and_lower(
        export(model, inputs), transform_passes=edge_transform_passes(fusion_passes(), reports)
    )
    edge = manager.exported_program()
    check_program_consistency(edge)
    assert reports[1].folded == 2 and batch_norm_count(edge) == 0
    assert constant_bytes(edge) == 4 * (16 * 8 + 16 + 4 * 16 + 4)
    pte = manager.to_executorch().buffer
    module = _load_for_executorch_from_buffer(pte)
    expected = eager(model, inputs)
    torch.testing.assert_close(module.forward(inputs)[0], expected, rtol=RTOL, atol=ATOL)
