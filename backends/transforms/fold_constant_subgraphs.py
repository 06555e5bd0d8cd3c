"""Computes, once at lowering, every op whose inputs are all constants, and makes its result a
constant.

Edge programs recompute input-independent tensors on every call: `scaled_dot_product_attention`
with `is_causal=True` decomposes into full -> arange -> sub -> le -> logical_and -> where to
build the causal mask, and `full_like(softmax, 0)` for its fully-masked-row guard; rotary
embeddings slice their cos / sin buffers. In the Llama-style zoo decoder these took several
percent of the delegate's time on ExecuTorch's plain kernels. After this pass only the ops that
read a caller's input remain.

What is not folded, and why:
- quantize / dequantize ops: the program was quantized to keep its weights small;
- ops with random results (their schema's `nondeterministic_seeded` tag);
- results that would add more than `max_new_bytes` of constant data beyond the constants they
  read, unless every element is the same and each reader broadcasts it (then a 0-dim constant
  takes its place: `full_like(softmax, 0)` of a [1, 6, 128, 128] score tensor becomes one float).

Equal folded results (the same mask in every decoder block) share one constant.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.export import ExportedProgram

from backends.transforms.pass_report import PassReport
from backends.transforms.program_constants import ProgramConstants

# A folded result may add this much constant data beyond what it reads (the payload grows by it).
DEFAULT_MAX_NEW_BYTES = 1 << 20

# full_like / zeros_like / ones_like: the result depends on the input's metadata, not its values.
_METADATA_ONLY = frozenset({"aten::full_like", "aten::zeros_like", "aten::ones_like"})

# Elementwise ops that broadcast every tensor operand: a splat operand may be 0-dim for them.
_BROADCASTING = frozenset(
    {
        "aten::where",
        "aten::add",
        "aten::sub",
        "aten::mul",
        "aten::div",
        "aten::maximum",
        "aten::minimum",
        "aten::logical_and",
        "aten::logical_or",
        *(f"aten::{cmp}" for cmp in ("eq", "ne", "lt", "le", "gt", "ge")),
    }
)


def _overload(target: object) -> torch._ops.OpOverload | None:
    # Edge ops wrap the ATen OpOverload in `_op`; ATen ones are OpOverloads themselves.
    op = target if isinstance(target, torch._ops.OpOverload) else getattr(target, "_op", None)
    return op if isinstance(op, torch._ops.OpOverload) else None


def _flatten(value: object) -> Iterator[torch.fx.Node]:
    if isinstance(value, torch.fx.Node):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _flatten(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _flatten(item)


def _is_foldable_op(op: torch._ops.OpOverload) -> bool:
    namespace = op._schema.name.split("::")[0]
    if namespace not in ("aten", "dim_order_ops"):
        return False  # quantized_decomposed, the delegate's own int8 ops, ...
    return torch.Tag.nondeterministic_seeded not in op.tags


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _digest(tensor: torch.Tensor) -> str:
    raw = tensor.contiguous().reshape(-1).view(torch.uint8)
    return hashlib.sha256(raw.numpy().tobytes()).hexdigest()


def _is_splat(tensor: torch.Tensor) -> bool:
    if tensor.numel() <= 1:
        return False
    flat = tensor.reshape(-1)
    return bool(torch.equal(flat, flat[:1].expand_as(flat)))


def _broadcast_keeps_shapes(node: torch.fx.Node) -> bool:
    """True when every reader of `node` broadcasts it and keeps its output shape with a 0-dim
    operand in its place (the other operands span that shape on their own)."""
    for user in node.users:
        op = _overload(user.target)
        if op is None or op._schema.name not in _BROADCASTING:
            return False
        others = [
            arg.meta["val"].shape
            for arg in _flatten((user.args, user.kwargs))
            if arg is not node and isinstance(arg.meta.get("val"), torch.Tensor)
        ]
        out = user.meta.get("val")
        if not others or not isinstance(out, torch.Tensor):
            return False
        if tuple(torch.broadcast_shapes(*others)) != tuple(out.shape):
            return False
    return True


class FoldConstantSubgraphsPass:
    """`FoldConstantSubgraphsPass()(ep)` replaces, in place, each op of `ep` whose inputs are all
    constants (or that only reads an input's metadata: full_like) by a constant placeholder.

    Only results something else still reads become constants; the ops that computed them are
    erased, and constants nothing reads any more are left to `PruneUnusedConstantsPass`.
    `folded` counts the erased ops, `added_constants` the new constants.
    """

    def __init__(self, max_new_bytes: int = DEFAULT_MAX_NEW_BYTES) -> None:
        self.max_new_bytes = max_new_bytes

    def __call__(self, ep: ExportedProgram) -> PassReport:
        report = PassReport(pass_name=type(self).__name__)
        constants = ProgramConstants(ep)
        graph = ep.graph_module.graph
        values: dict[torch.fx.Node, torch.Tensor] = {}
        read_bytes: dict[torch.fx.Node, int] = {}  # constant bytes each folded value derives from
        for node in graph.nodes:
            if constants.is_constant(node):
                values[node] = constants.value(node)
                read_bytes[node] = _nbytes(values[node])
            elif node.op == "call_function":
                value = self._evaluate(node, values, report)
                if value is not None:
                    values[node] = value
                    read_bytes[node] = sum(
                        read_bytes.get(arg, 0)
                        for arg in set(_flatten((node.args, node.kwargs)))
                        if arg in values
                    )
        shared: dict[tuple[str, tuple[int, ...], str], torch.fx.Node] = {}
        for node in list(graph.nodes):
            if node.op != "call_function" or node not in values:
                continue
            if all(user in values and user.op == "call_function" for user in node.users):
                continue  # only other folded ops read it: it goes with them
            value = values[node]
            if any(user.op == "output" for user in node.users):
                report.skip(node.name, "feeds the graph output (a delegate output is an op result)")
                continue
            if _is_splat(value) and _broadcast_keeps_shapes(node):
                value = value.reshape(-1)[0].clone()
            elif _nbytes(value) > read_bytes[node] + self.max_new_bytes:
                report.skip(node.name, f"result of {_nbytes(value)} bytes (too large to store)")
                continue
            key = (str(value.dtype), tuple(value.shape), _digest(value))
            placeholder = shared.get(key)
            if placeholder is None:
                placeholder = constants.add_lifted_constant(f"folded_{node.name}", value.clone())
                spec = constants.spec_of(placeholder)
                assert spec is not None and spec.target is not None
                report.added_constants.append(spec.target)
                shared[key] = placeholder
            node.replace_all_uses_with(placeholder)
            report.changed = True
        if report.changed:
            before = sum(1 for node in graph.nodes if node.op == "call_function")
            graph.eliminate_dead_code()
            report.folded = before - sum(1 for node in graph.nodes if node.op == "call_function")
            ep.graph_module.recompile()
        constants.commit()
        return report

    def _evaluate(
        self,
        node: torch.fx.Node,
        values: dict[torch.fx.Node, torch.Tensor],
        report: PassReport,
    ) -> torch.Tensor | None:
        """`node`'s result when it is foldable and all it reads is known, else None."""
        op = _overload(node.target)
        if op is None or not _is_foldable_op(op):
            return None
        expected = node.meta.get("val")
        if isinstance(expected, torch.Tensor) and not all(
            isinstance(size, int) for size in expected.shape
        ):
            # A symbolic size (a bounded dynamic dimension): the value differs call to call.
            report.skip(node.name, "symbolic shape")
            return None
        metadata_only = op._schema.name in _METADATA_ONLY
        arguments = list(_flatten((node.args, node.kwargs)))
        if not metadata_only and not all(arg in values for arg in arguments):
            return None

        def resolve(arg: torch.fx.Node) -> Any:
            if arg in values:
                return values[arg]
            # full_like of a computed tensor: a real tensor of the same metadata stands in.
            meta = arg.meta["val"]
            return torch.empty(meta.shape, dtype=meta.dtype)

        try:
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), resolve)
            with torch.no_grad():
                result = op(*args, **kwargs)
        except Exception as exc:  # an op that will not run eagerly here stays in the graph
            report.skip(node.name, f"not evaluated: {type(exc).__name__}: {exc}")
            return None
        if (
            not isinstance(result, torch.Tensor)
            or not isinstance(expected, torch.Tensor)
            or result.dtype != expected.dtype
            or tuple(result.shape) != tuple(expected.shape)
        ):
            return None
        return result.contiguous()
