"""Stage 4, predict: what float8 buys at a given shape on a given GPU, from a profile.

In: measured results (`fp8advisor.measure`) or a published speedup table. Out: a `Profile` (versioned JSON,
with its own leave-one-out error) and, for any (M, K, N) or grouped (E, M per expert, K, N), a predicted
speedup with its provenance (measured, published, modelled) and how it was reached (interpolated,
extrapolated).

- `roofline`: torchao's roofline model of a float8 Linear and the GPU catalogue it needs.
- `profile`: the profile document, the shipped and user profiles, and which one a GPU gets (`select_profile`).
- `fit`: results -> profile (`fit_profile`), with leave-one-out and break-even thresholds.
- `grid`: interpolation in log space over measured grids (Linear and grouped); `speedup`: the predictions
  (`predict_speedup`, `predicted_times_s`, `predict_expert_group`).
"""

from fp8advisor._lazy import lazy_exports

_EXPORTS = {
    "Profile": "fp8advisor.predict.profile",
    "ProfileChoice": "fp8advisor.predict.profile",
    "load_profile": "fp8advisor.predict.profile",
    "select_profile": "fp8advisor.predict.profile",
    "list_profiles": "fp8advisor.predict.profile",
    "fit_profile": "fp8advisor.predict.fit",
    "load_measurements": "fp8advisor.predict.fit",
    "predict_speedup": "fp8advisor.predict.speedup",
    "predicted_times_s": "fp8advisor.predict.speedup",
    "predict_expert_group": "fp8advisor.predict.speedup",
    "roofline_speedup": "fp8advisor.predict.roofline",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
