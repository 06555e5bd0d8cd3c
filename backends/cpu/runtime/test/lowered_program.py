"""Lowers a model with the real AOT side (CpuPartitioner + CpuBackend.preprocess) and runs it on the
real ExecuTorch runtime with the C++ CPU runtime, for the lowered-model tests."""

from typing import Any

import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.lowered_backend_module import LoweredBackendModule
from executorch.extension.pybindings import portable_lib

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.runtime import loader
from backends.cpu.serialization.schema import fb

# Float tolerance: ExecuTorch's kernels accumulate in a different order than eager (and BN is folded
# into the weights), so results differ by rounding only.
ATOL = 1e-4
RTOL = 1e-4

# The runtime does not own a program's buffer (see FACTS.md): keep every one alive.
_BUFFERS: list[bytes] = []


def lower(model: torch.nn.Module, inputs: tuple[Any, ...]) -> tuple[Any, list[list[str]]]:
    """Lowers `model`, requires every op to be delegated, returns the loaded module and each
    delegate's kernel list."""
    pte, payloads = lower_to_pte(model, inputs)
    kernels = []
    for payload in payloads:
        graph = fb.Graph.GetRootAs(payload, 0)
        kernels.append([graph.Ops(i).Kernel().decode() for i in range(graph.OpsLength())])
    return load(pte), kernels


def load(pte: bytes) -> Any:
    """`pte` loaded on the ExecuTorch runtime (its delegates are initialized on first forward)."""
    loader.load_cpu_backend()
    _BUFFERS.append(pte)
    return portable_lib._load_for_executorch_from_buffer(pte)


def lower_to_pte(model: torch.nn.Module, inputs: tuple[Any, ...]) -> tuple[bytes, list[bytes]]:
    """Lowers `model`, requires every op to be delegated, returns the .pte and each delegate's
    payload, in graph order."""
    loader.load_cpu_backend()
    partitioner = CpuPartitioner()
    exported = torch.export.export(model.eval(), inputs)
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    assert not partitioner.report.left_out, partitioner.report
    payloads = [
        bytes(submodule.processed_bytes)
        for _, submodule in edge.exported_program().graph_module.named_children()
        if isinstance(submodule, LoweredBackendModule)
    ]
    assert payloads, "nothing was delegated"
    return bytes(edge.to_executorch().buffer), payloads


def run(model: torch.nn.Module, inputs: tuple[Any, ...]) -> tuple[list[Any], list[Any], Any]:
    module, kernels = lower(model, inputs)
    actual = module.forward(list(inputs))
    expected = model(*inputs)
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    assert len(actual) == len(expected)
    return actual, expected, kernels


def assert_exact(actual: list[Any], expected: list[Any]) -> None:
    for got, want in zip(actual, expected, strict=True):
        assert got.dtype == want.dtype
        assert torch.equal(got, want), (got, want)
