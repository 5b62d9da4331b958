"""Read a training config FILE the way its framework would: is FP8 on, with which recipe, and which Linear
converts.

Every format `fp8advisor suggest` writes is read here, and hand-written files in the same formats:

- torchtitan-toml: torchtitan 0.2.x job config. `[model] converters` must hold "quantize.linear.float8";
  `[quantize.linear.float8]` recipe_name (absent = tensorwise), filter_fqns (substring), an
  "auto_filter_small_kn" entry switching to torchao's `_auto_filter_for_recipe`. Unknown keys, and recipe_name
  together with enable_fsdp_float8_all_gather, are rejected as torchtitan rejects them.
- torchtitan-py: torchtitan 0.3 recipe function; the keyword literals of `Float8LinearConverter.Config(...)`
  (recipe_name absent = rowwise, its default there). Read with `ast`, never run.
- nemo-automodel: NeMo AutoModel YAML. `fp8.enabled` must be true; recipe_name (null = tensorwise);
  filter_fqns (substring). Unknown keys are ignored, as NeMo ignores them (and named in `notes`).
- accelerate: Python, `AORecipeKwargs(config=..., module_filter_func=...)`; without a filter function
  accelerate keeps the first and the last nn.Linear in bf16.
- torchao: Python, `convert_to_float8_training(model, config=..., module_filter_fn=...)`.
- megatron: Megatron-Core's precision config (YAML with `configs` and `matchers`) is recognised and refused
  with a ConfigError: Transformer Engine's modules in Megatron's own model are not simulated here.
- filter: a bare list of filter_fqns (YAML or JSON; a mapping with `filter_fqns` is accepted too), matched by
  substring with the divisibility rule, as torchtitan, NeMo and torchao's auto filter match it.

Python files are parsed, never imported. The recipe comes from the literal in
`Float8LinearConfig.from_recipe_name("...")` or `Float8LinearConfig(...)`. The filter function
(`module_filter_fn` / `module_filter_func`) decides exactly which layers the framework converts. By default
none of the file's code runs: `fp8advisor.frameworks.filter_eval.FilterEvaluator` evaluates the function from
its syntax tree (names, literal sets, fqn tests, `isinstance(module, nn.Linear)`, in_features/out_features
arithmetic, the file's literal constants) and refuses anything else with a ConfigError naming the construct
and its line. With `trust_config=True` (`verify --trust-config`) we compile ONLY that function's definition
(or lambda), with the literal module-level constants it names plus `torch` and `nn`, under a short list of
builtins, and run it as the framework will. Either way nothing else in the file runs: no imports of the user's
packages, no model, no training. A filter that needs more (other functions of the file, imported helpers) is
reported as a ConfigError naming what is missing, never guessed.
"""

from __future__ import annotations

import ast
import builtins
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from torch import nn

from fp8advisor import compat
from fp8advisor.errors import ConfigError, parse_choice, quote
from fp8advisor.frameworks.filter_eval import NOT_LITERAL, FilterEvaluator, literal_value
from fp8advisor.frameworks.filters import dims_divisible_by_16, matches_filter
from fp8advisor.frameworks.formats import TORCHTITAN_0_2_EXPERTS_CONVERTER as TORCHTITAN_EXPERTS_CONVERTER
from fp8advisor.frameworks.formats import ConfigFormat, parse_format, read_header
from fp8advisor.recipes import Recipe, parse_recipe

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: The filter_fqns entry with which torchtitan switches to torchao's `_auto_filter_for_recipe`.
AUTO_FILTER_FLAG = "auto_filter_small_kn"

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
#: The builtins a filter function may use: enough for name and shape tests, nothing that reaches outside.
_FILTER_BUILTINS = {
    name: getattr(builtins, name)
    for name in (
        "isinstance",
        "issubclass",
        "any",
        "all",
        "len",
        "set",
        "frozenset",
        "tuple",
        "list",
        "dict",
        "str",
        "int",
        "bool",
        "getattr",
        "hasattr",
        "min",
        "max",
        "sorted",
        "range",
        "enumerate",
        "zip",
        "reversed",
        "abs",
        "ValueError",
        "TypeError",
        "KeyError",
        "AttributeError",
    )
}

Predicate = Callable[[nn.Module, str], bool]


# ----------------------------------------------------------------------------------------------------
# The matching rules, as each framework codes them


def divisible_by_16(module: nn.Module) -> bool:
    """`filters.dims_divisible_by_16` on a real module: `N, K = weight.shape`."""
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


def _nothing(module: nn.Module, fqn: str) -> bool:
    return False


# ----------------------------------------------------------------------------------------------------
# The result


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
        default=lambda model: _nothing, repr=False, compare=False
    )
    #: Whether the file converts MoE grouped experts (3-D weights): None when its format cannot (NeMo
    #: AutoModel, accelerate, the filter list); see `formats.EXPERT_FORMATS`.
    converts_experts: bool | None = None
    expert_rule: str = ""  # which expert modules it converts, in words
    #: torchao `quantize_`'s filter_fn for the expert modules, (module, fqn) -> bool; None with
    #: converts_experts True: every expert group (torchtitan 0.3's converter has no filter).
    expert_filter: Predicate | None = field(default=None, repr=False, compare=False)

    def filter_for(self, model: nn.Module | None = None) -> Predicate:
        """The framework's module filter for `model`: `(module, fqn) -> bool`, True = convert to float8."""
        if not self.enabled:
            return _nothing
        return self._rule_factory(model)

    def decides(self, module: nn.Module, fqn: str) -> bool:
        """True when the framework converts `module` (registered as `fqn`) to float8."""
        return self.filter_for(None)(module, fqn)

    def with_recipe(self, recipe: Recipe) -> FrameworkConfig:
        """A bare filter list completed with the recipe the caller chose (`--recipe`, or the advice's): the
        rule with the auto-filter flag depends on it. Other formats name their recipe: unchanged."""
        if self.framework is not ConfigFormat.FILTER:
            return self
        rule, factory, notes = _substring_or_auto(recipe, self.filter_fqns or (), auto_passes_linear=True)
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
            "notes": list(self.notes),
        }


# ----------------------------------------------------------------------------------------------------
# Reading


def detect_framework(path: Path, text: str) -> ConfigFormat:
    """The format of a config file, from its extension and (for .py and .yaml) what it holds."""
    suffix = path.suffix.lower()
    if suffix == ".toml":
        return ConfigFormat.TORCHTITAN_TOML
    if suffix == ".json":
        return ConfigFormat.FILTER
    if suffix in (".yaml", ".yml"):
        data = _load_yaml(path, text)
        if isinstance(data, dict) and "fp8" in data:
            return ConfigFormat.NEMO_AUTOMODEL
        if isinstance(data, dict) and "matchers" in data and "configs" in data:
            return ConfigFormat.MEGATRON  # Megatron-Core's --te-precision-config-file
        return ConfigFormat.FILTER
    if suffix == ".py":
        tree = _parse_python(path, text)
        called = {_call_name(node) for node in ast.walk(tree) if isinstance(node, ast.Call)}
        if called & {"Float8LinearConverter.Config", "Float8GroupedExpertsConverter.Config"}:
            return ConfigFormat.TORCHTITAN_PY
        if "AORecipeKwargs" in called:
            return ConfigFormat.ACCELERATE
        if called & {"convert_to_float8_training", "Float8TrainingOpConfig"}:
            return ConfigFormat.TORCHAO
        # No float8 set-up: a file that trains in bf16 (what `suggest` writes when nothing is worth
        # converting). Its framework, from what it calls or imports, else from the header `suggest` wrote.
        if "Accelerator" in called:
            return ConfigFormat.ACCELERATE
        if any(_imports_from(node, "torchtitan") for node in ast.walk(tree)):
            return ConfigFormat.TORCHTITAN_PY
        written = _format_in_header(text)
        if written in (ConfigFormat.TORCHAO, ConfigFormat.ACCELERATE, ConfigFormat.TORCHTITAN_PY):
            return written
        raise ConfigError(
            f"{path} sets up no float8 training this tool can read",
            hint="expected Float8LinearConverter.Config(...) (torchtitan 0.3), AORecipeKwargs(...) "
            "(accelerate) or "
            "convert_to_float8_training(...) (torchao); write one with `fp8advisor suggest --format ...`",
        )
    raise ConfigError(
        f"{path}: unsupported config file type {suffix or '(no extension)'}",
        hint="give a torchtitan .toml, a NeMo AutoModel .yaml, a Python config (torchtitan 0.3, "
        "accelerate, torchao) "
        "or a filter list (.yaml/.json)",
    )


def _imports_from(node: ast.AST, package: str) -> bool:
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").split(".")[0] == package
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] == package for alias in node.names)
    return False


def _format_in_header(text: str) -> ConfigFormat | None:
    """The `--format` in the header `fp8advisor suggest` wrote (`emit.header_lines`), if any."""
    header = read_header(text)
    return header.format if header is not None else None


def _fp8_off(framework: ConfigFormat, path: Path, recipe: Recipe, missing: str) -> FrameworkConfig:
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


def read_config(
    path: str | Path,
    *,
    framework: ConfigFormat | str | None = None,
    recipe: Recipe | str | None = None,
    trust_config: bool = False,
) -> FrameworkConfig:
    """Read `path` as its framework would. `framework` overrides detection; `recipe` is used only where the
    file names none (a bare filter list). `trust_config`: run a Python filter function instead of evaluating
    it from its syntax (see the module docstring). Raises ConfigError (exit 2) for unreadable or unsupported
    files, and for a Python filter this tool cannot evaluate without running it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no such config file: {path}", hint="check the path given to --config") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read {path}: {error}") from None
    chosen = parse_format(framework) if framework is not None else detect_framework(path, text)
    default_recipe = parse_recipe(recipe) if recipe is not None else None
    readers = {
        ConfigFormat.TORCHTITAN_TOML: _read_torchtitan_toml,
        ConfigFormat.TORCHTITAN_PY: _read_torchtitan_py,
        ConfigFormat.NEMO_AUTOMODEL: _read_nemo,
        ConfigFormat.ACCELERATE: _read_accelerate,
        ConfigFormat.TORCHAO: _read_torchao,
        ConfigFormat.FILTER: _read_filter,
    }
    if chosen is ConfigFormat.MEGATRON:
        raise ConfigError(
            f"{path} is a Megatron-Core precision config: verify cannot check it (it runs torchao float8 on "
            "the PyTorch model; Megatron runs Transformer Engine modules in its own GPTModel)",
            hint="check that the file is current with `fp8advisor suggest ... --format megatron --check "
            f"{path}` (the command in its header); verify a --format torchao config of the same advice",
        )
    reader = readers[chosen]
    if chosen in (ConfigFormat.ACCELERATE, ConfigFormat.TORCHAO):
        reader = functools.partial(reader, trust_config=trust_config)
    return reader(path, text, default_recipe)


def _recipe(name: Any, path: Path, where: str) -> Recipe:
    return parse_choice(Recipe, name, "recipe_name", error=ConfigError, location=f"{path} ({where})")


def _string_list(value: Any, path: Path, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):  # torchtitan's CLI form "a,b,c"
        return tuple(entry.strip() for entry in value.split(",") if entry.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(entry, str) for entry in value):
        return tuple(value)
    raise ConfigError(
        f"{where} must be a list of strings, not {quote(value)}",
        location=str(path),
        hint='write filter_fqns = ["output", "attention.wk"]',
    )


def _substring_or_auto(
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
            return "torchao auto filter on Linear.Config: converts nothing", lambda model: _nothing, (note,)
        predicate = torchao_auto_filter(recipe, clean)
        return (
            f"torchao _auto_filter_for_recipe({recipe.value!r}) + substring filter_fqns {list(clean)}",
            lambda model: predicate,
            (),
        )
    predicate = substring_rule(entries)
    return "substring filter_fqns + nn.Linear with K, N % 16 == 0", lambda model: predicate, ()


def _toml_table(data: dict, path: Path, *keys: str) -> dict:
    """The table at `[a.b.c]` (empty when absent); a ConfigError when a key on the way is not a table."""
    for depth, key in enumerate(keys, start=1):
        data = data.get(key, {})
        if not isinstance(data, dict):
            raise ConfigError(
                f"[{'.'.join(keys[:depth])}] must be a table, not {type(data).__name__}", location=str(path)
            )
    return data


def _read_torchtitan_toml(path: Path, text: str, default_recipe: Recipe | None) -> FrameworkConfig:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(
            f"{path} is not valid TOML: {error}", hint="fix the syntax; tomllib must read it"
        ) from None
    converters = _string_list(_toml_table(data, path, "model").get("converters"), path, "[model] converters")
    section = _toml_table(data, path, "quantize", "linear", "float8")
    unknown = sorted(set(section) - TORCHTITAN_FLOAT8_KEYS)
    if unknown:
        raise ConfigError(
            f"[quantize.linear.float8] has keys torchtitan 0.2.x rejects: {', '.join(unknown)}",
            location=str(path),
            hint=f"the accepted keys are {', '.join(sorted(TORCHTITAN_FLOAT8_KEYS))}",
        )
    recipe_name = section.get("recipe_name")
    if recipe_name is not None and section.get("enable_fsdp_float8_all_gather"):
        raise ConfigError(
            "torchtitan rejects recipe_name together with enable_fsdp_float8_all_gather = true",
            location=str(path),
            hint="for tensorwise with float8 all-gather leave recipe_name out; for rowwise drop the "
            "all-gather flag",
        )
    recipe = (
        _recipe(recipe_name, path, "[quantize.linear.float8]")
        if recipe_name is not None
        else Recipe.TENSORWISE
    )
    entries = _string_list(section.get("filter_fqns"), path, "[quantize.linear.float8] filter_fqns")
    compile_section = _toml_table(data, path, "compile")
    compile_enabled = bool(compile_section.get("enable", False)) and "model" in compile_section.get(
        "components", ["model", "loss"]
    )
    notes: list[str] = []
    enabled = TORCHTITAN_CONVERTER in converters
    if not enabled:
        legacy = ' ("float8" is the pre-0.2 name)' if "float8" in converters else ""
        notes.append(f'FP8 is off: [model] converters does not include "{TORCHTITAN_CONVERTER}"{legacy}')
    rule, factory, rule_notes = _substring_or_auto(recipe, entries, auto_passes_linear=True)
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
    )


#: torchtitan 0.2.0's converter of MoE grouped GEMMs and the keys of its section (at tag v0.2.0:
#: torchtitan/components/quantization/float8.py `Float8GroupedMMConverter`, whose quantize_ filter is
#: `target_fqn in cur_fqn` for each of `[quantize.grouped_mm.float8] fqns`): the converter's name is
#: `formats.TORCHTITAN_0_2_EXPERTS_CONVERTER`.
TORCHTITAN_EXPERTS_KEYS = frozenset({"fqns"})


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
    return _string_list(section.get("fqns"), path, "[quantize.grouped_mm.float8] fqns")


def _read_nemo(path: Path, text: str, default_recipe: Recipe | None) -> FrameworkConfig:
    data = _load_yaml(path, text)
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
    recipe = _recipe(recipe_name, path, "fp8.recipe_name") if recipe_name is not None else Recipe.TENSORWISE
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
        entries = _string_list(raw_entries, path, "fp8.filter_fqns")
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


def _read_filter(path: Path, text: str, default_recipe: Recipe | None) -> FrameworkConfig:
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"not valid JSON: {error}", location=str(path)) from None
    else:
        data = _load_yaml(path, text)
    recipe = default_recipe
    if isinstance(data, dict):
        if "filter_fqns" not in data:
            raise ConfigError(
                "holds no filter list",
                location=str(path),
                hint="a filter file is a list of FQN substrings, or a mapping with filter_fqns",
            )
        if data.get("recipe") is not None and default_recipe is None:
            recipe = _recipe(data["recipe"], path, "recipe")
        data = data["filter_fqns"]
    entries = _string_list(data if data is not None else [], path, "the filter list")
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
    raise ValueError("a bare filter list names no recipe: call FrameworkConfig.with_recipe(recipe) first")


# ----------------------------------------------------------------------------------------------------
# Python configs: read with ast, never imported


def _parse_python(path: Path, text: str) -> ast.Module:
    try:
        return ast.parse(text, filename=str(path))
    except SyntaxError as error:
        raise ConfigError(
            f"syntax error: {error.msg}",
            location=f"{path}:{error.lineno}",
            hint="fix the file so that Python can parse it",
        ) from None


def _call_name(node: ast.Call) -> str:
    """`Float8LinearConverter.Config` for `x.Float8LinearConverter.Config(...)`: the last two dotted parts."""
    parts: list[str] = []
    func: ast.AST = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    parts.reverse()
    if len(parts) >= 2 and parts[-1] == "Config":
        return ".".join(parts[-2:])
    return parts[-1] if parts else ""


def _calls_named(tree: ast.Module, name: str) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and _call_name(node) == name]


def _single_call(tree: ast.Module, name: str, path: Path) -> ast.Call:
    calls = _calls_named(tree, name)
    if not calls:
        raise ConfigError(f"no {name}(...) call", location=str(path))
    if len(calls) > 1:
        lines = ", ".join(str(call.lineno) for call in calls)
        raise ConfigError(
            f"{len(calls)} {name}(...) calls (lines {lines}): which one trains is unclear",
            location=f"{path}:{calls[0].lineno}",
            hint="keep one float8 setup per config file",
        )
    return calls[0]


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    return None


def _literal(node: ast.expr, path: Path, what: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ConfigError(
            f"{what} is not a literal: {ast.unparse(node)}",
            location=f"{path}:{node.lineno}",
            hint="the file is read without running it: write the value as a literal (a string, a list of "
            "strings)",
        ) from None


def _module_assignments(tree: ast.Module) -> dict[str, ast.expr]:
    found: dict[str, ast.expr] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign):
            for target in statement.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = statement.value
        elif (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and statement.value
        ):
            found[statement.target.id] = statement.value
    return found


def _resolve_name(node: ast.expr | None, tree: ast.Module) -> ast.expr | None:
    """Follow `config = ...` at module level once, so `config=config` reads the assignment."""
    if isinstance(node, ast.Name):
        assigned = _module_assignments(tree).get(node.id)
        if assigned is not None:
            return assigned
    return node


def _read_torchtitan_py(path: Path, text: str, default_recipe: Recipe | None) -> FrameworkConfig:
    tree = _parse_python(path, text)
    linear = _read_torchtitan_py_linear(path, tree)
    if not _calls_named(tree, GROUPED_EXPERTS_CONVERTER):
        return replace(linear, converts_experts=False, expert_rule=f"no {GROUPED_EXPERTS_CONVERTER}(...)")
    _single_call(tree, GROUPED_EXPERTS_CONVERTER, path)
    return replace(
        _experts_only(linear, "Float8LinearConverter.Config"),
        converts_experts=True,
        expert_rule=f"{GROUPED_EXPERTS_CONVERTER}: every GroupedExperts of the model (rowwise, no filter)",
    )


def _experts_only(linear: FrameworkConfig, missing: str) -> FrameworkConfig:
    """A file without the Linear set-up that converts the experts: its note says so (not "FP8 is off")."""
    if linear.enabled:
        return linear
    return replace(
        linear, notes=(f"no {missing}(...): every nn.Linear stays bf16, only the MoE experts convert",)
    )


#: torchtitan 0.3's converter of MoE grouped experts (torchtitan/components/quantization/float8.py).
GROUPED_EXPERTS_CONVERTER = "Float8GroupedExpertsConverter.Config"


def _read_torchtitan_py_linear(path: Path, tree: ast.Module) -> FrameworkConfig:
    if not _calls_named(tree, "Float8LinearConverter.Config"):
        return _fp8_off(ConfigFormat.TORCHTITAN_PY, path, Recipe.ROWWISE, "Float8LinearConverter.Config")
    call = _single_call(tree, "Float8LinearConverter.Config", path)
    if call.args:
        raise ConfigError(
            "Float8LinearConverter.Config takes keyword arguments only", location=f"{path}:{call.lineno}"
        )
    values = {
        kw.arg: _literal(kw.value, path, f"Float8LinearConverter.Config({kw.arg}=...)")
        for kw in call.keywords
        if kw.arg is not None
    }
    # torchtitan 0.3's Float8LinearConverter.Config defaults recipe_name to "rowwise".
    recipe = _recipe(values.get("recipe_name", "rowwise"), path, "Float8LinearConverter.Config")
    entries = _string_list(values.get("filter_fqns"), path, "filter_fqns")
    notes: list[str] = []
    compile_enabled = values.get("model_compile_enabled")
    if compile_enabled is not True:
        notes.append("model_compile_enabled is not True: float8 without torch.compile is slower than bf16")
    rule, factory, rule_notes = _substring_or_auto(recipe, entries, auto_passes_linear=False)
    notes.extend(rule_notes)
    # torchtitan 0.3 tests Linear.Config in_features/out_features: the same shapes as nn.Linear's weight.
    return FrameworkConfig(
        ConfigFormat.TORCHTITAN_PY,
        path,
        True,
        recipe,
        entries,
        rule,
        compile_enabled if isinstance(compile_enabled, bool) else None,
        tuple(notes),
        factory,
    )


def _recipe_from_python(node: ast.expr | None, tree: ast.Module, path: Path) -> Recipe:
    """The recipe of `Float8LinearConfig.from_recipe_name("...")`, `Float8LinearConfig(...)` or None."""
    node = _resolve_name(node, tree)
    if node is None or (isinstance(node, ast.Constant) and node.value is None):
        return Recipe.TENSORWISE  # torchao: config None means Float8LinearConfig(), tensorwise
    if isinstance(node, ast.Call):
        name = _call_name(node)
        if (
            name == "replace"
            and node.args
            and {kw.arg for kw in node.keywords} <= _TENSORWISE_KEYWORDS - {"emulate"}
        ):  # dataclasses.replace(<config>, pad_inner_dim=True): padding, the same scaling
            return _recipe_from_python(node.args[0], tree, path)
        if name == "from_recipe_name":
            argument = node.args[0] if node.args else _keyword(node, "recipe_name")
            if argument is None:
                raise ConfigError("from_recipe_name() without a recipe", location=f"{path}:{node.lineno}")
            if isinstance(argument, ast.Attribute):  # Float8LinearRecipeName.ROWWISE
                return _recipe(argument.attr.lower(), path, "Float8LinearRecipeName")
            return _recipe(_literal(argument, path, "the recipe name"), path, "from_recipe_name")
        if name == "Float8LinearConfig":
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


def _read_torchao(
    path: Path, text: str, default_recipe: Recipe | None, *, trust_config: bool = False
) -> FrameworkConfig:
    tree = _parse_python(path, text)
    linear = _read_torchao_linear(path, tree, trust_config=trust_config)
    calls = [
        call
        for call in _calls_named(tree, "quantize_")
        if (config := _resolve_name(_keyword(call, "config"), tree)) is not None
        and isinstance(config, ast.Call)
        and _call_name(config) == "Float8TrainingOpConfig"
    ]
    if not calls:
        return replace(
            linear, converts_experts=False, expert_rule="no quantize_(..., Float8TrainingOpConfig())"
        )
    if len(calls) > 1:
        raise ConfigError(
            f"{len(calls)} quantize_(..., config=Float8TrainingOpConfig()) calls: which experts convert is "
            "unclear",
            location=f"{path}:{calls[0].lineno}",
            hint="keep one quantize_ call for the experts, with one filter_fn",
        )
    filter_node = _keyword(calls[0], "filter_fn")
    if filter_node is None or (isinstance(filter_node, ast.Constant) and filter_node.value is None):
        raise ConfigError(
            "quantize_(..., config=Float8TrainingOpConfig()) without filter_fn applies torchao's default "
            "filter (nn.Linear), not the experts",
            location=f"{path}:{calls[0].lineno}",
            hint="pass filter_fn=<a function of (module, fqn) naming the expert modules>",
        )
    predicate, rule, _entries = _filter_function(filter_node, tree, path, trust_config=trust_config)
    return replace(
        _experts_only(linear, "convert_to_float8_training"),
        converts_experts=True,
        expert_rule=f"quantize_(Float8TrainingOpConfig) with {rule}",
        expert_filter=predicate,
    )


def _read_torchao_linear(path: Path, tree: ast.Module, *, trust_config: bool) -> FrameworkConfig:
    if not _calls_named(tree, "convert_to_float8_training"):
        return _fp8_off(ConfigFormat.TORCHAO, path, Recipe.TENSORWISE, "convert_to_float8_training")
    call = _single_call(tree, "convert_to_float8_training", path)
    recipe = _recipe_from_python(_keyword(call, "config"), tree, path)
    filter_node = _keyword(call, "module_filter_fn")
    if filter_node is None or (isinstance(filter_node, ast.Constant) and filter_node.value is None):
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
        )
    predicate, rule, entries = _filter_function(filter_node, tree, path, trust_config=trust_config)
    return FrameworkConfig(
        ConfigFormat.TORCHAO, path, True, recipe, entries, rule, None, (), lambda model: predicate
    )


def _read_accelerate(
    path: Path, text: str, default_recipe: Recipe | None, *, trust_config: bool = False
) -> FrameworkConfig:
    tree = _parse_python(path, text)
    accelerators = _calls_named(tree, "Accelerator")
    precisions = [_keyword(node, "mixed_precision") for node in accelerators]
    literal_precisions = [p.value for p in precisions if isinstance(p, ast.Constant)]
    if not _calls_named(tree, "AORecipeKwargs") and literal_precisions and "fp8" not in literal_precisions:
        off = _fp8_off(ConfigFormat.ACCELERATE, path, Recipe.TENSORWISE, "AORecipeKwargs")
        return replace(off, notes=(f"FP8 is off: Accelerator(mixed_precision={literal_precisions[0]!r})",))
    call = _single_call(tree, "AORecipeKwargs", path)
    recipe = _recipe_from_python(_keyword(call, "config"), tree, path)
    notes: list[str] = []
    enabled = True
    if literal_precisions and "fp8" not in literal_precisions:
        enabled = False
        notes.append(f"FP8 is off: Accelerator(mixed_precision={literal_precisions[0]!r}), not 'fp8'")
    elif not literal_precisions:
        notes.append(
            'no Accelerator(mixed_precision="fp8") in the file: FP8 must be enabled by the launch config'
        )
    if accelerators and not any(_keyword(node, "kwargs_handlers") is not None for node in accelerators):
        notes.append(
            "Accelerator(...) has no kwargs_handlers=[...]: the AORecipeKwargs would not be used "
            "(the docs misspell it)"
        )
    filter_node = _keyword(call, "module_filter_func")
    if filter_node is None or (isinstance(filter_node, ast.Constant) and filter_node.value is None):
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
        )
    predicate, rule, entries = _filter_function(filter_node, tree, path, trust_config=trust_config)
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
    )


def _filter_function(
    node: ast.expr, tree: ast.Module, path: Path, *, trust_config: bool
) -> tuple[Predicate, str, tuple[str, ...] | None]:
    """The filter the framework would call: evaluated from its syntax, or (`trust_config`) compiled alone and
    run; see the module docstring."""
    if isinstance(node, ast.Call) and _call_name(node) == "_auto_filter_for_recipe":
        recipe_node = node.args[0] if node.args else _keyword(node, "recipe")
        fqns_node = node.args[1] if len(node.args) > 1 else _keyword(node, "filter_fqns")
        recipe = _recipe(_literal(recipe_node, path, "the recipe"), path, "_auto_filter_for_recipe")
        entries = _string_list(
            _literal(fqns_node, path, "filter_fqns") if fqns_node else [], path, "filter_fqns"
        )
        return (
            torchao_auto_filter(recipe, entries),
            f"torchao _auto_filter_for_recipe({recipe.value!r}) + substring {list(entries)}",
            entries,
        )
    if isinstance(node, ast.Lambda):
        target = ast.copy_location(ast.Name(id="_fp8advisor_filter", ctx=ast.Store()), node)
        definition: ast.stmt = ast.copy_location(ast.Assign(targets=[target], value=node), node)
        name = "_fp8advisor_filter"
        function_node: ast.FunctionDef | ast.Lambda = node
    elif isinstance(node, ast.Name):
        name = node.id
        definitions = [s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == name]
        if not definitions:
            assigned = _module_assignments(tree).get(name)
            if isinstance(assigned, ast.Lambda):
                return _filter_function(assigned, tree, path, trust_config=trust_config)
            raise ConfigError(
                f"the filter function {name} is not defined at module level in {path.name}",
                location=str(path),
                hint="define the filter as a top-level `def` in the same file so that it can be checked "
                "alone",
            )
        definition = definitions[-1]
        function_node = definition
    else:
        raise ConfigError(
            f"cannot read the module filter {ast.unparse(node)}",
            location=f"{path}:{node.lineno}",
            hint="pass a top-level function or a lambda as module_filter_fn / module_filter_func",
        )
    entries = _literal_entries(function_node, tree)
    shown = name if name != "_fp8advisor_filter" else "lambda"
    if not trust_config:
        evaluated = FilterEvaluator(function_node, tree, path)
        return evaluated, f"Python filter {shown}() (line {function_node.lineno})", entries
    namespace = _filter_namespace(function_node, tree, path)
    module = ast.fix_missing_locations(ast.Module(body=[definition], type_ignores=[]))
    exec(
        compile(module, str(path), "exec"), namespace
    )  # only the filter definition, and only with --trust-config: see the module docstring
    function = namespace[name]

    def decides(module: nn.Module, fqn: str) -> bool:
        try:
            return bool(function(module, fqn))
        except Exception as error:
            raise ConfigError(
                f"the filter function raised on {fqn!r}: {type(error).__name__}: {error}",
                location=f"{path}:{function_node.lineno}",
                hint="the filter may use only its arguments, literal module-level constants, torch and nn",
            ) from error

    return decides, f"Python filter {shown}() (line {function_node.lineno}), run (--trust-config)", entries


def _filter_namespace(function_node: ast.AST, tree: ast.Module, path: Path) -> dict[str, Any]:
    """Builtins, torch and nn, and the literal module-level constants the function names."""
    import torch

    namespace: dict[str, Any] = {"__builtins__": dict(_FILTER_BUILTINS), "torch": torch, "nn": nn}
    assignments = _module_assignments(tree)
    local_names = _bound_names(function_node)
    wanted = {
        n.id for n in ast.walk(function_node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }
    missing = []
    for name in sorted(wanted - local_names - set(namespace) - set(_FILTER_BUILTINS)):
        value = assignments.get(name)
        if value is None:
            missing.append(name)
            continue
        constant = literal_value(value)
        if constant is NOT_LITERAL:
            raise ConfigError(
                f"the filter uses {name}, which is not a literal constant: {ast.unparse(value)[:80]}",
                location=f"{path}:{value.lineno}",
                hint="write the constant as a literal (a set, list or tuple of strings) so it can be "
                "read alone",
            )
        namespace[name] = constant
    if missing:
        raise ConfigError(
            "the filter function uses names this tool cannot supply without running the file: "
            f"{', '.join(missing)}",
            location=f"{path}:{getattr(function_node, 'lineno', '?')}",
            hint="a filter checked by verify may use its arguments, literal constants of the same file, "
            "torch and nn",
        )
    return namespace


def _bound_names(function_node: ast.AST) -> set[str]:
    """Parameters and names assigned inside the function (loop variables, comprehension targets, ...)."""
    bound: set[str] = set()
    for node in ast.walk(function_node):
        if isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return bound


def _literal_entries(function_node: ast.AST, tree: ast.Module) -> tuple[str, ...] | None:
    """The strings a filter tests names against, when they are one literal (to name unused entries)."""
    assignments = _module_assignments(tree)
    collections: list[Any] = []
    for node in ast.walk(function_node):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in assignments:
            value = literal_value(assignments[node.id])
            if (
                isinstance(value, (set, frozenset, list, tuple))
                and value
                and all(isinstance(v, str) for v in value)
            ):
                collections.append(value)
        elif isinstance(node, (ast.Set, ast.List, ast.Tuple)):
            try:
                value = ast.literal_eval(node)
            except ValueError:
                continue
            if value and all(isinstance(v, str) for v in value):
                collections.append(value)
    if len(collections) == 1:
        return tuple(sorted(collections[0]))
    return None


def _load_yaml(path: Path, text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(
            f"{path} is not valid YAML: {error}", hint="fix the syntax; yaml.safe_load must read it"
        ) from None
