"""Broadcast binary ops (add/sub with alpha 1, mul, div) on the Optimized (oneDNN) provider: every
generated broadcast pattern (rank 1-5, scalar-like operands, both operand orders, a constant
operand) gives the Reference provider's results (ExecuTorch's kernels) and eager's within the
tolerance of provider_compare (these ops round once per element, so both agree to the last bit in
practice); what oneDNN cannot broadcast or express is declined with the reason in the placement
log; a channels-last activation times an (N, C, 1, 1) gate stays channels-last; a residual add
after a convolution is still fused into it.
"""

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import strategies as st

from backends.cpu.runtime.test.lowered_program import lower_to_pte
from backends.cpu.runtime.test.provider_compare import (
    assert_close_scaled,
    generated_examples,
    placed,
    run_both,
    run_cases,
    run_pte_both,
)

_OPS: dict[str, tuple[str, Callable[..., torch.Tensor]]] = {
    "add": ("aten::add.out", torch.add),
    "sub": ("aten::sub.out", torch.sub),
    "mul": ("aten::mul.out", torch.mul),
    "div": ("aten::div.out", torch.div),
}


class Binary(torch.nn.Module):
    def __init__(self, op: str, constant: torch.Tensor | None, constant_first: bool) -> None:
        super().__init__()
        self.fn = _OPS[op][1]
        self.constant = constant
        self.constant_first = constant_first

    def forward(self, a: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        if self.constant is None:
            assert b is not None
            return self.fn(a, b)
        if self.constant_first:
            return self.fn(self.constant, a)
        return self.fn(a, self.constant)


def _oneDNN_broadcastable(op: str, a: list[int], b: list[int], out: list[int]) -> bool:
    # The provider's rule: one operand has the output's shape; div's dividend has it.
    rank = len(out)
    a_full = [1] * (rank - len(a)) + a == out
    b_full = [1] * (rank - len(b)) + b == out
    return a_full if op == "div" else (a_full or b_full)


@st.composite
def broadcast_cases(draw: st.DrawFn) -> tuple[str, list[int], list[int]]:
    op = draw(st.sampled_from(sorted(_OPS)))
    rank = draw(st.integers(1, 5))
    out = [draw(st.integers(1, 6)) for _ in range(rank)]
    # The broadcast operand: each dim kept or 1, maybe with fewer leading dims (down to 0-dim).
    small = [size if draw(st.booleans()) else 1 for size in out]
    small = small[draw(st.integers(0, rank)) :]
    full_first = draw(st.booleans())
    return (op, out, small) if full_first else (op, small, out)


def _inputs(op: str, *shapes: list[int]) -> list[torch.Tensor]:
    tensors = [torch.randn(shape) for shape in shapes]
    if op == "div":  # keep divisors away from 0
        tensors[-1] = tensors[-1].sign() * (tensors[-1].abs() + 0.5)
    return tensors


def test_generated_broadcasts_match_reference_and_eager() -> None:
    examples = generated_examples(12, broadcast_cases(), st.sampled_from(["inputs", "constant"]))
    cases: list[tuple[torch.nn.Module, tuple[Any, ...]]] = []
    operand_pairs = []
    for (op, shape_a, shape_b), operands in examples:
        torch.manual_seed(len(shape_a) * 7 + len(shape_b))
        a, b = _inputs(op, shape_a, shape_b)
        operand_pairs.append((a, b))
        if operands == "constant":  # b baked into the graph as a constant
            cases.append((Binary(op, b, constant_first=False), (a,)))
        else:
            cases.append((Binary(op, None, False), (a, b)))
    # One lowering for all examples: each case's outputs and placement lines are its own.
    for ((op, shape_a, shape_b), operands), (a, b), run in zip(
        examples, operand_pairs, run_cases(cases), strict=True
    ):
        where = (op, shape_a, shape_b, operands)
        expected = _OPS[op][1](a, b)
        assert run.optimized[0].shape == expected.shape, where
        assert_close_scaled(run.optimized[0], run.reference[0])
        assert_close_scaled(run.optimized[0], expected)
        kernel = _OPS[op][0]
        out_shape = list(expected.shape)
        if len(out_shape) >= 1 and _oneDNN_broadcastable(op, shape_a, shape_b, out_shape):
            assert placed(run.placement, kernel, "Optimized"), (where, run.placement)
        else:
            declined = placed(run.placement, kernel, "Reference")
            assert declined and "declined" in declined[0], (where, run.placement)


def test_constant_operand_in_either_order() -> None:
    params = [(op, first) for first in (False, True) for op in sorted(_OPS)]
    cases: list[tuple[torch.nn.Module, tuple[Any, ...]]] = []
    for op, constant_first in params:
        torch.manual_seed(5)
        (x,) = _inputs(op, [2, 3, 4, 5])
        constant = torch.randn(3, 1, 1).abs() + 0.5
        cases.append((Binary(op, constant, constant_first).eval(), (x,)))
    for (op, constant_first), (model, (x,)), run in zip(
        params, cases, run_cases(cases), strict=True
    ):
        assert_close_scaled(run.optimized[0], run.reference[0])
        assert_close_scaled(run.optimized[0], model(x))
        where = "Reference" if (op == "div" and constant_first) else "Optimized"
        assert placed(run.placement, _OPS[op][0], where), (op, constant_first, run.placement)


class SqueezeExcite(torch.nn.Module):
    """conv -> x * sigmoid(fc(mean(x))) -> conv, then a residual add the conv cannot fuse."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, channels, 3, padding=1)
        self.reduce = torch.nn.Conv2d(channels, 4, 1)
        self.expand = torch.nn.Conv2d(4, channels, 1)
        self.conv2 = torch.nn.Conv2d(channels, channels, 1)
        self.conv3 = torch.nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv1(x))
        gate = torch.sigmoid(self.expand(torch.relu(self.reduce(y.mean((2, 3), keepdim=True)))))
        z = self.conv2(y * gate)
        # Two convolution outputs added: one of them is fused (kAdd), whichever the graph offers.
        w = self.conv3(z) + z
        # y is read again after w: this add cannot be fused into conv3.
        return w - y


@pytest.mark.parametrize("size", [7, 24])
def test_squeeze_excite_gate_stays_channels_last(size: int) -> None:
    torch.manual_seed(size)
    model = SqueezeExcite(32).eval()
    x = torch.randn(1, 3, size, size)
    pte, _ = lower_to_pte(model, (x,))  # the switch is read at init: one lowering for both
    for chain in ("1", "0"):
        _check_squeeze_excite(model, x, pte, chain)


def _check_squeeze_excite(model: torch.nn.Module, x: torch.Tensor, pte: bytes, chain: str) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ET_CPU_ONEDNN_CHAIN", chain)
        # The multiply as a binary op (folded into conv2 it is se_gate_fold_test's, taken by
        # the squeeze-excite kernel squeeze_excite_test's).
        patch.setenv("ET_CPU_SE_GATE_FOLD", "0")
        patch.setenv("ET_CPU_SE_FUSED_MUL", "0")
        out_opt, out_ref, placement = run_pte_both(pte, (x,))
    assert_close_scaled(out_opt[0], out_ref[0])
    with torch.no_grad():
        assert_close_scaled(out_opt[0], model(x))
    assert placed(placement, "aten::mul.out", "Optimized"), placement
    assert placed(placement, "aten::sub.out", "Optimized"), placement
    # The residual add after conv3 is still a post-op of the convolution.
    assert [line for line in placement if "aten::add.out" in line and "fused into" in line], (
        placement
    )
    (summary,) = [line for line in placement if line.startswith("Optimized(oneDNN): ")]
    chained = int(summary.split(", ")[1].split()[0])
    if chain == "1":
        # conv1's y (read by mean, mul, sub), the product y * gate, conv2's z: channels-last.
        assert chained >= 3, summary
    else:
        assert chained == 0, summary


def test_large_binary_ops_split_on_two_threads() -> None:
    torch.manual_seed(2)
    model = SqueezeExcite(64).eval()
    x = torch.randn(2, 3, 40, 40)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ET_CPU_ONEDNN_TASK_FLOPS", "0")
        patch.setenv("ET_CPU_ONEDNN_THREADS", "2")
        out_opt, out_ref, placement = run_both(model, (x,))
    assert_close_scaled(out_opt[0], out_ref[0])
    a = torch.randn(1, 5, 33, 17)
    b = torch.randn(5, 1, 17)
    for op in ("mul", "sub"):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("ET_CPU_ONEDNN_TASK_FLOPS", "0")
            patch.setenv("ET_CPU_ONEDNN_THREADS", "2")
            got, want, placement = run_both(Binary(op, None, False), (a, b))
        assert_close_scaled(got[0], want[0])
        assert_close_scaled(got[0], _OPS[op][1](a, b))
        (summary,) = [line for line in placement if line.startswith("Optimized(oneDNN): ")]
        assert "work sharing, 1 ops split" in summary, summary


class ChannelGate(torch.nn.Module):
    """A convolution's (channels-last) or the input's (plain) activation y with a per-channel
    vector v, each op and operand order (our ChannelBinary kernel, channel_binary.h)."""

    def __init__(self, channels: int, conv: bool) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels, 3, padding=1) if conv else None
        # Read by a convolution only, a result stays channels-last like its operand (the SE gate
        # product before the projection).
        self.after = torch.nn.Conv2d(channels, 8, 1) if conv else None

    def forward(self, x: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = torch.relu(self.conv(x)) if self.conv is not None else x
        results = (y * v, v * y, y + v, v - y, y / v)
        after = self.after
        return tuple(after(r) for r in results) if after is not None else results


@pytest.mark.parametrize(
    ("batch", "vector_batch", "channels", "size", "conv"),
    [(1, 1, 72, 9, True), (2, 2, 20, 5, True), (2, 1, 24, 7, False)],
    ids=["nhwc", "nhwc_batch", "plain_shared_vector"],
)
def test_channel_vector_ops_on_either_kernel(
    batch: int, vector_batch: int, channels: int, size: int, conv: bool
) -> None:
    torch.manual_seed(channels + size)
    model = ChannelGate(channels, conv).eval()
    x = torch.randn(batch, channels, size, size)
    (v,) = _inputs("div", [vector_batch, channels, 1, 1])
    with torch.no_grad():
        expected = model(x, v)
    pte, _ = lower_to_pte(model, (x, v))  # the switches are read at init: one lowering
    for kernel in ("1", "0"):  # ours, oneDNN's
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("ET_CPU_CHANNEL_BINARY", kernel)
            patch.setenv("ET_CPU_SE_GATE_FOLD", "0")  # y * v, v * y stay binary ops before after
            patch.setenv("ET_CPU_ONEDNN_TASK_FLOPS", "0")  # split into row bands where it can
            out_opt, out_ref, placement = run_pte_both(pte, (x, v))
        for got, reference, want in zip(out_opt, out_ref, expected, strict=True):
            assert_close_scaled(got, reference)
            assert_close_scaled(got, want)
        (summary,) = [line for line in placement if line.startswith("Optimized(oneDNN): ")]
        ours = 5 if kernel == "1" else 0
        assert f"{ours} channel_binary" in summary, summary


class FlatOps(torch.nn.Module):
    """Same-shape and one-value operands in each order (our flat rows, binary_plan.cc)."""

    def forward(
        self, x: torch.Tensor, y: torch.Tensor, s: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        return (x + y, x * y, x - y, x / y, x * s, s - x, x / s, s + x)


def _kernels_in(summary: str, names: tuple[str, ...]) -> int:
    """How many of the session summary's ops run on our kernels called `names`."""
    total = 0
    for name in names:
        match = re.search(rf"(\d+) {name}\b", summary)
        assert match is not None, (name, summary)
        total += int(match[1])
    return total


def _assert_ours_equal_oneDNN(
    model: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    kernels: tuple[str, ...],
    ours: int,
) -> None:
    """`ours` ops on our `kernels` with them switched on (none off), and the outputs bit-exact
    against oneDNN's binary: the same IEEE op per element."""
    with torch.no_grad():
        expected = model(*inputs)
    pte, _ = lower_to_pte(model, inputs)
    outputs: dict[str, list[torch.Tensor]] = {}
    for kernel in ("1", "0"):  # ours, oneDNN's
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("ET_CPU_CHANNEL_BINARY", kernel)
            patch.setenv("ET_CPU_ONEDNN_TASK_FLOPS", "0")  # split into rows where it can
            out_opt, _, placement = run_pte_both(pte, inputs)
        outputs[kernel] = list(out_opt)
        (summary,) = [line for line in placement if line.startswith("Optimized(oneDNN): ")]
        assert _kernels_in(summary, kernels) == (ours if kernel == "1" else 0), summary
    for got, reference, want in zip(outputs["1"], outputs["0"], expected, strict=True):
        assert torch.equal(got, reference)
        assert_close_scaled(got, want)


@pytest.mark.parametrize("shape", [[128], [4, 3000], [2, 5, 7, 3]], ids=["small", "split", "odd"])
def test_flat_ops_equal_oneDNN_to_the_bit(shape: list[int]) -> None:
    torch.manual_seed(len(shape))
    x, y = _inputs("div", shape, shape)
    (s,) = _inputs("div", [1] * len(shape))
    _assert_ours_equal_oneDNN(FlatOps(), (x, y, s), ("flat_binary",), 8)


class RowOps(torch.nn.Module):
    """A block repeated along the leading dims (w: [D], or [S, D] against every head) and one
    value per row ([..., 1]) in each order the provider takes (our row kernel, binary_plan.cc; a
    broadcast dividend is declined)."""

    def forward(
        self, x: torch.Tensor, w: torch.Tensor, r: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        return (x * w, w + x, x - w, w - x, x / w, x * r, r - x, x / r, x + r)


@pytest.mark.parametrize(
    ("shape", "block"),
    [([2, 5, 37], 1), ([4, 3000], 1), ([1, 6, 16, 64], 1), ([1, 6, 16, 64], 2)],
    ids=["odd", "split", "heads", "rotary"],
)
def test_row_broadcasts_equal_oneDNN_to_the_bit(shape: list[int], block: int) -> None:
    torch.manual_seed(len(shape) + shape[-1] + block)
    (x,) = _inputs("mul", shape)
    (w,) = _inputs("div", shape[-block:])
    (r,) = _inputs("div", [*shape[:-1], 1])
    # A per-row value of a rank-3 output is also a per-channel one (channel_binary).
    _assert_ours_equal_oneDNN(RowOps(), (x, w, r), ("row_binary", "channel_binary"), 9)


class Declined(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> Any:
        return (
            torch.add(a, b, alpha=2.0),  # alpha != 1
            a[:, :1] * b[:1, :],  # both operands broadcast: (4, 1) * (1, 6)
            c[:1] / a,  # div with a broadcast dividend
        )


def test_what_oneDNN_cannot_take_is_declined_with_a_reason() -> None:
    torch.manual_seed(1)
    a = torch.randn(4, 6)
    b = torch.randn(4, 6)
    c = torch.randn(4, 6).abs() + 0.5
    out_opt, out_ref, placement = run_both(Declined(), (a, b, c))
    for got, want in zip(out_opt, out_ref, strict=True):
        assert_close_scaled(got, want)
    (add,) = placed(placement, "aten::add.out", "Reference")
    assert "alpha must be 1" in add, placement
    (mul,) = placed(placement, "aten::mul.out", "Reference")
    assert "both operands are broadcast" in mul, placement
    (div,) = placed(placement, "aten::div.out", "Reference")
    assert "dividend is broadcast" in div, placement


def test_integer_operands_fall_back_with_a_reason() -> None:
    model = Binary("mul", None, False)
    a = torch.randint(-9, 9, (3, 4))
    b = torch.randint(-9, 9, (1, 4))
    out_opt, _, placement = run_both(model, (a, b))
    assert torch.equal(out_opt[0], a * b)
    declined = placed(placement, "aten::mul.out", "Reference")
    assert declined and "float32" in declined[0], placement
