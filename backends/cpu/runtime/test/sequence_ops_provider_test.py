"""The attention-mask, reduction and embedding ops on the Optimized provider's own loops (issue
19): compare with a number, logical_not, where with broadcasting, any / amax / amin / argmax /
argmin over adjacent dims, embedding rows gathered by checked int64 / int32 ids.

None of them does arithmetic that rounds: every output must equal eager's exactly (bool, int64
and float alike), NaN included, and the Reference provider's too. The one exception: amax / amin
over a convolution's spatial dims, which read its channels-last output (the convolution before
rounds as oneDNN does: provider_compare's scaled tolerance).
"""

import re

import pytest
import torch

from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import lower, lower_to_pte
from backends.cpu.runtime.test.provider_compare import (
    assert_close_scaled,
    placed,
    run_both,
    run_pte_both,
)


def _equal(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Exactly equal, NaN where eager has NaN."""
    if not want.is_floating_point():
        return torch.equal(got, want)
    return torch.equal(got.isnan(), want.isnan()) and torch.equal(
        got.nan_to_num(), want.nan_to_num()
    )


def _assert_all_equal(
    got: list[torch.Tensor], ref: list[torch.Tensor], want: tuple[torch.Tensor, ...]
) -> None:
    assert len(got) == len(ref) == len(want)
    for index, (g, r, w) in enumerate(zip(got, ref, want, strict=True)):
        assert g.dtype == w.dtype and g.shape == w.shape, (index, g.dtype, g.shape, w.shape)
        assert _equal(g, w), (index, g, w)
        assert _equal(r, w), index


class MaskedRowGuard(torch.nn.Module):
    """scaled_dot_product_attention's guard: rows with every score -inf become zeros."""

    def forward(self, scores: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, ...]:
        s = scores + bias
        fully_masked = torch.logical_not(torch.logical_not(s == float("-inf")).any(-1, True))
        p = torch.softmax(s, dim=-1)
        return torch.where(fully_masked, torch.zeros_like(p), p), fully_masked


def test_masked_row_guard_matches_eager() -> None:
    torch.manual_seed(3)
    scores = torch.randn(1, 3, 7, 9)
    bias = torch.zeros(1, 3, 7, 9)
    bias[0, 1, 2, :] = float("-inf")  # a fully masked row
    bias[0, 2, :, 4:] = float("-inf")  # partly masked rows
    model = MaskedRowGuard().eval()
    got, ref, placement = run_both(model, (scores, bias))
    want = model(scores, bias)
    assert torch.equal(got[1], want[1]) and bool(want[1].any())
    assert torch.equal(got[0][0, 1, 2], torch.zeros(9))
    torch.testing.assert_close(got[0], want[0], atol=1e-6, rtol=1e-5)  # the softmax rounds
    assert torch.equal(ref[1], want[1])
    for kernel in ("aten::eq.Scalar_out", "aten::logical_not.out", "aten::any.out"):
        assert len(placed(placement, kernel, "Optimized")) >= 1, (kernel, placement)
    assert placed(placement, "aten::where.self_out", "Optimized"), placement


class Comparisons(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x * 1.0
        return y == 0.5, y != 0.5, y < 0.1, y <= 0.5, y > -0.25, y >= float("inf")


def test_comparisons_with_a_number_nan_and_inf_included() -> None:
    x = torch.tensor([[0.5, 0.1, -0.25, float("nan")], [float("inf"), -float("inf"), 0.0, 2.0]])
    model = Comparisons().eval()
    got, ref, placement = run_both(model, (x,))
    _assert_all_equal(got, ref, model(x))
    for cmp in ("eq", "ne", "lt", "le", "gt", "ge"):
        assert placed(placement, f"aten::{cmp}.Scalar_out", "Optimized"), (cmp, placement)


WHERE_SHAPES = [
    ((2, 1, 5), (3, 1), (2, 3, 5)),  # every operand broadcast differently
    ((4, 6), (4, 6), (4, 6)),  # nothing broadcast: one flat run
    ((1, 2, 8, 1), (), (1, 2, 8, 8)),  # the attention guard: per-row condition, a 0-dim operand
    ((3,), (2, 3), (1,)),
]


class Wheres(torch.nn.Module):
    def forward(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs = []
        for i in range(len(WHERE_SHAPES)):
            c, a, b = xs[3 * i : 3 * i + 3]
            outs.append(torch.where(c > 0.0, a * 1.0, b * 1.0))
        return tuple(outs)


def test_where_broadcasts_every_operand() -> None:
    torch.manual_seed(5)
    xs = tuple(torch.randn(shape) for shapes in WHERE_SHAPES for shape in shapes)
    model = Wheres().eval()
    got, ref, placement = run_both(model, xs)
    _assert_all_equal(got, ref, model(*xs))
    assert len(placed(placement, "aten::where.self_out", "Optimized")) == len(WHERE_SHAPES)


class Reductions(torch.nn.Module):
    def forward(self, x: torch.Tensor, flags: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x * 1.0
        b = flags > 0.0
        return (
            torch.amax(y, dim=-1),
            torch.amax(y, dim=(1, 2), keepdim=True),
            torch.amin(y, dim=1),
            torch.argmax(y, dim=-1),
            torch.argmin(y, dim=1, keepdim=True),
            torch.argmax(y),
            b.any(dim=-1),
            b.any(dim=1, keepdim=True),
            b.any(),
        )


def test_reductions_ties_and_nan_like_eager() -> None:
    torch.manual_seed(11)
    x = torch.randn(2, 5, 6).round(decimals=1)  # rounding makes ties: the first index wins
    x[1, 3, 2] = float("nan")  # NaN wins amax / argmax over the dims it is in
    x[0, 2, :] = 0.7
    flags = torch.randn(2, 5, 6)
    flags[0, 1, :] = -1.0  # a row with nothing set
    model = Reductions().eval()
    got, ref, placement = run_both(model, (x, flags))
    _assert_all_equal(got, ref, model(x, flags))
    for kernel in ("amax.out", "amin.out", "argmax.out", "argmin.out", "any.out", "any.all_out"):
        assert placed(placement, f"aten::{kernel}", "Optimized"), (kernel, placement)


class MaxOverSpace(torch.nn.Module):
    """The text CNN's max over time after Conv1d (+ ReLU), and amin / amax over a Conv2d's H, W:
    150 channels (a full 128-channel block and a masked tail), 37 and 20 (masked only); `z`
    carries a NaN, which every channel's max over time must keep (the convolution spreads it)."""

    def __init__(self) -> None:
        super().__init__()
        self.wide = torch.nn.Conv1d(8, 150, 3, padding=1)
        self.narrow = torch.nn.Conv1d(8, 37, 4)
        self.image = torch.nn.Conv2d(5, 20, 3)
        self.spread = torch.nn.Conv1d(8, 24, 3)

    def forward(
        self, x: torch.Tensor, image: torch.Tensor, z: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        return (
            torch.amax(torch.relu(self.wide(x)), dim=-1),
            torch.amin(self.narrow(x), dim=2),
            torch.amax(self.image(image), dim=(2, 3), keepdim=True),
            torch.amax(self.spread(z), dim=-1),
        )


def _kept_channels_last(placement: list[str]) -> int:
    counts = [re.search(r"(\d+) activations kept channels-last", line) for line in placement]
    found = [int(match[1]) for match in counts if match]
    assert len(found) == 1, placement
    return found[0]


@pytest.mark.parametrize("switch", ["on", "0"])
def test_max_over_a_convolutions_spatial_dims_reads_it_channels_last(
    switch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ET_CPU_AMAX_CHANNELS_LAST (on unless 0, read at bind): each convolution's output stays
    channels-last (4 kept) and amax / amin read it so; off, all plain (0 kept). Either way the
    outputs match eager within the scaled tolerance (float64 eager: the max itself is exact),
    NaN in the same places."""
    if switch == "0":
        monkeypatch.setenv("ET_CPU_AMAX_CHANNELS_LAST", "0")
    else:
        monkeypatch.delenv("ET_CPU_AMAX_CHANNELS_LAST", raising=False)
    torch.manual_seed(7)
    x = torch.randn(2, 8, 33)
    image = torch.randn(2, 5, 9, 11)
    z = torch.randn(1, 8, 20)
    z[0, 3, 11] = float("nan")
    model = MaxOverSpace().eval()
    pte, _ = lower_to_pte(model, (x, image, z))
    got, ref, placement = run_pte_both(pte, (x, image, z))
    with torch.no_grad():
        want = model.double()(x.double(), image.double(), z.double())
    assert _kept_channels_last(placement) == (4 if switch == "on" else 0), placement
    for index, (g, r, w) in enumerate(zip(got, ref, want, strict=True)):
        assert g.shape == w.shape and g.dtype == torch.float32, (index, g.shape, w.shape)
        assert torch.equal(g.isnan(), w.isnan()) and torch.equal(r.isnan(), w.isnan()), index
        assert_close_scaled(g.nan_to_num(), w.float().nan_to_num())
    assert bool(got[3].isnan().all())  # the NaN reached every channel's max over time
    assert len(placed(placement, "aten::amax.out", "Optimized")) == 3, placement
    assert placed(placement, "aten::amin.out", "Optimized"), placement


class Lookup(torch.nn.Module):
    def __init__(self, vocab: int = 50, width: int = 24) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(vocab, width)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table(ids)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_embedding_gathers_rows_exactly(dtype: torch.dtype) -> None:
    torch.manual_seed(2)
    ids = torch.tensor([[0, 49, 7, 7], [3, 1, 0, 48]], dtype=dtype)
    model = Lookup().eval()
    got, ref, placement = run_both(model, (ids,))
    with torch.no_grad():
        _assert_all_equal(got, ref, (model(ids),))
    assert placed(placement, "aten::embedding.out", "Optimized"), placement


@pytest.mark.parametrize("bad", [50, -1, 1 << 40])
def test_an_id_outside_the_table_is_a_clear_error(
    bad: int, capfd: pytest.CaptureFixture[str]
) -> None:
    ids = torch.tensor([[1, 2, 3, 4]])
    model = Lookup().eval()
    module, _ = lower(model, (ids,))
    with torch.no_grad():
        assert torch.equal(module.forward([ids])[0], model(ids))
    with pytest.raises(RuntimeError):
        module.forward([torch.tensor([[1, 2, bad, 4]])])
    # The kernel's message is logged, then the runtime's naming the op (the last error).
    logged = "".join(capfd.readouterr())
    message = f"aten_embedding_default: token id {bad} at position 2 is outside the embedding"
    assert f"{message} table's 50 rows" in logged, logged
    assert "aten_embedding_default" in loader.last_error()
