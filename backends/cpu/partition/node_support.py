"""Decides, node by node, whether the CPU delegate can take an Edge op, and if not, why not."""

import enum
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from backends.cpu import symbolic_dims
from backends.cpu.routes import op_key, route_for
from backends.cpu.symbolic_dims import is_size_node
from backends.cpu.torchao import fusion as torchao_fusion

# Tensor dtypes the delegate keeps inside: floats for CNNs/MLPs, and every integer and bool dtype so
# indices, masks and integer results never leave the delegate.
SUPPORTED_DTYPES: frozenset[torch.dtype] = frozenset(
    {torch.float32, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool}
)

# Namespaces of quantize/dequantize and quantized-kernel ops (pt2e, torchao, legacy quantized).
_QUANTIZED_NAMESPACES = frozenset({"quantized_decomposed", "quantized", "torchao"})
_QUANTIZED_DTYPES = frozenset(
    {torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4}
)


class LeaveOutReason(enum.Enum):
    """Why the partitioner left a node outside the delegate."""

    NO_ROUTE = "no route"  # the CPU runtime has no route for the op (see routes.py)
    DTYPE = "dtype"  # a tensor's dtype is outside SUPPORTED_DTYPES
    DYNAMIC_SHAPE = "dynamic shape"  # an unbounded or non-affine symbolic size (symbolic_dims)
    QUANTIZED = "quantized"  # quantize/dequantize or quantized execution
    LAYOUT = "layout"  # a tensor that is not in contiguous dim order
    ARGUMENTS = "arguments"  # arguments outside what the route's kernel takes (Route.check_args)


@dataclass(frozen=True)
class LeftOutNode:
    """One node the partitioner did not claim."""

    name: str  # FX node name
    op: str  # route-table key of the op, or the FX target when it is not an operator
    reason: LeaveOutReason
    detail: str  # human-readable specifics, e.g. "dtype torch.float64 of output"

    def __str__(self) -> str:
        return f"{self.name} ({self.op}): {self.reason.value}: {self.detail}"


def _tensors(value: object) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)


def _namespace(target: object) -> str | None:
    key = op_key(target)
    return None if key is None else key.split(".", 1)[0]


def check_node(node: torch.fx.Node) -> LeftOutNode | None:
    """None when the delegate can take `node` (a call_function node), else why it cannot.

    Checks run in a fixed order (quantized, dynamic shape, route, dtype, layout, arguments) so a
    node gets the most fundamental reason.
    """
    key = op_key(node.target)
    op_name = key if key is not None else str(getattr(node.target, "__name__", node.target))

    def leave_out(reason: LeaveOutReason, detail: str) -> LeftOutNode:
        return LeftOutNode(node.name, op_name, reason, detail)

    inputs = [(arg.name, arg.meta.get("val")) for arg in node.all_input_nodes]
    values = [*inputs, ("output", node.meta.get("val"))]
    float64_ok = None  # the name of an input allowed to be float64

    if key in torchao_fusion.TORCHAO_OPS:
        # A torchao chain: claimed whole with its linear / embedding (preprocess fuses it), else
        # out (backends/cpu/torchao/fusion.py).
        why = torchao_fusion.check_torchao_node(node, check_consumer)
        return None if why is None else leave_out(LeaveOutReason.QUANTIZED, why)
    if _namespace(node.target) in _QUANTIZED_NAMESPACES:
        # Static per-tensor quantize/dequantize (and per-channel dequantize of a constant weight)
        # into int8/uint8 have routes; every other quantization op or scheme stays out.
        quant_route = route_for(node.target)
        if quant_route is None:
            return leave_out(LeaveOutReason.QUANTIZED, f"quantization op {op_name}")
        why = quant_route.check_args(node) if quant_route.check_args is not None else None
        if why is not None:
            return leave_out(LeaveOutReason.QUANTIZED, why)
        # A QAT conv output's per-channel scales may be float64 (ExecuTorch's quantize_per_channel
        # requires double); preprocess fuses the quantize and hands its dequantize float32
        # scales. A constant weight's float64 scales stay out (DTYPE).
        source, scales = node.args[0], node.args[1]
        computed = isinstance(source, torch.fx.Node) and source.op != "placeholder"
        if "per_channel" in op_name and computed and isinstance(scales, torch.fx.Node):
            float64_ok = scales.name
    for where, value in values:
        if any(t.dtype in _QUANTIZED_DTYPES for t in _tensors(value)):
            return leave_out(LeaveOutReason.QUANTIZED, f"quantized tensor {where}")

    for where, value in values:
        why = symbolic_dims.check_value(value)
        if why is not None:
            return leave_out(LeaveOutReason.DYNAMIC_SHAPE, f"{why} ({where})")
    if is_size_node(node):
        return None  # a size computed from bounded symbols: the payload holds its expression
    for where, value in inputs:
        # A SymInt input is a size argument (e.g. view_copy's), written as its expression.
        if value is not None and not isinstance(value, (torch.Tensor, torch.SymInt)):
            return leave_out(LeaveOutReason.DYNAMIC_SHAPE, f"non-tensor input {where}")
    route = route_for(node.target)
    if route is None:
        return leave_out(LeaveOutReason.NO_ROUTE, f"no CPU route for {op_name}")

    for where, value in values:
        for tensor in _tensors(value):
            if tensor.dtype not in SUPPORTED_DTYPES and not (
                where == float64_ok and tensor.dtype == torch.float64
            ):
                return leave_out(LeaveOutReason.DTYPE, f"dtype {tensor.dtype} of {where}")
            if tensor.dim() > 0 and not tensor.is_contiguous():
                return leave_out(LeaveOutReason.LAYOUT, f"non-contiguous {where}")

    why = route.check_args(node) if route.check_args is not None else None
    if why is not None:
        return leave_out(LeaveOutReason.ARGUMENTS, why)
    return None


def check_consumer(node: torch.fx.Node) -> str | None:
    """None when the delegate takes the linear / embedding `node` reading a torchao chain itself,
    else why not (for torchao/fusion.py)."""
    decision = check_node(node)
    return None if decision is None else f"{decision.reason.value}: {decision.detail}"
