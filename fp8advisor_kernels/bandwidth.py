"""A memory-bandwidth probe: a plain copy kernel, each byte read once and written once."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, numel, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < numel
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


def copy(src: torch.Tensor, dst: torch.Tensor | None = None, *, block: int = 4096) -> torch.Tensor:
    """Copy contiguous `src` into `dst` (allocated when None) with one Triton kernel; returns `dst`."""
    if not src.is_contiguous():
        raise ValueError("the bandwidth probe copies contiguous tensors only")
    dst = torch.empty_like(src) if dst is None else dst
    if dst.shape != src.shape or dst.dtype != src.dtype or not dst.is_contiguous():
        raise ValueError("dst must be a contiguous tensor of src's shape and dtype")
    numel = src.numel()
    _copy_kernel[(triton.cdiv(numel, block),)](src, dst, numel, BLOCK=block)
    return dst


def copy_bytes_moved(src: torch.Tensor) -> int:
    """Bytes a copy of `src` reads plus writes."""
    return 2 * src.numel() * src.element_size()


__all__ = ["copy", "copy_bytes_moved"]
