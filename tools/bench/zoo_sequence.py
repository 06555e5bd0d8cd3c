"""The zoo's transformer and sequence families (issue 19), written with `torch.nn` only.

- ``ViTLike``: a ViT-Tiny-style image transformer: a strided patch convolution, a class token and
  learned position embeddings, pre-norm blocks of multi-head softmax attention (written out:
  q @ k^T, scale, softmax, @ v) and a GELU MLP, layer norm, a linear head on the class token.
- ``LlamaLike``: a Llama-style decoder over int64 token ids: an embedding, RMSNorm written as
  x * rsqrt(mean(x^2) + eps) * weight, rotary position embeddings (rotate-half form), causal
  `scaled_dot_product_attention`, a SwiGLU MLP (silu(x W1) * (x W3)) W2, tied-free LM head.
- ``TextCNN``: a text classifier over int64 token ids: an embedding, Conv1d branches of several
  widths with ReLU, max over time (amax), concatenated, a linear head; it returns the logits and
  their argmax (an int64 output).

The architectures follow the published shapes of each family; no code comes from timm, torchvision
or Meta's reference implementation.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

# --- ViT ------------------------------------------------------------------------------------------


class _Attention(nn.Module):
    """Multi-head self-attention, the softmax written out (what a hand-written ViT exports)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.heads, dim // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (batch, heads, tokens, head_dim)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(dim // self.heads))
        out = scores.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(batch, tokens, dim))


class _ViTBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = _Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(), nn.Linear(mlp, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViTLike(nn.Module):
    """ViT: patch embedding, class token, `depth` pre-norm blocks, a linear head on the class
    token."""

    def __init__(
        self, image: int, patch: int, dim: int, depth: int, heads: int, classes: int
    ) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        tokens = (image // patch) ** 2 + 1
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.blocks = nn.Sequential(*(_ViTBlock(dim, heads, 4 * dim) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.patch(image).flatten(2).transpose(1, 2)  # (batch, patches, dim)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


# --- Llama ----------------------------------------------------------------------------------------


class _RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class _LlamaBlock(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.heads = heads
        self.attn_norm = _RMSNorm(dim)
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.mlp_norm = _RMSNorm(dim)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        h = self.attn_norm(x)

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, tokens, self.heads, dim // self.heads).transpose(1, 2)

        q, k, v = heads(self.wq(h)), heads(self.wk(h)), heads(self.wv(h))
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(attn.transpose(1, 2).reshape(batch, tokens, dim))
        h = self.mlp_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class LlamaLike(nn.Module):
    """A Llama-style decoder: token embedding, `depth` blocks, RMSNorm, LM head (logits)."""

    def __init__(
        self, vocab: int, dim: int, depth: int, heads: int, hidden: int, max_tokens: int
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(_LlamaBlock(dim, heads, hidden) for _ in range(depth))
        self.norm = _RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        head_dim = dim // heads
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(max_tokens).float(), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)  # (max_tokens, head_dim)
        self.cos: torch.Tensor
        self.sin: torch.Tensor
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        cos, sin = self.cos[:length], self.sin[:length]
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))


# --- Text CNN -------------------------------------------------------------------------------------


class TextCNN(nn.Module):
    """Embedding, Conv1d+ReLU branches of `widths`, max over time, cat, linear; logits, argmax."""

    def __init__(
        self, vocab: int, dim: int, channels: int, widths: tuple[int, ...], classes: int
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.branches = nn.ModuleList(nn.Conv1d(dim, channels, w, padding=w // 2) for w in widths)
        self.head = nn.Linear(channels * len(widths), classes)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.embed(tokens).transpose(1, 2)  # (batch, dim, tokens)
        pooled = [torch.amax(F.relu(branch(x)), dim=-1) for branch in self.branches]
        logits = self.head(torch.cat(pooled, dim=1))
        return logits, logits.argmax(dim=-1)
