"""torchao's weight-only programs (IntxWeightOnlyConfig: int4 or int8 weights per group or per
channel, symmetric or asymmetric, scales in float32, bfloat16 or float16, float32 activations)
lowered with CpuPartitioner through the standard `to_edge_transform_and_lower(...).to_executorch()`:
fully delegated, each linear one `et_cpu_quant::linear_wo` kernel and each quantized embedding one
`et_cpu_quant::embedding_wo`, outputs against torchao's eager model; a Llama-style decoder with a
weight-only embedding and 8da4w linears fully delegated and small; an out-of-range index fails at
run time naming the op; a scheme the delegate does not run fails lowering naming the op, the node
and the reason."""

import copy
import functools
from typing import Any

import pytest
import torch
from torch import nn
from torchao.quantization import quantize_
from torchao.quantization.granularity import PerAxis, PerGroup
from torchao.quantization.quant_api import (
    Int8DynamicActivationIntxWeightConfig,
    IntxWeightOnlyConfig,
)
from torchao.quantization.quant_primitives import MappingType

from backends.cpu.partition.cpu_partitioner import UnsupportedTorchaoOpError
from backends.cpu.runtime import loader
from backends.cpu.runtime.test.llama_like import Decoder
from backends.cpu.runtime.test.lowered_program import load, lower, lower_cases, lower_to_pte
from backends.cpu.serialization.schema import fb

LINEAR_KERNEL = "et_cpu_quant::linear_wo.out"
EMBEDDING_KERNEL = "et_cpu_quant::embedding_wo.out"
INT4: torch.dtype = torch.int4  # type: ignore[attr-defined]

# The dequantized weights are torchao's exactly ((w - zero_point) * scale in float32); only the
# order of the float32 sums over K differs from eager's matmul, so results differ by float32
# rounding over K terms relative to the output's magnitude.
ATOL = 1e-5
RTOL = 1e-5

GRANULARITIES = {"group32": PerGroup(32), "group64": PerGroup(64), "group128": PerGroup(128)}
GRANULARITIES["per_channel"] = PerAxis(0)
DTYPES = {"int4": INT4, "int8": torch.int8}
MAPPINGS = {"symmetric": MappingType.SYMMETRIC, "asymmetric": MappingType.ASYMMETRIC}


def _weight_only(dtype: str, granularity: str, mapping: str) -> IntxWeightOnlyConfig:
    return IntxWeightOnlyConfig(
        weight_dtype=DTYPES[dtype],
        granularity=GRANULARITIES[granularity],
        mapping_type=MAPPINGS[mapping],
    )


def _is_embedding(module: nn.Module, fqn: str) -> bool:
    return isinstance(module, nn.Embedding)


def _kernels(payload: bytes) -> list[str]:
    graph = fb.Graph.GetRootAs(payload, 0)
    return [graph.Ops(i).Kernel().decode() for i in range(graph.OpsLength())]


def _run(program: Any, inputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    outputs = program.forward(list(inputs))
    assert all(isinstance(output, torch.Tensor) for output in outputs)
    return list(outputs)


@pytest.mark.parametrize("mapping", list(MAPPINGS))
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_weight_only_linears_are_delegated_kernels_matching_torchao(
    dtype: str, mapping: str
) -> None:
    # Every granularity, with and without bias, side by side in one program; K input rows (the
    # kernel's dequantized-row path) with bias, 3 (its in-register path for up to 4 rows) without.
    torch.manual_seed(0)
    k, n = 256, 96
    cases = []
    for granularity in GRANULARITIES:
        for bias in (True, False):
            model = nn.Linear(k, n, bias=bias)
            quantize_(model, _weight_only(dtype, granularity, mapping))
            shape = (k, k) if bias else (1, 3, k)
            cases.append((model.eval(), (torch.randn(shape),)))
    lowered = lower_cases(cases)
    assert _kernels(lowered.payload) == [LINEAR_KERNEL] * len(cases)
    program = load(lowered.pte)
    torch.testing.assert_close(
        _run(program, lowered.inputs), list(lowered.expected), atol=ATOL, rtol=RTOL
    )
    # One-hot rows pick single weights: y = W_deq^T + bias holds no float sum, so the kernel's
    # dequantized weights must equal torchao's exactly.
    one_hot = tuple(
        torch.eye(k)[torch.randperm(k)[: x.numel() // k]].reshape(x.shape) for x in lowered.inputs
    )
    with torch.no_grad():
        expected = [model(x) for (model, _), x in zip(cases, one_hot, strict=True)]
    for got, want in zip(_run(program, one_hot), expected, strict=True):
        assert torch.equal(got, want)


class _Lookup(nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        return self.embedding(indices)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_weight_only_embeddings_are_delegated_kernels_exactly_torchao(dtype: str) -> None:
    torch.manual_seed(1)
    vocab, dim = 300, 128
    cases = []
    for granularity in ("group32", "group64", "per_channel"):
        for mapping in MAPPINGS:
            model = _Lookup(vocab, dim)
            quantize_(model, _weight_only(dtype, granularity, mapping), filter_fn=_is_embedding)
            cases.append((model.eval(), (torch.randint(0, vocab, (3, 17)),)))
    lowered = lower_cases(cases)
    assert _kernels(lowered.payload) == [EMBEDDING_KERNEL] * len(cases)
    program = load(lowered.pte)
    for got, want in zip(_run(program, lowered.inputs), lowered.expected, strict=True):
        assert torch.equal(got, want)  # a lookup of dequantized rows: no arithmetic to differ
    # Every row, both table ends included.
    everything = tuple(torch.arange(vocab).reshape(3, 100)[:, :17].contiguous() for _ in cases)
    with torch.no_grad():
        expected = [model(x) for (model, _), x in zip(cases, everything, strict=True)]
    for got, want in zip(_run(program, everything), expected, strict=True):
        assert torch.equal(got, want)


@pytest.mark.parametrize("index", [300, -1])
def test_out_of_range_index_fails_naming_the_op(
    index: int, capfd: pytest.CaptureFixture[str]
) -> None:
    model = _Lookup(300, 64)
    quantize_(model, _weight_only("int8", "per_channel", "symmetric"), filter_fn=_is_embedding)
    indices = torch.tensor([[0, 5, 299]])
    program, kernels = lower(model.eval(), (indices,))
    assert kernels == [[EMBEDDING_KERNEL]]
    torch.testing.assert_close(_run(program, (indices,))[0], model(indices), atol=0, rtol=0)
    capfd.readouterr()
    with pytest.raises(RuntimeError):
        program.forward([torch.tensor([[0, index, 1]])])
    # The kernel's own line, then the runtime's line naming the failed op (the last error).
    assert (
        f"et_cpu_quant::embedding_wo.out at embedding_wo_default: index {index} (position 1 of "
        "the indices) is out of range for a table of 300 rows"
    ) in capfd.readouterr().err
    assert "op 0 (embedding_wo_default): kernel et_cpu_quant::embedding_wo.out" in (
        loader.last_error()
    )


class _Mixed(nn.Module):
    """Shapes off the vector widths: K = 200 (not a multiple of 32), groups of 40 (not of 16),
    int32 indices, a row of 40; and 1 and 4 input rows on the in-register path."""

    def __init__(self) -> None:
        super().__init__()
        self.int4 = nn.Linear(200, 24)
        self.int8 = nn.Linear(200, 24, bias=False)
        self.table = nn.Embedding(50, 40)
        self.small4 = nn.Linear(256, 40)
        self.small8 = nn.Linear(256, 40, bias=False)

    def forward(
        self, x: torch.Tensor, indices: torch.Tensor, one: torch.Tensor, four: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        odd = (self.int4(x), self.int8(x), self.table(indices))
        return (*odd, self.small4(one), self.small8(one), self.small4(four), self.small8(four))


@pytest.mark.parametrize("isa", ["native", "avx2", "generic"])
def test_every_kernel_variant_and_odd_shapes_match_torchao(
    isa: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(3)
    model = _Mixed()
    quantize_(model.int4, _weight_only("int4", "per_channel", "asymmetric"))
    quantize_(
        model.int8,
        IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerGroup(40)),
    )
    quantize_(model.small4, _weight_only("int4", "group64", "asymmetric"))
    quantize_(model.small8, _weight_only("int8", "per_channel", "symmetric"))
    quantize_(model, _weight_only("int4", "per_channel", "asymmetric"), filter_fn=_is_embedding)
    inputs = (
        torch.randn(3, 200),
        torch.randint(0, 50, (7,), dtype=torch.int32),
        torch.randn(1, 256),
        torch.randn(2, 2, 256),
    )
    pte, payloads = lower_to_pte(model.eval(), inputs)
    assert sorted(_kernels(payloads[0])) == [EMBEDDING_KERNEL] + [LINEAR_KERNEL] * 6
    if isa != "native":
        monkeypatch.setenv("ET_CPU_WEIGHT_ONLY_ISA", isa)  # read when the delegate binds
    outputs = _run(load(pte), inputs)
    with torch.no_grad():
        expected = model(*inputs)
    assert torch.equal(outputs[2], expected[2])
    del outputs[2]
    torch.testing.assert_close(
        outputs, [e for i, e in enumerate(expected) if i != 2], atol=ATOL, rtol=RTOL
    )


def _llama_recipe(model: nn.Module, embedding_dtype: str, linears: str) -> nn.Module:
    # ExecuTorch's Llama recipe: the embedding weight-only, the linears 8da4w (or weight-only).
    embedding = _weight_only(embedding_dtype, "group32", "symmetric")
    quantize_(model, embedding, filter_fn=_is_embedding)
    if linears == "8da4w":
        quantize_(
            model,
            Int8DynamicActivationIntxWeightConfig(
                weight_dtype=INT4, weight_granularity=PerGroup(32)
            ),
        )
    else:
        quantize_(model, _weight_only("int4", "group32", "symmetric"))
    return model.eval()


@functools.cache
def _float_decoder() -> tuple[nn.Module, torch.Tensor, int]:
    """The float decoder, its tokens and the size of its .pte (lowered once for every case)."""
    torch.manual_seed(2)
    float_model = Decoder().eval()
    tokens = torch.randint(0, 256, (1, 16))
    float_pte, _ = lower_to_pte(float_model, (tokens,))
    return float_model, tokens, len(float_pte)


@pytest.mark.parametrize(
    ("embedding_dtype", "linears"), [("int8", "8da4w"), ("int4", "8da4w"), ("int4", "weight_only")]
)
def test_decoder_with_quantized_embedding_is_fully_delegated_and_small(
    embedding_dtype: str, linears: str
) -> None:
    float_model, tokens, float_pte_bytes = _float_decoder()
    model = _llama_recipe(copy.deepcopy(float_model), embedding_dtype, linears)
    pte, payloads = lower_to_pte(model, (tokens,))  # asserts nothing is left out
    assert len(payloads) == 1
    kernels = _kernels(payloads[0])
    assert kernels.count(EMBEDDING_KERNEL) == 1
    linear_kernel = "et_cpu_quant::linear_8da.out" if linears == "8da4w" else LINEAR_KERNEL
    assert kernels.count(linear_kernel) == 2 * 7 + 1  # 7 a block, and the output
    assert not any(kernel.startswith("torchao") for kernel in kernels)
    program = load(pte)
    with torch.no_grad():
        expected = model(tokens)
    (logits,) = _run(program, (tokens,))
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)
    assert torch.equal(logits.argmax(-1), expected.argmax(-1))
    # Every weight matrix now holds ~0.63 (int4) or ~1.1 (int8) bytes a weight instead of 4.
    limit = 0.2 if embedding_dtype == "int4" else 0.25
    assert len(pte) < limit * float_pte_bytes, (len(pte), float_pte_bytes)


@pytest.mark.parametrize("scale_dtype", [torch.bfloat16, torch.float16], ids=str)
def test_half_precision_weight_scales_are_widened_exactly(scale_dtype: torch.dtype) -> None:
    # torchao multiplies the float32 (q - zero point) by the scale upcast to float32, so scales
    # stored in bfloat16 or float16 lower to the same float32 values: a weight-only and an 8da4w
    # linear, each one delegated kernel, against torchao's eager model.
    torch.manual_seed(3)
    weight_only = nn.Linear(128, 48)
    quantize_(
        weight_only,
        IntxWeightOnlyConfig(weight_dtype=INT4, granularity=PerGroup(32), scale_dtype=scale_dtype),
    )
    dynamic = nn.Linear(128, 48)
    quantize_(
        dynamic,
        Int8DynamicActivationIntxWeightConfig(
            weight_dtype=INT4, weight_granularity=PerGroup(32), weight_scale_dtype=scale_dtype
        ),
    )
    cases = [(weight_only.eval(), (torch.randn(5, 128),)), (dynamic.eval(), (torch.randn(5, 128),))]
    lowered = lower_cases(cases)
    assert _kernels(lowered.payload) == [LINEAR_KERNEL, "et_cpu_quant::linear_8da.out"]
    program = load(lowered.pte)
    torch.testing.assert_close(
        _run(program, lowered.inputs), list(lowered.expected), atol=ATOL, rtol=RTOL
    )
    # One-hot rows read single dequantized weights: equal to torchao's, bit for bit.
    one_hot = (torch.eye(128)[:5], torch.randn(5, 128))
    with torch.no_grad():
        expected = weight_only(one_hot[0])
    assert torch.equal(_run(program, one_hot)[0], expected)


def test_unsupported_torchao_scheme_fails_lowering_naming_op_node_and_reason() -> None:
    # A bfloat16 model: its linear is not a float32 one the fused ops take. Lowering stops at the
    # partitioner instead of failing later in to_executorch() with "Missing out variants" (as
    # XNNPACK's lowering of the same program does).
    model = nn.Linear(64, 32).to(torch.bfloat16)
    quantize_(model, IntxWeightOnlyConfig(weight_dtype=INT4, granularity=PerGroup(32)))
    with pytest.raises(UnsupportedTorchaoOpError) as raised:
        lower_to_pte(model.eval(), (torch.randn(3, 64, dtype=torch.bfloat16),))
    message = str(raised.value)
    assert "torchao_dequantize_affine_default (torchao.dequantize_affine.default)" in message
    assert "not by a linear" in message
    assert "IntxWeightOnlyConfig" in message
