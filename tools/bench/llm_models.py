"""A Llama-style decoder with a KV cache, exported the way ExecuTorch's Llama export does it.

RMSNorm, rotary embeddings, SwiGLU; each layer's K and V caches are registered buffers
[batch, kv_heads, max_seq, head_dim] written in forward at `input_pos` (an int64 tensor input: the
positions of the tokens fed) with `index_copy_` (or `index_put_`), and attention runs over the
whole cache with a mask that hides the positions after each query's own. One token is a decode
step, N tokens a prefill. Shared by the KV-cache tests and tools/bench/llm_bench.py.
"""

import dataclasses
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

CacheUpdate = Literal["index_copy", "index_put"]


@dataclasses.dataclass(frozen=True)
class LlmConfig:
    """The decoder's sizes."""

    vocab: int = 256
    dim: int = 128
    layers: int = 2
    heads: int = 4
    hidden: int = 256
    max_seq: int = 64
    batch: int = 1
    cache_update: CacheUpdate = "index_copy"

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads


# The bench's sizes: `small` stays in cache, `large` is a ~0.54B-parameter TinyLlama-like model.
SIZES: dict[str, LlmConfig] = {
    "tiny": LlmConfig(vocab=256, dim=64, layers=1, heads=2, hidden=128, max_seq=32),
    "test": LlmConfig(),
    "small": LlmConfig(vocab=4096, dim=512, layers=4, heads=8, hidden=1536, max_seq=256),
    "large": LlmConfig(vocab=32000, dim=2048, layers=8, heads=32, hidden=5632, max_seq=256),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class KVCache(nn.Module):
    """One layer's K and V caches, updated in place at the fed positions."""

    def __init__(self, config: LlmConfig) -> None:
        super().__init__()
        self.update_kind = config.cache_update
        shape = (config.batch, config.heads, config.max_seq, config.head_dim)
        self.k_cache: torch.Tensor
        self.v_cache: torch.Tensor
        self.register_buffer("k_cache", torch.zeros(shape), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape), persistent=False)

    def update(
        self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Writes k, v [batch, heads, seq, head_dim] at positions `input_pos` [seq]; returns the
        whole caches."""
        if self.update_kind == "index_copy":
            self.k_cache.index_copy_(2, input_pos, k)
            self.v_cache.index_copy_(2, input_pos, v)
        else:
            # `cache[:, :, input_pos] = k`, as ExecuTorch's Llama export writes it: aten.index_put_.
            self.k_cache[:, :, input_pos] = k
            self.v_cache[:, :, input_pos] = v
        return self.k_cache, self.v_cache


class Attention(nn.Module):
    def __init__(self, config: LlmConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.head_dim = config.head_dim
        self.wq = nn.Linear(config.dim, config.dim, bias=False)
        self.wk = nn.Linear(config.dim, config.dim, bias=False)
        self.wv = nn.Linear(config.dim, config.dim, bias=False)
        self.wo = nn.Linear(config.dim, config.dim, bias=False)
        self.kv_cache = KVCache(config)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
        input_pos: torch.Tensor,
    ) -> torch.Tensor:
        batch, seq, dim = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, seq, self.heads, self.head_dim).transpose(1, 2)

        q, k, v = heads(self.wq(x)), heads(self.wk(x)), heads(self.wv(x))
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        keys, values = self.kv_cache.update(input_pos, k, v)
        scores = q @ keys.transpose(-2, -1) * self.head_dim**-0.5 + mask
        out = torch.softmax(scores, dim=-1) @ values
        return self.wo(out.transpose(1, 2).reshape(batch, seq, dim))


class Block(nn.Module):
    def __init__(self, config: LlmConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(config.dim)
        self.attention = Attention(config)
        self.ffn_norm = RMSNorm(config.dim)
        self.w1 = nn.Linear(config.dim, config.hidden, bias=False)
        self.w3 = nn.Linear(config.dim, config.hidden, bias=False)
        self.w2 = nn.Linear(config.hidden, config.dim, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
        input_pos: torch.Tensor,
    ) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin, mask, input_pos)
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class KVCacheDecoder(nn.Module):
    """forward(tokens [batch, seq] int64, input_pos [seq] int64) -> logits [batch, seq, vocab]."""

    def __init__(self, config: LlmConfig) -> None:
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab, config.dim)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = RMSNorm(config.dim)
        self.output = nn.Linear(config.dim, config.vocab, bias=False)
        head_dim = config.head_dim
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(config.max_seq).float(), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)  # [max_seq, head_dim]
        self.rope_cos: torch.Tensor
        self.rope_sin: torch.Tensor
        self.register_buffer("rope_cos", angles.cos(), persistent=False)
        self.register_buffer("rope_sin", angles.sin(), persistent=False)
        self.positions: torch.Tensor
        self.register_buffer("positions", torch.arange(config.max_seq), persistent=False)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        cos = self.rope_cos.index_select(0, input_pos)  # [seq, head_dim]
        sin = self.rope_sin.index_select(0, input_pos)
        # A query at position p sees the cache positions <= p: [seq, max_seq], 0 or -inf.
        visible = self.positions.unsqueeze(0) <= input_pos.unsqueeze(1)
        mask = torch.zeros(visible.shape).masked_fill(~visible, float("-inf"))
        x = self.embedding(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, input_pos)
        return self.output(self.norm(x))


def make_decoder(config: LlmConfig, seed: int = 0) -> KVCacheDecoder:
    """A decoder with random weights (norm weights around 1, not all 1)."""
    torch.manual_seed(seed)
    model = KVCacheDecoder(config).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, RMSNorm):
                module.weight.add_(0.1 * torch.randn_like(module.weight))
    return model


def example_inputs(
    config: LlmConfig, seq: int, start: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens [batch, seq] and their positions start .. start+seq-1."""
    tokens = torch.randint(0, config.vocab, (config.batch, seq))
    return tokens, torch.arange(start, start + seq, dtype=torch.int64)


def export_decoder(
    model: nn.Module,
    inputs: tuple[torch.Tensor, torch.Tensor],
    dynamic: bool = True,
    max_seq: int | None = None,
) -> torch.export.ExportedProgram:
    """torch.export of the decoder. `dynamic`: the token count is a bounded Dim (1..max_seq), so
    one program runs the prefill and every decode step. Exported under no_grad as ExecuTorch's
    Llama export does: otherwise the caches, written from values computed from parameters that
    require grad, are traced as requiring grad and `to_executorch()` fails on their in-place
    write-back ("a leaf Variable that requires grad is being used in an in-place operation")."""
    dynamic_shapes = None
    if dynamic:
        if max_seq is None:
            if not isinstance(model, KVCacheDecoder):
                raise ValueError("max_seq is needed to bound the token count of this model")
            max_seq = model.config.max_seq
        bound = max_seq
        seq = torch.export.Dim("seq", min=1, max=bound)
        dynamic_shapes = ({1: seq}, {0: seq})
    with torch.no_grad():
        return torch.export.export(model.eval(), inputs, dynamic_shapes=dynamic_shapes)


def reset_caches(model: nn.Module) -> None:
    """Zeroes every KV cache of `model` (a fresh sequence)."""
    for module in model.modules():
        if isinstance(module, KVCache):
            module.k_cache.zero_()
            module.v_cache.zero_()
