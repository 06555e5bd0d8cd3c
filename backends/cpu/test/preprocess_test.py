"""CpuBackend.preprocess: passes run, BN is gone, the payload round-trips, constants stored once."""

import pytest
import torch
from executorch.exir import EdgeProgramManager, to_edge, to_edge_transform_and_lower

import backends.cpu.cpu_backend as cpu_backend
from backends.cpu.cpu_backend import CpuBackend
from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.routes import ROUTES, RouteFlag
from backends.cpu.serialization.graph_reader import (
    ArgKind,
    ValueKind,
    cpu_payloads,
    read_payload,
)
from backends.cpu.serialization.schema import FORMAT_VERSION
from backends.cpu.test.models import (
    IndexHeavy,
    SmallCNN,
    cnn_inputs,
    index_heavy_inputs,
    randomize_batch_norm,
)

_BATCH_NORM = "aten._native_batch_norm_legit_no_training.default"


def _lower(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> EdgeProgramManager:
    program = torch.export.export(model, inputs)
    return to_edge_transform_and_lower(program, partitioner=[CpuPartitioner()])


def test_batch_norm_is_gone_after_preprocess() -> None:
    model = randomize_batch_norm(SmallCNN())
    edge = _lower(model, cnn_inputs())
    (payload,) = cpu_payloads(edge.exported_program())
    graph = read_payload(payload)
    assert _BATCH_NORM not in graph.routes()
    assert graph.routes().count("aten.convolution.default") == 2
    assert graph.routes().count("aten.linear.default") == 1
    # Fused conv weights and biases replace the originals; no BN statistics or affine params left.
    names = {str(value.constant_key).split("/")[1] for value in graph.constants()}
    folded = {name for name in model.state_dict() if name.startswith(("conv", "bn"))}
    assert not names & folded
    assert len([name for name in names if "fused" in name]) == 4
    assert {"fc.weight", "fc.bias"} <= names  # fc has no BN after it: its weights stay


def test_without_preprocess_passes_batch_norm_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    # CPU_PREPROCESS_PASSES is the extension point every lowering flow reads.
    monkeypatch.setattr(cpu_backend, "CPU_PREPROCESS_PASSES", [])
    edge = _lower(randomize_batch_norm(SmallCNN()), cnn_inputs())
    graph = read_payload(cpu_payloads(edge.exported_program())[0])
    assert graph.routes().count(_BATCH_NORM) == 2


def test_payload_round_trips_through_the_reader() -> None:
    edge = _lower(IndexHeavy(), index_heavy_inputs())
    program = edge.exported_program()
    graph = read_payload(cpu_payloads(program)[0])
    assert graph.version == FORMAT_VERSION
    scores, table = index_heavy_inputs()
    assert [(graph.values[i].dtype, graph.values[i].shape) for i in graph.inputs] == [
        (torch.float32, tuple(scores.shape)),
        (torch.int64, tuple(table.shape)),
    ]
    assert len(graph.outputs) == 4
    produced: set[int] = set()
    for op in graph.ops:
        route = ROUTES[op.route]
        assert (op.kernel, op.provider, op.flags) == (route.kernel, route.provider, route.flags)
        schema = route.out_variant()._schema
        assert len(op.args) == len(schema.arguments), op.name
        outs = [a for a, s in zip(op.args, schema.arguments, strict=True) if s.is_out]
        for arg in op.args:  # every tensor read is an input, a constant or an earlier result
            ids = [arg.value] if arg.kind == ArgKind.TENSOR else []
            if arg.kind in (ArgKind.TENSOR_LIST, ArgKind.OPTIONAL_TENSOR_LIST):
                ids = [i for i in arg.value if i is not None]
            for i in ids:
                if arg not in outs:
                    kind = graph.values[i].kind
                    assert i in produced or kind in (ValueKind.INPUT, ValueKind.CONSTANT)
        for out in outs:
            assert out.kind == ArgKind.TENSOR and out.value not in produced
            produced.add(out.value)
    assert set(graph.outputs) <= produced
    index = next(op for op in graph.ops if op.route == "aten.index.Tensor")
    assert index.flags == RouteFlag.OPTIONAL_TENSOR_LISTS
    assert index.args[1].kind == ArgKind.OPTIONAL_TENSOR_LIST and len(index.args[1].value) == 2
    assert "aten::index_put.out" in str(graph)


def test_constants_are_stored_once_under_their_keys() -> None:
    model = randomize_batch_norm(SmallCNN())
    edge = to_edge(torch.export.export(model, cnn_inputs()))
    result = CpuBackend.preprocess(edge.exported_program(), [])
    graph = read_payload(result.processed_bytes)
    store = result.data_store_output
    assert store is not None and not store.external_data
    keys = [value.constant_key for value in graph.constants()]
    assert len(keys) == len(set(keys)) == len(store.pte_data)
    assert set(keys) == set(store.pte_data)
    assert len(store.buffers) == len(keys)  # one buffer per constant: nothing stored twice
    for value in graph.constants():
        entry = store.pte_data[str(value.constant_key)]
        data = bytes(store.buffers[entry.buffer_index])
        assert len(data) == value.numel() * value.dtype.itemsize, value.name
        if len(data) >= 64:  # constant bytes never enter the payload itself
            assert data not in result.processed_bytes, value.name
