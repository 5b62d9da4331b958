"""torchtitan's configs: the torchtitan 0.2.x job-config TOML and the torchtitan 0.3 recipe function.

  torchtitan-toml   torchtitan 0.2.x job-config sections: `[model] converters = ["quantize.linear.float8"]`,
                    `[quantize.linear.float8]` recipe_name + filter_fqns (substring), `[compile] enable =
                    true`. recipe_name is always written; enable_fsdp_float8_all_gather never (torchtitan
                    rejects the two together). Grouped MoE experts: `[quantize.grouped_mm.float8] fqns`.
  torchtitan-py     torchtitan 0.3 recipe function: one `Float8LinearConverter.Config(recipe_name=...,
                    filter_fqns=[...], model_compile_enabled=True)` call with literal arguments. 0.3 has no
                    tensorwise recipe (ConfigError), and never `auto_filter_small_kn` (it converts nothing in
                    0.3). From a registry target (`torchtitan:llama3/8B`) the file names that model, flavor
                    and torchtitan's own recipe for it; from any other target those are placeholders marked
                    EDIT. Every filter_fqns entry must name a Linear of the model (ConfigError otherwise).

filter_fqns is `Advice.filter_fqns`, proven by simulation to convert the advised set (or the safe subset when
no substring list can be exact). When the advice converts nothing, `torchtitan_toml_off` and
`torchtitan_py_off` leave the float8 converter out.
"""

from __future__ import annotations

from fp8advisor.advice.records import Advice
from fp8advisor.emit.experts import converted_expert_modules
from fp8advisor.emit.header import FP8_OFF_NOTE
from fp8advisor.emit.syntax import comment, in_docstring, quoted, string_list_lines
from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.filters import entries_matching_nothing
from fp8advisor.frameworks.formats import TORCHTITAN_0_2_EXPERTS_CONVERTER, ConfigFormat
from fp8advisor.inspect import titan
from fp8advisor.request import SuggestRequest
from fp8advisor.untrusted import visible


def torchtitan_toml(advice: Advice, header: list[str]) -> str:
    """The torchtitan 0.2.x job-config sections: the float8 converters, recipe_name, filter_fqns, compile."""
    experts = converted_expert_modules(advice, ConfigFormat.TORCHTITAN_TOML)
    if not advice.convert_fqns:  # only the experts convert
        return (
            comment(header)
            + comment(["torchtitan 0.2.x job config: merge these sections into your --job.config_file TOML."])
            + "\n[model]\n"
            + f"converters = [{quoted(TORCHTITAN_0_2_EXPERTS_CONVERTER)}]\n"
            + _torchtitan_toml_experts(experts)
            + "\n[compile]\n"
            + "enable = true  # float8 without torch.compile is slower than bf16\n"
        )
    entries = advice.filter_fqns
    filter_value = "[]\n" if not entries else "[\n" + string_list_lines(entries, "  ") + "]\n"
    converters = ["quantize.linear.float8"] + ([TORCHTITAN_0_2_EXPERTS_CONVERTER] if experts else [])
    return (
        comment(header)
        + comment(
            [
                "torchtitan 0.2.x job config: merge these sections into your --job.config_file TOML.",
                "filter_fqns keeps in bf16 every nn.Linear whose FQN contains an entry (substring match).",
                "Tensorwise with FSDP float8 all-gather: delete recipe_name and set",
                "enable_fsdp_float8_all_gather = true (torchtitan rejects the two together).",
            ]
        )
        + "\n[model]\n"
        + f"converters = [{', '.join(map(quoted, converters))}]\n"
        + "\n[quantize.linear.float8]\n"
        + f"recipe_name = {quoted(advice.recipe.value)}\n"
        + f"filter_fqns = {filter_value}"
        + (_torchtitan_toml_experts(experts) if experts else "")
        + "\n[compile]\n"
        + "enable = true  # float8 without torch.compile is slower than bf16\n"
    )


def _torchtitan_toml_experts(modules: tuple[str, ...]) -> str:
    """The `[quantize.grouped_mm.float8]` section naming the expert modules that convert."""
    return (
        "\n[quantize.grouped_mm.float8]\n"
        + "# the expert modules whose grouped GEMMs run in float8 (a module whose FQN holds an entry)\n"
        + "fqns = [\n"
        + string_list_lines(modules, "  ")
        + "]\n"
    )


def unmatched_filter_entries(advice: Advice) -> list[str]:
    """The filter_fqns entries that name no Linear of the model (torchtitan's substring rule)."""
    return entries_matching_nothing(advice.filter_fqns, advice.linear_fqns)


def torchtitan_py(advice: Advice, header: list[str], request: SuggestRequest) -> str:
    """The torchtitan 0.3 recipe function with its float8 converters (ConfigError: an entry names nothing)."""
    unmatched = unmatched_filter_entries(advice)
    if unmatched:  # the list is derived from these names: an entry naming nothing is a bug, never written
        raise ConfigError(
            f"filter_fqns entries {', '.join(map(repr, unmatched))} name no Linear layer of {request.target}",
            hint="report this: the filter list must come from the model's own Linear FQNs",
        )
    entries = advice.filter_fqns
    filter_value = "[]" if not entries else "[\n" + string_list_lines(entries, " " * 20) + " " * 16 + "]"
    experts = bool(converted_expert_modules(advice, ConfigFormat.TORCHTITAN_PY))
    linear = bool(advice.convert_fqns)
    converters = ""
    if linear:
        converters += (
            "            Float8LinearConverter.Config(\n"
            + f"                recipe_name={quoted(advice.recipe.value)},\n"
            + f"                filter_fqns={filter_value},\n"
            + "                model_compile_enabled=True,\n"
            + "            ),\n"
        )
    if experts:
        converters += (
            "            # every GroupedExperts: rowwise grouped GEMMs, whatever recipe_name says\n"
            "            Float8GroupedExpertsConverter.Config(model_compile_enabled=True),\n"
        )
    imported = ", ".join(
        name
        for name, wanted in (("Float8GroupedExpertsConverter", experts), ("Float8LinearConverter", linear))
        if wanted
    )
    what = (
        "Keep the Float8LinearConverter.Config call as generated. filter_fqns keeps in bf16 every Linear\n"
        "whose FQN contains an entry (substring match).\n"
        if linear
        else "No Linear layer is worth converting: only the MoE experts run in float8.\n"
    )
    return (
        comment(header)
        + '"""A torchtitan 0.3 recipe function with the float8 layers fp8advisor advised.\n'
        + "\n"
        + _torchtitan_model_lines(request)
        + what
        + '"""\n'
        + "\n"
        + f"from torchtitan.components.quantization import {imported}\n"
        + _torchtitan_imports(request)
        + "\n"
        + "\n"
        + "def float8_advised() -> Trainer.Config:\n"
        + "    config = base_recipe()\n"
        + "    config.compile.enable = True  # float8 without torch.compile is slower than bf16\n"
        + "    config.model_spec = model_registry(\n"
        + "        FLAVOR,\n"
        + "        converters=[\n"
        + converters
        + "        ],\n"
        + "    )\n"
        + "    return config\n"
    )


def _registry_name(request: SuggestRequest) -> titan.RegistryName | None:
    """The torchtitan registry model and flavor the target names; None for any other target."""
    return titan.parse_registry_name(request.target) if titan.is_registry_target(request.target) else None


def _torchtitan_model_lines(request: SuggestRequest) -> str:
    """The docstring's paragraph on which torchtitan model the file is for."""
    name = _registry_name(request)
    target = in_docstring(request.target)
    if name is not None:
        return (
            f"For torchtitan 0.3's {name.model} model, flavor {in_docstring(name.flavor)} "
            f"({in_docstring(str(name))}):\n"
            "the model whose Linear layers fp8advisor read. The base recipe is torchtitan's own for that\n"
            "flavor: replace it with yours (EDIT), keeping model_registry and FLAVOR.\n"
            "\n"
        )
    return (
        f"Written from {target}, not from torchtitan's registry: the model_registry import, the\n"
        "base recipe and FLAVOR below are PLACEHOLDERS (llama3 8B) marked EDIT. Set them to the model\n"
        f"torchtitan builds, whose Linear FQNs must be those of {target}.\n"
        "\n"
    )


def _torchtitan_imports(request: SuggestRequest) -> str:
    """The model_registry and base recipe imports, the Trainer import and FLAVOR."""
    name = _registry_name(request)
    if name is None:
        return (
            "from torchtitan.models.llama3 import model_registry"
            "  # EDIT: placeholder, your model's registry\n"
            "from torchtitan.models.llama3.config_registry import llama3_8b as base_recipe"
            "  # EDIT: placeholder, your base recipe\n"
            "from torchtitan.trainer import Trainer\n"
            "\n"
            'FLAVOR = "8B"  # EDIT: placeholder, your model flavor\n'
        )
    recipe = titan.base_recipe(name)
    recipe_import = stub = ""
    if recipe is not None:
        recipe_import = (
            f"from torchtitan.models.{name.model}.config_registry import {recipe} as base_recipe"
            "  # EDIT: your base recipe\n"
        )
    else:
        stub = (
            "\n"
            "\n"
            "def base_recipe() -> Trainer.Config:  # EDIT: return your base recipe\n"
            f"    raise NotImplementedError({quoted(f'torchtitan has no recipe for {name}: write yours')})\n"
        )
    return (
        f"from torchtitan.models.{name.model} import model_registry\n"
        + recipe_import
        + "from torchtitan.trainer import Trainer\n"
        + "\n"
        + f"FLAVOR = {quoted(name.flavor)}  # {visible(str(name))}\n"
        + stub
    )


def torchtitan_toml_off(header: list[str], _request: SuggestRequest) -> str:
    """The torchtitan 0.2.x job config that leaves FP8 off: comments only, no float8 converter."""
    notes = [
        "torchtitan 0.2.x job config. " + FP8_OFF_NOTE,
        'Leave "quantize.linear.float8" out of [model] converters and train in bf16.',
    ]
    return comment(header) + comment(notes)


def torchtitan_py_off(header: list[str], request: SuggestRequest) -> str:
    """The torchtitan 0.3 recipe function without Float8LinearConverter."""
    return (
        comment(header)
        + '"""A torchtitan 0.3 recipe function without float8: fp8advisor advised no layer.\n'
        + "\n"
        + _torchtitan_model_lines(request)
        + FP8_OFF_NOTE
        + "\n"
        + '"""\n'
        + "\n"
        + _torchtitan_imports(request)
        + "\n"
        + "\n"
        + "def float8_advised() -> Trainer.Config:\n"
        + "    config = base_recipe()\n"
        + "    config.model_spec = model_registry(FLAVOR)  # no Float8LinearConverter: bf16\n"
        + "    return config\n"
    )


__all__ = [
    "torchtitan_py",
    "torchtitan_py_off",
    "torchtitan_toml",
    "torchtitan_toml_off",
    "unmatched_filter_entries",
]
