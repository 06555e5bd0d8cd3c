"""The plans' own sigmoid / SiLU kernel (vector_activations.h) against torch, through the C ABI.

Tolerance: the kernel's exp is a 5-term polynomial after an exact range reduction, so it agrees
with float64 torch within 4e-6 relative; where the result underflows (sigmoid of x < -87) the
kernel returns sigmoid(-87) ~ 1.6e-38, hence the absolute 1e-30. Plans that end in sigmoid or
SiLU must run it as that kernel (their description says "+ vector silu") and still match eager
within the provider tests' 1e-4.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from backends.cpu.runtime.providers.optimized.test.onednn_ctypes import (
    SIGMOID,
    SILU,
    PostOp,
    Provider,
    ProviderError,
)

REFERENCE: dict[int, Callable[[torch.Tensor], torch.Tensor]] = {
    SIGMOID: torch.sigmoid,
    SILU: F.silu,
}
NAMES = {SIGMOID: "sigmoid", SILU: "silu"}


@pytest.fixture(scope="module")
def provider() -> Provider:
    provider = Provider(num_threads=2, min_task_flops=0)
    if not provider.has_vector_activation(SILU):
        pytest.skip("no AVX-512F on this CPU: the plans keep oneDNN's post-ops")
    return provider


def _expected(kind: int, x: torch.Tensor) -> torch.Tensor:
    return REFERENCE[kind](x.double()).float()


def _assert_matches(kind: int, got: torch.Tensor, x: torch.Tensor) -> None:
    torch.testing.assert_close(got, _expected(kind, x), rtol=4e-6, atol=1e-30, equal_nan=True)


@pytest.mark.parametrize("kind", [SIGMOID, SILU], ids=NAMES.get)
def test_kernel_matches_torch_over_the_whole_range(provider: Provider, kind: int) -> None:
    # Dense over the range where exp matters, then the saturated and special values.
    grid = torch.linspace(-95.0, 95.0, 200_003)
    special = torch.tensor(
        [0.0, -0.0, 1e-30, -1e-30, 86.9, -86.9, 87.5, -87.5, 1e4, -1e4, math.inf, math.nan]
    )
    x = torch.cat([grid, special])
    _assert_matches(kind, provider.vector_activation(kind, x), x)


@pytest.mark.parametrize("kind", [SIGMOID, SILU], ids=NAMES.get)
@pytest.mark.parametrize("count", [1, 7, 15, 16, 17, 31, 33, 100])
def test_partial_vectors_touch_nothing_past_the_end(
    provider: Provider, kind: int, count: int
) -> None:
    torch.manual_seed(count)
    x = torch.randn(count + 16) * 6.0
    out = torch.full((count + 16,), 123.0)
    provider.vector_activation(kind, x[:count], out[:count])
    _assert_matches(kind, out[:count], x[:count])
    assert torch.equal(out[count:], torch.full((16,), 123.0))


def test_in_place(provider: Provider) -> None:
    x = torch.randn(1000) * 5.0
    data = x.clone()
    provider.vector_activation(SILU, data, data)
    _assert_matches(SILU, data, x)


def test_unknown_kind_is_an_error(provider: Provider) -> None:
    with pytest.raises(ProviderError, match=r"is not 3 \(sigmoid\) or 4 \(silu\)"):
        provider.vector_activation(1, torch.zeros(4))


@pytest.mark.parametrize("kind", [SIGMOID, SILU], ids=NAMES.get)
@pytest.mark.parametrize("rows", [5, 64])
def test_linear_ending_in_the_activation_runs_it_as_the_tail(
    provider: Provider, kind: int, rows: int
) -> None:
    # 300 output columns: with min_task_flops=0 the plan splits into column blocks, so the tail
    # runs on row-strided pieces of the output. (Up to 4 rows run on RowGemm, which applies the
    # activation in registers: row_gemm_test.py.)
    torch.manual_seed(rows)
    weight = torch.randn(300, 96) / math.sqrt(96)
    bias = torch.randn(300)
    x = torch.randn(rows, 96) * 2.0
    plan = provider.linear(rows, weight, bias, [PostOp(kind)])
    assert f"+ vector {NAMES[kind]}" in plan.describe()
    expected = REFERENCE[kind](F.linear(x, weight, bias))
    torch.testing.assert_close(plan.run(x), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("batch", "cin", "cout", "size", "output"),
    [
        (1, 16, 96, 28, "channels_last"),  # row bands
        (2, 8, 24, 9, "channels_last"),  # images
        (1, 256, 512, 4, "channels_last"),  # weights > activations: output-channel blocks
        (1, 16, 40, 12, "plain"),  # staged through the primitive's layout
    ],
)
def test_convolution_ending_in_silu_runs_it_as_the_tail(
    provider: Provider, batch: int, cin: int, cout: int, size: int, output: str
) -> None:
    torch.manual_seed(cin + cout)
    weight = torch.randn(cout, cin, 3, 3) / math.sqrt(9 * cin)
    bias = torch.randn(cout)
    x = torch.randn(batch, cin, size, size) * 2.0
    plan = provider.conv(
        list(x.shape), weight, bias, [1, 1], [1, 1], [1, 1], post_ops=[PostOp(SILU)], output=output
    )
    assert "+ vector silu" in plan.describe()
    assert plan.output_is_plain == (output == "plain")
    expected = F.silu(F.conv2d(x, weight, bias, padding=1))
    # A channels-last output comes back as a channels-last tensor of the logical shape.
    torch.testing.assert_close(plan.run(x), expected, rtol=1e-4, atol=1e-4)


def test_matmul_ending_in_silu_runs_it_as_the_tail(provider: Provider) -> None:
    torch.manual_seed(5)
    a = torch.randn(3, 40, 24)
    b = torch.randn(3, 24, 56) / math.sqrt(24)
    plan = provider.matmul(3, 40, 24, 56, [PostOp(SILU)])
    assert "+ vector silu" in plan.describe()
    torch.testing.assert_close(plan.run(a, b), F.silu(a @ b), rtol=1e-4, atol=1e-4)


def test_activation_before_a_residual_add_stays_a_onednn_post_op(provider: Provider) -> None:
    # Only a trailing activation becomes the tail: silu then add must add after the silu.
    torch.manual_seed(6)
    weight = torch.randn(64, 32) / math.sqrt(32)
    x = torch.randn(4, 32)
    residual = torch.randn(4, 64)
    plan = provider.linear(4, weight, None, [PostOp(SILU), PostOp(0)])
    assert "vector" not in plan.describe()
    expected = F.silu(F.linear(x, weight)) + residual
    torch.testing.assert_close(plan.run(x, residual=residual), expected, rtol=1e-4, atol=1e-4)


def test_switch_keeps_onednn_post_ops() -> None:
    # In a child, so the setting cannot leak into the other cases.
    code = (
        "from backends.cpu.runtime.providers.optimized.test.onednn_ctypes import (\n"
        "    Provider, PostOp, SILU)\n"
        "import torch\n"
        "p = Provider(num_threads=1)\n"
        "print(p.has_vector_activation(SILU))\n"
        "print(p.linear(2, torch.randn(8, 4), None, [PostOp(SILU)]).describe())\n"
    )
    env = {**os.environ, "ET_CPU_VECTOR_ACTIVATIONS": "0", "PYTHONPATH": os.pathsep.join(sys.path)}
    lines = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert lines[0] == "False"
    assert "vector" not in lines[1]
