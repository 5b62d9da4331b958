"""torchao's MXFP8 training set-up in a Python file (parsed, never imported): `quantize_(model,
MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.<NAME>), filter_fn=...)`, as torchao 0.18 spells it.

torchao's handler for `MXFP8TrainingOpConfig` swaps the parameters of every module the filter accepts for
`MXFP8TrainingWeightWrapperTensor` (torchao/prototype/moe_training/conversion_utils.py:97-108), whose
matmuls (nn.Linear) and grouped GEMMs (MoE experts) then run MXFP8: one call converts both. The record's
Linear rule is the filter on nn.Linear modules, its expert filter the same filter on any other module.

The config is read from `MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_RCEIL)` (or
`MXFP8TrainingRecipe("mxfp8_rceil")`) or `MXFP8TrainingOpConfig()` (its defaults are MXFP8_RCEIL's,
torchao/prototype/moe_training/config.py:155-172 and 179-186), also inside `dataclasses.replace(<that>,
pad_token_groups_for_grouped_mm=...)` (the token-group padding of the grouped GEMMs, the one setting a file
may change: it changes no numerics); a name is followed to its one assignment.
"""

from __future__ import annotations

import ast

from torch import nn

from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.config_record import FrameworkConfig, recipe_named
from fp8advisor.frameworks.filter_function import read_filter_function
from fp8advisor.frameworks.formats import ConfigFormat
from fp8advisor.frameworks.framework_calls import call_argument, check_framework_call, check_framework_name
from fp8advisor.frameworks.module_scope import ModuleScope
from fp8advisor.frameworks.python_file import call_name, required_literal, resolve_name
from fp8advisor.recipes import Recipe

MX_CONFIG = "MXFP8TrainingOpConfig"
MX_RECIPE = "MXFP8TrainingRecipe"
#: The MXFP8 config's token-group padding of the grouped GEMMs (torchao config.py), off in every recipe.
PADDING = "pad_token_groups_for_grouped_mm"


def mx_config_recipe(node: ast.expr | None, scope: ModuleScope) -> Recipe | None:
    """The MXFP8 recipe of a `quantize_` config expression; None when it is no MXFP8 config."""
    node = resolve_name(node, scope)
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if call_name(node) == "replace" and node.args:
        inner = mx_config_recipe(node.args[0], scope)
        changed = {keyword.arg for keyword in node.keywords} - {PADDING}
        if inner is not None and (changed or len(node.args) > 1):
            raise ConfigError(
                f"dataclasses.replace of an {MX_CONFIG} changing {sorted(map(str, changed)) or 'more'}: "
                "not a recipe this tool knows",
                location=f"{scope.path}:{node.lineno}",
                hint=f"change only {PADDING} (or write {MX_CONFIG}.from_recipe(...) as it is)",
            )
        return inner
    if call_name(node) == MX_CONFIG:
        check_framework_name(func, scope, "torchao", MX_CONFIG)
        if node.args or node.keywords:
            raise ConfigError(
                f"{MX_CONFIG}(...) with its own settings: not a recipe this tool knows",
                location=f"{scope.path}:{node.lineno}",
                hint=f"write {MX_CONFIG}.from_recipe({MX_RECIPE}.MXFP8_RCEIL) (or MXFP8_RCEIL_WGRAD_WITH_HP)",
            )
        return Recipe.MXFP8_RCEIL
    if not (isinstance(func, ast.Attribute) and func.attr == "from_recipe" and _names(func.value, MX_CONFIG)):
        return None
    check_framework_name(func, scope, "torchao", f"{MX_CONFIG}.from_recipe")
    argument = resolve_name(call_argument(node, 0, "recipe"), scope, "the recipe")
    if isinstance(argument, ast.Attribute) and _names(argument.value, MX_RECIPE):
        check_framework_name(argument, scope, "torchao", f"{MX_RECIPE}.{argument.attr}")
        name = argument.attr.lower()
    elif isinstance(argument, ast.Call) and call_name(argument) == MX_RECIPE and len(argument.args) == 1:
        check_framework_name(argument.func, scope, "torchao", MX_RECIPE)
        name = required_literal(resolve_name(argument.args[0], scope), scope.path, "the recipe name")
    else:
        raise ConfigError(
            f"cannot tell the MXFP8 recipe from {ast.unparse(node)}",
            location=f"{scope.path}:{node.lineno}",
            hint=f"write {MX_CONFIG}.from_recipe({MX_RECIPE}.MXFP8_RCEIL) in the file",
        )
    recipe = recipe_named(name, scope.path, f"{MX_CONFIG}.from_recipe")
    if not recipe.is_mx:
        raise ConfigError(
            f"{MX_RECIPE} {name!r} is not an MXFP8 training recipe this tool knows",
            location=f"{scope.path}:{node.lineno}",
            hint="use MXFP8_RCEIL or MXFP8_RCEIL_WGRAD_WITH_HP (torchao's emulated recipe is for debugging)",
        )
    return recipe


def _names(node: ast.expr, name: str) -> bool:
    return (isinstance(node, ast.Name) and node.id == name) or (
        isinstance(node, ast.Attribute) and node.attr == name
    )


def read_torchao_mx(
    calls: list[tuple[ast.Call, Recipe]], scope: ModuleScope, *, trust_config: bool
) -> FrameworkConfig:
    """The torchao file's MXFP8 `quantize_` call (one), as a record (module docstring)."""
    path = scope.path
    if len(calls) > 1:
        raise ConfigError(
            f"{len(calls)} quantize_(..., {MX_CONFIG}...) calls: which layers convert is unclear",
            location=f"{path}:{calls[1][0].lineno}",
            hint="keep one quantize_ call with one filter_fn",
        )
    ((call, recipe),) = calls
    filter_node = call_argument(call, 2, "filter_fn")
    if filter_node is None or (isinstance(filter_node, ast.Constant) and filter_node.value is None):
        raise ConfigError(
            f"quantize_(..., {MX_CONFIG}...) without filter_fn: torchao would swap the parameters of every "
            "nn.Linear, the head included",
            location=f"{path}:{call.lineno}",
            hint="pass filter_fn=<a function of (module, fqn) naming the modules to convert>",
        )
    predicate, rule, entries = read_filter_function(filter_node, scope, trust_config=trust_config)
    check_framework_call(call, scope, "torchao", "quantize_", positional=4)

    def linear_rule(module, fqn: str) -> bool:
        return isinstance(module, nn.Linear) and predicate(module, fqn)

    def expert_rule(module, fqn: str) -> bool:
        return not isinstance(module, nn.Linear) and predicate(module, fqn)

    return FrameworkConfig(
        ConfigFormat.TORCHAO,
        path,
        True,
        recipe,
        entries,
        f"torchao quantize_ MXFP8 with {rule}",
        None,
        (),
        lambda model: linear_rule,
        converts_experts=True,
        expert_rule=f"quantize_({MX_CONFIG}) with {rule}, on modules that are not nn.Linear",
        expert_filter=expert_rule,
        float8_all_gather=False,  # MXFP8TrainingOpConfig has no FSDP all-gather setting
    )


__all__ = ["MX_CONFIG", "MX_RECIPE", "mx_config_recipe", "read_torchao_mx"]
