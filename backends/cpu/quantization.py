"""Float model -> PT2E-quantized model for the CPU delegate's int8 ops.

`quantize_ptq` is static post-training quantization with XNNPACK's quantizer (from the executorch
wheel): per-channel symmetric int8 weights, per-tensor affine int8 activations, calibrated on the
given samples. The result is a torch.fx GraphModule to export and lower with CpuPartitioner; the
delegate's preprocess turns its quantized conv/linear groups into int8 kernels.
"""

from collections.abc import Sequence
from typing import Any

import torch
from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
    XNNPACKQuantizer,
    get_symmetric_quantization_config,
)
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e


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
