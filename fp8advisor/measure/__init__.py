"""Stage 3, measure: time float8 against bf16 on this GPU (or emulated on the CPU), and keep every point.

In: a grid of shapes and recipes (`make_grid`; grouped expert GEMMs: `grouped.make_grouped_grid`) or a model's
own blocks (`bench --model`). Out: JSON Lines run files in a results directory (`results`), one record per
measured point, written so that a kill loses at most the point in flight and a rerun resumes.

- `sweep`: the Linear workload (torchao's LayerNorm -> Linear -> Sigmoid, fwd + bwd, compiled) and the sweep
  runner (`run_sweep`) that every workload shares; `grouped`: the grouped expert GEMMs of MoE models;
  `in_context`: a model's blocks measured in context, with `block_search` choosing their float8 sets.
- `schedule` (order, shards, time budget), `precompile` (compiling in worker processes), `timers` (the GPU and
  CPU timers and their honesty checks), `results` (the store), `heatmaps` (tables and PNG of a run).
"""

from fp8advisor._lazy import lazy_exports

_EXPORTS = {
    "BenchSettings": "fp8advisor.measure.sweep",
    "make_grid": "fp8advisor.measure.sweep",
    "run_sweep": "fp8advisor.measure.sweep",
    "make_grouped_grid": "fp8advisor.measure.grouped",
    "run_block_sweep": "fp8advisor.measure.in_context",
    "load_results": "fp8advisor.measure.results",
    "pair_with_baseline": "fp8advisor.measure.results",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
