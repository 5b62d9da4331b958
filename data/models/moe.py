"""Mixture-of-experts decoders: attention, then a token-choice MoE block with a router, routed experts and a
shared expert (torchtitan's names: `layers.N.moe.router.gate`, `layers.N.moe.experts.w1/w2/w3`,
`layers.N.moe.shared_experts.w1/w2/w3`).

The routed experts are 3-D parameters (experts, in, out) multiplied by `torch._grouped_mm` over the tokens
sorted by expert: they are not nn.Linear, so Float8Linear conversion leaves them alone (they convert as a
group: torchtitan's Float8GroupedExpertsConverter, torchao's `moe_training`). The router is a Linear with N =
number of experts (8: too small for FP8). Every step stays shape-static (no `.item()`, no `nonzero`), so the
whole forward traces on the meta device.

Factories:
- `build_model()`: small, plain multi-head attention, 8 experts top 2.
- `deepseek_v3_671b()`: DeepSeek-V3's published sizes (dim 7168, 61 blocks of which the first 3 dense with FFN
  18432, 256 routed experts of hidden 2048, top 8, one shared expert, vocabulary 129280) with its multi-head
  latent attention (MLA: torchtitan's deepseek_v3 names and widths, q_lora_rank 1536, kv_lora_rank 512, head
  dims 128 + 64 rope, value 128): 671B parameters, without the multi-token-prediction module.
- `deepseek_v3_small()`: the same widths in 5 blocks (3 dense, 2 MoE): traces in a few seconds.
- `mixtral_style()`: the older Mixtral form, routed experts as a ModuleList of Linear MLPs
  (`layers.N.block_sparse_moe.experts.E.w1/w2/w3`, router `block_sparse_moe.gate`) run one by one on the rows
  `torch.where` picks: a data-dependent dispatch, so the meta trace stops at the first MoE block.
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
    attention: str = (
        "mha"  # "mha": plain multi-head attention; "mla": DeepSeek-V3's multi-head latent attention
    )
    experts: str = (
        "grouped"  # "grouped": 3-D weights in torch._grouped_mm; "linear_list": a ModuleList of MLPs
    )
    # MLA only (torchtitan deepseek_v3's names and DeepSeek-V3's widths)
    q_lora_rank: int = 1536
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128


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


class LatentAttention(nn.Module):
    """DeepSeek-V3's multi-head latent attention (MLA), named as torchtitan's deepseek_v3 `Attention`: queries
    through a low-rank bottleneck (wq_a, q_norm, wq_b), keys and values from one compressed latent (wkv_a,
    kv_norm, wkv_b) plus a shared rotary key part. Rotary embedding itself is left out: it has no weights and
    does not change a shape."""

    def __init__(self, args: MoEArgs):
        super().__init__()
        self.n_heads = args.n_heads
        self.kv_lora_rank = args.kv_lora_rank
        self.qk_nope_head_dim, self.qk_rope_head_dim = args.qk_nope_head_dim, args.qk_rope_head_dim
        self.qk_head_dim = args.qk_nope_head_dim + args.qk_rope_head_dim
        self.v_head_dim = args.v_head_dim
        self.wq_a = nn.Linear(args.dim, args.q_lora_rank, bias=False)
        self.q_norm = nn.RMSNorm(args.q_lora_rank)
        self.wq_b = nn.Linear(args.q_lora_rank, args.n_heads * self.qk_head_dim, bias=False)
        self.wkv_a = nn.Linear(args.dim, args.kv_lora_rank + args.qk_rope_head_dim, bias=False)
        self.kv_norm = nn.RMSNorm(args.kv_lora_rank)
        self.wkv_b = nn.Linear(
            args.kv_lora_rank, args.n_heads * (args.qk_nope_head_dim + args.v_head_dim), bias=False
        )
        self.wo = nn.Linear(args.n_heads * args.v_head_dim, args.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.wq_b(self.q_norm(self.wq_a(x))).view(batch, seq, self.n_heads, self.qk_head_dim)
        kv, k_rope = torch.split(self.wkv_a(x), [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        kv = self.wkv_b(self.kv_norm(kv)).view(batch, seq, self.n_heads, -1)
        k_nope, v = torch.split(kv, [self.qk_nope_head_dim, self.v_head_dim], dim=-1)
        k_rope = k_rope.unsqueeze(2).expand(-1, -1, self.n_heads, -1)
        k = torch.cat([k_nope, k_rope], dim=-1)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


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


class SparseMoeBlock(nn.Module):
    """The older Mixtral MoE (transformers 4's MixtralSparseMoeBlock): a router Linear `gate` and a
    ModuleList of E expert MLPs, each run on the rows routed to it (`torch.where` on the routing mask: data
    dependent)."""

    def __init__(self, args: MoEArgs):
        super().__init__()
        self.num_experts, self.top_k = args.n_experts, args.top_k
        self.gate = nn.Linear(args.dim, args.n_experts, bias=False)
        self.experts = nn.ModuleList(
            FeedForward(args.dim, args.expert_hidden_dim) for _ in range(args.n_experts)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        flat = x.reshape(-1, dim)
        weights = self.gate(flat).softmax(dim=-1)
        weights, selected = torch.topk(weights, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(flat)
        mask = F.one_hot(selected, num_classes=self.num_experts).permute(2, 1, 0)  # (expert, k, token)
        for index, expert in enumerate(self.experts):
            slot, token = torch.where(mask[index])
            out.index_add_(0, token, expert(flat[token]) * weights[token, slot, None])
        return out.view(batch, seq, dim)


class Block(nn.Module):
    def __init__(self, args: MoEArgs, dense: bool = False):
        super().__init__()
        self.attention_norm = nn.RMSNorm(args.dim)
        self.attention = LatentAttention(args) if args.attention == "mla" else Attention(args)
        self.moe_norm = nn.RMSNorm(args.dim)
        if dense:
            self.feed_forward = FeedForward(args.dim, args.dense_hidden_dim)
        elif args.experts == "linear_list":
            self.block_sparse_moe = SparseMoeBlock(args)
        else:
            self.moe = MoE(args)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        for name in ("feed_forward", "block_sparse_moe", "moe"):
            mixer = getattr(self, name, None)
            if mixer is not None:
                return x + mixer(self.moe_norm(x))
        raise AssertionError("a block has a feed-forward or a MoE")


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
    attention="mla",
)


def deepseek_v3_671b(**overrides) -> MoETransformer:
    """DeepSeek-V3's sizes and MLA attention (671B parameters, the module docstring)."""
    return MoETransformer(replace(DEEPSEEK_V3_671B, **overrides))


def deepseek_v3_small(**overrides) -> MoETransformer:
    """DeepSeek-V3's widths (MLA, 256 routed experts top 8, one shared, dense first 3 blocks) in 5 blocks."""
    return MoETransformer(replace(DEEPSEEK_V3_671B, n_layers=5, **overrides))


def mixtral_style(**overrides) -> MoETransformer:
    """2 blocks, dim 1024, 8 experts (top 2) as a ModuleList of Linear MLPs, dispatched with torch.where."""
    return MoETransformer(replace(MoEArgs(), experts="linear_list", **overrides))
