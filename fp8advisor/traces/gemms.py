"""A GEMM's (M, K, N) from the input shapes the profiler recorded for its op.

`aten::mm(a[M, K], b[K, N])`, `addmm(bias, a, b)`, `_scaled_mm(a[M, K], b[K, N], scale_a, scale_b, ...)`,
`bmm(a[B, M, K], b[B, K, N])`, `linear(x[..., K], w[N, K])`, `_grouped_mm(a[M, K], b[G, K, N], offs)` and
`_scaled_grouped_mm` likewise. A Linear layer of (M, K, N) runs three GEMMs a step: forward (M, K, N), the
input gradient (M, N, K) and the weight gradient (N, M, K) or (K, M, N): the same three numbers in another
order. `ShapeGroup` is that set of numbers: what ties a layer's three GEMMs together without knowing which
is which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Where each op's two GEMM operands are among its inputs.
_OPERANDS = {
    "aten::mm": (0, 1),
    "aten::_scaled_mm": (0, 1),
    "aten::matmul": (0, 1),
    "aten::addmm": (1, 2),
    "aten::_addmm_activation": (1, 2),
    "aten::bmm": (0, 1),
    "aten::baddbmm": (1, 2),
    "aten::addbmm": (1, 2),
    "aten::linear": (0, 1),
    "aten::_grouped_mm": (0, 1),
    "aten::_scaled_grouped_mm": (0, 1),
}


@dataclass(frozen=True, order=True)
class GemmShape:
    """Rows M, inner K and columns N of one GEMM; `batch` for bmm, `groups` for grouped GEMMs (M: all
    rows)."""

    M: int
    K: int
    N: int
    batch: int = 1
    groups: int = 1

    @property
    def group(self) -> ShapeGroup:
        return ShapeGroup(tuple(sorted((self.M, self.K, self.N))), self.batch, self.groups)

    @property
    def flops(self) -> float:
        return 2.0 * self.M * self.K * self.N * self.batch

    def __str__(self) -> str:
        text = f"{self.M}x{self.K}x{self.N}"
        if self.batch > 1:
            text = f"{self.batch}x({text})"
        return f"{text} in {self.groups} groups" if self.groups > 1 else text


@dataclass(frozen=True, order=True)
class ShapeGroup:
    """The three sizes of a GEMM, sorted: the forward and both backward GEMMs of one Linear share them."""

    sizes: tuple[int, int, int]
    batch: int = 1
    groups: int = 1

    def __str__(self) -> str:
        text = "{" + ",".join(str(size) for size in self.sizes) + "}"
        if self.batch > 1:
            text += f" x{self.batch}"
        return text + (f" in {self.groups} groups" if self.groups > 1 else "")

    @classmethod
    def of_layer(cls, M: int, K: int, N: int, batch: int = 1, groups: int = 1) -> ShapeGroup:
        return cls(tuple(sorted((M, K, N))), batch, groups)  # type: ignore[arg-type]


def gemm_shape(op_name: str, dims: tuple | None) -> GemmShape | None:
    """The op's GEMM shape from its recorded `Input Dims`; None when the op is not a GEMM this module knows
    or its shapes were not recorded."""
    operands = _OPERANDS.get(op_name)
    if operands is None or not dims or len(dims) <= max(operands):
        return None
    a, b = dims[operands[0]], dims[operands[1]]
    if not a or not b or not all(isinstance(size, int) for size in (*a, *b)):
        return None
    if op_name in ("aten::_grouped_mm", "aten::_scaled_grouped_mm"):
        return _grouped(a, b, _offsets(op_name, dims))
    if op_name == "aten::linear":  # x[..., K] @ w[N, K].T
        return GemmShape(math.prod(a[:-1]), a[-1], b[0]) if len(b) == 2 else None
    if len(a) == 2 and len(b) == 2:
        return GemmShape(a[0], a[1], b[1])
    if len(a) == 3 and len(b) == 3:
        return GemmShape(a[1], a[2], b[2], batch=a[0])
    if len(b) == 2 and len(a) > 2:  # matmul of a batch of rows by one matrix
        return GemmShape(math.prod(a[:-1]), a[-1], b[1])
    return None


def _offsets(op_name: str, dims: tuple) -> int | None:
    """The number of groups from the `offs` input (`_grouped_mm(a, b, offs)`, `_scaled_grouped_mm(a, b,
    scale_a, scale_b, offs)`), when recorded."""
    index = 2 if op_name == "aten::_grouped_mm" else 4
    offs = dims[index] if len(dims) > index else None
    return offs[0] if offs and len(offs) == 1 and isinstance(offs[0], int) else None


def _grouped(a: tuple, b: tuple, groups: int | None) -> GemmShape | None:
    """2-D x 3-D (routed experts: all tokens, one weight per group), 3-D x 3-D (one batch per group) or
    2-D x 2-D (the weight gradient, split by groups along M: `groups` from the offsets)."""
    if len(a) == 2 and len(b) == 3:
        return GemmShape(a[0], a[1], b[2], groups=b[0])
    if len(a) == 3 and len(b) == 3:
        return GemmShape(a[0] * a[1], a[2], b[2], groups=a[0])
    if len(a) == 2 and len(b) == 2:  # the weight gradient: a[K, M] @ b[M, N] split by groups along M
        return GemmShape(a[0], a[1], b[1], groups=groups or 1)
    return None


__all__ = ["GemmShape", "ShapeGroup", "gemm_shape"]
