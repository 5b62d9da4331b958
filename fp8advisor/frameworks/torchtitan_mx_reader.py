"""torchtitan 0.3's MXFP8 converters in a recipe file, read as torchtitan reads them (parsed, never run).

- `MXFP8LinearConverter.Config(fqns=[...], model_compile_enabled=...)`: an INCLUSION list. torchtitan
  converts each Linear.Config whose FQN contains an entry (substring), every one when `fqns` is empty, and
  checks no K or N (torchtitan/components/quantization/mx.py:53-60 and 82-83). Its MXFP8Linear is torchao's
  with its defaults (mx.py:38-44): the recipe is `mxfp8_rceil`.
- `MXFP8GroupedExpertsConverter.Config(recipe_name="mxfp8_rceil", pad_multiple=128,
  model_compile_enabled=...)`: every GroupedExperts, no filter (mx.py:149-200); recipe_name is a
  `Literal["mxfp8_rceil"]` (mx.py:154); pad_multiple a multiple of 128 (its default, 32, is refused: the
  same docstring says "The CuTeDSL quantization kernel on sm_100 requires multiples of 128", mx.py:161-165).

Each keyword is checked by name and type, as the keyword-only dataclasses take them, and each call to be
torchtitan's (`framework_calls.check_framework_call`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.config_record import FrameworkConfig, experts_only, fp8_off, string_list
from fp8advisor.frameworks.filters import matches_filter
from fp8advisor.frameworks.formats import ConfigFormat
from fp8advisor.frameworks.framework_calls import check_framework_call
from fp8advisor.frameworks.module_scope import ModuleScope
from fp8advisor.frameworks.python_file import calls_named, parse_python, single_call
from fp8advisor.frameworks.torchtitan_reader import (
    GROUPED_EXPERTS_CONVERTER,
    LINEAR_CONVERTER,
    MX_CONVERTERS,
    MX_GROUPED_EXPERTS_CONVERTER,
    MX_LINEAR_CONVERTER,
    keyword_literals,
    read_torchtitan_py,
)
from fp8advisor.recipes import MX_BLOCK_SIZE, MX_GROUPED_ALIGNMENT, Recipe

#: The keywords of torchtitan 0.3's MX converter configs (mx.py:53-60, 152-165, and the base class's
#: model_compile_enabled, components/quantization/__init__.py:28-31).
MX_LINEAR_KEYS = frozenset({"fqns", "model_compile_enabled"})
MX_EXPERTS_KEYS = frozenset({"recipe_name", "pad_multiple", "model_compile_enabled"})

#: The rule in words, as the report shows it.
INCLUSION_RULE = (
    "fqns inclusion (substring; an empty list: every nn.Linear), no K/N check (torchtitan 0.3 MX)"
)


def inclusion_rule(entries: tuple[str, ...]):
    """torchtitan 0.3's MX rule as a module filter: (module, fqn) -> convert."""

    def predicate(module, fqn: str) -> bool:
        return not entries or matches_filter(fqn, entries)

    return predicate


def read_torchtitan_py_any(path: Path, text: str, default_recipe: Recipe | None) -> FrameworkConfig:
    """A torchtitan 0.3 recipe file: its MX converters when it calls one (`read_torchtitan_py_mx`), else its
    float8 ones (`torchtitan_reader.read_torchtitan_py`); both kinds at once are refused."""
    tree = parse_python(path, text)
    if not any(calls_named(tree, name) for name in MX_CONVERTERS):
        return read_torchtitan_py(path, text, default_recipe)
    float8 = [name for name in (LINEAR_CONVERTER, GROUPED_EXPERTS_CONVERTER) if calls_named(tree, name)]
    if float8:
        raise ConfigError(
            f"the file calls both torchtitan's MX converters and {', '.join(float8)}: which recipe a layer "
            "trains with is unclear",
            location=str(path),
            hint="keep either the MXFP8 converters or the float8 ones",
        )
    return read_torchtitan_py_mx(ModuleScope(tree, path))


def read_torchtitan_py_mx(scope: ModuleScope) -> FrameworkConfig:
    """The MX converters of a torchtitan 0.3 recipe file (module docstring)."""
    path, tree = scope.path, scope.tree
    if not calls_named(tree, MX_LINEAR_CONVERTER):
        linear = fp8_off(ConfigFormat.TORCHTITAN_PY, path, Recipe.MXFP8_RCEIL, MX_LINEAR_CONVERTER)
    else:
        call = single_call(tree, MX_LINEAR_CONVERTER, path)
        check_framework_call(call, scope, "torchtitan", MX_LINEAR_CONVERTER)
        values = keyword_literals(call, path, MX_LINEAR_CONVERTER, MX_LINEAR_KEYS)
        entries = string_list(values.get("fqns"), path, f"{MX_LINEAR_CONVERTER[:-7]}(fqns=...)")
        notes = []
        if values.get("model_compile_enabled") is not True:
            notes.append("model_compile_enabled is not True: MXFP8 without torch.compile is slower than bf16")
        if not entries:
            notes.append("fqns is empty: torchtitan converts every Linear to MXFP8, the head included")
        predicate = inclusion_rule(entries)
        linear = FrameworkConfig(
            ConfigFormat.TORCHTITAN_PY,
            path,
            True,
            Recipe.MXFP8_RCEIL,
            entries,
            INCLUSION_RULE,
            values.get("model_compile_enabled"),
            tuple(notes),
            lambda model: predicate,
            float8_all_gather=False,
        )
    if not calls_named(tree, MX_GROUPED_EXPERTS_CONVERTER):
        return replace(linear, converts_experts=False, expert_rule=f"no {MX_GROUPED_EXPERTS_CONVERTER}(...)")
    call = single_call(tree, MX_GROUPED_EXPERTS_CONVERTER, path)
    check_framework_call(call, scope, "torchtitan", MX_GROUPED_EXPERTS_CONVERTER)
    values = keyword_literals(call, path, MX_GROUPED_EXPERTS_CONVERTER, MX_EXPERTS_KEYS)
    recipe_name = values.get("recipe_name", Recipe.MXFP8_RCEIL.value)
    if recipe_name != Recipe.MXFP8_RCEIL.value:
        raise ConfigError(
            f"{MX_GROUPED_EXPERTS_CONVERTER}(recipe_name={recipe_name!r}): torchtitan 0.3 takes "
            f"{Recipe.MXFP8_RCEIL.value!r} only (a Literal, mx.py:154)",
            location=f"{path}:{call.lineno}",
            hint=f'write recipe_name="{Recipe.MXFP8_RCEIL.value}"',
        )
    pad = values.get("pad_multiple", MX_BLOCK_SIZE)
    if not isinstance(pad, int) or isinstance(pad, bool) or pad <= 0 or pad % MX_GROUPED_ALIGNMENT:
        raise ConfigError(
            f"{MX_GROUPED_EXPERTS_CONVERTER}(pad_multiple={pad!r}): each expert's token group must be padded "
            f"to a multiple of {MX_GROUPED_ALIGNMENT} (torchao's sm_100 MXFP8 cast; torchtitan's own "
            "docstring of pad_multiple says so)",
            location=f"{path}:{call.lineno}",
            hint=f"write pad_multiple={MX_GROUPED_ALIGNMENT} (or a multiple of it)",
        )
    return replace(
        experts_only(linear, MX_LINEAR_CONVERTER),
        converts_experts=True,
        expert_rule=f"{MX_GROUPED_EXPERTS_CONVERTER}: every GroupedExperts of the model (MXFP8, no filter)",
    )


__all__ = [
    "INCLUSION_RULE",
    "MX_EXPERTS_KEYS",
    "MX_LINEAR_KEYS",
    "inclusion_rule",
    "read_torchtitan_py_any",
    "read_torchtitan_py_mx",
]
