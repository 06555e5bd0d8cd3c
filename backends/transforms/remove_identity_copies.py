"""Drops copies that change nothing: an expand to the tensor's own shape, a clone or dim-order
copy that keeps shape, dtype and strides, a view to the same shape, an identity permute.

Edge programs are full of them: `torch.matmul` on 4-D operands exports as expand_copy -> view_copy
-> bmm whether or not anything broadcasts, and `.contiguous()` on a contiguous tensor becomes a
clone. Inside a delegate each one is a full copy of an activation (in a ViT, 49 expand copies of
the attention operands took about 6% of the run). The node's users read its input instead.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram

from backends.transforms.pass_report import PassReport

# Copy ops that are the identity when their output's metadata equals their input's.
_COPY_OPS = frozenset(
    {
        "aten::expand_copy",
        "aten::view_copy",
        "aten::clone",
        "aten::alias_copy",
        "aten::_to_copy",
        "dim_order_ops::_clone_dim_order",
        "dim_order_ops::_to_dim_order_copy",
        "aten::permute_copy",
    }
)


def _schema_name(target: object) -> str | None:
    # Edge ops wrap the ATen OpOverload in `_op`; ATen ones are OpOverloads themselves.
    op = target if isinstance(target, torch._ops.OpOverload) else getattr(target, "_op", None)
    return op._schema.name if isinstance(op, torch._ops.OpOverload) else None


def _same_tensor_layout(a: object, b: object) -> bool:
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.shape == b.shape
        and a.dtype == b.dtype
        and a.stride() == b.stride()
    )


def _is_identity_copy(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or _schema_name(node.target) not in _COPY_OPS:
        return False
    if not node.args or not isinstance(node.args[0], torch.fx.Node):
        return False
    if _schema_name(node.target) == "aten::permute_copy":
        dims = node.args[1] if len(node.args) > 1 else None
        rank = node.args[0].meta["val"].dim() if "val" in node.args[0].meta else -1
        if not isinstance(dims, (list, tuple)) or list(dims) != list(range(rank)):
            return False
    return _same_tensor_layout(node.args[0].meta.get("val"), node.meta.get("val"))


class RemoveIdentityCopiesPass:
    """`RemoveIdentityCopiesPass()(ep)` bypasses and erases identity copies of `ep` in place.

    A copy that feeds the graph's output stays (a delegate output must be an op result, and a
    program output must not alias its input); it is recorded as skipped. `folded` counts the
    removed copies.
    """

    def __call__(self, ep: ExportedProgram) -> PassReport:
        report = PassReport(pass_name=type(self).__name__)
        graph = ep.graph
        for node in list(graph.nodes):
            if not _is_identity_copy(node):
                continue
            if any(user.op == "output" for user in node.users):
                report.skip(node.name, "identity copy feeds the graph output")
                continue
            source = node.args[0]
            assert isinstance(source, torch.fx.Node)
            node.replace_all_uses_with(source)
            graph.erase_node(node)
            report.folded += 1
            report.changed = True
        if report.changed:
            graph.eliminate_dead_code()
            ep.graph_module.recompile()
        return report
