"""`advise`: which Linear layers and groups of routed experts to train in float8, with which recipe, and the
filter list that realises the decision.

The steps, each in its own module: check the settings; choose the recipe (`--recipe auto`:
`fp8advisor.advice.recipe_choice`); decide each Linear layer from the profile (`fp8advisor.advice.linears`);
let in-context results (`bench --model`, `fp8advisor.advice.in_context`) decide the layers they measured;
decide each group of routed experts as one (`fp8advisor.advice.experts`); find the shortest exact filter list
(`fp8advisor.frameworks.shortest_filter`); compare the strategies (`fp8advisor.advice.strategies`); and add
the warnings and notes (`fp8advisor.advice.caveats`). The result is an `Advice`
(`fp8advisor.advice.records`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from fp8advisor.advice.caveats import advice_warnings, expert_warnings_and_notes
from fp8advisor.advice.experts import (
    ExpertPredictor,
    check_expert_imbalance,
    check_expert_parallel,
    decide_experts,
    default_expert_predictor,
)
from fp8advisor.advice.linears import (
    Predictor,
    decide_layers,
    default_predictor,
    split_width,
    unsplittable_layers,
)
from fp8advisor.advice.recipe_choice import StepSpeedup, choose_recipe
from fp8advisor.advice.records import Advice, ExpertAdvice, LayerAdvice, RecipeOption
from fp8advisor.advice.strategies import compare_strategies
from fp8advisor.frameworks.filters import Framework
from fp8advisor.frameworks.shortest_filter import shortest_exact_filter
from fp8advisor.inspect.records import ExpertForm, ModelLayers
from fp8advisor.recipes import ALL_RECIPES, Recipe, dims_supported, parse_recipe
from fp8advisor.request import AUTO, DEFAULT_MIN_SPEEDUP, check_degree, check_min_speedup


@dataclass(frozen=True)
class AdviceInputs:
    """The checked settings of one `advise` call, and the predictors it decides with."""

    model_layers: ModelLayers
    profile_choice: Any
    min_speedup: float
    tensor_parallel: int
    expert_imbalance: float
    expert_parallel: int
    predictor: Predictor
    expert_predictor: ExpertPredictor


def advise(
    model_layers: ModelLayers,
    profile_choice,
    recipe: Recipe | str = AUTO,
    min_speedup: float = DEFAULT_MIN_SPEEDUP,
    *,
    tensor_parallel: int = 1,
    device_capability: tuple[int, int] | None | str = "detect",
    compare_torchao_auto: bool = True,
    framework: Framework | str = Framework.TORCHTITAN,
    predictor: Predictor | None = None,
    auto_recipes: Sequence[Recipe] = ALL_RECIPES,
    in_context: Callable[[Recipe], Any] | None = None,
    expert_imbalance: float = 1.0,
    expert_predictor: ExpertPredictor | None = None,
    expert_parallel: int = 1,
    step_speedup: StepSpeedup | None = None,
) -> Advice:
    """Decide, layer by layer, whether float8 pays, and build the filter list that realises the decision.

    `profile_choice`: a `fp8advisor.predict.ProfileChoice` (or `Profile`). `recipe`: a recipe name or
    "auto". `device_capability`: the GPU's compute capability for the sm_89 warning ("detect": CUDA device 0;
    None: no GPU). `framework`: the substring framework the filter list is simulated under (all three follow
    the same rule). `predictor`: replaces the profile's predictions (tests). `auto_recipes`: the recipes
    "auto" may pick (torchtitan 0.3 has no tensorwise). `in_context(recipe)`: the in-context results for the
    chosen recipe (`fp8advisor.advice.in_context.InContext`) or None; the layers they decide are decided by
    them. `step_speedup(recipe, layers, expert groups)`: the predicted step speedup of a recipe's decisions,
    by which "auto" ranks the recipes (`step_comparison.step_speedup_of`); None: by predicted Linear time.

    Routed experts (`model_layers.expert_groups`) are decided one group at a time (`decide_experts`), on
    their prediction under balanced routing; `expert_imbalance` (>= 1: the busiest expert's rows over the
    mean) gives each group's speedup range. `expert_predictor(group, imbalance, grouped recipe)` replaces the
    profile's grouped predictions (tests). The strategies' Linear-time speedups leave grouped experts out (see
    `Advice.gemm_speedup_with_experts`). `expert_parallel` P: each group as one GPU runs it, E / P experts
    at M total x P / E rows each under balanced routing (`local_experts`); P must divide every group's E.
    The dense Linear layers do not depend on P; the all-to-all dispatch and combine are not modelled.
    """
    _check_settings(model_layers, min_speedup, tensor_parallel)
    inputs = AdviceInputs(
        model_layers,
        profile_choice,
        min_speedup,
        tensor_parallel,
        expert_imbalance=check_expert_imbalance(expert_imbalance),
        expert_parallel=check_expert_parallel(expert_parallel, model_layers.expert_groups),
        predictor=predictor or default_predictor(profile_choice),
        expert_predictor=expert_predictor or default_expert_predictor(profile_choice),
    )
    chosen, recipe_reason, options = _recipe(inputs, recipe, auto_recipes, step_speedup)
    decided, experts, measured, profile_decisions = _decide(inputs, chosen, in_context)
    filter_list = shortest_exact_filter(
        model_layers.layers, {layer.fqn for layer in decided if layer.convert}, framework
    )
    strategies = compare_strategies(
        model_layers, decided, experts, filter_list, chosen, tensor_parallel, compare_torchao_auto
    )
    profile_name = getattr(profile_choice, "name", str(profile_choice))
    describe = getattr(profile_choice, "describe", None)
    advice = Advice(
        target=model_layers.target,
        batch=model_layers.batch,
        seq=model_layers.seq,
        recipe=chosen,
        recipe_reason=recipe_reason,
        profile_name=profile_name,
        profile_provenance=getattr(profile_choice, "provenance", "unknown"),
        profile_description=describe() if callable(describe) else profile_name,
        min_speedup=min_speedup,
        tensor_parallel=tensor_parallel,
        layers=tuple(decided),
        filter_list=filter_list,
        strategies=tuple(strategies),
        recipe_options=options,
        notes=tuple(model_layers.notes),
        prediction_error=_fit_error(profile_choice, chosen),
        in_context=measured,
        profile_decisions=profile_decisions,
        experts=experts,
        expert_imbalance=inputs.expert_imbalance,
        expert_parallel=inputs.expert_parallel,
        grouped_profile=_grouped_profile_name(profile_choice, model_layers),
    )
    return _with_warnings(advice, model_layers, device_capability)


def _check_settings(model_layers: ModelLayers, min_speedup: float, tensor_parallel: int) -> None:
    """One clear error for a `--min-speedup` that is not a positive number (`request.check_min_speedup`), a
    `--tp` that is no degree (`request.check_degree`), or one wider than the dimension the plan splits of a
    layer (`linears.unsplittable_layers`: a GPU would get an empty slice)."""
    from fp8advisor.errors import AdvisorError

    check_min_speedup(min_speedup)
    check_degree("--tp", tensor_parallel)
    unsplittable = unsplittable_layers(model_layers.layers, tensor_parallel)
    if unsplittable:
        named = ", ".join(
            f"{layer.fqn} {layer.K}x{layer.N} ({_split_words(layer)})" for layer in unsplittable[:3]
        )
        narrowest = min(split_width(layer) for layer in unsplittable)
        raise AdvisorError(
            f"--tp {tensor_parallel} is wider than what tensor parallelism splits of {len(unsplittable)} "
            f"layer(s) ({named}{', ...' if len(unsplittable) > 3 else ''}): a GPU's slice would be empty",
            hint=f"use at most --tp {narrowest}, a degree that divides the layers' widths (e.g. 2, 4 or 8)",
        )


def _split_words(layer) -> str:
    """Which dimension the plan splits of `layer`, for people."""
    from fp8advisor.advice.tp_plan import COLWISE, ROWWISE, tp_style

    return {COLWISE: "N split", ROWWISE: "K split"}.get(tp_style(layer.fqn), "K or N split")


def _recipe(
    inputs: AdviceInputs,
    recipe: Recipe | str,
    auto_recipes: Sequence[Recipe],
    step_speedup: StepSpeedup | None = None,
) -> tuple[Recipe, str, tuple[RecipeOption, ...]]:
    """The recipe to advise, why, and the options `--recipe auto` weighed (none for a recipe named)."""
    if str(recipe) != AUTO:
        return parse_recipe(str(recipe)), "requested with --recipe", ()
    if step_speedup is None:
        step_speedup = _one_gpu_step_speedup(inputs)
    return choose_recipe(
        inputs.model_layers,
        inputs.profile_choice,
        inputs.predictor,
        inputs.min_speedup,
        inputs.tensor_parallel,
        tuple(auto_recipes),
        inputs.expert_predictor,
        inputs.expert_parallel,
        step_speedup,
    )


def _one_gpu_step_speedup(inputs: AdviceInputs) -> StepSpeedup | None:
    """What "auto" ranks the recipes by when the caller gives nothing: the step speedup of this batch x seq
    step on one GPU of the profile's type (no recompute, no gradient accumulation, no FSDP), a step that
    depends only on the settings a written file's header records, so that `--check` and `verify` choose as
    `suggest` chose (with tensor parallelism: one TP group, no data parallelism). None (rank by Linear time)
    without an op census or without a profile of a GPU."""
    from fp8advisor.advice.step import StepConfig, StepGpu
    from fp8advisor.advice.step_comparison import step_speedup_of
    from fp8advisor.predict.profile import Profile
    from fp8advisor.predict.speedup import roofline_specs_for

    primary = getattr(inputs.profile_choice, "primary", inputs.profile_choice)
    census = getattr(inputs.model_layers, "census", None)
    if census is None or not isinstance(primary, Profile):
        return None
    config = StepConfig(world_size=inputs.tensor_parallel, tp=inputs.tensor_parallel)
    return step_speedup_of(inputs.model_layers, StepGpu.of(roofline_specs_for(primary)), config)


def _decide(
    inputs: AdviceInputs, recipe: Recipe, in_context: Callable[[Recipe], Any] | None
) -> tuple[list[LayerAdvice], tuple[ExpertAdvice, ...], Any, dict[str, bool]]:
    """The decision for each layer and each group of routed experts under `recipe`; the in-context results
    that decided some layers (None: none); and what the profile alone had decided for those layers."""
    decided = decide_layers(
        inputs.model_layers.layers, recipe, inputs.predictor, inputs.min_speedup, inputs.tensor_parallel
    )
    measured = in_context(recipe) if in_context is not None else None
    profile_decisions: dict[str, bool] = {}
    if measured is not None:
        decided, profile_decisions = _decide_in_context(decided, measured, recipe)
    decided, experts = decide_experts(
        inputs.model_layers,
        decided,
        recipe,
        inputs.min_speedup,
        inputs.predictor,
        inputs.expert_predictor,
        expert_imbalance=inputs.expert_imbalance,
        tensor_parallel=inputs.tensor_parallel,
        expert_parallel=inputs.expert_parallel,
    )
    return decided, experts, measured, profile_decisions


def _with_warnings(advice: Advice, model_layers: ModelLayers, device_capability) -> Advice:
    """`advice` with its warnings, then the routed experts' warnings, and the experts' notes after the
    model's (`fp8advisor.advice.caveats`)."""
    warnings = advice_warnings(advice, model_layers, device_capability)
    expert_warnings, expert_notes = expert_warnings_and_notes(advice, model_layers)
    return replace(
        advice, warnings=tuple(warnings + expert_warnings), notes=advice.notes + tuple(expert_notes)
    )


def _fit_error(profile_choice, recipe: Recipe):
    """The held-out error of the profile answering for `recipe`, None when unknown."""
    from fp8advisor.errors import ProfileError

    try:
        profile = (
            profile_choice.profile_for(recipe) if hasattr(profile_choice, "profile_for") else profile_choice
        )
        return profile.recipe(recipe).error
    except (AttributeError, ProfileError):  # a stand-in without figures, or no figures for this recipe
        return None


def _grouped_profile_name(profile_choice, model_layers: ModelLayers) -> str | None:
    """The name of the profile whose grouped figures predict the model's grouped experts (`Advice.
    grouped_profile`), None when it has none or no profile has such figures."""
    if not any(group.form is ExpertForm.GROUPED for group in model_layers.expert_groups):
        return None
    source = getattr(profile_choice, "grouped_profile", None)
    return None if source is None else source.name


def _decide_in_context(
    decided: list[LayerAdvice], measured, recipe: Recipe
) -> tuple[list[LayerAdvice], dict[str, bool]]:
    """`decided` with the layers the in-context results decide replaced by their decision, and what the
    profile had decided for those layers."""
    from fp8advisor.advice.in_context import MEASURED_IN_CONTEXT

    convertible = {
        layer.fqn
        for layer in decided
        if layer.counts_in_linear_time and dims_supported(recipe, layer.K, layer.N)
    }
    decisions = measured.decisions(convertible)
    profile = {layer.fqn: layer.convert for layer in decided if layer.fqn in decisions}
    replaced = [
        replace(
            layer,
            convert=decisions[layer.fqn][0],
            reason=decisions[layer.fqn][1],
            decided_by=MEASURED_IN_CONTEXT,
            uncertain=False,  # measured: what `bench --model` settles
        )
        if layer.fqn in decisions
        else layer
        for layer in decided
    ]
    return replaced, profile


__all__ = ["advise"]
