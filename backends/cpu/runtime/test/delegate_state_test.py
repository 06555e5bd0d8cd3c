"""Delegate state (issue 45): a mutated buffer whose users are all delegated moves into the delegate
(payload v4 State), which keeps one copy per loaded program across calls and writes the updated
rows in place. Small real models, real torch.export, real ExecuTorch runtime: the state persists
and matches eager call after call, nothing is copied back outside the delegate, an index out of
range fails naming the op, the index, its position and the size (and leaves the state as it was),
two loaded programs keep separate states, a graph that reads the old value after the update runs
the update as a copy (still right), and `CpuPartitioner(delegate_buffers=False)` keeps today's
flow (the buffer outside, ExecuTorch's copy_ write-back)."""

import copy
import threading
from typing import Any

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from torch import nn

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import load
from backends.cpu.serialization.graph_reader import ValueKind, cpu_payloads, read_payload

ROWS = 8
WIDTH = 4
IN_PLACE = "in place on the delegate's state"
COPIED = "copied into the delegate's state"


class IndexCopyCache(nn.Module):
    """cache.index_copy_(0, pos, x); returns a function of the updated cache."""

    def __init__(self) -> None:
        super().__init__()
        self.cache: torch.Tensor
        initial = torch.arange(ROWS * WIDTH, dtype=torch.float32).view(ROWS, WIDTH)
        self.register_buffer("cache", initial)

    def forward(self, pos: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        self.cache.index_copy_(0, pos, x)
        return self.cache * 2.0


class IndexPutCache(nn.Module):
    """cache[:, pos] = x (index_put on dimension 1, x broadcast over the leading 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.cache: torch.Tensor
        self.register_buffer("cache", torch.zeros(1, ROWS, WIDTH))

    def forward(self, pos: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        self.cache[:, pos] = x
        return self.cache.view(ROWS, WIDTH) + 1.0


class ReadsOldValue(nn.Module):
    """The old cache is read after the update is computed: the update cannot run in place."""

    def __init__(self) -> None:
        super().__init__()
        self.cache: torch.Tensor
        self.register_buffer("cache", torch.ones(ROWS, WIDTH))

    def forward(self, pos: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        new = self.cache.index_put((pos,), x)
        result = new * 3.0 + self.cache
        self.cache.copy_(new)
        return result


def _lower(model: nn.Module, delegate_buffers: bool | None = None) -> tuple[bytes, Any, Any]:
    """(.pte, the ExecuTorch program, the delegated edge program)."""
    loader.load_cpu_backend()
    inputs = (torch.tensor([1, 3]), torch.randn(2, WIDTH))
    with torch.no_grad():
        exported = torch.export.export(copy.deepcopy(model), inputs)
    partitioner = CpuPartitioner(delegate_buffers=delegate_buffers)
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    assert not partitioner.report.left_out, partitioner.report
    edge_program = edge.exported_program()
    program = edge.to_executorch()
    return bytes(program.buffer), program.exported_program(), edge_program


def _calls(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    calls = []
    for _ in range(6):
        pos = torch.randperm(ROWS, generator=generator)[:2]
        calls.append((pos, torch.randn(2, WIDTH, generator=generator)))
    return calls


def _targets(program: Any) -> list[str]:
    return [str(n.target) for n in program.graph_module.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("model_type", [IndexCopyCache, IndexPutCache])
def test_state_lives_in_the_delegate_and_is_written_in_place(model_type: type[nn.Module]) -> None:
    model = model_type().eval()
    pte, program, edge_program = _lower(model)
    # Outside: one delegate call and its output; no buffer, no copy_ write-back.
    assert set(_targets(program)) == {"executorch_call_delegate", "<built-in function getitem>"}
    assert not program.graph_signature.buffers_to_mutate
    (payload,) = cpu_payloads(edge_program)
    graph = read_payload(payload)
    (state,) = graph.states()
    assert state.kind == ValueKind.STATE and state.shape == tuple(model.get_buffer("cache").shape)
    (writer,) = [op for op in graph.ops if op.args[-1].value == state.state_update]
    assert writer.kernel == "aten::index_put.out"
    assert len(graph.outputs) == 1

    module = load(pte)
    for pos, x in _calls(seed=1):
        with torch.no_grad():
            expected = model(pos, x)
        (got,) = module.forward([pos, x])
        torch.testing.assert_close(got, expected)
    placement = loader.last_placement()
    assert sum(IN_PLACE in line for line in placement) == 1, placement
    if model_type is IndexPutCache:  # the view of the updated cache is the cache's bytes
        (view,) = [line for line in placement if "view_copy" in line]
        assert "aliases its input: no copy" in view, placement


def test_out_of_range_index_fails_and_leaves_the_state(capfd: pytest.CaptureFixture[str]) -> None:
    model = IndexCopyCache().eval()
    pte, _, _ = _lower(model)
    module = load(pte)
    pos, x = torch.tensor([2, 5]), torch.randn(2, WIDTH)
    with torch.no_grad():
        expected = model(pos, x)
    torch.testing.assert_close(module.forward([pos, x])[0], expected)
    with pytest.raises(RuntimeError):
        module.forward([torch.tensor([0, ROWS]), torch.randn(2, WIDTH)])
    # The kernel's message (stderr; last_error() holds the call's summary, naming the op).
    assert "aten_index_put_default" in loader.last_error()
    error = capfd.readouterr().err
    assert (
        f"aten::index_put.out at aten_index_put_default (in place on the delegate's state): index "
        f"{ROWS} (position 1 of the indices) is out of range for dimension 0 of size {ROWS}"
    ) in error, error
    # Nothing was written, not even the valid row 0: the next call sees the state as it was.
    pos, x = torch.tensor([7, 4]), torch.randn(2, WIDTH)
    with torch.no_grad():
        expected = model(pos, x)
    torch.testing.assert_close(module.forward([pos, x])[0], expected)


def test_two_loaded_programs_keep_separate_states() -> None:
    model = IndexPutCache().eval()
    pte, _, _ = _lower(model)
    first, second = load(pte), load(pte)
    eager_first, eager_second = copy.deepcopy(model), copy.deepcopy(model)
    for (pos_a, x_a), (pos_b, x_b) in zip(_calls(seed=2), _calls(seed=3), strict=True):
        with torch.no_grad():
            expected_a = eager_first(pos_a, x_a)
            expected_b = eager_second(pos_b, x_b)
        torch.testing.assert_close(first.forward([pos_a, x_a])[0], expected_a)
        torch.testing.assert_close(second.forward([pos_b, x_b])[0], expected_b)
    # A third load starts from the exported initial value.
    pos, x = torch.tensor([0, 6]), torch.randn(2, WIDTH)
    with torch.no_grad():
        expected = IndexPutCache().eval()(pos, x)
    torch.testing.assert_close(load(pte).forward([pos, x])[0], expected)


def test_programs_decoding_on_two_threads_keep_their_own_states() -> None:
    model = IndexCopyCache().eval()
    pte, _, _ = _lower(model)
    modules = [load(pte), load(pte)]
    errors: list[BaseException] = []

    def decode(index: int) -> None:
        try:
            eager = copy.deepcopy(model)
            for _ in range(5):  # the same sequence again and again: the states keep diverging
                for pos, x in _calls(seed=10 + index):
                    with torch.no_grad():
                        expected = eager(pos, x)
                    torch.testing.assert_close(modules[index].forward([pos, x])[0], expected)
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=decode, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_old_value_read_after_the_update_falls_back_to_a_copy() -> None:
    model = ReadsOldValue().eval()
    pte, program, _ = _lower(model)
    assert "aten.copy_.default" not in _targets(program)
    module = load(pte)
    for pos, x in _calls(seed=4):
        with torch.no_grad():
            expected = model(pos, x)
        torch.testing.assert_close(module.forward([pos, x])[0], expected)
    placement = loader.last_placement()
    assert not any(IN_PLACE in line for line in placement), placement
    assert sum(COPIED in line for line in placement) == 1, placement


@pytest.mark.parametrize("switch", ["argument", "environment"])
def test_switch_keeps_buffers_outside(switch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A zero initial value: outside a delegate, ExecuTorch plans a mutable buffer's memory and
    # does not load its exported value (a state in the delegate starts from it, see above).
    model = IndexPutCache().eval()
    if switch == "environment":
        monkeypatch.setenv("ET_CPU_DELEGATE_BUFFERS", "0")
        pte, program, edge_program = _lower(model)
    else:
        pte, program, edge_program = _lower(model, delegate_buffers=False)
    assert _targets(program).count("aten.copy_.default") == 1
    assert list(program.graph_signature.buffers_to_mutate.values()) == ["cache"]
    assert not read_payload(cpu_payloads(edge_program)[0]).states()
    module = load(pte)
    for pos, x in _calls(seed=5):
        with torch.no_grad():
            expected = model(pos, x)
        torch.testing.assert_close(module.forward([pos, x])[0], expected)
    assert not any(IN_PLACE in line for line in loader.last_placement())


class _DistinctRowsCache(nn.Module):
    """A cache whose rows all differ, so a product reading a stale row shows it."""

    def __init__(self) -> None:
        super().__init__()
        self.cache: torch.Tensor
        initial = torch.arange(ROWS * WIDTH, dtype=torch.float32).view(ROWS, WIDTH) / 10.0
        self.register_buffer("cache", initial)


class ProductThenWrite(_DistinctRowsCache):
    """x @ cache^T reads the cache's value at the start of the call; the update comes after."""

    def forward(self, pos: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        scores = x @ self.cache.transpose(0, 1)
        self.cache.index_copy_(0, pos, x)
        return scores


class TransposeThenWrite(_DistinctRowsCache):
    """cache^T (its old value) is taken before the update and multiplied after it: the product
    must see the old rows."""

    def forward(self, pos: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        old_t = self.cache.transpose(0, 1)
        new = self.cache.index_put((pos,), x)
        scores = x @ old_t
        self.cache.copy_(new)
        return scores


@pytest.mark.parametrize("model_type", [ProductThenWrite, TransposeThenWrite])
def test_old_value_read_around_the_update(model_type: type[nn.Module]) -> None:
    """A transposed read of the state's start-of-call value, before or across its update, sees
    the old rows on every call (the state persists between calls, as the eager buffer does)."""
    model = model_type().eval()
    pte, _, _ = _lower(model)
    module = load(pte)
    for pos, x in _calls(seed=5):
        with torch.no_grad():
            expected = model(pos, x)
        (got,) = module.forward([pos, x])
        torch.testing.assert_close(got, expected, msg=lambda m: f"{m}\n{loader.last_placement()}")
