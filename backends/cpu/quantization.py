"""Float model -> PT2E-quantized model for the CPU delegate's int8 ops.

`quantize_ptq` is static post-training quantization with XNNPACK's quantizer (from the executorch
wheel): per-channel symmetric int8 weights, per-tensor affine int8 activations, calibrated on the
given samples. The result is a torch.fx GraphModule to export and lower with CpuPartitioner; the
delegate's preprocess turns its quantized conv/linear groups into int8 kernels.

`quantize_qat` is the project's QAT flow: `QATConvOutputQuantizer` (int8 input, weight and
output, int32 bias per conv), a few training steps, `convert_pt2e`, then `FuseQATConvBN` folds
each conv's batch norm into its int32 bias. The result is an ExportedProgram ready to lower.

`output_step` and `StepAgreement` measure an int8 program against another run of the same
quantized program (issue 18's bar: outputs equal, or one quantization step apart).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
    XNNPACKQuantizer,
    get_symmetric_quantization_config,
)
from torchao.quantization.pt2e import move_exported_model_to_eval
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e

from backends.transforms.fuse_qat_conv_bn import FuseQATConvBN
from backends.transforms.qat_conv_output_quantizer import QATConvOutputQuantizer


def quantize_ptq(
    model: torch.nn.Module, samples: Sequence[tuple[Any, ...]]
) -> torch.fx.GraphModule:
    """`model` quantized to int8 (PT2E, XNNPACK's symmetric per-channel config), calibrated by
    running every sample once. Raises ValueError when there are no samples."""
    if not samples:
        raise ValueError("quantize_ptq: calibration needs at least one sample input")
    if not isinstance(model, torch.fx.GraphModule):  # an exported program's module has no eval()
        model.eval()
    captured = torch.export.export(model, tuple(samples[0])).module()
    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True)
    )
    prepared = prepare_pt2e(captured, quantizer)
    with torch.no_grad():
        for sample in samples:
            prepared(*sample)
    return convert_pt2e(prepared)


def quantize_qat(
    model: torch.nn.Module,
    samples: Sequence[tuple[Any, ...]],
    steps: int = 4,
    learning_rate: float = 0.01,
) -> torch.export.ExportedProgram:
    """`model` trained `steps` SGD steps with simulated int8 quantization, converted and folded.

    There are no labels: each step trains the QAT model to reproduce the float model's outputs on
    a sample (self-distillation), which is what adapts the observers and batch norms to the
    quantization. Weights per output channel; every conv's batch norm ends in its int32 bias
    (`FuseQATConvBN`; chains it cannot fold stay as they are, see its report). Raises ValueError
    when there are no samples."""
    if not samples:
        raise ValueError("quantize_qat: training needs at least one sample input")
    teacher = model.eval() if not isinstance(model, torch.fx.GraphModule) else model
    with torch.no_grad():
        targets = [teacher(*sample) for sample in samples]
    captured = torch.export.export(teacher, tuple(samples[0])).module()
    prepared = prepare_qat_pt2e(captured, QATConvOutputQuantizer(per_channel_weights=True))
    optimizer = torch.optim.SGD(prepared.parameters(), lr=learning_rate)
    for step in range(steps):
        sample, target = samples[step % len(samples)], targets[step % len(samples)]
        outputs = prepared(*sample)
        pairs = zip(_leaves(outputs), _leaves(target), strict=True)
        loss = sum((got - want).square().mean() for got, want in pairs)
        loss.backward()  # type: ignore[union-attr]
        optimizer.step()
        optimizer.zero_grad()
    move_exported_model_to_eval(prepared)
    converted = convert_pt2e(prepared)
    with torch.no_grad():
        program = torch.export.export(converted, tuple(samples[0]))
    FuseQATConvBN()(program)
    return program


def _leaves(value: Any) -> list[torch.Tensor]:
    """The float tensors of a model's output (a tensor or a nest of tuples/lists/dicts)."""
    flat, _ = torch.utils._pytree.tree_flatten(value)
    return [t for t in flat if isinstance(t, torch.Tensor) and t.is_floating_point()]


def output_step(exported: torch.export.ExportedProgram) -> float:
    """The quantization step of a quantized program's float output: the scale of its last
    dequantize. Raises ValueError when the output does not come from a per-tensor dequantize."""
    (output,) = [n for n in exported.graph.nodes if n.op == "output"]
    (result,) = output.args[0]
    if "dequantize_per_tensor" not in str(result.target):
        raise ValueError(f"the quantized output comes from {result.target}, not a dequantize")
    return float(result.args[1])


@dataclass
class StepAgreement:
    """How far one program's outputs are from another's, in quantization steps, over calls."""

    equal: int = 0
    outputs: int = 0
    worst_steps: float = 0.0

    def add(self, got: torch.Tensor, want: torch.Tensor, step: float | torch.Tensor) -> None:
        """Counts one call's outputs; `step` is a scale or per-channel scales that broadcast."""
        steps = ((got - want).abs() / step).round()
        self.worst_steps = max(self.worst_steps, float(steps.max()))
        self.equal += int((steps == 0).sum())
        self.outputs += steps.numel()

    @property
    def share_equal(self) -> float:
        return self.equal / self.outputs if self.outputs else 0.0
