"""The shipped default, chosen by the evidence: leave-one-source-out over every source, a candidate per GPU
and recipe, the intervals, and the `<gpu>-evidence` profiles `suggest` uses where the user has measured
nothing.

`evidence_report` runs `fp8advisor.predict.loso` on the evidence base (`fp8advisor.predict.evidence`): the
Linear figures held out source by source, the step figures through the step model (`evidence_steps`); it then
selects, per GPU family of `FAMILIES` and recipe, the candidate with the lowest held-out error, states its
interval, and builds that family's profile (provenance `evidence`; every recipe predicted by its chosen
candidate fitted on every figure). `markdown_tables` writes the tables of docs/benchmarks.md;
`benchmarks/make_evidence_profiles.py` writes the profiles and prints the tables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from fp8advisor.advice.evidence_steps import anchors_from_evidence, step_residuals
from fp8advisor.advice.step import Calibration
from fp8advisor.gpus import get_specs, recipes_for_family
from fp8advisor.predict.evidence import EvidenceSource, linear_figures, load_evidence
from fp8advisor.predict.fit_error import leave_one_out, prediction_error
from fp8advisor.predict.loso import (
    CANDIDATES,
    MIN_TABLE_POINTS,
    TABLE,
    Residual,
    candidate_profile,
    fit_candidates,
    interval_ratios,
    leave_one_source_out,
    select,
    source_errors,
)
from fp8advisor.predict.profile import DeviceInfo, Profile
from fp8advisor.predict.selection import DEFAULT_FAMILY
from fp8advisor.recipes import Recipe

#: The GPU families that get a shipped evidence profile (those of the shipped roofline profiles).
FAMILIES = ("H100", "H200", "B200")
#: The date stamped in the evidence profiles; bump it when the evidence changes.
CREATED = "2026-11-26"
METHOD = (
    "per recipe, the candidate predictor (table, roofline, fitted-roofline, blend; fp8advisor.predict.loso) "
    "with the lowest leave-one-source-out error over the evidence base (data/evidence: published float8 "
    "training measurements and this project's measured profiles), fitted on every source; intervals: the "
    "10th to 90th percentile of published / predicted over its held-out figures"
)


@dataclass(frozen=True)
class EvidenceReport:
    """What the evidence base says: every held-out residual, the choice per (GPU, recipe) and why, the
    interval ratios per recipe, the profiles built, and the step sources the step model cannot run."""

    sources: tuple[EvidenceSource, ...]
    residuals: tuple[Residual, ...]
    choices: Mapping[tuple[str, Recipe], tuple[str, str]] = field(hash=False)
    intervals: Mapping[tuple[str, Recipe], tuple[float, float, int]] = field(hash=False)
    profiles: tuple[Profile, ...]
    skipped_steps: tuple[str, ...] = ()
    #: Each held-out figure as the default would have predicted it had its source never been seen, with the
    #: interval stated then (`_held_out_defaults`)
    held_out: tuple[Stated, ...] = ()


def evidence_report(
    sources: Sequence[EvidenceSource] | None = None,
    *,
    calibration: Calibration | None = None,
    families: Sequence[str] = FAMILIES,
    layers_by_anchor: Mapping[str, object] | None = None,
) -> EvidenceReport:
    """Leave-one-source-out over `sources` (default: the whole evidence base), the selection per family and
    recipe, and the evidence profiles. `layers_by_anchor`: inspected step models by anchor id (inspected here
    when not given)."""
    from fp8advisor.inspect.layers import inspect_model

    sources = load_evidence() if sources is None else list(sources)
    calibration = calibration or Calibration.load()
    figures = linear_figures(sources)
    anchors, skipped = anchors_from_evidence(sources)
    layers = dict(layers_by_anchor or {})
    for anchor in anchors:
        if anchor.id not in layers:
            layers[anchor.id] = inspect_model(anchor.model, batch=anchor.batch, seq=anchor.seq)
    steps = step_residuals(anchors, layers, calibration, family_of) if anchors else None
    residuals = leave_one_source_out(figures, CANDIDATES, steps)
    measured = measured_tables(sources)
    choices = {
        (gpu, recipe): choose(residuals, gpu, recipe, measured)
        for gpu in families
        for recipe in evidence_recipes(gpu, figures)
    }
    intervals = {}
    for (gpu, recipe), (candidate, _) in choices.items():
        stated = interval_ratios(residuals, recipe, candidate)
        if stated is not None:
            intervals[(gpu, recipe)] = stated
    fitted = fit_candidates(figures)
    profiles = tuple(
        _family_profile(fitted, gpu, choices, intervals, sources, residuals, measured) for gpu in families
    )
    held_out = _held_out_defaults(sources, figures, residuals, steps)
    return EvidenceReport(
        tuple(sources), tuple(residuals), choices, intervals, profiles, tuple(skipped), tuple(held_out)
    )


def evidence_recipes(gpu: str, figures) -> list[Recipe]:
    """The recipes an evidence profile of `gpu` predicts: those the GPU runs with at least one Linear figure
    in the evidence base (today the float8 ones; MXFP8 has none, so its figures stay the roofline profile's,
    labelled modelled)."""
    with_figures = {figure.recipe for figure in figures}
    return [recipe for recipe in recipes_for_family(gpu) if recipe in with_figures]


def family_of(gpu: str) -> str:
    """The GPU family whose evidence profile answers for `gpu`: its own, else the default (as
    `selection.select_profile` picks for a GPU without a shipped profile)."""
    return gpu if gpu in FAMILIES else DEFAULT_FAMILY


def measured_tables(sources: Sequence[EvidenceSource]) -> set[tuple[str, Recipe]]:
    """(GPU, recipe) of this project's own measured tables (a measured profile's LNLinearSigmoid points of
    the recipe, at least `MIN_TABLE_POINTS`)."""
    found = set()
    for source in sources:
        if source.provenance != "measured":
            continue
        for figure_set in _by_recipe(linear_figures([source])).items():
            recipe, figures = figure_set
            if len(figures) >= MIN_TABLE_POINTS:
                found.add((source.gpu, recipe))
    return found


def _by_recipe(figures) -> dict[Recipe, list]:
    grouped: dict[Recipe, list] = {}
    for figure in figures:
        grouped.setdefault(figure.recipe, []).append(figure)
    return grouped


def choose(
    residuals: Sequence[Residual], gpu: str, recipe: Recipe, measured: set[tuple[str, Recipe]]
) -> tuple[str, str]:
    """The candidate for `gpu` and `recipe`, and why: the GPU's own measured table where this project measured
    one (a table predicts the GPU it measured; leave-one-source-out cannot score a GPU's only table, since
    held out it is predicted from another GPU's), else the lowest held-out score (`loso.select`)."""
    if (gpu, recipe) in measured:
        return TABLE, f"{gpu}'s own measured table (this project's bench of this GPU type)"
    return select(residuals, gpu, recipe)


def _family_profile(fitted, gpu: str, choices, intervals, sources, residuals, measured) -> Profile:
    """The evidence profile of `gpu`: each recipe predicted by its chosen candidate, with its interval and
    its held-out error: the chosen candidate on the held-out Linear figures of the recipe on this GPU (on
    every GPU where it has none); a GPU's own measured table, its leave-one-out error within itself."""
    chosen = {recipe: choice[0] for (family, recipe), choice in choices.items() if family == gpu}
    stated = {recipe: intervals[(gpu, recipe)] for recipe in chosen if (gpu, recipe) in intervals}
    profile = candidate_profile(fitted, chosen, gpu, name=f"{gpu.lower()}-evidence", intervals=stated)
    recipes = {}
    for name, body in profile.recipes.items():
        held_out = [
            r
            for r in residuals
            if r.level == "linear" and r.recipe.value == name and r.candidate == chosen[Recipe(name)]
        ]
        if chosen[Recipe(name)] == TABLE and body.points and (gpu, Recipe(name)) in measured:
            # the GPU's own measured table: its own leave-one-out error, as `fit` states it
            recipes[name] = replace(body, error=leave_one_out(body.points, name, get_specs(gpu)))
            continue
        own = [r for r in held_out if r.gpu == gpu]
        method = (
            f"leave-one-source-out, {gpu}'s sources" if own else "leave-one-source-out, every GPU's sources"
        )
        compared = [(r.predicted, r.published) for r in own or held_out]
        recipes[name] = replace(body, error=prediction_error(method, compared))
    return replace(
        profile,
        recipes=recipes,
        source="the evidence base: " + ", ".join(source.id for source in sources),
        created=CREATED,
        device=DeviceInfo(name=f"{gpu} (evidence base)", family=gpu),
        method=METHOD,
    )


def markdown_tables(report: EvidenceReport) -> str:
    """The tables of docs/benchmarks.md: held-out error per source and candidate, the choice per GPU and
    recipe with its interval, and how often the published value fell inside the stated interval."""
    per_source = source_errors(report.residuals)
    keys = sorted(
        {(s, level, recipe) for s, level, recipe, _ in per_source}, key=lambda k: (k[1], k[0], k[2])
    )
    lines = [
        "| held-out source | level | recipe | figures | " + " | ".join(CANDIDATES) + " |",
        "|---|---|---|---:|" + "---:|" * len(CANDIDATES),
    ]
    counts: dict[tuple, int] = {}
    for r in report.residuals:
        if r.candidate == CANDIDATES[0]:
            counts[(r.source, r.level, r.recipe)] = counts.get((r.source, r.level, r.recipe), 0) + 1
    for source, level, recipe in keys:
        errors = [per_source.get((source, level, recipe, c)) for c in CANDIDATES]
        cells = " | ".join("-" if e is None else f"{e:.1%}" for e in errors)
        lines.append(f"| {source} | {level} | {recipe.value} | {counts[(source, level, recipe)]} | {cells} |")
    lines += [
        "",
        "| GPU | recipe | chosen | interval (published / predicted) | why |",
        "|---|---|---|---|---|",
    ]
    for (gpu, recipe), (candidate, why) in report.choices.items():
        stated = report.intervals.get((gpu, recipe))
        words = "none (too few held-out figures)" if stated is None else f"{stated[0]:.3f}-{stated[1]:.3f}"
        lines.append(f"| {gpu} | {recipe.value} | {candidate} | {words} | {why} |")
    lines += [
        "",
        "The shipped default (candidates chosen with every source) on each source (this project's H200 "
        "sweep, which is the shipped H200 table, left out):",
        "",
        *_chosen_table(shipped_defaults(report), "shipped"),
        "",
        "The default as it would have been chosen without each source (selection is part of the fit: the "
        "honest held-out error):",
        "",
        *_chosen_table(list(report.held_out), "chosen without it"),
        "",
        _coverage_line(report),
    ]
    return "\n".join(lines) + "\n"


#: A held-out figure and the interval ratios stated for it (None: none stated).
Stated = tuple[Residual, tuple[float, float] | None]


def _held_out_defaults(sources, figures, residuals, steps) -> list[Stated]:
    """What the default would have predicted for each held-out figure had its source never been seen: for a
    Linear source, leave-one-source-out run again without it (every candidate refitted on the remaining
    sources, the step sources predicted with those fits), the candidate chosen from that (`choose`) for the
    source's GPU family and recipe, and the interval ratios of that run; a step source enters no fit, so the
    other sources' residuals already leave it out (its own interval: the step at the interval's ends).
    Selection is part of the fit, so this, not the error of the candidate chosen with every source, is the
    honest held-out error."""

    def steps_only(fitted, candidate, _intervals):
        return steps(fitted, candidate, {}) if steps is not None else []

    found: list[Stated] = []
    linear_sources = {figure.source for figure in figures}
    for source in sorted({r.source for r in residuals}):
        measured = measured_tables([s for s in sources if s.id != source])
        if source in linear_sources:
            rest = [figure for figure in figures if figure.source != source]
            inner = leave_one_source_out(rest, CANDIDATES, steps_only if steps is not None else None)
        else:
            inner = [r for r in residuals if r.source != source]
        own = [r for r in residuals if r.source == source]
        for gpu, recipe in sorted({(r.gpu, r.recipe) for r in own}, key=str):
            candidate, _ = choose(inner, family_of(gpu), recipe, measured)
            ratios = interval_ratios(inner, recipe, candidate)
            found += [
                (r, _stated(r, ratios))
                for r in own
                if (r.gpu, r.recipe, r.candidate) == (gpu, recipe, candidate)
            ]
    return found


def _stated(residual: Residual, ratios: tuple[float, float, int] | None) -> tuple[float, float] | None:
    """The interval stated for a held-out figure: a step figure's own (the step at the interval's ends), a
    Linear figure's its candidate's ratios."""
    if residual.level == "step":
        return residual.interval
    return None if ratios is None else ratios[:2]


def _inside(residual: Residual, interval: tuple[float, float] | None) -> bool | None:
    """Whether the published value lies in the stated interval (None: none stated)."""
    if interval is None:
        return None
    if residual.level == "step":
        return min(interval) <= residual.published <= max(interval)
    return interval[0] <= residual.ratio <= interval[1]


def shipped_defaults(report: EvidenceReport) -> list[Stated]:
    """Each held-out figure as the shipped default predicts it: the candidate chosen with every source for
    the figure's GPU (the default family's choice for a GPU without a profile) and recipe, and its
    interval. A measured source that is itself the shipped table of its GPU is left out (the shipped default
    reproduces it exactly; its error within itself is the profile's leave-one-out)."""
    own_tables = {
        (s.id, gpu, recipe)
        for s in report.sources
        for gpu, recipe in measured_tables([s])
        if report.choices.get((gpu, recipe), ("",))[0] == TABLE
    }
    found = []
    for r in report.residuals:
        if (r.source, r.gpu, r.recipe) in own_tables:
            continue
        gpu = family_of(r.gpu)
        candidate, _ = report.choices[(gpu, r.recipe)]
        if r.candidate == candidate:
            found.append((r, _stated(r, report.intervals.get((gpu, r.recipe)))))
    return found


def _chosen_table(chosen: list[Stated], candidate_column: str) -> list[str]:
    """One row per held-out source: the candidate that predicted it, median and worst relative error, how
    often "speedup > 1" is right, the figures inside the stated interval."""
    lines = [
        f"| held-out source | level | recipe | {candidate_column} | figures | median error | worst "
        "| sign right | inside interval | published / predicted |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    keys = sorted({(r.level, r.source, r.recipe) for r, _ in chosen}, key=lambda k: (k[0], k[1], k[2].value))
    for level, source, recipe in keys:
        rows = [(r, i) for r, i in chosen if (r.level, r.source, r.recipe) == (level, source, recipe)]
        errors = [abs(r.relative_error) for r, _ in rows]
        signs = sum((r.predicted > 1) == (r.published > 1) for r, _ in rows)
        inside = [_inside(r, i) for r, i in rows]
        stated = [flag for flag in inside if flag is not None]
        ratios = ", ".join(f"{r.published:.3f} / {r.predicted:.3f}" for r, _ in rows[:3])
        lines.append(
            f"| {source} | {level} | {recipe.value} | {rows[0][0].candidate} | {len(rows)} "
            f"| {float(np.median(errors)):.1%} | {max(errors):.1%} | {signs}/{len(rows)} "
            f"| {f'{sum(stated)}/{len(stated)}' if stated else '-'} "
            f"| {ratios}{', ...' if len(rows) > 3 else ''} |"
        )
    return lines


def _coverage_line(report: EvidenceReport) -> str:
    """How many held-out figures fell inside the stated interval: the shipped default's, and the one the
    default would have stated without their source."""
    sentences = []
    for pairs, whose in (
        (shipped_defaults(report), "the shipped default's interval"),
        (list(report.held_out), "the interval chosen without their source"),
    ):
        parts = []
        for level, words in (("linear", "Linear figures"), ("step", "whole-step figures")):
            flags = [_inside(r, i) for r, i in pairs if r.level == level]
            stated = [flag for flag in flags if flag is not None]
            parts.append(f"{sum(stated)} of {len(stated)} {words} ({sum(stated) / max(len(stated), 1):.0%})")
        sentences.append(f"inside {whose}: " + " and ".join(parts))
    return "Coverage, " + "; ".join(sentences) + "."


__all__ = [
    "CREATED",
    "FAMILIES",
    "METHOD",
    "EvidenceReport",
    "evidence_report",
    "choose",
    "family_of",
    "measured_tables",
    "shipped_defaults",
    "markdown_tables",
]
