"""Issue 45: scaled_dot_product_attention's softmax and its fully-masked-row guard (softmax, eq
-inf, logical_not, any, logical_not, where over zeros) are fused by preprocess
(backends/cpu/fuse_safe_softmax.py) into one `et_cpu_quant::safe_softmax` op, run by the Optimized
provider's AVX-512 softmax rows or, with ET_CPU_SAFE_SOFTMAX=0, by the Reference provider's
built-in scalar loop (runtime/safe_softmax.cc). Real torch.export, the real partitioner and
runtime: causal SDPA against eager, an additive mask with fully masked rows (zeros there, as
torch's _safe_softmax, never NaN), the zoo's Llama-style decoder, and a guard filling 0.5 instead
of zeros left alone.
"""

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from backends.cpu.quantized_ops import safe_softmax
from backends.cpu.runtime.test.fused_op_checks import (
    check_both_providers,
    payload_kernels,
    run_with_switch,
)
from backends.cpu.runtime.test.lowered_program import lower_to_pte
from tools.bench import zoo

KERNEL = "et_cpu_quant::safe_softmax.out"
SWITCH = "ET_CPU_SAFE_SOFTMAX"
GUARD = ("aten::eq.Scalar_out", "aten::logical_not.out", "aten::any.out", "aten::where.self_out")


class Attention(nn.Module):
    """q, k, v of a linear over [B, S, H * D] as [B, H, S, D]; SDPA, causal or with `mask`."""

    def __init__(self, heads: int, head_dim: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.qkv = nn.Linear(heads * head_dim, 3 * heads * head_dim, bias=False)

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch, seq, _ = x.shape
        qkv = self.qkv(x).view(batch, seq, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return qkv[0], qkv[1], qkv[2]

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self.split(x)
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class HalfFilled(nn.Module):
    """The guard's shape with 0.5 for fully masked rows: not a safe softmax, left alone."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.softmax(x, dim=-1)
        masked = torch.logical_not(torch.logical_not(x == float("-inf")).any(-1, keepdim=True))
        return torch.where(masked, torch.full_like(s, 0.5), s)


@pytest.mark.parametrize("seq", [19, 40])
def test_causal_sdpa_softmax_is_one_op_matching_eager(seq: int) -> None:
    torch.manual_seed(seq)
    model = Attention(heads=3, head_dim=16).eval()
    x = torch.randn(2, seq, 48)
    with torch.no_grad():
        expected = model(x)
    pte, payloads = lower_to_pte(model, (x,))
    kernels = payload_kernels(payloads)
    assert kernels.count(KERNEL) == 1, kernels
    assert not set(GUARD) & set(kernels) and "aten::_softmax.out" not in kernels, kernels
    check_both_providers(pte, (x,), KERNEL, SWITCH, 1, expected)


def test_fully_masked_rows_give_zeros() -> None:
    torch.manual_seed(7)
    model = Attention(heads=2, head_dim=16).eval()
    seq = 21
    x = torch.randn(1, seq, 32)
    mask = torch.zeros(seq, seq)
    mask[torch.rand(seq, seq) < 0.3] = -math.inf
    mask[[2, 11, 20]] = -math.inf  # rows with no key at all
    with torch.no_grad():  # torch's _safe_softmax semantics, written out
        q, k, v = model.split(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(16) + mask
        expected = safe_softmax(scores, -1) @ v
    pte, payloads = lower_to_pte(model, (x, mask))
    assert payload_kernels(payloads).count(KERNEL) == 1
    check_both_providers(pte, (x, mask), KERNEL, SWITCH, 1, expected)
    (actual,), _ = run_with_switch(pte, (x, mask), SWITCH, None)
    assert torch.equal(actual[:, :, [2, 11, 20]], torch.zeros(1, 2, 3, 16))


def test_other_fill_is_left_alone() -> None:
    x = torch.randn(2, 3, 9)
    x[0, 1] = -math.inf
    pte, payloads = lower_to_pte(HalfFilled().eval(), (x,))
    assert KERNEL not in payload_kernels(payloads)
    (actual,), _ = run_with_switch(pte, (x,), SWITCH, None)
    torch.testing.assert_close(actual, HalfFilled()(x), rtol=1e-6, atol=1e-6)


def test_zoo_llama_guards_fused_and_matching_eager() -> None:
    model, inputs = zoo.create("llama", "small", seed=0)
    with torch.no_grad():
        expected = model(*inputs)
    pte, payloads = lower_to_pte(model, tuple(inputs))
    kernels = payload_kernels(payloads)
    assert kernels.count(KERNEL) == 2, kernels  # one a layer
    assert not set(GUARD) & set(kernels), kernels
    check_both_providers(pte, tuple(inputs), KERNEL, SWITCH, 2, expected)
