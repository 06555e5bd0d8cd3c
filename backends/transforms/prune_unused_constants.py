"""Drops parameter, buffer and constant inputs nothing reads, from every place they are recorded.

`to_edge` prunes unused parameters once, at its start, and never buffers: after batch-norm folding
the original weights and the batch-norm statistics (and `num_batches_tracked`) would otherwise be
serialized next to the fused tensors.
"""

from __future__ import annotations

from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind

from backends.transforms.pass_report import PassReport
from backends.transforms.program_constants import ProgramConstants


class PruneUnusedConstantsPass:
    """`PruneUnusedConstantsPass()(ep)` removes unused constant placeholders of `ep` in place.

    A placeholder goes when it has no users and no output spec mutates it; its tensor leaves the
    state dict / constants table once no remaining input names it. `folded` counts the removed
    placeholders; `removed_constants` names the dropped tensors.
    """

    def __call__(self, ep: ExportedProgram) -> PassReport:
        report = PassReport(pass_name=type(self).__name__)
        constants = ProgramConstants(ep)
        mutated = {
            spec.target
            for spec in ep.graph_signature.output_specs
            if spec.kind in (OutputKind.BUFFER_MUTATION, OutputKind.PARAMETER_MUTATION)
        }
        for node in list(ep.graph.nodes):
            if node.op != "placeholder":
                break
            if node.users or not constants.is_constant(node):
                continue
            spec = constants.spec_of(node)
            assert spec is not None
            if spec.target in mutated:
                continue
            dropped = constants.remove(node)
            if dropped is not None:
                report.removed_constants.append(dropped)
            report.folded += 1
            report.changed = True
        constants.commit()
        if report.changed:
            ep.graph_module.recompile()
        return report
