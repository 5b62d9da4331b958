"""Stage 1, inspect: a model, read on the meta device, as the GEMMs it really multiplies.

In: a TARGET string (`model.py[:factory(args)]`, a Hugging Face config or Hub id, `torchtitan:MODEL/FLAVOR`)
and the batch x seq of a training step. Out: `ModelLayers`, every GEMM-bearing layer with its (M, K, N) and
the op census of the forward (what the step model prices besides the Linear layers).

- `target`: TARGET -> a built model (`load_model`), through `spec` (the records), `sandbox` (the user's code
  run on the meta device, its exits contained), `inputs` (example inputs), `hf` / `hub` / `titan` (the loaders
  of Hugging Face configs, Hub ids and torchtitan's registry).
- `layers`: one traced forward -> `ModelLayers` (`inspect_model`): `forward` runs it under the GEMM
  `recorder`, `rows` makes a `GemmLayer` of each layer, `experts` finds the routed experts, `model_config` the
  longest sequence; `records` holds the results. `census`: the op census of that forward.
- `folding`: names that differ only in their block indices, folded into one table row.
- `blocks`: the model's distinct blocks and their inputs, for in-context measurement (`bench --model`).
"""

from fp8advisor._lazy import lazy_exports

_EXPORTS = {
    "load_model": "fp8advisor.inspect.target",
    "parse_target": "fp8advisor.inspect.target",
    "TargetSpec": "fp8advisor.inspect.spec",
    "LoadedModel": "fp8advisor.inspect.spec",
    "inspect_model": "fp8advisor.inspect.layers",
    "inspect_loaded": "fp8advisor.inspect.layers",
    "ModelLayers": "fp8advisor.inspect.records",
    "GemmLayer": "fp8advisor.inspect.records",
    "ExpertGroup": "fp8advisor.inspect.records",
    "OpCensus": "fp8advisor.inspect.census",
    "discover_blocks": "fp8advisor.inspect.blocks",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
