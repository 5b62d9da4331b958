"""The evidence base: every published float8 training measurement the project has found, one file per source.

`data/evidence/*.json` (schema `fp8advisor.evidence/1`, described in `data/evidence/README.md`) holds each
source's figures exactly as published, with where they come from (repository, path, PR, page), when, on which
GPU, with which software and how they were timed. This module reads and checks those files
(`load_evidence`) and derives, by code only, what the predictors need:

- `LinearFigure`: one Linear speedup (a bare Linear or torchao's LayerNorm -> Linear -> Sigmoid), bf16 time /
  float8 time when the source gives times, else its printed speedup;
- `derived_step_speedup`: one whole-step speedup, from the float8 and bf16 throughputs of the same set-up
  when the source gives both, else its printed speedup (or percentage); `fp8advisor.advice.evidence_steps`
  runs the step sources through the step model.

The shipped measured profiles (`data/profiles`, provenance `measured`: this project's own GPU runs) are
sources too (`measured_sources`): their points are speedups of kernel times already paired by `fit`.
`benchmarks/make_evidence_profiles.py` fits the candidate predictors to these figures and chooses among them
by leave-one-source-out (`fp8advisor.predict.loso`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fp8advisor.errors import ProfileError, quote
from fp8advisor.gpus import gpu_family
from fp8advisor.paths import DATA_DIR, PROFILES_DIR
from fp8advisor.recipes import Recipe

SCHEMA = "fp8advisor.evidence/1"
EVIDENCE_DIR = DATA_DIR / "evidence"

#: What a source measured: a bare Linear, torchao's LNLinearSigmoid, MoE grouped GEMMs, a training step.
KINDS = ("linear", "ln_linear_sigmoid", "grouped", "step")
#: Kinds whose figures are Linear speedups (`LinearFigure`).
LINEAR_KINDS = ("linear", "ln_linear_sigmoid")
_REQUIRED = ("schema", "id", "kind", "source", "date", "gpu", "software", "method", "points")
#: Recipes the predictors know; figures of other recipes (mxfp8, Transformer Engine's) are kept in the files
#: and read, but no figure is derived from them.
_KNOWN_RECIPES = {recipe.value for recipe in Recipe}


@dataclass(frozen=True)
class EvidenceSource:
    """One published source (or one of this project's measured profiles) and its figures as given."""

    id: str
    kind: str
    gpu: str  # the GPU family ("H100"), as `gpus.gpu_family` names it
    date: str
    source: Mapping[str, Any] = field(hash=False)
    software: Mapping[str, str] = field(hash=False)
    method: Mapping[str, Any] = field(hash=False)
    points: tuple[Mapping[str, Any], ...] = field(hash=False)
    excerpt: str | None = None
    setup: Mapping[str, Any] | None = field(default=None, hash=False)
    provenance: str = "published"  # "measured" for this project's own profiles
    path: Path | None = None

    def describe(self) -> str:
        """Where the figures come from, in one line: repository and path (or page), PR, date, GPU."""
        where = self.source.get("repository") or ""
        where += f" {self.source.get('path')}" if self.source.get("path") else ""
        if self.source.get("pr"):
            where += f" PR {self.source['pr']}"
        if self.source.get("issue"):
            where += f" issue {self.source['issue']}"
        if not where.strip():
            where = str(self.source.get("url") or self.source.get("title") or self.id)
        return f"{where.strip()} ({self.date}, {self.gpu})"


@dataclass(frozen=True)
class LinearFigure:
    """A Linear layer's float8 forward+backward speedup from one source: bf16 time / float8 time."""

    source: str
    gpu: str
    recipe: Recipe
    M: int
    K: int
    N: int
    speedup: float
    #: True for torchao's LNLinearSigmoid benchmark (LayerNorm and Sigmoid around the Linear, timed with it),
    #: False for a bare Linear.
    ln_sigmoid: bool
    label: str = ""
    bf16_s: float | None = None  # the bf16 time, where the source gives it


def _problem(path: Path, text: str) -> ProfileError:
    return ProfileError(
        f"evidence file {path.name}: {text}",
        hint="fix the file (its rules: data/evidence/README.md)",
        location=str(path),
    )


def _check_document(data: Any, path: Path) -> None:
    """The fields every evidence file needs, and the rules of its points; the first problem is raised."""
    if not isinstance(data, dict):
        raise _problem(path, "not a JSON object")
    missing = [key for key in _REQUIRED if key not in data]
    if missing:
        raise _problem(path, f"missing {', '.join(missing)}")
    if data["schema"] != SCHEMA:
        raise _problem(path, f"schema is {quote(data['schema'])}, not {SCHEMA}")
    if data["id"] != path.stem:
        raise _problem(path, f"id {quote(data['id'])} is not the file's name {quote(path.stem)}")
    if data["kind"] not in KINDS:
        raise _problem(path, f"kind {quote(data['kind'])} is not one of {', '.join(KINDS)}")
    if gpu_family(str(data["gpu"])) is None:
        raise _problem(path, f"gpu {quote(data['gpu'])} is not a GPU family fp8advisor knows")
    if data.get("excerpt") is None and not data.get("transcribed_from"):
        raise _problem(path, "neither an excerpt nor transcribed_from says where the figures were read")
    if not isinstance(data["points"], list):
        raise _problem(path, "points is not a list")
    for index, point in enumerate(data["points"]):
        problem = _point_problem(point, data["kind"])
        if problem:
            raise _problem(path, f"points[{index}]: {problem}")


def _point_problem(point: Any, kind: str) -> str | None:
    if not isinstance(point, dict):
        return "not an object"
    for key, value in point.items():
        if key in ("recipe", "label") or isinstance(value, bool) or value is None:  # None: not stated
            continue
        if not isinstance(value, int | float) or value <= 0:
            return f"{key} is {quote(value)}, not a positive number"
    if kind in LINEAR_KINDS and not all(key in point for key in ("recipe", "M", "K", "N")):
        return "a Linear point needs recipe, M, K and N"
    if kind == "step" and "recipe" not in point:
        return "a step point needs recipe (null for bf16)"
    if kind != "step" and not ({"speedup", "float8_us"} & set(point)):
        return "no speedup and no float8 time"
    return None


def _read_file(path: Path) -> EvidenceSource:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _problem(path, f"unreadable ({error})") from None
    _check_document(data, path)
    points = tuple(data["points"])
    transcribed = data.get("transcribed_from") or {}
    if transcribed.get("file"):
        points += _table_points(DATA_DIR / transcribed["file"])
    return EvidenceSource(
        id=data["id"],
        kind=data["kind"],
        gpu=gpu_family(str(data["gpu"])) or str(data["gpu"]),
        date=str(data["date"]),
        source=dict(data["source"]),
        software={str(k): str(v) for k, v in data["software"].items()},
        method=dict(data["method"]),
        points=points,
        excerpt=data.get("excerpt"),
        setup=data.get("setup"),
        path=path,
    )


def _table_points(path: Path) -> tuple[dict, ...]:
    """The points of a transcribed table (CSV recipe,M,K,N,speedup, read as `fit` reads it)."""
    from fp8advisor.predict.measurements import read_speedup_table

    table = read_speedup_table(path)
    return tuple(
        {"recipe": recipe, "M": p.M, "K": p.K, "N": p.N, "speedup": p.speedup}
        for recipe, points in table.speedups.items()
        for p in points
    )


def load_evidence(directory: Path | None = None, *, measured: bool = True) -> list[EvidenceSource]:
    """Every evidence file in `directory` (default `data/evidence`), checked, sorted by id; with `measured`,
    the shipped measured profiles as sources too (`measured_sources`). A bad file is a ProfileError."""
    directory = EVIDENCE_DIR if directory is None else Path(directory)
    sources = [_read_file(path) for path in sorted(directory.glob("*.json"))]
    if measured:
        sources += measured_sources()
    return sorted(sources, key=lambda source: source.id)


def measured_sources(directory: Path = PROFILES_DIR) -> list[EvidenceSource]:
    """This project's measured profiles as sources: LNLinearSigmoid speedups of `bench`, per recipe."""
    from fp8advisor.predict.profile_files import profiles_in

    sources = []
    for profile in profiles_in(directory, []):
        if profile.provenance != "measured" or not profile.recipes:
            continue
        points = tuple(
            _measured_point(recipe, point)
            for recipe, body in sorted(profile.recipes.items())
            for point in body.points
        )
        sources.append(
            EvidenceSource(
                id=profile.name,
                kind="ln_linear_sigmoid",
                gpu=profile.family or profile.device.name,
                date=profile.created,
                source={"title": profile.source, "path": f"data/profiles/{profile.name}.json"},
                software=dict(profile.software),
                method={"timed": profile.method},
                points=points,
                provenance="measured",
                path=profile.path,
            )
        )
    return sources


def _measured_point(recipe: str, point) -> dict:
    """A measured profile's point as an evidence point: its speedup, and its kernel times in microseconds
    where it has them (the bf16 time prices the bf16 Linear in the step model)."""
    found = {"recipe": recipe, "M": point.M, "K": point.K, "N": point.N, "speedup": point.speedup}
    if point.bf16_time_s is not None:
        found["bf16_us"] = point.bf16_time_s * 1e6
    return found


def derived_speedup(point: Mapping[str, Any]) -> float | None:
    """A micro point's speedup: bf16 time / float8 time when both are given, else the printed speedup
    (a measured profile's point gives its speedup and its bf16 time alone)."""
    if point.get("bf16_us") and point.get("float8_us"):
        return float(point["bf16_us"]) / float(point["float8_us"])
    return float(point["speedup"]) if point.get("speedup") else None


def linear_figures(sources: Iterable[EvidenceSource]) -> list[LinearFigure]:
    """Every Linear speedup of the Linear-kind sources, for the recipes fp8advisor predicts."""
    figures = []
    for source in sources:
        if source.kind not in LINEAR_KINDS:
            continue
        for point in source.points:
            speedup = derived_speedup(point)
            if speedup is None or point["recipe"] not in _KNOWN_RECIPES:
                continue
            figures.append(
                LinearFigure(
                    source=source.id,
                    gpu=source.gpu,
                    recipe=Recipe(point["recipe"]),
                    M=int(point["M"]),
                    K=int(point["K"]),
                    N=int(point["N"]),
                    speedup=speedup,
                    ln_sigmoid=source.kind == "ln_linear_sigmoid",
                    label=str(point.get("label", "")),
                    bf16_s=float(point["bf16_us"]) * 1e-6 if point.get("bf16_us") else None,
                )
            )
    return figures


def derived_step_speedup(point: Mapping[str, Any], points: Sequence[Mapping[str, Any]]) -> float | None:
    """A step point's float8 speedup: its throughput over the bf16 point's of the same source (`points`)
    when both are given, else its printed speedup, else 1 + its printed percentage / 100; None for the bf16
    point itself and when the source gives none of these."""
    if point.get("recipe") is None:
        return None
    bf16 = next((p.get("tokens_per_s_per_gpu") for p in points if p.get("recipe") is None), None)
    tokens = point.get("tokens_per_s_per_gpu")
    if tokens and bf16:
        return float(tokens) / float(bf16)
    if point.get("speedup"):
        return float(point["speedup"])
    if point.get("speedup_percent"):
        return 1 + float(point["speedup_percent"]) / 100
    return None


#: The measured figures of a point (what the excerpt must print); shapes and set-ups may be stated in words.
FIGURE_KEYS = (
    "bf16_us",
    "float8_us",
    "speedup",
    "tokens_per_s_per_gpu",
    "speedup_percent",
    "mfu_percent",
)

_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _printed_numbers(text: str) -> set[float]:
    """The numbers in `text`, thousands separators dropped ("6,768" -> 6768)."""
    found = set()
    for match in _NUMBER.findall(text):
        try:
            found.add(float(match.replace(",", "")))
        except ValueError:
            continue
    return found


def numbers_missing_from_excerpt(source: EvidenceSource) -> list[str]:
    """The figures of `source`'s points that its excerpt does not print ("points[3].speedup = 1.43"): a
    source read from text must carry every measured figure (`FIGURE_KEYS`) verbatim. Sources transcribed
    from an image have no excerpt."""
    if source.excerpt is None:
        return []
    printed = _printed_numbers(source.excerpt)
    missing = []
    for index, point in enumerate(source.points):
        for key, value in point.items():
            if key not in FIGURE_KEYS or value is None:
                continue
            if float(value) not in printed:
                missing.append(f"points[{index}].{key} = {value}")
    return missing


__all__ = [
    "EVIDENCE_DIR",
    "FIGURE_KEYS",
    "KINDS",
    "LINEAR_KINDS",
    "SCHEMA",
    "EvidenceSource",
    "LinearFigure",
    "derived_speedup",
    "derived_step_speedup",
    "linear_figures",
    "load_evidence",
    "measured_sources",
    "numbers_missing_from_excerpt",
]
