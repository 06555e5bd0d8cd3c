"""Writes a CPU-delegate subgraph (an Edge ExportedProgram) as a schema.fbs payload.

Each op is written with its route and its arguments in the out-variant kernel's schema order, the
out tensors last, so the runtime can call the kernel without knowing the op. Constant bytes go to
ExecuTorch's named data store under a stable key, once each; the payload only names the key.
A mutated buffer the partitioner moved into the delegate (a KV cache) is a State value: its
initial bytes are stored like a constant's, and `state_update` names the op result that the
program's BUFFER_MUTATION output writes back into it (that output is not a delegate output).
"""

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import torch
from executorch.exir._serialize._named_data_store import NamedDataStore, NamedDataStoreOutput
from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind

from backends.cpu import symbolic_dims
from backends.cpu.routes import Route, aten_overload, op_key, route_for
from backends.cpu.serialization.schema import FILE_IDENTIFIER, FORMAT_VERSION, fb
from backends.cpu.symbolic_dims import is_size_node

# Constant bytes are aligned for vector loads.
CONSTANT_ALIGNMENT = 16

# Tensor dtypes the payload can describe; values are schema.fbs `DType` (ExecuTorch ScalarType).
SUPPORTED_DTYPES: dict[torch.dtype, int] = {
    torch.uint8: 0,
    torch.int8: 1,
    torch.int16: 2,
    torch.int32: 3,
    torch.int64: 4,
    torch.float32: 6,
    torch.bool: 11,
}

# ExecuTorch ScalarType numbers, for `ScalarType` arguments (e.g. a `dtype=` keyword).
_SCALAR_TYPE_NUMBERS: dict[torch.dtype, int] = {
    **SUPPORTED_DTYPES,
    torch.float16: 5,
    torch.float64: 7,
    torch.bfloat16: 15,
}


class SerializationError(ValueError):
    """The program cannot be expressed in the payload; the message names the node."""


@dataclass
class SerializedGraph:
    """What `serialize_program` produced."""

    payload: bytes
    named_data: NamedDataStoreOutput
    # Placeholder node name -> key under which its bytes sit in the named data store.
    constant_keys: dict[str, str] = field(default_factory=dict)
    # (FX node name, route provider id) of each op, in payload order.
    ops: list[tuple[str, int]] = field(default_factory=list)


def serialize_program(program: ExportedProgram) -> SerializedGraph:
    """Serializes `program` (every call node must have a route) into a payload and named data.

    Raises SerializationError naming the node for anything the format or the runtime cannot take:
    ops without a route, unsupported dtypes, symbolic shapes, a mutated buffer with a symbolic
    shape or without its write-back, mutated user inputs.
    """
    return _Writer(program).write()


def _describe(node: torch.fx.Node) -> str:
    key = op_key(node.target)
    return f"node '{node.name}'" + (f" ({key})" if key else "")


def _strip_optional(type_name: str) -> tuple[str, bool]:
    if type_name.startswith("Optional[") and type_name.endswith("]"):
        return type_name[len("Optional[") : -1], True
    return type_name, False


def _argument(kind: str, **fields: Any) -> Any:
    """An fb.ArgumentT holding one union member (`kind` is the member's table name)."""
    member = getattr(fb, f"{kind}T")()
    for name, value in fields.items():
        setattr(member, name, value)
    argument = fb.ArgumentT()
    argument.valueType = getattr(fb.Arg, kind)
    argument.value = member
    return argument


class _Writer:
    def __init__(self, program: ExportedProgram) -> None:
        self.program = program
        self.values: list[Any] = []  # fb.ValueT
        self.value_ids: dict[torch.fx.Node, list[int]] = {}  # node -> its output value ids
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.ops: list[Any] = []  # fb.OpT
        self.store = NamedDataStore()
        self.constant_keys: dict[str, str] = {}
        self.symbols: list[Any] = []  # fb.SymbolT, in order of first use
        self.symbol_ids: dict[str, int] = {}
        self.state_ids: dict[str, int] = {}  # mutated buffer fqn -> its State value id
        self.state_updates: set[int] = set()  # value ids written back into a state

    def write(self) -> SerializedGraph:
        for node in self.program.graph.nodes:
            if node.op == "placeholder":
                self._placeholder(node)
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                self._output(node)
            else:
                raise SerializationError(
                    f"{_describe(node)}: unsupported FX node kind '{node.op}' "
                    "(constants must be lifted to placeholders before serialization)"
                )
        graph = fb.GraphT()
        graph.version = FORMAT_VERSION
        graph.values = self.values
        graph.inputs = self.inputs
        graph.outputs = self.outputs
        graph.ops = self.ops
        graph.symbols = self.symbols
        builder = flatbuffers.Builder(1024)
        builder.Finish(graph.Pack(builder), FILE_IDENTIFIER)
        return SerializedGraph(
            payload=bytes(builder.Output()),
            named_data=self.store.get_named_data_store_output(),
            constant_keys=self.constant_keys,
            ops=[(op.name, op.provider) for op in self.ops],
        )

    # Values.

    def _new_value(self, node: torch.fx.Node, tensor: object, kind: int, name: str) -> int:
        if not isinstance(tensor, torch.Tensor):
            raise SerializationError(
                f"{_describe(node)}: expected a tensor value, got {type(tensor).__name__} "
                "(symbolic scalars are not supported)"
            )
        if tensor.dtype not in SUPPORTED_DTYPES:
            raise SerializationError(
                f"{_describe(node)}: unsupported dtype {tensor.dtype} "
                f"(supported: {', '.join(str(d) for d in SUPPORTED_DTYPES)})"
            )
        shape, dim_min, exprs = [], [], []
        for dim in tensor.shape:
            expr, bounds = self._size(node, dim)
            exprs.append(expr)
            shape.append(symbolic_dims.evaluate(*bounds, upper=True))
            dim_min.append(symbolic_dims.evaluate(*bounds, upper=False))
        value = fb.ValueT()
        value.dtype = SUPPORTED_DTYPES[tensor.dtype]
        value.shape = shape
        if any(expr.symbols for expr in exprs):  # bounds only for a tensor with a symbolic size
            value.dimMin = dim_min
            value.dimMax = shape
            value.dimExprs = exprs
        value.kind = kind
        value.name = name
        self.values.append(value)
        return len(self.values) - 1

    def _size(
        self, node: torch.fx.Node, size: object
    ) -> tuple[Any, tuple[symbolic_dims.Affine, dict[str, symbolic_dims.SymbolBounds]]]:
        """A size (an int, a SymInt or a size node) as an fb.SymExprT, with its symbols' bounds."""
        if isinstance(size, torch.fx.Node):
            size = size.meta.get("val")
        if isinstance(size, bool) or not isinstance(size, (int, torch.SymInt)):
            raise SerializationError(f"{_describe(node)}: expected a size, got {size!r}")
        try:
            affine, bounds = symbolic_dims.affine_size(size)
        except symbolic_dims.UnsupportedSize as error:
            raise SerializationError(f"{_describe(node)}: {error}") from error
        expr = fb.SymExprT()
        expr.offset = affine.offset
        expr.symbols = []
        expr.coeffs = []
        for (name, coeff), bound in zip(affine.terms, bounds, strict=True):
            if name not in self.symbol_ids:
                symbol = fb.SymbolT()
                symbol.name, symbol.min, symbol.max = name, bound.min, bound.max
                self.symbol_ids[name] = len(self.symbols)
                self.symbols.append(symbol)
            expr.symbols.append(self.symbol_ids[name])
            expr.coeffs.append(coeff)
        return expr, (affine, {bound.name: bound for bound in bounds})

    def _placeholder(self, node: torch.fx.Node) -> None:
        signature = self.program.graph_signature
        buffer_fqn = signature.inputs_to_buffers.get(node.name)
        if buffer_fqn is not None and buffer_fqn in signature.buffers_to_mutate.values():
            self._state(node, buffer_fqn)
            return
        constant_fqn = (
            signature.inputs_to_parameters.get(node.name)
            or signature.inputs_to_buffers.get(node.name)
            or signature.inputs_to_lifted_tensor_constants.get(node.name)
        )
        if constant_fqn is None:
            value_id = self._new_value(node, node.meta.get("val"), fb.ValueKind.Input, node.name)
            self.inputs.append(value_id)
            self.value_ids[node] = [value_id]
            return
        if not node.users:
            return  # an unused constant never reaches the payload or the data store
        tensor = self._constant_tensor(node, constant_fqn)
        value_id = self._new_value(node, tensor, fb.ValueKind.Constant, node.name)
        self._store_bytes(node, constant_fqn, tensor, value_id)

    def _store_bytes(
        self, node: torch.fx.Node, fqn: str, tensor: torch.Tensor, value_id: int
    ) -> None:
        data = tensor.detach().contiguous().numpy().tobytes()
        # Stable across runs, unique across delegates of one program (the store rejects one key
        # with two contents), and readable when debugging.
        key = f"cpu/{fqn}/{hashlib.sha256(data).hexdigest()[:16]}"
        self.store.add_named_data(key, data, alignment=CONSTANT_ALIGNMENT)
        self.values[value_id].constantKey = key
        self.constant_keys[node.name] = key
        self.value_ids[node] = [value_id]

    def _state(self, node: torch.fx.Node, fqn: str) -> None:
        """A mutated buffer the delegate owns: a State value, initialized from its current bytes."""
        tensor = self._constant_tensor(node, fqn)
        if any(not isinstance(dim, int) for dim in tensor.shape):
            raise SerializationError(
                f"{_describe(node)}: mutated buffer '{fqn}' has a symbolic shape"
            )
        value_id = self._new_value(node, tensor, fb.ValueKind.State, node.name)
        self._store_bytes(node, fqn, tensor, value_id)
        self.state_ids[fqn] = value_id

    def _constant_tensor(self, node: torch.fx.Node, fqn: str) -> torch.Tensor:
        tensor = self.program.state_dict.get(fqn)
        if tensor is None:
            tensor = self.program.constants.get(fqn)
        if not isinstance(tensor, torch.Tensor):
            raise SerializationError(
                f"{_describe(node)}: constant '{fqn}' is in the graph signature but neither in "
                "the state dict nor in the constants table"
            )
        return tensor

    def _value_id(self, node: torch.fx.Node, arg: object, arg_name: str) -> int:
        if not isinstance(arg, torch.fx.Node):
            raise SerializationError(
                f"{_describe(node)}: argument '{arg_name}' must be a tensor, got {arg!r}"
            )
        ids = self.value_ids.get(arg)
        if ids is None or len(ids) != 1:
            raise SerializationError(
                f"{_describe(node)}: argument '{arg_name}' refers to '{arg.name}', which is not "
                "a serialized tensor"
            )
        return ids[0]

    def _output(self, node: torch.fx.Node) -> None:
        (results,) = node.args
        results = list(results) if isinstance(results, (list, tuple)) else [results]
        specs = self.program.graph_signature.output_specs
        if len(specs) != len(results):
            raise SerializationError(
                f"the graph has {len(results)} outputs but its signature {len(specs)} output specs"
            )
        for result, spec in zip(results, specs, strict=True):
            value_id = self._value_id(node, result, "output")
            value = self.values[value_id]
            if spec.kind == OutputKind.BUFFER_MUTATION:
                self._state_update(spec.target, value_id)
                continue
            if spec.kind != OutputKind.USER_OUTPUT:
                raise SerializationError(
                    f"output '{value.name}' is a {spec.kind.name} output (target "
                    f"{spec.target}), which the delegate cannot write back"
                )
            if value.kind != fb.ValueKind.Intermediate:
                # The runtime writes each op's result straight into the caller's output tensor.
                raise SerializationError(
                    f"output '{value.name}' is a delegate input, a constant or a repeated output; "
                    "each delegate output must be a distinct op result"
                )
            value.kind = fb.ValueKind.Output
            self.outputs.append(value_id)
        for fqn, state_id in self.state_ids.items():
            if self.values[state_id].stateUpdate < 0:
                raise SerializationError(
                    f"mutated buffer '{fqn}' ({self.values[state_id].name}) has no write-back "
                    "output in the delegate's program"
                )

    def _state_update(self, fqn: str | None, value_id: int) -> None:
        """Records that the op result `value_id` is written back into the state of buffer `fqn`."""
        state_id = self.state_ids.get(fqn or "")
        value = self.values[value_id]
        if state_id is None:
            raise SerializationError(
                f"output '{value.name}' writes buffer '{fqn}', which is not an input of the "
                "delegate's program"
            )
        state = self.values[state_id]
        if value.kind != fb.ValueKind.Intermediate:
            raise SerializationError(
                f"buffer '{fqn}' is written back from '{value.name}', which is not an op result "
                "(or is written back twice)"
            )
        same_type = value.dtype == state.dtype and list(value.shape) == list(state.shape)
        if not same_type or value.dimExprs:
            raise SerializationError(
                f"buffer '{fqn}' is written back from '{value.name}', whose dtype or shape differs"
            )
        if state.stateUpdate >= 0 or value_id in self.state_updates:
            raise SerializationError(
                f"buffer '{fqn}' is written back twice, or '{value.name}' writes two buffers"
            )
        state.stateUpdate = value_id
        self.state_updates.add(value_id)

    # Ops.

    def _call(self, node: torch.fx.Node) -> None:
        if node.target.__name__ == "getitem":  # type: ignore[union-attr]
            # Not an op: aliases one out tensor of a multi-output op.
            source, index = node.args
            assert isinstance(source, torch.fx.Node) and isinstance(index, int)
            self.value_ids[node] = [self.value_ids[source][index]]
            return
        if is_size_node(node):
            return  # not an op: its readers write the size as an expression (_size)
        route = route_for(node.target)
        if route is None:
            raise SerializationError(
                f"{_describe(node)}: no CPU route for op {node.target} (see backends/cpu/routes.py)"
            )
        for arg in node.all_input_nodes:
            if not isinstance(arg.meta.get("val"), torch.Tensor) and not is_size_node(arg):
                raise SerializationError(
                    f"{_describe(node)}: input '{arg.name}' is not a tensor (symbolic scalars are "
                    "not supported)"
                )
        results = node.meta.get("val")
        tensors = list(results) if isinstance(results, (tuple, list)) else [results]
        out_ids = [
            self._new_value(node, tensor, fb.ValueKind.Intermediate, f"{node.name}[{i}]")
            if len(tensors) > 1
            else self._new_value(node, tensor, fb.ValueKind.Intermediate, node.name)
            for i, tensor in enumerate(tensors)
        ]
        self.value_ids[node] = out_ids
        op = fb.OpT()
        op.route = route.op
        op.kernel = route.kernel
        op.provider = int(route.provider)
        op.flags = int(route.flags)
        op.name = node.name
        op.args = self._arguments(node, route, out_ids)
        self.ops.append(op)

    def _arguments(self, node: torch.fx.Node, route: Route, out_ids: list[int]) -> list[Any]:
        functional = aten_overload(node.target)
        assert functional is not None  # route_for found a route
        given: dict[str, object] = dict(node.kwargs)
        for schema_arg, value in zip(functional._schema.arguments, node.args, strict=False):
            given[schema_arg.name] = value
        out_schema = route.out_variant()._schema
        out_args = [a for a in out_schema.arguments if a.is_out]
        if len(out_args) != len(out_ids):
            raise SerializationError(
                f"{_describe(node)}: {route.kernel} has {len(out_args)} out arguments but the "
                f"node produces {len(out_ids)} tensors"
            )
        arguments = []
        outs = iter(out_ids)
        for schema_arg in out_schema.arguments:
            if schema_arg.is_out:
                arguments.append(_argument("TensorArg", value=next(outs)))
            elif schema_arg.name in given:
                arguments.append(self._encode(node, schema_arg, given[schema_arg.name]))
            elif schema_arg.has_default_value():
                arguments.append(self._encode(node, schema_arg, schema_arg.default_value))
            else:
                raise SerializationError(
                    f"{_describe(node)}: {route.kernel} needs argument '{schema_arg.name}', which "
                    "the node does not provide"
                )
        return arguments

    def _encode(self, node: torch.fx.Node, schema_arg: Any, value: object) -> Any:
        name = schema_arg.name
        base, optional = _strip_optional(str(schema_arg.real_type))
        if value is None:
            if optional:
                return _argument("NoneArg")
            raise SerializationError(f"{_describe(node)}: argument '{name}' ({base}) is None")
        if base == "Tensor":
            return _argument("TensorArg", value=self._value_id(node, value, name))
        if base == "List[Tensor]":
            return _argument(
                "TensorListArg", values=[self._value_id(node, v, name) for v in _seq(node, value)]
            )
        if base == "List[Optional[Tensor]]":
            ids = [-1 if v is None else self._value_id(node, v, name) for v in _seq(node, value)]
            return _argument("OptionalTensorListArg", values=ids)
        if base in ("int", "SymInt", "number") and _is_symbolic_size(value):
            expr, bounds = self._size(node, value)
            upper = symbolic_dims.evaluate(*bounds, upper=True)
            return _argument("IntArg", value=upper, expr=expr)
        if base in ("int", "SymInt"):
            return _argument("IntArg", value=_int(node, name, value))
        if base in ("List[int]", "List[SymInt]") and not isinstance(value, int):
            items = _seq(node, value)
            if any(_is_symbolic_size(v) for v in items):
                sizes = [self._size(node, v) for v in items]
                uppers = [symbolic_dims.evaluate(*bounds, upper=True) for _, bounds in sizes]
                return _argument("IntListArg", values=uppers, exprs=[e for e, _ in sizes])
        if base in ("List[int]", "List[SymInt]"):
            if isinstance(value, int):  # `int[2] padding=0` style defaults broadcast
                value = [value] * (schema_arg.N or 1)
            return _argument("IntListArg", values=[_int(node, name, v) for v in _seq(node, value)])
        if base == "float":
            return _argument("DoubleArg", value=_float(node, name, value))
        if base == "List[float]":
            return _argument(
                "DoubleListArg", values=[_float(node, name, v) for v in _seq(node, value)]
            )
        if base == "bool":
            return _argument("BoolArg", value=_bool(node, name, value))
        if base == "List[bool]":
            return _argument(
                "BoolListArg", values=[_bool(node, name, v) for v in _seq(node, value)]
            )
        if base == "number":  # Scalar: keep the Python type, the kernels read it as given
            if isinstance(value, bool):
                return _argument("BoolArg", value=value)
            if isinstance(value, int):
                return _argument("IntArg", value=value)
            return _argument("DoubleArg", value=_float(node, name, value))
        if base == "ScalarType":
            number = _SCALAR_TYPE_NUMBERS.get(value)  # type: ignore[call-overload]
            if number is None:
                raise SerializationError(f"{_describe(node)}: argument '{name}': dtype {value}")
            return _argument("ScalarTypeArg", value=number)
        if base == "MemoryFormat":
            # ExecuTorch kernels take the enum as an int and only run contiguous tensors.
            if value not in (torch.contiguous_format, torch.preserve_format):
                raise SerializationError(
                    f"{_describe(node)}: argument '{name}': memory format {value} is not supported"
                )
            return _argument("IntArg", value=0 if value == torch.contiguous_format else 1)
        if base == "str":
            if not isinstance(value, str):
                raise SerializationError(f"{_describe(node)}: argument '{name}': {value!r}")
            return _argument("StringArg", value=value)
        raise SerializationError(
            f"{_describe(node)}: argument '{name}' has type {schema_arg.real_type}, which the "
            "payload format cannot express"
        )


def _is_symbolic_size(value: object) -> bool:
    if isinstance(value, torch.fx.Node):
        value = value.meta.get("val")
    return isinstance(value, torch.SymInt)


def _seq(node: torch.fx.Node, value: object) -> Sequence[object]:
    if not isinstance(value, (list, tuple)):
        raise SerializationError(f"{_describe(node)}: expected a list, got {value!r}")
    return value


def _int(node: torch.fx.Node, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SerializationError(
            f"{_describe(node)}: argument '{name}' must be a static int, got {value!r}"
            " (symbolic values are not supported)"
        )
    return value


def _float(node: torch.fx.Node, name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SerializationError(
            f"{_describe(node)}: argument '{name}' must be a float, got {value!r}"
        )
    return float(value)


def _bool(node: torch.fx.Node, name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise SerializationError(
            f"{_describe(node)}: argument '{name}' must be a bool, got {value!r}"
        )
    return value
