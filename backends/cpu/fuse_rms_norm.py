"""RMSNorm as one op: `et_cpu_quant::rms_norm` (quantized_ops.py).

Llama-style models (and `torch.nn.RMSNorm`) normalize as

    x * rsqrt(mean(x^2, dim=-1, keepdim=True) + eps) * weight

which exports as pow (or x * x), mean.dim, add (eps: a scalar, or a lifted one-element constant),
rsqrt, mul and a mul by the [D] weight: six small memory-bound ops per norm, the last two over the
whole activation. Preprocess replaces each with one `rms_norm(x, weight, eps)` (the Optimized
provider's AVX-512 kernel, else the runtime's built-in scalar loop). It matches only float32 x
normalized over its last dim D (a static size), mean with keepdim and no dtype, eps a constant,
and intermediates nothing else reads. The weight mul is folded when the weight is a float32
tensor of shape [D] and the normalized x goes only to it; otherwise (no weight, or another
shape) the op is the weightless norm and the mul stays as it is.
"""

from __future__ import annotations

import math

import torch
from torch.export import ExportedProgram

from backends.cpu import quantized_ops
from backends.cpu.graph_match import Fusion, fuse_subgraphs, is_op, only_user, tensor_val
from backends.transforms.pass_report import PassReport
from backends.transforms.program_constants import ProgramConstants

_RSQRT = "aten.rsqrt.default"
_ADD_SCALAR = "aten.add.Scalar"
_ADD = "aten.add.Tensor"
_MEAN = "aten.mean.dim"
_POW = "aten.pow.Tensor_Scalar"
_MUL = "aten.mul.Tensor"


def _f32(*nodes: object) -> bool:
    vals = [tensor_val(node) for node in nodes]
    return all(val is not None and val.dtype == torch.float32 for val in vals)


def _squared(node: object) -> torch.fx.Node | None:
    """x when `node` is pow(x, 2) or x * x."""
    if is_op(node, _POW):
        assert isinstance(node, torch.fx.Node)
        exponent = node.args[1] if len(node.args) > 1 else node.kwargs.get("exponent")
        x = node.args[0]
        if isinstance(x, torch.fx.Node) and type(exponent) in (int, float) and exponent == 2:
            return x
    if is_op(node, _MUL):
        assert isinstance(node, torch.fx.Node)
        if len(node.args) == 2 and node.args[0] is node.args[1]:
            x = node.args[0]
            return x if isinstance(x, torch.fx.Node) else None
    return None


def _mean_of_last_dim(mean: torch.fx.Node) -> torch.fx.Node | None:
    """The squares `mean` averages when it is mean.dim over the last dim, keepdim, no dtype."""
    args = list(mean.args) + [None] * (3 - len(mean.args))
    source, dims, keepdim = args[:3]
    dims = mean.kwargs.get("dim", dims)
    keepdim = mean.kwargs.get("keepdim", keepdim)
    if mean.kwargs.get("dtype") is not None or keepdim is not True:
        return None
    val = tensor_val(source)
    if not isinstance(source, torch.fx.Node) or val is None or val.dim() < 1:
        return None
    if not isinstance(dims, (list, tuple)) or len(dims) != 1:
        return None
    if dims[0] not in (-1, val.dim() - 1):
        return None
    return source


class FuseRmsNormPass:
    """`FuseRmsNormPass()(ep)` rewrites the RMSNorm subgraphs of `ep` in place."""

    def __call__(self, ep: ExportedProgram) -> PassReport:
        return fuse_subgraphs(ep, type(self).__name__, _RSQRT, self._match)

    @staticmethod
    def _eps(add: torch.fx.Node, mean: torch.fx.Node, constants: ProgramConstants) -> float | None:
        """eps when `add` is mean + eps, eps a number or a one-element float32 constant."""
        if len(add.args) != 2 or add.kwargs.get("alpha", 1) != 1:
            return None
        if is_op(add, _ADD_SCALAR):
            other = add.args[1] if add.args[0] is mean else None
            if type(other) in (int, float):
                assert isinstance(other, (int, float))
                return float(other)
            return None
        if not is_op(add, _ADD) or mean not in add.args or add.args[0] is add.args[1]:
            return None
        other = add.args[1] if add.args[0] is mean else add.args[0]
        if not constants.is_constant(other):
            return None
        assert isinstance(other, torch.fx.Node)
        value = constants.value(other)
        if value.dtype != torch.float32 or value.numel() != 1 or value.dim() > 1:
            return None
        return float(value.reshape(-1)[0].item())

    def _match(self, rsqrt: torch.fx.Node, constants: ProgramConstants) -> Fusion | None:
        add = rsqrt.args[0] if rsqrt.args else None
        if not isinstance(add, torch.fx.Node) or not only_user(add, rsqrt):
            return None
        means = [arg for arg in add.args if is_op(arg, _MEAN)]
        if len(means) != 1:
            return None
        mean = means[0]
        assert isinstance(mean, torch.fx.Node)
        eps = self._eps(add, mean, constants)
        if eps is None or not math.isfinite(eps) or not only_user(mean, add):
            return None
        square = _mean_of_last_dim(mean)
        if square is None or not only_user(square, mean):
            return None
        x = _squared(square)
        x_val = tensor_val(x)
        if x is None or x_val is None or not isinstance(x_val.shape[-1], int):
            return None
        # x * rsqrt (either order), its only reader.
        if len(rsqrt.users) != 1:
            return None
        (scaled,) = rsqrt.users
        if not is_op(scaled, _MUL) or set(scaled.args) != {x, rsqrt} or len(scaled.args) != 2:
            return None
        scaled_val = tensor_val(scaled)
        if not _f32(x, square, mean, add, rsqrt, scaled) or scaled_val is None:
            return None
        if scaled_val.shape != x_val.shape:
            return None
        weight, last = self._weight_of(scaled, x_val.shape[-1])
        dead = [rsqrt, add, mean, square]  # consumers first; `last` goes first of all
        if last is not scaled:
            dead.insert(0, scaled)
        return Fusion(last, quantized_ops.RMS_NORM, (x, weight, eps), dead)

    @staticmethod
    def _weight_of(scaled: torch.fx.Node, width: int) -> tuple[torch.fx.Node | None, torch.fx.Node]:
        """(weight, the weight mul) when `scaled` goes only to a mul by a float32 [D] tensor;
        (None, scaled) otherwise."""
        if len(scaled.users) != 1:
            return None, scaled
        (mul,) = scaled.users
        if not is_op(mul, _MUL) or len(mul.args) != 2 or mul.args[0] is mul.args[1]:
            return None, scaled
        if scaled not in mul.args:
            return None, scaled
        weight = mul.args[1] if mul.args[0] is scaled else mul.args[0]
        weight_val, mul_val, scaled_val = tensor_val(weight), tensor_val(mul), tensor_val(scaled)
        if weight_val is None or mul_val is None or scaled_val is None:
            return None, scaled
        if weight_val.dtype != torch.float32 or mul_val.dtype != torch.float32:
            return None, scaled
        if list(weight_val.shape) != [width] or mul_val.shape != scaled_val.shape:
            return None, scaled
        assert isinstance(weight, torch.fx.Node)
        return weight, mul
