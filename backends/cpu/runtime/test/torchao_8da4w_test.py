"""torchao's 8da4w programs (Int8DynamicActivationIntxWeightConfig: int8 per-token dynamic
activations, int4 or int8 weights per group or per channel) lowered with CpuPartitioner through the
standard `to_edge_transform_and_lower(...).to_executorch()`: fully delegated, each linear one
`et_cpu_quant::linear_8da` kernel, outputs against torchao's eager model, the .pte far smaller than
the float one (a scheme the delegate does not run: torchao_weight_only_test.py)."""

import copy
from typing import Any

import pytest
import torch
from torch import nn
from torchao.quantization import quantize_
from torchao.quantization.granularity import PerAxis, PerGroup
from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig
from torchao.quantization.quant_primitives import MappingType

from backends.cpu.runtime.test.llama_like import Decoder
from backends.cpu.runtime.test.lowered_program import load, lower, lower_cases, lower_to_pte
from backends.cpu.serialization.graph_reader import read_payload

KERNEL = "et_cpu_quant::linear_8da.out"
INT4: torch.dtype = torch.int4  # type: ignore[attr-defined]

# The kernel's integer products are exact (int32 per group); what differs from eager is the order
# of the float32 sums over groups and K (eager: dequantize, then a float32 matmul). Relative to
# the output's magnitude that is float32 rounding over K terms.
ATOL = 1e-5
RTOL = 1e-5


def _quantize(model: nn.Module, granularity: Any, **config: Any) -> nn.Module:
    settings: dict[str, Any] = {"weight_dtype": INT4, "weight_granularity": granularity}
    settings.update(config)
    quantize_(model, Int8DynamicActivationIntxWeightConfig(**settings))
    return model.eval()


def _run(program: Any, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    (output,) = program.forward(list(inputs))
    assert isinstance(output, torch.Tensor)
    return output


GRANULARITIES = {"group32": PerGroup(32), "group64": PerGroup(64), "group128": PerGroup(128)}
GRANULARITIES["per_channel"] = PerAxis(0)


def test_8da4w_linear_is_one_delegated_kernel_matching_torchao() -> None:
    # Every granularity, with and without bias, side by side in one program (one lowering):
    # each linear one kernel, each output against its own torchao model on two inputs.
    cases = []
    for name in GRANULARITIES:
        for bias in (True, False):
            torch.manual_seed(0)
            model = _quantize(nn.Linear(256, 96, bias=bias), GRANULARITIES[name])
            cases.append((model, (torch.randn(2, 5, 256),)))
    lowered = lower_cases(cases)
    assert [op.kernel for op in read_payload(lowered.payload).ops] == [KERNEL] * len(cases)
    program = load(lowered.pte)
    scaled = tuple(torch.randn(2, 5, 256) * 3.0 for _ in cases)
    for inputs in (lowered.inputs, scaled):
        outputs = program.forward(list(inputs))
        assert len(outputs) == len(cases)
        for (model, _), x, output in zip(cases, inputs, outputs, strict=True):
            with torch.no_grad():
                expected = model(x)
            torch.testing.assert_close(output, expected, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize(
    "config",
    [
        {"weight_mapping_type": MappingType.ASYMMETRIC},  # per-group weight zero points
        {"weight_dtype": torch.int8},  # 8-bit weights, one a byte
    ],
    ids=["asymmetric_weights", "int8_weights"],
)
def test_8da_linear_variants_match_torchao(config: dict[str, Any]) -> None:
    torch.manual_seed(1)
    model = _quantize(nn.Linear(128, 64), PerGroup(32), **config)
    x = torch.randn(7, 128)
    program, kernels = lower(model, (x,))
    assert kernels == [[KERNEL]]
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(_run(program, (x,)), expected, atol=ATOL, rtol=RTOL)


def test_8da4w_decoder_fully_delegated_top1_matches_torchao_and_pte_is_small() -> None:
    torch.manual_seed(2)
    float_model = Decoder().eval()
    tokens = torch.randint(0, 256, (1, 16))
    float_pte, _ = lower_to_pte(float_model, (tokens,))
    model = _quantize(copy.deepcopy(float_model), PerGroup(32))
    pte, payloads = lower_to_pte(model, (tokens,))  # asserts nothing is left out
    assert len(payloads) == 1
    program = load(pte)
    with torch.no_grad():
        expected = model(tokens)
    logits = _run(program, (tokens,))
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)
    assert torch.equal(logits.argmax(-1), expected.argmax(-1))
    # Linears hold ~0.63 bytes a weight (int4 + a float32 scale per 32) instead of 4; the float
    # embedding and norms stay.
    assert len(pte) < 0.3 * len(float_pte), (len(pte), len(float_pte))
