"""The YAML formats read as their framework reads them: NeMo AutoModel's config and a bare filter list.

- nemo-automodel: NeMo AutoModel YAML. `fp8.enabled` must be true; recipe_name (null = tensorwise);
  filter_fqns (substring). Unknown keys are ignored, as NeMo ignores them (and named in `notes`).
- filter: a bare list of filter_fqns (YAML or JSON; a mapping with `filter_fqns` is accepted too), matched by
  substring with the divisibility rule, as torchtitan, NeMo and torchao's auto filter match it. It names no
  recipe: the caller completes it with `FrameworkConfig.with_recipe`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from torch import nn

from fp8advisor.errors import ConfigError, quote
from fp8advisor.frameworks.config_record import FrameworkConfig, recipe_named, string_list
from fp8advisor.frameworks.formats import ConfigFormat
from fp8advisor.frameworks.module_rules import Predicate, substring_rule
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


def load_yaml(path: Path, text: str) -> Any:
    """`yaml.safe_load`, with a ConfigError for a file it cannot read."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(
            f"{path} is not valid YAML: {error}", hint="fix the syntax; yaml.safe_load must read it"
        ) from None


def read_nemo(path: Path, text: str, default_recipe: Recipe | None) -> FrameworkConfig:
    """A NeMo AutoModel YAML config: its `fp8:` mapping and `compile.enabled`."""
    data = load_yaml(path, text)
    if not isinstance(data, dict) or not isinstance(data.get("fp8"), dict):
        raise ConfigError(
            "no `fp8:` section",
            location=str(path),
            hint="NeMo AutoModel reads float8 settings from a top-level fp8: mapping",
        )
    section = data["fp8"]
    notes: list[str] = []
    ignored = sorted(set(section) - NEMO_FP8_KEYS)
    if ignored:
        notes.append(f"NeMo AutoModel ignores unknown fp8 keys: {', '.join(map(str, ignored))}")
    enabled = section.get("enabled") is True
    if not enabled:
        notes.append("FP8 is off: fp8.enabled is not true (NeMo AutoModel's default is false)")
    recipe_name = section.get("recipe_name")
    recipe = (
        recipe_named(recipe_name, path, "fp8.recipe_name") if recipe_name is not None else Recipe.TENSORWISE
    )
    if recipe_name is None and enabled:
        notes.append("fp8.recipe_name is null: tensorwise, and NeMo skips the FSDP scale precompute")
    raw_entries = section.get("filter_fqns")
    if isinstance(raw_entries, str):
        # NeMo AutoModel (0.7) loops `for fqn in filter_fqns`: over a string's characters, so every layer
        # whose name holds one of them stays bf16. Read it as NeMo does, and say so.
        entries = tuple(dict.fromkeys(raw_entries))
        notes.append(
            f"fp8.filter_fqns is a string ({quote(raw_entries)}), not a list: NeMo AutoModel matches each of "
            "its characters, keeping nearly every layer in bf16; write a YAML list"
        )
    else:
        entries = string_list(raw_entries, path, "fp8.filter_fqns")
    compile_section = data.get("compile")
    compile_enabled = bool(compile_section.get("enabled")) if isinstance(compile_section, dict) else None
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
    )


def read_filter_list(path: Path, text: str, default_recipe: Recipe | None) -> FrameworkConfig:
    """A bare filter_fqns list (YAML or JSON), completed with `default_recipe` when given."""
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"not valid JSON: {error}", location=str(path)) from None
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
    entries = string_list(data if data is not None else [], path, "the filter list")
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


__all__ = ["NEMO_FP8_KEYS", "load_yaml", "read_filter_list", "read_nemo"]
