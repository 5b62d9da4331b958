"""torchao's float8 set-up in a Python file, read as torchao and accelerate run it (parsed, never imported).

- torchao: `convert_to_float8_training(model, config=..., module_filter_fn=...)`; without a filter function
  torchao converts every nn.Linear. MoE experts convert with `quantize_(model, Float8TrainingOpConfig(),
  filter_fn=...)`.
- accelerate: `AORecipeKwargs(config=..., module_filter_func=...)` handed to
  `Accelerator(mixed_precision="fp8", kwargs_handlers=[...])`; without a filter function accelerate keeps the
  first and the last nn.Linear in bf16.

The recipe comes from the literal in `Float8LinearConfig.from_recipe_name("...")` or `Float8LinearConfig(...)`
(`_recipe_from_python`), and FSDP's float8 all-gather from the same expression (`_all_gather_from_python`:
torchao's default false; accelerate without `config=` builds its own config, all-gather true by default); the
filter function is read by `fp8advisor.frameworks.filter_function`.

Every call read here, and every name it is called by, is checked to be what runs
(`framework_calls.check_framework_call`): `convert_to_float8_training`, `quantize_`, `Float8TrainingOpConfig`,
`Float8LinearConfig`, `Accelerator` and `AORecipeKwargs` imported once from their package and never rebound,
the function around the call (`convert_model`) bound once, the `accelerator` that holds the set-up bound once,
no argument hidden in `*args` / `**kwargs`; a file that rebinds one is refused, never read stale.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.config_record import FrameworkConfig, experts_only, fp8_off, recipe_named
from fp8advisor.frameworks.filter_function import read_filter_function
from fp8advisor.frameworks.formats import ConfigFormat
from fp8advisor.frameworks.framework_calls import (
    call_argument,
    check_arguments,
    check_framework_call,
    check_framework_name,
)
from fp8advisor.frameworks.module_rules import accelerate_default_rule
from fp8advisor.frameworks.module_scope import ModuleScope
from fp8advisor.frameworks.python_file import (
    call_name,
    calls_named,
    keyword_value,
    literal_value,
    parse_python,
    required_literal,
    resolve_name,
    single_call,
)
from fp8advisor.recipes import Recipe

#: `Float8LinearConfig(...)` keywords that keep the default (tensorwise) scaling.
_TENSORWISE_KEYWORDS = frozenset(
    {
        "emulate",
        "enable_fsdp_float8_all_gather",
        "pad_inner_dim",
        "force_recompute_fp8_weight_in_bwd",
        "round_scales_to_power_of_2",
    }
)


def read_torchao(
    path: Path, text: str, default_recipe: Recipe | None, *, trust_config: bool = False
) -> FrameworkConfig:
    """A torchao training script: its `convert_to_float8_training` and its `quantize_` of the experts."""
    tree = parse_python(path, text)
    scope = ModuleScope(tree, path)
    mx_calls = _mx_calls(scope)
    if mx_calls:
        from fp8advisor.frameworks.torchao_mx_reader import read_torchao_mx

        if calls_named(tree, "convert_to_float8_training"):
            raise ConfigError(
                "the file converts with both convert_to_float8_training and torchao's MXFP8 quantize_: which "
                "recipe a layer trains with is unclear",
                location=str(path),
                hint="keep either the float8 conversion or the MXFP8 one",
            )
        return read_torchao_mx(mx_calls, scope, trust_config=trust_config)
    linear = _read_torchao_linear(scope, trust_config=trust_config)
    calls: list[tuple[ast.Call, ast.Call]] = []
    for call in calls_named(tree, "quantize_"):
        check_arguments(call, path, "quantize_", 4)  # (model, config, filter_fn, device)
        config = resolve_name(call_argument(call, 1, "config"), scope)
        if isinstance(config, ast.Call) and call_name(config) == "Float8TrainingOpConfig":
            calls.append((call, config))
    if not calls:
        return replace(
            linear, converts_experts=False, expert_rule="no quantize_(..., Float8TrainingOpConfig())"
        )
    if len(calls) > 1:
        raise ConfigError(
            f"{len(calls)} quantize_(..., config=Float8TrainingOpConfig()) calls: which experts convert is "
            "unclear",
            location=f"{path}:{calls[0][0].lineno}",
            hint="keep one quantize_ call for the experts, with one filter_fn",
        )
    call, config = calls[0]
    filter_node = call_argument(call, 2, "filter_fn")
    if filter_node is None or (isinstance(filter_node, ast.Constant) and filter_node.value is None):
        raise ConfigError(
            "quantize_(..., config=Float8TrainingOpConfig()) without filter_fn applies torchao's default "
            "filter (nn.Linear), not the experts",
            location=f"{path}:{call.lineno}",
            hint="pass filter_fn=<a function of (module, fqn) naming the expert modules>",
        )
    predicate, rule, _entries = read_filter_function(filter_node, scope, trust_config=trust_config)
    check_framework_call(call, scope, "torchao", "quantize_", positional=4)
    check_framework_name(config.func, scope, "torchao", "Float8TrainingOpConfig")
    return replace(
        experts_only(linear, "convert_to_float8_training"),
        converts_experts=True,
        expert_rule=f"quantize_(Float8TrainingOpConfig) with {rule}",
        expert_filter=predicate,
    )


def _mx_calls(scope: ModuleScope) -> list:
    """The file's `quantize_` calls with torchao's MXFP8 config, each with its recipe."""
    from fp8advisor.frameworks.torchao_mx_reader import mx_config_recipe

    found = []
    for call in calls_named(scope.tree, "quantize_"):
        check_arguments(call, scope.path, "quantize_", 4)
        recipe = mx_config_recipe(call_argument(call, 1, "config"), scope)
        if recipe is not None:
            found.append((call, recipe))
    return found


def _read_torchao_linear(scope: ModuleScope, *, trust_config: bool) -> FrameworkConfig:
    """The nn.Linear part: `convert_to_float8_training(model, config=..., module_filter_fn=...)`. The
    filter is read first (its own refusals name the construct in it), then the call's names and recipe."""
    path, tree = scope.path, scope.tree
    if not calls_named(tree, "convert_to_float8_training"):
        return fp8_off(ConfigFormat.TORCHAO, path, Recipe.TENSORWISE, "convert_to_float8_training")
    call = single_call(tree, "convert_to_float8_training", path)
    filter_node = keyword_value(call, "module_filter_fn")
    has_filter = not (
        filter_node is None or (isinstance(filter_node, ast.Constant) and filter_node.value is None)
    )
    read = read_filter_function(filter_node, scope, trust_config=trust_config) if has_filter else None
    check_framework_call(call, scope, "torchao", "convert_to_float8_training", positional=1)
    recipe = _recipe_from_python(keyword_value(call, "config"), scope)
    all_gather = _all_gather_from_python(keyword_value(call, "config"), scope)
    if read is None:
        # torchao without a filter converts every nn.Linear, whatever its shape.
        return FrameworkConfig(
            ConfigFormat.TORCHAO,
            path,
            True,
            recipe,
            None,
            "every nn.Linear (no module_filter_fn)",
            None,
            ("no module_filter_fn: torchao converts every nn.Linear, lm_head included",),
            lambda model: lambda module, fqn: True,
            float8_all_gather=all_gather,
        )
    predicate, rule, entries = read
    return FrameworkConfig(
        ConfigFormat.TORCHAO,
        path,
        True,
        recipe,
        entries,
        rule,
        None,
        (),
        lambda model: predicate,
        float8_all_gather=all_gather,
    )


def read_accelerate(
    path: Path, text: str, default_recipe: Recipe | None, *, trust_config: bool = False
) -> FrameworkConfig:
    """An accelerate training script: its `AORecipeKwargs` and what its `Accelerator(...)` says of FP8."""
    tree = parse_python(path, text)
    scope = ModuleScope(tree, path)
    accelerators = calls_named(tree, "Accelerator")
    precisions = [
        resolve_name(keyword_value(node, "mixed_precision"), scope, "the mixed_precision")
        for node in accelerators
    ]
    literal_precisions = [p.value for p in precisions if isinstance(p, ast.Constant)]
    if not calls_named(tree, "AORecipeKwargs") and literal_precisions and "fp8" not in literal_precisions:
        _check_accelerators(accelerators, scope)
        off = fp8_off(ConfigFormat.ACCELERATE, path, Recipe.TENSORWISE, "AORecipeKwargs")
        return replace(off, notes=(f"FP8 is off: Accelerator(mixed_precision={literal_precisions[0]!r})",))
    call = single_call(tree, "AORecipeKwargs", path)
    notes: list[str] = []
    enabled = True
    if literal_precisions and "fp8" not in literal_precisions:
        enabled = False
        notes.append(f"FP8 is off: Accelerator(mixed_precision={literal_precisions[0]!r}), not 'fp8'")
    elif not literal_precisions:
        notes.append(
            'no Accelerator(mixed_precision="fp8") in the file: FP8 must be enabled by the launch config'
        )
    if accelerators and not any(keyword_value(node, "kwargs_handlers") is not None for node in accelerators):
        notes.append(
            "Accelerator(...) has no kwargs_handlers=[...]: the AORecipeKwargs would not be used "
            "(the docs misspell it)"
        )
    filter_node = call_argument(call, 1, "module_filter_func")
    has_filter = not (
        filter_node is None or (isinstance(filter_node, ast.Constant) and filter_node.value is None)
    )
    read = read_filter_function(filter_node, scope, trust_config=trust_config) if has_filter else None
    _check_accelerators(accelerators, scope)
    check_framework_call(call, scope, "accelerate", "AORecipeKwargs", positional=2, keeps_result=True)
    recipe = _recipe_from_python(call_argument(call, 0, "config"), scope)
    all_gather = _accelerate_all_gather(call, scope)
    if read is None:
        notes.append("no module_filter_func: accelerate keeps the first and last nn.Linear in bf16")
        return FrameworkConfig(
            ConfigFormat.ACCELERATE,
            path,
            enabled,
            recipe,
            None,
            "accelerate default: K, N % 16 == 0, not the first or last nn.Linear",
            None,
            tuple(notes),
            accelerate_default_rule,
            float8_all_gather=all_gather,
        )
    predicate, rule, entries = read
    return FrameworkConfig(
        ConfigFormat.ACCELERATE,
        path,
        enabled,
        recipe,
        entries,
        rule,
        None,
        tuple(notes),
        lambda model: predicate,
        float8_all_gather=all_gather,
    )


def _accelerate_all_gather(call: ast.Call, scope: ModuleScope) -> bool | None:
    """FSDP float8 all-gather as `AORecipeKwargs(...)` sets it up. With `config=` it is that config's
    (accelerate hands it to torchao as it is); without one, accelerate 1.15 builds `Float8LinearConfig(
    pad_inner_dim=..., enable_fsdp_float8_all_gather=...)` from its own two fields, each None by default and
    then read from ACCELERATE_FP8_PAD_INNER_DIM / ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER, default true
    (accelerate/utils/dataclasses.py `AORecipeKwargs.__post_init__`): the literal given, else true."""
    config = resolve_name(call_argument(call, 0, "config"), scope)
    if config is not None and not (isinstance(config, ast.Constant) and config.value is None):
        return _all_gather_from_python(config, scope)
    given = keyword_value(call, "enable_fsdp_float8_all_gather")
    if given is None:
        return True
    value = literal_value(resolve_name(given, scope, "enable_fsdp_float8_all_gather"))
    return value if isinstance(value, bool) else None


def _all_gather_from_python(node: ast.expr | None, scope: ModuleScope) -> bool | None:
    """`enable_fsdp_float8_all_gather` of the torchao config expression `_recipe_from_python` reads: the
    literal a `dataclasses.replace(...)` or `Float8LinearConfig(...)` sets, else the config it starts from;
    false for `from_recipe_name(...)` and no config (torchao's default, torchao/float8/config.py
    `Float8LinearConfig`); None when the value is no literal true or false."""
    node = resolve_name(node, scope)
    if node is None or (isinstance(node, ast.Constant) and node.value is None):
        return False
    if not isinstance(node, ast.Call):
        return None
    given = keyword_value(node, "enable_fsdp_float8_all_gather")
    if given is not None:
        value = literal_value(resolve_name(given, scope, "enable_fsdp_float8_all_gather"))
        return value if isinstance(value, bool) else None
    if call_name(node) == "replace" and node.args:
        return _all_gather_from_python(node.args[0], scope)
    return False


def _check_accelerators(accelerators: list[ast.Call], scope: ModuleScope) -> None:
    """Each `Accelerator(...)` is accelerate's, runs as written, and the name that keeps it (`accelerator`,
    the one the user imports) is bound once; more than one Accelerator is refused: which trains is unclear."""
    for node in accelerators:
        check_framework_call(node, scope, "accelerate", "Accelerator", keeps_result=True)
    if len(accelerators) > 1:
        single_call(scope.tree, "Accelerator", scope.path)


def _recipe_from_python(node: ast.expr | None, scope: ModuleScope) -> Recipe:
    """The recipe of `Float8LinearConfig.from_recipe_name("...")`, `Float8LinearConfig(...)` or None; a
    name (`config=CONFIG`) is followed to its one assignment (`python_file.resolve_name`; torchao's config
    is a frozen dataclass: nothing changes it in place)."""
    path = scope.path
    node = resolve_name(node, scope)
    if node is None or (isinstance(node, ast.Constant) and node.value is None):
        return Recipe.TENSORWISE  # torchao: config None means Float8LinearConfig(), tensorwise
    if isinstance(node, ast.Call):
        name = call_name(node)
        if (
            name == "replace"
            and node.args
            and {kw.arg for kw in node.keywords} <= _TENSORWISE_KEYWORDS - {"emulate"}
        ):  # dataclasses.replace(<config>, pad_inner_dim=True): padding, the same scaling
            check_framework_name(node.func, scope, "dataclasses", "replace")
            return _recipe_from_python(node.args[0], scope)
        if name == "from_recipe_name":
            check_framework_name(node.func, scope, "torchao", "Float8LinearConfig.from_recipe_name")
            argument = node.args[0] if node.args else keyword_value(node, "recipe_name")
            if argument is None:
                raise ConfigError("from_recipe_name() without a recipe", location=f"{path}:{node.lineno}")
            if isinstance(argument, ast.Attribute):  # Float8LinearRecipeName.ROWWISE
                check_framework_name(argument, scope, "torchao", f"Float8LinearRecipeName.{argument.attr}")
                return recipe_named(argument.attr.lower(), path, "Float8LinearRecipeName")
            name = required_literal(resolve_name(argument, scope, "the recipe name"), path, "the recipe name")
            return recipe_named(name, path, "from_recipe_name")
        if name == "Float8LinearConfig":
            check_framework_name(node.func, scope, "torchao", "Float8LinearConfig")
            custom = sorted({kw.arg or "**" for kw in node.keywords} - _TENSORWISE_KEYWORDS)
            if node.args or custom:
                raise ConfigError(
                    f"Float8LinearConfig({', '.join(custom)}=...) sets its own scaling: not a recipe "
                    "this tool knows",
                    location=f"{path}:{node.lineno}",
                    hint='write Float8LinearConfig.from_recipe_name("tensorwise" | "rowwise" | '
                    '"rowwise_with_gw_hp")',
                )
            return Recipe.TENSORWISE
    raise ConfigError(
        f"cannot tell the float8 recipe from {ast.unparse(node)}",
        location=f"{path}:{getattr(node, 'lineno', '?')}",
        hint='write config=Float8LinearConfig.from_recipe_name("rowwise") (or another recipe name) in '
        "the file",
    )


__all__ = ["read_accelerate", "read_torchao"]
