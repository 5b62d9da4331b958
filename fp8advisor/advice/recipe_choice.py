"""`--recipe auto`: the recipe with the lowest predicted Linear time, compared within one provenance.

Each recipe the profile covers is decided as the advice would decide it (`fp8advisor.advice.linears`, the
expert Linears as their group); figures of different provenance cannot be ranked against each other, so only
the recipes whose figures have the strongest provenance are compared, and the others are named in the reason.
"""

from __future__ import annotations

from collections.abc import Sequence

from fp8advisor.advice.experts import ExpertPredictor, decide_experts
from fp8advisor.advice.linears import Predictor, decide_layers
from fp8advisor.advice.records import RecipeOption
from fp8advisor.inspect.records import ModelLayers
from fp8advisor.predict.figures import PROVENANCE_RANK, weakest_provenance
from fp8advisor.recipes import ALL_RECIPES, Recipe


def choose_recipe(
    model_layers: ModelLayers,
    profile_choice,
    predictor: Predictor,
    min_speedup: float,
    tensor_parallel: int,
    candidates: Sequence[Recipe] = ALL_RECIPES,
    expert_predictor: ExpertPredictor | None = None,
    expert_parallel: int = 1,
) -> tuple[Recipe, str, tuple[RecipeOption, ...]]:
    """`--recipe auto`: the recipe with the lowest predicted Linear time, compared within one provenance."""
    options = []
    for recipe in candidates:
        if hasattr(profile_choice, "covers") and not profile_choice.covers(recipe):
            continue
        decided = decide_layers(model_layers.layers, recipe, predictor, min_speedup, tensor_parallel)
        if model_layers.expert_groups:  # expert Linears convert as their group, routers never
            decided, _ = decide_experts(
                model_layers,
                decided,
                recipe,
                min_speedup,
                predictor,
                expert_predictor,
                tensor_parallel=tensor_parallel,
                expert_parallel=expert_parallel,
            )
        timed = [layer for layer in decided if layer.counts_in_linear_time]
        if not timed:
            continue
        total = sum(layer.float8_time_s if layer.convert else layer.bf16_time_s for layer in timed)
        bf16_total = sum(layer.bf16_time_s for layer in timed)
        provenance = weakest_provenance({layer.provenance for layer in timed if layer.provenance})
        converted = sum(1 for layer in decided if layer.convert)
        options.append(RecipeOption(recipe, provenance, total, bf16_total / total, converted))
    if not options:
        fallback = Recipe.ROWWISE if Recipe.ROWWISE in candidates else candidates[0]
        return fallback, f"no recipe could be predicted for this model: {fallback.value} by default", ()
    best_rank = min(PROVENANCE_RANK.get(o.provenance, 9) for o in options)
    comparable = [o for o in options if PROVENANCE_RANK.get(o.provenance, 9) == best_rank]
    others = [o for o in options if o not in comparable]
    chosen = min(comparable, key=lambda o: (o.predicted_linear_time_s, ALL_RECIPES.index(o.recipe)))
    figures = ", ".join(f"{o.recipe.value} {o.predicted_speedup:.3f}x" for o in comparable)
    if len(comparable) > 1:
        reason = f"lowest predicted Linear time among {figures} ({chosen.provenance} figures for each)"
    else:
        reason = f"the only recipe with {chosen.provenance} figures ({figures})"
    if others:
        skipped = ", ".join(f"{o.recipe.value} ({o.provenance}: {o.predicted_speedup:.3f}x)" for o in others)
        reason += (
            f"; not compared with {skipped}: figures of different provenance cannot be ranked against each "
            f"other, so the recipe with the stronger evidence ({chosen.provenance}) wins"
        )
    return chosen.recipe, reason, tuple(options)


__all__ = [
    "choose_recipe",
]
