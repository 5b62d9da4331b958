"""`--recipe auto`: the recipe with the highest predicted step speedup (else the lowest predicted Linear
time), compared within one provenance.

Each recipe the profile covers and the framework supports (`candidates`) is decided as the advice would decide
it (`fp8advisor.advice.linears`, the expert Linears as their group). Where the caller can predict the training
step (`step_speedup`, built from the step model by `fp8advisor.advice.step_comparison.step_speedup_of`), the
recipes are ranked by the predicted step speedup of their decisions, the figure users compare; else by the
predicted Linear time (the same order whenever the recipes share every other term of the step). Figures of
different provenance cannot be ranked against each other, so only the recipes whose figures have the strongest
provenance are compared (with a profile chosen by the evidence every recipe is predicted from the same
evidence base, so all are), and the others are named in the reason. The reason ends with the numerics trade-
off that decides between tensorwise and rowwise beyond speed (`NUMERICS`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fp8advisor.advice.experts import ExpertPredictor, decide_recipe
from fp8advisor.advice.linears import Predictor
from fp8advisor.advice.records import RecipeOption
from fp8advisor.inspect.records import ModelLayers
from fp8advisor.predict.figures import PROVENANCE_RANK, weakest_provenance
from fp8advisor.recipes import ALL_RECIPES, Recipe

#: `step_speedup(recipe, decided layers, decided expert groups)` -> the step speedup over bf16.
StepSpeedup = Callable[[Recipe, Sequence, Sequence], float]

#: What speed does not say: torchao's float8 README describes rowwise as the recipe with better accuracy
#: than tensorwise (one scale per row of each operand, so one outlier does not flatten a whole tensor), which
#: is why large published runs chose it at a lower speedup.
NUMERICS = (
    "numerics: rowwise scales each row on its own (torchao: better accuracy than tensorwise, its one "
    "scale per tensor), what large-scale runs choose for stability at some cost in speed"
)


def _option(
    model_layers: ModelLayers,
    recipe: Recipe,
    predictor: Predictor,
    min_speedup: float,
    tensor_parallel: int,
    expert_predictor: ExpertPredictor | None,
    expert_parallel: int,
    step_speedup: StepSpeedup | None,
) -> RecipeOption | None:
    """`recipe` decided as the advice would decide it, with its predicted Linear time (and step speedup)."""
    decided, groups = decide_recipe(  # expert Linears convert as their group, routers never
        model_layers,
        recipe,
        min_speedup,
        predictor,
        expert_predictor,
        tensor_parallel=tensor_parallel,
        expert_parallel=expert_parallel,
    )
    timed = [layer for layer in decided if layer.counts_in_linear_time]
    if not timed:
        return None
    total = sum(layer.float8_time_s if layer.convert else layer.bf16_time_s for layer in timed)
    bf16_total = sum(layer.bf16_time_s for layer in timed)
    provenance = weakest_provenance({layer.provenance for layer in timed if layer.provenance})
    converted = sum(1 for layer in decided if layer.convert)
    step = step_speedup(recipe, decided, groups) if step_speedup is not None else None
    return RecipeOption(recipe, provenance, total, bf16_total / total, converted, step)


def choose_recipe(
    model_layers: ModelLayers,
    profile_choice,
    predictor: Predictor,
    min_speedup: float,
    tensor_parallel: int,
    candidates: Sequence[Recipe] = ALL_RECIPES,
    expert_predictor: ExpertPredictor | None = None,
    expert_parallel: int = 1,
    step_speedup: StepSpeedup | None = None,
) -> tuple[Recipe, str, tuple[RecipeOption, ...]]:
    """`--recipe auto`: the recipe with the highest predicted step speedup (with `step_speedup`), else the
    lowest predicted Linear time, compared within one provenance; (recipe, reason, the options weighed)."""
    options = []
    for recipe in candidates:
        if hasattr(profile_choice, "covers") and not profile_choice.covers(recipe):
            continue
        option = _option(
            model_layers,
            recipe,
            predictor,
            min_speedup,
            tensor_parallel,
            expert_predictor,
            expert_parallel,
            step_speedup,
        )
        if option is not None:
            options.append(option)
    if not options:
        fallback = Recipe.ROWWISE if Recipe.ROWWISE in candidates else candidates[0]
        return fallback, f"no recipe could be predicted for this model: {fallback.value} by default", ()
    return _ranked(options)


def _ranked(options: list[RecipeOption]) -> tuple[Recipe, str, tuple[RecipeOption, ...]]:
    best_rank = min(PROVENANCE_RANK.get(o.provenance, 9) for o in options)
    comparable = [o for o in options if PROVENANCE_RANK.get(o.provenance, 9) == best_rank]
    others = [o for o in options if o not in comparable]
    by_step = all(o.predicted_step_speedup is not None for o in comparable)
    if by_step:
        chosen = max(comparable, key=lambda o: (o.predicted_step_speedup, -ALL_RECIPES.index(o.recipe)))
        figures = ", ".join(f"{o.recipe.value} {o.predicted_step_speedup:.3f}x" for o in comparable)
        measure = "highest predicted step speedup"
    else:
        chosen = min(comparable, key=lambda o: (o.predicted_linear_time_s, ALL_RECIPES.index(o.recipe)))
        figures = ", ".join(f"{o.recipe.value} {o.predicted_speedup:.3f}x" for o in comparable)
        measure = "lowest predicted Linear time"
    if len(comparable) > 1:
        reason = f"{measure} among {figures} ({chosen.provenance} figures for each)"
    else:
        reason = f"the only recipe with {chosen.provenance} figures ({figures})"
    if others:

        def figure(o: RecipeOption) -> float:  # the measure the comparable ones were ranked by
            step = o.predicted_step_speedup
            return step if by_step and step is not None else o.predicted_speedup

        skipped = ", ".join(f"{o.recipe.value} ({o.provenance}: {figure(o):.3f}x)" for o in others)
        reason += (
            f"; not compared with {skipped}: figures of different provenance cannot be ranked against each "
            f"other, so the recipe with the stronger evidence ({chosen.provenance}) wins"
        )
    recipes = {o.recipe for o in options}
    if Recipe.TENSORWISE in recipes and recipes & {Recipe.ROWWISE, Recipe.ROWWISE_WITH_GW_HP}:
        reason += f"; {NUMERICS}"
    return chosen.recipe, reason, tuple(options)


__all__ = [
    "NUMERICS",
    "StepSpeedup",
    "choose_recipe",
]
