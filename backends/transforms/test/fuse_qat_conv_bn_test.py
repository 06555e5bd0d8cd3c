"""FuseQATConvBN on the real pt2e QAT flow: prepare_qat_pt2e, training steps, convert_pt2e, to_edge.

One model holds every case so the (slow) convert runs once per weight granularity:
conv2d and conv1d, with and without conv bias, each conv -> batch norm -> ReLU with the conv output
quantized (the chain survives convert), plus one no-bias conv2d block whose output stays float, so
torchao folds its batch norm itself into a float bias. `QAT_WEIGHT_GRANULARITY` (per_tensor,
per_channel or both, comma separated) picks the flows; each Bazel target runs one.

Set `QAT_RECORD_FIXTURES=1` to rewrite the recorded chain node sequences
(`fuse_qat_conv_bn_sequences.json`) from the current flow.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import pathlib
from typing import Any

import executorch.kernels.quantized  # noqa: F401  (quantized_decomposed out variants)
import hypothesis
import hypothesis.strategies as st
import pytest
import torch
from executorch.exir import EdgeCompileConfig, EdgeProgramManager, to_edge
from executorch.extension.pybindings import portable_lib
from torch import nn
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, InputSpec
from torchao.quantization.pt2e import move_exported_model_to_eval
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_qat_pt2e

from backends.transforms.batch_norm_match import aten_op
from backends.transforms.fuse_qat_conv_bn import (
    INT32_MAX,
    INT32_MIN,
    FuseQATConvBN,
    folded_bias,
    shifted_output_qparams,
)
from backends.transforms.program_checks import check_program_consistency
from backends.transforms.qat_conv_output_quantizer import QATConvOutputQuantizer

SEQUENCES = pathlib.Path(__file__).with_name("fuse_qat_conv_bn_sequences.json")
GRANULARITIES = os.environ.get("QAT_WEIGHT_GRANULARITY", "per_tensor,per_channel").split(",")

# Blocks whose conv output is quantized, so their QAT chain survives convert.
CHAIN_BLOCKS = {"c2_bias": (2, True), "c2_nobias": (2, False), "c1_bias": (1, True)}
CHAIN_BLOCKS["c1_nobias"] = (1, False)
TORCHAO_FOLDED = "c2_folded"  # no-bias conv2d with a float output: torchao folds its BN
BATCH = 8
SHAPE_2D = (BATCH, 3, 10, 10)
SHAPE_1D = (BATCH, 3, 64)


class ConvBnRelu(nn.Module):
    def __init__(self, dims: int, bias: bool) -> None:
        super().__init__()
        conv = nn.Conv2d if dims == 2 else nn.Conv1d
        norm = nn.BatchNorm2d if dims == 2 else nn.BatchNorm1d
        self.conv = conv(3, 8, 3, bias=bias)
        self.bn = norm(8)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.bn(self.conv(x)))


class AllCases(nn.Module):
    NAMES = (*CHAIN_BLOCKS, TORCHAO_FOLDED)

    def __init__(self) -> None:
        super().__init__()
        for name, (dims, bias) in CHAIN_BLOCKS.items():
            setattr(self, name, ConvBnRelu(dims, bias))
        setattr(self, TORCHAO_FOLDED, ConvBnRelu(2, False))

    def forward(self, x2: torch.Tensor, x1: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(getattr(self, n)(x1 if n.startswith("c1") else x2) for n in self.NAMES)


def _inputs(generator: torch.Generator, spread: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    x2 = torch.randn(SHAPE_2D, generator=generator) * spread + 0.3
    x1 = torch.randn(SHAPE_1D, generator=generator) * spread - 0.2
    return x2, x1


def _converted_module(per_channel: bool, train: bool = True) -> torch.fx.GraphModule:
    """The real flow: export, prepare_qat_pt2e, a few SGD steps, eval, convert_pt2e."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    example = _inputs(generator)
    model = torch.export.export(AllCases(), example).module()
    quantizer = QATConvOutputQuantizer(
        per_channel_weights=per_channel, float_output_modules=[f"{TORCHAO_FOLDED}.conv"]
    )
    prepared = prepare_qat_pt2e(model, quantizer)
    optimizer = torch.optim.SGD(prepared.parameters(), lr=0.05)
    for _ in range(4 if train else 0):
        outputs = prepared(*_inputs(generator))
        loss = sum((out - 0.5).square().mean() for out in outputs)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    move_exported_model_to_eval(prepared)
    return convert_pt2e(prepared)


def _edge(module: torch.fx.GraphModule, training: bool = False) -> EdgeProgramManager:
    example = _inputs(torch.Generator().manual_seed(1))
    # Training-mode batch norm is not core ATen; allow it so the pass gets to see it.
    exceptions = [torch.ops.aten._native_batch_norm_legit_functional.default] if training else []
    config = EdgeCompileConfig(_core_aten_ops_exception_list=exceptions)
    return to_edge(torch.export.export(module, example), compile_config=config)


@dataclasses.dataclass
class Flow:
    per_channel: bool
    converted: torch.fx.GraphModule
    before: ExportedProgram  # the converted program, untouched
    edge: EdgeProgramManager  # holds `after`, for to_executorch
    after: ExportedProgram
    report: Any
    widened: dict[str, list[int]]


@pytest.fixture(scope="module", params=GRANULARITIES)
def flow(request: pytest.FixtureRequest) -> Flow:
    per_channel = request.param == "per_channel"
    converted = _converted_module(per_channel)
    edge = _edge(converted)
    before = copy.deepcopy(edge.exported_program())
    after = edge.exported_program()
    fuse = FuseQATConvBN()
    report = fuse(after)
    return Flow(per_channel, converted, before, edge, after, report, dict(fuse.widened_channels))


# ---------------------------------------------------------------------------------------------
# Helpers that read a program


def _ops(ep: ExportedProgram) -> list[str]:
    return [str(aten_op(n.target)) for n in ep.graph.nodes if n.op == "call_function"]


def _block_of(node: torch.fx.Node) -> str:
    for path, _ in (node.meta.get("nn_module_stack") or {}).values():
        head = path.split(".")[0]
        if head in AllCases.NAMES:
            return head
    raise AssertionError(f"{node.name} has no block in its nn_module_stack")


def _convs(ep: ExportedProgram) -> dict[str, torch.fx.Node]:
    return {
        _block_of(n): n
        for n in ep.graph.nodes
        if n.op == "call_function" and aten_op(n.target) == torch.ops.aten.convolution.default
    }


def _constant(ep: ExportedProgram, node: torch.fx.Node) -> torch.Tensor:
    spec = next(s for s in ep.graph_signature.input_specs if s.arg.name == node.name)
    assert spec.target is not None
    table = ep.constants if spec.target in ep.constants else ep.state_dict
    return table[spec.target]


def _chain_sequence(conv: torch.fx.Node) -> list[str]:
    """The op names from the conv down the chain to the batch norm's getitem."""
    sequence, node = [], conv
    while True:
        sequence.append(str(aten_op(node.target)))
        if len(node.users) != 1 or str(node.target) == "<built-in function getitem>":
            return sequence
        node = next(iter(node.users))


def _bias_source(conv: torch.fx.Node) -> str:
    bias = conv.args[2]
    if bias is None:
        return "absent"
    assert isinstance(bias, torch.fx.Node)
    return str(aten_op(bias.target)) if bias.op == "call_function" else "placeholder"


def _output_step(ep: ExportedProgram, conv: torch.fx.Node) -> float:
    quantize = next(iter(conv.users))
    assert "quantize_per_tensor" in str(quantize.target)
    return float(quantize.args[1])  # type: ignore[arg-type]


def _run(ep: ExportedProgram, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    with torch.no_grad():
        return tuple(ep.module()(*inputs))


# ---------------------------------------------------------------------------------------------
# Tests


def test_flow_produces_the_recorded_chains(flow: Flow) -> None:
    """Pins the chain shape the pass is written against (torch 2.13 / torchao 0.18 / ET 1.5.1)."""
    convs = _convs(flow.before)
    key = "per_channel" if flow.per_channel else "per_tensor"
    observed = {
        name: {"bias": _bias_source(conv), "chain": _chain_sequence(conv)}
        for name, conv in sorted(convs.items())
    }
    if os.environ.get("QAT_RECORD_FIXTURES"):
        recorded = json.loads(SEQUENCES.read_text()) if SEQUENCES.exists() else {}
        recorded[key] = observed
        SEQUENCES.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
    assert observed == json.loads(SEQUENCES.read_text())[key]


def test_every_chain_is_folded(flow: Flow) -> None:
    assert flow.report.skipped == [], flow.report.to_dict()
    assert flow.report.folded == len(CHAIN_BLOCKS)
    assert flow.report.changed
    chain_ops = ("aten.div.Tensor", "aten.sqrt.default", "aten.add.Tensor")
    left = [
        n.name
        for n in flow.after.graph.nodes
        if n.op == "call_function"
        and ("batch_norm" in str(n.target) or str(aten_op(n.target)) in chain_ops)
        # convert_pt2e keeps BatchNorm1d's `num_batches_tracked += 1` (a buffer mutation, not
        # part of any chain): it only removes BatchNorm2d's.
        and "num_batches_tracked" not in n.args[0].name
    ]
    assert left == [], f"left after the pass: {left}"
    check_program_consistency(flow.after)
    for name, conv in _convs(flow.after).items():
        if name in CHAIN_BLOCKS:  # the conv output pair, re-derived per channel
            (quantize,) = conv.users
            assert "quantize_per_channel" in str(quantize.target), name
    flow.after._validate()
    # No constant of the erased chains survives: BN statistics and the original float biases.
    names = set(flow.after.state_dict) | set(flow.after.constants)
    for block in CHAIN_BLOCKS:
        assert not [n for n in names if n.startswith(f"{block}.bn.") and "num_batches" not in n]
        assert f"{block}.conv.bias" not in names


def _expected_bias(flow: Flow, block: str, bias_scale: torch.Tensor) -> torch.Tensor:
    state = flow.before.state_dict

    def get(name: str) -> torch.Tensor:
        return state[f"{block}.{name}"].detach().to(torch.float64)

    mean = get("bn.running_mean")
    has_bias = CHAIN_BLOCKS[block][1]
    orig = get("conv.bias") if has_bias else torch.zeros_like(mean)
    c = folded_bias(orig, mean, get("bn.running_var"), get("bn.weight"), get("bn.bias"), 1e-5)
    return torch.clamp(torch.round(c / bias_scale), INT32_MIN, INT32_MAX).to(torch.int32)


def _bias_scale_and_values(ep: ExportedProgram, conv: torch.fx.Node) -> tuple[Any, Any]:
    dq = conv.args[2]
    assert isinstance(dq, torch.fx.Node) and dq.args[-1] == torch.int32, conv.args
    values = _constant(ep, dq.args[0])  # type: ignore[arg-type]
    assert values.dtype == torch.int32
    if "per_channel" in str(dq.target):
        assert dq.args[3] == 0
        scale = _constant(ep, dq.args[1]).to(torch.float64)  # type: ignore[arg-type]
        zero_point = _constant(ep, dq.args[2])  # type: ignore[arg-type]
        assert torch.count_nonzero(zero_point) == 0
    else:
        scale = torch.tensor(dq.args[1], dtype=torch.float64)
        assert dq.args[2] == 0
    return scale, values


def test_int32_bias_is_exactly_the_folded_value(flow: Flow) -> None:
    after = _convs(flow.after)
    before = _convs(flow.before)
    for block in CHAIN_BLOCKS:
        scale, values = _bias_scale_and_values(flow.after, after[block])
        # The bias grid is input scale x weight scale(s), whichever way the bias came to be.
        input_scale = float(before[block].args[0].args[1])  # type: ignore[union-attr, arg-type]
        weight_dq = before[block].args[1]
        assert isinstance(weight_dq, torch.fx.Node)
        if flow.per_channel:
            weight_scale = _constant(flow.before, weight_dq.args[1])  # type: ignore[arg-type]
        else:
            weight_scale = torch.tensor(weight_dq.args[1])
        derived = torch.tensor(input_scale, dtype=torch.float32) * weight_scale.float()
        assert torch.equal(scale.to(torch.float32).expand_as(derived), derived), block
        assert torch.equal(values, _expected_bias(flow, block, scale)), block


def test_outputs_stay_within_one_output_step(flow: Flow) -> None:
    """Against the converted program before the pass, on inputs 3x wider than training (so the
    trained clipping is exercised): >= 99.9% of outputs within one step of the conv's output
    quantization, and the maximum (measured: below one step in every block) bounded."""
    convs = _convs(flow.before)
    generator = torch.Generator().manual_seed(7)
    worst: dict[str, float] = {}
    within: dict[str, float] = {}
    for _ in range(6):
        inputs = _inputs(generator, spread=3.0)
        reference, folded = _run(flow.before, inputs), _run(flow.after, inputs)
        for index, name in enumerate(AllCases.NAMES):
            if name not in CHAIN_BLOCKS:
                # Only its float bias moved onto the int32 grid: half a bias step, ~2.4e-5.
                torch.testing.assert_close(folded[index], reference[index], atol=1e-4, rtol=0)
                continue
            steps = (folded[index] - reference[index]).abs() / _output_step(
                flow.before, convs[name]
            )
            worst[name] = max(worst.get(name, 0.0), float(steps.max()))
            within[name] = min(within.get(name, 1.0), float((steps <= 1.0).float().mean()))
    print("max steps", worst, "fraction within one step", within, "widened", flow.widened)
    # No channel's shifted clip range lies on one side of 0 here, so every block keeps step S
    # (the widened case is covered by test_shifted_pair_matches_clip_then_shift).
    assert flow.widened == {}
    for name in CHAIN_BLOCKS:
        assert within[name] >= 0.999, (name, within)
        # Below one step in theory; 1e-3 for float ties at a rounding boundary (seen: 1.0003).
        assert worst[name] <= 1.0 + 1e-3, (name, worst)


def _as_kind(ep: ExportedProgram, kind: InputKind) -> ExportedProgram:
    """A copy of `ep` whose parameters and buffers are all inputs of `kind` instead."""
    ep = copy.deepcopy(ep)
    specs = ep.graph_signature.input_specs
    for index, spec in enumerate(specs):
        if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER) or spec.target is None:
            continue
        value = ep.state_dict.pop(spec.target).detach()
        if kind == InputKind.CONSTANT_TENSOR:
            ep.constants[spec.target] = value
            persistent = None
        else:
            ep.state_dict[spec.target] = value
            persistent = True
        specs[index] = InputSpec(kind, spec.arg, spec.target, persistent)
    check_program_consistency(ep)
    return ep


@pytest.mark.parametrize("kind", [InputKind.BUFFER, InputKind.CONSTANT_TENSOR])
def test_folds_whatever_kind_the_constants_are(flow: Flow, kind: InputKind) -> None:
    """Biases and statistics as buffers or lifted constants fold to the same int32 biases."""
    ep = _as_kind(flow.before, kind)
    report = FuseQATConvBN()(ep)
    assert report.folded == len(CHAIN_BLOCKS) and report.skipped == [], report.to_dict()
    check_program_consistency(ep)
    reference = _convs(flow.after)
    for name, conv in _convs(ep).items():
        expected = _bias_scale_and_values(flow.after, reference[name])
        scale, values = _bias_scale_and_values(ep, conv)
        assert torch.equal(scale, expected[0]) and torch.equal(values, expected[1]), name


def test_torchao_folded_conv_gets_its_int32_bias(flow: Flow) -> None:
    """torchao folded this no-bias conv's BN into a float bias; bias prep restores int32."""
    before = _convs(flow.before)[TORCHAO_FOLDED]
    assert _bias_source(before) == "placeholder"  # the float bias torchao left
    float_bias = _constant(flow.before, before.args[2]).to(torch.float64)  # type: ignore[arg-type]
    scale, values = _bias_scale_and_values(flow.after, _convs(flow.after)[TORCHAO_FOLDED])
    assert torch.equal(values, torch.round(float_bias / scale).to(torch.int32))


def test_lowers_and_runs_on_the_executorch_runtime(flow: Flow) -> None:
    convs = _convs(flow.before)
    inputs = _inputs(torch.Generator().manual_seed(11), spread=3.0)
    eager = _run(flow.after, inputs)
    program = copy.deepcopy(flow.edge).to_executorch()  # to_executorch rewrites its graphs
    buffer = program.buffer  # the runtime does not keep it alive
    module = portable_lib._load_for_executorch_from_buffer(buffer)
    on_runtime = module.forward(inputs)
    for index, name in enumerate(AllCases.NAMES):
        if name in CHAIN_BLOCKS:
            steps = (on_runtime[index] - eager[index]).abs() / _output_step(
                flow.before, convs[name]
            )
            # Kernels may differ in the last float bit, flipping a rounding by one step.
            assert float((steps <= 1e-3).float().mean()) >= 0.999, name
            assert float(steps.max()) <= 1.0 + 1e-3, name
        else:
            torch.testing.assert_close(on_runtime[index], eager[index], atol=1e-4, rtol=1e-4)


def test_aten_dialect_program_is_folded_too(flow: Flow) -> None:
    """The same chains before to_edge (conv2d/conv1d, reshape, aten.batch_norm)."""
    example = _inputs(torch.Generator().manual_seed(1))
    ep = torch.export.export(flow.converted, example)
    reference_program = copy.deepcopy(ep)
    report = FuseQATConvBN()(ep)
    assert report.folded == len(CHAIN_BLOCKS) and report.skipped == [], report.to_dict()
    check_program_consistency(ep)
    assert not [n for n in ep.graph.nodes if "batch_norm" in str(n.target)]
    inputs = _inputs(torch.Generator().manual_seed(5), spread=3.0)
    reference, folded = _run(reference_program, inputs), _run(ep, inputs)
    convs = _convs(flow.before)
    steps = {name: _output_step(flow.before, convs[name]) for name in CHAIN_BLOCKS}
    for index, name in enumerate(AllCases.NAMES):
        if name in CHAIN_BLOCKS:
            assert float((folded[index] - reference[index]).abs().max()) <= steps[name] * 1.001


# ---------------------------------------------------------------------------------------------
# Chains the pass must not touch, from the same converted model with one change each.


def _skipped_untouched(
    module: torch.fx.GraphModule, reason_part: str, training: bool = False
) -> None:
    edge = _edge(module, training)
    ep = edge.exported_program()
    before_ops = _ops(ep)
    before_code = ep.graph_module.code
    report = FuseQATConvBN()(ep)
    skipped = {s.node: s.reason for s in report.skipped}
    assert len(skipped) == len(CHAIN_BLOCKS), report.to_dict()
    assert all(reason_part in reason for reason in skipped.values()), skipped
    assert report.folded == 0
    # Only the torchao-folded conv's bias changed (bias prep); every chain is as it was.
    after_ops = _ops(ep)
    assert [op for op in after_ops if "batch_norm" in op] == [
        op for op in before_ops if "batch_norm" in op
    ]
    chain_convs = [c for name, c in _convs(ep).items() if name in CHAIN_BLOCKS]
    for conv in chain_convs:
        assert conv.name in skipped
    assert before_code.count("div") == ep.graph_module.code.count("div")
    ep._validate()
    check_program_consistency(ep)


def test_batch_norm_in_training_mode_is_left_alone(flow: Flow) -> None:
    module = copy.deepcopy(flow.converted)
    for node in module.graph.nodes:
        if node.target == torch.ops.aten.batch_norm.default:
            args = list(node.args)
            args[5] = True  # training: batch statistics, nothing constant to fold
            node.args = tuple(args)
    module.recompile()
    module.train()
    _skipped_untouched(module, "training mode", training=True)


def test_chain_with_an_extra_user_in_the_middle_is_left_alone(flow: Flow) -> None:
    module = copy.deepcopy(flow.converted)
    graph = module.graph
    output = graph.output_node()
    results = list(output.args[0])  # type: ignore[arg-type]
    for node in list(graph.nodes):
        # The chain's div (conv output / scale) gets a second reader added to the block output.
        if node.target == torch.ops.aten.div.Tensor and "dequantize" in str(node.args[0].target):
            block = AllCases.NAMES.index(_block_of_chain_div(node))
            with graph.inserting_before(output):
                results[block] = graph.call_function(
                    torch.ops.aten.add.Tensor, (results[block], node)
                )
    output.args = (tuple(results),)
    module.recompile()
    _skipped_untouched(module, "users")


def _block_of_chain_div(div: torch.fx.Node) -> str:
    """The block of a chain div in convert's output, from the batch norm it feeds."""
    node = div
    while node.target != torch.ops.aten.batch_norm.default:
        node = next(iter(node.users))
    weight = node.args[1]
    assert isinstance(weight, torch.fx.Node) and isinstance(weight.target, str)
    return weight.target.split(".")[0]


# ---------------------------------------------------------------------------------------------
# The output re-quantization rule, on its own


@hypothesis.settings(max_examples=200, derandomize=True, deadline=None)
@hypothesis.given(
    scale=st.floats(1e-3, 1.0),
    zero_point=st.integers(-128, 127),
    shift=st.lists(st.floats(-40.0, 40.0), min_size=1, max_size=6),
    values=st.lists(st.floats(-60.0, 60.0), min_size=1, max_size=16),
)
def test_shifted_pair_matches_clip_then_shift(
    scale: float, zero_point: int, shift: list[float], values: list[float]
) -> None:
    """q/dq(y + C) with the re-derived per-channel pair stays within one original step S of
    q/dq(y) + C wherever the shifted range contains 0 (the pass keeps step S there)."""
    qmin, qmax = -128, 127
    shifts = torch.tensor(shift, dtype=torch.float64)
    scales, zero_points, widened = shifted_output_qparams(scale, zero_point, qmin, qmax, shifts)
    y = torch.tensor(values, dtype=torch.float64)[:, None]
    original = (torch.clamp(torch.round(y / scale) + zero_point, qmin, qmax) - zero_point) * scale
    original = original + shifts
    q = torch.clamp(torch.round((y + shifts) / scales) + zero_points, qmin, qmax)
    rederived = (q - zero_points) * scales
    assert torch.all((zero_points >= qmin) & (zero_points <= qmax))
    low = (qmin - zero_point) * scale + shifts
    high = (qmax - zero_point) * scale + shifts
    for channel in range(len(shift)):
        error = (rederived[:, channel] - original[:, channel]).abs().max()
        if channel in widened:
            # The range had to reach 0: the clip on the side nearest 0 is lost.
            lost_clip = min(abs(float(low[channel])), abs(float(high[channel])))
            assert error <= scales[channel] * 0.5 + scale * 0.5 + lost_clip + 1e-9
        else:
            assert scales[channel] == scale
            assert error <= scale * (1 + 1e-9)
