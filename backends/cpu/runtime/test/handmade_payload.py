"""Hand-built CPU-delegate payloads, wrapped in real `.pte` programs, for testing the C++ runtime.

The AOT side lowers real models; these tests need payloads it would never write (hostile ones,
mismatched dtypes, exact arena layouts), so they build the flatbuffer directly with the
flatc-generated Python bindings and let a stand-in `CpuBackend.preprocess` return it verbatim.
The stand-in shares the real backend's name, so a test process must not import the real
`backends.cpu.cpu_backend` as well.
"""

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import torch
from executorch.exir import EdgeProgramManager, to_edge
from executorch.exir._serialize._named_data_store import NamedDataStore
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.extension.pybindings import portable_lib
from torch.export import ExportedProgram

from backends.cpu.serialization.schema import fb

# schema.fbs enums (ExecuTorch ScalarType numbers for dtypes).
DTYPES = {
    torch.uint8: 0,
    torch.int8: 1,
    torch.int16: 2,
    torch.int32: 3,
    torch.int64: 4,
    torch.float32: 6,
    torch.bool: 11,
}
INTERMEDIATE, INPUT, OUTPUT, CONSTANT, STATE = 0, 1, 2, 3, 4
OPTIONAL_TENSOR_LISTS = 1


@dataclass
class Value:
    dtype: torch.dtype | int
    shape: Sequence[int]
    kind: int
    constant_key: str | None = None
    name: str = ""
    state_update: int = -1  # STATE (version 4): the value written back into it


@dataclass
class Op:
    kernel: str
    args: list[Any]  # fb.ArgumentT, from the helpers below
    route: str = ""
    flags: int = 0
    provider: int = 0
    name: str = ""


@dataclass
class Graph:
    values: list[Value]
    inputs: list[int]
    outputs: list[int]
    ops: list[Op]
    version: int = 1
    # constant_key -> bytes, stored in the program's named data.
    constants: dict[str, bytes] = field(default_factory=dict)


def _arg(kind: str, **fields: Any) -> Any:
    member = getattr(fb, f"{kind}T")()
    for name, value in fields.items():
        setattr(member, name, value)
    argument = fb.ArgumentT()
    argument.valueType = getattr(fb.Arg, kind)
    argument.value = member
    return argument


def tensor(value_id: int) -> Any:
    return _arg("TensorArg", value=value_id)


def tensor_list(ids: Sequence[int]) -> Any:
    return _arg("TensorListArg", values=list(ids))


def optional_tensor_list(ids: Sequence[int]) -> Any:
    return _arg("OptionalTensorListArg", values=list(ids))


def int_(value: int) -> Any:
    return _arg("IntArg", value=value)


def float_(value: float) -> Any:
    return _arg("DoubleArg", value=value)


def bool_(value: bool) -> Any:
    return _arg("BoolArg", value=value)


def int_list(values: Sequence[int]) -> Any:
    return _arg("IntListArg", values=list(values))


def none() -> Any:
    return _arg("NoneArg")


def add_graph(dtype: torch.dtype, shape: list[int]) -> Graph:
    """The smallest useful payload: output = input 0 + input 1 (`aten::add.out`, alpha 1)."""
    return Graph(
        values=[
            Value(dtype, shape, INPUT),
            Value(dtype, shape, INPUT),
            Value(dtype, shape, OUTPUT),
        ],
        inputs=[0, 1],
        outputs=[2],
        ops=[Op("aten::add.out", [tensor(0), tensor(1), int_(1), tensor(2)])],
    )


def payload_bytes(graph: Graph) -> bytes:
    """Serializes `graph` as the AOT writer would (file identifier included)."""
    root = fb.GraphT()
    root.version = graph.version
    root.values = []
    for index, value in enumerate(graph.values):
        packed = fb.ValueT()
        packed.dtype = DTYPES[value.dtype] if isinstance(value.dtype, torch.dtype) else value.dtype
        packed.shape = list(value.shape)
        packed.kind = value.kind
        packed.constantKey = value.constant_key
        packed.name = value.name or f"v{index}"
        packed.stateUpdate = value.state_update
        root.values.append(packed)
    root.inputs = list(graph.inputs)
    root.outputs = list(graph.outputs)
    root.ops = []
    for index, op in enumerate(graph.ops):
        packed_op = fb.OpT()
        packed_op.route = op.route or op.kernel
        packed_op.kernel = op.kernel
        packed_op.provider = op.provider
        packed_op.flags = op.flags
        packed_op.args = op.args
        packed_op.name = op.name or f"op{index}"
        root.ops.append(packed_op)
    builder = flatbuffers.Builder(1024)
    builder.Finish(root.Pack(builder), b"ECP1")
    return bytes(builder.Output())


class CpuBackend(BackendDetails):
    """Stand-in for the AOT backend: its payload is whatever the compile specs carry."""

    @staticmethod
    def preprocess(
        edge_program: ExportedProgram, compile_specs: list[CompileSpec]
    ) -> PreprocessResult:
        store = NamedDataStore()
        payload = b""
        for spec in compile_specs:
            if spec.key == "payload":
                payload = bytes(spec.value)
            elif spec.key.startswith("constant:"):
                store.add_named_data(spec.key[len("constant:") :], bytes(spec.value), alignment=16)
        return PreprocessResult(
            processed_bytes=payload, data_store_output=store.get_named_data_store_output()
        )


class _DelegateEverything(Partitioner):
    def __init__(self, specs: list[CompileSpec]) -> None:
        super().__init__()
        self.delegation = DelegationSpec(CpuBackend.__name__, specs)

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        for node in exported_program.graph_module.graph.nodes:
            if node.op == "call_function":
                node.meta["delegation_tag"] = "cpu_handmade"
        return PartitionResult(
            tagged_exported_program=exported_program,
            partition_tags={"cpu_handmade": self.delegation},
        )


class Lambda(torch.nn.Module):
    """A module from a function: gives the delegate its call signature."""

    def __init__(self, function: Callable[..., Any]) -> None:
        super().__init__()
        self.function = function

    def forward(self, *args: torch.Tensor) -> Any:
        return self.function(*args)


def program(
    function: Callable[..., Any],
    example_inputs: tuple[torch.Tensor, ...],
    graph: Graph | bytes,
) -> bytes:
    """A `.pte` whose whole graph is one CpuBackend delegate carrying `graph` (or raw bytes).

    `function` only shapes the delegate's inputs and outputs (their count, dtypes and shapes as
    the outer program plans them); what runs is the payload.
    """
    payload = graph if isinstance(graph, bytes) else payload_bytes(graph)
    specs = [CompileSpec("payload", payload)]
    if isinstance(graph, Graph):
        specs += [CompileSpec(f"constant:{key}", data) for key, data in graph.constants.items()]
    edge = copy.deepcopy(_edge_program(function, example_inputs))
    lowered = edge.to_backend(_DelegateEverything(specs))
    return bytes(lowered.to_executorch().buffer)


# portable_lib does not keep a program's buffer alive (see FACTS.md): every loaded one stays here.
_LOADED_BUFFERS: list[bytes] = []


def load_program(pte: bytes) -> Any:
    """Loads `pte` on the ExecuTorch runtime, keeping its buffer alive for the process's life."""
    _LOADED_BUFFERS.append(pte)
    return portable_lib._load_for_executorch_from_buffer(pte)


_EDGE_CACHE: dict[tuple[Any, ...], EdgeProgramManager] = {}


def _edge_program(
    function: Callable[..., Any], example_inputs: tuple[torch.Tensor, ...]
) -> EdgeProgramManager:
    """Export + to_edge, the slow part (about 1.5 s), once per function body and input signature."""
    key = (function.__code__, tuple((tuple(t.shape), t.dtype) for t in example_inputs))
    if key not in _EDGE_CACHE:
        exported = torch.export.export(Lambda(function), example_inputs)
        _EDGE_CACHE[key] = to_edge(exported)
    return _EDGE_CACHE[key]
