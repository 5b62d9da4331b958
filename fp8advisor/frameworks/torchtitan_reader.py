"""torchtitan's float8 configs read as torchtitan reads them: the 0.2.x TOML job config and the 0.3 Python
recipe.

- torchtitan-toml: torchtitan 0.2.x job config. `[model] converters` must hold "quantize.linear.float8";
  `[quantize.linear.float8]` recipe_name (absent = tensorwise), filter_fqns (substring), an
  "auto_filter_small_kn" entry switching to torchao's `_auto_filter_for_recipe`. Unknown keys, and recipe_name
  together with enable_fsdp_float8_all_gather, are rejected as torchtitan rejects them; a value of the
  wrong type (`[compile] components = 5`, `[model] converters = "quantize.linear.float8"`: a string where
  torchtitan reads a list, whose characters it would iterate) is a ConfigError naming its key. The TOML is
  parsed by `fp8advisor.reading.parse_toml` (bounded in depth). MoE experts convert with the grouped-GEMM
  converter (`formats.TORCHTITAN_0_2_EXPERTS_CONVERTER`) and its `[quantize.grouped_mm.float8] fqns`.
  `enable_fsdp_float8_all_gather` (absent: false, torchtitan 0.2.2's job_config.py `Float8Linear`) is
  recorded as `FrameworkConfig.float8_all_gather`.
- torchtitan-py: torchtitan 0.3 recipe function; the keyword literals of `Float8LinearConverter.Config(...)`
  (recipe_name absent = rowwise, its default there; emulate=True: tensorwise), and
  `Float8GroupedExpertsConverter.Config(...)` for every GroupedExperts. Read with `ast`, never run; each
  keyword checked by name and type as the keyword-only dataclass takes it, and each call checked to be
  torchtitan's, where it runs (`framework_calls.check_framework_call`: the converter imported once from
  torchtitan, the recipe function around it bound once). 0.3 has no float8 all-gather setting (no
  tensorwise recipe): `float8_all_gather` is false.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path
from typing import Any

from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.config_record import (
    FrameworkConfig,
    experts_only,
    fp8_off,
    optional_bool,
    recipe_named,
    string_list,
)
from fp8advisor.frameworks.filters import matches_filter
from fp8advisor.frameworks.formats import TORCHTITAN_0_2_EXPERTS_CONVERTER as TORCHTITAN_EXPERTS_CONVERTER
from fp8advisor.frameworks.formats import ConfigFormat
from fp8advisor.frameworks.framework_calls import check_arguments, check_framework_call
from fp8advisor.frameworks.module_rules import substring_or_auto
from fp8advisor.frameworks.module_scope import ModuleScope
from fp8advisor.frameworks.python_file import calls_named, parse_python, required_literal, single_call
from fp8advisor.reading import parse_toml
from fp8advisor.recipes import Recipe

#: torchtitan 0.2.x: the converter name and the keys `[quantize.linear.float8]` accepts
#: (torchtitan/config/job_config.py).
TORCHTITAN_CONVERTER = "quantize.linear.float8"
TORCHTITAN_FLOAT8_KEYS = frozenset(
    {
        "enable_fsdp_float8_all_gather",
        "precompute_float8_dynamic_scale_for_fsdp",
        "recipe_name",
        "filter_fqns",
        "emulate",
    }
)


#: torchtitan 0.2.0's converter of MoE grouped GEMMs and the keys of its section (at tag v0.2.0:
#: torchtitan/components/quantization/float8.py `Float8GroupedMMConverter`, whose quantize_ filter is
#: `target_fqn in cur_fqn` for each of `[quantize.grouped_mm.float8] fqns`): the converter's name is
#: `formats.TORCHTITAN_0_2_EXPERTS_CONVERTER`.
TORCHTITAN_EXPERTS_KEYS = frozenset({"fqns"})


#: torchtitan 0.3's converter of MoE grouped experts (torchtitan/components/quantization/float8.py).
GROUPED_EXPERTS_CONVERTER = "Float8GroupedExpertsConverter.Config"
LINEAR_CONVERTER = "Float8LinearConverter.Config"
#: torchtitan 0.3's MXFP8 converters (torchtitan/components/quantization/mx.py).
MX_LINEAR_CONVERTER = "MXFP8LinearConverter.Config"
MX_GROUPED_EXPERTS_CONVERTER = "MXFP8GroupedExpertsConverter.Config"
MX_CONVERTERS = (MX_LINEAR_CONVERTER, MX_GROUPED_EXPERTS_CONVERTER)

#: The keywords torchtitan 0.3's `Float8LinearConverter.Config` and `Float8GroupedExpertsConverter.Config`
#: take (keyword-only dataclasses: any other keyword is a TypeError there).
TORCHTITAN_PY_FLOAT8_KEYS = frozenset({"model_compile_enabled", "recipe_name", "filter_fqns", "emulate"})
TORCHTITAN_PY_EXPERTS_KEYS = frozenset({"model_compile_enabled"})


def read_torchtitan_toml(path: Path, text: str, default_recipe: Recipe | None) -> FrameworkConfig:
    """A torchtitan 0.2.x job config: `[model] converters`, `[quantize.linear.float8]`, the experts' section
    and `[compile]`."""
    data = parse_toml(text, path, error=ConfigError)
    converters = string_list(
        _toml_table(data, path, "model").get("converters"),
        path,
        "[model] converters",
        example='["quantize.linear.float8"]',
    )
    linear = _toml_table(data, path, "quantize", "linear", "float8")
    unknown = sorted(set(linear) - TORCHTITAN_FLOAT8_KEYS)
    if unknown:
        raise ConfigError(
            f"[quantize.linear.float8] has keys torchtitan 0.2.x rejects: {', '.join(unknown)}",
            location=str(path),
            hint=f"the accepted keys are {', '.join(sorted(TORCHTITAN_FLOAT8_KEYS))}",
        )
    for key in ("enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp", "emulate"):
        optional_bool(linear.get(key), path, f"[quantize.linear.float8] {key}")
    recipe_name = linear.get("recipe_name")
    if recipe_name is not None and linear.get("enable_fsdp_float8_all_gather"):
        raise ConfigError(
            "torchtitan rejects recipe_name together with enable_fsdp_float8_all_gather = true",
            location=str(path),
            hint="for tensorwise with float8 all-gather leave recipe_name out; for rowwise drop the "
            "all-gather flag",
        )
    recipe = (
        recipe_named(recipe_name, path, "[quantize.linear.float8]")
        if recipe_name is not None
        else Recipe.TENSORWISE
    )
    entries = string_list(linear.get("filter_fqns"), path, "[quantize.linear.float8] filter_fqns")
    compile_enabled = _torchtitan_toml_compile(data, path)
    notes: list[str] = []
    enabled = TORCHTITAN_CONVERTER in converters
    if not enabled:
        legacy = ' ("float8" is the pre-0.2 name)' if "float8" in converters else ""
        notes.append(f'FP8 is off: [model] converters does not include "{TORCHTITAN_CONVERTER}"{legacy}')
    rule, factory, rule_notes = substring_or_auto(recipe, entries, auto_passes_linear=True)
    notes.extend(rule_notes)
    expert_entries = _torchtitan_toml_experts(data, converters, path)
    if (enabled or expert_entries) and not compile_enabled:
        notes.append(
            "[compile] enable is not true for the model: float8 without torch.compile is slower than bf16"
        )
    if expert_entries and not enabled:
        notes = [
            f'[model] converters has no "{TORCHTITAN_CONVERTER}": every nn.Linear stays bf16, only the MoE '
            "experts convert"
        ] + notes[1:]
    return FrameworkConfig(
        ConfigFormat.TORCHTITAN_TOML,
        path,
        enabled,
        recipe,
        entries,
        rule,
        compile_enabled,
        tuple(notes),
        factory,
        converts_experts=bool(expert_entries),
        expert_rule=(
            f"{TORCHTITAN_EXPERTS_CONVERTER}: modules whose FQN contains one of {list(expert_entries)}"
            if expert_entries
            else f'no "{TORCHTITAN_EXPERTS_CONVERTER}" converter with fqns'
        ),
        expert_filter=(lambda module, fqn: matches_filter(fqn, expert_entries)) if expert_entries else None,
        float8_all_gather=bool(linear.get("enable_fsdp_float8_all_gather")),
    )


def _torchtitan_toml_compile(data: dict, path: Path) -> bool:
    """Whether `[compile]` compiles the model: `enable` and "model" in `components` (torchtitan's default
    components: model and loss), each checked by type."""
    table = _toml_table(data, path, "compile")
    enable = optional_bool(table.get("enable"), path, "[compile] enable")
    components = table.get("components")
    components = (
        ("model", "loss")
        if components is None
        else string_list(components, path, "[compile] components", example='["model", "loss"]')
    )
    return bool(enable) and "model" in components


def _toml_table(data: dict, path: Path, *keys: str) -> dict:
    """The table at `[a.b.c]` (empty when absent); a ConfigError when a key on the way is not a table."""
    for depth, key in enumerate(keys, start=1):
        data = data.get(key, {})
        if not isinstance(data, dict):
            raise ConfigError(
                f"[{'.'.join(keys[:depth])}] must be a table, not {type(data).__name__}", location=str(path)
            )
    return data


def _torchtitan_toml_experts(data: dict, converters: tuple[str, ...], path: Path) -> tuple[str, ...]:
    """`[quantize.grouped_mm.float8] fqns` when its converter is on (empty: no expert converts)."""
    section = _toml_table(data, path, "quantize", "grouped_mm", "float8")
    unknown = sorted(set(section) - TORCHTITAN_EXPERTS_KEYS)
    if unknown:
        raise ConfigError(
            f"[quantize.grouped_mm.float8] has keys torchtitan 0.2.x rejects: {', '.join(unknown)}",
            location=str(path),
            hint="the accepted key is fqns",
        )
    if TORCHTITAN_EXPERTS_CONVERTER not in converters:
        return ()
    return string_list(section.get("fqns"), path, "[quantize.grouped_mm.float8] fqns")


def read_torchtitan_py(path: Path, text: str, default_recipe: Recipe | None) -> FrameworkConfig:
    """A torchtitan 0.3 recipe: its Float8LinearConverter.Config and Float8GroupedExpertsConverter.Config (its
    MX converters: `torchtitan_mx_reader.read_torchtitan_py_any`)."""
    tree = parse_python(path, text)
    scope = ModuleScope(tree, path)
    linear = _read_torchtitan_py_linear(scope)
    if not calls_named(tree, GROUPED_EXPERTS_CONVERTER):
        return replace(linear, converts_experts=False, expert_rule=f"no {GROUPED_EXPERTS_CONVERTER}(...)")
    call = single_call(tree, GROUPED_EXPERTS_CONVERTER, path)
    check_framework_call(call, scope, "torchtitan", GROUPED_EXPERTS_CONVERTER)
    keyword_literals(call, path, GROUPED_EXPERTS_CONVERTER, TORCHTITAN_PY_EXPERTS_KEYS)
    return replace(
        experts_only(linear, "Float8LinearConverter.Config"),
        converts_experts=True,
        expert_rule=f"{GROUPED_EXPERTS_CONVERTER}: every GroupedExperts of the model (rowwise, no filter)",
    )


def keyword_literals(call: ast.Call, path: Path, name: str, accepted: frozenset[str]) -> dict[str, Any]:
    """The keyword literals of torchtitan 0.3's `name(...)` (a keyword-only dataclass: a positional argument,
    `**kwargs` or a keyword it lacks is refused, as Python would raise or verify could not tell), each bool
    field checked by type."""
    check_arguments(call, path, name, 0)
    values = {kw.arg: required_literal(kw.value, path, f"{name}({kw.arg}=...)") for kw in call.keywords}
    unknown = sorted(set(values) - accepted)
    if unknown:
        raise ConfigError(
            f"{name}(...) has keywords torchtitan 0.3 rejects: {', '.join(unknown)}",
            location=f"{path}:{call.lineno}",
            hint=f"the accepted keywords are {', '.join(sorted(accepted))}",
        )
    for key in ("model_compile_enabled", "emulate"):
        optional_bool(values.get(key), path, f"{name}({key}=...)")
    return values


def _read_torchtitan_py_linear(scope: ModuleScope) -> FrameworkConfig:
    """The nn.Linear part: the keyword literals of `Float8LinearConverter.Config(...)`, each checked by type
    (a string filter_fqns is a string there, not torchtitan's command-line "a,b" form)."""
    path, tree = scope.path, scope.tree
    if not calls_named(tree, "Float8LinearConverter.Config"):
        return fp8_off(ConfigFormat.TORCHTITAN_PY, path, Recipe.ROWWISE, "Float8LinearConverter.Config")
    call = single_call(tree, "Float8LinearConverter.Config", path)
    check_framework_call(call, scope, "torchtitan", "Float8LinearConverter.Config")
    values = keyword_literals(call, path, "Float8LinearConverter.Config", TORCHTITAN_PY_FLOAT8_KEYS)
    # torchtitan 0.3's Float8LinearConverter.Config defaults recipe_name to "rowwise".
    named = recipe_named(values.get("recipe_name", "rowwise"), path, "Float8LinearConverter.Config")
    entries = string_list(values.get("filter_fqns"), path, "Float8LinearConverter.Config(filter_fqns=...)")
    notes: list[str] = []
    compile_enabled = values.get("model_compile_enabled")
    if compile_enabled is not True:
        notes.append("model_compile_enabled is not True: float8 without torch.compile is slower than bf16")
    # torchtitan 0.3: `if cfg.emulate: Float8LinearConfig(emulate=True)`, tensorwise, whatever the recipe name
    # (which still picks the auto filter's rule).
    recipe = Recipe.TENSORWISE if values.get("emulate") else named
    if values.get("emulate") and named is not Recipe.TENSORWISE:
        notes.append(
            f"emulate=True: torchtitan 0.3 converts with Float8LinearConfig(emulate=True), tensorwise, not "
            f"the recipe_name {named.value!r}"
        )
    rule, factory, rule_notes = substring_or_auto(named, entries, auto_passes_linear=False)
    notes.extend(rule_notes)
    # torchtitan 0.3 tests Linear.Config in_features/out_features: the same shapes as nn.Linear's weight.
    return FrameworkConfig(
        ConfigFormat.TORCHTITAN_PY,
        path,
        True,
        recipe,
        entries,
        rule,
        compile_enabled,
        tuple(notes),
        factory,
        float8_all_gather=False,  # torchtitan 0.3's Float8LinearConverter.Config has no such field
    )


__all__ = [
    "GROUPED_EXPERTS_CONVERTER",
    "LINEAR_CONVERTER",
    "MX_CONVERTERS",
    "MX_GROUPED_EXPERTS_CONVERTER",
    "MX_LINEAR_CONVERTER",
    "keyword_literals",
    "TORCHTITAN_CONVERTER",
    "TORCHTITAN_EXPERTS_KEYS",
    "TORCHTITAN_FLOAT8_KEYS",
    "read_torchtitan_py",
    "read_torchtitan_toml",
]
