"""A pt2e quantizer that quantizes convolutions with an int32 bias and, optionally, their output.

Annotating the conv's output is what keeps torchao's QAT conv-batch-norm simulation chain alive
through `convert_pt2e` (its own folding only matches a conv whose output is not quantized), so
this quantizer is the real-flow producer of the graphs `FuseQATConvBN` folds. With
`quantize_output=False` torchao folds the batch norm itself and leaves a float bias behind, the
other case the pass's bias preparation covers.

Per conv (`aten.conv1d` / `aten.conv2d` in the pre-dispatch graph `prepare_qat_pt2e` sees):
- input: int8, per-tensor affine;
- weight: int8 symmetric, per-tensor or per output channel (axis 0);
- bias (when the conv has one): int32, scale = input scale x weight scale(s), zero point 0;
- output (optional): int8, per-tensor affine.
"""

from __future__ import annotations

from collections.abc import Collection

import torch
from torchao.quantization.pt2e.fake_quantize import FusedMovingAvgObsFakeQuantize
from torchao.quantization.pt2e.observer import (
    MovingAverageMinMaxObserver,
    MovingAveragePerChannelMinMaxObserver,
)
from torchao.quantization.pt2e.quantizer import (
    DerivedQuantizationSpec,
    QuantizationAnnotation,
    QuantizationSpec,
    Quantizer,
)

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

_CONV_OPS = (torch.ops.aten.conv1d.default, torch.ops.aten.conv2d.default)


def _activation_spec() -> QuantizationSpec:
    return QuantizationSpec(
        dtype=torch.int8,
        quant_min=-128,
        quant_max=127,
        qscheme=torch.per_tensor_affine,
        observer_or_fake_quant_ctr=FusedMovingAvgObsFakeQuantize.with_args(
            observer=MovingAverageMinMaxObserver
        ),
    )


def _weight_spec(per_channel: bool) -> QuantizationSpec:
    if per_channel:
        return QuantizationSpec(
            dtype=torch.int8,
            quant_min=-127,
            quant_max=127,
            qscheme=torch.per_channel_symmetric,
            ch_axis=0,
            observer_or_fake_quant_ctr=FusedMovingAvgObsFakeQuantize.with_args(
                observer=MovingAveragePerChannelMinMaxObserver
            ),
        )
    return QuantizationSpec(
        dtype=torch.int8,
        quant_min=-127,
        quant_max=127,
        qscheme=torch.per_tensor_symmetric,
        observer_or_fake_quant_ctr=FusedMovingAvgObsFakeQuantize.with_args(
            observer=MovingAverageMinMaxObserver
        ),
    )


def derive_bias_qparams(observers: list[torch.nn.Module]) -> tuple[torch.Tensor, torch.Tensor]:
    """Bias scale = input scale x weight scale(s), zero point 0: the int32 accumulator's grid."""
    activation, weight = observers
    activation_scale, _ = activation.calculate_qparams()  # type: ignore[operator]
    weight_scale, _ = weight.calculate_qparams()  # type: ignore[operator]
    scale = (activation_scale * weight_scale).to(torch.float32)
    return scale, torch.zeros_like(scale, dtype=torch.int32)


class QATConvOutputQuantizer(Quantizer):
    """Quantizes every conv1d/conv2d: int8 input and weight, int32 bias, int8 output (optional)."""

    def __init__(
        self,
        per_channel_weights: bool = False,
        quantize_output: bool = True,
        float_output_modules: Collection[str] = (),
    ) -> None:
        """`float_output_modules` names convs (module paths such as "block.conv") whose output
        stays float even when `quantize_output` is set, so one model can hold both cases."""
        super().__init__()
        self.per_channel_weights = per_channel_weights
        self.quantize_output = quantize_output
        self.float_output_modules = frozenset(float_output_modules)

    def _quantizes_output(self, conv: torch.fx.Node) -> bool:
        if not self.quantize_output:
            return False
        stack = conv.meta.get("nn_module_stack") or {}
        paths = {path for path, _ in stack.values()}
        return not paths & self.float_output_modules

    def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        activation = _activation_spec()
        weight = _weight_spec(self.per_channel_weights)
        for node in model.graph.nodes:
            if node.op != "call_function" or node.target not in _CONV_OPS:
                continue
            x, w = node.args[0], node.args[1]
            input_map: dict[torch.fx.Node, object] = {x: activation, w: weight}
            bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
            if isinstance(bias, torch.fx.Node):
                input_map[bias] = DerivedQuantizationSpec(
                    derived_from=[(x, node), (w, node)],
                    derive_qparams_fn=derive_bias_qparams,
                    dtype=torch.int32,
                    quant_min=INT32_MIN,
                    quant_max=INT32_MAX,
                    qscheme=(
                        torch.per_channel_symmetric
                        if self.per_channel_weights
                        else torch.per_tensor_symmetric
                    ),
                    ch_axis=0 if self.per_channel_weights else None,
                )
            node.meta["quantization_annotation"] = QuantizationAnnotation(
                input_qspec_map=input_map,
                output_qspec=activation if self._quantizes_output(node) else None,
                _annotated=True,
            )
        return model

    def validate(self, model: torch.fx.GraphModule) -> None:
        """Nothing to check: every annotation above is self-consistent by construction."""
