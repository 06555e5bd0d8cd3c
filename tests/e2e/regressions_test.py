"""End-to-end regressions of the other issues, each lowered for the CPU delegate and run on the
ExecuTorch runtime: what broke once (or easily could) stays fixed.

Float outputs: atol 1e-4 + rtol 1e-4 against eager; integer and bool outputs: exactly equal.
"""

from pathlib import Path

import pytest
import torch
from torch import nn

from tests.e2e.lower_e2e import lower, lower_and_run
from tools.lower.runtime_check import compare_outputs

ATOL = RTOL = 1e-4


def _bn(n: int) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(n)
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)  # type: ignore[union-attr]
        bn.running_var.uniform_(0.5, 2.0)  # type: ignore[union-attr]
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    return bn


def _assert_matches(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> None:
    checks = compare_outputs(actual, expected, ATOL, RTOL)
    assert all(c.ok for c in checks), checks


def test_folded_weights_are_serialized_once(tmp_path: Path) -> None:
    # The bug: the original conv weights and BN statistics were serialized next to the fused
    # ones. ResNet's folded constants are smaller than its exported constants, so a .pte that
    # carries both is well above the exported constant bytes plus the graph's own overhead.
    code, report = lower(
        ["--example", "resnet", "-o", str(tmp_path / "r.pte"), "--runs", "0"], tmp_path
    )
    assert code == 0 and report is not None
    assert report["batch_norms"]["folded"] == report["batch_norms"]["before"] == 6
    overhead = report["pte_bytes"] - report["constant_bytes"]
    assert overhead < 16 * 1024, f".pte carries {overhead} bytes beyond the constants"


class SharedWeight(nn.Module):
    """One conv weight used by two convolutions; only one of them is followed by a batch norm."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = _bn(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.bn(self.conv(x))
        b = nn.functional.conv2d(x, self.conv.weight, self.conv.bias, padding=1)
        return a + b


class ConvWithTwoUsers(nn.Module):
    """The conv output feeds the BN and something else: folding would change the other user."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = _bn(4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.conv(x)
        return self.bn(y), torch.relu(y)


@pytest.mark.parametrize("model_class", [SharedWeight, ConvWithTwoUsers])
def test_batch_norm_folding_never_changes_other_users(tmp_path: Path, model_class: type) -> None:
    torch.manual_seed(0)
    lowered, actual, expected = lower_and_run(model_class(), (torch.randn(1, 3, 8, 8),), tmp_path)
    assert lowered.delegation.not_delegated_count == 0
    _assert_matches(actual, expected)


class GatherAllIndices(nn.Module):
    """index.Tensor and index_put with every index present: the serializer may emit a plain
    tensor list, the kernels expect `Tensor?[]`."""

    def forward(
        self, t: torch.Tensor, i: torch.Tensor, j: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        picked = t[i, j]
        put = torch.index_put(t, (i, j), picked * 2)
        return picked, put, (picked > 0).sum()


def test_index_with_all_indices_present_runs_exactly(tmp_path: Path) -> None:
    t = torch.arange(20, dtype=torch.int64).reshape(4, 5) - 7
    i, j = torch.tensor([0, 3, 2]), torch.tensor([4, 0, 1])
    lowered, actual, expected = lower_and_run(GatherAllIndices(), (t, i, j), tmp_path)
    assert lowered.delegation.not_delegated_count == 0
    assert [a.dtype for a in actual] == [torch.int64, torch.int64, torch.int64]
    _assert_matches(actual, expected)


class MixedDtypes(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        doubled = x.to(torch.float64) * 2  # float64 has no route: stays outside
        return torch.relu(doubled.to(torch.float32) + 1)


def test_unsupported_dtype_stays_outside_with_its_reason_and_still_matches(tmp_path: Path) -> None:
    lowered, actual, expected = lower_and_run(MixedDtypes(), (torch.randn(3, 4),), tmp_path)
    reasons = lowered.delegation.not_delegated
    assert "dtype" in reasons, reasons
    assert lowered.delegation.delegated_count > 0
    _assert_matches(actual, expected)


class Dynamic(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 2


def test_unbounded_dynamic_shapes_stay_outside_with_their_reason(tmp_path: Path) -> None:
    shapes = ({0: torch.export.Dim("rows", min=2)},)  # no max: the delegate needs a bound
    x = torch.randn(4, 3)
    lowered, actual, expected = lower_and_run(Dynamic(), (x,), tmp_path, dynamic_shapes=shapes)
    left_out = {n["op"]: n["reason"] for n in lowered.delegation.left_out}
    assert left_out["aten.relu.default"] == "dynamic shape"
    assert left_out["aten.mul.Tensor"] == "dynamic shape"
    _assert_matches(actual, expected)


def test_runtime_rejects_inputs_of_the_wrong_shape_with_an_error(tmp_path: Path) -> None:
    from tools.lower.errors import LowerError
    from tools.lower.runtime_check import load_program, run_program

    lower_and_run(Dynamic(), (torch.randn(4, 3),), tmp_path)
    module = load_program(str(tmp_path / "model.pte"))
    with pytest.raises(LowerError, match="running forward on the runtime failed"):
        run_program(module, (torch.randn(5, 3),), "model.pte")
    with pytest.raises(LowerError):
        run_program(module, (torch.randn(4, 3).double(),), "model.pte")
