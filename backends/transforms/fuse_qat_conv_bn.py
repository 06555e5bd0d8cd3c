"""FuseQATConvBN: folds the QAT conv-batch-norm simulation chain into the conv's int32 bias.

`prepare_qat_pt2e` trains conv -> batch norm as a simulation of the folded conv. When the
quantizer also quantizes the conv's output (see `qat_conv_output_quantizer.py`), `convert_pt2e`
cannot fold it and this chain survives (Edge dialect; ATen-dialect equivalents are matched too):

    convolution(dq_x, dq_W, BIAS) -> quantize_per_tensor -> dequantize_per_tensor
      -> div(view_copy(div(bn_weight, sqrt(add(running_var, EPS)))))
      -> [add(view_copy(orig_bias))] -> _native_batch_norm_legit_no_training -> getitem(0)

BIAS is absent, a zero `full_like`, or a dequantized all-zero int32 tensor; `dq_W` already holds
the batch-norm-scaled weight. With s = bn_weight / sqrt(running_var + eps) the chain computes
y / s + orig_bias, normalised: y + C with

    C = (orig_bias - running_mean) * bn_weight / sqrt(running_var + eps) + bn_bias.

One `call()`, two steps:
1. Bias prep: every quantized conv (dequantized input and weight) outside a chain the pass had to
   skip gets an int32 bias slot, `dequantize(int32, input_scale x weight_scale)`: zeros where it had
   none, its float bias rounded onto that grid otherwise (per tensor, or per output channel when the
   weight is). This also restores the int32 policy on convs whose batch norm torchao folded itself
   into a float bias.
2. Fold: C is absorbed into that int32 bias (round, add zero point, clamp to the int32 range); the
   div, add, batch norm and their now-dead scale computation are erased, constants they alone used
   are dropped, and the conv's dequantized output feeds the batch norm's users.

The quantize/dequantize pair after the conv, and why it is re-derived rather than kept or dropped:
the QAT model trained with its clipping, to [lo, hi] = [(qmin - zp) S, (qmax - zp) S] on the
pre-bias output y. After folding the conv produces y + C, so the same clipping is [lo + C, hi + C]
per channel. Keeping the pair's old per-tensor parameters clips at the wrong place and dropping it
loses the clip; either moves outputs by many steps where the training saturated. The pass turns the
pair into a per-channel (axis 1) quantize/dequantize covering exactly [lo + C_c, hi + C_c] with the
same step S and zero point zp - round(C_c / S): the original clipping, shifted, on the original
grid; every output stays within one step S of the unfolded program (rounding of C onto the grid).
An affine int8 range must contain 0 (ExecuTorch's kernels reject an out-of-range zero point), so a
channel whose shifted range lies entirely on one side of 0 gets the smallest range that reaches 0,
i.e. a coarser step for that channel only and no clip on its side nearest 0;
`FuseQATConvBN.widened_channels` lists such channels (none in the tested flows). The new scales
are float64 and the zero points int64: ExecuTorch's quantize_per_channel kernel requires double.
Measured on the real flow (`test/fuse_qat_conv_bn_test.py`: conv2d and conv1d, with and without
conv bias, per-tensor and per-channel weights, inputs 3x wider than in training so the trained
clipping is exercised), against the program before the pass, in steps S of the conv's output pair:
re-derived pair: max 0.94-0.98 steps per block, once 1.0003 (a float tie at a rounding boundary),
>= 99.97% of outputs within one step. For comparison, keeping the old per-tensor pair and dropping
it both gave max 3-10 steps and only ~93% of outputs within one step (per-tensor weights).

Chains not fully recognised are left untouched, with the reason in the report: batch norm in
training mode, a node in the middle with another user, a scale computation that is not the one the
batch norm applies, non-constant statistics, transposed or non-quantized convolutions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torchao.quantization.pt2e  # noqa: F401  (registers the quantized_decomposed ops)
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.dialects.edge._ops import EdgeOpOverload
from torch.export import ExportedProgram
from torch.fx import Node

from backends.transforms.batch_norm_match import (
    FoldableBatchNorm,
    aten_op,
    is_batch_norm,
    match_foldable_batch_norm,
)
from backends.transforms.pass_report import PassReport
from backends.transforms.program_constants import ProgramConstants

aten = torch.ops.aten
qd = torch.ops.quantized_decomposed

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

_CONV_OPS = (aten.convolution.default, aten.conv1d.default, aten.conv2d.default)
_VIEW_OPS = (aten.view_copy.default, aten.view.default, aten.reshape.default)
_ZERO_FILL_OPS = (aten.full_like.default, aten.zeros_like.default)


@dataclasses.dataclass
class QuantizedConvOperands:
    """The dequantized input and weight of a conv, and the bias scale they imply."""

    input_scale: float
    # Per-tensor weight: a float. Per-channel (axis 0) weight: one scale per output channel.
    weight_scale: float | torch.Tensor

    def bias_scale(self) -> torch.Tensor:
        """input scale x weight scale(s) in float32, as the quantizer's derived bias spec does."""
        weight = torch.as_tensor(self.weight_scale, dtype=torch.float32)
        return torch.tensor(self.input_scale, dtype=torch.float32) * weight


@dataclasses.dataclass
class QATChain:
    """One recognised conv -> q -> dq -> div -> [add] -> batch norm chain."""

    conv: Node
    quantize: Node
    dequantize: Node
    div: Node
    add: Node | None
    orig_bias: Node | None  # constant placeholder of the conv's original float bias
    batch_norm: FoldableBatchNorm


class FuseQATConvBN:
    """Folds surviving QAT conv-BN chains into int32 conv biases; see the module docstring."""

    name = "FuseQATConvBN"

    def __init__(self) -> None:
        # conv name -> output channels whose clip range lies on one side of 0 after the last
        # call, so their output step had to grow (see the module docstring).
        self.widened_channels: dict[str, list[int]] = {}

    def __call__(self, exported_program: ExportedProgram) -> PassReport:
        return self.call(exported_program)

    def call(self, exported_program: ExportedProgram) -> PassReport:
        """Mutates `exported_program` in place (graph, signature, state dict, constants)."""
        report = PassReport(pass_name=self.name)
        self.widened_channels = {}
        constants = ProgramConstants(exported_program)
        graph = exported_program.graph_module.graph

        chains: list[QATChain] = []
        untouchable: set[Node] = set()
        for node in list(graph.nodes):
            if not _is_conv(node) or not _looks_like_chain(node):
                continue
            matched = _match_chain(node, constants)
            if isinstance(matched, str):
                report.skip(node.name, matched)
                untouchable.add(node)
            else:
                chains.append(matched)

        orphan_candidates: list[Node] = []
        bias_slots: dict[Node, _BiasSlot] = {}
        for node in list(graph.nodes):
            if not _is_conv(node) or node in untouchable:
                continue
            slot = _prepare_bias(node, constants, report, orphan_candidates)
            if isinstance(slot, _BiasSlot):
                bias_slots[node] = slot
            elif slot is not None:
                report.skip(node.name, slot)

        for chain in chains:
            slot = bias_slots.get(chain.conv)
            if slot is None:
                continue  # its bias could not be prepared: reported by the bias prep
            widened = _fold(chain, slot, constants, report, orphan_candidates)
            if widened:
                self.widened_channels[chain.conv.name] = widened
            report.folded += 1
            report.changed = True

        _erase_orphans(orphan_candidates, constants, report)
        constants.commit()
        exported_program.graph_module.recompile()
        return report


# ---------------------------------------------------------------------------------------------
# Matching


def _is_conv(node: Node) -> bool:
    return node.op == "call_function" and aten_op(node.target) in _CONV_OPS


def _is_op(node: object, *ops: object) -> bool:
    return isinstance(node, Node) and node.op == "call_function" and aten_op(node.target) in ops


def _looks_like_chain(conv: Node) -> bool:
    """conv -> quantize -> dequantize -> div, whatever else uses those nodes."""
    for q in conv.users:
        if not _is_op(q, qd.quantize_per_tensor.default):
            continue
        for dq in q.users:
            if _is_op(dq, qd.dequantize_per_tensor.default) and any(
                _is_op(u, aten.div.Tensor) for u in dq.users
            ):
                return True
    return False


def _sole_user(node: Node, what: str) -> Node | str:
    users = list(node.users)
    if len(users) != 1:
        names = ", ".join(u.name for u in users)
        return f"{what} {node.name!r} has {len(users)} users ({names}); the chain must be private"
    return users[0]


def _view_source(node: object, channels: int) -> Node | None:
    """The tensor a per-channel broadcast view [1, C or -1, 1, ...] was taken of, else None."""
    if not _is_op(node, *_VIEW_OPS):
        return None
    assert isinstance(node, Node)
    shape = node.args[1]
    if not isinstance(shape, list | tuple) or len(shape) < 2:
        return None
    if shape[0] != 1 or shape[1] not in (-1, channels) or any(d != 1 for d in shape[2:]):
        return None
    source = node.args[0]
    return source if isinstance(source, Node) else None


def _scalar(node: object, constants: ProgramConstants) -> float | None:
    if isinstance(node, float | int):
        return float(node)
    if isinstance(node, Node) and constants.is_constant(node):
        value = constants.value(node)
        if value.numel() == 1:
            return float(value.reshape(()).item())
    return None


def _match_chain(conv: Node, constants: ProgramConstants) -> QATChain | str:
    if _is_op(conv, aten.convolution.default) and conv.args[6]:
        return "transposed convolution is not supported"
    operands = _quantized_operands(conv, constants)
    if isinstance(operands, str):
        return f"{operands}: no int32 bias to fold the batch norm into"
    node: Node = conv
    for what, ops in (
        ("convolution", (qd.quantize_per_tensor.default,)),
        ("quantize", (qd.dequantize_per_tensor.default,)),
        ("dequantize", (aten.div.Tensor,)),
    ):
        user = _sole_user(node, what)
        if isinstance(user, str):
            return user
        if not _is_op(user, *ops):
            return f"{what} {node.name!r} feeds {user.name!r} ({user.target}), not the QAT chain"
        node = user
    div = node
    q = next(iter(conv.users))
    dq = next(iter(q.users))
    if q.args[1:] != dq.args[1:]:
        return f"quantize {q.name!r} and dequantize {dq.name!r} disagree on their parameters"
    if div.args[0] is not dq:
        return f"div {div.name!r} divides by the conv output instead of dividing it"

    after_div = _sole_user(div, "div")
    if isinstance(after_div, str):
        return after_div
    add: Node | None = None
    bn_node = after_div
    if _is_op(after_div, aten.add.Tensor):
        add = after_div
        if add.kwargs.get("alpha", 1) != 1 or add.args[0] is not div:
            return f"add {add.name!r} is not div + view(orig_bias)"
        next_user = _sole_user(add, "add")
        if isinstance(next_user, str):
            return next_user
        bn_node = next_user
    if not is_batch_norm(bn_node):
        return f"chain ends in {bn_node.name!r} ({bn_node.target}), not a batch norm"
    bn = match_foldable_batch_norm(bn_node, constants)
    if isinstance(bn, str):
        return f"{bn_node.name}: {bn}"
    if bn.weight is None:
        return "batch norm without weight (affine=False) cannot match the QAT scale"
    channels = int(constants.value(bn.running_mean).numel())

    orig_bias: Node | None = None
    if add is not None:
        orig_bias = _view_source(add.args[1], channels)
        if orig_bias is None or not constants.is_constant(orig_bias):
            return f"add {add.name!r} does not add a constant per-channel bias"

    # The divisor must be the very scale the batch norm applies, or y / s * s' != y.
    scale = _view_source(div.args[1], channels)
    if not _is_op(scale, aten.div.Tensor):
        return f"div {div.name!r} does not divide by a per-channel view of bn_weight / sqrt(...)"
    assert isinstance(scale, Node)
    sqrt = scale.args[1]
    if scale.args[0] is not bn.weight or not _is_op(sqrt, aten.sqrt.default):
        return f"scale {scale.name!r} is not bn_weight / sqrt(running_var + eps)"
    assert isinstance(sqrt, Node)
    var_plus_eps = sqrt.args[0]
    if not _is_op(var_plus_eps, aten.add.Tensor, aten.add.Scalar):
        return f"scale {scale.name!r} is not bn_weight / sqrt(running_var + eps)"
    assert isinstance(var_plus_eps, Node)
    if var_plus_eps.args[0] is not bn.running_var:
        return f"scale {scale.name!r} uses another running_var than the batch norm"
    eps = _scalar(var_plus_eps.args[1], constants)
    if eps is None or abs(eps - bn.eps) > 1e-6 * max(abs(bn.eps), 1e-12):
        return f"scale eps {eps} differs from the batch norm's eps {bn.eps}"
    return QATChain(conv, q, dq, div, add, orig_bias, bn)


# ---------------------------------------------------------------------------------------------
# Step 1: bias prep


@dataclasses.dataclass
class _BiasSlot:
    """A conv's int32 bias: `dequantize(values, scale, zero_point)` with constant operands."""

    dequantize: Node
    values: Node  # int32 constant placeholder
    scale: torch.Tensor  # float64, one per output channel
    zero_point: torch.Tensor  # int64, one per output channel


def _conv_bias_arg(conv: Node) -> Any:
    return conv.args[2] if len(conv.args) > 2 else conv.kwargs.get("bias")


def _quantized_operands(conv: Node, constants: ProgramConstants) -> QuantizedConvOperands | str:
    x, w = conv.args[0], conv.args[1]
    if not _is_op(x, qd.dequantize_per_tensor.default) or not isinstance(x.args[1], float):  # type: ignore[union-attr]
        return "conv input is not dequantize_per_tensor with a constant scale"
    assert isinstance(x, Node)
    input_scale = float(x.args[1])
    if _is_op(w, qd.dequantize_per_tensor.default):
        assert isinstance(w, Node)
        if not isinstance(w.args[1], float):
            return "conv weight scale is not a constant"
        return QuantizedConvOperands(input_scale, float(w.args[1]))
    if _is_op(w, qd.dequantize_per_channel.default):
        assert isinstance(w, Node)
        scales, axis = w.args[1], w.args[3]
        if axis != 0 or not isinstance(scales, Node) or not constants.is_constant(scales):
            return "conv weight is not per-output-channel (axis 0) with constant scales"
        return QuantizedConvOperands(input_scale, constants.value(scales).to(torch.float32))
    return "conv weight is not dequantized from int8"


def _is_dequantized_int32(node: object, constants: ProgramConstants) -> bool:
    if not _is_op(node, qd.dequantize_per_tensor.default, qd.dequantize_per_channel.default):
        return False
    assert isinstance(node, Node)
    source = node.args[0]
    return (
        isinstance(source, Node)
        and constants.is_constant(source)
        and node.args[-1] == torch.int32
        and constants.value(source).dtype == torch.int32
    )


def _existing_slot(dq: Node, constants: ProgramConstants, channels: int) -> _BiasSlot | str:
    values = dq.args[0]
    assert isinstance(values, Node)
    if _is_op(dq, qd.dequantize_per_tensor.default):
        scale, zero_point = dq.args[1], dq.args[2]
        if not isinstance(scale, float) or not isinstance(zero_point, int):
            return f"int32 bias {dq.name!r} has non-constant quantization parameters"
        return _BiasSlot(
            dq,
            values,
            torch.full((channels,), scale, dtype=torch.float64),
            torch.full((channels,), zero_point, dtype=torch.int64),
        )
    scales, zero_points, axis = dq.args[1], dq.args[2], dq.args[3]
    if axis != 0 or not constants.is_constant(scales) or not constants.is_constant(zero_points):
        return f"int32 bias {dq.name!r} is not per-channel (axis 0) with constant parameters"
    assert isinstance(scales, Node) and isinstance(zero_points, Node)
    return _BiasSlot(
        dq,
        values,
        constants.value(scales).to(torch.float64).reshape(-1).expand(channels).clone(),
        constants.value(zero_points).to(torch.int64).reshape(-1).expand(channels).clone(),
    )


def _float_bias_values(
    bias: object, constants: ProgramConstants, channels: int
) -> torch.Tensor | str:
    if bias is None:
        return torch.zeros(channels, dtype=torch.float64)
    if _is_op(bias, *_ZERO_FILL_OPS):
        assert isinstance(bias, Node)
        fill = bias.args[1] if aten_op(bias.target) == aten.full_like.default else 0
        if fill == 0:
            return torch.zeros(channels, dtype=torch.float64)
    if isinstance(bias, Node) and constants.is_constant(bias):
        value = constants.value(bias)
        if value.is_floating_point() and value.numel() == channels:
            return value.detach().to(torch.float64).reshape(channels)
    name = bias.name if isinstance(bias, Node) else repr(bias)
    return f"conv bias {name} is neither absent, zero, a float constant nor an int32 tensor"


def _dialect_op(conv: Node, name: str) -> Callable[..., Any]:
    """`quantized_decomposed.<name>.default` in the same dialect as `conv`."""
    if isinstance(conv.target, EdgeOpOverload):
        return getattr(exir_ops.edge.quantized_decomposed, name).default
    return getattr(qd, name).default


def _fake_like(node: Node, shape: tuple[int, ...], dtype: torch.dtype) -> Any:
    """A fake tensor for a new node's meta['val'], in the fake mode of `node`'s value."""
    mode = getattr(node.meta.get("val"), "fake_mode", None)
    if mode is None:
        return torch.empty(shape, dtype=dtype)
    with mode:
        return torch.empty(shape, dtype=dtype)


def _prepare_bias(
    conv: Node,
    constants: ProgramConstants,
    report: PassReport,
    orphan_candidates: list[Node],
) -> _BiasSlot | str | None:
    """The conv's int32 bias slot (created if needed); None for convs that are not quantized."""
    if _is_op(conv, aten.convolution.default) and conv.args[6]:
        return None  # transposed convs are out of scope (reported when part of a chain)
    operands = _quantized_operands(conv, constants)
    if isinstance(operands, str):
        return None  # a float conv: nothing to give an int32 bias to
    weight = conv.args[1]
    assert isinstance(weight, Node)
    channels = int(weight.meta["val"].shape[0])
    bias = _conv_bias_arg(conv)
    if _is_dequantized_int32(bias, constants):
        return _existing_slot(bias, constants, channels)

    float_values = _float_bias_values(bias, constants, channels)
    if isinstance(float_values, str):
        return float_values
    scale = operands.bias_scale()
    per_channel = scale.numel() > 1
    scale64 = scale.to(torch.float64).expand(channels)
    quantized = torch.clamp(torch.round(float_values / scale64), INT32_MIN, INT32_MAX)
    values = constants.add_lifted_constant(f"{conv.name}_int32_bias", quantized.to(torch.int32))
    report.added_constants.append(str(values.target))
    graph = conv.graph
    with graph.inserting_before(conv):
        if per_channel:
            scales = constants.add_lifted_constant(f"{conv.name}_bias_scale", scale.clone())
            zero_points = constants.add_lifted_constant(
                f"{conv.name}_bias_zero_point", torch.zeros(channels, dtype=torch.int64)
            )
            report.added_constants += [str(scales.target), str(zero_points.target)]
            args: tuple[Any, ...] = (
                values,
                scales,
                zero_points,
                0,
                INT32_MIN,
                INT32_MAX,
                torch.int32,
            )
            dequantize = graph.call_function(_dialect_op(conv, "dequantize_per_channel"), args)
        else:
            args = (values, float(scale.item()), 0, INT32_MIN, INT32_MAX, torch.int32)
            dequantize = graph.call_function(_dialect_op(conv, "dequantize_per_tensor"), args)
    dequantize.meta["val"] = _fake_like(conv, (channels,), torch.float32)
    new_args = list(conv.args)
    if len(new_args) > 2:
        new_args[2] = dequantize
    else:
        new_args.append(dequantize)
    conv.args = tuple(new_args)
    conv.kwargs = {k: v for k, v in conv.kwargs.items() if k != "bias"}
    if isinstance(bias, Node):
        orphan_candidates.append(bias)
    report.changed = True
    return _BiasSlot(dequantize, values, scale64.clone(), torch.zeros(channels, dtype=torch.int64))


# ---------------------------------------------------------------------------------------------
# Step 2: fold


def _fold(
    chain: QATChain,
    slot: _BiasSlot,
    constants: ProgramConstants,
    report: PassReport,
    orphan_candidates: list[Node],
) -> list[int]:
    """Folds one chain; returns the output channels whose step had to be widened."""
    bn = chain.batch_norm
    mean = constants.value(bn.running_mean).to(torch.float64)
    var = constants.value(bn.running_var).to(torch.float64)
    assert bn.weight is not None
    gamma = constants.value(bn.weight).to(torch.float64)
    beta = (
        constants.value(bn.bias).to(torch.float64)
        if bn.bias is not None
        else torch.zeros_like(mean)
    )
    orig_bias = (
        constants.value(chain.orig_bias).to(torch.float64).reshape(-1)
        if chain.orig_bias is not None
        else torch.zeros_like(mean)
    )
    folded = folded_bias(orig_bias, mean, var, gamma, beta, bn.eps)

    # Absorb C into the int32 bias: round onto its grid, add the zero point, clamp.
    old_q = constants.value(slot.values).to(torch.int64).reshape(-1)
    old_q = old_q.expand(folded.numel()).clone() if old_q.numel() == 1 else old_q
    new_q = torch.clamp(
        torch.round((old_q - slot.zero_point) + folded / slot.scale) + slot.zero_point,
        INT32_MIN,
        INT32_MAX,
    ).to(torch.int64)
    shift = (new_q - old_q).to(torch.float64) * slot.scale  # what the conv now adds, exactly
    _store_bias(chain.conv, slot, new_q.to(torch.int32), constants, report, orphan_candidates)

    widened = _rederive_output_quantization(chain, shift, constants, report)

    # The dequantized conv output now is what the batch norm produced.
    for out in bn.outputs:
        out.replace_all_uses_with(chain.dequantize)
    graph = chain.conv.graph
    dead = [*bn.nodes_to_erase()]
    if chain.add is not None:
        dead.append(chain.add)
    dead.append(chain.div)
    for node in dead:
        orphan_candidates += [a for a in node.all_input_nodes if a not in dead]
        graph.erase_node(node)
    return widened


def folded_bias(
    orig_bias: torch.Tensor,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    bn_weight: torch.Tensor,
    bn_bias: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    """C = (orig_bias - running_mean) * bn_weight / sqrt(running_var + eps) + bn_bias, float64."""
    return (orig_bias - running_mean) * bn_weight / torch.sqrt(running_var + eps) + bn_bias


def _store_bias(
    conv: Node,
    slot: _BiasSlot,
    values: torch.Tensor,
    constants: ProgramConstants,
    report: PassReport,
    orphan_candidates: list[Node],
) -> None:
    """Writes the folded int32 values into the bias constant, or a fresh one if it is shared."""
    placeholder = slot.values
    spec = constants.spec_of(placeholder)
    assert spec is not None and spec.target is not None
    shared_target = sum(
        1 for s in constants.ep.graph_signature.input_specs if s.target == spec.target
    )
    old = constants.value(placeholder)
    exclusive = len(placeholder.users) == 1 and len(slot.dequantize.users) == 1
    # <= 1: a slot made by this run's bias prep is not in the signature until commit().
    if exclusive and shared_target <= 1 and old.numel() == values.numel():
        new = values.reshape(old.shape)
        table = constants.ep.constants if spec.target in constants.ep.constants else None
        if table is None:
            table = constants.ep.state_dict
        if isinstance(old, torch.nn.Parameter):
            new = torch.nn.Parameter(new, requires_grad=False)
        table[spec.target] = new
        return
    fresh = constants.add_lifted_constant(f"{conv.name}_int32_bias", values)
    report.added_constants.append(str(fresh.target))
    slot.dequantize.replace_input_with(placeholder, fresh)
    slot.values = fresh
    orphan_candidates.append(placeholder)


def _rederive_output_quantization(
    chain: QATChain, shift: torch.Tensor, constants: ProgramConstants, report: PassReport
) -> list[int]:
    """Turns the conv's output q/dq into a per-channel pair clipping at [lo + C_c, hi + C_c]."""
    q, dq = chain.quantize, chain.dequantize
    scale, zero_point, qmin, qmax, dtype = q.args[1:6]
    assert isinstance(scale, float) and isinstance(zero_point, int)
    assert isinstance(qmin, int) and isinstance(qmax, int)
    scales, zero_points, widened = shifted_output_qparams(scale, zero_point, qmin, qmax, shift)
    conv = chain.conv
    scales_node = constants.add_lifted_constant(f"{conv.name}_output_scale", scales)
    zero_points_node = constants.add_lifted_constant(f"{conv.name}_output_zero_point", zero_points)
    report.added_constants += [str(scales_node.target), str(zero_points_node.target)]
    q.target = _dialect_op(conv, "quantize_per_channel")
    q.args = (conv, scales_node, zero_points_node, 1, qmin, qmax, dtype)
    dq.target = _dialect_op(conv, "dequantize_per_channel")
    dq.args = (q, scales_node, zero_points_node, 1, qmin, qmax, dtype)
    return widened


def shifted_output_qparams(
    scale: float, zero_point: int, qmin: int, qmax: int, shift: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Per-channel (scales float64, zero points int64, widened channels) for the range
    [(qmin - zp) S + shift_c, (qmax - zp) S + shift_c], keeping step S wherever 0 is inside."""
    low = (qmin - zero_point) * scale + shift
    high = (qmax - zero_point) * scale + shift
    scales = torch.full_like(shift, scale, dtype=torch.float64)
    zero_points = torch.clamp(zero_point - torch.round(shift / scale), qmin, qmax).to(torch.int64)
    above = low > 0
    below = high < 0
    scales = torch.where(above, high / (qmax - qmin), scales)
    zero_points = torch.where(above, torch.full_like(zero_points, qmin), zero_points)
    scales = torch.where(below, -low / (qmax - qmin), scales)
    zero_points = torch.where(below, torch.full_like(zero_points, qmax), zero_points)
    widened = [int(c) for c in torch.nonzero(above | below).reshape(-1)]
    return scales, zero_points, widened


def _erase_orphans(candidates: list[Node], constants: ProgramConstants, report: PassReport) -> None:
    """Erases computations and constant inputs the pass left without users, transitively."""
    pending = list(candidates)
    seen: set[Node] = set()
    while pending:
        node = pending.pop()
        if node in seen or getattr(node, "_erased", False) or node.users:
            continue
        seen.add(node)
        if node.op == "call_function" and not node.is_impure():
            inputs = list(node.all_input_nodes)
            node.graph.erase_node(node)
            pending += inputs
        elif constants.is_constant(node):
            dropped = constants.remove(node)
            if dropped is not None:
                report.removed_constants.append(dropped)
