"""The strategies the summary puts side by side, and torchao's own auto filter among them.

Each is the predicted Linear time of all-bf16 / the predicted Linear time of the strategy, over the Linear
layers the forward runs: this advice (and, when no substring list can be exact, this advice via filter_fqns);
converting every convertible layer; and torchao's own `_auto_filter_for_recipe` (its rule as
`fp8advisor.frameworks.filters` copies it, pinned by a test against the installed torchao; torchao's function
itself, called on meta-device `nn.Linear` layers of the same shapes, for a torchao release the copy was not
read from). Grouped experts are outside the Linear time (`Advice.gemm_speedup_with_experts` counts them).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence

from fp8advisor import compat
from fp8advisor.advice.experts import odd_gemms
from fp8advisor.advice.records import ExpertAdvice, LayerAdvice, Strategy
from fp8advisor.frameworks.filters import Framework, converted_by_framework
from fp8advisor.frameworks.shortest_filter import FilterList
from fp8advisor.inspect.records import GemmLayer, ModelLayers
from fp8advisor.recipes import Recipe, dims_supported


def compare_strategies(
    model_layers: ModelLayers,
    decided: Sequence[LayerAdvice],
    experts: Sequence[ExpertAdvice],
    filter_list: FilterList,
    recipe: Recipe,
    tensor_parallel: int,
    compare_torchao_auto: bool,
) -> list[Strategy]:
    """The strategies the summary compares, in its order: this advice, this advice via filter_fqns (only when
    `filter_list` cannot be exact), every convertible layer, and torchao's auto filter ("not computed" unless
    `compare_torchao_auto`)."""
    advised = {layer.fqn for layer in decided if layer.convert}
    routers = {group.router for group in model_layers.expert_groups if group.router is not None}
    convertible = {
        layer.fqn
        for layer in decided
        if layer.counts_in_linear_time
        and dims_supported(recipe, layer.K, layer.N)
        and layer.fqn not in routers
    }
    advised_groups = tuple(e.group for e in experts if e.convert)
    convertible_groups = tuple(
        e.group
        for e, group in zip(experts, model_layers.expert_groups, strict=True)
        if e.predicted_speedup is not None and not odd_gemms(group, tensor_parallel)
    )
    strategies = [
        Strategy(
            "advice",
            "this advice",
            tuple(sorted(advised)),
            predicted_linear_speedup(decided, advised),
            expert_groups=advised_groups,
        ),
        Strategy(
            "all_convertible",
            "every convertible layer",
            tuple(sorted(convertible)),
            predicted_linear_speedup(decided, convertible),
            expert_groups=convertible_groups,
        ),
    ]
    if not filter_list.exact:
        strategies.insert(
            1,
            Strategy(
                "advice_filter",
                "this advice via filter_fqns",
                tuple(sorted(filter_list.converted)),
                predicted_linear_speedup(decided, filter_list.converted),
                note="torchtitan / NeMo AutoModel: conflicting layers kept in bf16",
                expert_groups=advised_groups,
            ),
        )
    strategies.append(_torchao_strategy(model_layers, recipe, decided, compare_torchao_auto))
    return strategies


def predicted_linear_speedup(
    layers: Sequence[LayerAdvice], converted: set[str] | frozenset[str]
) -> float | None:
    """All-bf16 Linear time / Linear time when exactly `converted` run in float8 (layers the forward runs)."""
    timed = [layer for layer in layers if layer.counts_in_linear_time]
    bf16_total = sum(layer.bf16_time_s for layer in timed)
    if bf16_total <= 0:
        return None
    strategy_total = sum(
        layer.float8_time_s if layer.fqn in converted else layer.bf16_time_s for layer in timed
    )
    return bf16_total / strategy_total


@contextlib.contextmanager
def _quiet_loggers(*names: str) -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def torchao_auto_filter_converts(layers: Sequence[GemmLayer], recipe: Recipe) -> set[str]:
    """The FQNs torchao's `_auto_filter_for_recipe(recipe, filter_fqns=[])` would convert.

    When the installed torchao is a release whose rule `filters.auto_filter_keeps` copies (a test pins the
    copy against torchao's own function), the copy answers: importing torchao costs 2 s, which is most of
    what `suggest` would spend. Otherwise torchao's real function is called on `nn.Linear(K, N)` layers built
    on the meta device (no memory), one per layer with its FQN, as `convert_to_float8_training` would call it.
    Raises NotImplementedError for rowwise_with_gw_hp, as torchao does.
    """
    if compat.auto_filter_copy_matches_installed():
        return converted_by_framework(layers, [], Framework.TORCHAO_AUTO, recipe=recipe)
    import torch
    from torch import nn

    with _quiet_loggers(*compat.TORCHAO_IMPORT_LOGGERS):  # its optional C extensions warn on every import
        module_filter = compat.auto_filter_for_recipe(recipe.value, filter_fqns=[])
    modules: dict[tuple[int, int], nn.Module] = {}
    converted = set()
    for layer in layers:
        if not layer.is_linear:
            continue
        key = (layer.K, layer.N)
        if key not in modules:
            modules[key] = nn.Linear(layer.K, layer.N, bias=False, device=torch.device("meta"))
        if module_filter(modules[key], layer.fqn):
            converted.add(layer.fqn)
    return converted


def _torchao_strategy(
    model_layers: ModelLayers, recipe: Recipe, decided: Sequence[LayerAdvice], enabled: bool
) -> Strategy:
    """torchao's auto filter as a strategy: its layers' predicted Linear-time speedup, or why it has none."""
    label = "torchao auto filter"
    if not enabled:
        return Strategy("torchao_auto", label, (), None, note="not computed")
    try:
        converted = torchao_auto_filter_converts(model_layers.layers, recipe)
    except NotImplementedError:
        return Strategy(
            "torchao_auto",
            label,
            (),
            None,
            note=f"not available: torchao's _auto_filter_for_recipe raises NotImplementedError for "
            f"{recipe.value}",
        )
    except ImportError as error:
        return Strategy(
            "torchao_auto", label, (), None, note=f"not available: torchao cannot be imported ({error})"
        )
    timed = {layer.fqn for layer in decided if layer.counts_in_linear_time}
    return Strategy(
        "torchao_auto",
        label,
        tuple(sorted(converted)),
        predicted_linear_speedup(decided, converted & timed),
        note="(K, N) thresholds; M ignored",
    )


__all__ = ["compare_strategies", "predicted_linear_speedup", "torchao_auto_filter_converts"]
