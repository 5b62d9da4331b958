"""The megatron config: Megatron-Core's `--te-precision-config-file` YAML, with how to use it in its comments.

  megatron          Megatron-Core + Transformer Engine: the `--te-precision-config-file` YAML of core_v0.16+
                    (ordered glob matchers over Megatron's module names, `fp8advisor.emit.megatron`), with the
                    flags to pass and, for older versions, the positional `--first-last-layers-bf16` flags
                    and what they lose, in its comments. tensorwise only (TE has no rowwise recipe).

The plan (which Megatron module runs in float8, the fused GEMMs decided as one) and the facts about Megatron
it rests on are in `fp8advisor.emit.megatron`; this module writes the file and says what it cannot carry.
"""

from __future__ import annotations

import yaml

from fp8advisor.advice.linears import Predictor
from fp8advisor.advice.records import Advice
from fp8advisor.emit import megatron
from fp8advisor.emit.experts import expert_notes
from fp8advisor.emit.header import header_lines
from fp8advisor.emit.syntax import comment, wrapped
from fp8advisor.frameworks.formats import ConfigFormat
from fp8advisor.predict.figures import weakest_provenance
from fp8advisor.recipes import Recipe
from fp8advisor.request import SuggestRequest

#: Which Linear of the traced model each Megatron module name stands for.
_MODEL_PARTS = (
    "linear_qkv = q, k, v (torchtitan attention.wq/wk/wv or qkv_linear.wqkv; Hugging Face "
    "self_attn.q/k/v_proj); "
    "linear_proj = o (wo, o_proj); linear_fc1 = gate + up (feed_forward.w1 + w3, mlp.gate_proj + up_proj); "
    "linear_fc2 = down (w2, down_proj); output_layer = the head (output, lm_head)"
)


def _low(recipe: Recipe) -> str:
    """The low precision the file trains in, in words: MXFP8 or float8."""
    return "MXFP8" if recipe.is_mx else "float8"


def megatron_what(plan: megatron.MegatronPlan, recipe: Recipe = Recipe.TENSORWISE) -> str:
    """The header line of the megatron file: how many Transformer Engine modules it puts in float8 (or
    MXFP8, for an MX recipe)."""
    return (
        f"{len(plan.float8_names)} of the {len(plan.modules)} Transformer Engine linear modules in "
        f"{_low(recipe)}: Megatron's first-match glob rule, applied to every one of their names, selects "
        "exactly those"
    )


def render_megatron(advice: Advice, request: SuggestRequest, predictor: Predictor | None) -> str:
    """The megatron file: the header, the notes on how to use it and what it loses, the precision config."""
    plan = megatron.plan(advice, predictor)
    document = megatron.precision_config(plan, advice.recipe)
    megatron.check_selects_exactly(plan, document)  # Megatron's first-match rule, on every TE module name
    header = header_lines(advice, request, ConfigFormat.MEGATRON, what=megatron_what(plan, advice.recipe))
    notes = [
        *_usage(plan, advice.recipe),
        *_speed_figures(advice),
        *wrapped(f"Module names: Megatron's GPTModel ({megatron.MEGATRON_SOURCE}): {_MODEL_PARTS}."),
        *_fused_gemms(plan),
        *wrapped(
            "Matchers: the first enabled matcher whose glob (fnmatch) matches a module's path chooses its "
            "config; default_bf16 keeps every other Transformer Engine module in bf16."
        ),
        *_what_megatron_changes(plan, document, advice.recipe),
        *_positional(plan, advice.recipe),
        *expert_notes(advice, ConfigFormat.MEGATRON),
    ]
    body = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=1000)
    return comment(header) + comment(notes) + body


def _usage(plan: megatron.MegatronPlan, recipe: Recipe) -> list[str]:
    """How to train with the file: Megatron-Core's flags, and NeMo's and Megatron-Bridge's fields; with
    nothing in float8, how to leave FP8 off in each of them (never a switch that turns it on: Megatron-Core
    0.16's TransformerConfig.fp8, the field of --fp8-format, defaults to None, FP8 off)."""
    if not plan.float8_names:
        return [
            f"Nothing is in {_low(recipe)}: train without --fp8-format (this file keeps every TE module "
            "in bf16).",
            *wrapped(
                "(NeMo 2 and Megatron-Bridge: leave the TransformerConfig field fp8 unset (None) and pass no "
                "quant_recipe. NeMo 1 / NeMo-Aligner YAML: fp8: false.)"
            ),
        ]
    te_recipe, te_format = megatron.te_recipe(recipe), megatron.te_format(recipe)
    usage = [
        "Megatron-Core with Transformer Engine, core_v0.16 or later: train with",
        f"  --fp8-format {te_format} --fp8-recipe {te_recipe} --te-precision-config-file <this file>",
    ]
    nemo1 = "fp8_hybrid: true" if te_format == "hybrid" else "fp8_e4m3: true"
    return usage + wrapped(
        f"(NeMo 2 and Megatron-Bridge: the same TransformerConfig fields, fp8='{te_format}', "
        f"fp8_recipe='{te_recipe}', quant_recipe=megatron.core.quantization.utils."
        "load_quantization_recipe(<this file>). NeMo 1 / NeMo-Aligner YAML: transformer_engine: true, "
        f"fp8: true, {nemo1}, mcore_customization_config: {{fp8_recipe: {te_recipe}}}; it "
        "cannot pass this file, so only the positional flags below, under mcore_customization_config.)"
    )


def _speed_figures(advice: Advice) -> list[str]:
    """Where the speed figures come from: torchao's kernels, not Transformer Engine's."""
    provenance = weakest_provenance({layer.provenance for layer in advice.layers if layer.provenance})
    mapping = (
        "torchao mxfp8_rceil maps to TE's mxfp8 (MXFP8BlockScaling: 1x32 E8M0 block scales, e4m3 for every "
        "operand, TE's 'e4m3'), whose kernels and casts are TE's own; torchao's MXFP8 with a bf16 "
        "grad_weight has no TE equivalent."
        if advice.recipe.is_mx
        else "torchao tensorwise maps to TE's tensorwise (Float8CurrentScaling: per-tensor current scaling; "
        "e4m3 forward, e5m2 gradients, TE's 'hybrid'), whose kernels and casts are TE's own; torchao "
        "rowwise has no TE equivalent."
    )
    low = _low(advice.recipe)
    return wrapped(
        f"Speed figures: torchao's {low} {advice.recipe.value} figures ({provenance}"
        + (": a roofline model" if provenance == "modelled" else "")
        + f", profile {advice.profile_name}), not measurements of Transformer Engine's kernels. "
        "Recipes differ: " + mapping + " Measure a step in Megatron before relying on the speedup."
    )


def _disagreeing(plan: megatron.MegatronPlan) -> list[megatron.MegatronModule]:
    """The fused modules whose decision differs from one of their parts' own advice."""
    return [m for m in plan.modules if m.fused and any(part.convert != m.float8 for part in m.parts)]


def _fused_gemms(plan: megatron.MegatronPlan) -> list[str]:
    """How linear_qkv and linear_fc1 are decided, and which differ from their parts' advice."""
    fused = [m for m in plan.modules if m.fused]
    disagree = _disagreeing(plan)
    return wrapped(
        "Fused GEMMs: linear_qkv and linear_fc1 are one GEMM each in Megatron, decided as one by "
        f"{plan.fused_rule}; "
        + (
            f"{len(disagree)} of the {len(fused)} differ from their parts' own advice: "
            f"{megatron.folded(disagree)}."
            if disagree
            else f"all {len(fused)} agree with their parts' own advice."
        )
    )


def _what_megatron_changes(plan: megatron.MegatronPlan, document: dict, recipe: Recipe) -> list[str]:
    """Where Megatron departs from the advice: fused parts measured apart, the head, per-stage numbers."""
    notes = []
    measured = [m for m in _disagreeing(plan) if any(part.decided_by != "profile" for part in m.parts)]
    if measured:
        notes += wrapped(
            f"Decided in context: the parts of {megatron.folded(measured)} were measured as separate GEMMs; "
            "Megatron's fused GEMM is decided by the rule above instead."
        )
    head = plan.head
    if head is not None:
        low = _low(recipe)
        lost = f"; the advice converts {head.parts[0].fqn} to {low}: that is lost" if head.float8 else ""
        notes += wrapped(
            "output_layer (the head) is Megatron's own ColumnParallelLinear, not a Transformer Engine "
            f"module: always bf16{lost}."
        )
    if megatron.names_layer_by_layer(document):
        notes += wrapped(
            "Layer-by-layer patterns: Megatron numbers decoder.layers.N within each pipeline stage, so "
            "they are right only with --pipeline-model-parallel-size 1."
        )
    return notes


def _positional(plan: megatron.MegatronPlan, recipe: Recipe) -> list[str]:
    """The predicted speedups of the file and of the positional flags, and those flags for older versions."""
    positional = megatron.positional_flags(plan)
    here = plan.predicted_speedup(plan.float8_names)
    there = positional.predicted_speedup
    return [
        *wrapped(
            "Predicted Linear-time speedup over bf16 (torchao figures): this file "
            f"{_times(here)}, the positional flags below {_times(there)}."
        ),
        "Before core_v0.16 (no precision config file): whole layers at each end in bf16 only:",
        f"  {positional.arguments(recipe)}",
        *wrapped(
            f"  lost: runs in {_low(recipe)} against the advice: "
            f"{megatron.folded(positional.converts_against_advice)}; "
            f"keeps in bf16 against the advice: {megatron.folded(positional.gives_up)}.",
            indent="    ",
        ),
    ]


def _times(speedup: float | None) -> str:
    return "-" if speedup is None else f"{speedup:.3f}x"


__all__ = ["megatron_what", "render_megatron"]
