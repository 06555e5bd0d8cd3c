"""Views of intermediates share their bytes (compiled_graph.cc, plan_arena): view_copy and the
squeeze / unsqueeze copies of an arena intermediate are bound but never run, their outputs
pointing at their input's slot, which then lives until the last reader of either. Views of a
graph input or a view that is itself a graph output still copy (the caller's memory).

Only additions and multiplications by exact constants: outputs must equal eager's exactly, with
and without the optimized providers (the all-Reference run aliases too).
"""

import torch

from backends.cpu.runtime.test.provider_compare import check_placed, run_both

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
