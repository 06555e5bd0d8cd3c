"""Reads, adds and removes an ExportedProgram's constant inputs, keeping graph, signature, state
dict and constants table in step.

A pass builds one `ProgramConstants` per run: lookups are dictionary hits and the graph signature is
rebuilt once in `commit()`, so a pass over a program with N constants stays O(N), not O(N^2).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument

# Inputs whose value lives in the program rather than being passed by the caller.
CONSTANT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


class ProgramConstants:
    """Constant placeholders of one ExportedProgram, editable as a unit.

    Changes to the graph and to the state dict / constants table happen at once; the signature's
    `input_specs` list is rewritten (in place, so every shallow copy of the program sees it) by
    `commit()`, which every caller must reach before handing the program back.
    """

    def __init__(self, ep: ExportedProgram) -> None:
        self.ep = ep
        self.graph = ep.graph_module.graph
        self._spec_by_name: dict[str, InputSpec] = {
            spec.arg.name: spec
            for spec in ep.graph_signature.input_specs
            if isinstance(spec.arg, TensorArgument)
        }
        # A buffer the program writes (a KV cache) holds a different value on every call.
        self._mutated: set[str] = set(ep.graph_signature.buffers_to_mutate.values())
        self._dirty = False
        self._anchor: torch.fx.Node | None = None
        self._fake_mode: Any = None
        self._taken_targets: set[str] = set(ep.state_dict) | set(ep.constants)
        self._taken_targets.update(name for name, _ in ep.graph_module.named_buffers())
        self._taken_targets.update(name for name, _ in ep.graph_module.named_parameters())
        self._target_refs: dict[str, int] = {}
        for spec in ep.graph_signature.input_specs:
            if spec.kind in CONSTANT_KINDS and spec.target is not None:
                self._target_refs[spec.target] = self._target_refs.get(spec.target, 0) + 1

    def spec_of(self, node: torch.fx.Node) -> InputSpec | None:
        """The input spec of placeholder `node`, or None for any other node."""
        if node.op != "placeholder":
            return None
        return self._spec_by_name.get(node.name)

    def is_constant(self, node: object) -> bool:
        """True when `node` is a parameter, buffer or constant-tensor input of the program, and
        not a buffer the program mutates (its value changes from call to call)."""
        if not isinstance(node, torch.fx.Node):
            return False
        spec = self.spec_of(node)
        return spec is not None and spec.kind in CONSTANT_KINDS and spec.target not in self._mutated

    def value(self, node: torch.fx.Node) -> torch.Tensor:
        """The tensor behind constant placeholder `node`."""
        spec = self.spec_of(node)
        if spec is None or spec.kind not in CONSTANT_KINDS or spec.target is None:
            raise ValueError(f"node {node.name!r} is not a constant input of the program")
        if spec.kind == InputKind.PARAMETER or (spec.kind == InputKind.BUFFER and spec.persistent):
            table = self.ep.state_dict
        else:
            table = self.ep.constants
        tensor = table.get(spec.target)
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(
                f"constant input {node.name!r} names {spec.target!r}, which is missing from the "
                "program's state dict / constants table"
            )
        return tensor

    def _unique_target(self, hint: str) -> str:
        # Unique across state dict, constants and module attributes: ExecuTorch's own helper
        # silently reuses a taken name, which would alias two different tensors.
        base = hint.replace(".", "_")
        candidate = base
        counter = 1
        while candidate in self._taken_targets:
            candidate = f"{base}_{counter}"
            counter += 1
        self._taken_targets.add(candidate)
        return candidate

    def _insertion_anchor(self) -> torch.fx.Node:
        # New parameters go right after the existing ones, i.e. before the first placeholder of
        # another kind, so the conventional order (parameters, buffers, constants, user inputs)
        # holds. Computed once: later inserts before the same anchor keep their creation order.
        if self._anchor is None:
            for node in self.graph.nodes:
                spec = self.spec_of(node)
                if node.op != "placeholder" or spec is None or spec.kind != InputKind.PARAMETER:
                    self._anchor = node
                    break
        assert self._anchor is not None, "a graph always ends with an output node"
        return self._anchor

    def _fake(self, tensor: torch.Tensor) -> object:
        """`tensor` as a fake tensor in the graph's fake mode (found once), else as itself."""
        if self._fake_mode is None:
            for node in self.graph.nodes:
                mode = getattr(node.meta.get("val"), "fake_mode", None)
                if mode is not None:
                    self._fake_mode = mode
                    break
        if self._fake_mode is None:
            return tensor
        return self._fake_mode.from_tensor(tensor, static_shapes=True)

    def add_parameter(self, hint: str, tensor: torch.Tensor) -> torch.fx.Node:
        """Adds `tensor` as a new parameter placeholder (never reusing an existing entry)."""
        target = self._unique_target(hint)
        self.ep.state_dict[target] = torch.nn.Parameter(tensor.detach(), requires_grad=False)
        return self._add_input(target, tensor, InputKind.PARAMETER, self._insertion_anchor())

    def add_lifted_constant(self, hint: str, tensor: torch.Tensor) -> torch.fx.Node:
        """Adds `tensor` as a new CONSTANT_TENSOR placeholder (for lifted `get_attr` constants)."""
        target = self._unique_target(hint)
        self.ep.constants[target] = tensor
        return self._add_input(
            target, tensor, InputKind.CONSTANT_TENSOR, self._first_user_input_or_output()
        )

    def _add_input(
        self, target: str, tensor: torch.Tensor, kind: InputKind, anchor: torch.fx.Node
    ) -> torch.fx.Node:
        """The placeholder and signature entry of a constant already stored under `target`."""
        with self.graph.inserting_before(anchor):
            node = self.graph.placeholder(target)
        node.meta["val"] = self._fake(tensor)
        self._spec_by_name[node.name] = InputSpec(
            kind=kind, arg=TensorArgument(name=node.name), target=target, persistent=None
        )
        self._target_refs[target] = 1
        self._dirty = True
        return node

    def _first_user_input_or_output(self) -> torch.fx.Node:
        for node in self.graph.nodes:
            if node.op != "placeholder":
                return node
            spec = self.spec_of(node)
            if spec is None or spec.kind not in CONSTANT_KINDS:
                return node
        raise AssertionError("a graph always ends with an output node")

    def remove(self, node: torch.fx.Node) -> str | None:
        """Erases unused constant placeholder `node`; drops its tensor once nothing else names it.

        Returns the state-dict / constants key that was dropped, or None if it is still shared.
        """
        spec = self.spec_of(node)
        if spec is None or spec.kind not in CONSTANT_KINDS:
            raise ValueError(f"node {node.name!r} is not a constant input of the program")
        if node.users:
            raise ValueError(f"constant input {node.name!r} still has users: {list(node.users)}")
        if self._anchor is node:
            self._anchor = node.next
        self.graph.erase_node(node)
        del self._spec_by_name[node.name]
        self._dirty = True
        target = spec.target
        assert target is not None
        self._target_refs[target] -= 1
        if self._target_refs[target] > 0:
            return None
        del self._target_refs[target]
        self.ep.state_dict.pop(target, None)
        self.ep.constants.pop(target, None)
        return target

    def commit(self) -> None:
        """Rewrites the signature's input specs to follow the graph's placeholders, in order."""
        if not self._dirty:
            return
        input_specs = self.ep.graph_signature.input_specs
        by_name = dict(self._spec_by_name)
        # Keep non-tensor specs (symints, custom objects) keyed by their argument name too.
        for spec in input_specs:
            name = getattr(spec.arg, "name", None)
            if name is not None and not isinstance(spec.arg, TensorArgument):
                by_name[name] = spec
        new_specs = []
        for node in self.graph.nodes:
            if node.op != "placeholder":
                break
            spec = by_name.get(node.name)
            if spec is None:
                raise AssertionError(f"placeholder {node.name!r} has no input spec")
            new_specs.append(spec)
        input_specs[:] = new_specs
        self._dirty = False
