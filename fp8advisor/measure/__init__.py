"""Stage 3, measure: time float8 against bf16 on this GPU (or emulated on the CPU), and keep every point.

In: a grid of shapes and recipes (`make_grid`; grouped expert GEMMs: `grouped.make_grouped_grid`) or a model's
own blocks (`bench --model`). Out: JSON Lines run files in a results directory (`results`), one record per
measured point, written so that a kill loses at most the point in flight and a rerun resumes.

- `workload`: what a grid sweep measures, whatever the workload (points, grids, `Workload`); `linear`:
  the Linear workload (torchao's LayerNorm -> Linear -> Sigmoid, fwd + bwd, compiled) and its grids;
  `grouped`: the grouped expert GEMMs of MoE models and theirs; `sweep`: the sweep runner (`run_sweep`) and
  the one results line every grid point leaves; `protocol`: how one configuration is measured, whatever the
  workload (`BenchSettings`, `time_step`).
- `block_bench`: a model's blocks measured in context, `block_sweep` the sweep over them, with `block_search`
  choosing their float8 sets.
- `schedule` (order, shards, time budget), `precompile` (compiling in worker processes), `timers` (the GPU and
  CPU timers and their honesty checks), `launch` (one shard per GPU through torchrun: `bench --gpus`, the
  worker's place from torchrun's variables, the locks that let shards share a directory).
- The store: `results` (the files' format, reading them back, resume), `result_records` (the checks of each
  record read), `run_writer` (writing them),
  `speedups` (float8 over bf16, Linear or grouped), `heatmaps` (tables and PNG of a run).
"""

from fp8advisor._lazy import lazy_exports

_EXPORTS = {
    "BenchSettings": "fp8advisor.measure.protocol",
    "make_grid": "fp8advisor.measure.linear",
    "run_sweep": "fp8advisor.measure.sweep",
    "make_grouped_grid": "fp8advisor.measure.grouped",
    "run_block_sweep": "fp8advisor.measure.block_sweep",
    "load_results": "fp8advisor.measure.results",
    "pair_with_baseline": "fp8advisor.measure.speedups",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
