"""A Llama-style decoder with a KV cache (tools/bench/llm_models.py: K/V caches as mutable buffers
written with index_copy_ or index_put_ at an int64 `input_pos`, attention over the whole cache
under a mask built from input_pos), float32 and torchao 8da4w (int8 dynamic activations, int4
weights per group of 32), lowered with CpuPartitioner through the standard
`to_edge_transform_and_lower(...).to_executorch()` with the token count a bounded Dim: one program
runs an 8-token prefill, then 32 decode steps fed the argmax token, against the eager model (the
same torchao-quantized model) at every step; and a static one-token (decode-only) program. The
.pte size of 8da4w against float is checked on the no-cache decoder (torchao_8da4w_test.py).
The caches are the delegate's state (CpuPartitioner moves the mutated buffers in): nothing is
left outside the delegate, and every cache update runs in place; `delegate_buffers=False` keeps
the caches outside (ExecuTorch's copy_ write-back), as before.

Export runs under torch.no_grad() (tools/bench/llm_models.export_decoder), as ExecuTorch's Llama
export does: with parameters requiring grad the caches are traced as requiring grad and
`to_executorch()` fails on their write-back, with or without a delegate."""

import copy
from typing import Any

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.lowered_backend_module import LoweredBackendModule
from torch import nn
from torchao.quantization import quantize_
from torchao.quantization.granularity import PerGroup
from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import load
from backends.cpu.serialization.graph_reader import ArgKind, read_payload
from backends.cpu.serialization.schema import fb
from tools.bench import llm_models
from tools.bench.llm_models import LlmConfig

CONFIG = LlmConfig(vocab=256, dim=128, layers=2, heads=4, hidden=256, max_seq=64)
PREFILL = 8
DECODE_STEPS = 32
LINEAR_8DA = "et_cpu_quant::linear_8da.out"
INT4: torch.dtype = torch.int4  # type: ignore[attr-defined]

# Per-step logits tolerance. float32: the delegate's kernels sum in another order than eager
# (observed ~1e-6 on logits of magnitude ~2). 8da4w: the integer products are exact, but a float
# difference of one ulp upstream can move an activation across an int8 rounding boundary in the
# dynamic quantization, one step of that token's activation scale in one input of the next
# linear; observed ~1e-6, allowed 1e-3.
TOLERANCE = {"float32": 1e-4, "8da4w": 1e-3}


def _decoder(scheme: str, cache_update: llm_models.CacheUpdate) -> nn.Module:
    model = llm_models.make_decoder(
        LlmConfig(**{**CONFIG.__dict__, "cache_update": cache_update}), seed=3
    )
    if scheme == "8da4w":
        config = Int8DynamicActivationIntxWeightConfig(
            weight_dtype=INT4, weight_granularity=PerGroup(32)
        )
        quantize_(model, config)
    return model.eval()


def _lower(model: nn.Module, delegate_buffers: bool = True) -> tuple[bytes, list[bytes], Any]:
    """(.pte, delegate payloads, the ExecuTorch program's graph module)."""
    loader.load_cpu_backend()
    inputs = llm_models.example_inputs(CONFIG, PREFILL)
    exported = llm_models.export_decoder(copy.deepcopy(model), inputs)
    partitioner = CpuPartitioner(delegate_buffers=delegate_buffers)
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    assert not partitioner.report.left_out, partitioner.report
    payloads = [
        bytes(sub.processed_bytes)
        for _, sub in edge.exported_program().graph_module.named_children()
        if isinstance(sub, LoweredBackendModule)
    ]
    program = edge.to_executorch()
    return bytes(program.buffer), payloads, program.exported_program()


CACHES = sorted(
    f"layers.{layer}.attention.kv_cache.{kind}_cache"
    for layer in range(CONFIG.layers)
    for kind in "kv"
)
IN_PLACE = "in place on the delegate's state"


def _assert_nothing_outside(program: Any) -> None:
    """The program outside the delegate is one delegate call and the getitem of its output: the
    caches live in the delegate (its state), so there is no buffer and no aten.copy_ write-back
    outside, nothing computes outside, and no torchao op is left."""
    graph = program.graph_module.graph
    targets = [str(n.target) for n in graph.nodes if n.op == "call_function"]
    assert targets.count("executorch_call_delegate") == 1, targets
    assert set(targets) == {"executorch_call_delegate", "<built-in function getitem>"}, targets
    assert not program.graph_signature.buffers_to_mutate, program.graph_signature


def _assert_caches_are_state(payload: bytes) -> None:
    """Each cache is a State of the payload, written back from an index_put result."""
    graph = read_payload(payload)
    states = graph.states()
    assert len(states) == len(CACHES), [s.name for s in states]
    writers = {op.args[-1].value: op for op in graph.ops}
    for state in states:
        assert state.shape == (1, CONFIG.heads, CONFIG.max_seq, CONFIG.dim // CONFIG.heads)
        assert writers[state.state_update].kernel == "aten::index_put.out", state
    assert len(graph.outputs) == 1  # the logits only


def _assert_only_cache_write_back_outside(program: Any) -> None:
    """delegate_buffers=False (today's flow before issue 45): the program outside the delegate is
    one delegate call, the getitems of its outputs and one aten.copy_ per cache buffer
    (ExecuTorch's write-back of a mutated buffer): nothing computes outside."""
    graph = program.graph_module.graph
    calls = [n for n in graph.nodes if n.op == "call_function"]
    targets = [str(n.target) for n in calls]
    assert targets.count("executorch_call_delegate") == 1, targets
    copies = [n for n in calls if str(n.target) == "aten.copy_.default"]
    others = [t for t in targets if t not in ("executorch_call_delegate", "aten.copy_.default")]
    assert set(others) == {"<built-in function getitem>"}, others
    signature = program.graph_signature
    assert sorted(signature.buffers_to_mutate.values()) == CACHES, signature
    # Each copy_ writes one cache buffer (a placeholder), once, from a delegate output.
    written = [signature.inputs_to_buffers[n.args[0].name] for n in copies]
    assert sorted(written) == CACHES, written
    for copy_node in copies:
        source = copy_node.args[1]
        assert str(source.target) == "<built-in function getitem>"
        assert str(source.args[0].target) == "executorch_call_delegate"


def _kernels(payload: bytes) -> list[str]:
    graph = fb.Graph.GetRootAs(payload, 0)
    return [graph.Ops(i).Kernel().decode() for i in range(graph.OpsLength())]


# Each cache update (index_copy_, index_put_) in float32, and 8da4w (its linears; the cache writes
# are the same ops as in float32) with index_put_. The lowering takes nearly all of a case's time
# (8da4w ~12 s, float32 ~5 s; the 33 steps well under a second), so the redundant 8da4w x
# index_copy_ case is left out; the static program below covers 8da4w again.
@pytest.mark.parametrize(
    ("scheme", "cache_update"),
    [("float32", "index_copy"), ("float32", "index_put"), ("8da4w", "index_put")],
)
def test_kv_cache_decoder_prefill_then_decode_matches_eager(
    scheme: str, cache_update: llm_models.CacheUpdate
) -> None:
    model = _decoder(scheme, cache_update)
    pte, payloads, program = _lower(model)
    assert len(payloads) == 1
    _assert_nothing_outside(program)
    _assert_caches_are_state(payloads[0])
    kernels = _kernels(payloads[0])
    linears = 7 * CONFIG.layers + 1
    if scheme == "8da4w":
        assert kernels.count(LINEAR_8DA) == linears, kernels
        assert not any("torchao" in k for k in kernels), kernels
    else:
        assert LINEAR_8DA not in kernels

    module = load(pte)
    llm_models.reset_caches(model)
    torch.manual_seed(4)
    tokens, input_pos = llm_models.example_inputs(CONFIG, PREFILL)
    atol = TOLERANCE[scheme]
    same_top1 = 0
    worst = 0.0
    for step in range(DECODE_STEPS + 1):
        with torch.no_grad():
            expected = model(tokens, input_pos)
        (logits,) = module.forward([tokens, input_pos])
        assert logits.shape == expected.shape == (1, tokens.shape[1], CONFIG.vocab)
        if step == 0:  # every cache update writes only its rows, on the cache itself
            placement = loader.last_placement()
            assert sum(IN_PLACE in line for line in placement) == len(CACHES), placement
        worst = max(worst, float((logits - expected).abs().max()))
        torch.testing.assert_close(logits, expected, atol=atol, rtol=atol, msg=f"step {step}")
        same_top1 += int(torch.equal(logits[:, -1].argmax(-1), expected[:, -1].argmax(-1)))
        # Both are fed eager's next token, so one argmax tie cannot make the runs diverge.
        tokens = expected[:, -1:].argmax(-1)
        input_pos = input_pos[-1:] + 1
    assert same_top1 >= 0.95 * (DECODE_STEPS + 1), (same_top1, worst)
    # The decode steps must depend on the cache: the logits of a fresh program (empty cache) for
    # the last token differ from the cached run's.
    fresh = load(pte)
    (uncached,) = fresh.forward([tokens, input_pos])
    with torch.no_grad():
        cached = model(tokens, input_pos)
    assert not torch.allclose(uncached, cached, atol=1e-2)


def test_buffers_outside_the_delegate_still_decode() -> None:
    # CpuPartitioner(delegate_buffers=False) (ET_CPU_DELEGATE_BUFFERS=0): the caches stay
    # outside, copied into a delegate output every call and back with copy_, as before issue 45.
    model = _decoder("float32", "index_put")
    pte, payloads, program = _lower(model, delegate_buffers=False)
    _assert_only_cache_write_back_outside(program)
    assert not read_payload(payloads[0]).states()
    module = load(pte)
    llm_models.reset_caches(model)
    tokens, input_pos = llm_models.example_inputs(CONFIG, PREFILL)
    for step in range(4):
        with torch.no_grad():
            expected = model(tokens, input_pos)
        (logits,) = module.forward([tokens, input_pos])
        torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4, msg=f"step {step}")
        tokens = expected[:, -1:].argmax(-1)
        input_pos = input_pos[-1:] + 1


_VIEWS = {
    "aten::view_copy.out",
    "aten::alias_copy.out",
    "aten::squeeze_copy.out",
    "aten::squeeze_copy.dim_out",
    "aten::squeeze_copy.dims_out",
    "aten::unsqueeze_copy.out",
    "aten::expand_copy.out",
}


def _cache_permutes(payload: bytes) -> list[str]:
    """The names of the permute_copy ops reading a cache: the state, its update or a view of
    either (the K cache's transpose for q @ k^T)."""
    graph = read_payload(payload)
    cache_values: set[int] = set()
    for state in graph.states():
        cache_values |= {state.id, state.state_update}
    names = []
    for op in graph.ops:
        tensors = [a.value for a in op.args if a.kind == ArgKind.TENSOR]
        if len(tensors) < 2 or tensors[0] not in cache_values:
            continue
        if op.kernel in _VIEWS:
            cache_values.add(tensors[-1])
        elif op.kernel == "aten::permute_copy.out":
            names.append(op.name)
    return names


@pytest.mark.parametrize(
    ("scheme", "cache_update"), [("float32", "index_copy"), ("8da4w", "index_put")]
)
def test_static_one_token_program_folds_the_k_cache_transpose(
    scheme: str, cache_update: llm_models.CacheUpdate
) -> None:
    # The decode-only export (token count fixed at 1, no Dim), as a runtime that keeps separate
    # prefill and decode programs uses it: nothing left outside the delegate; each layer's k^T (a
    # permute of the K cache, the delegate's state after its in-place update) is read by the
    # q @ k^T product with strides, never copied; 16 steps from an empty cache (position 0)
    # match eager.
    model = _decoder(scheme, cache_update)
    loader.load_cpu_backend()
    exported = llm_models.export_decoder(
        copy.deepcopy(model), llm_models.example_inputs(CONFIG, 1), dynamic=False
    )
    partitioner = CpuPartitioner()
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    assert not partitioner.report.left_out, partitioner.report
    payloads = [
        bytes(sub.processed_bytes)
        for _, sub in edge.exported_program().graph_module.named_children()
        if isinstance(sub, LoweredBackendModule)
    ]
    assert len(payloads) == 1
    permutes = _cache_permutes(payloads[0])
    assert len(permutes) == CONFIG.layers, permutes
    program = edge.to_executorch()
    _assert_nothing_outside(program.exported_program())
    module = load(bytes(program.buffer))
    llm_models.reset_caches(model)
    tokens = torch.tensor([[5]])
    for position in range(16):
        input_pos = torch.tensor([position])
        with torch.no_grad():
            expected = model(tokens, input_pos)
        (logits,) = module.forward([tokens, input_pos])
        if position == 0:
            placement = loader.last_placement()
            for name in permutes:
                line = next(line for line in placement if line.startswith(name + " "))
                assert ": folded into " in line, placement
            assert sum(IN_PLACE in line for line in placement) == len(CACHES), placement
        atol = TOLERANCE[scheme]
        torch.testing.assert_close(logits, expected, atol=atol, rtol=atol, msg=f"step {position}")
        tokens = expected[:, -1:].argmax(-1)
