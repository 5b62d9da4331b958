"""Where the in-context search of `bench --model` starts: the profile's advice and torchao's auto filter for
each measured unit, besides all-bf16 and "all" (`fp8advisor.measure.block_bench` measures from there)."""

from __future__ import annotations

from collections.abc import Sequence

from fp8advisor.advice.linears import decide_layers, default_predictor
from fp8advisor.advice.strategies import torchao_auto_filter_converts
from fp8advisor.recipes import parse_recipe
from fp8advisor.request import DEFAULT_MIN_SPEEDUP


def seed_sets(discovery, recipes: Sequence[str], profile_choice) -> dict[str, dict[str, dict]]:
    """Where the in-context search of `bench --model` starts (`fp8advisor.measure.block_bench`), for each unit
    of `discovery` (`fp8advisor.inspect.blocks.Discovery`).

    `seeds[recipe][unit pattern]`: the float8 sets the search starts from besides all-bf16 and "all": the
    profile's advice ("advice", at its default --min-speedup) and torchao's auto filter ("auto", for the
    recipes it serves), as names relative to the unit."""
    layers = discovery.model_layers.layers
    predictor = default_predictor(profile_choice)
    seeds: dict[str, dict[str, dict]] = {}
    for name in recipes:
        recipe = parse_recipe(name)
        advised = {
            layer.fqn
            for layer in decide_layers(layers, recipe, predictor, DEFAULT_MIN_SPEEDUP, 1)
            if layer.convert
        }
        try:
            auto = torchao_auto_filter_converts(layers, recipe)
        except NotImplementedError:  # torchao's auto filter does not serve this recipe
            auto = None
        seeds[recipe.value] = {
            unit.pattern: {
                "all": unit.convertible,
                "advice": unit.relative(advised),
                **({"auto": unit.relative(auto)} if auto is not None else {}),
            }
            for unit in discovery.units
        }
    return seeds


__all__ = ["seed_sets"]
