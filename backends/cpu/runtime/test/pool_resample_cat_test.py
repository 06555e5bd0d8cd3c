"""Average pooling, adaptive average pooling, nearest/bilinear resampling and concatenation on the
Optimized (oneDNN) provider: generated parameters give the Reference provider's results
(ExecuTorch's kernels) and eager's within provider_compare's tolerance, on plain graph inputs and
on channels-last activations between convolutions; what oneDNN cannot match exactly is declined
with the reason in the placement log.
"""

from typing import Any

import pytest
import torch
from hypothesis import strategies as st

from backends.cpu.runtime.test.provider_compare import (
    assert_close_scaled,
    check_placed_cases,
    generated_examples,
    placed,
    run_both,
    run_cases,
)

F = torch.nn.functional


class Between(torch.nn.Module):
    """`fn` on x, or between two convolutions (channels-last activations) when `convs`."""

    def __init__(self, fn: Any, convs: bool, channels: int = 6) -> None:
        super().__init__()
        self.fn = fn
        self.pre = torch.nn.Conv2d(channels, channels, 3, padding=1) if convs else None
        self.post = torch.nn.Conv2d(channels, 5, 1) if convs else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre is not None:
            x = torch.relu(self.pre(x))
        y = self.fn(x)
        if self.post is not None:
            y = self.post(y)
        return y


@st.composite
def avg_pool_cases(draw: st.DrawFn) -> tuple[Any, bool, int]:
    kernel = draw(st.integers(1, 4))
    stride = draw(st.one_of(st.none(), st.integers(1, 3)))
    padding = draw(st.integers(0, kernel // 2))
    ceil = draw(st.booleans())
    include = draw(st.booleans())
    size = draw(st.integers(kernel + 1, 13))

    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(x, kernel, stride, padding, ceil, include)

    return fn, draw(st.booleans()), size


def test_generated_avg_pooling_matches_reference() -> None:
    cases: list[tuple[torch.nn.Module, tuple[Any, ...]]] = []
    for ((fn, convs, size),) in generated_examples(10, avg_pool_cases()):
        torch.manual_seed(size)
        cases.append((Between(fn, convs).eval(), (torch.randn(2, 6, size, size + 1),)))
    # One lowering for all examples: each case's outputs and placement lines are its own.
    for (model, (x,)), run in zip(cases, run_cases(cases), strict=True):
        with torch.no_grad():
            assert_close_scaled(run.optimized[0], model(x))
        assert_close_scaled(run.optimized[0], run.reference[0])
        lines = [line for line in run.placement if " aten::avg_pool2d.out: " in line]
        assert len(lines) == 1, run.placement
        # Taken, or declined only for torch's ceil-mode divisor with count_include_pad.
        assert "Optimized" in lines[0] or "ceil-mode window past the padding" in lines[0], lines


def test_avg_pool_declines() -> None:
    x = torch.randn(1, 3, 7, 7)

    def override(x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(x, 2, divisor_override=3)

    def ceil_include(x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=True)

    y = torch.randn(1, 3, 8, 8)  # the last window starts at 7 and runs past the padding
    (override_line,), (ceil_line,) = check_placed_cases(
        [
            (Between(override, False), (x,), "aten::avg_pool2d.out", "Reference"),
            (Between(ceil_include, False), (y,), "aten::avg_pool2d.out", "Reference"),
        ]
    )
    assert "divisor_override" in override_line
    assert "ceil-mode" in ceil_line


_ADAPTIVE = [
    # (size, out, convs, where); (1, 1) reaches the delegate as mean over H, W (to_edge
    # decomposes it).
    (8, (2, 2), True, "Optimized"),  # pooling a channels-last activation
    (12, (3, 4), True, "Optimized"),  # windows 4x3
    (9, (3, 3), False, "Optimized"),
    (7, (7, 7), False, "Optimized"),  # identity
    (10, (3, 3), False, "Reference"),  # 10 / 3: windows of different sizes
]


def _adaptive(out: tuple[int, int]) -> Any:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(x, out)

    return fn


def test_adaptive_avg_pooling() -> None:
    cases = []
    for size, out, convs, where in _ADAPTIVE:
        torch.manual_seed(size)
        x = torch.randn(2, 6, size, size)
        model = Between(_adaptive(out), convs).eval()
        cases.append((model, (x,), "aten::_adaptive_avg_pool2d.out", where))
    for (_, _, _, where), lines in zip(_ADAPTIVE, check_placed_cases(cases), strict=True):
        if where == "Reference":
            assert "does not divide" in lines[0], lines


_RESAMPLING = [
    ((5, 7), 2.0, True),  # UNet's 2x upsampling between convolutions
    ((4, 6), 3.0, False),
    ((6, 6), None, False),  # output size given
    ((3, 5), 1.0, True),
]


def _interpolate(mode: str, scale: float | None) -> Any:
    def fn(x: torch.Tensor) -> torch.Tensor:
        if scale is None:
            return F.interpolate(x, size=(12, 18), mode=mode)
        return F.interpolate(x, scale_factor=scale, mode=mode)

    return fn


def test_resampling_matches_reference() -> None:
    cases: list[tuple[torch.nn.Module, tuple[Any, ...], str, str]] = []
    for size, scale, convs in _RESAMPLING:
        for mode in ("bilinear", "nearest"):
            torch.manual_seed(size[0])
            x = torch.randn(1, 6, *size)
            model = Between(_interpolate(mode, scale), convs).eval()
            cases.append((model, (x,), f"aten::upsample_{mode}2d.vec_out", "Optimized"))

    # Bilinear downsampling and odd sizes.
    def down(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, size=(5, 13), mode="bilinear")

    x = torch.randn(2, 6, 11, 7)
    cases.append(
        (Between(down, True).eval(), (x,), "aten::upsample_bilinear2d.vec_out", "Optimized")
    )
    check_placed_cases(cases)


def test_resampling_declines() -> None:
    x = torch.randn(1, 3, 6, 6)

    def corners(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=True)

    def nearest_odd(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, size=(9, 4), mode="nearest")

    def fractional(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=1.7, mode="bilinear")

    bilinear, nearest = "aten::upsample_bilinear2d.vec_out", "aten::upsample_nearest2d.vec_out"
    (corners_line,), (nearest_line,), (fractional_line,) = check_placed_cases(
        [
            (Between(corners, False), (x,), bilinear, "Reference"),
            (Between(nearest_odd, False), (x.clone(),), nearest, "Reference"),
            (Between(fractional, False), (x.clone(),), bilinear, "Reference"),
        ]
    )
    assert "align_corners=True" in corners_line
    assert "not a multiple" in nearest_line
    assert "scale factor" in fractional_line


class Cat(torch.nn.Module):
    def __init__(self, dim: int, count: int, convs: bool) -> None:
        super().__init__()
        self.dim = dim
        self.convs = torch.nn.ModuleList(
            [torch.nn.Conv2d(3, 2 + i, 3, padding=1) for i in range(count)] if convs else []
        )
        self.post = torch.nn.Conv2d(sum(2 + i for i in range(count)), 4, 1) if convs else None

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        if self.post is not None:
            # A UNet decoder: channels-last branches concatenated along channels, then a conv.
            y = torch.cat([torch.relu(conv(xs[0])) for conv in self.convs], dim=1)
            return self.post(y)
        return torch.cat(xs, dim=self.dim)


def test_channel_concatenation_between_convolutions() -> None:
    cases: list[tuple[torch.nn.Module, tuple[Any, ...], str, str]] = []
    for count in (1, 2, 3):
        torch.manual_seed(count)
        model = Cat(1, count, True).eval()
        cases.append((model, (torch.randn(1, 3, 9, 11),), "aten::cat.out", "Optimized"))
    check_placed_cases(cases)


@st.composite
def cat_cases(draw: st.DrawFn) -> tuple[int, list[list[int]]]:
    rank = draw(st.integers(1, 5))
    shape = [draw(st.integers(1, 5)) for _ in range(rank)]
    dim = draw(st.integers(-rank, rank - 1))
    shapes = []
    for _ in range(draw(st.integers(1, 4))):
        part = list(shape)
        part[dim] = draw(st.integers(1, 4))
        shapes.append(part)
    return dim, shapes


def test_generated_concatenations_match_reference() -> None:
    examples = generated_examples(10, cat_cases())
    cases: list[tuple[torch.nn.Module, tuple[Any, ...]]] = []
    for ((dim, shapes),) in examples:
        torch.manual_seed(len(shapes))
        cases.append((Cat(dim, 0, False), tuple(torch.randn(shape) for shape in shapes)))
    # One lowering for all examples: each case's outputs and placement lines are its own.
    for ((dim, _),), (_, inputs), run in zip(examples, cases, run_cases(cases), strict=True):
        assert torch.equal(run.optimized[0], run.reference[0])
        assert torch.equal(run.optimized[0], torch.cat(inputs, dim))
        assert placed(run.placement, "aten::cat.out", "Optimized"), run.placement


def test_large_concatenation_splits_on_two_threads() -> None:
    torch.manual_seed(4)
    model = Cat(1, 2, True).eval()
    x = torch.randn(1, 3, 30, 20)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ET_CPU_ONEDNN_TASK_FLOPS", "0")
        patch.setenv("ET_CPU_ONEDNN_THREADS", "2")
        out_opt, out_ref, placement = run_both(model, (x,))
    assert_close_scaled(out_opt[0], out_ref[0])
    assert placed(placement, "aten::cat.out", "Optimized"), placement
    inputs = (torch.randn(3, 4, 5), torch.randn(3, 2, 5))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ET_CPU_ONEDNN_TASK_FLOPS", "0")
        patch.setenv("ET_CPU_ONEDNN_THREADS", "2")
        out_opt, _, placement = run_both(Cat(1, 0, False), inputs)
    assert torch.equal(out_opt[0], torch.cat(inputs, 1))
    (summary,) = [line for line in placement if line.startswith("Optimized(oneDNN): ")]
    assert "work sharing, 1 ops split" in summary, summary


def test_integer_concatenation_falls_back_with_a_reason() -> None:
    inputs = (torch.randint(0, 9, (2, 3)), torch.randint(0, 9, (2, 1)))
    out_opt, _, placement = run_both(Cat(1, 0, False), inputs)
    assert torch.equal(out_opt[0], torch.cat(inputs, 1))
    declined = placed(placement, "aten::cat.out", "Reference")
    assert declined and "float32" in declined[0], placement
