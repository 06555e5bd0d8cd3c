"""What each op of a CPU-delegate payload computes: its floating-point (or int8) operations and
the class of kernel it needs, so a profile can say how far each op and each model is from the
machine's GEMM peak (issue 17: "what stands between it and the GEMM peak").

Only the ops whose work is multiply-adds count FLOPs (2 per multiply-add): convolution
(transposed too), linear / addmm / mm / bmm and the int8 conv2d / linear. Everything else is
memory-bound here (its time is bytes moved, not arithmetic) and counts 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from backends.cpu.serialization.graph_reader import (
    ArgKind,
    PayloadArg,
    PayloadGraph,
    PayloadOp,
    cpu_payloads,
    read_payload,
)

# Kernel classes, in the order reports list them.
DENSE_CONV = "dense conv (k>1)"
POINTWISE_CONV = "1x1 conv"
DEPTHWISE_CONV = "depthwise conv"
TRANSPOSED_CONV = "transposed conv"
GEMM = "linear / matmul"
FUSED_CHAIN = "fused conv chain"  # e.g. an inverted residual block run as one kernel
MEMORY_BOUND = "memory-bound"
CLASSES = (
    DENSE_CONV,
    POINTWISE_CONV,
    DEPTHWISE_CONV,
    TRANSPOSED_CONV,
    GEMM,
    FUSED_CHAIN,
    MEMORY_BOUND,
)

_CONVOLUTIONS = {"aten::convolution.out", "et_cpu_quant::conv2d.out"}
# kernel -> (index of the operand whose last dim is the reduction, True if it is a weight
# [out, in] (reduction = its dim 1) rather than an activation [..., K])
_GEMMS = {
    "aten::linear.out": (1, True),
    "et_cpu_quant::linear.out": (1, True),
    "aten::addmm.out": (1, False),
    "aten::mm.out": (0, False),
    "aten::bmm.out": (0, False),
}


@dataclass(frozen=True)
class OpCost:
    """One payload op: its FLOPs per call, its kernel class and its shape in a few words."""

    flops: int
    kind: str
    shape: str


def _tensor(graph: PayloadGraph, arg: PayloadArg) -> tuple[int, ...]:
    if arg.kind is not ArgKind.TENSOR:
        raise ValueError(f"expected a tensor argument, got {arg.kind.value}")
    return graph.values[arg.value].shape


def _ints(arg: PayloadArg) -> tuple[int, ...]:
    return tuple(arg.value) if arg.kind is ArgKind.INT_LIST else ()


def _conv_cost(graph: PayloadGraph, op: PayloadOp) -> OpCost:
    source = _tensor(graph, op.args[0])
    weight = _tensor(graph, op.args[1])
    out = _tensor(graph, op.args[-1])
    quantized = op.kernel.startswith("et_cpu_quant::")
    # aten: input, weight, bias, stride, padding, dilation, transposed, output_padding, groups;
    # et_cpu_quant::conv2d: input, weight, weight_scales, bias, stride, padding, dilation, groups.
    stride = _ints(op.args[4] if quantized else op.args[3])
    transposed = not quantized and bool(op.args[6].value)
    groups = int((op.args[7] if quantized else op.args[8]).value)
    kernel = weight[2:]
    taps = math.prod(kernel)
    if transposed:
        # Weight [Cin, Cout/groups, k...]: every input element meets Cout/groups x taps weights.
        flops = 2 * math.prod(source) * math.prod(weight[1:])
        kind = TRANSPOSED_CONV
        cin, cout = weight[0], weight[1] * groups
    else:
        # Weight [Cout, Cin/groups, k...]: every output element sums Cin/groups x taps products.
        flops = 2 * math.prod(out) * math.prod(weight[1:])
        cin, cout = weight[1] * groups, weight[0]
        if weight[1] == 1 and groups > 1:
            kind = DEPTHWISE_CONV
        elif taps == 1:
            kind = POINTWISE_CONV
        else:
            kind = DENSE_CONV
    size = "x".join(str(k) for k in kernel)
    steps = "" if all(s == 1 for s in stride) else "/s" + "x".join(str(s) for s in stride)
    grouping = f" g{groups}" if groups > 1 else ""
    spatial = "x".join(str(d) for d in out[2:])
    int8 = " int8" if quantized else ""
    shape = f"{size}{steps}{grouping} {cin}->{cout} @{spatial}{int8}"
    return OpCost(flops, kind, shape)


def _gemm_cost(graph: PayloadGraph, op: PayloadOp) -> OpCost:
    index, is_weight = _GEMMS[op.kernel]
    operand = _tensor(graph, op.args[index])
    out = _tensor(graph, op.args[-1])
    reduction = operand[1] if is_weight else operand[-1]
    rows = math.prod(out[:-1])
    int8 = " int8" if op.kernel.startswith("et_cpu_quant::") else ""
    shape = f"{rows}x{reduction} . {reduction}x{out[-1]}{int8}"
    return OpCost(2 * math.prod(out) * reduction, GEMM, shape)


def op_cost(graph: PayloadGraph, op: PayloadOp) -> OpCost:
    """The cost of one op of `graph`."""
    if op.kernel in _CONVOLUTIONS:
        return _conv_cost(graph, op)
    if op.kernel in _GEMMS:
        return _gemm_cost(graph, op)
    return OpCost(0, MEMORY_BOUND, "")


def program_costs(program: Any) -> dict[str, OpCost]:
    """Node name -> cost, for every op of every CpuBackend payload of a lowered program
    (`edge.exported_program()`); the names are the ones the runtime's profile prints."""
    costs: dict[str, OpCost] = {}
    for payload in cpu_payloads(program):
        graph = read_payload(payload)
        for op in graph.ops:
            costs[op.name] = op_cost(graph, op)
    return costs


def gflops(flops: float, us: float) -> float:
    """GFLOP/s of `flops` done in `us` microseconds (0 when nothing was timed)."""
    return flops / (us * 1e3) if us > 0 else 0.0


def gemm_peak_gflops(n: int = 1024, calls: int = 9) -> float:
    """The GEMM peak this process reaches now: median GFLOP/s of float32 `torch.mm` on n x n
    matrices with torch's current threads (measured in the same run as what it anchors, since
    these machines are shared)."""
    import statistics
    import time

    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
    torch.mm(a, b, out=out)  # warm: threads up, pages touched
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        samples.append(time.perf_counter() - start)
    return gflops(2 * n**3, statistics.median(samples) * 1e6)
