"""The default predictor, chosen by evidence: candidates, leave-one-source-out, selection and intervals.

Candidates (`CANDIDATES`), each a way to predict a Linear's float8 speedup from the Linear figures of the
evidence base (`fp8advisor.predict.evidence`):

- `table`: what fp8advisor did before the evidence base: the LNLinearSigmoid table of the GPU and recipe
  (log-space interpolation, `fp8advisor.predict.speedup`), the H100's where the GPU has none of the recipe,
  else another GPU's (the largest), else torchao's roofline;
- `roofline`: torchao's roofline, unfitted (`fp8advisor.predict.roofline`);
- `fitted-roofline`: the roofline with three factors per recipe fitted to every figure
  (`fp8advisor.predict.fitted`);
- `blend-fitted`: the geometric mean of `table` and `fitted-roofline` where a table exists, else
  `fitted-roofline`;
- `blend-roofline`: the geometric mean of `table` and torchao's roofline where a table exists, else the
  roofline.

A table answers only inside what it measured; the candidates with a table answer like it (its log-space
interpolation and extrapolation rule). Each candidate's prediction for a figure is made through a `Profile` it
builds (`candidate_profile`), so what is scored is exactly what `suggest` would run.

**Leave-one-source-out** (`leave_one_source_out`): for every source, fit each candidate on the figures of all
other sources and predict the held-out source's figures: Linear figures with the workload the source timed,
whole-step figures through the step model (`step_residuals`, supplied by the caller: the step model lives in
`fp8advisor.advice`). **Selection** (`select`): per GPU and recipe, the candidate with the lowest score over
the held-out sources of that GPU and recipe (`scores`: each source's median relative error, averaged within
its level, Linear benchmark or whole step, then over the levels); a GPU with no source of the recipe is scored
on every GPU's sources of the recipe. Ties go to the earlier candidate in `CANDIDATES`. **Intervals**
(`interval_ratios`): the 10th and 90th percentiles of published / predicted over the selected candidate's
held-out Linear figures of the recipe, each source weighted equally; a prediction `s` states `s x low` to `s x
high`. Sources that disagree leave large residuals, so the interval widens.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from fp8advisor.gpus import get_specs
from fp8advisor.predict.evidence import LinearFigure
from fp8advisor.predict.figures import SpeedupPoint
from fp8advisor.predict.fitted import RooflineFactors, fit_factors
from fp8advisor.predict.profile import DeviceInfo, Profile, RecipeProfile
from fp8advisor.predict.speedup import BLEND_KIND, INTERPOLATION_MODEL, predict_speedup
from fp8advisor.recipes import FLOAT8_RECIPES, Recipe

TABLE, ROOFLINE, FITTED_ROOFLINE = "table", "roofline", "fitted-roofline"
BLEND_FITTED, BLEND_ROOFLINE = "blend-fitted", "blend-roofline"
CANDIDATES = (TABLE, ROOFLINE, FITTED_ROOFLINE, BLEND_FITTED, BLEND_ROOFLINE)
#: The family whose table answers for a GPU without one (the `table` candidate: what selection did).
TABLE_FALLBACK_FAMILY = "H100"
#: The fewest points of one source, GPU and recipe that make a table to interpolate (fewer: no grid to speak
#: of; the figures still inform the fitted roofline and are still held out).
MIN_TABLE_POINTS = 8
#: The percentiles of published / predicted an interval spans.
INTERVAL_PERCENTILES = (10.0, 90.0)
#: The fewest held-out figures an interval is computed from; fewer: no interval is stated.
MIN_INTERVAL_FIGURES = 5


@dataclass(frozen=True)
class Fitted:
    """Every candidate fitted to one set of figures: the tables per (GPU, recipe) and the fitted factors per
    recipe."""

    tables: Mapping[tuple[str, Recipe], tuple[SpeedupPoint, ...]] = field(hash=False)
    factors: Mapping[Recipe, RooflineFactors | None] = field(hash=False)


def fit_candidates(figures: Sequence[LinearFigure]) -> Fitted:
    """Fit every candidate to `figures`: each GPU's and recipe's table is the LNLinearSigmoid source with the
    most figures of it (at least `MIN_TABLE_POINTS`; the last id on a tie); the factors are fitted per recipe
    (`fitted.fit_factors`)."""
    by_source: dict[tuple[str, Recipe, str], list[LinearFigure]] = defaultdict(list)
    for figure in figures:
        if figure.ln_sigmoid:
            by_source[(figure.gpu, figure.recipe, figure.source)].append(figure)
    by_source = {key: found for key, found in by_source.items() if len(found) >= MIN_TABLE_POINTS}
    tables: dict[tuple[str, Recipe], tuple[SpeedupPoint, ...]] = {}
    for gpu, recipe in sorted({(g, r) for g, r, _ in by_source}, key=str):
        sources = [key for key in by_source if key[:2] == (gpu, recipe)]
        best = max(sources, key=lambda key: (len(by_source[key]), key[2]))
        points = {
            (f.M, f.K, f.N): SpeedupPoint(
                f.M, f.K, f.N, f.speedup, f.bf16_s, None if f.bf16_s is None else f.bf16_s / f.speedup
            )
            for f in by_source[best]
        }
        tables[(gpu, recipe)] = tuple(points[shape] for shape in sorted(points))
    return Fitted(tables=tables, factors={recipe: fit_factors(figures, recipe) for recipe in Recipe})


def _table_for(fitted: Fitted, gpu: str, recipe: Recipe) -> tuple[SpeedupPoint, ...]:
    """The GPU's own table of the recipe, else the H100's, else the largest of another GPU's, else none;
    another GPU's without its kernel times (they would price this GPU's bf16 Linear layers)."""
    own = fitted.tables.get((gpu, recipe))
    if own:
        return own
    others = [points for (_, r), points in sorted(fitted.tables.items(), key=str) if r is recipe]
    found = fitted.tables.get((TABLE_FALLBACK_FAMILY, recipe)) or max(others, key=len, default=())
    return tuple(SpeedupPoint(p.M, p.K, p.N, p.speedup) for p in found)


def recipe_body(fitted: Fitted, candidate: str, gpu: str, recipe: Recipe) -> RecipeProfile:
    """How `candidate` predicts `recipe` on `gpu`: a profile's recipe section (points and/or model)."""
    if candidate not in CANDIDATES:
        raise ValueError(f"unknown candidate {candidate!r}; the candidates are {', '.join(CANDIDATES)}")
    table = _table_for(fitted, gpu, recipe)
    if candidate == ROOFLINE or (candidate in (TABLE, BLEND_ROOFLINE) and not table):
        return RecipeProfile(points=(), model={"kind": "roofline", "fused": True})
    if candidate == TABLE:
        return RecipeProfile(points=table, model=dict(INTERPOLATION_MODEL))
    # the fitted roofline; with factors (1, 1, 0) it is torchao's roofline, which blend-roofline blends
    fitted_factors = fitted.factors.get(recipe) or RooflineFactors()
    factors = RooflineFactors() if candidate == BLEND_ROOFLINE else fitted_factors
    model = {**factors.to_model(), "fused": True}
    if table and candidate in (BLEND_FITTED, BLEND_ROOFLINE):
        return RecipeProfile(points=table, model={**model, "kind": BLEND_KIND})
    return RecipeProfile(points=(), model=model)  # fitted-roofline, or blend-fitted without a table


def candidate_profile(
    fitted: Fitted,
    candidate: str | Mapping[Recipe, str],
    gpu: str,
    *,
    name: str | None = None,
    intervals: Mapping[Recipe, tuple[float, float, int]] | None = None,
) -> Profile:
    """A profile of `gpu` that predicts each recipe with `candidate` (one name for the float8 recipes, or one
    per recipe it names), with the interval ratios of `intervals` (low, high, n) in each recipe's model
    section. One name covers the float8 recipes only: the evidence base has no MXFP8 Linear figure."""
    recipes = {}
    for recipe in FLOAT8_RECIPES if isinstance(candidate, str) else candidate:
        chosen = candidate if isinstance(candidate, str) else candidate[recipe]
        body = recipe_body(fitted, chosen, gpu, recipe)
        model = {**body.model, "candidate": chosen}
        if intervals and recipe in intervals:
            low, high, n = intervals[recipe]
            model.update(interval_low=float(f"{low:.4g}"), interval_high=float(f"{high:.4g}"), interval_n=n)
        recipes[recipe.value] = RecipeProfile(points=body.points, model=model)
    return Profile(
        name=name or f"{gpu.lower()}-{candidate if isinstance(candidate, str) else 'evidence'}",
        provenance="evidence",
        source="the evidence base (data/evidence)",
        created="",
        device=DeviceInfo(name=gpu, family=gpu),
        recipes=recipes,
        roofline=get_specs(gpu),
    )


@dataclass(frozen=True)
class Residual:
    """One held-out figure: the candidate's prediction beside the published value."""

    source: str
    gpu: str
    recipe: Recipe
    candidate: str
    predicted: float
    published: float
    level: str = "linear"  # "linear" or "step"
    label: str = ""
    #: A step figure's prediction at the ends of the Linear interval (None: no interval, or a Linear figure)
    interval: tuple[float, float] | None = None

    @property
    def relative_error(self) -> float:
        return self.predicted / self.published - 1.0

    @property
    def ratio(self) -> float:
        """published / predicted: what multiplies a prediction to give the truth."""
        return self.published / self.predicted


def linear_residuals(fitted: Fitted, figures: Sequence[LinearFigure], candidate: str) -> list[Residual]:
    """`candidate` fitted as `fitted` predicting each of `figures`, with the workload its source timed."""
    residuals = []
    profiles: dict[str, Profile] = {}
    for figure in figures:
        profile = profiles.get(figure.gpu) or profiles.setdefault(
            figure.gpu, candidate_profile(fitted, candidate, figure.gpu)
        )
        workload = "ln_linear_sigmoid" if figure.ln_sigmoid else "linear"
        predicted = predict_speedup(profile, figure.recipe, figure.M, figure.K, figure.N, workload=workload)
        residuals.append(
            Residual(
                figure.source,
                figure.gpu,
                figure.recipe,
                candidate,
                predicted.speedup,
                figure.speedup,
                label=figure.label or f"{figure.M}x{figure.K}x{figure.N}",
            )
        )
    return residuals


#: The step model, supplied by the caller: (fitted candidates, candidate, its Linear interval ratios per
#: recipe) -> the held-out step residuals of every step source, each with its prediction at the interval's
#: ends (the step sources enter no fit, so one fit on every Linear figure serves all).
StepResiduals = Callable[[Fitted, str, Mapping[Recipe, tuple[float, float, int]]], list[Residual]]


def leave_one_source_out(
    figures: Sequence[LinearFigure],
    candidates: Sequence[str] = CANDIDATES,
    step_residuals: StepResiduals | None = None,
) -> list[Residual]:
    """Every Linear figure predicted by every candidate fitted on the other sources' figures; then, with
    `step_residuals`, every step figure predicted with the candidates fitted on every Linear figure."""
    residuals = []
    for source in sorted({figure.source for figure in figures}):
        held_out = [figure for figure in figures if figure.source == source]
        fitted = fit_candidates([figure for figure in figures if figure.source != source])
        for candidate in candidates:
            residuals += linear_residuals(fitted, held_out, candidate)
    if step_residuals is not None:
        fitted_all = fit_candidates(figures)
        for candidate in candidates:
            intervals = {recipe: interval_ratios(residuals, recipe, candidate) for recipe in Recipe}
            stated = {recipe: found for recipe, found in intervals.items() if found is not None}
            residuals += step_residuals(fitted_all, candidate, stated)
    return residuals


def source_errors(residuals: Sequence[Residual]) -> dict[tuple[str, str, Recipe, str], float]:
    """(source, level, recipe, candidate) -> the median absolute relative error of that source's figures."""
    grouped: dict[tuple[str, str, Recipe, str], list[float]] = defaultdict(list)
    for r in residuals:
        grouped[(r.source, r.level, r.recipe, r.candidate)].append(abs(r.relative_error))
    return {key: float(np.median(errors)) for key, errors in grouped.items()}


def scores(
    residuals: Sequence[Residual], recipe: Recipe, gpu: str | None = None
) -> dict[str, tuple[float, int]]:
    """candidate -> (its score, number of held-out sources) for `recipe` on `gpu` (None: every GPU). The
    score is the mean, over the levels held out (Linear benchmarks, whole steps), of the mean over that
    level's sources of each source's median relative error: every source one vote within its level, and the
    few whole-step sources (what `suggest` predicts in the end) as much weight as the many benchmarks."""
    chosen = [r for r in residuals if r.recipe is recipe and (gpu is None or r.gpu == gpu)]
    by_level: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (_, level, _, candidate), error in source_errors(chosen).items():
        by_level[(candidate, level)].append(error)
    found: dict[str, tuple[list[float], int]] = {}
    for (candidate, _), errors in by_level.items():
        means, count = found.get(candidate, ([], 0))
        found[candidate] = (means + [float(np.mean(errors))], count + len(errors))
    return {candidate: (float(np.mean(means)), count) for candidate, (means, count) in found.items()}


def select(
    residuals: Sequence[Residual], gpu: str, recipe: Recipe, candidates: Sequence[str] = CANDIDATES
) -> tuple[str, str]:
    """(the candidate with the lowest held-out score for `gpu` and `recipe`, why): scored on that GPU's
    sources when it has any of the recipe, else on every GPU's; the first of `candidates` on a tie and when
    there is no held-out figure at all."""
    table = scores(residuals, recipe, gpu)
    scope = f"{gpu}'s"
    if not table:
        table, scope = scores(residuals, recipe), "every GPU's"
    ranked = [c for c in candidates if c in table]
    if not ranked:
        return candidates[0], f"no held-out {recipe.value} figure: {candidates[0]} by default"
    best = min(ranked, key=lambda c: (table[c][0], candidates.index(c)))
    words = ", ".join(f"{c} {table[c][0]:.1%}" for c in ranked)
    return best, f"lowest held-out score over {scope} {table[best][1]} {recipe.value} source(s): {words}"


def _weighted_percentile(values: Sequence[float], weights: Sequence[float], percentile: float) -> float:
    """The weighted percentile (linear between the midpoints of the sorted values' cumulative weights)."""
    order = np.argsort(values)
    values_sorted = np.asarray(values, dtype=float)[order]
    weights_sorted = np.asarray(weights, dtype=float)[order]
    cumulative = (np.cumsum(weights_sorted) - 0.5 * weights_sorted) / weights_sorted.sum()
    return float(np.interp(percentile / 100.0, cumulative, values_sorted))


def interval_ratios(
    residuals: Sequence[Residual], recipe: Recipe, candidate: str, level: str = "linear"
) -> tuple[float, float, int] | None:
    """(low, high, n): the `INTERVAL_PERCENTILES` of published / predicted over `candidate`'s held-out figures
    of `recipe` at `level` (every GPU), each source weighted equally; the recipes' pooled figures when the
    recipe has fewer than `MIN_INTERVAL_FIGURES`; None when even those are too few."""
    chosen = [r for r in residuals if r.candidate == candidate and r.level == level and r.recipe is recipe]
    if len(chosen) < MIN_INTERVAL_FIGURES:
        chosen = [r for r in residuals if r.candidate == candidate and r.level == level]
    if len(chosen) < MIN_INTERVAL_FIGURES:
        return None
    per_source: dict[str, int] = defaultdict(int)
    for r in chosen:
        per_source[r.source] += 1
    logs = [math.log(r.ratio) for r in chosen]
    weights = [1.0 / per_source[r.source] for r in chosen]
    low, high = (math.exp(_weighted_percentile(logs, weights, p)) for p in INTERVAL_PERCENTILES)
    return min(low, 1.0), max(high, 1.0), len(chosen)


__all__ = [
    "BLEND_FITTED",
    "BLEND_ROOFLINE",
    "CANDIDATES",
    "FITTED_ROOFLINE",
    "INTERVAL_PERCENTILES",
    "MIN_INTERVAL_FIGURES",
    "MIN_TABLE_POINTS",
    "ROOFLINE",
    "TABLE",
    "TABLE_FALLBACK_FAMILY",
    "Fitted",
    "Residual",
    "StepResiduals",
    "candidate_profile",
    "fit_candidates",
    "interval_ratios",
    "leave_one_source_out",
    "linear_residuals",
    "recipe_body",
    "scores",
    "select",
    "source_errors",
]
