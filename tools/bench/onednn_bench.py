"""Issue #9's provider benchmark: the oneDNN provider against eager PyTorch and XNNPACK.

Whole networks (fp32, batch 1 at 1x3x224x224; the MLP at batch 32), each built from one spec so all
paths compute the same function with the same weights:
- ``resnet18``: ResNet-18 shape (BN folded into conv biases: what the CPU delegate sees).
- ``mobilenetv2``: an 11-block MobileNetV2 shape (inverted residuals, depthwise, ReLU6).
- ``mlp_b32``: Linear+ReLU stack at batch 32.
Paths: ``eager`` (torch, 2 threads), ``xnnpack`` (ExecuTorch's XNNPACK delegate) and ``onednn``: the
provider's plans chained in channels-last with fused bias/ReLU/ReLU6/residual add, torch's pooling
on the NHWC buffers in between (what the CPU delegate's runtime would do, minus its dispatch cost).
Single layers (``layer_*``) and a 2048^3 GEMM compare GFLOP/s against ``torch.nn.functional.conv2d``
and ``torch.mm``. ``head_*``: a batch-1 classifier head with cold weights, as in a whole model
(each call runs the next of ``HEAD_COPIES`` copies, together larger than L3, so its weights were
evicted since they were last read): XNNPACK, the provider's ``RowGemm`` and oneDNN's GEMM
(``ET_CPU_ROW_GEMM=0`` at prepare). ``rows_MxKxN``: the same three on an M-row linear with warm
weights (a decoder's projections at a short sequence), where RowGemm's row limit is decided.
After the harness table, a second table prints GFLOP/s per
variant and the provider's own memory (reordered weights, scratchpad, staging).

    bazel run //tools/bench:onednn_bench -- [--only resnet18] [--no-memory] [--threads 2]
"""

from __future__ import annotations

import functools
import io
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from backends.cpu.runtime.providers.optimized.test.onednn_ctypes import (
    ADD,
    CLAMP,
    RELU,
    Plan,
    PostOp,
    Provider,
)
from tools.bench import harness

THREADS = int(os.environ.get("ONEDNN_BENCH_THREADS", "2"))

# --- network specs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Conv:
    cin: int
    cout: int
    k: int
    stride: int = 1
    groups: int = 1
    act: str | None = "relu"  # "relu", "relu6" or None

    @property
    def pad(self) -> int:
        return self.k // 2


@dataclass(frozen=True)
class Block:
    """convs in sequence; the last one adds the shortcut, then applies `act_after_add`."""

    convs: tuple[Conv, ...]
    shortcut: str | Conv | None  # None, "identity" or a projection conv
    act_after_add: str | None = None


@dataclass(frozen=True)
class Linear:
    fin: int
    fout: int
    act: str | None = None


Layer = Conv | Block | Linear | str  # str: "maxpool" (3x3/2) or "gap" (global average + flatten)


def resnet18() -> list[Layer]:
    layers: list[Layer] = [Conv(3, 64, 7, 2), "maxpool"]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for i in range(2):
            s = stride if i == 0 else 1
            shortcut: str | Conv = (
                Conv(cin, cout, 1, s, act=None) if (s != 1 or cin != cout) else "identity"
            )
            convs = (Conv(cin, cout, 3, s), Conv(cout, cout, 3, 1, act=None))
            layers.append(Block(convs, shortcut, act_after_add="relu"))
            cin = cout
    return [*layers, "gap", Linear(512, 1000)]


def mobilenetv2() -> list[Layer]:
    layers: list[Layer] = [Conv(3, 32, 3, 2, act="relu6")]
    cin = 32
    settings = [(1, 16, 1), (6, 24, 2), (6, 24, 1), (6, 32, 2), (6, 32, 1), (6, 64, 2)]
    settings += [(6, 64, 1), (6, 96, 1), (6, 160, 2), (6, 160, 1), (6, 320, 1)]
    for expand, cout, stride in settings:
        hidden = cin * expand
        convs: list[Conv] = []
        if expand != 1:
            convs.append(Conv(cin, hidden, 1, act="relu6"))
        convs.append(Conv(hidden, hidden, 3, stride, groups=hidden, act="relu6"))
        convs.append(Conv(hidden, cout, 1, act=None))
        shortcut = "identity" if stride == 1 and cin == cout else None
        layers.append(Block(tuple(convs), shortcut))
        cin = cout
    return [*layers, Conv(320, 1280, 1, act="relu6"), "gap", Linear(1280, 1000)]


def mlp() -> list[Layer]:
    layers: list[Layer] = [Linear(1024, 2048, "relu"), Linear(2048, 1024, "relu")]
    return [*layers, Linear(1024, 512, "relu"), Linear(512, 10)]


NETWORKS: dict[str, tuple[Callable[[], list[Layer]], tuple[int, ...]]] = {
    "resnet18": (resnet18, (1, 3, 224, 224)),
    "mobilenetv2": (mobilenetv2, (1, 3, 224, 224)),
    "mlp_b32": (mlp, (32, 1024)),
}


def _activation(name: str | None) -> Callable[[torch.Tensor], torch.Tensor]:
    if name == "relu":
        return torch.relu
    if name == "relu6":
        return lambda t: torch.clamp(t, 0.0, 6.0)
    return lambda t: t


def _post_op(name: str | None) -> list[PostOp]:
    return {"relu": [PostOp(RELU)], "relu6": [PostOp(CLAMP, 0.0, 6.0)], None: []}[name]


class SpecNet(nn.Module):
    """The eager model of a spec, with deterministic weights scaled to keep activations O(1)."""

    def __init__(self, layers: Sequence[Layer]) -> None:
        super().__init__()
        self.layers = list(layers)
        self.mods = nn.ModuleList()
        generator = torch.Generator().manual_seed(0)
        for layer in self.layers:
            for spec in _convs_and_linears(layer):
                if isinstance(spec, Conv):
                    mod: nn.Conv2d | nn.Linear = nn.Conv2d(
                        spec.cin, spec.cout, spec.k, spec.stride, spec.pad, groups=spec.groups
                    )
                    fan_in = spec.cin // spec.groups * spec.k * spec.k
                else:
                    mod = nn.Linear(spec.fin, spec.fout)
                    fan_in = spec.fin
                with torch.no_grad():
                    mod.weight.copy_(
                        torch.randn(mod.weight.shape, generator=generator) * math.sqrt(2 / fan_in)
                    )
                    assert mod.bias is not None
                    mod.bias.copy_(torch.randn(mod.bias.shape, generator=generator) * 0.1)
                self.mods.append(mod)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mods = iter(self.mods)
        for layer in self.layers:
            if layer == "maxpool":
                x = F.max_pool2d(x, 3, 2, 1)
            elif layer == "gap":
                x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
            elif isinstance(layer, (Conv, Linear)):
                x = _activation(layer.act)(next(mods)(x))
            elif isinstance(layer, Block):
                inp = x
                for conv in layer.convs:
                    x = _activation(conv.act)(next(mods)(x))
                if layer.shortcut == "identity":
                    x = x + inp
                elif isinstance(layer.shortcut, Conv):
                    x = x + next(mods)(inp)
                x = _activation(layer.act_after_add)(x)
        return x


def _convs_and_linears(layer: Layer) -> list[Conv | Linear]:
    if isinstance(layer, (Conv, Linear)):
        return [layer]
    if isinstance(layer, Block):
        extra = [layer.shortcut] if isinstance(layer.shortcut, Conv) else []
        return [*layer.convs, *extra]
    return []


def network_gflop(name: str) -> float:
    """Multiply-adds x 2 of the convs and linears (pooling and adds are noise)."""
    build, shape = NETWORKS[name]
    flops = 0.0
    size = shape[-1]
    batch = shape[0]
    for layer in build():
        if layer == "maxpool":
            size = (size + 2 - 3) // 2 + 1
        for spec in _convs_and_linears(layer):
            if isinstance(spec, Conv):
                out = (size + 2 * spec.pad - spec.k) // spec.stride + 1
                flops += 2 * batch * spec.cout * spec.cin // spec.groups * spec.k**2 * out * out
                if not (isinstance(layer, Block) and spec is layer.shortcut):
                    size = out
            else:
                flops += 2 * batch * spec.fin * spec.fout
    return flops / 1e9


# --- the oneDNN path ------------------------------------------------------------------------------

PROVIDER_MEMORY: dict[str, dict[str, int]] = {}


class OnednnNet:
    """A spec compiled to provider plans; forward() runs them on pre-allocated NHWC buffers."""

    def __init__(self, model: SpecNet, input_shape: Sequence[int], provider: Provider) -> None:
        self.provider = provider
        self.steps: list[Callable[[], object]] = []
        self.plans: list[Plan] = []
        self.input = torch.empty(input_shape)
        self.output: torch.Tensor = self.input
        mods: Iterator[nn.Module] = iter(model.mods)
        current = self.input
        source: Plan | None = None  # the plan whose layout `current` is in (None: torch tensor)
        for layer in model.layers:
            if layer == "maxpool":
                current, source = self._torch_step(current, lambda t: F.max_pool2d(t, 3, 2, 1))
            elif layer == "gap":
                current, source = self._torch_step(
                    current, lambda t: torch.flatten(F.adaptive_avg_pool2d(t, 1), 1)
                )
            elif isinstance(layer, Conv):
                current, source = self._conv(next(mods), layer, current, source, [])
            elif isinstance(layer, Linear):
                current, source = self._linear(next(mods), layer, current)
            elif isinstance(layer, Block):
                current, source = self._block(layer, mods, current, source)
        self.output = current

    def _torch_step(
        self, current: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]
    ) -> tuple[torch.Tensor, None]:
        holder = {"in": current}
        result = fn(current)  # shape and memory format of the step's output
        out = torch.empty_like(result)

        def step() -> None:
            out.copy_(fn(holder["in"]))

        self.steps.append(step)
        return out, None

    def _conv(
        self,
        mod: nn.Module,
        spec: Conv,
        current: torch.Tensor,
        source: Plan | None,
        post_ops: list[PostOp],
        residual: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Plan]:
        assert isinstance(mod, nn.Conv2d) and mod.bias is not None
        plan = self.provider.conv(
            tuple(current.shape),
            mod.weight.detach().contiguous(),
            mod.bias.detach().contiguous(),
            [spec.stride] * 2,
            [spec.pad] * 2,
            [1, 1],
            spec.groups,
            post_ops or _post_op(spec.act),
            input_from=source,
            input_channels_last=source is None
            and current.is_contiguous(memory_format=torch.channels_last)
            and not current.is_contiguous(),
            output="channels_last",
        )
        self.plans.append(plan)
        # The residual add runs in place on the residual's buffer (its value is dead afterwards).
        out = residual if residual is not None else plan.new_output()
        inp = current
        self.steps.append(lambda: plan.run_into(out, inp, residual=residual))
        return out, plan

    def _linear(
        self, mod: nn.Module, spec: Linear, current: torch.Tensor
    ) -> tuple[torch.Tensor, None]:
        assert isinstance(mod, nn.Linear) and mod.bias is not None
        plan = self.provider.linear(
            current.shape[0],
            mod.weight.detach().contiguous(),
            mod.bias.detach().contiguous(),
            _post_op(spec.act),
        )
        self.plans.append(plan)
        out = plan.new_output()
        inp = current
        self.steps.append(lambda: plan.run_into(out, inp))
        return out, None

    def _block(
        self, block: Block, mods: Iterator[nn.Module], current: torch.Tensor, source: Plan | None
    ) -> tuple[torch.Tensor, Plan | None]:
        block_in, block_source = current, source
        last = len(block.convs) - 1
        # A projection shortcut reads the block input first: run it before the main path.
        residual: torch.Tensor | None = None
        conv_mods = [next(mods) for _ in block.convs]
        if isinstance(block.shortcut, Conv):
            residual, _ = self._conv(next(mods), block.shortcut, block_in, block_source, [])
        elif block.shortcut == "identity":
            residual = block_in
        for i, (mod, spec) in enumerate(zip(conv_mods, block.convs, strict=True)):
            if i == last and residual is not None:
                post = [PostOp(ADD), *_post_op(block.act_after_add)]
                current, source = self._conv(mod, spec, current, source, post, residual)
            else:
                current, source = self._conv(mod, spec, current, source, [])
        return current, source

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.input.copy_(x)
        for step in self.steps:
            step()
        return self.output


# --- factories (module level: the harness re-imports them for memory) -----------------------------


def _model_and_input(net: str) -> tuple[SpecNet, torch.Tensor]:
    build, shape = NETWORKS[net]
    torch.manual_seed(1)
    return SpecNet(build()).eval(), torch.randn(shape)


def make_eager(net: str) -> harness.Runner:
    torch.set_num_threads(THREADS)
    model, x = _model_and_input(net)

    def run() -> object:
        with torch.no_grad():
            return model(x)

    return run


def make_xnnpack(net: str) -> harness.Runner:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.extension.pybindings import portable_lib

    model, x = _model_and_input(net)
    with torch.no_grad():
        program = torch.export.export(model, (x,))
    lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    buffer = io.BytesIO()
    lowered.to_executorch().write_to_file(buffer)
    pte = buffer.getvalue()
    module = portable_lib._load_for_executorch_from_buffer(pte)
    args = [x]
    # The closure keeps `pte` alive: the runtime does not own the buffer (see FACTS.md).
    return lambda: (pte, module.forward(args))[1]


def make_onednn(net: str) -> harness.Runner:
    model, x = _model_and_input(net)
    provider = Provider(num_threads=THREADS)
    compiled = OnednnNet(model, tuple(x.shape), provider)
    with torch.no_grad():
        expected = model(x)
    actual = compiled.forward(x)
    error = float((actual - expected).abs().max() / expected.abs().max())
    if error > 1e-3:
        raise AssertionError(f"{net}: oneDNN path differs from eager by {error:.2e} (relative)")
    PROVIDER_MEMORY[net] = {
        "weights": provider.weights_bytes,
        "scratchpad": provider.scratchpad_bytes,
        "staging": provider.staging_bytes,
        "activations": sum(p.output_bytes for p in compiled.plans),
    }
    return lambda: compiled.forward(x)


LAYERS: dict[str, tuple[int, int, int, int, int, int]] = {
    # name: (cin, cout, k, stride, groups, H)
    "layer_r18_3x3_64_56": (64, 64, 3, 1, 1, 56),
    "layer_r18_3x3_256_14": (256, 256, 3, 1, 1, 14),
    "layer_r18_stem_7x7_224": (3, 64, 7, 2, 1, 224),
    "layer_mbv2_1x1_24_144_56": (24, 144, 1, 1, 1, 56),
    "layer_mbv2_dw3x3_144_56": (144, 144, 3, 1, 144, 56),
}


def _layer_tensors(layer: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int, int]:
    cin, cout, k, stride, groups, size = LAYERS[layer]
    torch.manual_seed(2)
    x = torch.randn(1, cin, size, size)
    w = torch.randn(cout, cin // groups, k, k) * 0.05
    return x, w, torch.randn(cout), stride, k // 2, groups


def make_torch_conv(layer: str, channels_last: bool) -> harness.Runner:
    torch.set_num_threads(THREADS)
    x, w, b, stride, pad, groups = _layer_tensors(layer)
    if channels_last:
        x, w = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)

    def run() -> object:
        with torch.no_grad():
            return F.conv2d(x, w, b, stride, pad, 1, groups)

    return run


def make_onednn_conv(layer: str, channels_last: bool) -> harness.Runner:
    x, w, b, stride, pad, groups = _layer_tensors(layer)
    provider = Provider(num_threads=THREADS)
    plan = provider.conv(
        tuple(x.shape),
        w,
        b,
        [stride] * 2,
        [pad] * 2,
        [1, 1],
        groups,
        input_channels_last=channels_last,
        output="channels_last" if channels_last else "plain",
    )
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    out = plan.new_output()
    return lambda: plan.run_into(out, x)


def make_torch_mm(m: int, k: int, n: int) -> harness.Runner:
    torch.set_num_threads(THREADS)
    a, b = torch.randn(m, k), torch.randn(k, n)
    return lambda: torch.mm(a, b)


def make_onednn_linear(m: int, k: int, n: int) -> harness.Runner:
    provider = Provider(num_threads=THREADS)
    a, w = torch.randn(m, k), torch.randn(n, k)
    plan = provider.linear(m, w, None)
    out = plan.new_output()
    return lambda: plan.run_into(out, a)


def make_onednn_matmul(m: int, k: int, n: int) -> harness.Runner:
    provider = Provider(num_threads=THREADS)
    a, b = torch.randn(m, k), torch.randn(k, n)
    plan = provider.matmul(1, m, k, n)
    out = plan.new_output()
    return lambda: plan.run_into(out, a, b)


# Batch-1 classifier heads (k -> n): MobileNetV3-Small's two, and the 1280 -> 1000 of
# MobileNetV2 / EfficientNet-B0.
HEADS = ((576, 1024), (1024, 1000), (1280, 1000))
# Copies per head variant that calls rotate through: 12 x 4-5 MB outgrows the 32 MB L3 here.
HEAD_COPIES = 12


# Program bytes the loaded head modules read from.
KEEP: list[bytes] = []


def _head_weights(k: int, n: int, copy: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(copy)
    return torch.randn(n, k, generator=generator) / math.sqrt(k), torch.randn(
        n, generator=generator
    )


def _rotating(calls: Sequence[Callable[[], object]]) -> harness.Runner:
    state = {"next": 0}

    def run() -> object:
        index = state["next"]
        state["next"] = (index + 1) % len(calls)
        return calls[index]()

    return run


def make_head_provider(k: int, n: int, row_gemm: bool) -> harness.Runner:
    """The head on the provider's LinearPlan: RowGemm, or oneDNN's GEMM with ET_CPU_ROW_GEMM=0."""
    provider = Provider(num_threads=THREADS)
    x = torch.randn(1, k)
    saved = os.environ.pop("ET_CPU_ROW_GEMM", None)
    if not row_gemm:
        os.environ["ET_CPU_ROW_GEMM"] = "0"  # read at prepare
    try:
        plans = [provider.linear(1, *_head_weights(k, n, copy)) for copy in range(HEAD_COPIES)]
    finally:
        os.environ.pop("ET_CPU_ROW_GEMM", None)
        if saved is not None:
            os.environ["ET_CPU_ROW_GEMM"] = saved
    if plans[0].describe().startswith("row_gemm") != row_gemm:
        raise AssertionError(f"head {k}->{n}: row_gemm={row_gemm} ran {plans[0].describe()}")
    out = plans[0].new_output()
    return _rotating([functools.partial(plan.run_into, out, x) for plan in plans])


def make_head_xnnpack(k: int, n: int) -> harness.Runner:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.extension.pybindings import portable_lib

    x = torch.randn(1, k)
    calls: list[Callable[[], object]] = []
    for copy in range(HEAD_COPIES):
        head = nn.Linear(k, n).eval()
        weight, bias = _head_weights(k, n, copy)
        with torch.no_grad():
            head.weight.copy_(weight)
            head.bias.copy_(bias)
        program = torch.export.export(head, (x,))
        pte = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
        buffer = pte.to_executorch().buffer
        module = portable_lib._load_for_executorch_from_buffer(buffer)
        KEEP.append(buffer)  # the runtime does not own the program's bytes (see FACTS.md)
        calls.append(functools.partial(module.forward, [x]))
    return _rotating(calls)


# Few-row linears with warm weights (a decoder's projections at a short sequence; the tokens are
# the rows), the Llama-style decoders' shapes (dim 288 and 128): the provider's RowGemm (up to
# kRowGemmMaxRows rows, row_gemm.h) against oneDNN's GEMM where their weights sit in cache, the
# other end from the cold heads. Measured here (2026-12-04, 10 rounds): oneDNN 1.5-2.3x faster
# at 4 rows, and RowGemm extended to more rows in blocks of 4 stayed near 45 GFLOP/s while
# oneDNN reached 120-186 at 16-64 rows, so RowGemm stays a few-row kernel for cold weights.
ROW_COUNTS = (1, 4, 16, 64)
ROW_SHAPES = ((288, 288), (288, 768), (768, 288), (128, 256))


def _linear_with_row_gemm(row_gemm: bool, make: Callable[[], Plan]) -> Plan:
    """`make()` with ET_CPU_ROW_GEMM (read at prepare) set to "0" unless `row_gemm`."""
    saved = os.environ.pop("ET_CPU_ROW_GEMM", None)
    if not row_gemm:
        os.environ["ET_CPU_ROW_GEMM"] = "0"
    try:
        return make()
    finally:
        os.environ.pop("ET_CPU_ROW_GEMM", None)
        if saved is not None:
            os.environ["ET_CPU_ROW_GEMM"] = saved


def make_rows_provider(m: int, k: int, n: int, row_gemm: bool) -> harness.Runner:
    """An m-row linear on the provider's LinearPlan: RowGemm or oneDNN (whichever it allows)."""
    provider = Provider(num_threads=THREADS)
    weight, bias = _head_weights(k, n, 0)
    plan = _linear_with_row_gemm(row_gemm, lambda: provider.linear(m, weight, bias))
    if plan.describe().startswith("row_gemm") and not row_gemm:
        raise AssertionError(f"rows {m}x{k}x{n}: ET_CPU_ROW_GEMM=0 ran {plan.describe()}")
    x, out = torch.randn(m, k), plan.new_output()
    return functools.partial(plan.run_into, out, x)


def make_rows_xnnpack(m: int, k: int, n: int) -> harness.Runner:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.extension.pybindings import portable_lib

    x = torch.randn(m, k)
    layer = nn.Linear(k, n).eval()
    weight, bias = _head_weights(k, n, 0)
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)
    program = torch.export.export(layer, (x,))
    buffer = (
        to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
        .to_executorch()
        .buffer
    )
    KEEP.append(buffer)  # the runtime does not own the program's bytes (see FACTS.md)
    module = portable_lib._load_for_executorch_from_buffer(buffer)
    return functools.partial(module.forward, [x])


GFLOP: dict[str, float] = {}


def _product(
    name: str, macs: int, baseline: str, notes: str | None, variants: list[harness.Variant]
) -> harness.Benchmark:
    """A matrix product's benchmark (`macs` multiply-adds, counted in GFLOP)."""
    GFLOP[name] = 2 * macs / 1e9
    notes = notes or f"{GFLOP[name]:.3f} GFLOP"
    return harness.Benchmark(name=name, baseline=baseline, notes=notes, variants=variants)


def benchmarks() -> list[harness.Benchmark]:
    out: list[harness.Benchmark] = []
    for net in NETWORKS:
        GFLOP[net] = network_gflop(net)
        out.append(
            harness.Benchmark(
                name=net,
                baseline="xnnpack",
                notes=f"{GFLOP[net]:.3f} GFLOP per call",
                variants=[
                    harness.Variant("eager", make_eager, {"net": net}),
                    harness.Variant("xnnpack", make_xnnpack, {"net": net}),
                    harness.Variant("onednn", make_onednn, {"net": net}),
                ],
            )
        )
    for layer, (cin, cout, k, stride, groups, size) in LAYERS.items():
        osz = (size + 2 * (k // 2) - k) // stride + 1
        GFLOP[layer] = 2 * cout * cin // groups * k * k * osz * osz / 1e9
        variants = []
        for layout in (False, True):
            suffix = "nhwc" if layout else "nchw"
            kwargs = {"layer": layer, "channels_last": layout}
            variants.append(harness.Variant(f"torch_{suffix}", make_torch_conv, kwargs))
            variants.append(harness.Variant(f"onednn_{suffix}", make_onednn_conv, kwargs))
        out.append(
            harness.Benchmark(
                name=layer,
                baseline="torch_nchw",
                notes=f"{GFLOP[layer]:.4f} GFLOP",
                variants=variants,
            )
        )
    for m, k, n in ((32, 1024, 2048), (2048, 2048, 2048)):
        dims = {"m": m, "k": k, "n": n}
        variants = [
            harness.Variant("torch_mm", make_torch_mm, dims),
            harness.Variant("onednn_linear", make_onednn_linear, dims),
            harness.Variant("onednn_matmul", make_onednn_matmul, dims),
        ]
        out.append(_product(f"gemm_{m}x{k}x{n}", m * k * n, "torch_mm", None, variants))
    for m in ROW_COUNTS:
        for k, n in ROW_SHAPES:
            dims = {"m": m, "k": k, "n": n}
            variants = [
                harness.Variant("xnnpack", make_rows_xnnpack, dims),
                harness.Variant("row_gemm", make_rows_provider, {**dims, "row_gemm": True}),
                harness.Variant("onednn_gemm", make_rows_provider, {**dims, "row_gemm": False}),
            ]
            notes = f"{m} rows, warm weights"
            out.append(_product(f"rows_{m}x{k}x{n}", m * k * n, "xnnpack", notes, variants))
    for k, n in HEADS:
        dims = {"k": k, "n": n}
        variants = [
            harness.Variant("xnnpack", make_head_xnnpack, dims),
            harness.Variant("row_gemm", make_head_provider, {**dims, "row_gemm": True}),
            harness.Variant("onednn_gemm", make_head_provider, {**dims, "row_gemm": False}),
        ]
        notes = f"batch 1, cold weights ({HEAD_COPIES} copies in rotation)"
        out.append(_product(f"head_{k}x{n}", k * n, "xnnpack", notes, variants))
    return out


def render_gflops(results: Sequence[harness.BenchmarkResult]) -> str:
    lines = ["", "== GFLOP/s (median)"]
    for res in results:
        cells = []
        for v in res.variants:
            rate = "-" if not v.median_ms else f"{GFLOP[res.name] / (v.median_ms / 1e3):.1f}"
            cells.append(f"{v.name}={rate}")
        lines.append(f"{res.name:<28} " + "  ".join(cells))
    if PROVIDER_MEMORY:
        lines += ["", "== oneDNN provider memory (MiB): reordered weights, scratchpad, staging"]
        for net, mem in PROVIDER_MEMORY.items():
            figures = ", ".join(f"{k} {v / 2**20:.2f}" for k, v in mem.items())
            lines.append(f"{net:<28} {figures}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = harness.build_parser(__doc__.splitlines()[0] if __doc__ else "oneDNN bench")
    parser.add_argument("--threads", type=int, default=THREADS, help="threads for every path")
    args = parser.parse_args(argv)
    os.environ["ONEDNN_BENCH_THREADS"] = str(args.threads)  # memory subprocesses read it
    globals()["THREADS"] = args.threads
    options = harness.Options(
        repeats=args.repeats, warmup=args.warmup, budget_s=args.budget, memory=not args.no_memory
    )
    selected = [b for b in benchmarks() if not args.only or b.name in args.only]
    if not selected:
        print(f"error: no benchmark named {args.only}", file=sys.stderr)
        return 2
    say: Callable[[str], None] = (
        (lambda _m: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    )
    results = [harness.run_benchmark(b, options, say) for b in selected]
    print(harness.render_text(results))
    print(render_gflops(results))
    print(f"\noneDNN ISA: {Provider(num_threads=1).isa()}; threads {args.threads}")
    return 1 if any(v.error for r in results for v in r.variants) else 0


if __name__ == "__main__":
    raise SystemExit(main())
