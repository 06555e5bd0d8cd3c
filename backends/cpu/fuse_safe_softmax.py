"""SDPA's guarded softmax as one op: `et_cpu_quant::safe_softmax` (quantized_ops.py).

`scaled_dot_product_attention` exports its softmax with a guard against fully masked rows (torch's
_safe_softmax: such a row gives zeros, not NaN):

    s = softmax(x, -1)
    where(logical_not(any(logical_not(x == -inf), -1, keepdim=True)), full_like(s, 0), s)

five small ops over the scores after the softmax. Preprocess replaces the softmax and its guard
with one `safe_softmax(x, -1)` (the Optimized provider's AVX-512 softmax rows, which check for a
row of -inf only when its maximum is -inf; else the runtime's built-in scalar loop). It matches
only float32 x softmaxed over its last dim, the guard over that same x and dim, zeros from
`full_like(softmax, 0)` or a constant +0, and intermediates nothing else reads.
"""

from __future__ import annotations

import math

import torch
from torch.export import ExportedProgram

from backends.cpu import quantized_ops
from backends.cpu.graph_match import Fusion, fuse_subgraphs, is_op, only_user, tensor_val
from backends.transforms.pass_report import PassReport
from backends.transforms.program_constants import ProgramConstants

_WHERE = "aten.where.self"
_SOFTMAX = "aten._softmax.default"
_FULL_LIKE = "aten.full_like.default"
_NOT = "aten.logical_not.default"
_ANY = "aten.any.dim"
_EQ = "aten.eq.Scalar"


def _is_last(dim: object, rank: int) -> bool:
    return isinstance(dim, int) and not isinstance(dim, bool) and dim in (-1, rank - 1)


def _is_plus_zero(value: torch.Tensor) -> bool:
    return bool(((value == 0) & ~torch.signbit(value)).all())


class FuseSafeSoftmaxPass:
    """`FuseSafeSoftmaxPass()(ep)` rewrites SDPA's guarded softmaxes of `ep` in place."""

    def __call__(self, ep: ExportedProgram) -> PassReport:
        return fuse_subgraphs(ep, type(self).__name__, _WHERE, self._match)

    @staticmethod
    def _match(where: torch.fx.Node, constants: ProgramConstants) -> Fusion | None:
        if len(where.args) != 3 or where.kwargs:
            return None
        cond, zeros, softmax = where.args
        if not is_op(softmax, _SOFTMAX) or not is_op(cond, _NOT):
            return None
        assert isinstance(softmax, torch.fx.Node) and isinstance(cond, torch.fx.Node)
        if len(softmax.args) != 3 or softmax.args[2] is not False or softmax.kwargs:
            return None
        x = softmax.args[0]
        x_val, out_val, softmax_val = tensor_val(x), tensor_val(where), tensor_val(softmax)
        if x_val is None or out_val is None or softmax_val is None or x_val.dim() < 1:
            return None
        assert isinstance(x, torch.fx.Node)
        if not _is_last(softmax.args[1], x_val.dim()):
            return None
        if any(v.dtype != torch.float32 for v in (x_val, out_val, softmax_val)):
            return None
        if out_val.shape != x_val.shape or softmax_val.shape != x_val.shape:
            return None
        # The guard: not(any(not(x == -inf), last dim, keepdim)).
        found_any = cond.args[0] if len(cond.args) == 1 else None
        if not is_op(found_any, _ANY) or not only_user(cond, where):
            return None
        assert isinstance(found_any, torch.fx.Node)
        if len(found_any.args) != 3 or found_any.args[2] is not True or found_any.kwargs:
            return None
        if not _is_last(found_any.args[1], x_val.dim()) or not only_user(found_any, cond):
            return None
        kept = found_any.args[0]
        if not is_op(kept, _NOT) or not only_user(kept, found_any):
            return None
        assert isinstance(kept, torch.fx.Node)
        eq = kept.args[0] if len(kept.args) == 1 else None
        if not is_op(eq, _EQ) or not only_user(eq, kept):
            return None
        assert isinstance(eq, torch.fx.Node)
        bound = eq.args[1] if len(eq.args) == 2 else None
        if eq.args[0] is not x or not isinstance(bound, float) or bound != -math.inf:
            return None
        # The zeros, and the softmax read by nothing else.
        dead = [cond, found_any, kept, eq]
        readers = {where}
        if is_op(zeros, _FULL_LIKE):
            assert isinstance(zeros, torch.fx.Node)
            dtype = zeros.kwargs.get("dtype")
            if len(zeros.args) != 2 or zeros.args[0] is not softmax or zeros.args[1] != 0:
                return None
            if dtype not in (None, torch.float32) or not only_user(zeros, where):
                return None
            readers.add(zeros)
            dead.insert(0, zeros)
        elif constants.is_constant(zeros):
            assert isinstance(zeros, torch.fx.Node)
            value = constants.value(zeros)
            if value.dtype != torch.float32 or not _is_plus_zero(value):
                return None
            if value.numel() != 1 and tuple(value.shape) != tuple(x_val.shape):
                return None
        else:
            return None
        if set(softmax.users) != readers:
            return None
        dead.append(softmax)
        return Fusion(where, quantized_ops.SAFE_SOFTMAX, (x, -1), dead)
