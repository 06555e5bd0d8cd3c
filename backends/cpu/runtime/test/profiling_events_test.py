"""Issue 21: the delegate's per-op profiling events, read back the way users read them: ETDump
written by the real runtime, ETRecord from the real lowering, ExecuTorch's Inspector."""

from pathlib import Path
from typing import Any

import torch
from executorch.devtools import Inspector
from executorch.exir import to_edge_transform_and_lower
from executorch.extension.pybindings import portable_lib

from backends.cpu import profiling_events
from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.runtime import loader
from backends.cpu.runtime.test.provider_compare import reference_routes
from tools.lower.examples import ResNetLike, randomize_batch_norm_statistics

RUNS = 5


def _resnet() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    # Wide and large enough that the kernels, not the per-call bookkeeping, take the time.
    torch.manual_seed(0)
    model = randomize_batch_norm_statistics(ResNetLike(width=16, depth=(1, 1))).eval()
    return model, (torch.randn(1, 3, 128, 128, generator=torch.Generator().manual_seed(0)),)


def _profile(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], workdir: Path
) -> tuple[Inspector, list[str]]:
    """Lowers with an ETRecord, runs RUNS times with ETDump; returns the Inspector over both and
    the placement of the delegate's ops."""
    loader.load_cpu_backend()
    exported = torch.export.export(model, inputs)
    edge = to_edge_transform_and_lower(
        exported, partitioner=[CpuPartitioner()], generate_etrecord=True
    )
    program = edge.to_executorch()
    etrecord = workdir / "model.etrecord"
    program.get_etrecord().save(str(etrecord))
    pte = bytes(program.buffer)
    module = portable_lib._load_for_executorch_from_buffer(pte, enable_etdump=True)
    for _ in range(RUNS):
        module.forward(list(inputs))
    placement = loader.last_placement()
    etdump = workdir / "model.etdp"
    module.write_etdump_result_to_file(str(etdump))
    del module
    return Inspector(etdump_path=str(etdump), etrecord=str(etrecord)), placement


def _expected_events(placement: list[str]) -> dict[str, list[str]]:
    """Event name -> the nodes it covers, from the runtime's placement log: each op that runs
    its own kernel, with the ops fused into it."""
    groups: dict[str, list[str]] = {}
    providers: dict[str, int] = {}
    for line in placement:
        head, _, where = line.partition(": ")
        parts = head.split(" ")
        if len(parts) != 2 or "::" not in parts[1]:
            continue  # a provider's summary line
        node = parts[0]
        if where.endswith("(aliases its input: no copy)"):
            continue  # a view sharing its input's bytes: never called, no event
        if where.startswith("fused into "):
            groups[where.removeprefix("fused into ").split(" ")[0]].append(node)
        else:
            groups[node] = [node]
            providers[node] = 0 if where.startswith("Reference") else 1
    return {profiling_events.event_name(nodes, providers[h]): nodes for h, nodes in groups.items()}


def _execute_events(inspector: Inspector) -> list[Any]:
    (block,) = [b for b in inspector.event_blocks if b.name == "Execute"]
    return list(block.events)


def _delegate_call(events: list[Any]) -> Any:
    (call,) = [e for e in events if e.name == "DELEGATE_CALL"]
    return call


def test_one_linked_event_per_kernel_call_adding_up_to_the_delegate_call(
    tmp_path: Path,
) -> None:
    model, inputs = _resnet()
    inspector, placement = _profile(model, inputs, tmp_path)
    events = _execute_events(inspector)
    ours = [e for e in events if e.is_delegated_op]
    expected = _expected_events(placement)
    assert sorted(e.name for e in ours) == sorted(expected)
    # The example fuses: some events cover several nodes (conv + relu, conv + add + relu).
    assert any(" + " in e.name for e in ours)
    for event in ours:
        assert event.delegate_backend_name == "CpuBackend"
        assert len(event.perf_data.raw) == RUNS
        assert all(ms > 0 for ms in event.perf_data.raw), event.name
        # Linked through the ETRecord: the op types of every node the event covers, including
        # the batch norms folded into the convolutions.
        assert event.debug_handles, event.name
        if "aten_convolution_default" in event.name:
            assert "aten.convolution.default" in event.op_types
            assert "aten._native_batch_norm_legit_no_training.default" in event.op_types
    call = _delegate_call(events)
    ops_ms = sum(sum(e.perf_data.raw) for e in ours)
    call_ms = sum(call.perf_data.raw)
    # The rest of the call: checking the inputs and outputs, and logging the events.
    assert 0.9 * call_ms <= ops_ms <= call_ms, (ops_ms, call_ms)


def test_ops_on_reference_kernels_are_named_and_linked_too(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    inputs = (torch.randn(1, 3, 8, 8),)
    with reference_routes():
        inspector, _ = _profile(model, inputs, tmp_path)
    ours = [e for e in _execute_events(inspector) if e.is_delegated_op]
    assert sorted(e.name for e in ours) == [
        "aten_convolution_default (Reference)",
        "aten_relu_default (Reference)",
    ]
    assert [e.op_types for e in sorted(ours, key=lambda e: e.name)] == [
        ["aten.convolution.default"],
        ["aten.relu.default"],
    ]


def test_the_map_covers_groups_as_long_as_the_runtime_fuses() -> None:
    loader.load_cpu_backend()
    assert loader.max_fused_steps() == profiling_events.MAX_FUSED_STEPS
