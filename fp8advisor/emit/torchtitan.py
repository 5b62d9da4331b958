"""torchtitan's configs: the torchtitan 0.2.x job-config TOML and the torchtitan 0.3 recipe function.

  torchtitan-toml   torchtitan 0.2.x job-config sections: `[model] converters = ["quantize.linear.float8"]`,
                    `[quantize.linear.float8]` recipe_name + filter_fqns (substring). recipe_name is always
                    written, but for tensorwise with `--float8-all-gather`: then enable_fsdp_float8_all_gather
                    = true (and torchtitan's recommended precompute) without recipe_name (torchtitan rejects
                    the two together, and no recipe_name is tensorwise). Grouped MoE experts:
                    `[quantize.grouped_mm.float8] fqns`.
  torchtitan-py     torchtitan 0.3 recipe function: one `Float8LinearConverter.Config(recipe_name=...,
                    filter_fqns=[...], model_compile_enabled=True)` call with literal arguments. 0.3 has no
                    tensorwise recipe (ConfigError), and never `auto_filter_small_kn` (it converts nothing in
                    0.3). From a registry target (`torchtitan:llama3/8B`) the file names that model, flavor
                    and torchtitan's own recipe for it; from any other target those are placeholders marked
                    EDIT. Every filter_fqns entry must name a Linear of the model (ConfigError otherwise).

Both train at the point the advice is for: the float8 files compile the model with torchtitan's own switch
(`compile.enable` and "model" in `compile.components`: torchtitan's `model_compile_enabled`, which a base
recipe compiling only the loss would leave false), and every file sets the advised batch
(`training.local_batch_size`), seq (`training.seq_len`), tensor-parallel degree
(`parallelism.tensor_parallel_degree`) and, for a MoE model, expert-parallel degree
(`parallelism.expert_parallel_degree`): the same field names in 0.2.2 (torchtitan/config/job_config.py
`Training`, `Parallelism`, `Compile`) and 0.3.0 (torchtitan/config/configs.py `TrainingConfig`,
`ParallelismConfig`, `CompileConfig`).

filter_fqns is `Advice.filter_fqns`, proven by simulation to convert the advised set (or the safe subset when
no substring list can be exact); `verify` runs torchtitan's own converters on the file where the version it is
for is installed (`fp8advisor.verification.native_torchtitan`). When the advice converts nothing,
`torchtitan_toml_off` and `torchtitan_py_off` leave the float8 converter out. Which torchtitan version a
registry target's names are is checked before either is written
(`fp8advisor.emit.config_file.check_format_target`).
"""

from __future__ import annotations

from fp8advisor.advice.records import Advice
from fp8advisor.emit import mx
from fp8advisor.emit.experts import converted_expert_modules
from fp8advisor.emit.header import FP8_OFF_NOTE
from fp8advisor.emit.syntax import comment, in_docstring, quoted, string_list_lines
from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.filters import entries_matching_nothing
from fp8advisor.frameworks.formats import TORCHTITAN_0_2_EXPERTS_CONVERTER, ConfigFormat
from fp8advisor.inspect import titan
from fp8advisor.recipes import Recipe
from fp8advisor.request import SuggestRequest
from fp8advisor.untrusted import visible


def torchtitan_toml(advice: Advice, header: list[str], request: SuggestRequest) -> str:
    """The torchtitan 0.2.x job-config sections: the float8 converters, recipe_name (or float8 all-gather),
    filter_fqns, and the advised point with the model compiled."""
    experts = converted_expert_modules(advice, ConfigFormat.TORCHTITAN_TOML)
    if not advice.convert_fqns:  # only the experts convert
        return (
            comment(header)
            + comment(["torchtitan 0.2.x job config: merge these sections into your --job.config_file TOML."])
            + "\n[model]\n"
            + f"converters = [{quoted(TORCHTITAN_0_2_EXPERTS_CONVERTER)}]\n"
            + _torchtitan_toml_experts(experts)
            + _toml_point(advice, request, compiled=True)
        )
    entries = advice.filter_fqns
    filter_value = "[]\n" if not entries else "[\n" + string_list_lines(entries, "  ") + "]\n"
    converters = ["quantize.linear.float8"] + ([TORCHTITAN_0_2_EXPERTS_CONVERTER] if experts else [])
    notes = [
        "torchtitan 0.2.x job config: merge these sections into your --job.config_file TOML.",
        "filter_fqns keeps in bf16 every nn.Linear whose FQN contains an entry (substring match).",
    ]
    if advice.recipe is Recipe.TENSORWISE and not request.float8_all_gather:
        notes += [
            "FSDP float8 all-gather (tensorwise): regenerate with --float8-all-gather, which predicts it",
            "and writes enable_fsdp_float8_all_gather = true without recipe_name.",
        ]
    return (
        comment(header)
        + comment(notes)
        + "\n[model]\n"
        + f"converters = [{', '.join(map(quoted, converters))}]\n"
        + "\n[quantize.linear.float8]\n"
        + _toml_recipe(advice, request)
        + f"filter_fqns = {filter_value}"
        + (_torchtitan_toml_experts(experts) if experts else "")
        + _toml_point(advice, request, compiled=True)
    )


def _toml_recipe(advice: Advice, request: SuggestRequest) -> str:
    """recipe_name, or for tensorwise with float8 all-gather the all-gather switches without it: torchtitan
    0.2.2 asserts `not enable_fsdp_float8_all_gather` when recipe_name is set, and builds tensorwise
    `Float8LinearConfig(enable_fsdp_float8_all_gather=...)` when it is not
    (torchtitan/components/quantization/float8.py `Float8LinearConverter.__init__`)."""
    if advice.recipe is Recipe.TENSORWISE and request.float8_all_gather:
        return (
            "# no recipe_name: tensorwise, and torchtitan rejects it with float8 all-gather\n"
            "enable_fsdp_float8_all_gather = true\n"
            "precompute_float8_dynamic_scale_for_fsdp = true  # torchtitan's recommendation with it\n"
        )
    return f"recipe_name = {quoted(advice.recipe.value)}\n"


def _toml_point(advice: Advice, request: SuggestRequest, *, compiled: bool) -> str:
    """`[training]` and `[parallelism]` at the advised point and, for a float8 file, `[compile]` with the
    model among its components (torchtitan 0.2.2: `model_compile_enabled = compile.enable and "model" in
    compile.components`)."""
    text = (
        "\n[training]  # the point fp8advisor advised at (--batch, --seq): change it there and regenerate\n"
        + f"local_batch_size = {request.batch}\n"
        + f"seq_len = {request.seq}\n"
        + "\n[parallelism]  # as advised (--tp"
        + (", --ep" if advice.experts else "")
        + ")\n"
        + f"tensor_parallel_degree = {request.tensor_parallel}\n"
        + (f"expert_parallel_degree = {request.expert_parallel}\n" if advice.experts else "")
    )
    if compiled:
        text += (
            "\n[compile]\n"
            + "enable = true  # float8 without torch.compile is slower than bf16\n"
            + 'components = ["model", "loss"]  # torchtitan compiles the model only when "model" is listed\n'
        )
    return text


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
    if advice.recipe.is_mx:
        converters, imported = mx.torchtitan_converters(advice, experts)
        return _recipe_function(advice, header, request, converters, imported, mx.torchtitan_what(advice))
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
    return _recipe_function(advice, header, request, converters, imported, what)


def _recipe_function(
    advice: Advice, header: list[str], request: SuggestRequest, converters: str, imported: str, what: str
) -> str:
    """The torchtitan 0.3 recipe file around its `converters=[...]` lines (float8 or MXFP8)."""
    low = "MXFP8" if advice.recipe.is_mx else "float8"
    return (
        comment(header)
        + f'"""A torchtitan 0.3 recipe function with the {low} layers fp8advisor advised.\n'
        + "\n"
        + _torchtitan_model_lines(request)
        + what
        + "\n"
        + "It compiles the model and trains at the point fp8advisor advised at (batch, seq, parallel\n"
        + "degrees): what the header's prediction is for.\n"
        + '"""\n'
        + "\n"
        + f"from torchtitan.components.quantization import {imported}\n"
        + _torchtitan_imports(request)
        + "\n"
        + "\n"
        + "def float8_advised() -> Trainer.Config:\n"
        + "    config = base_recipe()\n"
        + f"    config.compile.enable = True  # {low} without torch.compile is slower than bf16\n"
        + '    config.compile.components = ["model", "loss"]  # the model compiles only when listed\n'
        + _py_point(advice, request)
        + "    config.model_spec = model_registry(\n"
        + "        FLAVOR,\n"
        + "        converters=[\n"
        + converters
        + "        ],\n"
        + "    )\n"
        + "    return config\n"
    )


def _py_point(advice: Advice, request: SuggestRequest) -> str:
    """The recipe function's lines setting the advised point: batch, seq, tensor- and (MoE) expert-parallel
    degrees, whatever the base recipe had (deepseek_v3_16b: batch 4, seq 4096, EP 8)."""
    expert_parallel = f"    config.parallelism.expert_parallel_degree = {request.expert_parallel}\n"
    return (
        "    # the point fp8advisor advised at (--batch, --seq, --tp"
        + (", --ep" if advice.experts else "")
        + "): change it there and regenerate\n"
        + f"    config.training.local_batch_size = {request.batch}\n"
        + f"    config.training.seq_len = {request.seq}\n"
        + f"    config.parallelism.tensor_parallel_degree = {request.tensor_parallel}\n"
        + (expert_parallel if advice.experts else "")
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


def torchtitan_toml_off(header: list[str], request: SuggestRequest, advice: Advice) -> str:
    """The torchtitan 0.2.x job config that leaves FP8 off: no float8 converter, the advised point."""
    notes = [
        "torchtitan 0.2.x job config. " + FP8_OFF_NOTE,
        'Leave "quantize.linear.float8" out of [model] converters and train in bf16.',
    ]
    return comment(header) + comment(notes) + _toml_point(advice, request, compiled=False)


def torchtitan_py_off(header: list[str], request: SuggestRequest, advice: Advice) -> str:
    """The torchtitan 0.3 recipe function without Float8LinearConverter, at the advised point."""
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
        + _py_point(advice, request)
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
