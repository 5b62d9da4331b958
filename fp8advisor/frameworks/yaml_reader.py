"""The YAML formats read as their framework reads them: NeMo AutoModel's config and a bare filter list.

- nemo-automodel: NeMo AutoModel YAML. `fp8.enabled` must be true; recipe_name (null = tensorwise);
  filter_fqns (substring). Unknown keys (a YAML number or null too) are ignored, as NeMo ignores them (and
  named in `notes`). Each field read, and each true/false field of FP8Config, is checked by type
  (`config_record`): a wrong one is a ConfigError naming its key (NeMo tests `enabled` for truth: the string
  "false" would turn FP8 on there). `fp8.enable_fsdp_float8_all_gather` is recorded as NeMo applies it: only
  with the tensorwise recipe (recipe_name null or "tensorwise"), whose Float8LinearConfig NeMo builds with it;
  with a rowwise recipe NeMo builds `Float8LinearConfig.from_recipe_name` and drops it (said in `notes`).
- filter: a bare list of filter_fqns (YAML or JSON; a mapping with `filter_fqns` is accepted too), matched by
  substring with the divisibility rule, as torchtitan, NeMo and torchao's auto filter match it. It names no
  recipe: the caller completes it with `FrameworkConfig.with_recipe`.

YAML and JSON are parsed by `fp8advisor.reading` (bounded: an alias bomb or a document nested thousands deep
is one ConfigError).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from torch import nn

from fp8advisor.errors import ConfigError, quote
from fp8advisor.frameworks.config_record import (
    FrameworkConfig,
    key_names,
    optional_bool,
    recipe_named,
    section,
    string_list,
)
from fp8advisor.frameworks.formats import ConfigFormat
from fp8advisor.frameworks.module_rules import Predicate, substring_rule
from fp8advisor.reading import parse_json, parse_yaml
from fp8advisor.recipes import Recipe

#: NeMo AutoModel FP8Config fields (nemo_automodel/components/quantization/fp8.py) plus the `enabled` switch.
NEMO_FP8_KEYS = frozenset(
    {
        "enabled",
        "recipe_name",
        "enable_fsdp_float8_all_gather",
        "precompute_float8_dynamic_scale_for_fsdp",
        "force_recompute_fp8_weight_in_bwd",
        "filter_fqns",
        "emulate",
    }
)


#: The true/false fields of NeMo's FP8Config besides `enabled`.
NEMO_FP8_SWITCHES = frozenset(
    {
        "enable_fsdp_float8_all_gather",
        "precompute_float8_dynamic_scale_for_fsdp",
        "force_recompute_fp8_weight_in_bwd",
        "emulate",
    }
)


def load_yaml(path: Path, text: str) -> Any:
    """The YAML document in `text`, read by `reading.parse_yaml`: the safe loader's types, bounded in size
    and depth as its aliases expand (a "billion laughs" file is refused at once); a ConfigError for a file it
    cannot read."""
    return parse_yaml(text, path, error=ConfigError)


def read_nemo(path: Path, text: str, default_recipe: Recipe | None) -> FrameworkConfig:
    """A NeMo AutoModel YAML config: its `fp8:` mapping and `compile.enabled`, each field checked by type."""
    data = load_yaml(path, text)
    if not isinstance(data, dict) or not isinstance(data.get("fp8"), dict):
        raise ConfigError(
            "no `fp8:` section",
            location=str(path),
            hint="NeMo AutoModel reads float8 settings from a top-level fp8: mapping",
        )
    fp8 = data["fp8"]
    notes: list[str] = []
    ignored = key_names(set(fp8) - NEMO_FP8_KEYS)
    if ignored:
        notes.append(f"NeMo AutoModel ignores unknown fp8 keys: {', '.join(ignored)}")
    enabled = optional_bool(fp8.get("enabled"), path, "fp8.enabled") is True
    for key in sorted(NEMO_FP8_SWITCHES):  # FP8Config's other booleans: NeMo tests them for truth too
        optional_bool(fp8.get(key), path, f"fp8.{key}")
    if not enabled:
        notes.append("FP8 is off: fp8.enabled is not true (NeMo AutoModel's default is false)")
    recipe_name = fp8.get("recipe_name")
    recipe = (
        recipe_named(recipe_name, path, "fp8.recipe_name") if recipe_name is not None else Recipe.TENSORWISE
    )
    if recipe_name is None and enabled:
        notes.append("fp8.recipe_name is null: tensorwise, and NeMo skips the FSDP scale precompute")
    all_gather = bool(fp8.get("enable_fsdp_float8_all_gather"))  # checked a bool above; absent: false
    if all_gather and recipe is not Recipe.TENSORWISE:
        # nemo_automodel/components/quantization/fp8.py apply_fp8_to_model: a recipe other than tensorwise
        # takes Float8LinearConfig.from_recipe_name(recipe_name), without the all-gather flag
        notes.append(
            f"fp8.enable_fsdp_float8_all_gather is true but NeMo AutoModel drops it with {recipe.value}: "
            "FSDP float8 all-gather is tensorwise only"
        )
        all_gather = False
    raw_entries = fp8.get("filter_fqns")
    if isinstance(raw_entries, str):
        # NeMo AutoModel (0.7) loops `for fqn in filter_fqns`: over a string's characters, so every layer
        # whose name holds one of them stays bf16. Read it as NeMo does, and say so.
        entries = tuple(dict.fromkeys(raw_entries))
        notes.append(
            f"fp8.filter_fqns is a string ({quote(raw_entries)}), not a list: NeMo AutoModel matches each of "
            "its characters, keeping nearly every layer in bf16; write a YAML list"
        )
    else:
        entries = string_list(raw_entries, path, "fp8.filter_fqns", example='["lm_head", "mlp.gate"]')
    compile_section = section(data.get("compile"), path, "compile")
    compile_enabled = (
        bool(optional_bool(compile_section.get("enabled"), path, "compile.enabled"))
        if compile_section is not None
        else None
    )
    if enabled and not compile_enabled:
        notes.append("compile.enabled is not true: float8 without torch.compile is slower than bf16")
    predicate = substring_rule(entries)
    return FrameworkConfig(
        ConfigFormat.NEMO_AUTOMODEL,
        path,
        enabled,
        recipe,
        entries,
        "substring filter_fqns + nn.Linear with K, N % 16 == 0",
        compile_enabled,
        tuple(notes),
        lambda model: predicate,
        float8_all_gather=all_gather,
    )


def read_filter_list(path: Path, text: str, default_recipe: Recipe | None) -> FrameworkConfig:
    """A bare filter_fqns list (YAML or JSON), completed with `default_recipe` when given."""
    if path.suffix.lower() == ".json":
        data = parse_json(text, path, error=ConfigError)
    else:
        data = load_yaml(path, text)
    recipe = default_recipe
    if isinstance(data, dict):
        if "filter_fqns" not in data:
            raise ConfigError(
                "holds no filter list",
                location=str(path),
                hint="a filter file is a list of FQN substrings, or a mapping with filter_fqns",
            )
        if data.get("recipe") is not None and default_recipe is None:
            recipe = recipe_named(data["recipe"], path, "recipe")
        data = data["filter_fqns"]
    entries = string_list(data if data is not None else [], path, "the filter list", comma_form=True)
    config = FrameworkConfig(ConfigFormat.FILTER, path, True, None, entries, "", None, ())
    if recipe is not None:
        return config.with_recipe(recipe)
    # The rule (with the auto-filter flag) depends on the recipe: the caller completes it with `with_recipe`.
    return replace(
        config,
        rule="substring filter_fqns + nn.Linear with K, N % 16 == 0 (recipe not yet chosen)",
        _rule_factory=_recipe_needed,
    )


def _recipe_needed(model: nn.Module | None) -> Predicate:
    """The rule of a filter list before `with_recipe`: none yet."""
    raise ValueError("a bare filter list names no recipe: call FrameworkConfig.with_recipe(recipe) first")


__all__ = ["NEMO_FP8_KEYS", "NEMO_FP8_SWITCHES", "load_yaml", "read_filter_list", "read_nemo"]
