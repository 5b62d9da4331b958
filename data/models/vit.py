"""A ViT-B/16-shaped image encoder built from torch's own nn.MultiheadAttention.

What it shows in `fp8advisor layers`:
- M is the number of tokens per image (14 x 14 patches + 1 class token = 197) times the batch, whatever --seq
  says: 197 is not a multiple of 16, so at batch 1 no Linear can run torch._scaled_mm's grad_weight GEMM;
- nn.MultiheadAttention multiplies `in_proj_weight` (a bare parameter, never converted) and `out_proj.weight`
  directly, so `out_proj` is a Linear that conversion would swap but the forward never calls;
- the classifier head sees one row per image (M = batch) and N = 1000.
"""

from __future__ import annotations

import torch
from torch import nn


class EncoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_dim: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Linear(mlp_dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(
        self,
        image_size: int = 224,
        patch_size: int = 16,
        dim: int = 768,
        depth: int = 12,
        heads: int = 12,
        mlp_dim: int = 3072,
        num_classes: int = 1000,
    ):
        super().__init__()
        self.image_size = image_size
        num_patches = (image_size // patch_size) ** 2
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, dim))
        self.blocks = nn.Sequential(*(EncoderBlock(dim, heads, mlp_dim) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def build_model(**overrides) -> VisionTransformer:
    """ViT-B/16 at 224 x 224: 12 blocks, dim 768, MLP 3072, 1000 classes."""
    return VisionTransformer(**overrides)


def vit_tiny(**overrides) -> VisionTransformer:
    """A tiny ViT (2 blocks, dim 64, 32 x 32 images) for quick CPU runs."""
    return VisionTransformer(
        **{"image_size": 32, "dim": 64, "depth": 2, "heads": 4, "mlp_dim": 128, **overrides}
    )


def example_inputs(batch: int, seq: int) -> torch.Tensor:
    """A batch of 224 x 224 RGB images; `seq` does not apply to an image model (197 tokens per image)."""
    return torch.randn(batch, 3, 224, 224)
