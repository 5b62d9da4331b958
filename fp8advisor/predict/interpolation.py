"""Interpolation over measured grids in log space: the predictors behind every profile.

- `LogGridModel`: a Linear's value (speedup, or bf16 time) over (log2 M, log2 K, log2 N), the rules of
  `fp8advisor.predict.speedup`.
- `GroupedModel`: a grouped expert GEMM's speedup over (log2 E, log2 M_per_expert, log2 K, log2 N), the
  predictor of `grouped_profile.GroupedProfile` (and of its leave-one-out error in `fit_error`).
- `multilinear` and `fill_grid_holes`, which both use: multilinear interpolation inside a product grid, and
  its holes (failed points, shapes too large for one GPU) first filled from their measured neighbours.

The grouped rule is the Linear predictor's on four axes: inside the measured grid, linear in (log2 E,
log2 M_per_expert, log2 K, log2 N) -> log speedup. Outside it:

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
import itertools
import math
from collections.abc import Sequence

import numpy as np

from fp8advisor.errors import ProfileError

INTERPOLATED = "interpolated"
EXTRAPOLATED = "extrapolated"

#: log2 units within which a query counts as on a measured axis value (float rounding of log2).
_TOLERANCE = 1e-9

_M_AXIS = 1  # (E, M_per_expert, K, N)


class LogGridModel:
    """Linear interpolation of log(value) over (log2 M, log2 K, log2 N), exact at every point it was built
    from.

    A dimension with one measured value only is not interpolated: queries are clamped to it, like any query
    outside the grid. `lower`/`upper` are the grid's bounds in log2 units.
    """

    def __init__(self, shapes: Sequence[tuple[int, int, int]], values: Sequence[float]):
        if len(shapes) == 0:
            raise ProfileError(
                "no measured points to interpolate", hint="measure some shapes with `fp8advisor bench`"
            )
        coords = np.log2(np.asarray(shapes, dtype=float))
        logs = np.log(np.asarray(values, dtype=float))
        self.lower = coords.min(axis=0)
        self.upper = coords.max(axis=0)
        self._varying = [dim for dim in range(3) if self.upper[dim] > self.lower[dim]]
        axes = [np.unique(coords[:, dim]) for dim in self._varying]
        self.is_complete_grid = len(axes) > 0 and len(coords) == math.prod(len(a) for a in axes)
        self.fill_fraction = 1.0
        self._constant = float(logs[0]) if not self._varying else None
        self._regular = self._scattered = self._nearest = None
        if not self._varying:
            if len(set(map(float, logs))) > 1:
                raise ProfileError(
                    "the same shape was measured with different speedups", hint="deduplicate the points"
                )
            return
        reduced = coords[:, self._varying]
        if len({tuple(row) for row in reduced}) != len(reduced):
            raise ProfileError(
                "a shape appears twice among the points", hint="merge repeated measurements first"
            )
        shape = [len(a) for a in axes]
        self.fill_fraction = len(reduced) / math.prod(shape)
        if self.fill_fraction >= 0.5:
            grid = np.full(shape, np.nan)
            grid[tuple(np.searchsorted(a, reduced[:, i]) for i, a in enumerate(axes))] = logs
            if not self.is_complete_grid:
                grid = fill_grid_holes(grid, axes)
            self._regular = (tuple(axes), grid)
            return
        from scipy.interpolate import LinearNDInterpolator, NearestNDInterpolator
        from scipy.spatial import QhullError

        self._nearest = NearestNDInterpolator(reduced, logs)
        try:
            self._scattered = LinearNDInterpolator(reduced, logs)
        except (QhullError, ValueError):
            self._scattered = None  # coplanar points: nearest neighbour only

    def contains(self, log_coords: np.ndarray) -> bool:
        return bool(np.all(log_coords >= self.lower) and np.all(log_coords <= self.upper))

    def log_value(self, log_coords: np.ndarray) -> float:
        """log(value) at log2 coordinates, which must lie inside [lower, upper] (clamp first)."""
        if self._constant is not None:
            return self._constant
        reduced = np.asarray(log_coords, dtype=float)[self._varying]
        if self._regular is not None:
            return multilinear(*self._regular, reduced)
        if self._scattered is not None:
            value = float(self._scattered(reduced[None, :])[0])
            if math.isfinite(value):
                return value
        return float(self._nearest(reduced[None, :])[0])


def multilinear(axes: Sequence[np.ndarray], grid: np.ndarray, point: Sequence[float]) -> float:
    """Multilinear interpolation of `grid` (values at the product of the increasing `axes`) at `point`, which
    lies inside the grid: the weighted sum of the values at the 2^d corners of the cell holding it."""
    lows, weights = [], []
    for axis, x in zip(axes, point, strict=True):
        low = min(max(int(np.searchsorted(axis, x, side="right")) - 1, 0), len(axis) - 2)
        lows.append(low)
        weights.append((x - axis[low]) / (axis[low + 1] - axis[low]))
    total = 0.0
    for corner in itertools.product((0, 1), repeat=len(axes)):
        weight = 1.0
        for upper, w in zip(corner, weights, strict=True):
            weight *= w if upper else 1.0 - w
        if weight:
            total += weight * float(grid[tuple(low + upper for low, upper in zip(lows, corner, strict=True))])
    return total


def fill_grid_holes(grid: np.ndarray, axes: Sequence[np.ndarray]) -> np.ndarray:
    """Fill the NaN cells of a grid of log values from its measured cells, deterministically.

    A hole gets the mean, over the axes, of the linear interpolation (in log2 coordinates) between the nearest
    measured cells on both sides along that axis; where no axis has measured cells on both sides, the mean of
    the nearest measured cells along the axes (one-sided, i.e. constant extrapolation). Holes with no measured
    cell on any of their axis lines are filled in later passes from the cells filled before.
    """
    measured = grid.copy()
    filled = grid.copy()
    while np.isnan(filled).any():
        progress = False
        for hole in zip(*np.nonzero(np.isnan(filled)), strict=True):
            two_sided, one_sided = [], []
            for dim, axis in enumerate(axes):
                line = [measured[hole[:dim] + (i,) + hole[dim + 1 :]] for i in range(len(axis))]
                below = [i for i in range(hole[dim]) if not np.isnan(line[i])]
                above = [i for i in range(hole[dim] + 1, len(axis)) if not np.isnan(line[i])]
                if below and above:
                    lo, hi = below[-1], above[0]
                    weight = (axis[hole[dim]] - axis[lo]) / (axis[hi] - axis[lo])
                    two_sided.append((1 - weight) * line[lo] + weight * line[hi])
                elif below or above:
                    nearest = below[-1] if below else above[0]
                    one_sided.append((abs(axis[nearest] - axis[hole[dim]]), line[nearest]))
            if two_sided:
                filled[hole] = float(np.mean(two_sided))
            elif one_sided:
                closest = min(distance for distance, _ in one_sided)
                filled[hole] = float(np.mean([value for distance, value in one_sided if distance == closest]))
            else:
                continue
            progress = True
        if not progress:
            raise ProfileError("cannot fill the holes of the measured grid", hint="measure more shapes")
        measured = filled.copy()
    return filled


class GroupedModel:
    """Log-space multilinear interpolation over measured (E, M_per_expert, K, N) points, with the outside
    rules of the module docstring."""

    def __init__(self, shapes: Sequence[tuple[int, int, int, int]], speedups: Sequence[float]):
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
    """The model of a profile's grouped points (`grouped_profile.GroupedSpeedupPoint`s), built once per point
    set."""
    return GroupedModel([point.shape for point in points], [point.speedup for point in points])


__all__ = [
    "EXTRAPOLATED",
    "INTERPOLATED",
    "GroupedModel",
    "LogGridModel",
    "fill_grid_holes",
    "grouped_model",
    "multilinear",
]
