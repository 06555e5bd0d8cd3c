"""Issue 45: rotary embeddings in the "rotate half" form (`x * cos + cat([-x[..., h:],
x[..., :h]]) * sin`) are fused by preprocess (backends/cpu/fuse_rotary.py) into one
`et_cpu_quant::rotary` op, run by the Optimized provider's AVX-512 kernel
(providers/optimized/kernels/rotary.h) or, with ET_CPU_ROTARY=0, by the Reference provider's
built-in scalar loop (runtime/rotary.cc). Real torch.export, the real partitioner and runtime,
against eager: head dims with a 16-lane tail (48 -> halves of 24) and without (32), tables of
[S, D] and [1, 1, S, D], a dynamic sequence length, the zoo's Llama-style decoder, and a
look-alike that is not a rotary (other slice bounds) left alone.

Tolerance 1e-5: one product and one sum per element (the AVX-512 kernel may fuse them: 1 ulp).
"""

import functools

import pytest
import torch
from torch import nn
from torch.export import Dim

from backends.cpu.runtime import loader
from backends.cpu.runtime.test.fused_op_checks import (
    check_both_providers,
    payload_kernels,
    placements_of,
    run_with_switch,
)
from backends.cpu.runtime.test.lowered_program import load, lower_to_pte
from tools.bench import zoo

KERNEL = "et_cpu_quant::rotary.out"


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Rope(nn.Module):
    """q and k of a linear over [B, S, H * D] as [B, H, S, D], each rotated; their product."""

    def __init__(self, heads: int, head_dim: int, max_seq: int, table_4d: bool) -> None:
        super().__init__()
        self.heads, self.head_dim, self.table_4d = heads, head_dim, table_4d
        dim = heads * head_dim
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(max_seq).float(), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        self.cos: torch.Tensor
        self.sin: torch.Tensor
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        cos, sin = self.cos[:seq], self.sin[:seq]
        if self.table_4d:
            cos, sin = cos[None, None], sin[None, None]

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, seq, self.heads, self.head_dim).transpose(1, 2)

        q, k = heads(self.wq(x)), heads(self.wk(x))
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        return q @ k.transpose(-2, -1)


class NotRope(nn.Module):
    """Looks like a rotary but swaps unequal pieces: left as it is."""

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return x * cos + torch.cat([-x[..., 3:], x[..., :3]], dim=-1) * sin


@pytest.mark.parametrize("table_4d", [False, True], ids=["table_2d", "table_4d"])
@pytest.mark.parametrize("head_dim", [48, 32])
def test_rotary_is_one_op_matching_eager(head_dim: int, table_4d: bool) -> None:
    torch.manual_seed(head_dim)
    model = Rope(heads=3, head_dim=head_dim, max_seq=24, table_4d=table_4d).eval()
    x = torch.randn(2, 19, 3 * head_dim)
    with torch.no_grad():
        expected = model(x)
    pte, payloads = lower_to_pte(model, (x,))
    kernels = payload_kernels(payloads)
    assert kernels.count(KERNEL) == 2, kernels
    assert "aten::cat.out" not in kernels and "aten::neg.out" not in kernels, kernels
    check_both_providers(pte, (x,), KERNEL, "ET_CPU_ROTARY", 2, expected)


@functools.cache
def _dynamic_rope() -> tuple[nn.Module, bytes]:
    """A rotary model with a dynamic sequence (1 to 32) and its .pte, lowered once for both
    switch values."""
    torch.manual_seed(3)
    model = Rope(heads=2, head_dim=48, max_seq=32, table_4d=False).eval()
    example = (torch.randn(1, 8, 96),)
    dims = ({1: Dim("seq", min=1, max=32)},)
    return model, lower_to_pte(model, example, dynamic_shapes=dims)[0]


@pytest.mark.parametrize("provider, switch", [("Optimized", None), ("Reference", "0")])
def test_rotary_with_a_dynamic_sequence(
    monkeypatch: pytest.MonkeyPatch, provider: str, switch: str | None
) -> None:
    # Both kernels read their sizes at each run (resizable): the graph takes each new sequence
    # length in place (runtime README, "Resizing in place").
    if switch is None:
        monkeypatch.delenv("ET_CPU_ROTARY", raising=False)
    else:
        monkeypatch.setenv("ET_CPU_ROTARY", switch)
    model, pte = _dynamic_rope()
    module = load(pte)  # its delegate reads the switch when it binds (the first forward)
    for seq in [1, 5, 32]:
        x = torch.randn(1, seq, 96)
        (actual,) = module.forward([x])
        with torch.no_grad():
            torch.testing.assert_close(actual, model(x), rtol=1e-5, atol=1e-5)
    placement = loader.last_placement()
    lines = placements_of(KERNEL, placement)
    assert len(lines) == 2 and all(f": {provider}" in line for line in lines), placement
    assert any("new sizes resized in place" in line for line in placement), placement[:2]


def test_look_alike_is_left_alone() -> None:
    torch.manual_seed(4)
    inputs = (torch.randn(2, 5, 8), torch.randn(5, 8), torch.randn(5, 8))
    pte, payloads = lower_to_pte(NotRope().eval(), inputs)
    assert KERNEL not in payload_kernels(payloads)
    (actual,), _ = run_with_switch(pte, inputs, "ET_CPU_ROTARY", None)
    torch.testing.assert_close(actual, NotRope()(*inputs), rtol=1e-6, atol=1e-6)


def test_zoo_llama_rotaries_fused_and_matching_eager() -> None:
    model, inputs = zoo.create("llama", "small", seed=0)
    with torch.no_grad():
        expected = model(*inputs)
    pte, payloads = lower_to_pte(model, tuple(inputs))
    assert payload_kernels(payloads).count(KERNEL) == 4  # q and k of 2 layers
    (actual,), placement = run_with_switch(pte, tuple(inputs), "ET_CPU_ROTARY", None)
    assert len(placements_of(KERNEL, placement)) == 4, placement
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
