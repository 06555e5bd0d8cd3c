"""Issue 46: the squeeze-excite tail (global average pool, 1x1 convolution, activation, 1x1
convolution, hardsigmoid or sigmoid gate) runs as one kernel of the Optimized provider
(providers/optimized/kernels/squeeze_excite.h), the gate multiply after it as the broadcast
multiply: MobileNetV3-style (ReLU, hardsigmoid) and EfficientNet-style (SiLU, sigmoid) tails
after a channels-last depthwise stage and on a plain graph input, batch 1 and 3, with and
without biases, a dynamic-batch program, the zoo's small MobileNetV3 / EfficientNet, and the
switch (on by default; ET_CPU_OWN_SE=0: the pool and the two products as three kernels).
The gate multiply x * gate is taken by the kernel as a fused step (ET_CPU_SE_FUSED_MUL, on by
default; "0": the broadcast multiply as its own op): test_gate_multiply_fused checks it at batch
1 and 2 in each layout case (x and the product channels-last, x channels-last and the product a
plain graph output, both plain) against eager and bitwise against the separate multiply.

The kernel shares each phase (the pool over pixel slices or, plain, channels; each product over
its output vectors) out on the work pool when it reads enough (ET_CPU_SE_SPLIT: "0" never, "all"
always, for these tests): every output is summed in the same order however the phases are split,
so the outputs must be bitwise equal across the three settings, on 1 and 2 pool threads.

Reference: the same model in float64 eager; tolerance 1e-5 (absolute and relative: the pool sums
at most 24 x 24 values, the products at most 96 terms), 1e-4 for the larger tails of the split
tests (sums of up to 56 x 56 values, products of up to 576 terms).
"""

from typing import Any

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.extension.pybindings import portable_lib
from torch import nn
from torch.export import Dim

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import lower_cases
from backends.cpu.runtime.test.provider_compare import (
    assert_close_scaled,
    run_pte,
    run_pte_both,
)
from backends.cpu.runtime.test.small_zoo_program import small_zoo_program
from tools.bench import zoo

_BUFFERS: list[bytes] = []  # the runtime does not own a program's buffer


def _summary(placement: list[str]) -> str:
    (line,) = [entry for entry in placement if entry.startswith("Optimized(oneDNN): ")]
    return line


def _tails(placement: list[str]) -> int:
    return int(_summary(placement).split(" squeeze-excite tails")[0].split(", ")[-1])


class Tail(nn.Module):
    """An optional depthwise stage (its output channels-last in the delegate), then the tail."""

    def __init__(self, channels: int, squeezed: int, style: str, depthwise: bool, bias: bool):
        super().__init__()
        self.depthwise = (
            nn.Conv2d(channels, channels, 3, padding=1, groups=channels) if depthwise else None
        )
        self.reduce = nn.Conv2d(channels, squeezed, 1, bias=bias)
        self.expand = nn.Conv2d(squeezed, channels, 1, bias=bias)
        self.act: nn.Module = nn.ReLU() if style == "v3" else nn.SiLU()
        self.gate: nn.Module = nn.Hardsigmoid() if style == "v3" else nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.depthwise is not None:
            x = torch.relu(self.depthwise(x))
        scale = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.expand(self.act(self.reduce(scale))))


def _fused_multiplies(placement: list[str]) -> int:
    head = _summary(placement).split(" squeeze-excite gate multiplies fused")[0]
    count = int(head.split(", ")[-1])
    assert count == sum("aten::mul.out: fused into" in entry for entry in placement), placement
    return count


class TailThenConv(Tail):
    """The tail's product read by a 3x3 depthwise convolution (kept channels-last: no fold)."""

    def __init__(self, channels: int, squeezed: int, style: str, depthwise: bool) -> None:
        super().__init__(channels, squeezed, style, depthwise, True)
        self.after = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.after(super().forward(x))


def _expected(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.double()(x.double()).float()


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("depthwise", [True, False], ids=["channels_last", "plain"])
@pytest.mark.parametrize("style", ["v3", "efficientnet"])
def test_tail_on_our_kernel(style: str, depthwise: bool, bias: bool) -> None:
    """Batch 1 and 3, channels with a tail (40) and without (96), side by side in one program
    (one tail each); the switch on and off."""
    torch.manual_seed(7)
    cases: list[tuple[nn.Module, tuple[torch.Tensor, ...]]] = []
    expected = []
    for batch, channels, squeezed, size in [(1, 40, 10, (9, 11)), (3, 96, 24, (7, 6))]:
        model = Tail(channels, squeezed, style, depthwise, bias).eval()
        x = torch.randn(batch, channels, *size) * 3.0
        expected.append(_expected(model, x))
        cases.append((model.float(), (x,)))
    lowered = lower_cases(cases)
    assert lowered.output_cases == [0, 1]
    for own, tails in [("1", 1), ("unset", 1), ("0", 0)]:
        with pytest.MonkeyPatch.context() as patch:
            if own == "unset":
                patch.delenv("ET_CPU_OWN_SE", raising=False)
            else:
                patch.setenv("ET_CPU_OWN_SE", own)
            out_opt, out_ref, placement = run_pte_both(lowered.pte, lowered.inputs)
        assert _tails(placement) == tails * len(cases), (own, placement)
        for got, reference, want in zip(out_opt, out_ref, expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            assert_close_scaled(got, reference)


# (batch, channels, squeezed, size, style), each after a depthwise stage (channels-last) and on a
# plain graph input.
_SPLIT_TAILS = [
    (1, 576, 144, (14, 14), "v3"),  # MobileNetV3's largest tail: both products split
    (1, 32, 8, (56, 56), "efficientnet"),  # few channels, many pixels: the pool splits
    (3, 120, 30, (7, 9), "efficientnet"),  # batch 3, odd channel tail (120 = 7.5 vectors)
    (2, 1152, 48, (7, 7), "efficientnet"),  # EfficientNet-B0's last tail
]


def test_tail_split_over_the_pool() -> None:
    # Every tail side by side in one program (one lowering), run under each split setting on 1
    # and 2 pool threads: each op reads what it would alone, so each splits as it would alone.
    cases: list[tuple[nn.Module, tuple[torch.Tensor, ...]]] = []
    expected = []
    for batch, channels, squeezed, size, style in _SPLIT_TAILS:
        for depthwise in (True, False):
            torch.manual_seed(channels + batch)
            model = Tail(channels, squeezed, style, depthwise, True).eval()
            x = torch.randn(batch, channels, *size) * 3.0
            expected.append(_expected(model, x))
            cases.append((model.float(), (x,)))
    lowered = lower_cases(cases)
    assert lowered.output_cases == list(range(len(cases)))
    outputs: dict[tuple[str, str], list[torch.Tensor]] = {}
    for threads in ["2", "1"]:
        for split in ["unset", "all", "0"]:
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("ET_CPU_OWN_SE", "1")
                patch.setenv("ET_CPU_ONEDNN_THREADS", threads)
                if split == "unset":
                    patch.delenv("ET_CPU_SE_SPLIT", raising=False)
                else:
                    patch.setenv("ET_CPU_SE_SPLIT", split)
                out = run_pte(lowered.pte, lowered.inputs, reference_only=False)
                assert _tails(loader.last_placement()) == len(cases), loader.last_placement()
            for got, want in zip(out, expected, strict=True):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
            outputs[(threads, split)] = out
    first = outputs[("2", "all")]
    for key, out in outputs.items():
        for case, (got, want) in enumerate(zip(out, first, strict=True)):
            assert torch.equal(got, want), (key, case)


def test_tail_with_a_dynamic_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ET_CPU_OWN_SE", "1")
    torch.manual_seed(8)
    model = Tail(48, 12, "efficientnet", True, True).eval()
    loader.load_cpu_backend()
    partitioner = CpuPartitioner()
    exported = torch.export.export(
        model, (torch.randn(2, 48, 8, 8),), dynamic_shapes=({0: Dim("batch", min=1, max=4)},)
    )
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    assert partitioner.report.left_out == (), partitioner.report
    pte = bytes(edge.to_executorch().buffer)
    _BUFFERS.append(pte)
    module: Any = portable_lib._load_for_executorch_from_buffer(pte)
    for batch in [1, 3, 4]:
        x = torch.randn(batch, 48, 8, 8)
        (actual,) = module.forward([x])
        assert _tails(loader.last_placement()) == 1, loader.last_placement()
        # Each image times its own gate in the kernel (the graph output: plain).
        assert _fused_multiplies(loader.last_placement()) == 1, loader.last_placement()
        torch.testing.assert_close(actual, _expected(model, x), rtol=1e-5, atol=1e-5)
        model = model.float()


@pytest.mark.parametrize("name", ["mobilenet_v3", "efficientnet"])
def test_zoo_models(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every squeeze-excite block of the zoo's small MobileNetV3 / EfficientNet is one kernel."""
    monkeypatch.setenv("ET_CPU_OWN_SE", "1")
    model, x, pte = small_zoo_program(name, seed=2, batch=2)  # se_gate_fold_test's too
    out = run_pte(pte, (x,), reference_only=False)
    placement = loader.last_placement()
    blocks = sum(isinstance(m, zoo.SqueezeExcite) for m in model.modules())
    assert blocks > 0
    assert _tails(placement) == blocks, placement
    with torch.no_grad():
        assert_close_scaled(out[0], model(x))


@pytest.mark.parametrize(
    "depthwise, then_conv",
    [(True, True), (True, False), (False, False)],
    ids=["channels_last", "channels_last_to_plain_output", "plain"],
)
@pytest.mark.parametrize("style", ["v3", "efficientnet"])
def test_gate_multiply_fused(style: str, depthwise: bool, then_conv: bool) -> None:
    """The multiply is a fused step of the tail (placement), per image, as eager and bitwise as
    the separate broadcast multiply; batch 1 large enough (56 x 56 x 48) to split over the pool,
    batch 2 small, side by side in one program (one tail each)."""
    cases: list[tuple[nn.Module, tuple[torch.Tensor, ...]]] = []
    expected = []
    for batch in (1, 2):
        torch.manual_seed(batch + 17 * depthwise + 5 * then_conv)
        channels, squeezed, size = (48, 12, (56, 56)) if batch == 1 else (40, 10, (9, 11))
        model: Tail = (
            TailThenConv(channels, squeezed, style, depthwise)
            if then_conv
            else Tail(channels, squeezed, style, depthwise, True)
        ).eval()
        x = torch.randn(batch, channels, *size) * 3.0
        expected.append(_expected(model, x))
        cases.append((model.float(), (x,)))
    lowered = lower_cases(cases)
    assert lowered.output_cases == [0, 1]
    outputs = {}
    for fused_mul, fused in [("unset", 1), ("0", 0)]:
        with pytest.MonkeyPatch.context() as patch:
            patch.delenv("ET_CPU_OWN_SE", raising=False)
            if fused_mul == "unset":
                patch.delenv("ET_CPU_SE_FUSED_MUL", raising=False)
            else:
                patch.setenv("ET_CPU_SE_FUSED_MUL", fused_mul)
            out = run_pte(lowered.pte, lowered.inputs, reference_only=False)
        placement = loader.last_placement()
        assert _tails(placement) == len(cases), placement
        assert _fused_multiplies(placement) == fused * len(cases), placement
        for got, want in zip(out, expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        outputs[fused_mul] = out
    for fused_out, separate_out in zip(outputs["unset"], outputs["0"], strict=True):
        assert torch.equal(fused_out, separate_out)
