"""`FrameworkConfig`: what a training framework does with one config file (FP8 on?, which recipe, which Linear
converts), as the readers of each format return it.

Also the records every reader builds the same way (`fp8_off`: a Python config with no float8 set-up;
`experts_only`: one that converts only the MoE experts) and the two values every format reads with the same
errors (`recipe_named`: a recipe_name; `string_list`: a filter_fqns list, never a string), and
the checked reads of each field's type (`optional_bool`, `section`; `key_names` for a note listing keys of
any type): a value of the wrong type is one ConfigError naming its key, never a traceback or a guess.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from torch import nn

from fp8advisor.errors import ConfigError, parse_choice, quote
from fp8advisor.frameworks.formats import ConfigFormat
from fp8advisor.frameworks.module_rules import Predicate, convert_nothing, substring_or_auto
from fp8advisor.recipes import Recipe


@dataclass(frozen=True)
class FrameworkConfig:
    """What a training framework does with one config file.

    `filter_for(model)` is the exact `module_filter_fn` the framework hands to torchao's
    `convert_to_float8_training` (True = convert); `decides(module, fqn)` is the same for rules that do not
    depend on the whole model (all but accelerate's default). `filter_fqns` are the substring entries when the
    rule has them (for a Python filter: the names in its one literal set, when it has one).
    """

    framework: ConfigFormat
    path: Path
    enabled: bool  # False: the framework trains in bf16 whatever the rest says
    recipe: Recipe | None  # None: the file does not say (a bare filter list); the caller supplies one
    filter_fqns: tuple[str, ...] | None  # substring entries; None when the rule is a Python function
    rule: str  # the matching rule in words, e.g. "substring filter_fqns + K, N % 16 == 0"
    compile_enabled: bool | None = None  # what the file says about torch.compile; None when it does not say
    notes: tuple[str, ...] = ()  # things a user should know (ignored keys, FP8 off, ...)
    _rule_factory: Callable[[nn.Module | None], Predicate] = field(
        default=lambda model: convert_nothing, repr=False, compare=False
    )
    #: Whether the file converts MoE grouped experts (3-D weights): None when its format cannot (NeMo
    #: AutoModel, accelerate, the filter list); see `formats.EXPERT_FORMATS`.
    converts_experts: bool | None = None
    expert_rule: str = ""  # which expert modules it converts, in words
    #: torchao `quantize_`'s filter_fn for the expert modules, (module, fqn) -> bool; None with
    #: converts_experts True: every expert group (torchtitan 0.3's converter has no filter).
    expert_filter: Predicate | None = field(default=None, repr=False, compare=False)
    #: Whether FSDP all-gathers the converted weights in float8 as the file sets it up (the framework's
    #: default where the file does not say); None where the format has no such setting (the filter list) or
    #: the value cannot be read without running the file.
    float8_all_gather: bool | None = None

    def filter_for(self, model: nn.Module | None = None) -> Predicate:
        """The framework's module filter for `model`: `(module, fqn) -> bool`, True = convert to float8."""
        if not self.enabled:
            return convert_nothing
        return self._rule_factory(model)

    def decides(self, module: nn.Module, fqn: str) -> bool:
        """True when the framework converts `module` (registered as `fqn`) to float8."""
        return self.filter_for(None)(module, fqn)

    def with_recipe(self, recipe: Recipe) -> FrameworkConfig:
        """A bare filter list completed with the recipe the caller chose (`--recipe`, or the advice's): the
        rule with the auto-filter flag depends on it. Other formats name their recipe: unchanged."""
        if self.framework is not ConfigFormat.FILTER:
            return self
        rule, factory, notes = substring_or_auto(recipe, self.filter_fqns or (), auto_passes_linear=True)
        return replace(
            self,
            recipe=recipe,
            rule=rule,
            notes=tuple(dict.fromkeys(self.notes + notes)),
            _rule_factory=factory,
        )

    def to_json(self) -> dict:
        return {
            "framework": self.framework.value,
            "path": str(self.path),
            "enabled": self.enabled,
            "recipe": self.recipe.value if self.recipe else None,
            "filter_fqns": list(self.filter_fqns) if self.filter_fqns is not None else None,
            "rule": self.rule,
            "compile_enabled": self.compile_enabled,
            "converts_experts": self.converts_experts,
            "expert_rule": self.expert_rule,
            "float8_all_gather": self.float8_all_gather,
            "notes": list(self.notes),
        }


def fp8_off(framework: ConfigFormat, path: Path, recipe: Recipe, missing: str) -> FrameworkConfig:
    """A Python config with no float8 set-up: the framework trains every layer in bf16. `recipe` is the
    framework's default, never used (nothing converts)."""
    return FrameworkConfig(
        framework,
        path,
        False,
        recipe,
        None,
        f"none: no {missing}(...) in the file",
        None,
        (f"FP8 is off: no {missing}(...) in the file",),
    )


def recipe_named(name: Any, path: Path, where: str) -> Recipe:
    """The recipe a file names; a ConfigError naming the file and `where` for an unknown name, or a value
    that is not a name at all (a number, a list: quoted short, never expanded)."""
    if not isinstance(name, str):
        raise ConfigError(
            f"recipe_name must be a string, not {_kind(name)} {quote(name)}",
            location=f"{path} ({where})",
            hint=f"use one of: {', '.join(recipe.value for recipe in Recipe)}",
        )
    return parse_choice(Recipe, name, "recipe_name", error=ConfigError, location=f"{path} ({where})")


def string_list(
    value: Any,
    path: Path,
    where: str,
    example: str = '["output", "attention.wk"]',
    *,
    comma_form: bool = False,
) -> tuple[str, ...]:
    """A list of strings (absent: empty); else a ConfigError naming `where` (the key) whose hint shows
    `example`. A string is refused: the frameworks read these keys as lists (`for fqn in filter_fqns`
    iterates a string's characters; torchtitan's "a,b,c" is its command line's form, not its TOML's), unless
    `comma_form` (a bare filter list, this tool's own format) reads it as "a,b,c"."""
    if value is None:
        return ()
    if isinstance(value, str) and comma_form:
        return tuple(entry.strip() for entry in value.split(",") if entry.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(entry, str) for entry in value):
        return tuple(value)
    raise ConfigError(
        f"{where} must be a list of strings, not {_kind(value)} {quote(value)}",
        location=str(path),
        hint=f"write a list of strings, e.g. {example}",
    )


def optional_bool(value: Any, path: Path, where: str) -> bool | None:
    """A true/false switch (absent: None); a ConfigError naming `where` for any other value: a framework
    testing it for truth would take the string "false" as true, so no other value is guessed at."""
    if value is None or isinstance(value, bool):
        return value
    raise ConfigError(
        f"{where} must be true or false, not {_kind(value)} {quote(value)}",
        location=str(path),
        hint=f"set {where} to true or false",
    )


def section(value: Any, path: Path, where: str) -> dict[Any, Any] | None:
    """A mapping of settings (absent: None); a ConfigError naming `where` when it is anything else. Its keys
    are not checked: a YAML key can be a number or null, which the frameworks ignore as an unknown key (their
    readers look keys up by name), and so do the readers here (`key_names` names them in a note)."""
    if value is None or isinstance(value, dict):
        return value
    raise ConfigError(
        f"{where} must be a mapping of settings, not {_kind(value)} {quote(value)}",
        location=str(path),
        hint=f"write {where} as key: value lines",
    )


def key_names(keys: Any) -> list[str]:
    """The keys of a mapping read from a file, as a message names them, sorted: a name as it is, any other
    key (a YAML number, null, a date) quoted; never a comparison of a number with a string."""
    return sorted(key if isinstance(key, str) else quote(key) for key in keys)


def _kind(value: Any) -> str:
    """ "a list", "an int", "null": what a value from a file is, for a message."""
    if value is None:
        return "null"
    name = {bool: "boolean", str: "string", dict: "mapping"}.get(type(value), type(value).__name__)
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def experts_only(linear: FrameworkConfig, missing: str) -> FrameworkConfig:
    """A file without the Linear set-up that converts the experts: its note says so (not "FP8 is off")."""
    if linear.enabled:
        return linear
    return replace(
        linear, notes=(f"no {missing}(...): every nn.Linear stays bf16, only the MoE experts convert",)
    )


__all__ = [
    "FrameworkConfig",
    "experts_only",
    "fp8_off",
    "key_names",
    "optional_bool",
    "recipe_named",
    "section",
    "string_list",
]
