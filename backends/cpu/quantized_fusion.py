"""FuseQuantizedGroups: PT2E `dequantize -> conv/linear -> [activation] -> quantize` as one int8 op.

A PT2E-quantized Edge program computes a quantized convolution as

    dequantize_per_tensor(x_q) ---------------------\\
    dequantize_per_channel(W_q, scales, zeros, 0) -> convolution(., ., bias) -> [relu | hardtanh |
                                                    clamp] -> quantize_per_tensor

The pass replaces each such group with `et_cpu_quant::conv2d` (or `::linear`, see
quantized_ops.py) reading x_q and W_q directly, so the runtime runs one int8 kernel and the
activation between two quantized ops never exists in float. Conditions (any other group is left
as it is, with the reason in the report, and runs op by op inside the delegate):
- the input dequantize is per-tensor int8/uint8 with static parameters;
- the weight is a constant int8 tensor dequantized per output channel (axis 0) or per tensor, with
  zero points 0 (symmetric) and float32 scales;
- the bias is absent or a float32 constant;
- a 2D, non-transposed convolution (or a linear with a 2D input);
- the result (and the activation's) has one reader; the quantize is per-tensor int8/uint8.
"""

from __future__ import annotations

import math

import torch
from torch.export import ExportedProgram

from backends.cpu import quantized_ops
from backends.cpu.routes import op_key
from backends.transforms.pass_report import PassReport

_DQ = "quantized_decomposed.dequantize_per_tensor.default"
_DQ_CHANNEL = "quantized_decomposed.dequantize_per_channel.default"
_Q = "quantized_decomposed.quantize_per_tensor.default"
_CONV = "aten.convolution.default"
_LINEAR = "aten.linear.default"


def _key(node: object) -> str | None:
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return None
    return op_key(node.target)


def _constant(program: ExportedProgram, node: object) -> torch.Tensor | None:
    """The tensor behind a constant placeholder (parameter, buffer, lifted constant), or None."""
    if not isinstance(node, torch.fx.Node) or node.op != "placeholder":
        return None
    signature = program.graph_signature
    fqn = (
        signature.inputs_to_parameters.get(node.name)
        or signature.inputs_to_buffers.get(node.name)
        or signature.inputs_to_lifted_tensor_constants.get(node.name)
    )
    if fqn is None:
        return None
    tensor = program.state_dict.get(fqn)
    if tensor is None:
        tensor = program.constants.get(fqn)
    return tensor if isinstance(tensor, torch.Tensor) else None


def _clamp_bounds(node: torch.fx.Node) -> tuple[float, float] | None:
    """(min, max) of a fusable activation node, or None when `node` is not one."""
    key = _key(node)
    if key == "aten.relu.default":
        return 0.0, math.inf
    if key == "aten.hardtanh.default":
        low = node.args[1] if len(node.args) > 1 else node.kwargs.get("min_val", -1.0)
        high = node.args[2] if len(node.args) > 2 else node.kwargs.get("max_val", 1.0)
        return float(low), float(high)  # type: ignore[arg-type]
    if key == "aten.clamp.default":
        low = node.args[1] if len(node.args) > 1 else node.kwargs.get("min")
        high = node.args[2] if len(node.args) > 2 else node.kwargs.get("max")
        if not all(v is None or isinstance(v, (int, float)) for v in (low, high)):
            return None
        return (
            -math.inf if low is None else float(low),  # type: ignore[arg-type]
            math.inf if high is None else float(high),  # type: ignore[arg-type]
        )
    return None


def _quant_dtype_ok(node: torch.fx.Node, dtype_index: int) -> bool:
    dtype = node.args[dtype_index] if len(node.args) > dtype_index else None
    if dtype not in quantized_ops.QUANTIZED_RANGES:
        return False
    low, high = quantized_ops.QUANTIZED_RANGES[dtype]  # type: ignore[index]
    return bool(node.args[dtype_index - 2] == low and node.args[dtype_index - 1] == high)


def _requantized_activation(
    quantize: torch.fx.Node,
) -> tuple[tuple[float, float], torch.fx.Node] | None:
    """(clamp bounds, final quantize) when `quantize` feeds only `dequantize -> activation ->
    quantize`, all with `quantize`'s parameters; else None."""
    if len(quantize.users) != 1:
        return None
    dequantize = next(iter(quantize.users))
    if _key(dequantize) != _DQ or tuple(dequantize.args[1:6]) != tuple(quantize.args[1:6]):
        return None
    if len(dequantize.users) != 1:
        return None
    activation = next(iter(dequantize.users))
    bounds = _clamp_bounds(activation)
    if bounds is None or len(activation.users) != 1:
        return None
    requantize = next(iter(activation.users))
    if _key(requantize) != _Q or tuple(requantize.args[1:6]) != tuple(quantize.args[1:6]):
        return None
    return bounds, requantize


class FuseQuantizedGroups:
    """Rewrites quantized conv/linear groups into the delegate's int8 ops; see the module doc."""

    def __call__(self, program: ExportedProgram) -> PassReport:
        report = PassReport(pass_name=type(self).__name__)
        graph = program.graph
        for node in list(graph.nodes):
            if _key(node) in (_CONV, _LINEAR):
                why = self._try_fuse(program, node)
                if why is None:
                    report.folded += 1
                    report.changed = True
                elif why:
                    report.skip(node.name, why)
        if report.changed:
            graph.eliminate_dead_code()
            program.graph_module.recompile()
        return report

    def _try_fuse(self, program: ExportedProgram, op: torch.fx.Node) -> str | None:
        """None when fused; '' when `op` is not a quantized group at all; else why not."""
        is_conv = _key(op) == _CONV
        x_dq, w_dq = op.args[0], op.args[1]
        bias = op.args[2] if len(op.args) > 2 else None
        if _key(x_dq) != _DQ or _key(w_dq) not in (_DQ, _DQ_CHANNEL):
            return ""  # a float op
        assert isinstance(x_dq, torch.fx.Node) and isinstance(w_dq, torch.fx.Node)
        if not _quant_dtype_ok(x_dq, 5):
            return "input dequantize is not int8/uint8 over the full range"
        weight = _constant(program, w_dq.args[0])
        if weight is None or weight.dtype != torch.int8:
            return "weight is not a constant int8 tensor"
        if _key(w_dq) == _DQ_CHANNEL:
            scales_node = w_dq.args[1]
            scales = _constant(program, scales_node)
            zeros = _constant(program, w_dq.args[2])
            if w_dq.args[3] != 0 or scales is None or scales.dtype != torch.float32:
                return "weight scales are not constant float32 per output channel (axis 0)"
            if zeros is not None and bool(torch.any(zeros != 0)):
                return "weight zero points are not 0 (asymmetric weights)"
        else:
            return "per-tensor weight scale (not implemented; per-channel only)"
        if bias is not None:
            bias_tensor = _constant(program, bias)
            if bias_tensor is None or bias_tensor.dtype != torch.float32:
                return "bias is not a float32 constant (e.g. a dequantized int32 bias)"
        if is_conv:
            stride, padding, dilation, transposed, _, groups = op.args[3:9]
            if transposed or weight.dim() != 4:
                return "not a 2D non-transposed convolution"
        else:
            x_val = x_dq.meta.get("val")
            if not isinstance(x_val, torch.Tensor) or x_val.dim() != 2:
                return "linear input is not 2D"
        tail = op
        extra_dead: list[torch.fx.Node] = []
        bounds = (-math.inf, math.inf)
        user = next(iter(tail.users)) if len(tail.users) == 1 else None
        activation = _clamp_bounds(user) if user is not None else None
        if user is not None and activation is not None:
            bounds = activation
            tail = user
            user = next(iter(tail.users)) if len(tail.users) == 1 else None
        if user is None or _key(user) != _Q or not _quant_dtype_ok(user, 5):
            return "result is not quantized per tensor to int8/uint8 by its only reader"
        quantize = user
        # MobileNet-style `... -> quantize -> dequantize -> relu6 -> quantize` with one set of
        # parameters: the activation clamps on the same grid, so it fuses exactly.
        later = _requantized_activation(quantize)
        while later is not None:
            activation_bounds, requantize = later
            bounds = (max(bounds[0], activation_bounds[0]), min(bounds[1], activation_bounds[1]))
            stale = [quantize, next(iter(quantize.users))]
            quantize = requantize
            extra_dead.extend(stale)
            later = _requantized_activation(quantize)
        if x_dq.args[5] != quantize.args[5]:
            return "input and output quantized dtypes differ"
        qmin, qmax = quantized_ops.QUANTIZED_RANGES[quantize.args[5]]  # type: ignore[index]
        common = (
            float(x_dq.args[1]),  # type: ignore[arg-type]
            int(x_dq.args[2]),  # type: ignore[arg-type]
            float(quantize.args[1]),  # type: ignore[arg-type]
            int(quantize.args[2]),  # type: ignore[arg-type]
            qmin,
            qmax,
            bounds[0],
            bounds[1],
        )
        operands = (x_dq.args[0], w_dq.args[0], w_dq.args[1], bias)
        with program.graph.inserting_before(quantize):
            if is_conv:
                fused = program.graph.call_function(
                    quantized_ops.CONV2D,
                    (*operands, list(stride), list(padding), list(dilation), groups, *common),  # type: ignore[arg-type]
                )
            else:
                fused = program.graph.call_function(quantized_ops.LINEAR, (*operands, *common))
        fused.meta = dict(op.meta)
        fused.meta["val"] = quantize.meta["val"]
        quantize.replace_all_uses_with(fused)
        chain = (quantize, *reversed(extra_dead), tail, op, x_dq, w_dq)
        for dead in dict.fromkeys(chain):  # consumers first
            if not dead.users:
                program.graph.erase_node(dead)
        return None
