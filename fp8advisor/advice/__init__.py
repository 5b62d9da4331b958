"""Stage 5, advice: which layers to train in float8, with which recipe, and what the training step gains.

In: a model's layers (`fp8advisor.inspect`), a profile choice (`fp8advisor.predict`), and optionally
in-context results (`bench --model`). Out: an `Advice` (each Linear and expert group decided, with its
predicted times and the filter list that says it) and a `StepPrediction` of the whole training step.

- `decide`: `advise`, its steps in order; `records`: what it returns (`Advice`, `LayerAdvice`, ...).
- `recipe_choice`: `--recipe auto`; `linears`: the decision for each Linear layer; `experts`: for each group
  of routed experts; `strategies`: the strategies the summary compares (torchao's auto filter among them);
  `caveats`: the warnings and notes that come with the advice.
- `in_context`: blocks measured in context decide their own layers; `seeds`: where that measurement starts.
- `step`: the step-time model (`predict_step`), its parts in `step_terms` (the terms of the Linear layers,
  other GEMMs and experts), `step_parallel` (each GPU's share under tensor, context and pipeline
  parallelism, and the FSDP / HSDP, TP and CP traffic), `topology` (the GPU systems' links and the ring
  collectives over them), `tp_plan` (the frameworks' tensor-parallel plans) and `step_calibration` (the
  in-step efficiency of each GPU family); `step_comparison`: each strategy's step, its interval, the
  uncertain layers' stake and the advice's break-even (`step_report`); `published`: the published
  end-to-end results the step model is checked against.
- `evidence_steps`: the evidence base's whole-step figures run through the step model; `evidence_default`:
  leave-one-source-out over the whole evidence base, the choice per GPU and recipe, the evidence profiles.
"""

from fp8advisor._lazy import lazy_exports

_EXPORTS = {
    "StepConfig": "fp8advisor.advice.step",
    "StepGpu": "fp8advisor.advice.step",
    "Advice": "fp8advisor.advice.records",
    "LayerAdvice": "fp8advisor.advice.records",
    "advise": "fp8advisor.advice.decide",
    "default_predictor": "fp8advisor.advice.linears",
    "predict_step": "fp8advisor.advice.step",
    "step_report": "fp8advisor.advice.step_comparison",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
