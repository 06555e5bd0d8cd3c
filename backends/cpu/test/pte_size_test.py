"""The regression this delegate exists for: a lowered conv-BN / linear-BN `.pte` holds the fused
weights only, with no copy of the original weights or the batch-norm statistics."""

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.serialization.graph_reader import cpu_payloads, read_payload
from backends.cpu.test.models import ConvBN, LinearBN, randomize_batch_norm

# Everything in the .pte that is not fused-weight bytes: the program flatbuffer, the delegate
# payload (about 1.3 KB for conv-BN), segment headers and alignment padding. Measured at 2.9 KB
# for conv-BN and 2.2 KB for linear-BN; a leftover copy of the original weights alone would add
# 9.2 KB (conv) or 24.6 KB (linear).
PTE_OVERHEAD_BYTES = 4096


def _reference_fold(
    weight: torch.Tensor, bias: torch.Tensor | None, bn: torch.nn.modules.batchnorm._BatchNorm
) -> tuple[torch.Tensor, torch.Tensor]:
    assert bias is not None
    assert bn.running_var is not None and bn.running_mean is not None
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    shape = [-1] + [1] * (weight.dim() - 1)
    return weight * scale.reshape(shape), (bias - bn.running_mean) * scale + bn.bias


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    return tensor.detach().contiguous().numpy().tobytes()


@pytest.mark.parametrize(
    ("model", "example"),
    [
        (ConvBN(8, 32), torch.randn(1, 8, 8, 8)),
        (LinearBN(64, 96), torch.randn(4, 64)),
    ],
    ids=["conv_bn", "linear_bn"],
)
def test_pte_holds_fused_weights_only(model: torch.nn.Module, example: torch.Tensor) -> None:
    model = randomize_batch_norm(model)
    assert isinstance(model, (ConvBN, LinearBN))
    layer: torch.nn.Conv2d | torch.nn.Linear = model.conv if isinstance(model, ConvBN) else model.fc
    bn: torch.nn.modules.batchnorm._BatchNorm = model.bn
    edge = to_edge_transform_and_lower(
        torch.export.export(model, (example,)), partitioner=[CpuPartitioner()]
    )
    (payload,) = cpu_payloads(edge.exported_program())
    graph = read_payload(payload)
    pte = edge.to_executorch().buffer

    # The delegate holds exactly one weight and one bias, both fused.
    constants = graph.constants()
    assert len(constants) == 2
    weight, bias = sorted(constants, key=lambda value: -len(value.shape))
    fused_weight, fused_bias = _reference_fold(layer.weight, layer.bias, bn)
    assert weight.shape == tuple(fused_weight.shape) and bias.shape == tuple(fused_bias.shape)
    stored = edge.exported_program().graph_module.lowered_module_0.named_data_store_output
    for value, expected in ((weight, fused_weight), (bias, fused_bias)):
        data = bytes(stored.buffers[stored.pte_data[str(value.constant_key)].buffer_index])
        actual = torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(value.shape)
        torch.testing.assert_close(actual, expected.detach(), rtol=1e-5, atol=1e-6)
        assert data in pte, f"fused {value.name} missing from the .pte"

    originals: dict[str, torch.Tensor | None] = {
        "weight": layer.weight,
        "bias": layer.bias,
        "bn.running_mean": bn.running_mean,
        "bn.running_var": bn.running_var,
        "bn.weight": bn.weight,
        "bn.bias": bn.bias,
    }
    for name, tensor in originals.items():
        assert tensor is not None
        assert _tensor_bytes(tensor) not in pte, f"the .pte still holds the original {name}"

    fused_bytes = (fused_weight.numel() + fused_bias.numel()) * 4
    assert fused_bytes <= len(pte) <= fused_bytes + PTE_OVERHEAD_BYTES
