"""`--quantize ptq|qat|8da4w|int8wo`: the float source program becomes a quantized program before
lowering.

ptq calibrates XNNPACK's quantizer on the sample inputs; qat runs the project's QAT flow
(`backends.cpu.quantization.quantize_qat`: QATConvOutputQuantizer, a few training steps on the
sample inputs, convert, FuseQATConvBN). The quantized model is what gets lowered and what the
`.pte` is checked against: its eager run (quantize/dequantize around float ops in PyTorch) is the
reference, and the tolerance is widened to one step of the output's quantization grid (the int8
kernels and the reference may round one output differently). The quantization error itself is
reported as the SQNR of the `.pte`'s outputs against the float model.

8da4w and int8wo quantize the model's `nn.Linear` modules with torchao's `quantize_` (no
calibration) and re-export it: 8da4w is Int8DynamicActivationIntxWeightConfig (int8 activations
quantized per token at run time, int4 symmetric weights per group of `--group-size` input
channels), int8wo is IntxWeightOnlyConfig (int8 weights per output channel, float activations).
Linears whose input width is not a multiple of the group size are left float (torchao cannot
group them). The report says how many linears were quantized, with which scheme, and the float
program's constant bytes beside the .pte's size.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from tools.lower.errors import ExitCode, LowerError
from tools.lower.program_io import SourceProgram

MODES = ("none", "ptq", "qat", "8da4w", "int8wo")
# Modes that quantize nn.Linear modules with torchao (quantize_torchao) instead of PT2E.
TORCHAO_MODES = ("8da4w", "int8wo")
DEFAULT_GROUP_SIZE = 32
_LABELS = {
    "ptq": "int8 (PT2E PTQ, calibrated on the sample inputs)",
    "qat": "int8 (PT2E QAT, trained on the sample inputs, batch norms folded by FuseQATConvBN)",
}


def quantize_source(
    source: SourceProgram, mode: str = "ptq"
) -> tuple[SourceProgram, torch.nn.Module]:
    """(the int8 source program, the float eager model it came from); `mode` is ptq or qat."""
    from backends.cpu.quantization import quantize_ptq, quantize_qat

    try:
        if mode == "qat":
            program = quantize_qat(source.eager, [source.inputs])
            quantized: torch.nn.Module = program.module()
        else:
            quantized = quantize_ptq(source.eager, [source.inputs])
            program = torch.export.export(quantized, source.inputs)
    except Exception as exc:  # the quantizer's errors name the op; keep the message
        raise LowerError(ExitCode.LOWERING_FAILED, f"PT2E quantization failed: {exc}") from None
    int8 = replace(
        source, label=f"{source.label}, {_LABELS[mode]}", program=program, eager=quantized
    )
    return int8, source.eager


@dataclass(frozen=True)
class TorchaoQuantization:
    """What quantize_torchao did, for the report."""

    scheme: str
    linears: int  # quantized
    linears_left_float: int
    float_constant_bytes: int

    def describe(self) -> str:
        left = f", {self.linears_left_float} left float" if self.linears_left_float else ""
        return f"{self.linears} linear(s) {self.scheme}{left}"


def _torchao_config(mode: str, group_size: int) -> tuple[Any, str]:
    from torchao.quantization.granularity import PerAxis, PerGroup
    from torchao.quantization.quant_api import (
        Int8DynamicActivationIntxWeightConfig,
        IntxWeightOnlyConfig,
    )

    if mode == "8da4w":
        int4: torch.dtype = torch.int4  # type: ignore[attr-defined]
        config: Any = Int8DynamicActivationIntxWeightConfig(
            weight_dtype=int4, weight_granularity=PerGroup(group_size)
        )
        scheme = (
            "8da4w (torchao: int8 activations quantized per token at run time, int4 symmetric "
            f"weights per group of {group_size})"
        )
    else:
        config = IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0))
        scheme = "int8wo (torchao: int8 weights per output channel, float activations)"
    return config, scheme


def quantize_torchao(
    source: SourceProgram, mode: str, group_size: int = DEFAULT_GROUP_SIZE
) -> tuple[SourceProgram, torch.nn.Module, TorchaoQuantization]:
    """(the program of the torchao-quantized model, the float eager model, what was quantized);
    `mode` is 8da4w or int8wo. Raises LowerError when the model has no linear to quantize."""
    from torchao.quantization import quantize_

    if mode not in TORCHAO_MODES:
        raise ValueError(f"not a torchao mode: {mode!r}")
    if group_size <= 0:
        raise LowerError(ExitCode.BAD_INPUT, f"--group-size must be positive, not {group_size}")
    model = copy.deepcopy(source.eager)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    grouped = mode == "8da4w"
    chosen = [m for m in linears if not grouped or m.in_features % group_size == 0]
    if not chosen:
        why = (
            "the model has no torch.nn.Linear module (a loaded .pt2 program has none: quantize "
            "the model with torchao before exporting it)"
            if not linears
            else f"no linear's input width is a multiple of --group-size {group_size}"
        )
        raise LowerError(ExitCode.BAD_INPUT, f"--quantize {mode}: {why}")
    config, scheme = _torchao_config(mode, group_size)
    selected = {id(m) for m in chosen}
    try:
        quantize_(model, config, filter_fn=lambda m, _fqn: id(m) in selected)
        model.eval()
        with torch.no_grad():
            program = torch.export.export(model, source.inputs)
    except Exception as exc:  # torchao's and export's errors name the layer; keep the message
        raise LowerError(ExitCode.LOWERING_FAILED, f"torchao quantization failed: {exc}") from None
    from tools.lower import program_facts

    summary = TorchaoQuantization(
        scheme=scheme,
        linears=len(chosen),
        linears_left_float=len(linears) - len(chosen),
        float_constant_bytes=program_facts.constant_bytes(source.program),
    )
    quantized = replace(
        source, label=f"{source.label}, {summary.describe()}", program=program, eager=model
    )
    return quantized, source.eager, summary


def dynamic_activation_step(outputs: Sequence[object]) -> float:
    """The float tolerance of a torchao program's check: 1/127 of the largest float output
    magnitude. Activations are quantized to int8 per token at run time (step: the token's
    largest magnitude / 127); a one-ulp float difference before a quantization (a sum in another
    order) can round an activation one step the other way, which moves the outputs after it by
    about one such step of their own range."""
    largest = 0.0
    for output in outputs:
        if isinstance(output, torch.Tensor) and output.is_floating_point() and output.numel():
            largest = max(largest, float(output.detach().abs().max()))
    return 1.001 * largest / 127


def output_step(program: torch.export.ExportedProgram) -> float | None:
    """The largest quantization step of the program's outputs when every output is a dequantize
    (per tensor, or per channel with constant scales), else None."""
    (output,) = [n for n in program.graph.nodes if n.op == "output"]
    steps = []
    for result in output.args[0]:
        target = str(getattr(result, "target", ""))
        scale = result.args[1] if "dequantize_per" in target else None
        if isinstance(scale, torch.fx.Node) and "per_channel" in target:
            scale = _constant_max(program, scale)
        if not isinstance(scale, float):
            return None
        steps.append(scale)
    return max(steps) if steps else None


def _constant_max(program: torch.export.ExportedProgram, node: torch.fx.Node) -> float | None:
    """The largest value of a constant placeholder (parameter, buffer, constant), else None."""
    from backends.transforms.program_constants import ProgramConstants

    constants = ProgramConstants(program)
    return float(constants.value(node).max()) if constants.is_constant(node) else None


def sqnr_db(actual: Sequence[object], expected: Sequence[object]) -> float | None:
    """10 log10(|expected|^2 / |actual - expected|^2) over every float output, in dB."""
    signal = noise = 0.0
    for got, want in zip(actual, expected, strict=False):
        if (
            isinstance(got, torch.Tensor)
            and isinstance(want, torch.Tensor)
            and want.is_floating_point()
        ):
            want = want.detach().float()
            signal += float((want**2).sum())
            noise += float(((got.float() - want) ** 2).sum())
    if signal == 0.0:
        return None
    return math.inf if noise == 0.0 else 10 * math.log10(signal / noise)
