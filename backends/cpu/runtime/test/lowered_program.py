"""Lowers a model with the real AOT side (CpuPartitioner + CpuBackend.preprocess) and runs it on the
real ExecuTorch runtime with the C++ CPU runtime, for the lowered-model tests."""

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.lowered_backend_module import LoweredBackendModule
from executorch.extension.pybindings import portable_lib

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.runtime import loader
from backends.cpu.serialization import graph_reader
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


def lower_to_pte(
    model: torch.nn.Module, inputs: tuple[Any, ...], dynamic_shapes: Any = None
) -> tuple[bytes, list[bytes]]:
    """Lowers `model` (with torch.export's `dynamic_shapes`, if any), requires every op to be
    delegated, returns the .pte and each delegate's payload, in graph order."""
    loader.load_cpu_backend()
    partitioner = CpuPartitioner()
    exported = torch.export.export(model.eval(), inputs, dynamic_shapes=dynamic_shapes)
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    assert not partitioner.report.left_out, partitioner.report
    payloads = [
        bytes(submodule.processed_bytes)
        for _, submodule in edge.exported_program().graph_module.named_children()
        if isinstance(submodule, LoweredBackendModule)
    ]
    assert payloads, "nothing was delegated"
    return bytes(edge.to_executorch().buffer), payloads


class _Several(torch.nn.Module):
    """Each case's model on its own inputs, in order: one program, every case's outputs."""

    def __init__(self, cases: Sequence[tuple[torch.nn.Module, tuple[Any, ...]]]) -> None:
        super().__init__()
        self.models = torch.nn.ModuleList([model for model, _ in cases])
        self.arity = [len(inputs) for _, inputs in cases]

    def forward(self, *inputs: Any) -> tuple[torch.Tensor, ...]:
        outputs: list[torch.Tensor] = []
        start = 0
        for model, arity in zip(self.models, self.arity, strict=True):
            result = model(*inputs[start : start + arity])
            outputs += list(result) if isinstance(result, (tuple, list)) else [result]
            start += arity
        return tuple(outputs)


def _op_cases(payload: bytes, output_cases: list[int]) -> dict[str, int]:
    """Which case each op of `payload` belongs to, by op name: ops that share a computed value
    or an input are one case's (the cases share nothing), named by the graph output they feed."""
    graph = graph_reader.read_payload(payload)
    parent = list(range(len(graph.values)))

    def root(value: int) -> int:
        while parent[value] != value:
            parent[value] = parent[parent[value]]
            value = parent[value]
        return value

    op_values = []
    for op in graph.ops:
        ids = [a.value for a in op.args if a.kind == graph_reader.ArgKind.TENSOR]
        for a in op.args:
            if a.kind in (
                graph_reader.ArgKind.TENSOR_LIST,
                graph_reader.ArgKind.OPTIONAL_TENSOR_LIST,
            ):
                ids += [i for i in a.value if i is not None]
        ids = [i for i in ids if graph.values[i].kind != graph_reader.ValueKind.CONSTANT]
        for i in ids[1:]:
            parent[root(i)] = root(ids[0])
        op_values.append(ids)
    assert len(graph.outputs) == len(output_cases), (graph.outputs, output_cases)
    case_of_root: dict[int, int] = {}
    for value, case in zip(graph.outputs, output_cases, strict=True):
        assert case_of_root.setdefault(root(value), case) == case, "two cases share ops"
    return {
        op.name: case_of_root[root(ids[0])] for op, ids in zip(graph.ops, op_values, strict=True)
    }


@dataclasses.dataclass
class LoweredCases:
    """Several independent cases lowered as one program (one delegate)."""

    pte: bytes
    payload: bytes
    # The program's inputs (every case's, in order) and eager's outputs for them.
    inputs: tuple[Any, ...]
    expected: tuple[torch.Tensor, ...]
    # The case of each program output, and of each payload op by op name.
    output_cases: list[int]
    op_cases: dict[str, int]


def lower_cases(cases: Sequence[tuple[torch.nn.Module, tuple[Any, ...]]]) -> LoweredCases:
    """Lowers the cases' models side by side as one program: the cost of one lowering for many
    cases. The cases share nothing, so each op belongs to the one case whose output it feeds."""
    several = _Several(cases).eval()
    flat = tuple(tensor for _, inputs in cases for tensor in inputs)
    # Eager runs each case once: its outputs are the combined program's expected outputs, in order
    # (_Several.forward calls the same models on the same inputs).
    expected_list: list[torch.Tensor] = []
    output_cases = []
    for case, (model, inputs) in enumerate(cases):
        with torch.no_grad():
            result = model(*inputs)
        outputs = list(result) if isinstance(result, (tuple, list)) else [result]
        expected_list += outputs
        output_cases += [case] * len(outputs)
    expected = tuple(expected_list)
    pte, payloads = lower_to_pte(several, flat)
    assert len(payloads) == 1, f"the cases were lowered into {len(payloads)} delegates"
    op_cases = _op_cases(payloads[0], output_cases)
    return LoweredCases(pte, payloads[0], flat, expected, output_cases, op_cases)


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


def assert_single_output_close(
    module: Any, model: torch.nn.Module, x: torch.Tensor, atol: float, rtol: float
) -> None:
    """A loaded program's one output on `x` has eager's shape and is within atol/rtol of it."""
    (actual,) = module.forward([x])
    with torch.no_grad():
        expected = model(x)
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)
