"""A Llama-3-style decoder with torchtitan's module names, for `fp8advisor layers` and the tests.

Names follow torchtitan (`tok_embeddings`, `layers.N.attention.wq/wk/wv/wo`, `layers.N.feed_forward.w1/w2/w3`,
`norm`, `output`), so the FQNs it reports paste into a torchtitan `filter_fqns` as they are. Plain torch:
nothing is allocated at import; the factories build the model wherever the caller's device context says.

Factories: `llama3_8b()`, `llama3_70b()`, `llama3_405b()` (the published shapes; 70B has 80 blocks, 561
Linear; 405B has 126 blocks, 883 Linear), and `build_model()` (a small default). Each takes keyword
overrides, e.g. `llama3.py:llama3_70b(n_layers=4)`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ModelArgs:
    dim: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int = 8
    vocab_size: int = 128256
    multiple_of: int = 1024  # the FFN hidden size is rounded up to a multiple of this
    ffn_dim_multiplier: float = 1.3
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0

    @property
    def ffn_hidden_dim(self) -> int:
        # Llama's rule: 2/3 of 4*dim, scaled, rounded up to multiple_of (8B: 14336, 70B: 28672, 405B: 53248).
        hidden = int(2 * 4 * self.dim / 3)
        hidden = int(self.ffn_dim_multiplier * hidden)
        return self.multiple_of * ((hidden + self.multiple_of - 1) // self.multiple_of)


LLAMA3_8B = ModelArgs()
LLAMA3_70B = ModelArgs(dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, multiple_of=4096)
LLAMA3_405B = ModelArgs(
    dim=16384, n_layers=126, n_heads=128, n_kv_heads=8, ffn_dim_multiplier=1.2, multiple_of=4096
)


def rotary(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary position embedding of x (batch, seq, heads, head_dim), computed for the sequence at hand."""
    seq, head_dim = x.shape[1], x.shape[-1]
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=x.device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq, device=x.device, dtype=torch.float32), freqs)
    cos, sin = angles.cos()[None, :, None, :].to(x.dtype), angles.sin()[None, :, None, :].to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_heads, self.n_kv_heads = args.n_heads, args.n_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.rope_theta = args.rope_theta
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.wq(x).view(batch, seq, self.n_heads, self.head_dim)
        k = self.wk(x).view(batch, seq, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(batch, seq, self.n_kv_heads, self.head_dim)
        q, k = rotary(q, self.rope_theta), rotary(k, self.rope_theta)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.attention_norm = nn.RMSNorm(args.dim, eps=args.norm_eps)
        self.attention = Attention(args)
        self.ffn_norm = nn.RMSNorm(args.dim, eps=args.norm_eps)
        self.feed_forward = FeedForward(args.dim, args.ffn_hidden_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(args) for i in range(args.n_layers)})
        self.norm = nn.RMSNorm(args.dim, eps=args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h)
        return self.output(self.norm(h))


def llama3_8b(**overrides) -> Transformer:
    """Llama 3 8B shapes: dim 4096, 32 blocks, 32 heads (8 KV), FFN 14336, vocabulary 128256."""
    return Transformer(replace(LLAMA3_8B, **overrides))


def llama3_70b(**overrides) -> Transformer:
    """Llama 3 70B shapes: dim 8192, 80 blocks, 64 heads (8 KV), FFN 28672, vocabulary 128256."""
    return Transformer(replace(LLAMA3_70B, **overrides))


def llama3_405b(**overrides) -> Transformer:
    """Llama 3.1 405B shapes: dim 16384, 126 blocks, 128 heads (8 KV), FFN 53248, vocabulary 128256."""
    return Transformer(replace(LLAMA3_405B, **overrides))


def build_model(**overrides) -> Transformer:
    """A small Llama-3-shaped model (2 blocks, dim 256) that runs on a CPU in a blink."""
    small = ModelArgs(dim=256, n_layers=2, n_heads=8, n_kv_heads=2, vocab_size=1024, multiple_of=256)
    return Transformer(replace(small, **overrides))
