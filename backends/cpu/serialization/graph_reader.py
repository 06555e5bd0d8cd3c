"""Reads a CPU-delegate payload back into plain Python objects (tests, lowering reports, debugging).

`read_payload(bytes)` checks the file identifier, the format version and that every value id is in
range, and returns a `PayloadGraph`; `str(graph)` prints it one op per line. `cpu_payloads(program)`
finds the CpuBackend payloads of a lowered program.
"""

import enum
from dataclasses import dataclass
from typing import Any

import torch
from torch.export import ExportedProgram

from backends.cpu.routes import Provider, RouteFlag
from backends.cpu.serialization.schema import FILE_IDENTIFIER, FORMAT_VERSION, fb

_DTYPES: dict[int, torch.dtype] = {
    0: torch.uint8,
    1: torch.int8,
    2: torch.int16,
    3: torch.int32,
    4: torch.int64,
    6: torch.float32,
    11: torch.bool,
}


class PayloadError(ValueError):
    """The bytes are not a payload this reader understands; the message says what is wrong."""


class ValueKind(enum.IntEnum):
    """Mirrors `ValueKind` in schema.fbs."""

    INTERMEDIATE = 0
    INPUT = 1
    OUTPUT = 2
    CONSTANT = 3
    STATE = 4  # version 4: a mutated buffer the delegate owns (initial bytes under constant_key)


class ArgKind(enum.Enum):
    """Which member of the schema's `Arg` union an argument holds."""

    TENSOR = "TensorArg"
    TENSOR_LIST = "TensorListArg"
    OPTIONAL_TENSOR_LIST = "OptionalTensorListArg"  # None entries read back as None
    INT = "IntArg"
    DOUBLE = "DoubleArg"
    BOOL = "BoolArg"
    INT_LIST = "IntListArg"
    DOUBLE_LIST = "DoubleListArg"
    BOOL_LIST = "BoolListArg"
    SCALAR_TYPE = "ScalarTypeArg"
    NONE = "NoneArg"
    STRING = "StringArg"


@dataclass(frozen=True)
class PayloadValue:
    id: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    kind: ValueKind
    constant_key: str | None
    name: str
    state_update: int = -1  # STATE: the value written back into it after every call

    def numel(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count


@dataclass(frozen=True)
class PayloadArg:
    kind: ArgKind
    # TENSOR: value id; lists: tuple of ids/numbers (None for absent optional tensors);
    # SCALAR_TYPE: ExecuTorch ScalarType number; NONE: None.
    value: Any


@dataclass(frozen=True)
class PayloadOp:
    route: str
    kernel: str
    provider: Provider
    flags: RouteFlag
    args: tuple[PayloadArg, ...]
    name: str


@dataclass(frozen=True)
class PayloadGraph:
    version: int
    values: tuple[PayloadValue, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    ops: tuple[PayloadOp, ...]

    def constants(self) -> tuple[PayloadValue, ...]:
        return tuple(v for v in self.values if v.kind == ValueKind.CONSTANT)

    def states(self) -> tuple[PayloadValue, ...]:
        return tuple(v for v in self.values if v.kind == ValueKind.STATE)

    def routes(self) -> list[str]:
        """Route key of every op, in execution order."""
        return [op.route for op in self.ops]

    def __str__(self) -> str:
        def value(i: int) -> str:
            v = self.values[i]
            dtype = str(v.dtype).removeprefix("torch.")
            return f"%{i}:{v.name}:{dtype}{list(v.shape)}"

        def arg(a: PayloadArg) -> str:
            if a.kind == ArgKind.TENSOR:
                return value(a.value)
            if a.kind in (ArgKind.TENSOR_LIST, ArgKind.OPTIONAL_TENSOR_LIST):
                return "[" + ", ".join("None" if i is None else value(i) for i in a.value) + "]"
            return repr(a.value)

        lines = [f"CPU payload v{self.version}: {len(self.values)} values, {len(self.ops)} ops"]
        lines += [f"  input {value(i)}" for i in self.inputs]
        lines += [f"  const {value(v.id)} <- {v.constant_key}" for v in self.constants()]
        for op in self.ops:
            provider = op.provider.name.lower()
            lines.append(f"  {op.kernel} [{provider}] ({', '.join(arg(a) for a in op.args)})")
        lines += [f"  output {value(i)}" for i in self.outputs]
        return "\n".join(lines)


def read_payload(payload: bytes) -> PayloadGraph:
    """Decodes and checks a payload written by graph_writer; raises PayloadError otherwise."""
    if len(payload) < 8 or payload[4:8] != FILE_IDENTIFIER:
        raise PayloadError(
            f"not a CPU delegate payload: file identifier {payload[4:8]!r}, "
            f"expected {FILE_IDENTIFIER!r}"
        )
    try:
        graph = fb.GraphT.InitFromObj(fb.Graph.GetRootAs(payload, 0))
    except Exception as error:  # flatbuffers raises assorted errors on corrupt offsets
        raise PayloadError(f"corrupt CPU delegate payload: {error}") from error
    if not 1 <= graph.version <= FORMAT_VERSION:
        raise PayloadError(
            f"CPU delegate payload format version {graph.version}, this reader reads 1 to "
            f"{FORMAT_VERSION}"
        )
    values = tuple(_value(i, v) for i, v in enumerate(graph.values or []))
    count = len(values)

    def check_id(value_id: int, where: str) -> int:
        if not 0 <= value_id < count:
            raise PayloadError(f"{where}: value id {value_id} out of range [0, {count})")
        return value_id

    for state in values:
        if state.kind == ValueKind.STATE:
            update = check_id(state.state_update, f"state '{state.name}'")
            if (values[update].dtype, values[update].shape) != (state.dtype, state.shape):
                raise PayloadError(
                    f"state '{state.name}': its update '{values[update].name}' has another dtype "
                    "or shape"
                )
        elif state.state_update != -1:
            raise PayloadError(f"value {state.id} ('{state.name}'): state_update on a {state.kind}")
    inputs = tuple(check_id(int(i), "inputs") for i in _list(graph.inputs))
    outputs = tuple(check_id(int(i), "outputs") for i in _list(graph.outputs))
    for i in inputs:
        if values[i].kind != ValueKind.INPUT:
            raise PayloadError(f"inputs: value {i} ('{values[i].name}') has kind {values[i].kind}")
    for i in outputs:
        if values[i].kind != ValueKind.OUTPUT:
            raise PayloadError(f"outputs: value {i} ('{values[i].name}') has kind {values[i].kind}")
    ops = []
    for op in graph.ops or []:
        name = _str(op.name)
        args = tuple(_arg(a, check_id, f"op '{name}'") for a in op.args or [])
        ops.append(
            PayloadOp(
                route=_str(op.route),
                kernel=_str(op.kernel),
                provider=Provider(op.provider),
                flags=RouteFlag(op.flags),
                args=args,
                name=name,
            )
        )
    return PayloadGraph(graph.version, values, inputs, outputs, tuple(ops))


def cpu_payloads(program: ExportedProgram) -> list[bytes]:
    """The CpuBackend payloads of a lowered program, in graph order."""
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    payloads = []
    for _, module in program.graph_module.named_children():
        if isinstance(module, LoweredBackendModule) and module.backend_id == "CpuBackend":
            payloads.append(bytes(module.processed_bytes))
    return payloads


def _str(raw: object) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw or "")


def _list(raw: object) -> list[Any]:
    return [] if raw is None else list(raw)  # type: ignore[call-overload]


def _value(index: int, raw: Any) -> PayloadValue:
    name = _str(raw.name)
    if raw.dtype not in _DTYPES:
        raise PayloadError(f"value {index} ('{name}'): unknown dtype {raw.dtype}")
    kind = ValueKind(raw.kind)
    key = _str(raw.constantKey) if raw.constantKey is not None else None
    if kind in (ValueKind.CONSTANT, ValueKind.STATE) and not key:
        raise PayloadError(
            f"value {index} ('{name}'): a {kind.name.lower()} without a constant_key"
        )
    shape = tuple(int(d) for d in _list(raw.shape))
    update = int(getattr(raw, "stateUpdate", -1))
    return PayloadValue(index, _DTYPES[raw.dtype], shape, kind, key, name, update)


def _arg(raw: Any, check_id: Any, where: str) -> PayloadArg:
    kinds = {getattr(fb.Arg, kind.value): kind for kind in ArgKind}
    kind = kinds.get(raw.valueType)
    if kind is None:
        raise PayloadError(f"{where}: unknown argument type {raw.valueType}")
    member = raw.value
    if kind == ArgKind.TENSOR:
        return PayloadArg(kind, check_id(member.value, where))
    if kind == ArgKind.TENSOR_LIST:
        return PayloadArg(kind, tuple(check_id(int(i), where) for i in _list(member.values)))
    if kind == ArgKind.OPTIONAL_TENSOR_LIST:
        ids = tuple(None if i == -1 else check_id(int(i), where) for i in _list(member.values))
        return PayloadArg(kind, ids)
    if kind == ArgKind.NONE:
        return PayloadArg(kind, None)
    if kind == ArgKind.STRING:
        return PayloadArg(kind, _str(member.value))
    if kind in (ArgKind.INT_LIST, ArgKind.DOUBLE_LIST, ArgKind.BOOL_LIST):
        convert = {ArgKind.INT_LIST: int, ArgKind.DOUBLE_LIST: float, ArgKind.BOOL_LIST: bool}
        return PayloadArg(kind, tuple(convert[kind](v) for v in _list(member.values)))
    return PayloadArg(kind, member.value)
