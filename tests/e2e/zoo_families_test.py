"""End to end, per zoo family (issues 17 and 19; `tools/bench/zoo.py`, small size): export, lower
with `CpuPartitioner`, nothing left out, run on the real ExecuTorch runtime with the CPU delegate,
match eager.

Float outputs compare with rtol 1e-4 and atol 1e-4 scaled by the largest eager output magnitude
(at least 1): the delegate folds batch norm into the weights and its kernels accumulate in another
order, so results differ by rounding, which grows with the values (the classifiers' logits).
Integer outputs (the text CNN's argmax) compare exactly.
"""

from collections.abc import Iterator

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.extension.pybindings import portable_lib

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.runtime import loader
from backends.cpu.serialization.graph_reader import cpu_payloads, read_payload
from tools.bench import zoo

ATOL = RTOL = 1e-4

# Routes each family must bring into the delegate: what made it a family of its own.
_FAMILY_ROUTES = {
    # hardswish and the SE's hardsigmoid, kept whole (the runtime's built-in kernels, oneDNN's).
    "mobilenet_v3": {"aten.hardswish.default", "aten.hardsigmoid.default", "aten.mean.dim"},
    "efficientnet": {"aten.silu.default", "aten.sigmoid.default", "aten.mean.dim"},  # SiLU, SE
    "resnet50": {"aten.max_pool2d_with_indices.default", "aten.add.Tensor"},
    "unet": {
        "aten.max_pool2d_with_indices.default",
        "aten.cat.default",
        "aten.upsample_bilinear2d.vec",
        "aten.upsample_nearest2d.vec",
    },
    "speech_conv1d": {"aten._log_softmax.default", "aten.permute_copy.default"},
    "vit": {"aten.native_layer_norm.default", "aten._softmax.default", "aten.gelu.default"},
    "llama": {
        "aten.embedding.default",
        "et_cpu_quant.rms_norm.default",  # RMSNorm, fused by preprocess (fuse_rms_norm.py)
        # scaled_dot_product_attention's softmax with its guard against fully masked rows
        # (fuse_safe_softmax.py)
        "et_cpu_quant.safe_softmax.default",
        "aten.silu.default",
    },
    "text_cnn": {"aten.embedding.default", "aten.amax.default", "aten.argmax.default"},
}

# Input-independent ops preprocess computes once (FoldConstantSubgraphsPass): SDPA's causal mask and
# the zeros of its guard must not reach the payload.
_FAMILY_FOLDED = {
    "llama": {
        "aten.arange.start_step",
        "aten.full.default",
        "aten.full_like.default",
        "aten.le.Scalar",
        "aten.logical_and.default",
    },
}

# Activation kernels (the speech head's log-softmax, the sequence families' mask guard,
# reductions and embedding) each family must run on the Optimized provider (none may fall back).
_FAMILY_ACTIVATIONS = {
    "mobilenet_v3": ("aten::hardswish.out", "aten::hardsigmoid.out", "aten::relu.out"),
    "efficientnet": ("aten::silu.out", "aten::sigmoid.out"),
    "speech_conv1d": ("aten::_log_softmax.out",),
    "llama": (
        "aten::embedding.out",
        "et_cpu_quant::rms_norm.out",
        "et_cpu_quant::safe_softmax.out",
    ),
    "text_cnn": ("aten::embedding.out", "aten::amax.out", "aten::argmax.out"),
}

# The runtime does not own a loaded program's bytes: keep each one alive for the session.
_BUFFERS: list[bytes] = []


@pytest.fixture(scope="module", autouse=True)
def _runtime() -> Iterator[None]:
    loader.load_cpu_backend()
    yield


def test_every_zoo_family_is_covered() -> None:
    assert set(_FAMILY_ROUTES) == set(zoo.ZOO)


@pytest.mark.parametrize("family", sorted(zoo.ZOO))
def test_zoo_family_is_delegated_whole_and_matches_eager(family: str) -> None:
    model, inputs = zoo.create(family, "small")
    partitioner = CpuPartitioner()
    with torch.no_grad():
        exported = torch.export.export(model, inputs)
        expected = model(*inputs)
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    assert partitioner.report.left_out == (), str(partitioner.report)
    assert partitioner.report.partitions == 1

    (payload,) = cpu_payloads(edge.exported_program())
    graph = read_payload(payload)
    routes = set(graph.routes())
    assert _FAMILY_ROUTES[family] <= routes, _FAMILY_ROUTES[family] - routes
    assert not _FAMILY_FOLDED.get(family, set()) & routes, _FAMILY_FOLDED[family] & routes
    if family == "unet":  # ConvTranspose2d: convolution.out with transposed=True (argument 6)
        convolutions = [op for op in graph.ops if op.route == "aten.convolution.default"]
        assert any(op.args[6].value is True for op in convolutions)

    pte = bytes(edge.to_executorch().buffer)
    _BUFFERS.append(pte)
    module = portable_lib._load_for_executorch_from_buffer(pte)
    actual = module.forward(list(inputs))
    # The activations run on the Optimized provider, fused into their convolutions or standalone.
    placement = loader.last_placement()
    for kernel in _FAMILY_ACTIVATIONS.get(family, ()):
        lines = [line for line in placement if f" {kernel}: " in line]
        assert lines and not [line for line in lines if "Reference" in line], (kernel, placement)
    expected_outputs = list(expected) if isinstance(expected, tuple) else [expected]
    assert len(actual) == len(expected_outputs)
    for got, want in zip(actual, expected_outputs, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        if want.is_floating_point():
            scale = max(1.0, want.abs().max().item())
            torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL * scale)
        else:
            assert torch.equal(got, want)
    if family == "unet":
        # Every convolution, the transposed ones (oneDNN's deconvolution) included, runs on the
        # Optimized provider; before, the ConvTranspose2d layers fell back to Reference.
        placement = loader.last_placement()
        conv_lines = [line for line in placement if " aten::convolution.out: " in line]
        assert len(conv_lines) >= 3, placement
        on_reference = [line for line in conv_lines if "Reference" in line]
        assert not on_reference, on_reference
