"""The warnings and notes that come with the advice: what could make it wrong, or not run.

About the set-up (a GPU without FP8 tensor cores, token counts not divisible by 16, tensor parallelism and the
layers it would split unevenly, named), about
the decision (nothing worth converting, a filter list that cannot be exact) and about the figures behind it
(roofline figures, extrapolation, a profile whose held-out error exceeds `LARGE_PROFILE_ERROR`); and about the
routed experts (unknown top_k, M per expert below 16, modelled figures, `--tp` and `--ep`).
"""

from __future__ import annotations

from fp8advisor.advice.linears import unevenly_split_layers
from fp8advisor.advice.records import Advice
from fp8advisor.device import MIN_FP8_CAPABILITY
from fp8advisor.inspect.records import ExpertForm, ModelLayers
from fp8advisor.recipes import dims_divisible_by_16

#: A profile whose held-out median error exceeds this gets a warning with every advice made from it.
LARGE_PROFILE_ERROR = 0.10


def _detect_capability() -> tuple[int, int] | None:
    """The compute capability of CUDA device 0; None without a usable GPU (tests patch it here)."""
    try:
        import torch

        if torch.cuda.is_available():
            return tuple(torch.cuda.get_device_capability(0))  # type: ignore[return-value]
    except Exception:  # no usable CUDA: advice from profiles still works
        return None
    return None


def advice_warnings(advice: Advice, model_layers: ModelLayers, device_capability) -> list[str]:
    """The warnings about the set-up, the decision and its figures, in that order (`device_capability`: as
    `advise` takes it)."""
    return [
        *_setup_warnings(model_layers, advice.tensor_parallel, device_capability),
        *_decision_warnings(advice),
        *_figure_warnings(advice),
    ]


def _setup_warnings(model_layers: ModelLayers, tensor_parallel: int, device_capability) -> list[str]:
    """The sequence length, a GPU without FP8 tensor cores, token counts not divisible by 16, and --tp."""
    warnings = [model_layers.seq_warning] if model_layers.seq_warning else []
    capability = _detect_capability() if device_capability == "detect" else device_capability
    if capability is not None and tuple(capability) < MIN_FP8_CAPABILITY:
        warnings.append(
            f"this GPU (compute capability {capability[0]}.{capability[1]}) has no FP8 tensor cores "
            "(sm_89 or newer: Ada, Hopper, Blackwell): float8 training will not run here; the advice is for "
            "the profile's GPU"
        )
    # every called Linear float8 could swap: a layer kept in bf16 only because of M needs the same fix
    odd = sorted(
        {
            m
            for layer in model_layers.layers
            if layer.is_linear and dims_divisible_by_16(layer.K, layer.N)
            for m in layer.M_per_call
            if m % 16
        }
    )
    if odd:
        warnings.append(
            f"{len(odd)} token count(s) per call not divisible by 16 (M = {', '.join(map(str, odd[:5]))}): "
            "float8's "
            "grad_weight GEMM multiplies over the tokens, which must be a multiple of 16; pad sequences to a "
            "multiple of 16 (NeMo AutoModel examples: dataloader collate_fn pad_seq_len_divisible: 16) "
            "or set "
            "Float8LinearConfig(pad_inner_dim=True)"
        )
    if tensor_parallel > 1:
        warnings.append(
            f"tensor parallelism {tensor_parallel}: each GPU multiplies the 1/{tensor_parallel} slice of K "
            "or N that the framework's plan gives it (torchtitan, Hugging Face and Megatron names; the "
            "slower of the two for a layer no plan names). Rowwise recipes run TP's collectives in bf16 "
            "and cast what arrives from them unfused; smaller shards gain less (pytorch/torchtitan#1207): "
            "the step prediction prices both"
        )
    uneven = unevenly_split_layers(model_layers.layers, tensor_parallel)
    if uneven:
        named = ", ".join(f"{layer.fqn} {layer.K}x{layer.N}" for layer in uneven[:3])
        warnings.append(
            f"--tp {tensor_parallel} does not divide K or N of {len(uneven)} layer(s) ({named}"
            f"{', ...' if len(uneven) > 3 else ''}): tensor parallelism would split them unevenly "
            "(Megatron-LM refuses such a degree; DTensor pads the slices). They are predicted at their "
            "widest slice and kept in bf16 (float8 needs every GPU's slice a multiple of 16): choose a --tp "
            "that divides the layers' widths"
        )
    return warnings


def _decision_warnings(advice: Advice) -> list[str]:
    """Nothing worth converting, or no filter_fqns list that can be exact."""
    recipe, min_speedup, filter_list = advice.recipe, advice.min_speedup, advice.filter_list
    warnings = []
    if not any(layer.convert for layer in advice.layers):
        timed = [layer for layer in advice.layers if layer.counts_in_linear_time]
        best = max(timed, key=lambda layer: layer.predicted_speedup or 0, default=None)
        detail = f" (best: {best.fqn} at {best.predicted_speedup:.2f}x)" if best else ""
        others = [
            o
            for o in advice.recipe_options
            if o.recipe is not recipe and o.converted and o.predicted_speedup > 1
        ]
        hint = "".join(
            f"; {o.provenance} figures predict {o.recipe.value} at {o.predicted_speedup:.2f}x: measure it "
            "(fp8advisor bench) before relying on it"
            for o in others
        )
        warnings.append(
            f"nothing worth converting: no layer is predicted to reach {min_speedup:.2f}x with {recipe.value}"
            f"{detail}; train in bf16, or a larger batch x seq{hint}"
        )
    if not filter_list.exact:
        exact = advice.strategy("advice")
        via = advice.strategy("advice_filter")
        names = "; ".join(c.describe() for c in filter_list.conflicts)
        cost = ""
        if exact.predicted_speedup and via.predicted_speedup:
            cost = f": predicted {via.predicted_speedup:.3f}x instead of {exact.predicted_speedup:.3f}x"
        warnings.append(
            f"no filter_fqns list can be exact: {names}. torchtitan / NeMo AutoModel keep "
            f"{', '.join(sorted(filter_list.demoted))} in bf16 too (the safe choice){cost}; the torchao and "
            "accelerate configs convert exactly the advised set"
        )
    return warnings


def _figure_warnings(advice: Advice) -> list[str]:
    """Figures from the roofline model, extrapolated ones, and a profile with a large held-out error."""
    decided, recipe, min_speedup = advice.layers, advice.recipe, advice.min_speedup
    warnings = []
    converted = [layer for layer in decided if layer.convert]
    modelled = [layer for layer in decided if layer.counts_in_linear_time and layer.provenance == "modelled"]
    if modelled:
        warnings.append(
            f"{len(modelled)} layer figure(s) for {recipe.value} come from the roofline model, not a "
            "measurement: measure this GPU with `fp8advisor bench` and `fit` before relying on them"
        )
    extrapolated = sum(1 for layer in converted if layer.how == "extrapolated")
    if extrapolated:
        warnings.append(
            f"{extrapolated} converted layer(s) are predicted outside the profile's measured grid "
            "(extrapolated)"
        )
    error = advice.prediction_error
    if error is not None and error.median_relative_error > LARGE_PROFILE_ERROR:
        warnings.append(
            f"the profile's held-out median error for {recipe.value} is "
            f"{error.median_relative_error:.1%}: layers predicted near {min_speedup:.2f}x may be misjudged; "
            "measure this GPU with `fp8advisor bench` and `fp8advisor fit`"
        )
    return warnings


def expert_warnings_and_notes(advice: Advice, model_layers: ModelLayers) -> tuple[list[str], list[str]]:
    """(warnings, notes) about the routed experts."""
    from fp8advisor.predict.mx_grouped import grouped_recipe_for

    experts, recipe = advice.experts, advice.recipe
    tensor_parallel, expert_parallel = advice.tensor_parallel, advice.expert_parallel
    warnings: list[str] = []
    notes: list[str] = []
    if not experts:
        if expert_parallel > 1:
            notes.append(f"--ep {expert_parallel} has no effect: the model has no routed experts")
        return warnings, notes
    unknown = [group.fqn for group in model_layers.expert_groups if group.top_k is None]
    if unknown:
        warnings.append(
            f"top_k unknown for {len(unknown)} expert group(s) (e.g. {unknown[0]}): the model does not show "
            "it, so M per expert is the traced rows / E, or unknown"
        )
    small = sorted(
        {round(e.M_per_expert, 1) for e in experts if e.M_per_expert is not None and e.M_per_expert < 16}
    )
    if small:
        warnings.append(
            f"M per expert below 16 ({', '.join(map(str, small[:3]))}): each expert multiplies fewer rows "
            "than one float8 token group (padded to 16); its GEMMs are memory-bound and gain little: raise "
            "batch x seq"
        )
    modelled = [e for e in experts if e.predicted_speedup is not None and e.provenance == "modelled"]
    if modelled:
        warnings.append(
            f"{len(modelled)} expert group figure(s) come from the grouped roofline model, not a "
            "measurement: measure this GPU with `fp8advisor bench --grouped` and `fit` before relying on them"
        )
    grouped_convert = [e for e in experts if e.convert and e.form == ExpertForm.GROUPED.value]
    if grouped_convert and recipe is not grouped_recipe_for(recipe):
        notes.append(
            f"routed experts run {grouped_recipe_for(recipe).value}: torchao's float8 grouped GEMMs are "
            f"rowwise only, whatever the Linear recipe ({recipe.value}) (MXFP8 Linears pair with MXFP8 "
            "grouped experts)"
        )
    if tensor_parallel > 1:
        notes.append(
            f"--tp {tensor_parallel}: routed experts are predicted with every expert's full K x N; "
            "tensor-parallel expert shards are not modelled"
        )
    if expert_parallel > 1:
        notes.append(
            f"--ep {expert_parallel}: routed experts are predicted per GPU, E / {expert_parallel} experts "
            f"each multiplying tokens x top_k x {expert_parallel} / E rows (balanced routing). The "
            "all-to-all dispatch and combine are not modelled: torchtitan 0.3's float8 MoE path sends the "
            "bf16 tokens (TorchAOTokenDispatcher; the float8 casts run inside the grouped GEMMs), the same "
            "bytes as bf16"
        )
        if any(e.form == ExpertForm.LINEAR_LIST.value for e in experts):
            notes.append(
                f"--ep {expert_parallel}: a ModuleList of expert Linears is decided per GPU, but its Linears "
                "keep their one-GPU M in the Linear table, the Linear-time speedups and the step"
            )
    return warnings, notes


__all__ = ["LARGE_PROFILE_ERROR", "advice_warnings", "expert_warnings_and_notes"]
