"""Bounded dynamic dimensions (torch.export.Dim(..., max=N)) run inside the CPU delegate: one .pte
for every size, checked against eager at the smallest, the largest and sizes between, in one
process; inputs outside the bounds get a clear error and the delegate keeps working; memory stays
flat over calls alternating between sizes."""

import ctypes
import gc
import os
import resource
from typing import Any

# The shape plans: a graph that resizes in place (the default, resize_in_place_test) compiles none.
os.environ["ET_CPU_RESIZE_IN_PLACE"] = "0"

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.extension.pybindings import portable_lib
from torch.export import Dim

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import assert_single_output_close
from backends.cpu.serialization.graph_reader import cpu_payloads
from backends.cpu.serialization.schema import fb
from tools.bench.zoo_sequence import LlamaLike

ATOL = 1e-4
RTOL = 1e-4
MAX_BATCH = 16
MAX_TOKENS = 512
VOCAB = 64

_BUFFERS: list[bytes] = []  # the runtime does not own a program's buffer


class SmallCnn(torch.nn.Module):
    """Convolutions (one strided), ReLU, max pooling, flatten (a symbolic view), a linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(16 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv1(x)))
        y = torch.max_pool2d(torch.relu(self.conv2(y)), 2)
        return self.fc(y.flatten(1))


def _lower(model: torch.nn.Module, example: torch.Tensor, shapes: dict[int, Any]) -> Any:
    loader.load_cpu_backend()
    partitioner = CpuPartitioner()
    exported = torch.export.export(model, (example,), dynamic_shapes=(shapes,))
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    assert partitioner.report.left_out == (), partitioner.report
    payloads = cpu_payloads(edge.exported_program())
    assert len(payloads) == 1
    graph = fb.GraphT.InitFromPackedBuf(payloads[0], 0)
    assert graph.symbols is not None and len(graph.symbols) == 1
    pte = bytes(edge.to_executorch().buffer)  # plans the exported bounds (issue 47)
    _BUFFERS.append(pte)
    return portable_lib._load_for_executorch_from_buffer(pte), graph


@pytest.fixture(scope="module")
def cnn() -> tuple[torch.nn.Module, Any]:
    torch.manual_seed(0)
    model = SmallCnn().eval()
    with torch.no_grad():  # a non-trivial batch norm, folded while lowering
        assert model.bn.running_mean is not None and model.bn.running_var is not None
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
    module, _ = _lower(model, torch.randn(2, 3, 16, 16), {0: Dim("batch", min=1, max=MAX_BATCH)})
    return model, module


@pytest.fixture(scope="module")
def llama() -> tuple[torch.nn.Module, Any]:
    torch.manual_seed(0)
    model = LlamaLike(vocab=VOCAB, dim=32, depth=2, heads=2, hidden=64, max_tokens=MAX_TOKENS)
    model = model.eval()
    tokens = torch.randint(0, VOCAB, (1, 8))
    module, _ = _lower(model, tokens, {1: Dim("tokens", min=1, max=MAX_TOKENS)})
    return model, module


def _check(module: Any, model: torch.nn.Module, x: torch.Tensor) -> None:
    assert_single_output_close(module, model, x, atol=ATOL, rtol=RTOL)


def test_payload_records_the_symbolic_dims_and_their_bounds() -> None:
    _, graph = _lower(SmallCnn().eval(), torch.randn(2, 3, 16, 16), {0: Dim("b", max=MAX_BATCH)})
    (symbol,) = graph.symbols
    assert (symbol.min, symbol.max) == (1, MAX_BATCH)
    (x,) = [graph.values[i] for i in graph.inputs]
    assert list(x.shape) == [MAX_BATCH, 3, 16, 16]  # the upper bound: what the arena is for
    assert list(x.dimMin) == [1, 3, 16, 16] and list(x.dimMax) == [MAX_BATCH, 3, 16, 16]
    assert [list(e.symbols) for e in x.dimExprs] == [[0], [], [], []]


def test_cnn_with_dynamic_batch_matches_eager_at_every_size(cnn: Any) -> None:
    model, module = cnn
    torch.manual_seed(1)
    for batch in (1, MAX_BATCH, 2, 7, 1, 12, MAX_BATCH):
        _check(module, model, torch.randn(batch, 3, 16, 16))


def test_llama_with_dynamic_sequence_matches_eager_at_every_size(llama: Any) -> None:
    model, module = llama
    torch.manual_seed(2)
    for length in (1, MAX_TOKENS, 16, 97, 128, 1):
        _check(module, model, torch.randint(0, VOCAB, (1, length)))


def test_input_outside_a_bound_or_with_a_wrong_static_dim_is_a_clear_error(cnn: Any) -> None:
    model, module = cnn
    # 17 x 3 x 16 x 15 fits the program's buffer, so ExecuTorch passes it to the delegate.
    with pytest.raises(RuntimeError):
        module.forward([torch.randn(MAX_BATCH + 1, 3, 16, 15)])
    assert loader.last_error() == (
        f"input 0 (x): dimension 0 is {MAX_BATCH + 1}, outside its bounds [1, {MAX_BATCH}]"
    )
    _check(module, model, torch.randn(3, 3, 16, 16))  # the delegate keeps working
    with pytest.raises(RuntimeError):
        module.forward([torch.randn(2, 4, 16, 16)])
    assert loader.last_error() == "input 0 (x): dimension 1 is 4, expected 3 (a static dimension)"
    _check(module, model, torch.randn(MAX_BATCH, 3, 16, 16))
    # Larger than the program's buffer: ExecuTorch itself refuses it before the delegate.
    with pytest.raises(RuntimeError):
        module.forward([torch.randn(MAX_BATCH + 1, 3, 16, 16)])
    _check(module, model, torch.randn(1, 3, 16, 16))


def test_shape_plans_are_cached_and_counted(cnn: Any) -> None:
    _, module = cnn
    module.forward([torch.randn(5, 3, 16, 16)])
    hits, misses = loader.shape_plan_stats()
    module.forward([torch.randn(5, 3, 16, 16)])
    assert loader.shape_plan_stats() == (hits + 1, misses)
    module.forward([torch.randn(11, 3, 16, 16)])  # a size not seen before: compiled once
    assert loader.shape_plan_stats() == (hits + 1, misses + 1)


class WideLinear(torch.nn.Module):
    """One 1024 x 1024 linear (4 MiB of weights) and a ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(1024, 1024)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


@pytest.mark.parametrize("rows", [range(9, 17), range(1, 9)], ids=["onednn", "row_gemm"])
def test_shape_plans_share_the_prepared_weights(rows: range) -> None:
    # Eight sizes, each compiled (the plan cache holds them all): with a reordered or packed copy
    # of the weights each, RSS grew 35-45 MiB here; sharing them (one row_gemm packing serves
    # rows 1-4, the base graph's oneDNN layout the others) it grew 0.3-4.2 MiB.
    torch.manual_seed(3)
    model = WideLinear().eval()
    module, _ = _lower(model, torch.randn(4, 1024), {0: Dim("rows", min=1, max=32)})
    _check(module, model, torch.randn(32, 1024))
    inputs = [torch.randn(n, 1024) for n in rows]
    gc.collect()
    # Freed heap (an earlier test's module) would hide new allocations: hand it back first.
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    before = _rss_kib()
    for x in inputs:
        module.forward([x])
    gc.collect()
    grown = _rss_kib() - before
    assert grown < 12 * 1024, f"RSS grew by {grown} KiB over {len(inputs)} sizes"
    for x in inputs:  # each size's plan, now cached, still right
        _check(module, model, x)


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


# More CNN sizes than the shape-plan cache holds (8 by default, ET_CPU_SHAPE_PLANS): each of them
# evicts the least recently used plan and compiles again, while the Llama sizes stay cached.
_EVICTING_BATCHES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
_CACHED_TOKENS = (1, 16, 128, 33, 512)
_CALLS = 1000


def test_memory_stays_flat_over_calls_alternating_between_sizes(cnn: Any, llama: Any) -> None:
    cnn_model, cnn_module = cnn
    llama_model, llama_module = llama
    batches = [torch.randn(b, 3, 16, 16) for b in _EVICTING_BATCHES]
    tokens = [torch.randint(0, VOCAB, (1, n)) for n in _CACHED_TOKENS]

    def cycle() -> None:  # 20 calls, alternating between the two programs and between sizes
        for i, x in enumerate(batches):
            cnn_module.forward([x])
            llama_module.forward([tokens[i % len(tokens)]])

    for _ in range(5):  # warm up: every size compiled, allocator pools settled
        cycle()
    gc.collect()
    before = _rss_kib()
    hits, misses = loader.shape_plan_stats()
    for _ in range(_CALLS // 20):
        cycle()
    gc.collect()
    grown = _rss_kib() - before
    new_hits, new_misses = loader.shape_plan_stats()
    # Every CNN call recompiled (the cache is smaller than the sizes it cycles through) and every
    # Llama call after the warm-up found its plan (512 is the upper bound: the base graph).
    assert new_misses - misses == _CALLS // 2
    assert new_hits - hits == _CALLS // 2
    assert grown < 8 * 1024, f"RSS grew by {grown} KiB over {_CALLS} calls"
    _check(cnn_module, cnn_model, batches[2])
    _check(llama_module, llama_model, tokens[2])
