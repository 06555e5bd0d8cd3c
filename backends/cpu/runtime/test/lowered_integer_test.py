"""Integer and bool programs lowered by the real AOT side and run on the C++ CPU runtime: every
result equals eager exactly (no value passes through float)."""

import pytest
import torch

from backends.cpu.runtime.test.lowered_program import assert_exact, lower, run


class Int64Arithmetic(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b * 3, (a * b) - a  # a * b overflows: int64 wraps in eager too


def test_int64_above_2_pow_53_round_trips_exactly() -> None:
    a = torch.tensor([2**53 + 1, 2**62 + 7, -(2**60) - 3, 5])
    b = torch.tensor([3, -(2**61) + 1, 2**40 + 11, -(2**63)])
    actual, expected, _ = run(Int64Arithmetic(), (a, b))
    assert_exact(actual, expected)


class SmallIntegerArithmetic(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, a * b - b


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.uint8, torch.int32])
def test_small_integer_arithmetic_wraps_like_eager(dtype: torch.dtype) -> None:
    info = torch.iinfo(dtype)
    a = torch.tensor([info.max, info.min, info.max // 2 + 3, 7, 0], dtype=dtype)
    b = torch.tensor([2, info.max, info.max // 3, info.min + 1, 9], dtype=dtype)
    actual, expected, _ = run(SmallIntegerArithmetic(), (a, b))
    assert_exact(actual, expected)


class BoolMasks(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mask = torch.logical_and(x > 0, y < 1)
        return mask, torch.where(mask, x, y)


def test_bool_masks_are_exact() -> None:
    torch.manual_seed(2)
    x, y = torch.randn(4, 6), torch.randn(4, 6)
    actual, expected, _ = run(BoolMasks(), (x, y))
    assert_exact(actual, expected)


def test_wrong_dtype_at_run_time_is_an_error() -> None:
    a = torch.tensor([1, 2, 3])
    module, _ = lower(Int64Arithmetic(), (a, a + 1))
    with pytest.raises(RuntimeError):
        module.forward([a.to(torch.int32), (a + 1).to(torch.int32)])
