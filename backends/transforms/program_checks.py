"""Asserts that an ExportedProgram's graph, signature, state dict and constants agree.

Tests call `check_program_consistency` after every pass; a pass that adds or removes a constant
and forgets one of the four places fails here with a message naming the entry.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, TensorArgument


class ProgramInconsistencyError(AssertionError):
    """The program's graph, signature, state dict or constants disagree."""


def check_program_consistency(ep: ExportedProgram, allow_get_attr_tensors: bool = False) -> None:
    """Raises ProgramInconsistencyError unless all of these hold:

    - placeholders and `input_specs` match one to one, in order, by name;
    - every parameter is an `nn.Parameter` in the state dict, every persistent buffer is in the
      state dict, every non-persistent buffer and constant tensor in `ep.constants`, with the
      shape and dtype the placeholder's `val` records;
    - no state-dict or constants entry is orphaned (named by no input spec);
    - outputs and `output_specs` match one to one;
    - unless allowed, no `get_attr` node reads a tensor (it would be an unlifted constant);
    - the graph lints.
    """
    graph = ep.graph_module.graph
    problems: list[str] = []
    try:
        graph.lint()
    except Exception as error:  # lint raises plain RuntimeErrors with the detail we want
        problems.append(f"graph lint: {error}")

    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    specs = ep.graph_signature.input_specs
    if len(placeholders) != len(specs):
        problems.append(f"{len(placeholders)} placeholders but {len(specs)} input specs")
    for index, (node, spec) in enumerate(zip(placeholders, specs, strict=False)):
        name = getattr(spec.arg, "name", None)
        if name != node.name:
            problems.append(f"input {index}: placeholder {node.name!r} vs input spec {name!r}")
            continue
        if spec.kind == InputKind.USER_INPUT or not isinstance(spec.arg, TensorArgument):
            continue
        problems.extend(_check_constant_input(ep, node, spec))

    named = {s.target for s in specs if s.target is not None}
    for key in ep.state_dict:
        if key not in named:
            problems.append(f"state dict entry {key!r} is named by no input spec")
    for key in ep.constants:
        if key not in named:
            problems.append(f"constants entry {key!r} is named by no input spec")

    outputs = list(graph.output_node().args[0])
    out_specs = ep.graph_signature.output_specs
    if len(outputs) != len(out_specs):
        problems.append(f"{len(outputs)} graph outputs but {len(out_specs)} output specs")
    for index, (value, out_spec) in enumerate(zip(outputs, out_specs, strict=False)):
        expected = getattr(out_spec.arg, "name", None)
        actual = value.name if isinstance(value, torch.fx.Node) else None
        if expected is not None and expected != actual:
            problems.append(f"output {index}: graph returns {actual!r}, spec names {expected!r}")

    if not allow_get_attr_tensors:
        for node in graph.nodes:
            if node.op == "get_attr" and isinstance(
                _resolve(ep.graph_module, str(node.target)), torch.Tensor
            ):
                problems.append(f"get_attr {node.name!r} reads an unlifted tensor constant")

    if problems:
        raise ProgramInconsistencyError("program is inconsistent:\n  " + "\n  ".join(problems))


def _check_constant_input(ep: ExportedProgram, node: torch.fx.Node, spec: object) -> list[str]:
    kind = spec.kind  # type: ignore[attr-defined]
    target = spec.target  # type: ignore[attr-defined]
    persistent = spec.persistent  # type: ignore[attr-defined]
    if kind == InputKind.PARAMETER or (kind == InputKind.BUFFER and persistent):
        table, table_name = ep.state_dict, "state dict"
    elif kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
        table, table_name = ep.constants, "constants"
    else:
        return []
    if target not in table:
        return [f"{kind.name} input {node.name!r} names {target!r}, missing from {table_name}"]
    tensor = table[target]
    problems = []
    if kind == InputKind.PARAMETER and not isinstance(tensor, torch.nn.Parameter):
        problems.append(f"parameter {target!r} is not an nn.Parameter")
    val = node.meta.get("val")
    if (
        isinstance(tensor, torch.Tensor)
        and isinstance(val, torch.Tensor)
        and (tuple(val.shape) != tuple(tensor.shape) or val.dtype != tensor.dtype)
    ):
        problems.append(
            f"input {node.name!r}: placeholder val {tuple(val.shape)} {val.dtype} vs "
            f"{table_name}[{target!r}] {tuple(tensor.shape)} {tensor.dtype}"
        )
    return problems


def _resolve(module: torch.nn.Module, target: str) -> object:
    owner: object = module
    for part in target.split("."):
        owner = getattr(owner, part, None)
    return owner


def constant_bytes(ep: ExportedProgram) -> int:
    """Bytes of every tensor in the state dict and constants table (what a `.pte` would carry)."""
    tables = list(ep.state_dict.values()) + list(ep.constants.values())
    return sum(t.numel() * t.element_size() for t in tables if isinstance(t, torch.Tensor))
