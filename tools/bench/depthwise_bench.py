"""Issue 46: our AVX-512 depthwise convolution (kernels/depthwise_conv.h) against oneDNN's
(brdgmm_dw) on the mobile networks' depthwise layers, and our stem convolution
(kernels/stem_conv.h) against oneDNN's jit first-convolution kernel on their stems.

Each row is one depthwise layer of MobileNetV2 / MobileNetV3-Large / EfficientNet-B0 at 224x224
(3x3 and 5x5, stride 1 and 2, 16-1152 channels, 112x112 down to 7x7) with the network's fused
activation (ReLU6, hardswish, SiLU), channels-last in and out, prepared twice through the same
ConvPlan: with ET_CPU_OWN_DEPTHWISE=all (ours) and =0 (oneDNN's). The stems (3 input channels,
the plain graph input, channels-last output) the same way with ET_CPU_OWN_STEM. Times are the
fastest of `--runs` back-to-back runs, timed in C (no Python per call), per batch size and thread
count.

    bazel run //tools/bench:depthwise_bench -- [--batch 1 8] [--threads 1 2] [--only 56x56x144]
    bazel run //tools/bench:depthwise_bench -- --only stem
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from backends.cpu.runtime.providers.optimized.test.onednn_ctypes import (
    CLAMP,
    HARDSWISH,
    RELU,
    SILU,
    PostOp,
    Provider,
)


@dataclass(frozen=True)
class Layer:
    """One depthwise layer (stem_inputs 0) or stem (a dense convolution from `stem_inputs`
    channels, plain input): input size, (output) channels, kernel, stride, the fused activation."""

    size: int
    channels: int
    kernel: int
    stride: int
    activation: str  # "relu", "relu6", "hardswish" or "silu"
    networks: str
    stem_inputs: int = 0

    @property
    def name(self) -> str:
        if self.stem_inputs:
            size = f"stem {self.size}x{self.size}x{self.stem_inputs}->{self.channels}"
        else:
            size = f"{self.size}x{self.size}x{self.channels}"
        return f"{size} k{self.kernel} s{self.stride} {self.activation}"

    @property
    def switch(self) -> str:
        return "ET_CPU_OWN_STEM" if self.stem_inputs else "ET_CPU_OWN_DEPTHWISE"

    @property
    def ours(self) -> str:
        return "stem:avx512" if self.stem_inputs else "depthwise:avx512"


ACTIVATIONS: dict[str, list[PostOp]] = {
    "relu": [PostOp(RELU)],
    "relu6": [PostOp(CLAMP, 0.0, 6.0)],
    "hardswish": [PostOp(HARDSWISH)],
    "silu": [PostOp(SILU)],
}

# The distinct depthwise layers of MobileNetV2 (v2), MobileNetV3-Large (v3) and
# EfficientNet-B0 (b0) at 224x224.
LAYERS: list[Layer] = [
    Layer(112, 32, 3, 1, "relu6", "v2 b0"),
    Layer(112, 16, 3, 1, "relu6", "v3"),
    Layer(112, 96, 3, 2, "relu6", "v2 b0"),
    Layer(112, 64, 3, 2, "relu6", "v3"),
    Layer(56, 144, 3, 1, "relu6", "v2 b0"),
    Layer(56, 72, 3, 1, "relu6", "v3"),
    Layer(56, 144, 3, 2, "relu6", "v2"),
    Layer(56, 72, 5, 2, "relu6", "v3"),
    Layer(56, 144, 5, 2, "silu", "b0"),
    Layer(28, 192, 3, 1, "relu6", "v2"),
    Layer(28, 120, 5, 1, "relu6", "v3"),
    Layer(28, 240, 5, 1, "silu", "b0"),
    Layer(28, 192, 3, 2, "relu6", "v2"),
    Layer(28, 240, 3, 2, "hardswish", "v3 b0"),
    Layer(14, 384, 3, 1, "relu6", "v2"),
    Layer(14, 576, 3, 1, "relu6", "v2"),
    Layer(14, 200, 3, 1, "hardswish", "v3"),
    Layer(14, 480, 3, 1, "hardswish", "v3 b0"),
    Layer(14, 480, 5, 1, "silu", "b0"),
    Layer(14, 672, 5, 1, "hardswish", "v3 b0"),
    Layer(14, 576, 3, 2, "relu6", "v2"),
    Layer(14, 672, 5, 2, "hardswish", "v3 b0"),
    Layer(7, 960, 3, 1, "relu6", "v2"),
    Layer(7, 960, 5, 1, "hardswish", "v3"),
    Layer(7, 1152, 5, 1, "silu", "b0"),
    Layer(7, 1152, 3, 1, "silu", "b0"),
    # The stems: MobileNetV2, MobileNetV3, EfficientNet-B0, ResNet's 7x7 (ResNet-18/50's 64
    # outputs; the zoo's ResNet-50-style, tools/bench/zoo.py, has 32).
    Layer(224, 32, 3, 2, "relu6", "v2", stem_inputs=3),
    Layer(224, 16, 3, 2, "hardswish", "v3", stem_inputs=3),
    Layer(224, 32, 3, 2, "silu", "b0", stem_inputs=3),
    Layer(224, 64, 7, 2, "relu", "resnet", stem_inputs=3),
    Layer(224, 32, 7, 2, "relu", "r50z", stem_inputs=3),
]


def time_layer(provider: Provider, layer: Layer, batch: int, own: bool, runs: int) -> float:
    """Microseconds of the fastest of `runs` runs of the layer's ConvPlan, ours or oneDNN's."""
    generator = torch.Generator().manual_seed(layer.size * 1000 + layer.channels)
    c, k = layer.channels, layer.kernel
    c_in = layer.stem_inputs or c
    x = torch.randn(batch, c_in, layer.size, layer.size, generator=generator)
    if not layer.stem_inputs:
        x = x.contiguous(memory_format=torch.channels_last)
    weight = torch.randn(c, c_in // (1 if layer.stem_inputs else c), k, k, generator=generator) / k
    bias = torch.randn(c, generator=generator)
    before = os.environ.get(layer.switch)
    os.environ[layer.switch] = "all" if own else "0"
    try:
        plan = provider.conv(
            list(x.shape),
            weight,
            bias,
            [layer.stride] * 2,
            [k // 2] * 2,
            [1, 1],
            groups=1 if layer.stem_inputs else c,
            post_ops=ACTIVATIONS[layer.activation],
            input_channels_last=not layer.stem_inputs,
            output="channels_last",
        )
    finally:
        if before is None:
            del os.environ[layer.switch]
        else:
            os.environ[layer.switch] = before
    if plan.describe().startswith(layer.ours) != own:
        expected = "ours" if own else "oneDNN"
        raise RuntimeError(f"{layer.name}: expected {expected}: {plan.describe()}")
    out = plan.new_output()
    plan.time_ns(out, x, 3)  # warm up: caches, the pool's threads
    return plan.time_ns(out, x, runs) / 1000.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8], help="batch sizes")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts")
    parser.add_argument("--runs", type=int, default=30, help="runs per timing (the fastest)")
    parser.add_argument("--only", action="append", default=[], help="layers whose name has this")
    args = parser.parse_args(argv)
    layers = [layer for layer in LAYERS if not args.only or any(o in layer.name for o in args.only)]
    columns = f"{'N':>2} {'T':>2} {'ours us':>9} {'oneDNN us':>9} {'ratio':>6}"
    print(f"{'layer':<36} {'nets':<6} {columns}")
    ratios: list[float] = []
    for threads in args.threads:
        provider = Provider(num_threads=threads)
        for batch in args.batch:
            for layer in layers:
                runs = max(3, args.runs // batch)
                ours = time_layer(provider, layer, batch, True, runs)
                theirs = time_layer(provider, layer, batch, False, runs)
                ratios.append(ours / theirs)
                print(
                    f"{layer.name:<36} {layer.networks:<6} {batch:>2} {threads:>2} "
                    f"{ours:>9.1f} {theirs:>9.1f} {ours / theirs:>6.2f}",
                    flush=True,
                )
    if ratios:
        geomean = float(torch.tensor(ratios).log().mean().exp())
        print(f"geomean ours / oneDNN: {geomean:.3f} over {len(ratios)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
