"""Speedups measured in the user's own training step (`fp8advisor trace BF16 FLOAT8 -o FILE`) as evidence.

`suggest --trace FILE` predicts each Linear whose shapes a trace measured (`traces.gemms.ShapeGroup`: the
layer's three GEMMs), for the recipe the traces ran, with the speedup measured there: GEMMs and the casts
feeding them, in the step, on the user's GPU. It is the strongest evidence there is, and it wins over every
profile; the profile still gives the layer's bf16 time (what the step model adds up) and predicts every
other layer.
"""

from __future__ import annotations

from fp8advisor.advice.linears import Predictor, default_predictor
from fp8advisor.predict.speedup import LayerTimes, Prediction
from fp8advisor.recipes import Recipe
from fp8advisor.traces.comparison import read_measured

#: The `how` of a speedup measured in a trace.
TRACED = "traced"


def traced_predictor(path: str, profile_choice, base: Predictor | None = None) -> Predictor:
    """`base` (default: the profile's predictions) with the speedups measured in the trace results file at
    `path` where they apply. TraceError (exit 2) when the file is not one."""
    measured = read_measured(path)
    base = base or default_predictor(profile_choice)
    gpu = ", ".join(measured.gpu) or "the traced GPU"

    def predict(recipe: Recipe, M: int, K: int, N: int):
        times = base(recipe, M, K, N)
        speedup = measured.speedup(M, K, N) if recipe.value == measured.recipe else None
        if speedup is None:
            return times
        predict.matched.add((M, K, N))
        return LayerTimes(
            times.bf16_s,
            times.bf16_s / speedup,
            Prediction(
                speedup,
                "measured",
                TRACED,
                f"trace:{path}",
                detail=f"measured in the training step's traces on {gpu} (GEMMs and the casts feeding them)",
            ),
            times.bf16_provenance,
            times.bf16_how,
        )

    predict.measured, predict.matched = measured, set()  # what `traced_warnings` reads after the advice
    return predict


def traced_warnings(predictor: Predictor, profile_family: str | None) -> list[str]:
    """What a user of `--trace` should know after the advice: that no layer took a measured speedup (other
    tokens, recipe or model than the traces'), or that the traces ran on another GPU than the profile's."""
    from fp8advisor.gpus import gpu_family

    measured = predictor.measured  # type: ignore[attr-defined]
    warnings = []
    if not predictor.matched:  # type: ignore[attr-defined]
        warnings.append(
            f"no layer took a speedup from {measured.path} (measured for {measured.recipe}, "
            f"{len(measured.speedups)} shape group(s)): other tokens per GPU, recipe or model than the "
            "traced job's; the profile decided every layer"
        )
    traced = {gpu_family(name) or name for name in measured.gpu}
    if profile_family and traced and profile_family not in traced:
        warnings.append(
            f"the traces ran on {', '.join(sorted(traced))}, the profile is for {profile_family}: the "
            "measured speedups are that GPU's (give --gpu or --profile for it)"
        )
    return warnings


__all__ = ["TRACED", "traced_predictor", "traced_warnings"]
