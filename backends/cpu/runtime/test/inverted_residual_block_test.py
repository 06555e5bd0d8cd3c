"""Inverted residual blocks (1x1 expand, depthwise, 1x1 project, optionally + the block's input)
that the Optimized provider runs as one kernel in row bands (onednn::BlockPlan): the runtime
offers the convolutions after the expand as fusable steps, the provider takes the whole block,
and the expanded activations get no arena bytes.

Every case compares with the Reference provider (ExecuTorch's kernels) and with the same
delegate running the block as three convolutions (ET_CPU_ONEDNN_BLOCKS=0). The switches are read
when a delegate is initialized, so each case lowers its model once and runs that .pte under each
setting.
"""

import functools
from typing import Any

import pytest
import torch
from hypothesis import strategies as st

from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import load, lower_cases, lower_to_pte
from backends.cpu.runtime.test.provider_compare import (
    assert_close_scaled,
    generated_examples,
    placed,
    run_both,
    run_pte_both,
)

CONV = "aten::convolution.out"


class Block(torch.nn.Module):
    """MobileNetV2's block with the knobs the plan has to honour (hidden == c_in and
    expand=False: no expand, the depthwise reads the input, as in MobileNetV2's first block)."""

    def __init__(
        self,
        c_in: int,
        hidden: int,
        c_out: int,
        kernel: int,
        stride: int,
        act: str,
        bias: bool,
        residual: bool,
        expand: bool = True,
    ) -> None:
        super().__init__()
        self.expand = torch.nn.Conv2d(c_in, hidden, 1, bias=bias) if expand else None
        self.depthwise = torch.nn.Conv2d(
            hidden, hidden, kernel, stride, kernel // 2, groups=hidden, bias=bias
        )
        self.project = torch.nn.Conv2d(hidden, c_out, 1, bias=bias)
        self.act = act
        self.residual = residual

    def _act(self, x: torch.Tensor) -> torch.Tensor:
        if self.act == "relu6":
            return torch.nn.functional.relu6(x)
        if self.act == "relu":
            return torch.relu(x)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self._act(self.expand(x)) if self.expand is not None else x
        y = self.project(self._act(self.depthwise(h)))
        return x + y if self.residual else y


class Chain(torch.nn.Module):
    """conv -> block(s) -> conv: the blocks' input and output stay channels-last."""

    def __init__(self, blocks: list[Block], c_in: int, c_mid: int, c_out: int) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(c_in, c_mid, 3, padding=1)
        self.blocks = torch.nn.Sequential(*blocks)
        self.head = torch.nn.Conv2d(c_out, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(torch.relu(self.stem(x))))


def _summary(placement: list[str]) -> str:
    (line,) = [entry for entry in placement if entry.startswith("Optimized(oneDNN): ")]
    return line


def _blocks_fused(placement: list[str]) -> int:
    return int(_summary(placement).split(" inverted residual blocks fused")[0].split(", ")[-1])


def _pte(model: torch.nn.Module, x: torch.Tensor) -> bytes:
    return lower_to_pte(model, (x,))[0]


def _forward(pte: bytes, x: torch.Tensor) -> torch.Tensor:
    """`pte` loaded and run once under the environment's switches as they are now."""
    return load(pte).forward([x])[0]


def _unfused(pte: bytes, x: torch.Tensor) -> torch.Tensor:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ET_CPU_ONEDNN_BLOCKS", "0")
        out = _forward(pte, x)
    assert _blocks_fused(loader.last_placement()) == 0
    return out


@st.composite
def block_cases(draw: st.DrawFn) -> tuple[torch.nn.Module, torch.Tensor]:
    c_in = draw(st.sampled_from([3, 8, 16]))
    expand = draw(st.booleans())
    hidden = c_in * draw(st.sampled_from([1, 3, 6])) if expand else c_in
    stride = draw(st.sampled_from([1, 2]))
    residual = stride == 1 and draw(st.booleans())
    c_out = c_in if residual else draw(st.sampled_from([5, 8, 24]))
    kernel = draw(st.sampled_from([3, 5]))
    act = draw(st.sampled_from(["relu6", "relu", "none"]))
    bias = draw(st.booleans())
    batch = draw(st.sampled_from([1, 2]))
    height = draw(st.integers(kernel, 23))
    width = draw(st.integers(kernel, 19))
    torch.manual_seed(draw(st.integers(0, 1000)))
    block = Block(c_in, hidden, c_out, kernel, stride, act, bias, residual, expand).eval()
    return block, torch.randn(batch, c_in, height, width)


def test_generated_blocks_are_fused_and_match_reference() -> None:
    # The 20 examples Hypothesis draws (derandomized), one program per (threads, task flops)
    # setting drawn, the setting's blocks side by side: each block reads its own (plain) graph
    # input and writes its own (plain) output, so the kernel converts both, and each case's
    # outputs and placement lines are its own. ET_CPU_ONEDNN_TASK_FLOPS=0 splits each block
    # into as many pieces as allowed.
    examples = generated_examples(
        20, block_cases(), st.sampled_from(["1", "2"]), st.sampled_from(["-1", "0"])
    )
    groups: dict[tuple[str, str], list[tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]] = {}
    for (model, x), threads, task_flops in examples:
        groups.setdefault((threads, task_flops), []).append((model, (x,)))
    assert sum(len(cases) for cases in groups.values()) == 20
    for (threads, task_flops), cases in groups.items():
        lowered = lower_cases(cases)
        assert lowered.output_cases == list(range(len(cases)))
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("ET_CPU_ONEDNN_THREADS", threads)
            if task_flops != "-1":
                patch.setenv("ET_CPU_ONEDNN_TASK_FLOPS", task_flops)
            out_opt, out_ref, placement = run_pte_both(lowered.pte, lowered.inputs)
            patch.setenv("ET_CPU_ONEDNN_BLOCKS", "0")
            unfused = load(lowered.pte).forward(list(lowered.inputs))
            assert _blocks_fused(loader.last_placement()) == 0
        assert _blocks_fused(placement) == len(cases), placement
        for case, (model, (x,)) in enumerate(cases):
            with torch.no_grad():
                assert_close_scaled(out_opt[case], out_ref[case])
                assert_close_scaled(out_opt[case], model(x))
            # Same oneDNN kernels per row either way: the rounding is the same up to a few ulps.
            torch.testing.assert_close(out_opt[case], unfused[case], atol=1e-5, rtol=1e-5)
            lines = [line for line in placement if lowered.op_cases.get(line.split(" ")[0]) == case]
            fused = [
                line for line in lines if line.startswith("aten_convolution") and "fused" in line
            ]
            assert len(fused) == (2 if model.expand is not None else 1), (case, placement)


def test_chained_blocks_keep_channels_last_and_give_the_expansion_no_arena_bytes() -> None:
    torch.manual_seed(0)
    blocks = [
        Block(16, 16, 16, 3, 1, "relu6", True, False, expand=False),
        Block(16, 96, 24, 3, 2, "relu6", True, False),
        Block(24, 144, 24, 3, 1, "relu6", True, True),
        Block(24, 144, 32, 3, 2, "relu6", True, False),
    ]
    model = Chain(blocks, 3, 16, 32).eval()
    x = torch.randn(1, 3, 40, 36)
    pte = _pte(model, x)
    _forward(pte, x)
    arena = loader.last_arena_bytes()
    out_opt, out_ref, placement = run_pte_both(pte, (x,))
    assert_close_scaled(out_opt[0], out_ref[0])
    assert _blocks_fused(placement) == 4, placement
    chained = int(_summary(placement).split(", ")[1].split()[0])
    assert chained == 5, placement  # stem -> four blocks -> head
    unfused = _unfused(pte, x)
    arena_unfused = loader.last_arena_bytes()
    torch.testing.assert_close(out_opt[0], unfused, atol=1e-5, rtol=1e-5)
    # Fused: the stem's and the blocks' outputs only (the largest expanded activation alone,
    # 96 x 40 x 36 floats, is more than all of them).
    assert arena < 96 * 40 * 36 * 4 <= arena_unfused, (arena, arena_unfused)


class Tapped(torch.nn.Module):
    """A block whose expanded activation is also a graph output: it must be written."""

    def __init__(self) -> None:
        super().__init__()
        self.block = Block(8, 24, 8, 3, 1, "relu6", True, True)

    def forward(self, x: torch.Tensor) -> Any:
        assert self.block.expand is not None
        hidden = torch.nn.functional.relu6(self.block.expand(x))
        y = self.block.project(torch.nn.functional.relu6(self.block.depthwise(hidden)))
        return x + y, hidden


def test_block_whose_expansion_is_read_elsewhere_runs_as_three_convolutions() -> None:
    torch.manual_seed(1)
    model = Tapped().eval()
    x = torch.randn(1, 8, 12, 12)
    out_opt, out_ref, placement = run_both(model, (x,))
    for got, want in zip(out_opt, out_ref, strict=True):
        assert_close_scaled(got, want)
    assert _blocks_fused(placement) == 0, placement
    assert len(placed(placement, CONV, "Optimized")) == 3, placement


def test_relu_fused_into_a_convolution_gets_no_arena_bytes_of_its_own() -> None:
    # conv -> relu -> conv: the first conv writes the ReLU's result directly; its own result is
    # never materialized, so the arena holds the ReLU's output alone.
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3)
    ).eval()
    x = torch.randn(1, 3, 16, 16)
    pte = _pte(model, x)
    out_opt, out_ref, placement = run_pte_both(pte, (x,))
    assert_close_scaled(out_opt[0], out_ref[0])
    _forward(pte, x)
    assert loader.last_arena_bytes() == 8 * 16 * 16 * 4, placement


class SqueezeExciteBlock(torch.nn.Module):
    """MobileNetV3 / EfficientNet's block: expand, depthwise, a squeeze-excite gate on the
    depthwise's output, project. The gate needs the whole depthwise output, so the provider fuses
    expand + depthwise only (a block without project)."""

    def __init__(
        self, c_in: int, hidden: int, c_out: int, kernel: int, stride: int, act: str
    ) -> None:
        super().__init__()
        self.expand = torch.nn.Conv2d(c_in, hidden, 1)
        self.depthwise = torch.nn.Conv2d(
            hidden, hidden, kernel, stride, kernel // 2, groups=hidden, bias=False
        )
        self.reduce = torch.nn.Conv2d(hidden, max(1, hidden // 4), 1)
        self.restore = torch.nn.Conv2d(max(1, hidden // 4), hidden, 1)
        self.project = torch.nn.Conv2d(hidden, c_out, 1)
        self.act: torch.nn.Module = {
            "silu": torch.nn.SiLU(),
            "hardswish": torch.nn.Hardswish(),
            "relu6": torch.nn.ReLU6(),
        }[act]
        self.gate: torch.nn.Module = torch.nn.Sigmoid() if act == "silu" else torch.nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.depthwise(self.act(self.expand(x))))
        scale = torch.nn.functional.adaptive_avg_pool2d(h, 1)
        scale = self.gate(self.restore(torch.relu(self.reduce(scale))))
        return self.project(h * scale)


@pytest.mark.parametrize(
    ("act", "kernel", "stride", "batch", "threads", "task_flops"),
    [
        ("silu", 3, 1, 1, "2", "0"),
        ("silu", 5, 2, 2, "2", "-1"),
        ("hardswish", 5, 1, 1, "2", "0"),
        ("hardswish", 3, 2, 1, "1", "-1"),
        ("relu6", 3, 2, 2, "2", "0"),
    ],
)
def test_squeeze_excite_blocks_fuse_expand_and_depthwise(
    act: str, kernel: int, stride: int, batch: int, threads: str, task_flops: str
) -> None:
    torch.manual_seed(kernel * 10 + stride)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), SqueezeExciteBlock(16, 48, 24, kernel, stride, act)
    ).eval()
    x = torch.randn(batch, 3, 21, 18)
    with pytest.MonkeyPatch.context() as patch:
        # The gate's pool and 1x1 convolutions as three kernels in both runs (the squeeze-excite
        # kernel is squeeze_excite_test's): only the blocks' fusion differs.
        patch.setenv("ET_CPU_OWN_SE", "0")
        # The gate multiply as its own op too, the project a convolution of its own (the fold
        # into the project is se_gate_fold_test's).
        patch.setenv("ET_CPU_SE_GATE_FOLD", "0")
        patch.setenv("ET_CPU_ONEDNN_THREADS", threads)
        if task_flops != "-1":
            patch.setenv("ET_CPU_ONEDNN_TASK_FLOPS", task_flops)
        pte = _pte(model, x)
        out_opt, out_ref, placement = run_pte_both(pte, (x,))
        patch.setenv("ET_CPU_ONEDNN_SE_BLOCKS", "0")
        separate = _forward(pte, x)
        separate_placement = loader.last_placement()
    with torch.no_grad():
        assert_close_scaled(out_opt[0], out_ref[0])
        assert_close_scaled(out_opt[0], model(x))
    # The same oneDNN kernels and vector tails per row either way.
    torch.testing.assert_close(out_opt[0], separate, atol=1e-5, rtol=1e-5)
    assert _blocks_fused(placement) == 1, placement
    depthwise = [line for line in placement if line.startswith("aten_convolution_default_2 ")]
    assert depthwise and "fused into aten_convolution_default_1 " in depthwise[0], placement
    assert _blocks_fused(separate_placement) == 0, separate_placement
    assert len(placed(separate_placement, CONV, "Optimized")) == 6, separate_placement


@functools.cache
def _depthwise_chain() -> tuple[torch.nn.Module, torch.Tensor, bytes]:
    """test_blocks_on_our_depthwise_kernel's chain, its input and its .pte (lowered once)."""
    torch.manual_seed(1)
    blocks = [
        Block(16, 16, 16, 3, 1, "relu6", True, False, expand=False),
        Block(16, 96, 24, 5, 2, "relu6", True, False),
        Block(24, 144, 24, 5, 1, "relu", False, True),
        Block(24, 144, 40, 3, 2, "none", True, False),
    ]
    model = Chain(blocks, 3, 16, 40).eval()
    x = torch.randn(2, 3, 38, 42)
    return model, x, _pte(model, x)


@pytest.mark.parametrize("own", ["1", "0", "unset"])
def test_blocks_on_our_depthwise_kernel(own: str) -> None:
    # ET_CPU_OWN_DEPTHWISE=1: every block's depthwise stage runs on our AVX-512 kernel (the
    # summary counts them), on bands of expanded rows; "0": all on oneDNN; unset: the default,
    # ours for these 3x3 / 5x5 stride 1 / 2 stages. All match eager.
    model, x, pte = _depthwise_chain()
    with pytest.MonkeyPatch.context() as patch:
        if own == "unset":
            patch.delenv("ET_CPU_OWN_DEPTHWISE", raising=False)
        else:
            patch.setenv("ET_CPU_OWN_DEPTHWISE", own)
        patch.setenv("ET_CPU_ONEDNN_TASK_FLOPS", "0")
        out_opt, out_ref, placement = run_pte_both(pte, (x,))
    assert _blocks_fused(placement) == 4, placement
    expected = 0 if own == "0" else 4
    assert f", {expected} depthwise (alone or in a block)" in _summary(placement), placement
    with torch.no_grad():
        assert_close_scaled(out_opt[0], out_ref[0])
        assert_close_scaled(out_opt[0], model(x))


@pytest.mark.parametrize(("step_kib", "threads"), [("16", "2"), ("16", "1"), ("4096", "2")])
def test_block_step_budget_switch_keeps_the_results(step_kib: str, threads: str) -> None:
    # ET_CPU_BLOCK_STEP_KIB (read at prepare, for measuring): 16 KiB makes every step one or two
    # rows (more steps, each carrying its halo of expanded rows), 4096 one step per piece. Both
    # match eager and the default budget; odd widths and batch 2 (_depthwise_chain).
    model, x, pte = _depthwise_chain()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ET_CPU_ONEDNN_THREADS", threads)
        patch.setenv("ET_CPU_ONEDNN_TASK_FLOPS", "0")
        default = _forward(pte, x)
        patch.setenv("ET_CPU_BLOCK_STEP_KIB", step_kib)
        out_opt, out_ref, placement = run_pte_both(pte, (x,))
    assert _blocks_fused(placement) >= 1, placement
    with torch.no_grad():
        assert_close_scaled(out_opt[0], out_ref[0])
        assert_close_scaled(out_opt[0], model(x))
    torch.testing.assert_close(out_opt[0], default, atol=1e-5, rtol=1e-5)


def _ops_split(placement: list[str]) -> int:
    return int(_summary(placement).split(" ops split")[0].split("work sharing, ")[-1])


@pytest.mark.parametrize(
    ("hidden", "kernel", "stride", "batch", "size", "own"),
    [
        (96, 3, 1, 1, 7, "unset"),
        (88, 5, 1, 2, 7, "unset"),
        (120, 3, 2, 1, 13, "unset"),
        (88, 3, 1, 2, 7, "0"),
        (96, 5, 2, 1, 10, "0"),
        (88, 5, 1, 1, 14, "unset"),
    ],
)
def test_small_squeeze_excite_blocks_run_whole_in_channel_slices(
    hidden: int, kernel: int, stride: int, batch: int, size: int, own: str
) -> None:
    # A block without project on a small image runs whole per image in channel slices (one per
    # pool thread; 88 and 120 hidden channels: slices of unequal vectors, a channel tail), on our
    # depthwise kernel (unset) or oneDNN's ("0"). ET_CPU_BLOCK_SLICES=0 gives row bands; both
    # match eager, the reference and each other.
    torch.manual_seed(hidden + kernel + stride)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 24, 3, padding=1),
        SqueezeExciteBlock(24, hidden, 32, kernel, stride, "silu"),
    ).eval()
    x = torch.randn(batch, 3, size, size)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ET_CPU_OWN_SE", "0")
        patch.setenv("ET_CPU_SE_GATE_FOLD", "0")
        patch.setenv("ET_CPU_ONEDNN_THREADS", "2")
        if own == "unset":
            patch.delenv("ET_CPU_OWN_DEPTHWISE", raising=False)
        else:
            patch.setenv("ET_CPU_OWN_DEPTHWISE", own)
        patch.delenv("ET_CPU_BLOCK_SLICES", raising=False)
        pte = _pte(model, x)
        out_opt, out_ref, placement = run_pte_both(pte, (x,))
        if own == "unset" and size == 7:
            # Our depthwise writes each slice's channels straight into the output's pixels;
            # ET_CPU_BLOCK_SLICE_DIRECT=0 writes a buffer and copies: the same bits.
            patch.setenv("ET_CPU_BLOCK_SLICE_DIRECT", "0")
            copied = _forward(pte, x)
            patch.delenv("ET_CPU_BLOCK_SLICE_DIRECT")
            assert torch.equal(out_opt[0], copied)
        patch.setenv("ET_CPU_BLOCK_SLICES", "0")
        banded = _forward(pte, x)
        banded_placement = loader.last_placement()
    with torch.no_grad():
        assert_close_scaled(out_opt[0], out_ref[0])
        assert_close_scaled(out_opt[0], model(x))
        assert_close_scaled(banded, model(x))
    torch.testing.assert_close(out_opt[0], banded, atol=1e-5, rtol=1e-5)
    for lines in (placement, banded_placement):
        assert _blocks_fused(lines) == 1, lines
    expected = 0 if own == "0" else 1
    assert f", {expected} depthwise (alone or in a block)" in _summary(placement), placement
    if batch == 1 and (size + 2 * (kernel // 2) - kernel) // stride + 1 < 8:
        # In row bands of >= 4 rows such an image is one piece (one thread); in slices, two.
        # (At batch 2 the bands are one piece per image: split either way.)
        assert _ops_split(placement) == _ops_split(banded_placement) + 1, (
            placement,
            banded_placement,
        )


@pytest.mark.parametrize(
    ("c_in", "hidden", "c_out", "stride", "batch", "size", "reach", "own"),
    [
        (32, 192, 32, 1, 1, 7, "unset", "unset"),
        (24, 136, 40, 2, 2, 14, "all", "unset"),
        (72, 144, 72, 1, 2, 9, "all", "0"),
    ],
)
def test_small_blocks_with_project_run_in_two_phases(
    c_in: int, hidden: int, c_out: int, stride: int, batch: int, size: int, reach: str, own: str
) -> None:
    # A block with project on a small image (7x7 at batch 1: one row band, one thread) runs its
    # expand + depthwise in channel slices, then, after the pool's join, the project (+ input) in
    # pixel pieces; "all" takes every block whose slice fits (batch 2 too; 136 hidden channels:
    # a channel tail; 72 input channels: oneDNN's expand). ET_CPU_BLOCK_TWO_PHASE=0 gives row
    # bands; both match eager and each other.
    torch.manual_seed(hidden + size)
    residual = stride == 1 and c_in == c_out
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, c_in, 3, padding=1),
        Block(c_in, hidden, c_out, 3, stride, "relu6", True, residual),
    ).eval()
    x = torch.randn(batch, 3, size, size)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ET_CPU_ONEDNN_THREADS", "2")
        if own == "unset":
            patch.delenv("ET_CPU_OWN_DEPTHWISE", raising=False)
        else:
            patch.setenv("ET_CPU_OWN_DEPTHWISE", own)
        if reach == "unset":
            patch.delenv("ET_CPU_BLOCK_TWO_PHASE", raising=False)
        else:
            patch.setenv("ET_CPU_BLOCK_TWO_PHASE", reach)
        pte = _pte(model, x)
        out = _forward(pte, x)
        placement = loader.last_placement()
        if own == "unset" and batch == 2:
            # The slices' depthwise straight into the whole depthwise output (136 channels: a
            # tail) or through a buffer and a copy (ET_CPU_BLOCK_SLICE_DIRECT=0): the same bits.
            patch.setenv("ET_CPU_BLOCK_SLICE_DIRECT", "0")
            assert torch.equal(out, _forward(pte, x))
            patch.delenv("ET_CPU_BLOCK_SLICE_DIRECT")
        patch.setenv("ET_CPU_BLOCK_TWO_PHASE", "0")
        banded = _forward(pte, x)
        banded_placement = loader.last_placement()
    with torch.no_grad():
        assert_close_scaled(out, model(x))
        assert_close_scaled(banded, model(x))
    torch.testing.assert_close(out, banded, atol=1e-5, rtol=1e-5)
    for lines in (placement, banded_placement):
        assert _blocks_fused(lines) == 1, lines
    assert ", 1 blocks in two phases, " in _summary(placement), placement
    assert ", 0 blocks in two phases, " in _summary(banded_placement), banded_placement
    if batch == 1:
        # One row band of 7 rows ran on one thread; the two phases split the block.
        assert _ops_split(placement) == _ops_split(banded_placement) + 1, (
            placement,
            banded_placement,
        )
