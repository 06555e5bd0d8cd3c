"""permute_copy on the Optimized provider's own copy loops (issue 19): attention's head split
and merge, transposes, NCL -> NLC after a convolution that writes channels-last.

A permutation moves values without arithmetic: outputs must equal eager's exactly.
"""

import torch

from backends.cpu.runtime.test.provider_compare import assert_close_scaled, placed, run_both


class Permute(torch.nn.Module):
    def __init__(self, dims: tuple[int, ...]) -> None:
        super().__init__()
        self.dims = dims

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The add keeps the permute's input an activation (a graph input's permute would do too).
        return (x + 1).permute(self.dims)


CASES = [
    ((5, 7), (1, 0)),  # a plain transpose (2-D tiles, ragged edges)
    ((33, 70), (1, 0)),
    ((1, 6, 20, 24), (0, 2, 1, 3)),  # attention: heads <-> tokens, innermost run stays
    ((2, 3, 17, 8), (0, 1, 3, 2)),  # k transposed for q @ k^T
    ((2, 3, 4, 5), (3, 1, 0, 2)),
    ((4, 3, 2, 5, 6), (4, 0, 3, 1, 2)),
    ((3, 1, 4), (1, 2, 0)),  # size-1 dims dropped
    ((1, 1), (1, 0)),  # one element
]


class Permutes(torch.nn.Module):
    """Each case's permute of its own input: one lowering for every case keeps the test fast."""

    def forward(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple((x + 1.0).permute(dims) for x, (_, dims) in zip(xs, CASES, strict=True))


def test_permutes_match_eager_exactly() -> None:
    torch.manual_seed(7)
    xs = tuple(torch.randn(*shape) for shape, _ in CASES)
    model = Permutes().eval()
    out_opt, out_ref, placement = run_both(model, xs)
    expected = model(*xs)
    for (shape, dims), got, ref, want in zip(CASES, out_opt, out_ref, expected, strict=True):
        assert torch.equal(got, want) and torch.equal(ref, want), (shape, dims)
    lines = placed(placement, "aten::permute_copy.out", "Optimized")
    assert len(lines) == len(CASES), placement
    (summary,) = [line for line in placement if line.startswith("Optimized(oneDNN): ")]
    assert f"{len(CASES)} permute" in summary, summary


class ConvThenTranspose(torch.nn.Module):
    """Conv1d (channels-last inside the delegate when its reader allows) then NCL -> NLC."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(8, 16, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).transpose(1, 2).contiguous()


def test_permute_after_a_convolution() -> None:
    torch.manual_seed(1)
    x = torch.randn(2, 8, 40)
    model = ConvThenTranspose().eval()
    out_opt, out_ref, placement = run_both(model, (x,))
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(out_opt[0], expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out_opt[0], out_ref[0], atol=1e-4, rtol=1e-4)
    assert placed(placement, "aten::permute_copy.out", "Optimized"), placement


def test_large_permute_is_split_into_pieces() -> None:
    x = torch.randn(1, 8, 256, 64)
    model = Permute((0, 2, 1, 3)).eval()
    out_opt, _, placement = run_both(model, (x,), with_reference=False)
    assert torch.equal(out_opt[0], model(x))
    (summary,) = [line for line in placement if line.startswith("Optimized(oneDNN): ")]
    if "work sharing" in summary:
        assert "1 ops split" in summary, summary


def test_integer_permute_stays_on_the_reference_kernel() -> None:
    x = torch.arange(24).reshape(2, 3, 4)
    model = Permute((2, 0, 1)).eval()
    out_opt, _, placement = run_both(model, (x,), with_reference=False)
    assert torch.equal(out_opt[0], model(x))
    lines = placed(placement, "aten::permute_copy.out", "Reference (declined")
    assert lines and "float32" in lines[0], placement


class TokensToBranches(torch.nn.Module):
    """The text CNN's start: token features (N, L, C) transposed to (N, C, L) for Conv1d
    branches of several widths (only convolutions read the transposed tensor)."""

    def __init__(self) -> None:
        super().__init__()
        self.branches = torch.nn.ModuleList(
            torch.nn.Conv1d(16, 8, width, padding=width // 2) for width in (3, 4, 5)
        )

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = (tokens + 1.0).transpose(1, 2)
        return tuple(torch.relu(branch(x)) for branch in self.branches)


def test_a_transpose_only_convolutions_read_becomes_a_copy_into_channels_last() -> None:
    torch.manual_seed(4)
    tokens = torch.randn(2, 30, 16)
    model = TokensToBranches().eval()
    out_opt, out_ref, placement = run_both(model, (tokens,))
    for got, ref, want in zip(out_opt, out_ref, model(tokens), strict=True):
        assert_close_scaled(got, want)
        assert_close_scaled(got, ref)
    assert placed(placement, "aten::permute_copy.out", "Optimized"), placement
    # (N, L, C) into (N, C, L) kept channels-last is the same bytes: one contiguous run per image.
    (summary,) = [line for line in placement if line.startswith("Optimized(oneDNN): ")]
    assert "1 permute (1 as contiguous runs)" in summary, summary
