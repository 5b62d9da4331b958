"""Published end-to-end results, and what the step model predicts for each of them.

`data/anchors/published_step_results.json` holds the published figures with their sources and set-ups; this
module runs the step model (`fp8advisor.advice.step`) on each set-up exactly as published (the same layers in
float8, the same parallelism, recomputation and gradient accumulation) and puts predicted beside published.
`fit_in_step_efficiency` is the step model's only calibration: each GPU family's one `fit: true` bf16 figure
sets that family's in-step efficiency (`fp8advisor.advice.step_calibration`).
`benchmarks/calibrate_step_model.py` writes the calibration file and the table of docs/benchmarks.md.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from fp8advisor.advice.step import (
    ANCHORS_PATH,
    Calibration,
    Checkpointing,
    StepConfig,
    StepGpu,
    StepPrediction,
    predict_step,
)
from fp8advisor.advice.step_calibration import CALIBRATION_SCHEMA
from fp8advisor.errors import ProfileError
from fp8advisor.recipes import Recipe

ANCHORS_SCHEMA = "fp8advisor.step-anchors/1"
#: An anchor's parallelism beyond FSDP, as `StepConfig` names it (absent: 1, or off).
PARALLEL_KEYS = ("tp", "cp", "pp", "dp_replicate", "async_tp", "gpus_per_node", "inter_node_gbps")


@dataclass(frozen=True)
class PublishedResult:
    recipe: Recipe | None  # None: the bf16 baseline
    tokens_per_s_per_gpu: float | None
    speedup: float | None
    float8_all_gather: bool = False
    fit: bool = False
    label: str | None = None  # the source's own name for the run, where it differs from the recipe's


@dataclass(frozen=True)
class Anchor:
    """One published set-up and its results."""

    id: str
    source: str
    setup: str
    software: dict
    model: str  # an fp8advisor target reproducing the published model's shapes and names
    gpu: str
    batch: int
    seq: int
    config: StepConfig
    keep_bf16: tuple[str, ...]  # filter_fqns of the published run (substring match)
    results: tuple[PublishedResult, ...]

    @property
    def traced_seq(self) -> int:
        """The sequence one GPU's model is traced at: its context-parallel chunk."""
        return self.seq // self.config.cp

    def inspect(self):
        """The anchor's model, inspected on the meta device at one data-parallel rank's micro-step."""
        from fp8advisor.inspect.layers import inspect_model

        return inspect_model(self.model, batch=self.batch, seq=self.traced_seq)


def load_anchors(path: Path | str = ANCHORS_PATH) -> list[Anchor]:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("schema") != ANCHORS_SCHEMA:
            raise ValueError(f"schema is {data.get('schema')!r}")
        return [_anchor(entry) for entry in data["anchors"]]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ProfileError(f"cannot read the published anchors {path}: {error}") from None


def _anchor(entry: dict) -> Anchor:
    results = tuple(
        PublishedResult(
            recipe=None if result["recipe"] is None else Recipe(result["recipe"]),
            tokens_per_s_per_gpu=result.get("tokens_per_s_per_gpu"),
            speedup=result.get("speedup"),
            float8_all_gather=bool(result.get("float8_all_gather", False)),
            fit=bool(result.get("fit", False)),
            label=result.get("label"),
        )
        for result in entry["results"]
    )
    config = StepConfig(
        world_size=int(entry["world_size"]),
        ac=Checkpointing(entry["ac"]),
        grad_accum=int(entry["grad_accum"]),
        **{key: entry[key] for key in PARALLEL_KEYS if key in entry},
    )
    return Anchor(
        id=entry["id"],
        source=entry["source"],
        setup=entry["setup"],
        software=dict(entry.get("software", {})),
        model=entry["model"],
        gpu=entry["gpu"],
        batch=int(entry["batch"]),
        seq=int(entry["seq"]),
        config=config,
        keep_bf16=tuple(entry["keep_bf16"]),
        results=results,
    )


@dataclass(frozen=True)
class AnchorPrediction:
    """The step model on one published set-up: its bf16 step and one step per published float8 result."""

    anchor: Anchor
    profile: str  # the profile that priced the Linear layers
    bf16: StepPrediction
    float8: tuple[tuple[PublishedResult, StepPrediction], ...]

    def speedup(self, result: PublishedResult) -> float:
        step = next(step for published, step in self.float8 if published is result)
        return self.bf16.step_s / step.step_s


def predict_anchor(
    anchor: Anchor, calibration: Calibration, model_layers=None, choice=None, float8_factor: float = 1.0
) -> AnchorPrediction:
    """Run the step model on `anchor` as published: every convertible Linear whose FQN contains no
    `keep_bf16` entry in float8, with the profile fp8advisor picks for the anchor's GPU (or `choice`, a
    `ProfileChoice`); `float8_factor` multiplies every Linear speedup (an end of its interval)."""
    from fp8advisor.advice.linears import decide_layers, default_predictor
    from fp8advisor.gpus import get_specs
    from fp8advisor.predict.selection import select_profile

    if model_layers is None:
        model_layers = anchor.inspect()
    if choice is None:
        choice = select_profile(None, device_name=anchor.gpu, detect_device=False)
    predictor = default_predictor(choice)
    gpu = StepGpu.of(get_specs(anchor.gpu))
    tp = anchor.config.tp
    bf16_layers = decide_layers(model_layers.layers, Recipe.TENSORWISE, predictor, 1.0, tp)
    bf16 = predict_step("bf16", "bf16", model_layers, bf16_layers, (), gpu, anchor.config, calibration)
    steps = []
    for result in anchor.results:
        if result.recipe is None:
            continue
        layers = decide_layers(model_layers.layers, result.recipe, predictor, 1.0, tp)
        if float8_factor != 1.0:
            layers = [replace(layer, float8_time_s=layer.float8_time_s / float8_factor) for layer in layers]
        converted = [
            layer.fqn
            for layer in layers
            if layer.counts_in_linear_time and not any(entry in layer.fqn for entry in anchor.keep_bf16)
        ]
        config = anchor.config.for_recipe(result.recipe, float8_all_gather=result.float8_all_gather)
        step = predict_step(
            result.recipe.value,
            result.recipe.value,
            model_layers,
            layers,
            converted,
            gpu,
            config,
            calibration,
        )
        steps.append((result, step))
    return AnchorPrediction(anchor, choice.describe(), bf16, tuple(steps))


def fit_in_step_efficiency(anchors: Sequence[Anchor], layers_by_anchor=None) -> dict:
    """Each GPU family's in-step efficiency, fitted to its one `fit: true` bf16 result: the modelled kernel
    time of that set-up's bf16 step / its published step time (the calibration file's content).

    Exact as long as the set-up's communication hides under its compute (checked: otherwise no efficiency
    could explain the figure by compute alone). `layers_by_anchor`: anchor id -> its inspected model.
    """
    fitting = [(a, r) for a in anchors for r in a.results if r.fit]
    families = [a.gpu for a, _ in fitting]
    if (
        not fitting
        or len(set(families)) != len(families)
        or any(r.recipe is not None or r.tokens_per_s_per_gpu is None for _, r in fitting)
    ):
        raise ProfileError(
            "each GPU family needs at most one bf16 throughput marked `fit: true` in the anchors"
        )
    fitted = {}
    for anchor, result in fitting:
        published_step_s = anchor.batch * anchor.seq / anchor.config.non_data_parallel
        published_step_s /= result.tokens_per_s_per_gpu
        model_layers = None if layers_by_anchor is None else layers_by_anchor[anchor.id]
        kernels = predict_anchor(anchor, Calibration(1.0, "no calibration"), model_layers).bf16
        kernel_time_s = kernels.step_s - kernels.term("communication").seconds
        if kernels.communication_s > published_step_s:
            raise ProfileError(
                f"{anchor.id}: modelled communication ({kernels.communication_s:.3g} s) exceeds the "
                f"published step ({published_step_s:.3g} s): the communication model cannot be right"
            )
        fitted[anchor.gpu] = {
            "in_step_efficiency": float(f"{kernel_time_s / published_step_s:.6g}"),
            "fitted_to": f"{anchor.id}: bf16 {result.tokens_per_s_per_gpu:g} tokens/s/GPU ({anchor.source})",
            "published_step_s": float(f"{published_step_s:.6g}"),
            "modelled_kernel_time_s": float(f"{kernel_time_s:.6g}"),
        }
    return {
        "schema": CALIBRATION_SCHEMA,
        "default_family": "H100" if "H100" in fitted else sorted(fitted)[0],
        "families": fitted,
        "how": (
            "per GPU family: modelled kernel time of the bf16 step of its fitting set-up (every term but the "
            "hidden FSDP communication) / the published step time (batch x seq / (tp x cp x pp) / tokens per "
            "second per GPU); a family without a fitting set-up takes the default family's"
        ),
    }


@dataclass(frozen=True)
class Comparison:
    """One published figure beside the step model's prediction."""

    anchor: str
    gpu: str
    what: str  # "bf16" or the recipe (with "+ float8 all-gather")
    published_tokens_per_s: float | None
    predicted_tokens_per_s: float
    published_speedup: float | None
    predicted_speedup: float | None
    role: str  # "fitted" (sets the in-step efficiency) or "check"
    linear_figures: str  # provenance of the Linear figures that priced it (speedups, bf16 times)

    @property
    def speedup_error(self) -> float | None:
        """predicted / published speedup - 1."""
        if self.published_speedup is None or self.predicted_speedup is None:
            return None
        return self.predicted_speedup / self.published_speedup - 1


def comparisons(prediction: AnchorPrediction) -> list[Comparison]:
    """Every published figure of one anchor beside what the step model predicts for it."""
    anchor = prediction.anchor
    rows = []
    for result in anchor.results:
        if result.recipe is None:
            step, speedup = prediction.bf16, None
            what = "bf16"
            figures = f"bf16 times {prediction.bf16.term('linear_bf16').provenance}"
        else:
            step = next(step for published, step in prediction.float8 if published is result)
            speedup = prediction.bf16.step_s / step.step_s
            what = result.recipe.value + (f" ({result.label})" if result.label else "")
            what += " + float8 all-gather" if result.float8_all_gather else ""
            figures = (
                f"speedups {step.speedup_provenance}, "
                f"bf16 times {prediction.bf16.term('linear_bf16').provenance}"
            )
        rows.append(
            Comparison(
                anchor=anchor.id,
                gpu=anchor.gpu,
                what=what,
                published_tokens_per_s=result.tokens_per_s_per_gpu,
                predicted_tokens_per_s=step.tokens_per_s,
                published_speedup=result.speedup,
                predicted_speedup=speedup,
                role="fitted" if result.fit else "check",
                linear_figures=figures,
            )
        )
    return rows


def markdown_table(rows: Sequence[Comparison]) -> str:
    """The published-vs-predicted table of docs/benchmarks.md."""

    def number(value: float | None, pattern: str) -> str:
        return "-" if value is None else format(value, pattern)

    lines = [
        "| anchor | GPU | run | published tok/s/GPU | predicted tok/s/GPU | published speedup "
        "| predicted speedup | predicted / published | role | Linear figures |",
        "|---|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for row in rows:
        error = row.speedup_error
        lines.append(
            f"| {row.anchor} | {row.gpu} | {row.what} | {number(row.published_tokens_per_s, '.1f')} "
            f"| {row.predicted_tokens_per_s:.1f} | {number(row.published_speedup, '.3f')} "
            f"| {number(row.predicted_speedup, '.3f')} | {'-' if error is None else f'{error:+.1%}'} "
            f"| {row.role} | {row.linear_figures} |"
        )
    return "\n".join(lines) + "\n"


__all__ = [
    "Comparison",
    "comparisons",
    "markdown_table",
    "Anchor",
    "AnchorPrediction",
    "PublishedResult",
    "fit_in_step_efficiency",
    "load_anchors",
    "predict_anchor",
]
