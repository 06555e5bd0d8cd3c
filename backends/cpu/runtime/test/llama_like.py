"""A small Llama-style decoder (RMSNorm, causal attention without a KV cache, SwiGLU MLP) for the
torchao lowering tests."""

import torch
from torch import nn


class RmsNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


class Block(nn.Module):
    """Pre-norm causal self-attention and a SwiGLU MLP, Llama-style (no KV cache)."""

    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.heads = heads
        self.attention_norm = RmsNorm(dim)
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.mlp_norm = RmsNorm(dim)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        h = self.attention_norm(x)

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, seq, self.heads, dim // self.heads).transpose(1, 2)

        q, k, v = heads(self.wq(h)), heads(self.wk(h)), heads(self.wv(h))
        scores = q @ k.transpose(-2, -1) * (dim // self.heads) ** -0.5 + mask
        attention = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(batch, seq, dim)
        x = x + self.wo(attention)
        h = self.mlp_norm(x)
        return x + self.w2(nn.functional.silu(self.w1(h)) * self.w3(h))


class Decoder(nn.Module):
    def __init__(self, vocab: int = 256, dim: int = 128, layers: int = 2) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, 4, 2 * dim) for _ in range(layers))
        self.norm = RmsNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        mask = torch.full((seq, seq), float("-inf")).triu(1)
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x, mask)
        return self.output(self.norm(x))
