"""Issue 45's indicative micro-benchmark of `et_cpu_quant::linear_8da` (torchao 8da4w linears,
int4 weights, group 32): by default the large decoder's decode GEMVs (1 row; K x N 2048 x 2048,
2048 x 5632, 5632 x 2048 and the 2048 x 32000 output) and a prefill GEMM of 128 rows, on the
Optimized provider's kernel (providers/optimized/kernels/linear_8da_vnni.cc) and on the
Reference provider's scalar kernel (ET_CPU_LINEAR_8DA=0). Each program holds at least `--copies`
independent linears of the shape on the same input (one delegate), and enough of them that their
weights take `--min-mib` (far more than the last-level cache), so the weights come from memory;
the time per linear is the forward's over the copies. Effective bandwidth: the payload's weight
bytes (int4 + float32 scales) per linear over that time, beside the streaming-read bandwidth
(llm_bench.read_bandwidth: median, min and max of several passes).

`--variant LABEL:VAR=VALUE[,VAR=VALUE...]` (repeatable) times the fast kernel again with those
environment variables set while the program loads, on the same lowered program, e.g.
`--variant tile:ET_CPU_LINEAR_8DA_GEMV=0 --variant pf1k:ET_CPU_LINEAR_8DA_PREFETCH=1024`.

    ./bazelw run //tools/bench:linear_8da_bench -- [--copies 8] [--repeats 20] [--no-scalar]
        [--shapes 2048x2048x1,5632x2048x128] [--min-mib 96] [--variant ...]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torchao.quantization import quantize_
from torchao.quantization.granularity import PerGroup
from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig

from backends.cpu.runtime.test.lowered_program import load, lower_to_pte
from tools.bench.harness import environment
from tools.bench.llm_bench import read_bandwidth

INT4: torch.dtype = torch.int4  # type: ignore[attr-defined]
GROUP = 32


class _Copies(nn.Module):
    def __init__(self, k: int, n: int, copies: int) -> None:
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(k, n, bias=False) for _ in range(copies))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(linear(x) for linear in self.linears)


def _program(k: int, n: int, rows: int, copies: int) -> tuple[bytes, torch.Tensor]:
    model = _Copies(k, n, copies).eval()
    config = Int8DynamicActivationIntxWeightConfig(
        weight_dtype=INT4, weight_granularity=PerGroup(GROUP)
    )
    quantize_(model, config)
    x = torch.randn(rows, k)
    pte, _ = lower_to_pte(model, (x,))
    return pte, x


def _time(pte: bytes, x: torch.Tensor, repeats: int, fast: bool, env: Mapping[str, str]) -> float:
    """Median seconds of one forward, the program loaded with the fast kernel on or off and
    `env` set (the kernel reads its switches when the delegate binds, at the first call)."""
    settings: dict[str, str | None] = {**env, "ET_CPU_LINEAR_8DA": None if fast else "0"}
    with environment(settings):
        program = load(pte)
        program.forward([x])  # init (the delegate binds here), warm up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            program.forward([x])
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    """`LABEL:VAR=VALUE[,VAR=VALUE...]` -> (label, environment)."""
    label, _, assignments = text.partition(":")
    env = {}
    for assignment in filter(None, assignments.split(",")):
        name, sep, value = assignment.partition("=")
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"bad variant {text!r}: want LABEL:VAR=VALUE,...")
        env[name] = value
    if not label:
        raise argparse.ArgumentTypeError(f"bad variant {text!r}: no label")
    return label, env


def copies_for(weight_bytes: int, copies: int, min_mib: float) -> int:
    """At least `copies` linears, and enough that their weights take `min_mib` MiB."""
    return max(copies, math.ceil(min_mib * 2**20 / weight_bytes))


def main(argv: Any = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--copies", type=int, default=8)
    parser.add_argument("--min-mib", type=float, default=96.0, help="weights per program (MiB)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-scalar", action="store_true", help="skip the scalar kernel")
    parser.add_argument("--variant", type=parse_variant, action="append", default=[])
    parser.add_argument(
        "--shapes",
        default="2048x2048x1,2048x5632x1,5632x2048x1,2048x32000x1,2048x5632x128",
        help="comma-separated KxNxROWS shapes (default: the decode GEMVs and a 128-row GEMM)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    probe = read_bandwidth(512, threads=2, samples=5)
    print(
        f"memory read (512 MiB, 2 threads, 5 passes): median {probe.median / 1e9:.1f} GB/s "
        f"(min {probe.low / 1e9:.1f}, max {probe.high / 1e9:.1f})"
    )
    shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")]
    variants: list[tuple[str, bool, dict[str, str]]] = [("fast", True, {})]
    variants += [(label, True, env) for label, env in args.variant]
    if not args.no_scalar:
        variants.append(("scalar", False, {}))
    for k, n, rows in shapes:
        weight_bytes = n * k // 2 + n * (k // GROUP) * 4
        copies = copies_for(weight_bytes, args.copies, args.min_mib)
        pte, x = _program(k, n, rows, copies)
        line = f"K={k} N={n} rows={rows} ({copies} copies):"
        for name, fast, env in variants:
            repeats = args.repeats if fast else max(2, args.repeats // 10)
            per_linear = _time(pte, x, repeats, fast, env) / copies
            gbs = weight_bytes / per_linear / 1e9
            gops = 2 * rows * k * n / per_linear / 1e9
            line += f"  {name} {per_linear * 1e6:9.1f} us"
            line += f" ({gbs:5.1f} GB/s weights, {gops:6.1f} GOP/s)"
        print(line, flush=True)


if __name__ == "__main__":
    main()
