"""Turns tensor constants held as `get_attr` attributes into proper constant placeholders.

ExecuTorch's serializer rejects unlifted `get_attr` tensors, and a signature entry is what lets the
pruning pass and the backends see a constant. Sub-module attributes (lowered backend modules,
control-flow branches) are left alone.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram

from backends.transforms.pass_report import PassReport
from backends.transforms.program_constants import ProgramConstants


class LiftConstantsPass:
    """`LiftConstantsPass()(ep)` lifts every `get_attr` tensor of `ep`'s top-level graph in place.

    Each attribute becomes one CONSTANT_TENSOR placeholder (several `get_attr` nodes of the same
    attribute share it) whose tensor moves to `ep.constants`; the attribute is deleted from the
    graph module. `folded` counts the lifted attributes.
    """

    def __call__(self, ep: ExportedProgram) -> PassReport:
        report = PassReport(pass_name=type(self).__name__)
        gm = ep.graph_module
        constants = ProgramConstants(ep)
        lifted: dict[str, torch.fx.Node] = {}
        for node in list(gm.graph.nodes):
            if node.op != "get_attr":
                continue
            target = str(node.target)
            value = _resolve_attr(gm, target)
            if not isinstance(value, torch.Tensor):
                continue
            if target not in lifted:
                tensor = value.detach() if isinstance(value, torch.nn.Parameter) else value
                placeholder = constants.add_lifted_constant(f"lifted_{target}", tensor)
                spec = constants.spec_of(placeholder)
                assert spec is not None and spec.target is not None
                report.added_constants.append(spec.target)
                lifted[target] = placeholder
                report.folded += 1
            placeholder = lifted[target]
            placeholder.meta.update({k: v for k, v in node.meta.items() if k != "val"})
            node.replace_all_uses_with(placeholder)
            gm.graph.erase_node(node)
            report.changed = True
        for target in lifted:
            _delete_attr(gm, target)
        constants.commit()
        if report.changed:
            gm.recompile()
        return report


def _resolve_attr(gm: torch.nn.Module, target: str) -> object:
    owner: object = gm
    for part in target.split("."):
        owner = getattr(owner, part, None)
        if owner is None:
            return None
    return owner


def _delete_attr(gm: torch.nn.Module, target: str) -> None:
    *path, leaf = target.split(".")
    owner: object = gm
    for part in path:
        owner = getattr(owner, part)
    delattr(owner, leaf)
