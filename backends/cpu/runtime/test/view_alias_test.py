"""Intermediates that share their bytes (compiled_graph.cc, plan_arena).

Views: view_copy and the squeeze / unsqueeze copies of an arena intermediate are bound but never
run, their outputs pointing at their input's slot, which then lives until the last reader of
either. Views of a graph input or a view that is itself a graph output still copy (the caller's
memory). Only additions and multiplications by exact constants there: outputs must equal eager's
exactly, with and without the optimized providers (the all-Reference run aliases too).

Fused residual adds (alias_fused_adds): a convolution or linear that took `+ residual` writes its
result into the residual's slot when nothing reads the residual afterwards and the op does not
read it as its input too; no copy of the residual into the output first. ET_CPU_ADD_IN_PLACE=0
gives each result a slot of its own: the outputs must be bitwise the same either way.
"""

import pytest
import torch

from backends.cpu.runtime.test.lowered_program import lower_to_pte
from backends.cpu.runtime.test.provider_compare import (
    assert_close_scaled,
    check_placed,
    run_both,
    run_pte_both,
)

ALIASED = "(aliases its input: no copy)"


class Views(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x + 1.0  # an intermediate in the arena
        flat = y.view(-1, y.shape[-1])  # aliases y
        chained = flat.unsqueeze(0).squeeze(0)  # views of a view: the same slot
        later = y * 2.0  # y read after its views: the shared slot must still hold it
        through = chained * 0.5 + 1.0  # a reader of the alias
        of_input = x.view(-1) * 4.0  # a graph input's view copies
        as_output = (y - 1.0).view(-1)  # a view that is a graph output copies
        return through, later, of_input, as_output


def test_views_alias_their_input_and_match_eager_exactly() -> None:
    torch.manual_seed(3)
    x = torch.randn(4, 6, 8)
    model = Views().eval()
    out_opt, out_ref, placement = run_both(model, (x,))
    expected = model(x)
    for got, ref, want in zip(out_opt, out_ref, expected, strict=True):
        assert torch.equal(got, want) and torch.equal(ref, want)
    views = [
        line
        for line in placement
        if any(f" aten::{kind}" in line for kind in ("view_copy", "squeeze_copy", "unsqueeze"))
    ]
    aliased = [line for line in views if line.endswith(ALIASED)]
    # y.view, unsqueeze, squeeze alias; x.view (graph input) and the output view copy.
    assert len(aliased) == 3, views
    assert len(views) == 5, views


class Heads(torch.nn.Module):
    """Attention's head split and merge around a matmul: views between optimized kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(32, 96)
        self.out = torch.nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 4, 8).permute(2, 0, 3, 1, 4).unbind(0)
        attention = (q @ k.transpose(-2, -1) * 8**-0.5).softmax(-1) @ v
        return self.out(attention.transpose(1, 2).reshape(b, t, 32))


def test_views_between_optimized_kernels_match_eager() -> None:
    torch.manual_seed(5)
    # Against all-Reference and eager within provider_compare's tolerance (sums reordered).
    views = check_placed(Heads().eval(), (torch.randn(2, 10, 32),), "aten::view_copy.out", "")
    assert [line for line in views if line.endswith(ALIASED)], views


IN_PLACE = "(adds in place: writes into "


class Residuals(torch.nn.Module):
    """ResNet-style adds (identity and downsampled), a linear's add, and two that must not run in
    place: a residual read after its add, and a convolution adding its own input."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.branch = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.project = torch.nn.Conv2d(8, 8, 1)
        self.down = torch.nn.Conv2d(8, 16, 1, stride=2)
        self.strided = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.own = torch.nn.Conv2d(16, 16, 1)
        self.fc = torch.nn.Linear(16, 16)
        self.fc2 = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = torch.relu(self.stem(x))
        y = torch.relu(self.project(torch.relu(self.branch(h))) + h)  # identity: in place
        z = self.strided(y) + self.down(y)  # the downsampled residual: in place
        kept = self.own(z) + z  # reads z as its input too: not in place
        t = kept.flatten(2).transpose(1, 2)  # [batch, pixels, 16]
        u = torch.relu(self.fc(t))
        v = self.fc2(u) + u  # reads u as its input too: not in place
        w = self.fc(v)
        later = self.fc2(w) + v  # v also read below: not in place
        return later, v * 0.5


def test_fused_adds_write_into_their_residual() -> None:
    torch.manual_seed(7)
    model = Residuals().eval()
    x = torch.randn(2, 3, 12, 12)
    pte, _ = lower_to_pte(model, (x,))
    runs = {}
    for switch in ("unset", "0"):
        with pytest.MonkeyPatch.context() as patch:
            if switch == "unset":
                patch.delenv("ET_CPU_ADD_IN_PLACE", raising=False)
            else:
                patch.setenv("ET_CPU_ADD_IN_PLACE", switch)
            runs[switch] = run_pte_both(pte, (x,))
    out, out_ref, placement = runs["unset"]
    in_place = [line for line in placement if IN_PLACE in line]
    # The identity add (into h) and the downsampled one (into the 1x1 stride-2 result).
    assert len(in_place) == 2, placement
    assert not [line for line in runs["0"][2] if IN_PLACE in line]
    with torch.no_grad():
        expected = model(x)
    for got, off, ref, want in zip(out, runs["0"][0], out_ref, expected, strict=True):
        assert torch.equal(got, off)
        assert_close_scaled(got, ref)
        assert_close_scaled(got, want)
