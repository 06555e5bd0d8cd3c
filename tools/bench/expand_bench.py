"""Issue 46: the expand 1x1 of the mobile networks' inverted residual blocks on our AVX-512 kernel
(kernels/pointwise_conv.h) against oneDNN's 1x1 convolution (brgconv_1x1, a SiLU as our vector
tail after it), on one band of rows as BlockPlan runs it: channels-last in and out, one thread,
the band as tall as BlockPlan's step (1 MiB of expanded plus depthwise rows per step).

Times are the fastest of `--runs` back-to-back runs, timed in C, in `--rounds` interleaved rounds
(ours, oneDNN's, ours, ...); the minimum over rounds, and GFLOP/s of it.

    bazel run //tools/bench:expand_bench -- [--rounds 5] [--runs 20] [--only 16->96]
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from backends.cpu.runtime.providers.optimized.test.onednn_ctypes import (
    IN_REGISTER_POST_OPS,
    Provider,
)

STEP_BYTES = 1 << 20  # BlockPlan's kBlockStepBytes


@dataclass(frozen=True)
class Expand:
    """One block's expand: input channels, hidden channels, image size, the block's depthwise
    stride (for the step's rows), the activation, the networks it is in."""

    k: int
    n: int
    size: int
    stride: int
    activation: str
    networks: str

    @property
    def name(self) -> str:
        return f"{self.k}->{self.n} @{self.size} s{self.stride} {self.activation}"

    def rows(self) -> int:
        out_w = (self.size - 1) // self.stride + 1
        row_bytes = 4 * self.n * (self.stride * self.size + out_w)
        return max(1, min(self.size, STEP_BYTES // row_bytes))


EXPANDS: list[Expand] = [
    Expand(16, 96, 112, 2, "silu", "b0"),
    Expand(24, 144, 56, 2, "silu", "b0"),
    Expand(24, 144, 56, 1, "silu", "b0"),
    Expand(40, 240, 28, 1, "silu", "b0"),
    Expand(16, 96, 112, 2, "relu6", "v2"),
    Expand(24, 144, 56, 1, "relu6", "v2"),
    Expand(32, 192, 28, 1, "relu6", "v2"),
    Expand(64, 384, 14, 1, "relu6", "v2"),
    Expand(16, 64, 112, 2, "relu", "v3"),
    Expand(16, 72, 56, 2, "relu", "v3"),
    Expand(16, 16, 56, 1, "none", "v3"),
    Expand(24, 72, 56, 1, "relu", "v3"),
    Expand(40, 120, 28, 1, "relu", "v3"),
    Expand(40, 240, 28, 2, "hardswish", "v3"),
    Expand(80, 480, 14, 1, "hardswish", "v3 b0"),
    Expand(96, 576, 14, 1, "relu6", "v2"),
]


def measure(provider: Provider, e: Expand, rounds: int, runs: int) -> tuple[float, float, str]:
    """Microseconds of ours and of oneDNN's (min over interleaved rounds), oneDNN's kernel."""
    generator = torch.Generator().manual_seed(e.k * 1000 + e.n)
    rows = e.rows()
    x = torch.randn(1, e.k, rows, e.size, generator=generator)
    x = x.contiguous(memory_format=torch.channels_last)
    weight = torch.randn(e.n, e.k, 1, 1, generator=generator) / math.sqrt(e.k)
    bias = torch.randn(e.n, generator=generator)
    post_ops = IN_REGISTER_POST_OPS[e.activation][0]
    plan = provider.conv(
        list(x.shape),
        weight,
        bias,
        [1, 1],
        [0, 0],
        [1, 1],
        post_ops=post_ops,
        input_channels_last=True,
        output="channels_last",
    )
    out = plan.new_output()
    pixels_x = x.permute(0, 2, 3, 1).reshape(rows * e.size, e.k)  # the same bytes, [pixels, K]
    flat_weight = weight.reshape(e.n, e.k)
    ours = theirs = math.inf
    for _ in range(rounds):
        result = provider.pointwise_conv(pixels_x, flat_weight, bias, post_ops, runs)
        if result is None:
            raise RuntimeError("our 1x1 kernel does not run here (AVX-512F, ET_CPU_OWN_EXPAND)")
        got, ns = result
        ours = min(ours, ns / 1000.0)
        theirs = min(theirs, plan.time_ns(out, x, runs) / 1000.0)
    want = out.permute(0, 2, 3, 1).reshape(rows * e.size, e.n)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    return ours, theirs, plan.describe().split(" |")[0]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--runs", type=int, default=20, help="runs per timing (the fastest)")
    parser.add_argument("--only", action="append", default=[], help="rows whose name has this")
    args = parser.parse_args(argv)
    provider = Provider(num_threads=1)
    chosen = [e for e in EXPANDS if not args.only or any(o in e.name for o in args.only)]
    print(
        f"{'expand (band)':<30} {'nets':<6} {'pixels':>6} {'ours us':>8} {'oneDNN us':>9} "
        f"{'ratio':>6} {'GFLOP/s':>8} {'oneDNN':>7}  oneDNN kernel"
    )
    for e in chosen:
        ours, theirs, kernel = measure(provider, e, args.rounds, args.runs)
        pixels = e.rows() * e.size
        flops = 2.0 * pixels * e.k * e.n
        print(
            f"{e.name:<30} {e.networks:<6} {pixels:>6} {ours:>8.1f} {theirs:>9.1f} "
            f"{ours / theirs:>6.2f} {flops / ours / 1e3:>8.1f} {flops / theirs / 1e3:>7.1f}  "
            f"{kernel}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
