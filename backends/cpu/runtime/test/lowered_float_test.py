"""Float models and indexing lowered by the real AOT side and run on the C++ CPU runtime: float
results match eager within ATOL/RTOL (rounding only), gathers and integer results exactly."""

from typing import Any

import pytest
import torch

from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import ATOL, RTOL, assert_exact, run


class ConvBnNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x))) + x
        return self.fc(x.mean(dim=(2, 3)))


class MlpBn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.bn = torch.nn.BatchNorm1d(32)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def _randomize_bn(model: torch.nn.Module) -> torch.nn.Module:
    torch.manual_seed(0)
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            assert module.running_mean is not None and module.running_var is not None
            module.running_mean.uniform_(-1, 1)
            module.running_var.uniform_(0.5, 2)
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.uniform_(-0.5, 0.5)
    return model


@pytest.mark.parametrize("model_class, shape", [(ConvBnNet, (2, 3, 12, 12)), (MlpBn, (8, 16))])
def test_float_models_match_eager_with_batch_norm_folded(model_class: Any, shape: Any) -> None:
    torch.manual_seed(1)
    model = _randomize_bn(model_class()).eval()
    x = torch.randn(*shape)
    actual, expected, kernels = run(model, (x,))
    torch.testing.assert_close(actual[0], expected[0], atol=ATOL, rtol=RTOL)
    flat = [kernel for delegate in kernels for kernel in delegate]
    assert not [k for k in flat if "batch_norm" in k], flat
    assert loader.last_arena_bytes() > 0


class Indexing(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # An integer constant inside the delegate.
        self.offsets: torch.Tensor
        self.register_buffer("offsets", torch.tensor([2**55, -3, 7], dtype=torch.int64))

    def forward(
        self, x: torch.Tensor, idx: torch.Tensor, ids: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        rows = x[idx]  # index.Tensor with [idx]
        cols = x[:, idx]  # [None, idx]
        with_none = x[idx, None]  # [idx] then a new axis
        shifted = ids + self.offsets  # integer output next to float outputs
        return rows, cols, with_none, shifted


def test_indices_with_none_entries_mixed_outputs_and_integer_constants() -> None:
    torch.manual_seed(3)
    x = torch.randn(5, 5)
    idx = torch.tensor([4, 0, 2])
    ids = torch.tensor([1, 2**54 + 1, -5])
    actual, expected, kernels = run(Indexing(), (x, idx, ids))
    assert_exact(actual, expected)  # gathers and integer adds are exact
    assert any("aten::index.Tensor_out" in delegate for delegate in kernels)


class IndexPut(torch.nn.Module):
    def __init__(self, accumulate: bool) -> None:
        super().__init__()
        self.accumulate = accumulate

    def forward(self, x: torch.Tensor, idx: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        return torch.index_put(x, (idx,), values, accumulate=self.accumulate)


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_index_put_with_and_without_accumulate(accumulate: bool, dtype: torch.dtype) -> None:
    x = (torch.arange(12).reshape(4, 3) * (2**50 if dtype == torch.int64 else 1)).to(dtype)
    idx = torch.tensor([3, 1, 3])  # a repeated index: accumulate sums both rows
    values = torch.arange(9).reshape(3, 3).to(dtype) + 1
    if not accumulate:
        idx = torch.tensor([3, 1, 0])  # without accumulate, repeated writes are unordered
    actual, expected, _ = run(IndexPut(accumulate), (x, idx, values))
    assert_exact(actual, expected)
