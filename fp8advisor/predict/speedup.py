"""Predict a Linear's float8 forward+backward speedup at its own (M, K, N) from a profile.

Inside a profile's measured grid the prediction interpolates linearly in log space: coordinates log2 M, log2
K, log2 N and value log(speedup). Speedup varies smoothly with the logarithm of the sizes (the published
tables are laid out on powers of two for that reason), and interpolating the log keeps a ratio a ratio. A
complete grid is interpolated multilinearly (`multilinear`: what `scipy.interpolate.RegularGridInterpolator`
computes with method="linear", which a test pins; written out in numpy because importing scipy.interpolate
costs `suggest` a second, a fifth of its time). A grid with holes (failed points)
that still fills at least half of its product grid first fills each hole from its measured neighbours
(`fill_grid_holes`: the mean of the linear interpolations along each axis), then interpolates the same way;
this is deterministic and cheap, which leave-one-out needs (one fit per held-out point). Points that fill less
than half of their product grid (a list of model shapes) use `LinearNDInterpolator` over their Delaunay
triangulation, and nearest-neighbour where a query lies in the bounding box but outside their convex hull. All
reproduce every measured point.

Outside the grid the rule is, per coordinate:
- above the largest measured size: clamp to the edge. Speedup saturates as GEMMs become compute bound (the
  published H100 table changes by a few per cent between 16384 and 32768), and clamping never promises more
  than was measured.
- below the smallest measured size: the edge value times the roofline model's ratio speedup(query) /
  speedup(edge), capped at 1. Below the grid fixed costs (cast kernels, launch floor) take over and speedup
  falls; the roofline models exactly those costs, so it gives the direction and size of the fall, anchored to
  a measured figure; the cap keeps the rule from predicting more than the measured edge.
Such predictions say `how="extrapolated"`. Recipes a measured profile lacks come from the modelled roofline
profile of the same GPU (`ProfileChoice.fallback`), and say `how="modelled"`, provenance "modelled".
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fp8advisor.gpus import GPU_SPECS, GpuSpecs
from fp8advisor.predict.figures import SpeedupPoint
from fp8advisor.predict.fitted import FITTED_KIND, RooflineFactors, fitted_speedup
from fp8advisor.predict.interpolation import EXTRAPOLATED, INTERPOLATED, LogGridModel
from fp8advisor.predict.profile import Profile
from fp8advisor.predict.roofline import (
    GROUPED_RECIPE,
    grouped_fwd_bwd_time_s,
    linear_fwd_bwd_time_s,
    roofline_speedup,
    routed_rows,
)
from fp8advisor.predict.selection import ProfileChoice
from fp8advisor.recipes import BASELINE, Recipe

MODELLED = "modelled"
FITTED = "fitted"
BLENDED = "blended"
#: A recipe's model section that blends its table with the fitted roofline (geometric mean).
BLEND_KIND = "blend"

#: What a measured profile's "model" section says; this module implements it (`predict_speedup`).
INTERPOLATION_MODEL = {
    "kind": "log-linear-interpolation",
    "inside": "linear in (log2 M, log2 K, log2 N) -> log speedup: scipy RegularGridInterpolator on the grid "
    "(holes first filled from their measured neighbours along each axis); LinearNDInterpolator with "
    "nearest-neighbour fallback when points fill less than half of their grid",
    "outside": "above the largest measured size: clamp to the edge; below the smallest: edge speedup "
    "times the roofline ratio speedup(query)/speedup(edge), capped at 1",
    "fused": True,
}


@dataclass(frozen=True)
class Prediction:
    """A predicted figure and where it comes from.

    `provenance` is that of the profile that answered ("measured", "evidence", "published", "modelled");
    `how` is "interpolated" (inside its measured grid), "extrapolated" (outside it, by the rule above),
    "modelled" (the roofline formula), "fitted" (the fitted roofline) or "blended" (a table and the fitted
    roofline, geometric mean); `profile` names the profile; `detail` says more for people. `interval` (low,
    high) is where the true speedup is expected to lie, from the profile's held-out residuals (the 10th to
    90th percentile of published / predicted, `fp8advisor.predict.loso`); None when the profile states none.
    """

    speedup: float
    provenance: str
    how: str
    profile: str
    detail: str = ""
    interval: tuple[float, float] | None = None

    def straddles(self, threshold: float) -> bool:
        """True when the interval holds `threshold` strictly inside: the decision could go either way."""
        return self.interval is not None and self.interval[0] < threshold < self.interval[1]


@dataclass(frozen=True)
class LayerTimes:
    """Predicted forward+backward time of one Linear in bf16 and in float8, for summing over a model.

    `bf16_provenance`/`bf16_how` say where the bf16 time comes from (measured kernel times of the profile when
    it has them, else the roofline); `speedup` is the float8 prediction, `float8_s = bf16_s /
    speedup.speedup`.
    """

    bf16_s: float
    float8_s: float
    speedup: Prediction
    bf16_provenance: str
    bf16_how: str

    @property
    def provenance(self) -> str:
        return self.speedup.provenance


@functools.lru_cache(maxsize=64)
def _speedup_model(points: tuple[SpeedupPoint, ...]) -> LogGridModel:
    return LogGridModel([p.shape for p in points], [p.speedup for p in points])


@functools.lru_cache(maxsize=64)
def _bf16_time_model(points: tuple[SpeedupPoint, ...]) -> LogGridModel:
    by_shape: dict[tuple[int, int, int], float] = {}
    for point in points:
        by_shape.setdefault(point.shape, point.bf16_time_s)
    return LogGridModel(list(by_shape), list(by_shape.values()))


def roofline_specs_for(profile: Profile) -> GpuSpecs:
    """The roofline constants that go with a profile: its own, else its GPU family's, else H100's."""
    if profile.roofline is not None:
        return profile.roofline
    return GPU_SPECS.get(profile.family or "", GPU_SPECS["H100"])


def _check_shape(M: int, K: int, N: int) -> tuple[int, int, int]:
    shape = (int(M), int(K), int(N))
    if min(shape) <= 0:
        raise ValueError(f"M, K and N must be positive, got {shape}")
    return shape


def roofline_ratio(
    recipe: Recipe | str, specs: GpuSpecs, *, fused: bool = True
) -> Callable[[tuple[int, int, int], tuple[int, int, int]], float]:
    """`extrapolate`'s `model_ratio` for speedups: roofline speedup at the query over the one at the edge."""

    def ratio(query: tuple[int, int, int], edge: tuple[int, int, int]) -> float:
        return roofline_speedup(*query, recipe, specs, fused=fused) / roofline_speedup(
            *edge, recipe, specs, fused=fused
        )

    return ratio


def extrapolate(
    model: LogGridModel,
    shape: tuple[int, int, int],
    model_ratio: Callable[[tuple[int, int, int], tuple[int, int, int]], float],
    *,
    clamp_above: bool = True,
    cap_ratio: bool = True,
) -> tuple[float, bool, str]:
    """Value at `shape`: interpolated inside the grid, else the edge value scaled per the module's outside
    rule.

    `model_ratio(query, edge)` is the modelled value at query over the one at edge. Returns (value, inside,
    detail). With `clamp_above=False` the ratio also scales queries above the grid; `cap_ratio` caps it at 1.
    """
    query = np.log2(np.asarray(shape, dtype=float))
    clamped = np.clip(query, model.lower, model.upper)
    value = math.exp(model.log_value(clamped))
    if model.contains(query):
        return value, True, "inside the measured grid"
    edge = tuple(int(round(2**c)) for c in clamped)
    scaled_from = np.minimum(query, model.upper) if clamp_above else query
    scaled = tuple(int(round(2**c)) for c in scaled_from)
    words = []
    if np.any(query > model.upper):
        words.append(
            "clamped to the largest measured size" if clamp_above else "scaled beyond the largest size"
        )
    if scaled != edge:
        ratio = model_ratio(scaled, edge)
        if cap_ratio:
            ratio = min(ratio, 1.0)
        value *= ratio
        words.append(f"edge {edge} times roofline ratio {ratio:.3g}")
    return value, False, "; ".join(words)


#: What a prediction is for: a Linear in a model, a bare Linear benchmark, or torchao's LNLinearSigmoid
#: benchmark (`fp8advisor.predict.evidence` figures of either kind). Only the fitted roofline tells them
#: apart: it adds the benchmark's LayerNorm and Sigmoid for "ln_linear_sigmoid". The casts are priced as the
#: profile says (fused for every shipped profile) for all three: a compiled bare Linear's casts cost what
#: fused ones do (torchao's roofline with fused casts is 10.6% off pytorch/ao PR 2185's bare-Linear figures
#: at the median, with unfused casts 15.5%; docs/benchmarks.md).
WORKLOADS = ("model", "linear", "ln_linear_sigmoid")


def predict_speedup(
    profile: Profile | ProfileChoice, recipe: Recipe | str, M: int, K: int, N: int, *, workload: str = "model"
) -> Prediction:
    """Predicted forward+backward speedup of a bf16 Linear (K -> N, M rows) converted with `recipe`.

    A `ProfileChoice` answers from its primary profile when that covers the recipe, else from its modelled
    fallback; a bare `Profile` must cover the recipe (ProfileError otherwise). `workload` (`WORKLOADS`) says
    what is predicted: the casts are priced as the profile says for all three; the fitted roofline adds the
    benchmark's LayerNorm and Sigmoid for "ln_linear_sigmoid"; a table and torchao's roofline answer the
    same for all three.
    """
    shape = _check_shape(M, K, N)
    recipe = Recipe(recipe)
    answering = profile.profile_for(recipe) if isinstance(profile, ProfileChoice) else profile
    body = answering.recipe(recipe)  # ProfileError when not covered
    specs = roofline_specs_for(answering)
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {', '.join(WORKLOADS)}, not {workload!r}")
    fused = bool(body.model.get("fused", True))
    kind = body.model.get("kind")
    if kind in (FITTED_KIND, BLEND_KIND):
        fitted = fitted_speedup(
            *shape,
            recipe,
            specs,
            RooflineFactors.from_model(body.model),
            fused=fused,
            with_neighbours=workload == "ln_linear_sigmoid",
        )
    if not body.points:
        if kind == FITTED_KIND:
            words = _fitted_words(specs)
            prediction = Prediction(fitted, answering.provenance, FITTED, answering.name, words)
        else:
            speedup = roofline_speedup(*shape, recipe, specs, fused=fused)
            words = f"roofline model ({specs.family})"
            prediction = Prediction(speedup, answering.provenance, MODELLED, answering.name, words)
        return _with_interval(prediction, body.model)

    speedup, inside, detail = extrapolate(
        _speedup_model(body.points), shape, roofline_ratio(recipe, specs, fused=fused)
    )
    how = INTERPOLATED if inside else EXTRAPOLATED
    if kind == BLEND_KIND:
        speedup, how = math.sqrt(speedup * fitted), BLENDED
        detail = f"geometric mean of the table ({detail}) and the {_fitted_words(specs)}"
    return _with_interval(Prediction(speedup, answering.provenance, how, answering.name, detail), body.model)


def _fitted_words(specs: GpuSpecs) -> str:
    return f"roofline fitted to the published measurements ({specs.family})"


def _with_interval(prediction: Prediction, model) -> Prediction:
    """The prediction with the interval its profile's recipe states (`interval_low`, `interval_high`: the
    10th and 90th percentiles of published / predicted over held-out figures), if any."""
    low, high = model.get("interval_low"), model.get("interval_high")
    if low is None or high is None:
        return prediction
    speedup = prediction.speedup
    return replace(prediction, interval=(speedup * float(low), speedup * float(high)))


def predicted_bf16_time_s(profile: Profile | ProfileChoice, M: int, K: int, N: int) -> tuple[float, str, str]:
    """Forward+backward time of the bf16 Linear: (seconds, provenance, how).

    From the primary profile's measured bf16 kernel times when it has them (log-space interpolation; outside
    the grid the edge time scaled by the roofline's bf16 time ratio, in both directions since time does not
    saturate), else the roofline model of the profile's GPU (how="modelled"). It does not depend on the
    recipe, so totals of different recipes share one baseline.
    """
    shape = _check_shape(M, K, N)
    primary = profile.primary if isinstance(profile, ProfileChoice) else profile
    timed = tuple(p for body in primary.recipes.values() for p in body.points if p.bf16_time_s is not None)
    specs = roofline_specs_for(primary)
    if not timed:
        return linear_fwd_bwd_time_s(*shape, BASELINE, specs), MODELLED, MODELLED

    def time_ratio(query: tuple[int, int, int], edge: tuple[int, int, int]) -> float:
        return linear_fwd_bwd_time_s(*query, BASELINE, specs) / linear_fwd_bwd_time_s(*edge, BASELINE, specs)

    seconds, inside, _ = extrapolate(
        _bf16_time_model(timed), shape, time_ratio, clamp_above=False, cap_ratio=False
    )
    return seconds, primary.provenance, INTERPOLATED if inside else EXTRAPOLATED


def predicted_times_s(
    profile: Profile | ProfileChoice, recipe: Recipe | str, M: int, K: int, N: int
) -> LayerTimes:
    """bf16 and float8 forward+backward times of one Linear, with their provenance (see `LayerTimes`)."""
    speedup = predict_speedup(profile, recipe, M, K, N)
    bf16_s, bf16_provenance, bf16_how = predicted_bf16_time_s(profile, M, K, N)
    return LayerTimes(bf16_s, bf16_s / speedup.speedup, speedup, bf16_provenance, bf16_how)


# --- routed experts (MoE) -----------------------------------------------------------------------------------

#: The speedup range under `--expert-imbalance X` is the lowest and highest prediction over this many
#: imbalance factors from 1 (balanced) to X, geometrically spaced, both ends included.
IMBALANCE_SAMPLES = 5


@dataclass(frozen=True)
class GroupTimes:
    """Predicted forward+backward time of one group of routed experts, summed over its GEMM sets.

    `bf16_s` is the grouped roofline's bf16 time (modelled: a grouped profile gives speedups only);
    `float8_s` that time over the predicted float8 (rowwise) speedup. `provenance` and `how` are those of the
    speedup: "measured" and "interpolated"/"extrapolated" from a measured grouped profile, "modelled" from the
    grouped roofline. `speedup_range` (low, high) under the stated imbalance, None for balanced routing only.
    """

    bf16_s: float
    float8_s: float
    provenance: str
    how: str
    detail: str
    speedup_range: tuple[float, float] | None = None

    @property
    def speedup(self) -> float:
        return self.bf16_s / self.float8_s


def _grouped_sources(profile, recipe: Recipe = GROUPED_RECIPE) -> tuple[Any, GpuSpecs]:
    """The measured grouped profile for the grouped `recipe` (None: none, or one measured under another
    recipe) and the roofline constants that go with the profile. A `ProfileChoice` answers from the grouped
    profile selection found for the GPU (`ProfileChoice.grouped`: a profile of grouped figures alone), then
    its profile for the recipe, then its primary."""
    candidates = []
    if isinstance(profile, ProfileChoice):
        candidates = [profile, profile.profile_for(recipe), profile.primary]
    elif profile is not None:
        candidates = [profile]
    grouped = next(
        (found for found in (getattr(c, "grouped", None) for c in candidates) if found is not None), None
    )
    if grouped is not None and str(getattr(grouped, "recipe", GROUPED_RECIPE.value)) != recipe.value:
        grouped = None  # measured under another grouped recipe: the roofline answers for this one
    specs = next((roofline_specs_for(c) for c in candidates if isinstance(c, Profile)), GPU_SPECS["H100"])
    return grouped, specs


def _routed_times(
    rows: Sequence[float],
    gemms: Sequence[tuple[int, int]],
    grouped,
    specs: GpuSpecs,
    recipe: Recipe = GROUPED_RECIPE,
) -> tuple[float, float, set[str]]:
    """(bf16 seconds, float8 seconds, hows) of every GEMM set of a group at per-expert `rows`.

    With a measured grouped profile, each distinct row count m takes the speedup measured for a balanced group
    at M per expert = m, weighted by its experts' share of the bf16 time (the balanced grouped roofline's time
    per expert at m): under balanced routing, bf16 time / the measured speedup. A GEMM set the profile cannot
    answer for falls back to the grouped roofline.
    """
    E = len(rows)
    bf16_total = float8_total = 0.0
    hows: set[str] = set()
    for K, N in gemms:
        bf16 = grouped_fwd_bwd_time_s(rows, K, N, BASELINE, specs)
        answers = None
        if grouped is not None:
            distinct = Counter(rows)
            answers = {m: grouped.speedup_at(E, m, K, N) for m in distinct}
            if any(answer is None for answer in answers.values()):
                answers = None
        if answers is None:
            float8 = grouped_fwd_bwd_time_s(rows, K, N, recipe, specs)
            hows.add(MODELLED)
        else:
            weights = {
                m: count * grouped_fwd_bwd_time_s([m] * E, K, N, BASELINE, specs) / E
                for m, count in Counter(rows).items()
            }
            harmonic = sum(weights[m] / answers[m][0] for m in weights) / sum(weights.values())
            float8 = bf16 * harmonic
            hows.update(answer[1] for answer in answers.values())
        bf16_total += bf16
        float8_total += float8
    return bf16_total, float8_total, hows


def predict_expert_group(
    profile, group, imbalance: float = 1.0, recipe: Recipe | str = GROUPED_RECIPE
) -> GroupTimes | None:
    """bf16 and low-precision times of a group of routed experts (`inspect.records.ExpertGroup`) under
    balanced routing in the grouped `recipe` (rowwise, or an MXFP8 recipe: `mx_grouped.grouped_recipe_for`),
    and the speedup range under `imbalance` (see `roofline.routed_rows`; clamped to E). None when M per
    expert is unknown.

    The figure comes from the profile's measured grouped profile (`profile.grouped.speedup_at(E, M per
    expert, K, N)`) when it has one and it answers, else from the grouped roofline of the profile's GPU family
    (`roofline.grouped_fwd_bwd_time_s`), provenance "modelled". Expert and tensor parallelism are not
    modelled: every expert's full K x N on one GPU.
    """
    if group.M_total is None or group.M_total <= 0:
        return None
    recipe = Recipe(recipe)
    grouped, specs = _grouped_sources(profile, recipe)
    gemms = [(gemm.K, gemm.N) for gemm in group.gemms]
    E = group.n_experts
    bf16, float8, hows = _routed_times(routed_rows(group.M_total, E), gemms, grouped, specs, recipe)
    measured = MODELLED not in hows
    provenance = str(getattr(grouped, "provenance", "measured")) if measured else MODELLED
    how = (EXTRAPOLATED if EXTRAPOLATED in hows else INTERPOLATED) if measured else MODELLED
    detail = "measured grouped profile" if measured else f"grouped roofline model ({specs.family})"
    if hows - {MODELLED} and not measured:
        detail += "; the grouped profile did not answer for every GEMM"
    speedup_range = None
    highest = min(float(imbalance), E)
    if highest > 1.0:
        factors = [highest ** (i / (IMBALANCE_SAMPLES - 1)) for i in range(IMBALANCE_SAMPLES)]
        speedups = [bf16 / float8]
        for factor in factors[1:]:
            b, f, _ = _routed_times(routed_rows(group.M_total, E, factor), gemms, grouped, specs, recipe)
            speedups.append(b / f)
        speedup_range = (min(speedups), max(speedups))
    return GroupTimes(bf16, float8, provenance, how, detail, speedup_range)


__all__ = [
    "BLENDED",
    "BLEND_KIND",
    "FITTED",
    "IMBALANCE_SAMPLES",
    "INTERPOLATION_MODEL",
    "MODELLED",
    "WORKLOADS",
    "GroupTimes",
    "LayerTimes",
    "Prediction",
    "extrapolate",
    "predict_expert_group",
    "predict_speedup",
    "predicted_bf16_time_s",
    "predicted_times_s",
    "roofline_ratio",
    "roofline_specs_for",
]
