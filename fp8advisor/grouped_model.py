"""Predict a grouped expert GEMM's float8 speedup at (E, M_per_expert, K, N) from measured points: the
predictor of `profile.GroupedProfile` (and of its leave-one-out error in `fp8advisor.fit`).

The rule is the Linear predictor's (`fp8advisor.predict`), on four axes: inside the measured grid, linear in
(log2 E, log2 M_per_expert, log2 K, log2 N) -> log speedup (`predict.multilinear` over the product of the
measured axis values; holes, such as the shapes too large for one GPU or failed points, first filled from
their measured neighbours along each axis, `predict.fill_grid_holes`). Outside it:

- E, K or N outside the measured range: no answer (None). These are the expert count and widths of a model,
  which the grid is chosen to span; a figure from outside would be a guess.
- M_per_expert above the largest measured: clamp to the edge (speedup saturates as the GEMMs become compute
  bound, and clamping never promises more than was measured).
- M_per_expert below the smallest measured: the edge speedup times the measured trend between the two
  smallest M_per_expert at the same (E, K, N), continued in log-log, and never above the edge (fixed costs,
  the per-expert weight casts above all, take over as the groups shrink, so speedup falls).

Both outside cases say "extrapolated"; inside, "interpolated".
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

INTERPOLATED = "interpolated"
EXTRAPOLATED = "extrapolated"

#: log2 units within which a query counts as on a measured axis value (float rounding of log2).
_TOLERANCE = 1e-9

_M_AXIS = 1  # (E, M_per_expert, K, N)


class GroupedModel:
    """Log-space multilinear interpolation over measured (E, M_per_expert, K, N) points, with the outside
    rules of the module docstring."""

    def __init__(self, shapes: Sequence[tuple[int, int, int, int]], speedups: Sequence[float]):
        from fp8advisor.errors import ProfileError
        from fp8advisor.predict import fill_grid_holes

        if len(shapes) == 0:
            raise ProfileError("no measured grouped points", hint="run `fp8advisor bench --grouped`")
        coords = np.log2(np.asarray(shapes, dtype=float))
        logs = np.log(np.asarray(speedups, dtype=float))
        self.axes = [np.unique(coords[:, dim]) for dim in range(4)]
        self.varying = [dim for dim in range(4) if len(self.axes[dim]) > 1]
        grid = np.full([len(self.axes[dim]) for dim in range(4)], np.nan)
        index = tuple(np.searchsorted(self.axes[dim], coords[:, dim]) for dim in range(4))
        if len(set(zip(*index, strict=True))) != len(coords):
            raise ProfileError("a grouped shape appears twice among the points", hint="merge repeated points")
        grid[index] = logs
        self.fill_fraction = len(coords) / grid.size
        if np.isnan(grid).any():
            reduced = grid.reshape([len(self.axes[dim]) for dim in self.varying])
            grid = fill_grid_holes(reduced, [self.axes[dim] for dim in self.varying]).reshape(grid.shape)
        self.grid = grid

    def _log_value(self, coords: np.ndarray) -> float:
        """log speedup at log2 coordinates inside the measured ranges."""
        from fp8advisor.predict import multilinear

        reduced = self.grid.reshape([len(self.axes[dim]) for dim in self.varying])
        if not self.varying:
            return float(reduced)
        return multilinear([self.axes[dim] for dim in self.varying], reduced, coords[self.varying])

    def speedup_at(self, E: int, M_per_expert: float, K: int, N: int) -> tuple[float, str] | None:
        """(speedup, "interpolated" | "extrapolated"), or None where the rules give no answer."""
        values = (E, M_per_expert, K, N)
        if not all(isinstance(v, int | float) and math.isfinite(v) and v > 0 for v in values):
            return None
        query = np.log2(np.asarray(values, dtype=float))
        for dim in (0, 2, 3):
            if not self.axes[dim][0] - _TOLERANCE <= query[dim] <= self.axes[dim][-1] + _TOLERANCE:
                return None
        query[[0, 2, 3]] = np.clip(
            query[[0, 2, 3]], [self.axes[d][0] for d in (0, 2, 3)], [self.axes[d][-1] for d in (0, 2, 3)]
        )
        m_axis = self.axes[_M_AXIS]
        if m_axis[0] - _TOLERANCE <= query[_M_AXIS] <= m_axis[-1] + _TOLERANCE:
            query[_M_AXIS] = min(max(query[_M_AXIS], m_axis[0]), m_axis[-1])
            return math.exp(self._log_value(query)), INTERPOLATED
        if query[_M_AXIS] > m_axis[-1]:
            edge = query.copy()
            edge[_M_AXIS] = m_axis[-1]
            return math.exp(self._log_value(edge)), EXTRAPOLATED
        edge = query.copy()
        edge[_M_AXIS] = m_axis[0]
        value = self._log_value(edge)
        if len(m_axis) > 1:
            next_up = edge.copy()
            next_up[_M_AXIS] = m_axis[1]
            slope = (self._log_value(next_up) - value) / (m_axis[1] - m_axis[0])
            value += min(0.0, slope * (query[_M_AXIS] - m_axis[0]))
        return math.exp(value), EXTRAPOLATED


@functools.lru_cache(maxsize=32)
def grouped_model(points: tuple) -> GroupedModel:
    """The model of a profile's grouped points (`profile.GroupedSpeedupPoint`s), built once per point set."""
    return GroupedModel([point.shape for point in points], [point.speedup for point in points])


__all__ = ["EXTRAPOLATED", "INTERPOLATED", "GroupedModel", "grouped_model"]
