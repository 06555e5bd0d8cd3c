"""`--quantize ptq|qat`: the float source program becomes a PT2E int8 program before lowering.

ptq calibrates XNNPACK's quantizer on the sample inputs; qat runs the project's QAT flow
(`backends.cpu.quantization.quantize_qat`: QATConvOutputQuantizer, a few training steps on the
sample inputs, convert, FuseQATConvBN). The quantized model is what gets lowered and what the
`.pte` is checked against: its eager run (quantize/dequantize around float ops in PyTorch) is the
reference, and the tolerance is widened to one step of the output's quantization grid (the int8
kernels and the reference may round one output differently). The quantization error itself is
reported as the SQNR of the `.pte`'s outputs against the float model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import torch

from tools.lower.errors import ExitCode, LowerError
from tools.lower.program_io import SourceProgram

MODES = ("none", "ptq", "qat")
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
