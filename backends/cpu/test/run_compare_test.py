"""Lowered programs run on the CPU delegate's runtime and match eager PyTorch.

Floats compare with rtol=1e-5, atol=1e-5 (the folded batch norm reorders float arithmetic);
integer and bool outputs compare exactly.
"""

from collections.abc import Iterator

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.extension.pybindings import portable_lib
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.runtime.loader import load_cpu_backend
from backends.cpu.serialization.graph_reader import cpu_payloads
from backends.cpu.test.models import (
    ConvBN,
    IndexHeavy,
    LinearBN,
    SmallCNN,
    cnn_inputs,
    index_heavy_inputs,
    randomize_batch_norm,
)


@pytest.fixture(scope="module", autouse=True)
def _runtime() -> Iterator[None]:
    load_cpu_backend()
    assert "CpuBackend" in portable_lib._get_registered_backend_names()
    yield


def _run_lowered(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], expect_delegates: int = 1
) -> list[torch.Tensor]:
    edge = to_edge_transform_and_lower(
        torch.export.export(model, inputs), partitioner=[CpuPartitioner()]
    )
    assert len(cpu_payloads(edge.exported_program())) == expect_delegates
    pte = edge.to_executorch().buffer
    # portable_lib does not keep the buffer alive: hold it for as long as the module lives.
    module = portable_lib._load_for_executorch_from_buffer(pte)
    outputs = list(module.forward(inputs))
    del module
    return outputs


def _compare(actual: list[torch.Tensor], expected: object) -> None:
    expected_list = list(expected) if isinstance(expected, tuple) else [expected]
    assert len(actual) == len(expected_list)
    for got, want in zip(actual, expected_list, strict=True):
        assert isinstance(want, torch.Tensor)
        if want.dtype.is_floating_point:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        else:
            assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize(
    ("make_model", "make_inputs"),
    [
        (lambda: randomize_batch_norm(SmallCNN()), cnn_inputs),
        (lambda: randomize_batch_norm(ConvBN()), lambda: (torch.randn(2, 8, 8, 8),)),
        (lambda: randomize_batch_norm(LinearBN()), lambda: (torch.randn(4, 64),)),
        (IndexHeavy, index_heavy_inputs),
    ],
    ids=["small_cnn", "conv_bn", "linear_bn", "index_heavy"],
)
def test_lowered_model_matches_eager(make_model: object, make_inputs: object) -> None:
    torch.manual_seed(0)
    model = make_model()  # type: ignore[operator]
    inputs = make_inputs()  # type: ignore[operator]
    with torch.no_grad():
        expected = model(*inputs)
    _compare(_run_lowered(model, inputs), expected)


class _SplitByAtan(torch.nn.Module):
    """atan has no route: two delegates around an op that runs on ExecuTorch's own kernels."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(torch.atan(torch.relu(x) * 2.0)) - 0.5


def test_partially_delegated_program_matches_eager() -> None:
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    _compare(_run_lowered(_SplitByAtan(), (x,), expect_delegates=2), _SplitByAtan()(x))


class _IntegerArithmetic(torch.nn.Module):
    def forward(
        self, a: torch.Tensor, b: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        # abs(): ExecuTorch's own remainder kernel rounds like C for negative int8 dividends
        # (-4 where torch gives 3), with or without this delegate; the delegate matches it.
        mixed = (a * b + a).abs() % 7
        bigger = torch.where(a > b, a, b)
        halves = b.to(torch.float32) * 0.5  # a dtype cast (_to_dim_order_copy); exact in float
        return mixed, bigger, (a == b) | (a < 0), halves


_INT_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64]


# No shrinking: every example exports and lowers a program (about a second each).
@settings(
    max_examples=8,
    derandomize=True,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(
    dtype=st.sampled_from(_INT_DTYPES),
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
)
def test_integer_paths_are_exact(dtype: torch.dtype, shape: list[int], seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    a = torch.randint(-10, 10, shape, generator=generator).to(dtype)
    b = torch.randint(-10, 10, shape, generator=generator).to(dtype)
    _compare(_run_lowered(_IntegerArithmetic(), (a, b)), _IntegerArithmetic()(a, b))
