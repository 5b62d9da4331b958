"""The step model calibrated to the user's own bf16 trace, and the float8 step it then predicts.

The step model (`fp8advisor.advice.step`) has three free constants in practice: the in-step efficiency
(how much slower a Linear runs inside the step than alone), the attention rate, and the bandwidth of the
memory-bound work (norms, activations, loss, optimizer). A bf16 trace of the job measures each of them:
its GEMM time, its attention time, and the rest of its kernels. Each part of the predicted bf16 step is
scaled to its measured figure, the same factors scale the float8 step, and both predictions are shown,
before and after, beside the measured float8 step when there is a float8 trace. One GPU's step: the
collectives of a multi-GPU job are measured in the traces, not modelled here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fp8advisor.advice.step import StepConfig, StepGpu, StepPrediction, predict_step
from fp8advisor.advice.step_calibration import Calibration

#: Which measured part of the step (`fp8advisor.traces.comparison.PARTS`) each step-model term is.
TERM_PART = {
    "linear_float8": "GEMMs",
    "linear_bf16": "GEMMs",
    "matmul": "GEMMs",
    "attention": "attention",
    "memory_bound": "other kernels",
    "loss": "other kernels",
    "optimizer": "other kernels",
    "recompute": "other kernels",
}
#: The measured parts each factor is fitted to: float8 casts exist only in a float8 step; the bf16 step's
#: fused casts (none) and idle time are not the model's.
FITTED_PARTS = ("GEMMs", "attention", "other kernels")


@dataclass(frozen=True)
class StepCalibration:
    """The factors (measured / predicted, per part) and the steps before and after."""

    factors: dict[str, float]
    in_step_efficiency: float  # the shipped constant
    calibrated_efficiency: float  # the in-step efficiency the bf16 trace's GEMMs say
    bf16_before_s: float
    bf16_after_s: float
    float8_before_s: float
    float8_after_s: float
    measured_bf16_s: float
    measured_float8_s: float | None

    @property
    def speedup_before(self) -> float:
        return self.bf16_before_s / self.float8_before_s

    @property
    def speedup_after(self) -> float:
        return self.bf16_after_s / self.float8_after_s

    @property
    def measured_speedup(self) -> float | None:
        return None if self.measured_float8_s is None else self.measured_bf16_s / self.measured_float8_s


def _by_part(prediction: StepPrediction) -> dict[str, float]:
    parts: dict[str, float] = {}
    for term in prediction.terms:
        part = TERM_PART.get(term.name)
        if part is not None:
            parts[part] = parts.get(part, 0.0) + term.seconds
    return parts


def _scaled(prediction: StepPrediction, factors: Mapping[str, float]) -> float:
    """The step with each mapped term scaled by its part's factor; other terms (communication) unchanged."""
    return sum(term.seconds * factors.get(TERM_PART.get(term.name, ""), 1.0) for term in prediction.terms)


def calibrate_to_trace(
    advice,
    model_layers,
    converted: Iterable[str],
    gpu: StepGpu,
    measured_bf16_parts: Mapping[str, float],
    measured_bf16_step_s: float,
    measured_float8_step_s: float | None = None,
    config: StepConfig | None = None,
) -> StepCalibration:
    """Calibrate the step model to the measured bf16 parts and predict the step with `converted` (FQNs) in
    float8, before and after. `advice`: the advice at the traced tokens (its layers' predicted times)."""
    config = (config or StepConfig(world_size=1, optimizer_state_bytes=2)).for_recipe(advice.recipe)
    calibration = Calibration.load(family=gpu.family)
    common = (model_layers, advice.layers)
    bf16 = predict_step("bf16", "bf16", *common, (), gpu, config, calibration)
    float8 = predict_step("trace", "as traced", *common, tuple(converted), gpu, config, calibration)
    predicted = _by_part(bf16)
    factors = {
        part: measured_bf16_parts[part] / predicted[part]
        for part in FITTED_PARTS
        if predicted.get(part) and measured_bf16_parts.get(part)
    }
    efficiency = calibration.in_step_efficiency
    return StepCalibration(
        factors,
        efficiency,
        efficiency / factors.get("GEMMs", 1.0),
        bf16.step_s,
        _scaled(bf16, factors),
        float8.step_s,
        _scaled(float8, factors),
        measured_bf16_step_s,
        measured_float8_step_s,
    )


__all__ = ["StepCalibration", "TERM_PART", "calibrate_to_trace"]
