"""Each framework's module filter on a real model, as the framework codes it: `(module, fqn) -> bool`, True =
convert to float8.

- `substring_rule`: torchtitan's `module_filter_fn` (torchtitan/components/quantization/utils.py) and NeMo
  AutoModel's `_module_filter_fn` (nemo_automodel/components/quantization/fp8.py): an nn.Linear with K and N
  divisible by 16 whose FQN holds no `filter_fqns` entry.
- `torchao_auto_filter`: torchao's own `_auto_filter_for_recipe`, which torchtitan calls for the
  `AUTO_FILTER_FLAG` entry; `substring_or_auto` makes torchtitan's choice between the two.
- `accelerate_default_rule`: accelerate's `filter_linear_layers`, used without a `module_filter_func`.

`fp8advisor.frameworks.filters` simulates the same rules on names and shapes, without a model.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from fp8advisor import compat
from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.filters import matches_filter
from fp8advisor.recipes import Recipe, dims_divisible_by_16

#: The filter_fqns entry with which torchtitan switches to torchao's `_auto_filter_for_recipe`.
AUTO_FILTER_FLAG = "auto_filter_small_kn"


#: A module filter: (module, its FQN) -> True to convert it to float8.
Predicate = Callable[[nn.Module, str], bool]


def divisible_by_16(module: nn.Module) -> bool:
    """`recipes.dims_divisible_by_16` on a real module: `N, K = weight.shape`."""
    out_features, in_features = module.weight.shape
    return dims_divisible_by_16(in_features, out_features)


def substring_rule(filter_fqns: tuple[str, ...]) -> Predicate:
    """torchtitan `module_filter_fn`, NeMo `_module_filter_fn`: an nn.Linear, K and N % 16 == 0, no entry a
    substring of the FQN (the rule `filters.converted_by_framework` simulates on names and shapes)."""

    def decides(module: nn.Module, fqn: str) -> bool:
        if matches_filter(fqn, filter_fqns):
            return False
        return isinstance(module, nn.Linear) and divisible_by_16(module)

    return decides


def torchao_auto_filter(recipe: Recipe, filter_fqns: tuple[str, ...]) -> Predicate:
    """torchao's own `_auto_filter_for_recipe` (the real function), as torchtitan calls it."""
    try:
        return compat.auto_filter_for_recipe(recipe.value, filter_fqns=list(filter_fqns))
    except NotImplementedError:
        raise ConfigError(
            f'"{AUTO_FILTER_FLAG}" has no rule for recipe {recipe.value}: torchao raises NotImplementedError',
            hint="use recipe tensorwise or rowwise with the auto filter, or list the layers in filter_fqns",
        ) from None


def accelerate_default_rule(model: nn.Module | None) -> Predicate:
    """accelerate's `filter_linear_layers`: K and N % 16 == 0, and not the first or the last nn.Linear."""
    if model is None:
        raise ValueError(
            "accelerate's default filter depends on the model: call FrameworkConfig.filter_for(model)"
        )
    linear_names = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    first_last = {linear_names[0], linear_names[-1]} if linear_names else set()

    def decides(module: nn.Module, fqn: str) -> bool:
        if isinstance(module, nn.Linear) and not divisible_by_16(module):
            return False
        return fqn not in first_last

    return decides


def convert_nothing(module: nn.Module, fqn: str) -> bool:
    """The rule of a file with FP8 off: every layer stays in bf16."""
    return False


def substring_or_auto(
    recipe: Recipe, entries: tuple[str, ...], *, auto_passes_linear: bool
) -> tuple[str, Callable[[nn.Module | None], Predicate], tuple[str, ...]]:
    """torchtitan's choice between its substring rule and torchao's auto filter."""
    if AUTO_FILTER_FLAG in entries:
        clean = tuple(entry for entry in entries if entry != AUTO_FILTER_FLAG)
        if not auto_passes_linear:
            note = (
                f'"{AUTO_FILTER_FLAG}" in torchtitan 0.3 calls torchao\'s auto filter with a '
                "Linear.Config, not an "
                "nn.Linear, so it answers keep-bf16 for every layer: nothing is converted"
            )
            return (
                "torchao auto filter on Linear.Config: converts nothing",
                lambda model: convert_nothing,
                (note,),
            )
        predicate = torchao_auto_filter(recipe, clean)
        return (
            f"torchao _auto_filter_for_recipe({recipe.value!r}) + substring filter_fqns {list(clean)}",
            lambda model: predicate,
            (),
        )
    predicate = substring_rule(entries)
    return "substring filter_fqns + nn.Linear with K, N % 16 == 0", lambda model: predicate, ()


__all__ = [
    "AUTO_FILTER_FLAG",
    "Predicate",
    "accelerate_default_rule",
    "convert_nothing",
    "divisible_by_16",
    "substring_or_auto",
    "substring_rule",
    "torchao_auto_filter",
]
