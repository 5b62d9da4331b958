"""What a sweep measures, whatever the workload: a point (a shape and a recipe), a grid of points, and the
`Workload` that measures them.

Two workloads share this abstraction and the sweep of `fp8advisor.measure.sweep` (order, batches,
pre-compiling workers, time budget, resume, one results line per point): torchao's LayerNorm -> Linear ->
Sigmoid block (`fp8advisor.measure.linear`: points (M, K, N)) and the grouped expert GEMMs of
mixture-of-experts models (`fp8advisor.measure.grouped`: points (E, M_per_expert, K, N)). What differs
between them is the physics: the tensors a shape builds, what a configuration runs, how a worker warms its
caches, and the grids worth measuring.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from fp8advisor.errors import AdvisorError, quote
from fp8advisor.fields import MAX_SIZE
from fp8advisor.measure.protocol import BenchSettings
from fp8advisor.measure.result_records import MAX_GRID_POINTS
from fp8advisor.measure.results import PointKey


class Point:
    """One configuration a sweep measures: a shape and a recipe ("bf16" or a float8 recipe). Each workload's
    point is a frozen dataclass with one int field per name of `AXES`, in order, then `recipe`."""

    #: The size fields, in key order: the names its results line gives them (`fp8advisor.measure.results`).
    AXES: ClassVar[tuple[str, ...]] = ()
    #: How `str(point)` names the sizes.
    LABELS: ClassVar[tuple[str, ...]] = ()
    #: A grouped expert GEMM point: its results line says `"grouped": true`, and has no breakdown fields.
    GROUPED: ClassVar[bool] = False

    recipe: str

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(getattr(self, axis) for axis in self.AXES)

    @property
    def key(self) -> PointKey:
        return (*self.shape, self.recipe)

    def __str__(self) -> str:
        sizes = " ".join(f"{label}={size}" for label, size in zip(self.LABELS, self.shape, strict=True))
        return f"{sizes} {self.recipe}"


@dataclass(frozen=True)
class ShapeGrid:
    """A named set of shapes and the recipes measured at each (bf16 first: it is the baseline): the points
    (`POINT`) that `run_sweep` measures with the grid's `workload`."""

    name: str
    shapes: tuple[tuple[int, ...], ...]
    recipes: tuple[str, ...]

    #: The point class of the grid's workload.
    POINT: ClassVar[type[Point]]

    @property
    def workload(self) -> Workload:
        """What measures the grid's points."""
        raise NotImplementedError

    def points(self) -> list[Point]:
        """Shape by shape, bf16 first, in the order the sweep measures them."""
        return [self.POINT(*shape, recipe) for shape in self.shapes for recipe in self.recipes]

    def axis(self, name: str) -> list[int]:
        index = self.POINT.AXES.index(name)
        return sorted({shape[index] for shape in self.shapes})

    def to_json(self) -> dict:
        return {
            "name": self.name,
            **{axis: self.axis(axis) for axis in self.POINT.AXES},
            "shapes": [list(shape) for shape in self.shapes],
            "recipes": list(self.recipes),
        }


def check_sizes(option: str, values: Sequence[int]) -> None:
    """Raise `AdvisorError` (exit 2) unless `values`, given for a grid axis option, are positive integers of
    at most `fields.MAX_SIZE`."""
    if not values or any(int(value) <= 0 for value in values):
        raise AdvisorError(f"{option} needs positive integers, got {quote(list(values))}")
    too_large = [value for value in values if int(value) > MAX_SIZE]
    if too_large:
        raise AdvisorError(
            f"{option} {too_large[0]} is larger than any GEMM dimension ({MAX_SIZE:,} at most)",
            hint="give sizes a GPU can hold",
        )


def check_point_count(axes: Sequence[Sequence[int]], recipes: Sequence[str]) -> None:
    """Raise `AdvisorError` (exit 2) when the grid of `axes` x `recipes` holds more points than a results file
    may (`result_records.MAX_GRID_POINTS`): checked before any point is built."""
    count = math.prod(len(set(axis)) for axis in axes) * max(len(recipes), 1)
    if count > MAX_GRID_POINTS:
        raise AdvisorError(
            f"the grid holds {count:,} points: more than the {MAX_GRID_POINTS:,} one sweep may measure",
            hint="give fewer sizes per axis, or split the grid over several --out directories",
        )


@dataclass(frozen=True)
class Workload:
    """What `run_sweep` measures at each point of a grid (`ShapeGrid.workload`), so that one sweep machinery
    (order, batches, pre-compiling workers, time budget, resume, results files) serves every workload.

    `shape_bench(shape, settings)` builds the tensors of one shape, shared by its configurations: an object
    with `measure(recipe) -> Measurement` and `release()`. `precompile(point, settings)` warms a worker's
    caches (a module-level function: spawned workers receive it by name). `ceilings`: measure the device's
    matmul rates and bandwidth into the run header (GPU, with `BenchSettings.breakdown`)."""

    name: str
    gpu_method: Mapping[str, object]
    emulated_method: Mapping[str, object]
    shape_bench: Callable[[tuple, BenchSettings], object]
    precompile: Callable[[object, BenchSettings], str | None]
    ceilings: bool = True

    def method(self, emulate: bool) -> dict:
        return dict(self.emulated_method if emulate else self.gpu_method)


__all__ = ["Point", "ShapeGrid", "Workload", "check_point_count", "check_sizes"]
