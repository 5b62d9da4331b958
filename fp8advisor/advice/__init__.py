"""Stage 5, advice: which layers to train in float8, with which recipe, and what the training step gains.

In: a model's layers (`fp8advisor.inspect`), a profile choice (`fp8advisor.predict`), and optionally
in-context results (`bench --model`). Out: an `Advice` (each Linear and expert group decided, with its
predicted times and the filter list that says it) and a `StepPrediction` of the whole training step.

- `decide`: the per-layer and per-expert decisions and the recipe choice (`advise`).
- `in_context`: blocks measured in context decide their own layers; `seeds`: where that measurement starts.
- `step`: the step-time model (`predict_step`, `step_report`); `published`: the published end-to-end results
  it is checked against.
"""

from fp8advisor._lazy import lazy_exports

_EXPORTS = {
    "Advice": "fp8advisor.advice.decide",
    "LayerAdvice": "fp8advisor.advice.decide",
    "advise": "fp8advisor.advice.decide",
    "default_predictor": "fp8advisor.advice.decide",
    "predict_step": "fp8advisor.advice.step",
    "step_report": "fp8advisor.advice.step",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
