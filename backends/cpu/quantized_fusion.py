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
- the bias is absent, a float32 constant, or a constant int32 tensor dequantized per tensor or per
  output channel (the QAT flow's bias, `FuseQATConvBN`'s folded batch norm): the op gets the
  float32 values that dequantize computes, b x scale, which is how oneDNN 3 applies a bias (after
  the scales, in the output's float domain);
- a 2D, non-transposed convolution (or a linear with a 2D input);
- the result (and the activation's) has one reader; the quantize is per-tensor int8/uint8, or (a
  convolution without activation, as `FuseQATConvBN` leaves it) per output channel (axis 1).

It also replaces `dequantize -> max_pool2d_with_indices -> getitem(0) -> quantize` with
`et_cpu_quant::max_pool2d` on the int8 values when the quantize has the dequantize's parameters
and the indices are unread (exact: see quantized_ops.py), and `dequantize(a) + dequantize(b) ->
[activation] -> quantize` (a residual add: one shape, no alpha) with `et_cpu_quant::add`.

A per-channel output grid (S_c, z_c) fits the op's per-tensor one exactly: the op computes
round(y / S_c) + z_c as round(y') with output scale 1 and zero point 0 when its weight scales are
divided by S_c and its bias is b_c / S_c + z_c. The dequantize that reads it gets float32 scales
(ExecuTorch's quantize needed float64; the payload has no float64 and its dequantize takes both).
"""

from __future__ import annotations

import dataclasses
import math
import operator

import torch
from torch.export import ExportedProgram

from backends.cpu import quantized_ops
from backends.cpu.routes import op_key
from backends.transforms.pass_report import PassReport
from backends.transforms.program_constants import ProgramConstants

_DQ = "quantized_decomposed.dequantize_per_tensor.default"
_DQ_CHANNEL = "quantized_decomposed.dequantize_per_channel.default"
_Q = "quantized_decomposed.quantize_per_tensor.default"
_Q_CHANNEL = "quantized_decomposed.quantize_per_channel.default"
_CONV = "aten.convolution.default"
_LINEAR = "aten.linear.default"
_MAX_POOL = "aten.max_pool2d_with_indices.default"
_ADD = "aten.add.Tensor"


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


def _pair(value: object, default: list[int]) -> list[int]:
    """A pooling size argument as two values (torch's one-value and empty forms expanded)."""
    values = [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]  # type: ignore[call-overload]
    if not values:
        return list(default)
    return values * 2 if len(values) == 1 else values


def _fuse_pool(pool: torch.fx.Node) -> str | None:
    """None when `pool` became an int8 max pool; '' when it is a float op; else why not."""
    x_dq = pool.args[0]
    if _key(x_dq) != _DQ:
        return ""
    assert isinstance(x_dq, torch.fx.Node)
    if not _quant_dtype_ok(x_dq, 5):
        return "input dequantize is not int8/uint8 over the full range"
    values = [u for u in pool.users if u.target is operator.getitem and u.args[1] == 0]
    if any(u.users for u in pool.users if u not in values) or len(values) != 1:
        return "max pool's indices are read"
    (value,) = values
    quantize = next(iter(value.users)) if len(value.users) == 1 else None
    if quantize is None or _key(quantize) != _Q or quantize.args[1:6] != x_dq.args[1:6]:
        return "max pool's result is not requantized with its input's parameters by its only reader"
    args = list(pool.args) + [None] * (6 - len(pool.args))
    kernel = _pair(args[1], [])
    stride = _pair(args[2] if args[2] is not None else [], kernel)
    padding = _pair(args[3] if args[3] is not None else 0, [0, 0])
    dilation = _pair(args[4] if args[4] is not None else 1, [1, 1])
    ceil_mode = bool(args[5]) if args[5] is not None else False
    graph = pool.graph
    with graph.inserting_before(quantize):
        fused = graph.call_function(
            quantized_ops.MAX_POOL2D,
            (x_dq.args[0], kernel, stride, padding, dilation, ceil_mode),
        )
    fused.meta = dict(pool.meta)
    fused.meta["val"] = quantize.meta["val"]
    quantize.replace_all_uses_with(fused)
    for dead in dict.fromkeys((quantize, value, *pool.users, pool, x_dq)):  # consumers first
        if not dead.users:
            graph.erase_node(dead)
    return None


def _output_quantize(
    tail: torch.fx.Node, dtype: object
) -> tuple[torch.fx.Node, tuple[float, float], list[torch.fx.Node]] | str:
    """The quantize ending `tail -> [activation] -> quantize [-> dequantize -> activation ->
    quantize on its grid ...]` into `dtype`, the clamp bounds met on the way and the nodes
    between (producers first), or why there is none."""
    bounds = (-math.inf, math.inf)
    between: list[torch.fx.Node] = []
    user = next(iter(tail.users)) if len(tail.users) == 1 else None
    activation = _clamp_bounds(user) if user is not None else None
    if user is not None and activation is not None:
        bounds = activation
        between.append(user)
        user = next(iter(user.users)) if len(user.users) == 1 else None
    if user is None or _key(user) != _Q or not _quant_dtype_ok(user, 5) or user.args[5] != dtype:
        return "result is not quantized per tensor to the input's dtype by its only reader"
    quantize = user
    later = _requantized_activation(quantize)
    while later is not None:
        activation_bounds, requantize = later
        bounds = (max(bounds[0], activation_bounds[0]), min(bounds[1], activation_bounds[1]))
        dequantize = next(iter(quantize.users))
        between += [quantize, dequantize, next(iter(dequantize.users))]
        quantize = requantize
        later = _requantized_activation(quantize)
    return quantize, bounds, between


def _fuse_add(add: torch.fx.Node) -> str | None:
    """None when `add` became an int8 add; '' when it is a float add; else why not."""
    a_dq, b_dq = add.args[0], add.args[1]
    if _key(a_dq) != _DQ or _key(b_dq) != _DQ:
        return ""
    assert isinstance(a_dq, torch.fx.Node) and isinstance(b_dq, torch.fx.Node)
    if add.kwargs.get("alpha", 1) != 1:
        return "add with alpha"
    if not (_quant_dtype_ok(a_dq, 5) and _quant_dtype_ok(b_dq, 5)) or a_dq.args[5] != b_dq.args[5]:
        return "add operands are not dequantized from one int8/uint8 dtype over its full range"
    a_val, b_val = a_dq.meta.get("val"), b_dq.meta.get("val")
    if not isinstance(a_val, torch.Tensor) or not isinstance(b_val, torch.Tensor):
        return "add operands without shapes"
    if a_val.shape != b_val.shape:
        return "add broadcasts"
    found = _output_quantize(add, a_dq.args[5])
    if isinstance(found, str):
        return found
    quantize, bounds, between = found
    qmin, qmax = quantized_ops.QUANTIZED_RANGES[quantize.args[5]]  # type: ignore[index]
    graph = add.graph
    with graph.inserting_before(quantize):
        fused = graph.call_function(
            quantized_ops.ADD,
            (
                a_dq.args[0],
                float(a_dq.args[1]),  # type: ignore[arg-type]
                int(a_dq.args[2]),  # type: ignore[arg-type]
                b_dq.args[0],
                float(b_dq.args[1]),  # type: ignore[arg-type]
                int(b_dq.args[2]),  # type: ignore[arg-type]
                float(quantize.args[1]),  # type: ignore[arg-type]
                int(quantize.args[2]),  # type: ignore[arg-type]
                qmin,
                qmax,
                bounds[0],
                bounds[1],
            ),
        )
    fused.meta = dict(add.meta)
    fused.meta["val"] = quantize.meta["val"]
    quantize.replace_all_uses_with(fused)
    for dead in dict.fromkeys((quantize, *reversed(between), add, a_dq, b_dq)):
        if not dead.users:
            graph.erase_node(dead)
    return None


@dataclasses.dataclass(frozen=True)
class _GroupInputs:
    """A quantized conv/linear's dequantized operands and what the int8 op gets for them."""

    x_dq: torch.fx.Node
    w_dq: torch.fx.Node
    bias: object  # the op's bias argument: None, a constant, or a dequantize
    weight_scales: torch.Tensor  # float32, one per output channel
    bias_values: torch.Tensor | None  # float32


class FuseQuantizedGroups:
    """Rewrites quantized conv/linear groups into the delegate's int8 ops; see the module doc."""

    def __call__(self, program: ExportedProgram) -> PassReport:
        report = PassReport(pass_name=type(self).__name__)
        graph = program.graph
        self._constants = ProgramConstants(program)
        for node in list(graph.nodes):
            if _key(node) in (_CONV, _LINEAR, _MAX_POOL, _ADD):
                fuse = {_MAX_POOL: _fuse_pool, _ADD: _fuse_add}.get(_key(node))  # type: ignore[arg-type]
                why = fuse(node) if fuse else self._try_fuse(program, node)
                if why is None:
                    report.folded += 1
                    report.changed = True
                elif why:
                    report.skip(node.name, why)
        if report.changed:
            graph.eliminate_dead_code()  # constants left unused are pruned after the passes
            self._constants.commit()
            program.graph_module.recompile()
        return report

    def _new_constant(self, hint: str, tensor: torch.Tensor) -> torch.fx.Node:
        return self._constants.add_lifted_constant(hint, tensor)

    def _weight_scales(
        self, program: ExportedProgram, w_dq: torch.fx.Node, channels: int
    ) -> tuple[torch.Tensor | None, str | None]:
        """(float32 scale per output channel, None) or (None, why the weight does not fit)."""
        if _key(w_dq) == _DQ_CHANNEL:
            scales = _constant(program, w_dq.args[1])
            zeros = _constant(program, w_dq.args[2])
            if w_dq.args[3] != 0 or scales is None or scales.dtype != torch.float32:
                return None, "weight scales are not constant float32 per output channel (axis 0)"
            if zeros is not None and bool(torch.any(zeros != 0)):
                return None, "weight zero points are not 0 (asymmetric weights)"
            return scales, None
        scale, zero_point = w_dq.args[1], w_dq.args[2]
        if not isinstance(scale, float) or zero_point != 0:
            return None, "per-tensor weight scale is not a constant with zero point 0"
        return torch.full((channels,), scale, dtype=torch.float32), None

    def _float_bias(
        self, program: ExportedProgram, bias: object
    ) -> tuple[torch.Tensor | None, str | None]:
        """(the bias as float32 values or None without one, None) or (None, why not)."""
        if bias is None:
            return None, None
        tensor = _constant(program, bias)
        if tensor is not None:
            if tensor.dtype != torch.float32:
                return None, "bias is not a float32 constant"
            return tensor, None
        assert isinstance(bias, torch.fx.Node)
        values = _constant(program, bias.args[0]) if _key(bias) in (_DQ, _DQ_CHANNEL) else None
        if values is None or values.dtype != torch.int32:
            return None, "bias is neither a float32 constant nor a dequantized int32 constant"
        if _key(bias) == _DQ_CHANNEL:
            scales, zeros = _constant(program, bias.args[1]), _constant(program, bias.args[2])
            if bias.args[3] != 0 or scales is None or zeros is None:
                return None, "int32 bias is not dequantized per output channel (axis 0)"
        elif isinstance(bias.args[1], float) and isinstance(bias.args[2], int):
            scales = torch.tensor(bias.args[1], dtype=torch.float64)
            zeros = torch.tensor(bias.args[2])
        else:
            return None, "int32 bias scale is not a constant"
        # What the dequantize computes: (b - z) x scale in double, rounded to float32 once.
        exact = (values.to(torch.float64) - zeros.to(torch.float64)) * scales.to(torch.float64)
        return exact.to(torch.float32), None

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
        weight_scales, why = self._weight_scales(program, w_dq, weight.shape[0])
        if why is not None:
            return why
        assert weight_scales is not None
        bias_values, why = self._float_bias(program, bias)
        if why is not None:
            return why
        if is_conv:
            if op.args[6] or weight.dim() != 4:  # transposed
                return "not a 2D non-transposed convolution"
        else:
            x_val = x_dq.meta.get("val")
            if not isinstance(x_val, torch.Tensor) or x_val.dim() != 2:
                return "linear input is not 2D"
        user = next(iter(op.users)) if len(op.users) == 1 else None
        inputs = _GroupInputs(x_dq, w_dq, bias, weight_scales, bias_values)
        if is_conv and user is not None and _key(user) == _Q_CHANNEL:
            return self._fuse_channel_output(program, op, user, inputs)
        # MobileNet-style `... -> quantize -> dequantize -> relu6 -> quantize` with one set of
        # parameters too: the activation clamps on the same grid, so it fuses exactly.
        found = _output_quantize(op, x_dq.args[5])
        if isinstance(found, str):
            return found
        quantize, bounds, between = found
        qmin, qmax = quantized_ops.QUANTIZED_RANGES[quantize.args[5]]  # type: ignore[index]
        output = (float(quantize.args[1]), int(quantize.args[2]))  # type: ignore[arg-type]
        self._replace(
            program,
            op,
            quantize,
            inputs,
            output,
            (qmin, qmax, bounds[0], bounds[1]),
            (quantize, *reversed(between)),
        )
        return None

    def _fuse_channel_output(
        self,
        program: ExportedProgram,
        op: torch.fx.Node,
        quantize: torch.fx.Node,
        inputs: _GroupInputs,
    ) -> str | None:
        """conv -> quantize_per_channel(axis 1): the grid (S_c, z_c) folded into the weight
        scales and bias, output scale 1 and zero point 0 (see the module doc)."""
        scales = _constant(program, quantize.args[1])
        zeros = _constant(program, quantize.args[2])
        channels = inputs.weight_scales.numel()
        if quantize.args[3] != 1 or scales is None or zeros is None:
            return "per-channel output quantize is not over the channels with constant qparams"
        if scales.numel() != channels or zeros.numel() != channels:
            return "per-channel output qparams do not have one value per output channel"
        if not _quant_dtype_ok(quantize, 6) or inputs.x_dq.args[5] != quantize.args[6]:
            return "per-channel output quantize is not to the input's dtype over its full range"
        qmin, qmax = quantized_ops.QUANTIZED_RANGES[quantize.args[6]]  # type: ignore[index]
        step = scales.to(torch.float64)
        folded_scales = (inputs.weight_scales.to(torch.float64) / step).to(torch.float32)
        bias = inputs.bias_values
        base = bias.to(torch.float64) if bias is not None else 0.0
        folded_bias = (base / step + zeros.to(torch.float64)).to(torch.float32)
        for reader in list(quantize.users):  # the matching dequantizes (partitioner-checked)
            reader_scales = _constant(program, reader.args[1])
            if reader_scales is not None and reader_scales.dtype == torch.float64:
                name = f"{reader.name}_scales"
                reader.update_arg(1, self._new_constant(name, reader_scales.to(torch.float32)))
        self._replace(
            program,
            op,
            quantize,
            dataclasses.replace(inputs, weight_scales=folded_scales, bias_values=folded_bias),
            (1.0, 0),
            (qmin, qmax, -math.inf, math.inf),
            (quantize,),
        )
        return None

    def _replace(
        self,
        program: ExportedProgram,
        op: torch.fx.Node,
        quantize: torch.fx.Node,
        inputs: _GroupInputs,
        output: tuple[float, int],
        ranges: tuple[int, int, float, float],
        dead_tail: tuple[torch.fx.Node, ...],
    ) -> None:
        """Puts the int8 op in place of `op` ... `quantize` and erases the group."""
        x_dq, w_dq, bias = inputs.x_dq, inputs.w_dq, inputs.bias
        qmin, qmax, output_min, output_max = ranges
        common = (
            float(x_dq.args[1]),  # type: ignore[arg-type]
            int(x_dq.args[2]),  # type: ignore[arg-type]
            output[0],
            output[1],
            qmin,
            qmax,
            output_min,
            output_max,
        )
        scales_node = self._scales_node(program, w_dq, inputs.weight_scales, op.name)
        bias_node = self._bias_node(program, bias, inputs.bias_values, op.name)
        operands = (x_dq.args[0], w_dq.args[0], scales_node, bias_node)
        with program.graph.inserting_before(quantize):
            if _key(op) == _CONV:
                stride, padding, dilation, _, _, groups = op.args[3:9]
                fused = program.graph.call_function(
                    quantized_ops.CONV2D,
                    (*operands, list(stride), list(padding), list(dilation), groups, *common),  # type: ignore[arg-type]
                )
            else:
                fused = program.graph.call_function(quantized_ops.LINEAR, (*operands, *common))
        fused.meta = dict(op.meta)
        fused.meta["val"] = quantize.meta["val"]
        quantize.replace_all_uses_with(fused)
        chain = (*dead_tail, op, x_dq, w_dq)
        if isinstance(bias, torch.fx.Node) and bias is not bias_node:
            chain = (*chain, bias)
        for dead in dict.fromkeys(chain):  # consumers first
            if not dead.users:
                program.graph.erase_node(dead)

    def _scales_node(
        self, program: ExportedProgram, w_dq: torch.fx.Node, scales: torch.Tensor, name: str
    ) -> torch.fx.Node:
        """The weight dequantize's own scales when `scales` are those, else a new constant."""
        existing = w_dq.args[1]
        current = _constant(program, existing)
        if current is not None and current is scales:
            assert isinstance(existing, torch.fx.Node)
            return existing
        return self._new_constant(f"{name}_weight_scales", scales.contiguous())

    def _bias_node(
        self, program: ExportedProgram, bias: object, values: torch.Tensor | None, name: str
    ) -> torch.fx.Node | None:
        """The float32 bias constant itself, or a new one holding `values`."""
        if values is None:
            return None
        if isinstance(bias, torch.fx.Node) and _constant(program, bias) is values:
            return bias
        return self._new_constant(f"{name}_bias", values.contiguous())
