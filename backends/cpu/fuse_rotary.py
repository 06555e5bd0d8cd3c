"""Rotary position embeddings as one op: `et_cpu_quant::rotary` (quantized_ops.py).

Llama-style models apply rotary embeddings to q and k as

    x * cos + cat([-x[..., h:], x[..., :h]], dim=-1) * sin        ("rotate half", h = D / 2)

which exports as two slice_copy, a neg, a cat, two muls and an add over the last dim: seven small
ops per tensor, two per layer. Preprocess replaces each such subgraph with one `rotary(x, cos, sin)`
(the Optimized provider's AVX-512 kernel, else the runtime's built-in scalar loop). It matches only
float32 x whose last dim is even, cos and sin of one shape that broadcasts to x's trailing dims
(e.g. [S, D] against x [B, H, S, D]), and intermediates nothing else reads. The interleaved
(complex-multiply) form is not matched.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram

from backends.cpu import quantized_ops
from backends.cpu.graph_match import Fusion, fuse_subgraphs, is_op, only_user, tensor_val
from backends.transforms.pass_report import PassReport

_ADD = "aten.add.Tensor"
_MUL = "aten.mul.Tensor"
_CAT = "aten.cat.default"
_NEG = "aten.neg.default"
_SLICE = "aten.slice_copy.Tensor"


def _last_dim(node: torch.fx.Node, dim: object) -> bool:
    val = tensor_val(node)
    return val is not None and isinstance(dim, int) and dim in (-1, val.dim() - 1)


def _slice_of(node: object, x: torch.fx.Node, start: int, end: int, width: int) -> bool:
    """`node` is slice_copy(x, last dim, start, end) with step 1 (an end past D = `width`, or
    none, counts as D; only where `end` is D)."""
    if not is_op(node, _SLICE):
        return False
    assert isinstance(node, torch.fx.Node)
    args = list(node.args) + [None] * (5 - len(node.args))
    source, dim, lo, hi, step = args[:5]
    dim = node.kwargs.get("dim", dim if dim is not None else 0)
    lo = node.kwargs.get("start", lo if lo is not None else 0)
    hi = node.kwargs.get("end", hi)
    step = node.kwargs.get("step", step if step is not None else 1)
    if source is not x or step != 1 or not _last_dim(x, dim):
        return False
    if not isinstance(lo, int) or lo != start:
        return False
    if hi is None or (isinstance(hi, int) and hi >= width):
        return end == width
    return isinstance(hi, int) and hi == end


def _rotate_half_of(cat: object) -> torch.fx.Node | None:
    """x when `cat` is cat([neg(x[..., h:]), x[..., :h]], last dim), read only through it."""
    if not is_op(cat, _CAT):
        return None
    assert isinstance(cat, torch.fx.Node)
    parts = cat.args[0]
    dim = cat.args[1] if len(cat.args) > 1 else cat.kwargs.get("dim", 0)
    if not isinstance(parts, (list, tuple)) or len(parts) != 2:
        return None
    neg, low = parts
    if not is_op(neg, _NEG) or not isinstance(low, torch.fx.Node):
        return None
    assert isinstance(neg, torch.fx.Node)
    high = neg.args[0]
    x = low.args[0] if low.args else None
    if not isinstance(x, torch.fx.Node) or not isinstance(high, torch.fx.Node):
        return None
    val = tensor_val(x)
    if val is None or val.dim() < 1 or not _last_dim(x, dim):
        return None
    width = val.shape[-1]
    if not isinstance(width, int) or width < 2 or width % 2 != 0:
        return None
    half = width // 2
    if not _slice_of(high, x, half, width, width) or not _slice_of(low, x, 0, half, width):
        return None
    if not (only_user(high, neg) and only_user(neg, cat) and only_user(low, cat)):
        return None
    return x


def _broadcasts_to_trailing(table: torch.Tensor, x: torch.Tensor) -> bool:
    """`table`'s dims (leading 1s dropped) equal x's trailing dims, its last one D."""
    dims = list(table.shape)
    while len(dims) > 1 and dims[0] == 1:
        dims.pop(0)
    x_dims = list(x.shape)
    return len(dims) <= len(x_dims) and x_dims[len(x_dims) - len(dims) :] == dims


class FuseRotaryPass:
    """`FuseRotaryPass()(ep)` rewrites the rotate-half rotary subgraphs of `ep` in place."""

    def __call__(self, ep: ExportedProgram) -> PassReport:
        return fuse_subgraphs(ep, type(self).__name__, _ADD, lambda add, _: self._match(add))

    @staticmethod
    def _match(
        add: torch.fx.Node,
    ) -> Fusion | None:
        if len(add.args) != 2 or add.kwargs.get("alpha", 1) != 1:
            return None
        for plain, turned in (add.args, add.args[::-1]):
            if not (is_op(plain, _MUL) and is_op(turned, _MUL)):
                continue
            assert isinstance(plain, torch.fx.Node) and isinstance(turned, torch.fx.Node)
            for cat, sin in (turned.args, turned.args[::-1]):
                x = _rotate_half_of(cat)
                if x is None or not isinstance(sin, torch.fx.Node):
                    continue
                if x not in plain.args or plain.args[0] is plain.args[1]:
                    continue
                cos = plain.args[1] if plain.args[0] is x else plain.args[0]
                if not isinstance(cos, torch.fx.Node):
                    continue
                x_val, cos_val, sin_val, out_val = (
                    tensor_val(x),
                    tensor_val(cos),
                    tensor_val(sin),
                    tensor_val(add),
                )
                if x_val is None or cos_val is None or sin_val is None or out_val is None:
                    continue
                if any(v.dtype != torch.float32 for v in (x_val, cos_val, sin_val, out_val)):
                    continue
                if cos_val.shape != sin_val.shape or out_val.shape != x_val.shape:
                    continue
                if not _broadcasts_to_trailing(cos_val, x_val):
                    continue
                if not (only_user(plain, add) and only_user(turned, add)):
                    continue
                assert isinstance(cat, torch.fx.Node)
                parts = cat.args[0]
                assert isinstance(parts, (list, tuple))
                neg, low = parts
                assert isinstance(neg, torch.fx.Node) and isinstance(low, torch.fx.Node)
                high = neg.args[0]
                assert isinstance(high, torch.fx.Node)
                dead = [plain, turned, cat, neg, high, low]
                return Fusion(add, quantized_ops.ROTARY, (x, cos, sin), dead)
        return None
