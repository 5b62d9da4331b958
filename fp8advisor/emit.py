"""Training configs that realise an `Advice`: torchtitan, NeMo AutoModel, accelerate, torchao, bare list.

Formats (`--format`):

  torchtitan-toml   torchtitan 0.2.x job-config sections: `[model] converters = ["quantize.linear.float8"]`,
                    `[quantize.linear.float8]` recipe_name + filter_fqns (substring), `[compile] enable =
                    true`. recipe_name is always written; enable_fsdp_float8_all_gather never (torchtitan
                    rejects the two together).
  torchtitan-py     torchtitan 0.3 recipe function: one `Float8LinearConverter.Config(recipe_name=...,
                    filter_fqns=[...], model_compile_enabled=True)` call with literal arguments. 0.3 has no
                    tensorwise recipe (ConfigError), and never `auto_filter_small_kn` (it converts nothing in
                    0.3). From a registry target (`torchtitan:llama3/8B`) the file names that model, flavor
                    and torchtitan's own recipe for it; from any other target those are placeholders marked
                    EDIT. Every filter_fqns entry must name a Linear of the model (ConfigError otherwise).
  nemo-automodel    YAML with `compile:` (enabled: true) and `fp8:` (enabled: true, explicit recipe_name,
                    filter_fqns).
  accelerate        Python: `Accelerator(mixed_precision="fp8", kwargs_handlers=[AORecipeKwargs(config=
                    Float8LinearConfig.from_recipe_name(...), module_filter_func=module_filter_func)])`.
  torchao           Python: `convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(
                    ...), module_filter_fn=module_filter_fn)`.
  filter            the bare filter_fqns list: YAML (default), or JSON when the output file ends in .json.
  megatron          Megatron-Core + Transformer Engine: the `--te-precision-config-file` YAML of core_v0.16+
                    (ordered glob matchers over Megatron's module names, `fp8advisor.megatron`), with the
                    flags to pass and, for older versions, the positional `--first-last-layers-bf16` flags
                    and what they lose, in its comments. tensorwise only (TE has no rowwise recipe).

When the advice converts nothing, the files leave FP8 off instead of enabling it with a filter that excludes
every layer (`FP8_OFF_RENDERERS`): torchtitan-toml without the float8 converter, torchtitan-py without
`Float8LinearConverter`, NeMo AutoModel `fp8: enabled: false`, accelerate `mixed_precision="bf16"`, torchao
without `convert_to_float8_training`. The header says why. The bare filter list has no switch: it still keeps
every layer in bf16, and its header says to leave FP8 off. `verify` reads all of them back as FP8 off, which
is then the advised outcome.

The substring formats carry `Advice.filter_fqns`, proven by simulation to convert the advised set (or the safe
subset when no list can be exact). The two Python formats carry an exact filter: a top-level function testing
`fqn in FLOAT8_LAYERS`, a sorted literal frozenset of the advised FQNs, so they convert exactly the advice.
`fp8advisor.configs.read_config` reads every one of them back.

Every file but JSON (which has no comments) starts with a comment header: fp8advisor's version, the model
target, batch and seq, recipe and profile as the user typed them, and the command that regenerates or checks
it. Nothing depends on the machine or the time, so the same inputs give byte-identical files anywhere.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from fp8advisor import __version__, megatron, titan
from fp8advisor.advise import DEFAULT_MIN_SPEEDUP, Advice, Predictor
from fp8advisor.errors import ConfigError
from fp8advisor.files import GENERATED_MARK, write_atomic
from fp8advisor.filters import entries_matching_nothing
from fp8advisor.formats import CHECK_PREFIX, ConfigFormat, parse_format
from fp8advisor.profile import weakest_provenance
from fp8advisor.recipes import Recipe


@dataclass(frozen=True)
class Request:
    """What the user asked for, as typed: the header and the regenerate command are built from it alone."""

    target: str
    batch: int
    seq: int
    recipe: str = "auto"  # as typed: a recipe name or "auto"
    profile: str | None = None  # as typed with --profile; None = chosen automatically
    min_speedup: float = DEFAULT_MIN_SPEEDUP
    tensor_parallel: int = 1
    measured: str | None = None  # as typed with --measured; None = found automatically, or none

    def command(
        self,
        fmt: ConfigFormat,
        output: str | None = None,
        *,
        chosen_profile: str | None = None,
        chosen_measured: str | None = None,
    ) -> str:
        """The `fp8advisor suggest` command line that regenerates the file (`--check FILE` verifies it).

        `chosen_profile` pins the profile that was chosen automatically, so that CI on another machine
        (another GPU, or none) predicts with the same figures; `chosen_measured` likewise the in-context
        results found in the profile directory (CI needs that directory: commit a copy, give its path).
        """
        words = [
            "fp8advisor",
            "suggest",
            _shell_word(self.target),
            "--batch",
            str(self.batch),
            "--seq",
            str(self.seq),
        ]
        words += ["--recipe", self.recipe]
        profile = self.profile if self.profile is not None else chosen_profile
        if profile is not None:
            words += ["--profile", _shell_word(profile)]
        if self.min_speedup != DEFAULT_MIN_SPEEDUP:
            words += ["--min-speedup", f"{self.min_speedup:g}"]
        if self.tensor_parallel != 1:
            words += ["--tp", str(self.tensor_parallel)]
        measured = self.measured if self.measured is not None else chosen_measured
        if measured is not None:
            words += ["--measured", _shell_word(measured)]
        words += ["--format", fmt.value]
        if output is not None:
            words += ["-o", _shell_word(output)]
        return " ".join(words)


def _shell_word(text: str) -> str:
    import shlex

    return shlex.quote(text)


def header_lines(advice: Advice, request: Request, fmt: ConfigFormat, what: str | None = None) -> list[str]:
    """The comment header, without comment markers. `what`: the line saying what the file converts, for a
    format that is not a filter list (megatron)."""
    profile = advice.profile_name
    if request.profile is not None and request.profile != advice.profile_name:
        profile += f" (--profile {request.profile})"
    recipe = advice.recipe.value + (" (chosen by --recipe auto)" if request.recipe == "auto" else "")
    lines = [
        f"{GENERATED_MARK} {__version__} (fp8advisor suggest). Do not edit: regenerate it.",
        f"model: {request.target}  batch: {request.batch}  seq: {request.seq}"
        + (f"  tensor parallel: {request.tensor_parallel}" if request.tensor_parallel != 1 else ""),
        f"recipe: {recipe}  profile: {profile} ({advice.profile_provenance})  "
        f"min speedup: {advice.min_speedup:g}",
        what if what is not None else _what_it_converts(advice, fmt),
    ]
    if advice.in_context is not None:
        lines.append(
            f"decided in context: {len(advice.profile_decisions)} layers, from {advice.in_context.source}"
        )
    pinned = pinned_command(request, advice, fmt)
    lines.append(f"{CHECK_PREFIX}{pinned} --check <this file>")
    return lines


def _what_it_converts(advice: Advice, fmt: ConfigFormat) -> str:
    if not advice.convert_fqns:
        return f"FP8 left off: {fp8_off_reason(advice)}"
    fl = advice.filter_list
    if fmt in (ConfigFormat.TORCHAO, ConfigFormat.ACCELERATE):
        return f"converts exactly the {len(advice.convert_fqns)} advised Linear layers (exact module filter)"
    if fl.exact:
        return f"filter_fqns simulated: converts exactly the {len(advice.convert_fqns)} advised Linear layers"
    return (
        f"filter_fqns simulated: converts {len(fl.converted)} of the {len(advice.convert_fqns)} "
        "advised layers; "
        f"no substring list can be exact, {len(fl.demoted)} kept in bf16 (see fp8advisor suggest)"
    )


def fp8_off_reason(advice: Advice) -> str:
    """Why the advice converts nothing, in one clause for the header of a file that leaves FP8 off."""
    timed = [layer for layer in advice.layers if layer.counts_in_linear_time]
    if not timed:
        return "nothing is worth converting: no Linear float8 could convert runs in the forward"
    best = max(timed, key=lambda layer: layer.predicted_speedup or 0.0)
    return (
        f"nothing is worth converting: no layer is predicted to reach {advice.min_speedup:.2f}x with "
        f"{advice.recipe.value} (best: {best.fqn} at {best.predicted_speedup:.2f}x); train in bf16"
    )


def pinned_command(request: Request, advice: Advice, fmt: ConfigFormat, output: str | None = None) -> str:
    """`request.command` with what was chosen automatically (the profile, in-context results) pinned."""
    source = None if advice.in_context is None else str(advice.in_context.source)
    return request.command(fmt, output, chosen_profile=advice.profile_name, chosen_measured=source)


def _comment(lines: list[str]) -> str:
    return "".join(f"# {line}\n" if line else "#\n" for line in lines)


def _quoted(text: str) -> str:
    """A double-quoted string valid in TOML and Python (JSON escapes are valid in both)."""
    return json.dumps(text)


def _string_list_lines(entries: tuple[str, ...] | list[str], indent: str) -> str:
    return "".join(f"{indent}{_quoted(entry)},\n" for entry in entries)


def check_format_recipe(fmt: ConfigFormat, recipe: Recipe | str) -> None:
    """A ConfigError when the format's framework has no such recipe: torchtitan 0.3 has no tensorwise,
    Transformer Engine (megatron) only tensorwise. `suggest` asks before the work, `render` again."""
    recipe = Recipe(recipe)
    if fmt is ConfigFormat.TORCHTITAN_PY and recipe is Recipe.TENSORWISE:
        raise ConfigError(
            "torchtitan 0.3 has no tensorwise recipe (Float8LinearConverter.Config accepts rowwise and "
            "rowwise_with_gw_hp)",
            hint="use --recipe rowwise (or rowwise_with_gw_hp), or --format torchtitan-toml for "
            "torchtitan 0.2.x",
        )
    if fmt is ConfigFormat.MEGATRON:
        megatron.check_recipe(recipe)


def what_the_file_does(advice: Advice, fmt: ConfigFormat, predictor: Predictor | None = None) -> str:
    """The header line saying what the file of `fmt` converts (or why it leaves FP8 off), for the terminal."""
    if fmt is ConfigFormat.MEGATRON:
        return _megatron_what(megatron.plan(advice, predictor))
    return _what_it_converts(advice, fmt)


def leaves_fp8_off(advice: Advice, fmt: ConfigFormat | None, predictor: Predictor | None = None) -> bool:
    """Whether the file of `fmt` trains nothing in float8: the advice converts nothing, or (megatron, whose
    fused GEMMs are decided as one) the plan puts no module in float8. No format: the advice alone."""
    if fmt is ConfigFormat.MEGATRON:
        return not megatron.plan(advice, predictor).float8_names
    return not advice.convert_fqns


def render(
    advice: Advice,
    fmt: ConfigFormat | str,
    request: Request,
    *,
    output: str | None = None,
    predictor: Predictor | None = None,
) -> str:
    """The text of the config file in format `fmt`. `output`: the path as typed; for the filter format a name
    ending in .json gives the bare JSON list, any other YAML. `predictor`: the advice's own
    (`advise.default_predictor` of its profile), with which the megatron format decides a fused GEMM as one;
    without it, by the sum of its parts' predicted times."""
    fmt = parse_format(fmt)
    check_format_recipe(fmt, advice.recipe)  # a file FP8 is off in must still be one its framework takes
    if fmt is ConfigFormat.MEGATRON:
        return _megatron(advice, request, predictor)
    header = header_lines(advice, request, fmt)
    if not advice.convert_fqns and fmt in FP8_OFF_RENDERERS:
        return FP8_OFF_RENDERERS[fmt](header, request)
    if fmt is ConfigFormat.TORCHTITAN_TOML:
        return _torchtitan_toml(advice, header)
    if fmt is ConfigFormat.TORCHTITAN_PY:
        return _torchtitan_py(advice, header, request)
    if fmt is ConfigFormat.NEMO_AUTOMODEL:
        return _nemo_automodel(advice, header)
    if fmt is ConfigFormat.ACCELERATE:
        return _accelerate(advice, header)
    if fmt is ConfigFormat.TORCHAO:
        return _torchao(advice, header)
    as_json = output is not None and output.lower().endswith(".json")
    return _filter(advice, header, as_json=as_json)


def _torchtitan_toml(advice: Advice, header: list[str]) -> str:
    entries = advice.filter_fqns
    filter_value = "[]\n" if not entries else "[\n" + _string_list_lines(entries, "  ") + "]\n"
    return (
        _comment(header)
        + _comment(
            [
                "torchtitan 0.2.x job config: merge these sections into your --job.config_file TOML.",
                "filter_fqns keeps in bf16 every nn.Linear whose FQN contains an entry (substring match).",
                "Tensorwise with FSDP float8 all-gather: delete recipe_name and set",
                "enable_fsdp_float8_all_gather = true (torchtitan rejects the two together).",
            ]
        )
        + "\n[model]\n"
        + 'converters = ["quantize.linear.float8"]\n'
        + "\n[quantize.linear.float8]\n"
        + f"recipe_name = {_quoted(advice.recipe.value)}\n"
        + f"filter_fqns = {filter_value}"
        + "\n[compile]\n"
        + "enable = true  # float8 without torch.compile is slower than bf16\n"
    )


def unmatched_filter_entries(advice: Advice) -> list[str]:
    """The filter_fqns entries that name no Linear of the model (torchtitan's substring rule)."""
    return entries_matching_nothing(advice.filter_fqns, advice.linear_fqns)


def format_warnings(advice: Advice, fmt: ConfigFormat | str) -> list[str]:
    """What to tell the user (on stderr, never in the file) about writing `fmt` for this model: a torchtitan
    config written from another torchtitan version's Linear names (`fp8advisor.titan.version_mismatch`)."""
    fmt = parse_format(fmt)
    version = {
        ConfigFormat.TORCHTITAN_TOML: titan.TORCHTITAN_0_2,
        ConfigFormat.TORCHTITAN_PY: titan.TORCHTITAN_0_3,
    }
    if fmt not in version:
        return []
    warning = titan.version_mismatch(advice.layers, version[fmt])
    return [] if warning is None else [warning]


def _torchtitan_py(advice: Advice, header: list[str], request: Request) -> str:
    unmatched = unmatched_filter_entries(advice)
    if unmatched:  # the list is derived from these names: an entry naming nothing is a bug, never written
        raise ConfigError(
            f"filter_fqns entries {', '.join(map(repr, unmatched))} name no Linear layer of {request.target}",
            hint="report this: the filter list must come from the model's own Linear FQNs",
        )
    entries = advice.filter_fqns
    filter_value = "[]" if not entries else "[\n" + _string_list_lines(entries, " " * 20) + " " * 16 + "]"
    return (
        _comment(header)
        + '"""A torchtitan 0.3 recipe function with the float8 layers fp8advisor advised.\n'
        + "\n"
        + _torchtitan_model_lines(request)
        + "Keep the Float8LinearConverter.Config call as generated. filter_fqns keeps in bf16 every Linear\n"
        + "whose FQN contains an entry (substring match).\n"
        + '"""\n'
        + "\n"
        + "from torchtitan.components.quantization import Float8LinearConverter\n"
        + _torchtitan_imports(request)
        + "\n"
        + "\n"
        + "def float8_advised() -> Trainer.Config:\n"
        + "    config = base_recipe()\n"
        + "    config.compile.enable = True  # float8 without torch.compile is slower than bf16\n"
        + "    config.model_spec = model_registry(\n"
        + "        FLAVOR,\n"
        + "        converters=[\n"
        + "            Float8LinearConverter.Config(\n"
        + f"                recipe_name={_quoted(advice.recipe.value)},\n"
        + f"                filter_fqns={filter_value},\n"
        + "                model_compile_enabled=True,\n"
        + "            ),\n"
        + "        ],\n"
        + "    )\n"
        + "    return config\n"
    )


def _registry_name(request: Request) -> titan.RegistryName | None:
    return titan.parse_registry_name(request.target) if titan.is_registry_target(request.target) else None


def _torchtitan_model_lines(request: Request) -> str:
    """The docstring's paragraph on which torchtitan model the file is for."""
    name = _registry_name(request)
    if name is not None:
        return (
            f"For torchtitan 0.3's {name.model} model, flavor {name.flavor} ({name}):\n"
            "the model whose Linear layers fp8advisor read. The base recipe is torchtitan's own for that\n"
            "flavor: replace it with yours (EDIT), keeping model_registry and FLAVOR.\n"
            "\n"
        )
    return (
        f"Written from {request.target}, not from torchtitan's registry: the model_registry import, the\n"
        "base recipe and FLAVOR below are PLACEHOLDERS (llama3 8B) marked EDIT. Set them to the model\n"
        f"torchtitan builds, whose Linear FQNs must be those of {request.target}.\n"
        "\n"
    )


def _torchtitan_imports(request: Request) -> str:
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
            f'    raise NotImplementedError("torchtitan has no recipe for {name}: write yours")\n'
        )
    return (
        f"from torchtitan.models.{name.model} import model_registry\n"
        + recipe_import
        + "from torchtitan.trainer import Trainer\n"
        + "\n"
        + f"FLAVOR = {_quoted(name.flavor)}  # {name}\n"
        + stub
    )


def _nemo_automodel(advice: Advice, header: list[str]) -> str:
    document = {
        "compile": {"enabled": True, "mode": "default", "fullgraph": False, "dynamic": False},
        "fp8": {
            "enabled": True,
            "recipe_name": advice.recipe.value,
            "enable_fsdp_float8_all_gather": False,
            "precompute_float8_dynamic_scale_for_fsdp": False,
            "force_recompute_fp8_weight_in_bwd": False,
            "filter_fqns": list(advice.filter_fqns),
            "emulate": False,
        },
    }
    notes = [
        "NeMo AutoModel: merge the compile: and fp8: sections into your recipe YAML.",
        "fp8.filter_fqns keeps in bf16 every nn.Linear whose FQN contains an entry (substring match).",
        "FP8 GEMMs need token counts divisible by 16: pad as NeMo AutoModel's fp8 examples do",
        "(dataloader: collate_fn: pad_seq_len_divisible: 16).",
    ]
    body = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=1000)
    return _comment(header) + _comment(notes) + body


def _exact_set_literal(fqns: tuple[str, ...]) -> str:
    if not fqns:
        return "frozenset()"
    return "frozenset(\n    {\n" + _string_list_lines(fqns, " " * 8) + "    }\n)"


def _accelerate(advice: Advice, header: list[str]) -> str:
    return (
        _comment(header)
        + '"""accelerate with torchao float8 on exactly the Linear layers fp8advisor advised.\n'
        + "\n"
        + "Build your model and call accelerator.prepare(model, ...) with this `accelerator`. The FQNs\n"
        + "are those of the module you prepare (its named_modules() names).\n"
        + '"""\n'
        + "\n"
        + "from accelerate import Accelerator\n"
        + "from accelerate.utils import AORecipeKwargs\n"
        + "from torchao.float8 import Float8LinearConfig\n"
        + "\n"
        + f"FLOAT8_LAYERS = {_exact_set_literal(advice.module_filter_fqns)}\n"
        + "\n"
        + "\n"
        + "def module_filter_func(module, fqn):\n"
        + '    """True: convert this nn.Linear to float8. An exact FQN match, no substring rule."""\n'
        + "    return fqn in FLOAT8_LAYERS\n"
        + "\n"
        + "\n"
        + "accelerator = Accelerator(\n"
        + '    mixed_precision="fp8",\n'
        + '    dynamo_backend="inductor",  # float8 without torch.compile is slower than bf16\n'
        + "    kwargs_handlers=[\n"
        + "        AORecipeKwargs(\n"
        + f"            config=Float8LinearConfig.from_recipe_name({_quoted(advice.recipe.value)}),\n"
        + "            module_filter_func=module_filter_func,\n"
        + "        )\n"
        + "    ],\n"
        + ")\n"
    )


def _torchao(advice: Advice, header: list[str]) -> str:
    return (
        _comment(header)
        + '"""torchao float8 training on exactly the Linear layers fp8advisor advised.\n'
        + "\n"
        + "Call convert_model(model) on the module whose FQNs these are, before wrapping it for data\n"
        + "parallelism: it converts the advised layers and returns the model compiled (torch.compile).\n"
        + '"""\n'
        + "\n"
        + "import torch\n"
        + "from torchao.float8 import Float8LinearConfig, convert_to_float8_training\n"
        + "\n"
        + f"FLOAT8_LAYERS = {_exact_set_literal(advice.module_filter_fqns)}\n"
        + "\n"
        + "\n"
        + "def module_filter_fn(module, fqn):\n"
        + '    """True: convert this nn.Linear to float8. An exact FQN match, no substring rule."""\n'
        + "    return fqn in FLOAT8_LAYERS\n"
        + "\n"
        + "\n"
        + "def convert_model(model: torch.nn.Module) -> torch.nn.Module:\n"
        + "    convert_to_float8_training(\n"
        + "        model,\n"
        + f"        config=Float8LinearConfig.from_recipe_name({_quoted(advice.recipe.value)}),\n"
        + "        module_filter_fn=module_filter_fn,\n"
        + "    )\n"
        + "    return torch.compile(model)  # float8 without torch.compile is slower than bf16\n"
    )


_MODEL_PARTS = (
    "linear_qkv = q, k, v (torchtitan attention.wq/wk/wv or qkv_linear.wqkv; Hugging Face "
    "self_attn.q/k/v_proj); "
    "linear_proj = o (wo, o_proj); linear_fc1 = gate + up (feed_forward.w1 + w3, mlp.gate_proj + up_proj); "
    "linear_fc2 = down (w2, down_proj); output_layer = the head (output, lm_head)"
)


def _wrapped(text: str, indent: str = "  ") -> list[str]:
    """One comment paragraph, wrapped to fit 110 columns with its comment marker."""
    import textwrap

    return textwrap.wrap(text, width=106, subsequent_indent=indent, break_on_hyphens=False)


def _megatron_what(plan: megatron.MegatronPlan) -> str:
    return (
        f"{len(plan.float8_names)} of the {len(plan.modules)} Transformer Engine linear modules in float8: "
        "Megatron's first-match glob rule, applied to every one of their names, selects exactly those"
    )


def _megatron(advice: Advice, request: Request, predictor: Predictor | None) -> str:
    plan = megatron.plan(advice, predictor)
    recipe = advice.recipe
    document = megatron.precision_config(plan, recipe)
    megatron.check_selects_exactly(plan, document)  # Megatron's first-match rule, on every TE module name
    positional = megatron.positional_flags(plan)
    n_float8 = len(plan.float8_names)
    header = header_lines(advice, request, ConfigFormat.MEGATRON, what=_megatron_what(plan))
    fused = [m for m in plan.modules if m.fused]
    disagree = [m for m in fused if any(part.convert != m.float8 for part in m.parts)]
    if n_float8:
        usage = [
            "Megatron-Core with Transformer Engine, core_v0.16 or later: train with",
            f"  --fp8-format hybrid --fp8-recipe {recipe.value} --te-precision-config-file <this file>",
        ]
    else:
        usage = [
            "Nothing is in float8: train without --fp8-format (this file keeps every TE module in bf16)."
        ]
    provenance = weakest_provenance({layer.provenance for layer in advice.layers if layer.provenance})
    notes = [
        *usage,
        *_wrapped(
            "(NeMo 2 and Megatron-Bridge: the same TransformerConfig fields, fp8='hybrid', "
            f"fp8_recipe='{recipe.value}', quant_recipe=megatron.core.quantization.utils."
            "load_quantization_recipe(<this file>). NeMo 1 / NeMo-Aligner YAML: transformer_engine: true, "
            f"fp8: true, fp8_hybrid: true, mcore_customization_config: {{fp8_recipe: {recipe.value}}}; it "
            "cannot pass this file, so only the positional flags below, under mcore_customization_config.)"
        ),
        *_wrapped(
            f"Speed figures: torchao's float8 {recipe.value} figures ({provenance}"
            + (": a roofline model" if provenance == "modelled" else "")
            + f", profile {advice.profile_name}), not measurements of Transformer Engine's kernels. "
            "Recipes differ: "
            f"torchao tensorwise maps to TE's tensorwise (Float8CurrentScaling: per-tensor current scaling; "
            "e4m3 forward, e5m2 gradients, TE's 'hybrid'), whose kernels and casts are TE's own; torchao "
            "rowwise has no TE equivalent. Measure a step in Megatron before relying on the speedup."
        ),
        *_wrapped(f"Module names: Megatron's GPTModel ({megatron.MEGATRON_SOURCE}): {_MODEL_PARTS}."),
        *_wrapped(
            "Fused GEMMs: linear_qkv and linear_fc1 are one GEMM each in Megatron, decided as one by "
            f"{plan.fused_rule}; "
            + (
                f"{len(disagree)} of the {len(fused)} differ from their parts' own advice: "
                f"{megatron.folded(disagree)}."
                if disagree
                else f"all {len(fused)} agree with their parts' own advice."
            )
        ),
        *_wrapped(
            "Matchers: the first enabled matcher whose glob (fnmatch) matches a module's path chooses its "
            "config; default_bf16 keeps every other Transformer Engine module in bf16."
        ),
    ]
    measured = [m for m in disagree if any(part.decided_by != "profile" for part in m.parts)]
    if measured:
        notes += _wrapped(
            f"Decided in context: the parts of {megatron.folded(measured)} were measured as separate GEMMs; "
            "Megatron's fused GEMM is decided by the rule above instead."
        )
    head = plan.head
    if head is not None:
        lost = f"; the advice converts {head.parts[0].fqn} to float8: that is lost" if head.float8 else ""
        notes += _wrapped(
            "output_layer (the head) is Megatron's own ColumnParallelLinear, not a Transformer Engine "
            f"module: always bf16{lost}."
        )
    if megatron.names_layer_by_layer(document):
        notes += _wrapped(
            "Layer-by-layer patterns: Megatron numbers decoder.layers.N within each pipeline stage, so "
            "they are right only with --pipeline-model-parallel-size 1."
        )
    here = plan.predicted_speedup(plan.float8_names)
    there = positional.predicted_speedup
    notes += _wrapped(
        "Predicted Linear-time speedup over bf16 (torchao figures): this file "
        f"{_times(here)}, the positional flags below {_times(there)}."
    )
    notes += [
        "Before core_v0.16 (no precision config file): whole layers at each end in bf16 only:",
        f"  {positional.arguments(recipe)}",
        *_wrapped(
            "  lost: runs in float8 against the advice: "
            f"{megatron.folded(positional.converts_against_advice)}; "
            f"keeps in bf16 against the advice: {megatron.folded(positional.gives_up)}.",
            indent="    ",
        ),
    ]
    body = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=1000)
    return _comment(header) + _comment(notes) + body


def _times(speedup: float | None) -> str:
    return "-" if speedup is None else f"{speedup:.3f}x"


def _filter(advice: Advice, header: list[str], *, as_json: bool) -> str:
    entries = list(advice.filter_fqns)
    if as_json:
        return json.dumps(entries, indent=2) + "\n"  # JSON has no comments: the bare list only
    note = ["filter_fqns: keep in bf16 every nn.Linear whose FQN contains an entry (substring match)."]
    if not advice.convert_fqns:
        note.append("This list keeps every layer in bf16: better leave FP8 off in the config that uses it.")
    body = yaml.safe_dump(entries, default_flow_style=False, width=1000) if entries else "[]\n"
    return _comment(header) + _comment(note) + body


# --- FP8 off: nothing is worth converting ---------------------------------------------------------------
# Each leaves out what switches float8 on in its framework; `fp8advisor.configs` reads each back as FP8 off.

_OFF = "FP8 off: nothing is worth converting (see the header), so nothing here enables it."


def _torchtitan_toml_off(header: list[str], _request: Request) -> str:
    notes = [
        "torchtitan 0.2.x job config. " + _OFF,
        'Leave "quantize.linear.float8" out of [model] converters and train in bf16.',
    ]
    return _comment(header) + _comment(notes)


def _torchtitan_py_off(header: list[str], request: Request) -> str:
    return (
        _comment(header)
        + '"""A torchtitan 0.3 recipe function without float8: fp8advisor advised no layer.\n'
        + "\n"
        + _torchtitan_model_lines(request)
        + _OFF
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


def _nemo_automodel_off(header: list[str], _request: Request) -> str:
    notes = ["NeMo AutoModel: merge the fp8: section into your recipe YAML. " + _OFF]
    body = yaml.safe_dump({"fp8": {"enabled": False}}, sort_keys=False, default_flow_style=False)
    return _comment(header) + _comment(notes) + body


def _accelerate_off(header: list[str], _request: Request) -> str:
    return (
        _comment(header)
        + '"""accelerate in bf16: fp8advisor advised no layer for float8. '
        + _OFF
        + '"""\n'
        + "\n"
        + "from accelerate import Accelerator\n"
        + "\n"
        + 'accelerator = Accelerator(mixed_precision="bf16")\n'
    )


def _torchao_off(header: list[str], _request: Request) -> str:
    return (
        _comment(header)
        + '"""No torchao float8: fp8advisor advised no layer. '
        + _OFF
        + "\n"
        + "\n"
        + "convert_model(model) returns the model compiled, in bf16, so that the call site stays the same.\n"
        + '"""\n'
        + "\n"
        + "import torch\n"
        + "\n"
        + "\n"
        + "def convert_model(model: torch.nn.Module) -> torch.nn.Module:\n"
        + "    return torch.compile(model)  # no convert_to_float8_training: bf16\n"
    )


#: The file of each format that leaves FP8 off, from its header and the request (only torchtitan-py names the
#: model from it); the bare filter list has no switch: not here.
FP8_OFF_RENDERERS = {
    ConfigFormat.TORCHTITAN_TOML: _torchtitan_toml_off,
    ConfigFormat.TORCHTITAN_PY: _torchtitan_py_off,
    ConfigFormat.NEMO_AUTOMODEL: _nemo_automodel_off,
    ConfigFormat.ACCELERATE: _accelerate_off,
    ConfigFormat.TORCHAO: _torchao_off,
}


def write(path: str | Path, text: str) -> Path:
    """Write `text` byte for byte (LF line ends on every OS), atomically: the old file stays whole until the
    new one is complete (`fp8advisor.files.write_atomic`)."""
    return write_atomic(path, text)


def read_committed(path: str | Path) -> str:
    """The text of the file `--check` compares, or one `ConfigError` saying why it cannot be compared
    (missing, a directory, unreadable, not UTF-8 text). Called before the work: a wrong path fails at once."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"--check {path} is a directory", hint="give the config file that -o wrote")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(
            f"--check {path} does not exist", hint=f"write it first: the same command with -o {path}"
        ) from None
    except OSError as error:
        raise ConfigError(f"cannot read --check {path}: {error.strerror or error}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(
            f"--check {path} is not a UTF-8 text file: not a config fp8advisor wrote",
            hint="give the config file that -o wrote",
        ) from None


def check(path: str | Path, expected_text: str, current: str | None = None) -> tuple[bool, str]:
    """(True, "") when the file at `path` (whose text is `current`, read with `read_committed` when None)
    holds exactly `expected_text`; else (False, a unified diff from the file to what would be written now)."""
    path = Path(path)
    if current is None:
        current = read_committed(path)
    if current == expected_text:
        return True, ""
    diff = difflib.unified_diff(
        current.splitlines(keepends=True),
        expected_text.splitlines(keepends=True),
        fromfile=f"{path} (committed)",
        tofile=f"{path} (fp8advisor suggest now)",
    )
    text = "".join(line if line.endswith("\n") else line + "\n" for line in diff)
    return False, text


__all__ = [
    "ConfigFormat",
    "Request",
    "pinned_command",
    "check",
    "check_format_recipe",
    "fp8_off_reason",
    "leaves_fp8_off",
    "what_the_file_does",
    "format_warnings",
    "header_lines",
    "parse_format",
    "read_committed",
    "render",
    "unmatched_filter_entries",
    "write",
]
