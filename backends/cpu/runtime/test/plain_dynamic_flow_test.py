"""Issue 47: bounded dynamic dimensions with the documented flow only,
`to_edge_transform_and_lower(ep, partitioner=[CpuPartitioner()]).to_executorch()`, no helper.

`to_executorch()` re-runs each delegate's graph on fake tensors; torch's fake convolution then
guards `batch < 16` and the program's buffers used to be planned for 15 at `Dim(max=16)`
(ExecuTorch refused the bound itself: "Attempted to resize a bounded tensor ..."). A MobileNetV3-
style CNN (BN folded, depthwise, squeeze-excite, pooling, linears) with a dynamic batch and a
Llama-style decoder with a dynamic sequence are saved, loaded through the ExecuTorch runtime and
run at their smallest, largest and a middle size against eager.
"""

import copy
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from executorch.exir import EdgeProgramManager, to_edge, to_edge_transform_and_lower
from executorch.extension.pybindings import portable_lib
from torch.export import Dim
from torch.utils._sympy.value_ranges import ValueRanges

from backends.cpu import symbolic_dims
from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import assert_single_output_close
from tools.bench.zoo import MobileNetV3Like
from tools.bench.zoo_sequence import LlamaLike

ATOL = 1e-4
RTOL = 1e-4
MAX_BATCH = 16
MAX_TOKENS = 128
VOCAB = 64
IMAGE = (3, 32, 32)


def _mobilenet() -> torch.nn.Module:
    torch.manual_seed(0)
    model = MobileNetV3Like(width=0.5, blocks=5, head=64, classes=10).eval()
    with torch.no_grad():  # non-trivial batch norms, folded while lowering
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                assert module.running_mean is not None and module.running_var is not None
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
    return model


def _llama() -> torch.nn.Module:
    torch.manual_seed(0)
    model = LlamaLike(vocab=VOCAB, dim=32, depth=2, heads=2, hidden=64, max_tokens=MAX_TOKENS)
    return model.eval()


def _cnn_edge(model: torch.nn.Module) -> EdgeProgramManager:
    batch = Dim("batch", min=1, max=MAX_BATCH)
    exported = torch.export.export(model, (torch.randn(2, *IMAGE),), dynamic_shapes=({0: batch},))
    partitioner = CpuPartitioner()
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    assert partitioner.report.left_out == (), partitioner.report
    return edge


@pytest.fixture(scope="module")
def cnn_edges() -> tuple[torch.nn.Module, EdgeProgramManager, EdgeProgramManager]:
    """The CNN, its edge program lowered once with the plain flow (no "may plan ... for less"
    warning) and a deep copy of it taken before any to_executorch() call."""
    model = _mobilenet()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        edge = _cnn_edge(model)
    return model, edge, copy.deepcopy(edge)


def _planned_input_sizes(program: Any) -> list[list[int]]:
    plan = program.executorch_program.execution_plan[0]
    return [list(plan.values[i].val.sizes) for i in plan.inputs]


def _save_and_load(program: Any, path: Path) -> Any:
    loader.load_cpu_backend()
    with path.open("wb") as file:
        program.write_to_file(file)
    return portable_lib._load_for_executorch(str(path))


def _check(module: Any, model: torch.nn.Module, x: torch.Tensor) -> None:
    assert_single_output_close(module, model, x, atol=ATOL, rtol=RTOL)


def test_cnn_with_bounded_batch_runs_at_every_size_with_plain_to_executorch(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cnn_edges: tuple[torch.nn.Module, EdgeProgramManager, EdgeProgramManager],
) -> None:
    model, edge, _ = cnn_edges
    program = edge.to_executorch()
    assert _planned_input_sizes(program) == [[MAX_BATCH, *IMAGE]]
    module = _save_and_load(program, tmp_path / "mobilenet.pte")
    torch.manual_seed(1)
    for batch in (1, MAX_BATCH, 7, MAX_BATCH - 1, 1, MAX_BATCH):
        _check(module, model, torch.randn(batch, *IMAGE))
    # A new size's plans prepared at bind too, as before ET_CPU_SHAPE_PLAN_DEFER (read per bind).
    monkeypatch.setenv("ET_CPU_SHAPE_PLAN_DEFER", "0")
    for batch in (5, 11):
        _check(module, model, torch.randn(batch, *IMAGE))


def test_decoder_with_bounded_sequence_runs_at_every_size_with_plain_to_executorch(
    tmp_path: Path,
) -> None:
    model = _llama()
    tokens = Dim("tokens", min=1, max=MAX_TOKENS)
    exported = torch.export.export(
        model, (torch.randint(0, VOCAB, (1, 8)),), dynamic_shapes=({1: tokens},)
    )
    partitioner = CpuPartitioner()
    program = to_edge_transform_and_lower(exported, partitioner=[partitioner]).to_executorch()
    assert partitioner.report.left_out == (), partitioner.report
    assert _planned_input_sizes(program) == [[1, MAX_TOKENS]]
    module = _save_and_load(program, tmp_path / "llama.pte")
    torch.manual_seed(2)
    for length in (1, MAX_TOKENS, 45, 1, MAX_TOKENS):
        _check(module, model, torch.randint(0, VOCAB, (1, length)))


def test_a_deep_copied_edge_program_keeps_the_bounds_too(
    cnn_edges: tuple[torch.nn.Module, EdgeProgramManager, EdgeProgramManager],
) -> None:
    _, _, copied = cnn_edges
    program = copied.to_executorch()  # the deep copy's lowered modules
    assert _planned_input_sizes(program) == [[MAX_BATCH, *IMAGE]]


def test_lowering_warns_when_the_bounds_cannot_be_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    # As if torch's internals had moved: lowering must say so, naming the dimension, its
    # exported bound and the call that plans for it.
    monkeypatch.setattr(symbolic_dims, "_DELEGATE_CALL_MODULE", "torch._no_such_module")
    with pytest.warns(UserWarning) as caught:
        edge = _cnn_edge(_mobilenet())
    messages = [str(w.message) for w in caught if "may plan" in str(w.message)]
    assert len(messages) == 1, messages
    assert "exported with bounds [1, 16]" in messages[0]
    assert symbolic_dims.WORKAROUND in messages[0]
    assert _planned_input_sizes(symbolic_dims.to_executorch(edge)) == [[MAX_BATCH, *IMAGE]]


def test_lowering_warns_when_a_bound_was_narrowed_before_partitioning() -> None:
    # As a transform pass guarding on the batch would (XNNPACK's batch-norm rewrite does).
    batch = Dim("batch", min=1, max=MAX_BATCH)
    exported = torch.export.export(
        _mobilenet(), (torch.randn(2, *IMAGE),), dynamic_shapes=({0: batch},)
    )
    edge = to_edge(exported)
    (x,) = [n for n in edge.exported_program().graph.nodes if n.name == "x"]
    symbol = x.meta["val"].shape[0].node.expr
    env = x.meta["val"].shape[0].node.shape_env
    env.var_to_range[symbol] = ValueRanges(2, MAX_BATCH - 1)
    with pytest.warns(
        UserWarning, match=rf"{symbol} is exported with max 16, .* narrowed it to 15"
    ):
        edge.to_backend(CpuPartitioner())


def test_xnnpack_delegates_keep_executorchs_own_behaviour(tmp_path: Path) -> None:
    # The hook is scoped to CpuBackend's lowered modules: XNNPACK's plain flow is upstream's.
    # ExecuTorch 1.5's XNNPACK narrows the batch already while lowering (its batch-norm rewrite
    # guards batch < 16 in the shared shape environment), so no to_executorch call helps it.
    xnnpack = pytest.importorskip("executorch.backends.xnnpack.partition.xnnpack_partitioner")
    assert symbolic_dims.keep_bounds_when_retraced("CpuBackend") is None
    model = _mobilenet()
    batch = Dim("batch", min=1, max=MAX_BATCH)
    exported = torch.export.export(model, (torch.randn(2, *IMAGE),), dynamic_shapes=({0: batch},))
    edge = to_edge_transform_and_lower(exported, partitioner=[xnnpack.XnnpackPartitioner()])
    program = edge.to_executorch()
    (planned,) = _planned_input_sizes(program)
    module = _save_and_load(program, tmp_path / "xnnpack.pte")
    if planned[0] == MAX_BATCH:  # fixed upstream: runs at the bound
        _check(module, model, torch.randn(MAX_BATCH, *IMAGE))
        return
    assert planned == [MAX_BATCH - 1, *IMAGE]
    with pytest.raises(RuntimeError):
        module.forward([torch.randn(MAX_BATCH, *IMAGE)])
    _check(module, model, torch.randn(MAX_BATCH - 1, *IMAGE))
