"""torchao's weight-only linears and embeddings (IntxWeightOnlyConfig: int4/int8 weights per
group or per row, symmetric or asymmetric; float32 activations).

`quantize_(model, IntxWeightOnlyConfig(...))` exports a linear as

    dequantize_affine(W_q, [1, group], scales, zero_points, int8, qmin, qmax) -> linear(x, W, bias)

and, with `filter_fn=lambda m, fqn: isinstance(m, nn.Embedding)`, an embedding as

    dequantize_affine(table_q, [1, group], scales, zero_points, ...) -> embedding(table, indices)

`match_linear_wo` / `match_embedding_wo` recognise them; fusion.py replaces them by
`et_cpu_quant::linear_wo` / `et_cpu_quant::embedding_wo` (see quantized_ops.py).
"""

from __future__ import annotations

import dataclasses

import torch

from backends.cpu.torchao.graph import (
    DEQUANTIZE,
    EMBEDDING,
    LINEAR,
    WeightMatch,
    arg,
    key,
    match_weight,
    val,
)
from backends.cpu.torchao.linear_8da import bias_of

_INDEX_DTYPES = (torch.int64, torch.int32)


@dataclasses.dataclass(frozen=True)
class LinearWoMatch:
    """A weight-only linear: float32 x times a quantized constant weight [N, K]."""

    linear: torch.fx.Node
    x: torch.fx.Node
    weight: WeightMatch
    bias: torch.fx.Node | None

    @property
    def chain(self) -> tuple[torch.fx.Node, ...]:
        return (self.weight.dequantize,)


@dataclasses.dataclass(frozen=True)
class EmbeddingWoMatch:
    """A lookup of integer indices in a quantized constant table [V, D]."""

    embedding: torch.fx.Node
    indices: torch.fx.Node
    weight: WeightMatch

    @property
    def chain(self) -> tuple[torch.fx.Node, ...]:
        return (self.weight.dequantize,)


def match_linear_wo(linear: torch.fx.Node) -> LinearWoMatch | str:
    """The weight-only pattern ending at `linear`, or why `linear` is not one."""
    if key(linear) != LINEAR:
        return "not aten.linear"
    x = linear.args[0]
    if key(x) == DEQUANTIZE:
        return "linear input is dequantize_affine (a quantized activation, not weight-only)"
    x_val = val(x)
    if not isinstance(x, torch.fx.Node) or x_val is None or x_val.dtype != torch.float32:
        return "linear input is not a float32 tensor"
    if x_val.dim() < 1:
        return "linear input has no dims"
    weight = match_weight(linear.args[1])
    if isinstance(weight, str):
        return f"linear {weight}"
    if x_val.shape[-1] != weight.cols:
        return "weight and input disagree on K"
    bias = bias_of(linear, weight.rows)
    if isinstance(bias, str):
        return bias
    return LinearWoMatch(linear=linear, x=x, weight=weight, bias=bias)


def match_embedding_wo(embedding: torch.fx.Node) -> EmbeddingWoMatch | str:
    """The quantized-table pattern ending at `embedding`, or why `embedding` is not one."""
    if key(embedding) != EMBEDDING:
        return "not aten.embedding"
    weight = match_weight(embedding.args[0])
    if isinstance(weight, str):
        return f"embedding {weight}"
    indices = arg(embedding, 1, "indices")
    i_val = val(indices)
    if not isinstance(indices, torch.fx.Node) or i_val is None or i_val.dtype not in _INDEX_DTYPES:
        return "embedding indices are not an int64 / int32 tensor"
    if indices is weight.dequantize:
        return "embedding indexes its own table"
    return EmbeddingWoMatch(embedding=embedding, indices=indices, weight=weight)
