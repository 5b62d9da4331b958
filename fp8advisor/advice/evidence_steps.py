"""The evidence base's whole-step figures, run through the step model: the step half of leave-one-source-out.

A step source of `data/evidence` (kind `step`) with a model target of the same shapes and names and data
parallelism only (FSDP over `gpus`) becomes an `Anchor` (`anchors_from_evidence`), exactly as `data/anchors`
describes the calibration runs; the others are named with the reason. The step model runs tensor, context,
pipeline and HSDP set-ups too (issue 28: `data/anchors/published_step_results.json` checks it on them), but
their residuals are not used to choose the Linear predictor: there the error is the parallelism model's as
much as the Linear figures'. `step_residuals` then predicts each float8 result of each anchor with a
candidate predictor of `fp8advisor.predict.loso` and returns published beside predicted: the
`StepResiduals` that `leave_one_source_out` takes. The step sources enter no fit (the step model's
in-step efficiency divides every compute term alike: with FSDP's traffic hidden, no speedup depends on it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

from fp8advisor.advice.published import Anchor, AnchorPrediction, PublishedResult, predict_anchor
from fp8advisor.advice.step import Calibration, Checkpointing, StepConfig
from fp8advisor.predict.evidence import EvidenceSource, derived_step_speedup
from fp8advisor.predict.loso import Fitted, Residual, StepResiduals, candidate_profile
from fp8advisor.predict.selection import ProfileChoice
from fp8advisor.recipes import Recipe

#: The parallelism degrees that keep a step set-up out of the Linear predictor's choice (beyond dp_shard =
#: FSDP); ep: the all-to-all of expert parallelism is not modelled at all.
_UNMODELLED = ("tp", "cp", "pp", "dp_replicate", "ep")


def _unmodelled_reason(source: EvidenceSource) -> str | None:
    setup = source.setup or {}
    if not setup.get("target"):
        return "no fp8advisor model target with the published model's shapes"
    parallelism = setup.get("parallelism") or {}
    beyond = [f"{key} {parallelism[key]}" for key in _UNMODELLED if (parallelism.get(key) or 1) > 1]
    if (parallelism.get("ep") or 1) > 1:
        return f"{', '.join(beyond)}: expert parallelism's all-to-all is not modelled"
    if beyond:
        return (
            f"{', '.join(beyond)}: a scale-out set-up, checked in the step model's table (issue 28), "
            "not used to choose the Linear predictor"
        )
    if not all(setup.get(key) for key in ("gpus", "batch", "seq")):
        return "the set-up does not state gpus, batch and seq"
    if not any(derived_step_speedup(point, source.points) for point in source.points):
        return "no float8 speedup to compare (no bf16 figure beside its float8 throughput)"
    return None


def anchors_from_evidence(sources: Sequence[EvidenceSource]) -> tuple[list[Anchor], list[str]]:
    """(anchors the step model can run, "source: why not" for the other step sources)."""
    anchors, skipped = [], []
    for source in sources:
        if source.kind != "step":
            continue
        reason = _unmodelled_reason(source)
        if reason is not None:
            skipped.append(f"{source.id}: {reason}")
            continue
        setup = source.setup or {}
        results = tuple(
            PublishedResult(
                recipe=None if point.get("recipe") is None else Recipe(point["recipe"]),
                tokens_per_s_per_gpu=point.get("tokens_per_s_per_gpu"),
                speedup=derived_step_speedup(point, source.points),
                float8_all_gather=bool(point.get("float8_all_gather", False)),
            )
            for point in source.points
            if point.get("recipe") is None or point["recipe"] in {r.value for r in Recipe}
        )
        anchors.append(
            Anchor(
                id=source.id,
                source=source.describe(),
                setup=str(setup.get("description", "")),
                software=dict(source.software),
                model=str(setup["target"]),
                gpu=source.gpu,
                batch=int(setup["batch"]),
                seq=int(setup["seq"]),
                config=StepConfig(
                    world_size=int(setup["gpus"]),
                    ac=Checkpointing(setup.get("ac") or "none"),
                    grad_accum=int(setup.get("grad_accum") or 1),
                ),
                keep_bf16=tuple(setup.get("keep_bf16") or ()),
                results=results,
            )
        )
    return anchors, skipped


def _steps_at(
    anchor: Anchor, calibration: Calibration, layers, choice
) -> Callable[[float], AnchorPrediction]:
    """`factor -> predict_anchor(...)` of one anchor and candidate: each Linear speedup factor (1, or an end
    of an interval) predicted once for all the anchor's results."""
    return functools.cache(lambda factor: predict_anchor(anchor, calibration, layers, choice, factor))


def step_residuals(
    anchors: Sequence[Anchor],
    layers_by_anchor: Mapping[str, object],
    calibration: Calibration,
    profile_family: Callable[[str], str] = lambda gpu: gpu,
) -> StepResiduals:
    """The step model's residuals of every anchor's float8 results under a fitted candidate (see
    `fp8advisor.predict.loso.leave_one_source_out`): the Linear layers priced by the candidate's profile of
    `profile_family(anchor's GPU)` (the profile `suggest` would use there), the step on the anchor's own GPU;
    each result's prediction at the ends of the interval ratios given (none given: none computed)."""

    def residuals(fitted: Fitted, candidate: str, intervals) -> list[Residual]:
        found = []
        for anchor in anchors:
            profile = candidate_profile(fitted, candidate, profile_family(anchor.gpu))
            choice = ProfileChoice(primary=profile, fallback=None, reason=f"candidate {candidate}")
            layers = layers_by_anchor[anchor.id]
            at = _steps_at(anchor, calibration, layers, choice)
            for result, _ in at(1.0).float8:
                if result.speedup is None:
                    continue
                stated = intervals.get(result.recipe)
                ends = None if stated is None else tuple(at(factor).speedup(result) for factor in stated[:2])
                found.append(
                    Residual(
                        anchor.id,
                        anchor.gpu,
                        result.recipe,
                        candidate,
                        at(1.0).speedup(result),
                        result.speedup,
                        level="step",
                        label=result.recipe.value + (" + all-gather" if result.float8_all_gather else ""),
                        interval=ends,
                    )
                )
        return found

    return residuals


__all__ = [
    "anchors_from_evidence",
    "step_residuals",
]
