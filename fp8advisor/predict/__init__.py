"""Stage 4, predict: what float8 buys at a given shape on a given GPU, from a profile.

In: measured results (`fp8advisor.measure`) or a published speedup table. Out: a `Profile` (versioned JSON,
with its own leave-one-out error) and, for any (M, K, N) or grouped (E, M per expert, K, N), a predicted
speedup with its provenance (measured, published, modelled) and how it was reached (interpolated,
extrapolated).

- `roofline`: torchao's roofline model of a float8 Linear (the GPU catalogue it needs is `fp8advisor.gpus`).
- `figures`: points, provenance and fit error, the figures a profile holds; `profile`: the profile document
  and its JSON, `profile_schema` the rules of its every field; `grouped_profile`: its grouped expert GEMM
  section; `profile_files`: the shipped and user profiles on disk; `selection`: which one a GPU gets
  (`select_profile`).
- `measurements`: bench results and speedup tables read for fitting; `fit`: results -> profile
  (`fit_profile`), with its leave-one-out error (`fit_error`) and break-even thresholds (`thresholds`).
- `interpolation`: interpolation in log space over measured grids (Linear and grouped); `speedup`: the
  predictions (`predict_speedup`, `predicted_times_s`, `predict_expert_group`), each with its interval where
  the profile states one.
- `evidence`: the evidence base (`data/evidence`: published float8 measurements, one file per source);
  `fitted`: torchao's roofline with three factors fitted to it; `loso`: the candidate predictors,
  leave-one-source-out, the selection and the intervals behind the shipped `<gpu>-evidence` profiles.
"""

from fp8advisor._lazy import lazy_exports

_EXPORTS = {
    "Profile": "fp8advisor.predict.profile",
    "ProfileChoice": "fp8advisor.predict.selection",
    "load_profile": "fp8advisor.predict.profile_files",
    "select_profile": "fp8advisor.predict.selection",
    "list_profiles": "fp8advisor.predict.profile_files",
    "fit_profile": "fp8advisor.predict.fit",
    "load_measurements": "fp8advisor.predict.measurements",
    "predict_speedup": "fp8advisor.predict.speedup",
    "predicted_times_s": "fp8advisor.predict.speedup",
    "predict_expert_group": "fp8advisor.predict.speedup",
    "roofline_speedup": "fp8advisor.predict.roofline",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
