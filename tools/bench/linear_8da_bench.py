"""Issue 45's indicative micro-benchmark of `et_cpu_quant::linear_8da` (torchao 8da4w linears,
int4 weights, group 32): decode GEMVs (1 row) at K=N=2048 and K=2048, N=5632, and a prefill GEMM of
128 rows, on the Optimized provider's kernel (providers/optimized/kernels/linear_8da_vnni.cc) and
on the Reference provider's scalar kernel (ET_CPU_LINEAR_8DA=0). Each program holds `--copies`
independent linears of the shape on the same input (one delegate), so the weights come from
memory rather than the last-level cache; the time per linear is the forward's over the copies.
Effective bandwidth: the payload's weight bytes (int4 + float32 scales) per linear over that
time, beside a simple memory-read figure (torch summing a 512 MiB tensor).

    ./bazelw run //tools/bench:linear_8da_bench -- [--copies 8] [--repeats 20] [--no-scalar]
        [--shapes 2048x2048x128,5632x2048x128]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import torch
from torch import nn
from torchao.quantization import quantize_
from torchao.quantization.granularity import PerGroup
from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig

from backends.cpu.runtime.test.lowered_program import load, lower_to_pte

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


def _time(pte: bytes, x: torch.Tensor, repeats: int, fast: bool) -> float:
    """Median seconds of one forward, the program loaded with the fast kernel on or off."""
    if fast:
        os.environ.pop("ET_CPU_LINEAR_8DA", None)
    else:
        os.environ["ET_CPU_LINEAR_8DA"] = "0"
    program = load(pte)
    program.forward([x])  # init (the delegate binds here), warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        program.forward([x])
        times.append(time.perf_counter() - start)
    os.environ.pop("ET_CPU_LINEAR_8DA", None)
    return statistics.median(times)


def _memory_read_gbs() -> float:
    data = torch.ones(128 * 1024 * 1024)  # 512 MiB
    data.sum()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        data.sum()
        best = min(best, time.perf_counter() - start)
    return data.numel() * 4 / best / 1e9


def main(argv: Any = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--copies", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-scalar", action="store_true", help="skip the scalar kernel")
    parser.add_argument(
        "--shapes",
        default="2048x2048x1,2048x5632x1,2048x5632x128",
        help="comma-separated KxNxROWS shapes (default: the decode GEMVs and a 128-row GEMM)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    print(f"memory read (torch sum of 512 MiB, 2 threads): {_memory_read_gbs():.1f} GB/s")
    shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")]
    for k, n, rows in shapes:
        pte, x = _program(k, n, rows, args.copies)
        weight_bytes = n * k // 2 + n * (k // GROUP) * 4
        line = f"K={k} N={n} rows={rows}:"
        variants = (("fast", True),) if args.no_scalar else (("fast", True), ("scalar", False))
        for name, fast in variants:
            repeats = args.repeats if fast else max(2, args.repeats // 10)
            per_linear = _time(pte, x, repeats, fast) / args.copies
            gbs = weight_bytes / per_linear / 1e9
            gops = 2 * rows * k * n / per_linear / 1e9
            line += f"  {name} {per_linear * 1e6:9.1f} us"
            line += f" ({gbs:5.1f} GB/s weights, {gops:6.1f} GOP/s)"
        print(line, flush=True)


if __name__ == "__main__":
    main()
