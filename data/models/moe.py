"""A small mixture-of-experts decoder: attention, then a token-choice MoE block with a router, grouped experts
and a shared expert (torchtitan's names: `layers.N.moe.router.gate`, `layers.N.moe.experts.w1/w2/w3`,
`layers.N.moe.shared_experts.w1/w2/w3`).

The routed experts are 3-D parameters (experts, in, out) multiplied by `torch._grouped_mm` over the tokens
sorted by expert: they are not nn.Linear, so float8 training conversion leaves them alone (torchao handles
them in `torchao.prototype.moe_training`). The router is a Linear with N = number of experts (8: too small
for FP8). Every step stays shape-static (no `.item()`, no `nonzero`), so the whole forward traces on the
meta device.

Factories: `build_model()` (small) and `deepseek_v3_671b()`: DeepSeek-V3's published sizes (dim 7168, 61
blocks of which the first 3 dense with FFN 18432, 256 routed experts of hidden 2048, top 8, one shared expert,
vocabulary 129280; 671B parameters) on this module's plain multi-head attention: V3's multi-head latent
attention (MLA) is not modelled, so its attention Linears have other shapes than here (and are about 2% of the
parameters).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class MoEArgs:
    dim: int = 1024
    n_layers: int = 2
    n_heads: int = 16
    vocab_size: int = 32000
    n_experts: int = 8
    top_k: int = 2
    expert_hidden_dim: int = 1536
    shared_hidden_dim: int = 1536
    n_dense_layers: int = 0  # the first blocks have a dense feed-forward instead of the MoE
    dense_hidden_dim: int = 0


class Attention(nn.Module):
    def __init__(self, args: MoEArgs):
        super().__init__()
        self.n_heads = args.n_heads
        self.wq = nn.Linear(args.dim, args.dim, bias=False)
        self.wk = nn.Linear(args.dim, args.dim, bias=False)
        self.wv = nn.Linear(args.dim, args.dim, bias=False)
        self.wo = nn.Linear(args.dim, args.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = (
            w(x).view(batch, seq, self.n_heads, -1).transpose(1, 2) for w in (self.wq, self.wk, self.wv)
        )
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, dim))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Router(nn.Module):
    def __init__(self, dim: int, n_experts: int):
        super().__init__()
        self.gate = nn.Linear(dim, n_experts, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gate(x).softmax(dim=-1)


class GroupedExperts(nn.Module):
    """All experts' weights in three 3-D parameters, run with one grouped GEMM each."""

    def __init__(self, dim: int, hidden_dim: int, n_experts: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(n_experts, dim, hidden_dim))
        self.w2 = nn.Parameter(torch.empty(n_experts, hidden_dim, dim))
        self.w3 = nn.Parameter(torch.empty(n_experts, dim, hidden_dim))
        for weight in (self.w1, self.w2, self.w3):
            nn.init.normal_(weight, std=0.02)

    def forward(self, tokens: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        # tokens: (rows sorted by expert, dim); offsets: cumulative rows per expert (int32). Grouped GEMMs run
        # in bf16 (torch._grouped_mm insists on it on the GPU and the meta device), as MoE training does.
        tokens = tokens.to(torch.bfloat16)
        w1, w2, w3 = (w.to(torch.bfloat16) for w in (self.w1, self.w2, self.w3))
        hidden = F.silu(torch._grouped_mm(tokens, w1, offs=offsets))
        hidden = hidden * torch._grouped_mm(tokens, w3, offs=offsets)
        return torch._grouped_mm(hidden, w2, offs=offsets)


class MoE(nn.Module):
    def __init__(self, args: MoEArgs):
        super().__init__()
        self.n_experts, self.top_k = args.n_experts, args.top_k
        self.router = Router(args.dim, args.n_experts)
        self.experts = GroupedExperts(args.dim, args.expert_hidden_dim, args.n_experts)
        self.shared_experts = FeedForward(args.dim, args.shared_hidden_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        flat = x.reshape(-1, dim)
        scores = self.router(flat)
        top_scores, top_experts = scores.topk(self.top_k, dim=-1)
        expert_of_row = top_experts.reshape(-1)
        order = torch.argsort(expert_of_row, stable=True)
        # Rows per expert without a data-dependent shape: scatter-add ones into a fixed-size vector.
        counts = torch.zeros(self.n_experts, dtype=torch.int32, device=x.device)
        counts = counts.scatter_add(0, expert_of_row, torch.ones_like(expert_of_row, dtype=torch.int32))
        offsets = counts.cumsum(0, dtype=torch.int32)
        token_of_row = order // self.top_k
        routed = self.experts(flat[token_of_row], offsets).to(flat.dtype)
        routed = routed * top_scores.reshape(-1)[order].unsqueeze(-1)
        combined = torch.zeros_like(flat).index_add(0, token_of_row, routed)
        return combined.view(batch, seq, dim) + self.shared_experts(x)


class Block(nn.Module):
    def __init__(self, args: MoEArgs, dense: bool = False):
        super().__init__()
        self.attention_norm = nn.RMSNorm(args.dim)
        self.attention = Attention(args)
        self.moe_norm = nn.RMSNorm(args.dim)
        if dense:
            self.feed_forward = FeedForward(args.dim, args.dense_hidden_dim)
        else:
            self.moe = MoE(args)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        mixer = self.feed_forward if hasattr(self, "feed_forward") else self.moe
        return x + mixer(self.moe_norm(x))


class MoETransformer(nn.Module):
    def __init__(self, args: MoEArgs):
        super().__init__()
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleDict(
            {str(i): Block(args, dense=i < args.n_dense_layers) for i in range(args.n_layers)}
        )
        self.norm = nn.RMSNorm(args.dim)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h)
        return self.output(self.norm(h))


def build_model(**overrides) -> MoETransformer:
    """2 blocks, dim 1024, 8 experts (top 2) of hidden 1536, one shared expert."""
    return MoETransformer(replace(MoEArgs(), **overrides))


DEEPSEEK_V3_671B = MoEArgs(
    dim=7168,
    n_layers=61,
    n_heads=128,
    vocab_size=129280,
    n_experts=256,
    top_k=8,
    expert_hidden_dim=2048,
    shared_hidden_dim=2048,
    n_dense_layers=3,
    dense_hidden_dim=18432,
)


def deepseek_v3_671b(**overrides) -> MoETransformer:
    """DeepSeek-V3's sizes (671B parameters), plain multi-head attention for MLA (module docstring)."""
    return MoETransformer(replace(DEEPSEEK_V3_671B, **overrides))
