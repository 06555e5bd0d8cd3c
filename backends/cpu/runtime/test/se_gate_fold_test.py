"""Issue 46: the squeeze-excite gate multiply folded into the 1x1 project convolution after it
(providers/optimized bind_convolution.cc, GatedPointwiseKernel): the product x * gate is never
written; per image the convolution's weights are scaled by the gate along their input channels
(C_out x C_in multiplies) and the same plan runs on x: oneDNN's, or, opted in from at most 64
channels (ET_CPU_OWN_GATED_1X1=1), our own 1x1 kernel with its pixels split.

MobileNetV3-style (hardswish block, ReLU squeeze, hardsigmoid gate) and EfficientNet-style
(SiLU block and squeeze, sigmoid gate) blocks, with and without expand and residual add, batch 1
and 2, a shared gate ([1, C, 1, 1]) over a batch, a dynamic-batch program, the zoo's small
models; ET_CPU_SE_GATE_FOLD unset (fold where 4 x C_out <= H x W), "all" and "0" (the multiply as
its own op) in one process.

Where the gate is not folded, the squeeze-excite kernel takes the multiply as a fused step
(bind_squeeze_excite.cc, ET_CPU_SE_FUSED_MUL; the aten::mul.out placement says "fused into"):
checked at each switch value, and with ET_CPU_SE_FUSED_MUL=0 the multiply is its own op again.

Reference: the same model in float64 eager; tolerance 1e-5 absolute and relative (the folded
path rounds w * g instead of x * g before the same sums of at most 96 terms), and the folded
and unfolded outputs within 1e-5 of each other.
"""

import functools

import pytest
import torch
from torch import nn
from torch.export import Dim

from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import load, lower_cases, lower_to_pte
from backends.cpu.runtime.test.provider_compare import assert_close_scaled, run_pte
from backends.cpu.runtime.test.small_zoo_program import small_zoo_program
from tools.bench import zoo

_SWITCH = "ET_CPU_SE_GATE_FOLD"
_OWN_SWITCH = "ET_CPU_OWN_GATED_1X1"


def _folded(placement: list[str]) -> int:
    (line,) = [entry for entry in placement if entry.startswith("Optimized(oneDNN): ")]
    return int(line.split(" squeeze-excite gates folded")[0].split(", ")[-1])


def _own_gated(placement: list[str]) -> int:
    """Folded gates whose 1x1 convolution runs on our own kernel split by pixels."""
    (line,) = [entry for entry in placement if entry.startswith("Optimized(oneDNN): ")]
    return int(line.split(" gated 1x1 convolutions on pointwise_pixels")[0].split(", ")[-1])


def _fused_multiplies(placement: list[str]) -> int:
    """Gate multiplies the squeeze-excite kernel took (summary), checked against the placement."""
    (line,) = [entry for entry in placement if entry.startswith("Optimized(oneDNN): ")]
    count = int(line.split(" squeeze-excite gate multiplies fused")[0].split(", ")[-1])
    fused_muls = [e for e in placement if "aten::mul.out: fused into" in e]
    assert len(fused_muls) == count, placement
    return count


class Block(nn.Module):
    """[1x1 expand, act], depthwise 3x3, act, squeeze-excite, 1x1 project, [+ input]."""

    def __init__(
        self, channels: int, hidden: int, out: int, style: str, expand: bool, shared: bool
    ) -> None:
        super().__init__()
        v3 = style == "v3"
        self.act: nn.Module = nn.Hardswish() if v3 else nn.SiLU()
        self.expand = nn.Conv2d(channels, hidden, 1) if expand else None
        width = hidden if expand else channels
        self.depthwise = nn.Conv2d(width, width, 3, padding=1, groups=width)
        self.reduce = nn.Conv2d(width, max(4, width // 4), 1)
        self.squeeze_act: nn.Module = nn.ReLU() if v3 else nn.SiLU()
        self.unreduce = nn.Conv2d(max(4, width // 4), width, 1)
        self.gate: nn.Module = nn.Hardsigmoid() if v3 else nn.Sigmoid()
        self.project = nn.Conv2d(width, out, 1)
        self.residual = channels == out
        self.shared = shared  # one gate (the batch's mean) for every image

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.expand(x)) if self.expand is not None else x
        y = self.act(self.depthwise(y))
        pooled = nn.functional.adaptive_avg_pool2d(y, 1)
        if self.shared:
            pooled = pooled.mean(dim=0, keepdim=True)
        g = self.gate(self.unreduce(self.squeeze_act(self.reduce(pooled))))
        y = self.project(y * g)
        return y + x if self.residual else y


def _expected(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out = model.double()(x.double()).float()
    model.float()
    return out


def _run(
    pte: bytes, x: torch.Tensor, switch: str, fused_mul: str = "unset", own: str = "unset"
) -> tuple[torch.Tensor, int]:
    (out,), folded = _run_all(pte, (x,), switch, fused_mul, own)
    return out, folded


def _run_all(
    pte: bytes,
    inputs: tuple[torch.Tensor, ...],
    switch: str,
    fused_mul: str = "unset",
    own: str = "unset",
) -> tuple[list[torch.Tensor], int]:
    """`pte` run once on `inputs` under the switches: its outputs and the gates folded."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in [
            (_SWITCH, switch),
            ("ET_CPU_SE_FUSED_MUL", fused_mul),
            (_OWN_SWITCH, own),
        ]:
            if value == "unset":
                patch.delenv(name, raising=False)
            else:
                patch.setenv(name, value)
        out = run_pte(pte, inputs, reference_only=False)
        return out, _folded(loader.last_placement())


@pytest.mark.parametrize("style", ["v3", "efficientnet"])
@pytest.mark.parametrize(
    "channels, hidden, out, expand, size, default_folds",
    [
        (16, 64, 24, True, (12, 10), 1),  # 4 x 24 outputs <= 120 pixels: folded by default
        (24, 96, 24, True, (10, 10), 1),  # + the block's input (residual post-op)
        (32, 32, 16, False, (16, 16), 1),  # no expand (the depthwise reads the input)
        (16, 48, 40, True, (9, 9), 0),  # 4 x 40 outputs > 81 pixels: only with "all"
    ],
    ids=["expand", "residual", "no_expand", "small_image"],
)
def test_gate_folded_into_project(
    style: str,
    channels: int,
    hidden: int,
    out: int,
    expand: bool,
    size: tuple[int, int],
    default_folds: int,
) -> None:
    # Batch 1 and 2, side by side in one program (one block each: every count is per block).
    cases: list[tuple[nn.Module, tuple[torch.Tensor, ...]]] = []
    expected = []
    for batch in (1, 2):
        torch.manual_seed(channels + out + batch)
        model = Block(channels, hidden, out, style, expand, shared=False).eval()
        x = torch.randn(batch, channels, *size) * 2.0
        expected.append(_expected(model, x))
        cases.append((model, (x,)))
    lowered = lower_cases(cases)
    assert lowered.output_cases == [0, 1]
    blocks = len(cases)
    outputs = {}
    for switch, folds in [("unset", default_folds), ("all", 1), ("1", default_folds), ("0", 0)]:
        actual, folded = _run_all(lowered.pte, lowered.inputs, switch)
        assert folded == folds * blocks, (switch, loader.last_placement())
        # The project writes the (plain) graph output: oneDNN's plan, never our own kernel.
        assert _own_gated(loader.last_placement()) == 0, loader.last_placement()
        # An unfolded gate's multiply is taken by the squeeze-excite kernel.
        assert _fused_multiplies(loader.last_placement()) == (1 - folds) * blocks, (
            loader.last_placement()
        )
        for got, want in zip(actual, expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        outputs[switch] = actual
    for folded_out, unfolded_out in zip(outputs["all"], outputs["0"], strict=True):
        torch.testing.assert_close(folded_out, unfolded_out, rtol=1e-5, atol=1e-5)
    # Neither: the multiply as its own op (bitwise the fused kernel's product: one rounding).
    separate, folded = _run_all(lowered.pte, lowered.inputs, "0", fused_mul="0")
    assert folded == 0 and _fused_multiplies(loader.last_placement()) == 0
    for separate_out, fused_out in zip(separate, outputs["0"], strict=True):
        assert torch.equal(separate_out, fused_out)


class ChainedBlock(nn.Module):
    """Block, then a 3x3 convolution: the project's output stays channels-last."""

    def __init__(self, channels: int, hidden: int) -> None:
        super().__init__()
        self.block = Block(channels, hidden, channels, "v3", True, shared=False)
        self.after = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.after(self.block(x))


@functools.cache
def _chained_program(channels: int, hidden: int) -> tuple[torch.Tensor, torch.Tensor, bytes]:
    """A ChainedBlock's batch-2 input, float64 eager's output and its .pte, lowered once for
    each switch value (read when the delegate binds)."""
    torch.manual_seed(channels + hidden)
    model = ChainedBlock(channels, hidden).eval()
    x = torch.randn(2, channels, 10, 10)
    expected = _expected(model, x)
    pte, _ = lower_to_pte(model, (x,))
    return x, expected, pte


@pytest.mark.parametrize(
    "channels, hidden, own, count",
    [(16, 64, "1", 1), (16, 64, "unset", 0), (24, 96, "all", 1), (24, 96, "1", 0)],
)
def test_own_gated_project(channels: int, hidden: int, own: str, count: int) -> None:
    """A folded gate's project with the block's residual add, chained channels-last, batch 2:
    on our own 1x1 kernel, its pixels split, with ET_CPU_OWN_GATED_1X1=1 from at most 64
    channels, "all" any; unset (the default) oneDNN's plan; within 1e-5 of float64 eager."""
    x, expected, pte = _chained_program(channels, hidden)
    actual, folded = _run(pte, x, "all", own=own)
    assert folded == 1, loader.last_placement()
    assert _own_gated(loader.last_placement()) == count, loader.last_placement()
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


def test_shared_gate_over_a_batch() -> None:
    """A [1, C, 1, 1] gate for a batch of 3 scales every image's weights alike."""
    torch.manual_seed(11)
    model = Block(16, 64, 16, "efficientnet", True, shared=True).eval()
    x = torch.randn(3, 16, 8, 8)
    expected = _expected(model, x)
    pte, _ = lower_to_pte(model, (x,))
    for switch, folds in [("all", 1), ("0", 0)]:
        actual, folded = _run(pte, x, switch)
        assert folded == folds, (switch, loader.last_placement())
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def dynamic_batch_program() -> tuple[Block, bytes]:
    """A block with a symbolic batch (1 to 4), lowered once for every switch value."""
    torch.manual_seed(12)
    model = Block(24, 96, 24, "v3", True, shared=False).eval()
    pte, _ = lower_to_pte(
        model, (torch.randn(2, 24, 10, 10),), dynamic_shapes=({0: Dim("batch", min=1, max=4)},)
    )
    return model, pte


@pytest.mark.parametrize("switch, folds", [("unset", 1), ("0", 0)])
def test_dynamic_batch(
    switch: str,
    folds: int,
    dynamic_batch_program: tuple[Block, bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One program with a symbolic batch: each size's graph folds the gate, per image (or, "0",
    the squeeze-excite kernel multiplies each image by its own gate)."""
    if switch == "unset":
        monkeypatch.delenv(_SWITCH, raising=False)
    else:
        monkeypatch.setenv(_SWITCH, switch)
    model, pte = dynamic_batch_program
    torch.manual_seed(12)
    module = load(pte)
    for batch in [1, 3, 4, 2]:
        x = torch.randn(batch, 24, 10, 10)
        (actual,) = module.forward([x])
        assert _folded(loader.last_placement()) == folds, loader.last_placement()
        assert _fused_multiplies(loader.last_placement()) == 1 - folds, loader.last_placement()
        torch.testing.assert_close(actual, _expected(model, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["mobilenet_v3", "efficientnet"])
def test_zoo_models(name: str) -> None:
    """Every gate of the zoo's small models folds with "all"; outputs as unfolded and eager."""
    model, x, pte = small_zoo_program(name, seed=2, batch=2)  # squeeze_excite_test's too
    blocks = sum(isinstance(m, zoo.SqueezeExcite) for m in model.modules())
    assert blocks > 0
    folded_out, folded = _run(pte, x, "all")
    assert folded == blocks, loader.last_placement()
    assert _fused_multiplies(loader.last_placement()) == 0, loader.last_placement()
    plain_out, none = _run(pte, x, "0")
    assert none == 0, loader.last_placement()
    assert _fused_multiplies(loader.last_placement()) == blocks, loader.last_placement()
    separate_out, _ = _run(pte, x, "0", fused_mul="0")
    assert _fused_multiplies(loader.last_placement()) == 0, loader.last_placement()
    assert torch.equal(plain_out, separate_out)
    assert_close_scaled(folded_out, plain_out)
    with torch.no_grad():
        assert_close_scaled(folded_out, model(x))


def test_weight_scaling_split_over_the_pool() -> None:
    """ET_CPU_SE_SCALE_SPLIT=1 scales a large project's weights (576 x 96) in output-channel
    shares on the pool: the same products (bitwise) as on the calling thread, batch 2."""
    torch.manual_seed(13)
    model = Block(96, 576, 96, "v3", True, shared=False).eval()
    x = torch.randn(2, 96, 7, 7)
    expected = _expected(model, x)
    pte, _ = lower_to_pte(model, (x,))
    outputs = {}
    for split in ["1", "0"]:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("ET_CPU_SE_SCALE_SPLIT", split)
            actual, folded = _run(pte, x, "all")
        assert folded == 1, loader.last_placement()
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
        outputs[split] = actual
    assert torch.equal(outputs["1"], outputs["0"])
