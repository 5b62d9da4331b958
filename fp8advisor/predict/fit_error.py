"""How far a profile's predictor is from measured points: leave-one-out, and the unfitted roofline for
comparison.

Leave-one-out predicts each measured point from all the others with the predictor the profile itself uses
(`held_out_error` over a function that builds a model from points): for Linear points the log-space
interpolation of `fp8advisor.predict.speedup` with its roofline rule below the grid (`leave_one_out`), for
grouped expert GEMM points `fp8advisor.predict.interpolation.GroupedModel` (`grouped_leave_one_out`). `fit`
stores the result in the profile as its `FitError`; `roofline_error` is what `fit` prints beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from fp8advisor.gpus import GpuSpecs
from fp8advisor.predict.figures import FitError, SpeedupPoint
from fp8advisor.predict.grouped_profile import GroupedSpeedupPoint
from fp8advisor.predict.interpolation import GroupedModel, LogGridModel
from fp8advisor.predict.roofline import roofline_speedup
from fp8advisor.predict.speedup import INTERPOLATION_MODEL, extrapolate, roofline_ratio
from fp8advisor.recipes import Recipe

#: A measured point of either profile: a Linear (M, K, N) or a grouped (E, M_per_expert, K, N) one.
PointT = TypeVar("PointT", SpeedupPoint, GroupedSpeedupPoint)

#: A predictor: builds a model from measured points and returns its speedup at a shape (None: no answer).
ModelBuilder = Callable[[list[PointT]], Callable[[tuple[int, ...]], float | None]]


def prediction_error(method: str, compared: Sequence[tuple[float, float]]) -> FitError | None:
    """The error of (predicted, measured) speedup pairs: relative errors and how often "speedup > 1" was
    predicted right; None when there is no pair."""
    if not compared:
        return None
    relative_errors = [abs(predicted - measured) / measured for predicted, measured in compared]
    sign_right = sum((predicted > 1.0) == (measured > 1.0) for predicted, measured in compared)
    return FitError(
        method=method,
        median_relative_error=float(np.median(relative_errors)),
        worst_relative_error=float(max(relative_errors)),
        sign_accuracy=sign_right / len(compared),
        n=len(compared),
    )


def held_out_error(points: Sequence[PointT], build_model: ModelBuilder) -> FitError | None:
    """Leave-one-out: predict each point with the model `build_model` makes of all the others. A point the
    others cannot answer for is not counted; None when no point can be predicted."""
    compared = []
    for held_out, point in enumerate(points):
        others = [p for i, p in enumerate(points) if i != held_out]
        if not others:
            continue
        predicted = build_model(others)(point.shape)
        if predicted is not None:
            compared.append((predicted, point.speedup))
    return prediction_error("leave-one-out", compared)


def leave_one_out(points: Sequence[SpeedupPoint], recipe: Recipe | str, specs: GpuSpecs) -> FitError | None:
    """Predict each point from all the others with the profile's own predictor (None below 2 points)."""
    if len(points) < 2:
        return None
    model_ratio = roofline_ratio(Recipe(recipe), specs, fused=INTERPOLATION_MODEL["fused"])

    def interpolation(others: list[SpeedupPoint]) -> Callable[[tuple[int, ...]], float]:
        model = LogGridModel([p.shape for p in others], [p.speedup for p in others])
        return lambda shape: extrapolate(model, shape, model_ratio)[0]

    return held_out_error(points, interpolation)


def grouped_leave_one_out(points: Sequence[GroupedSpeedupPoint]) -> FitError | None:
    """Predict each grouped point from all the others with the grouped profile's own predictor
    (`grid.GroupedModel`). A point the others cannot answer for (the only one measured at its E, K or N) is
    not counted; None when no point can be predicted."""

    def grouped_interpolation(others: list[GroupedSpeedupPoint]) -> Callable[[tuple[int, ...]], float | None]:
        model = GroupedModel([p.shape for p in others], [p.speedup for p in others])

        def speedup(shape: tuple[int, ...]) -> float | None:
            answer = model.speedup_at(*shape)
            return None if answer is None else answer[0]

        return speedup

    return held_out_error(points, grouped_interpolation)


def roofline_error(points: Sequence[SpeedupPoint], recipe: Recipe | str, specs: GpuSpecs) -> FitError | None:
    """How far the unfitted roofline model is from the measured points, for comparison with leave-one-out."""
    compared = [(roofline_speedup(*point.shape, recipe, specs), point.speedup) for point in points]
    return prediction_error(f"roofline model ({specs.family}), no fit", compared)


__all__ = [
    "prediction_error",
    "grouped_leave_one_out",
    "held_out_error",
    "leave_one_out",
    "roofline_error",
]
