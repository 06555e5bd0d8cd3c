"""Facts about an exported or lowered program that every target's report uses: op names, batch
norms, constant bytes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.export import ExportedProgram

_BATCH_NORM_OPS = (
    "batch_norm",
    "_native_batch_norm_legit_no_training",
    "_native_batch_norm_legit_functional",
    "_native_batch_norm_legit",
    "native_batch_norm",
)


def op_name(target: object) -> str:
    """`aten.convolution.default` for both ATen and Edge dialect op overloads."""
    if isinstance(target, torch._ops.OpOverload):
        return str(target)  # `__name__` would drop the namespace
    return str(getattr(target, "__name__", target))


def short_op_name(op: str) -> str:
    """`aten.convolution.default` -> `convolution`, `aten.add.Tensor` -> `add.Tensor`: the
    namespace and the default overload are noise in a report."""
    parts = op.split(".")
    if len(parts) == 3 and parts[0] == "aten":
        return parts[1] if parts[2] == "default" else f"{parts[1]}.{parts[2]}"
    return op


def is_batch_norm(name: str) -> bool:
    return any(name.startswith(f"aten.{bn}.") for bn in _BATCH_NORM_OPS)


def count_batch_norms(graph_module: torch.fx.GraphModule) -> int:
    return sum(
        1
        for node in graph_module.graph.nodes
        if node.op == "call_function" and is_batch_norm(op_name(node.target))
    )


def constant_bytes(program: ExportedProgram) -> int:
    """Bytes of the parameters, buffers and lifted constants a program carries."""
    total = 0
    seen: set[int] = set()
    tensors: Iterable[Any] = list(program.state_dict.values()) + list(program.constants.values())
    for tensor in tensors:
        if isinstance(tensor, torch.Tensor) and id(tensor) not in seen:
            seen.add(id(tensor))
            total += tensor.numel() * tensor.element_size()
    return total
