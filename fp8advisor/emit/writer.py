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
                    (ordered glob matchers over Megatron's module names, `fp8advisor.emit.megatron`), with the
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
`fp8advisor.frameworks.reader.read_config` reads every one of them back.

Every file but JSON (which has no comments) starts with a comment header: fp8advisor's version, the model
target, batch and seq, recipe and profile as the user typed them, and the command that regenerates or checks
it. Nothing depends on the machine or the time, so the same inputs give byte-identical files anywhere.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import yaml

from fp8advisor import __version__
from fp8advisor.advice.decide import Advice, Predictor
from fp8advisor.emit import megatron
from fp8advisor.errors import ConfigError
from fp8advisor.files import GENERATED_MARK, write_atomic
from fp8advisor.frameworks.filters import entries_matching_nothing
from fp8advisor.frameworks.formats import (
    ALL_OR_NONE_EXPERT_FORMATS,
    CHECK_PREFIX,
    EXPERT_FORMATS,
    TORCHTITAN_0_2_EXPERTS_CONVERTER,
    ConfigFormat,
    all_or_none_converts,
    expert_modules,
    experts_total_speedup,
    file_can_convert,
    grouped_expert_groups,
    parse_format,
)
from fp8advisor.inspect import titan
from fp8advisor.inspect.layers import ExpertForm
from fp8advisor.predict.profile import weakest_provenance
from fp8advisor.recipes import Recipe
from fp8advisor.request import SuggestRequest


def header_lines(
    advice: Advice, request: SuggestRequest, fmt: ConfigFormat, what: str | None = None
) -> list[str]:
    """The comment header, without comment markers. `what`: the line saying what the file converts, for a
    format that is not a filter list (megatron)."""
    profile = advice.profile_name
    if request.profile is not None and request.profile != advice.profile_name:
        profile += f" (--profile {request.profile})"
    recipe = advice.recipe.value + (" (chosen by --recipe auto)" if request.recipe == "auto" else "")
    lines = [
        f"{GENERATED_MARK} {__version__} (fp8advisor suggest). Do not edit: regenerate it.",
        f"model: {request.target}  batch: {request.batch}  seq: {request.seq}"
        + (f"  tensor parallel: {request.tensor_parallel}" if request.tensor_parallel != 1 else "")
        + (f"  expert parallel: {request.expert_parallel}" if request.expert_parallel != 1 else ""),
        f"recipe: {recipe}  profile: {profile} ({advice.profile_provenance})  "
        f"min speedup: {advice.min_speedup:g}"
        + (f"  grouped profile: {_grouped_pin(advice)}" if _grouped_pin(advice) else ""),
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
        modules = converted_expert_modules(advice, fmt)
        if modules:
            return (
                f"no Linear layer converts ({fp8_off_reason(advice).removesuffix('; train in bf16')}); "
                f"the MoE experts of {len(modules)} module(s) do"
            )
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


def pinned_command(
    request: SuggestRequest, advice: Advice, fmt: ConfigFormat, output: str | None = None
) -> str:
    """`request.command` with what was chosen automatically (the profile, the grouped profile, in-context
    results) pinned."""
    source = None if advice.in_context is None else str(advice.in_context.source)
    return request.command(
        fmt.value,
        output,
        chosen_profile=advice.profile_name,
        chosen_measured=source,
        chosen_grouped_profile=_grouped_pin(advice),
    )


def _grouped_pin(advice: Advice) -> str | None:
    """What the check command pins with --grouped-profile for a model with grouped experts: the profile their
    figures came from when it is not the pinned --profile, "none" when the grouped roofline predicted them (so
    that a grouped profile found on the CI machine does not change the advice); None otherwise."""
    from fp8advisor.predict.profile import NO_GROUPED_PROFILE

    if not advice.grouped_experts or advice.grouped_profile == advice.profile_name:
        return None
    return advice.grouped_profile if advice.grouped_profile is not None else NO_GROUPED_PROFILE


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
    return not advice.convert_fqns and not (fmt is not None and converted_expert_modules(advice, fmt))


def render(
    advice: Advice,
    fmt: ConfigFormat | str,
    request: SuggestRequest,
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
    as_json = output is not None and output.lower().endswith(".json")
    if not as_json:  # JSON has no comments: format_warnings says it on stderr instead
        header = header + expert_notes(advice, fmt)
    if not advice.convert_fqns and not converted_expert_modules(advice, fmt) and fmt in FP8_OFF_RENDERERS:
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
    return _filter(advice, header, as_json=as_json)


def _torchtitan_toml(advice: Advice, header: list[str]) -> str:
    experts = converted_expert_modules(advice, ConfigFormat.TORCHTITAN_TOML)
    if not advice.convert_fqns:  # only the experts convert
        return (
            _comment(header)
            + _comment(
                ["torchtitan 0.2.x job config: merge these sections into your --job.config_file TOML."]
            )
            + "\n[model]\n"
            + f"converters = [{_quoted(TORCHTITAN_0_2_EXPERTS_CONVERTER)}]\n"
            + _torchtitan_toml_experts(experts)
            + "\n[compile]\n"
            + "enable = true  # float8 without torch.compile is slower than bf16\n"
        )
    entries = advice.filter_fqns
    filter_value = "[]\n" if not entries else "[\n" + _string_list_lines(entries, "  ") + "]\n"
    converters = ["quantize.linear.float8"] + ([TORCHTITAN_0_2_EXPERTS_CONVERTER] if experts else [])
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
        + f"converters = [{', '.join(map(_quoted, converters))}]\n"
        + "\n[quantize.linear.float8]\n"
        + f"recipe_name = {_quoted(advice.recipe.value)}\n"
        + f"filter_fqns = {filter_value}"
        + (_torchtitan_toml_experts(experts) if experts else "")
        + "\n[compile]\n"
        + "enable = true  # float8 without torch.compile is slower than bf16\n"
    )


def _torchtitan_toml_experts(modules: tuple[str, ...]) -> str:
    return (
        "\n[quantize.grouped_mm.float8]\n"
        + "# the expert modules whose grouped GEMMs run in float8 (a module whose FQN holds an entry)\n"
        + "fqns = [\n"
        + _string_list_lines(modules, "  ")
        + "]\n"
    )


def unmatched_filter_entries(advice: Advice) -> list[str]:
    """The filter_fqns entries that name no Linear of the model (torchtitan's substring rule)."""
    return entries_matching_nothing(advice.filter_fqns, advice.linear_fqns)


def format_warnings(advice: Advice, fmt: ConfigFormat | str) -> list[str]:
    """What to tell the user (on stderr, never in the file) about writing `fmt` for this model: a torchtitan
    config written from another torchtitan version's Linear names
    (`fp8advisor.inspect.titan.version_mismatch`), and what the file cannot do with the MoE experts
    (`expert_warnings`)."""
    fmt = parse_format(fmt)
    warnings = expert_warnings(advice, fmt)
    version = {
        ConfigFormat.TORCHTITAN_TOML: titan.TORCHTITAN_0_2,
        ConfigFormat.TORCHTITAN_PY: titan.TORCHTITAN_0_3,
    }
    if fmt not in version:
        return warnings
    warning = titan.version_mismatch(advice.layers, version[fmt])
    return ([] if warning is None else [warning]) + warnings


# --- MoE experts -------------------------------------------------------------------------------------------
# Grouped experts (3-D weights through grouped GEMMs) are not nn.Linear: each format that can convert them
# has its own switch (`formats.EXPERT_FORMATS`); the others keep them in bf16 and say so. Experts held as a
# list of nn.Linear are Linear layers like any other: the advice's filter converts them.


def converted_expert_modules(advice: Advice, fmt: ConfigFormat) -> tuple[str, ...]:
    """The modules holding grouped expert weights that the file of `fmt` converts, sorted: the advised groups'
    (torchtitan 0.2, torchao: by name), every group or none (torchtitan 0.3: `formats.all_or_none_converts`),
    none for a format that cannot convert grouped experts."""
    groups = grouped_expert_groups(advice.experts)
    if fmt not in EXPERT_FORMATS or not groups:
        return ()
    if fmt in ALL_OR_NONE_EXPERT_FORMATS:
        chosen = groups if all_or_none_converts(groups, advice.min_speedup) else ()
    else:
        chosen = tuple(group for group in groups if group.convert and file_can_convert(group, fmt))
    return tuple(sorted({module for group in chosen for module in expert_modules(group)}))


def entangled_expert_groups(advice: Advice, fmt: ConfigFormat) -> list:
    """Advised grouped expert groups that the file of `fmt` keeps bf16 because converting their module by name
    would swap other parameters too (`formats.file_can_convert`: a router or shared expert on the module)."""
    return [
        group
        for group in grouped_expert_groups(advice.experts)
        if group.convert and fmt in EXPERT_FORMATS and not file_can_convert(group, fmt)
    ]


def _entangled_words(groups) -> str:
    """`layers.0, layers.1 also hold layers.0.gate.weight, ...`: why those groups stay bf16."""
    others = [name for group in groups for name in group.other_parameters]
    shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
    return (
        f"{', '.join(group.group for group in groups)} also hold {shown}: torchao's quantize_ swaps every "
        "parameter under a module its filter names (routers and shared experts would run float8 GEMMs too), "
        "so this file keeps these expert groups bf16"
    )


def _groups_words(groups) -> str:
    """`3 expert groups (layers.1.moe.experts, ...; E 8, top_k 2, 512 rows per expert)`."""
    first = groups[0]
    names = first.group + (", ..." if len(groups) > 1 else "")
    top_k = "unknown" if first.top_k is None else str(first.top_k)
    rows = "" if first.M_per_expert is None else f", {first.M_per_expert:g} rows per expert"
    experts = str(first.n_experts)
    local = getattr(first, "E_local", None)
    if local is not None:  # expert parallelism: the figures are per GPU
        experts += f" ({local} per GPU, --ep {first.n_experts // local})"
    plural = "s" if len(groups) > 1 else ""
    return f"{len(groups)} expert group{plural} ({names}; E {experts}, top_k {top_k}{rows})"


def _predicted_words(groups) -> str:
    """The advice's figure for `groups`: total predicted speedup, its range under imbalance, provenance."""
    total = experts_total_speedup(groups)
    if total is None:
        return "no speedup predicted"
    lows = [group.speedup_range[0] for group in groups if group.speedup_range]
    highs = [group.speedup_range[1] for group in groups if group.speedup_range]
    spread = f" ({min(lows):.2f}x to {max(highs):.2f}x under the stated imbalance)" if lows and highs else ""
    provenance = sorted({group.provenance for group in groups if group.provenance})
    label = f", {'/'.join(provenance)}" if provenance else ""
    return f"predicted {total:.2f}x over bf16{spread}{label}"


def _decision_words(advice: Advice, groups) -> str:
    converted = [group for group in groups if group.convert]
    kept = [group for group in groups if not group.convert]
    parts = []
    if converted:
        parts.append(f"float8 for {_groups_words(converted)}, {_predicted_words(converted)}")
    if kept:
        parts.append(
            f"bf16 for {_groups_words(kept)}, {_predicted_words(kept)} "
            f"(under --min-speedup {advice.min_speedup:g})"
        )
    return "; ".join(parts)


#: Formats whose Linear float8 config has no pad_inner_dim (torchtitan 0.2 `[quantize.linear.float8]`,
#: torchtitan 0.3 `Float8LinearConverter.Config`, NeMo AutoModel's `fp8:` keys): ModuleList experts that
#: convert there meet per-expert token counts torch._scaled_mm rejects.
NO_PAD_FORMATS = frozenset(
    {ConfigFormat.TORCHTITAN_TOML, ConfigFormat.TORCHTITAN_PY, ConfigFormat.NEMO_AUTOMODEL}
)


def pads_inner_dim(advice: Advice) -> bool:
    """Whether a group of experts held as nn.Linear converts: each expert multiplies the tokens routed to it,
    a count that varies per step and is rarely a multiple of 16, which torch._scaled_mm requires of the
    grad_weight GEMM's inner dimension; torchao's `Float8LinearConfig(pad_inner_dim=True)` pads it."""
    return any(group.form == ExpertForm.LINEAR_LIST.value and group.convert for group in advice.experts)


def _linear_config(advice: Advice) -> str:
    """The torchao Float8LinearConfig expression of the torchao and accelerate files."""
    config = f"Float8LinearConfig.from_recipe_name({_quoted(advice.recipe.value)})"
    if pads_inner_dim(advice):  # routed expert Linears: per-expert M not a multiple of 16 (`pads_inner_dim`)
        return f"dataclasses.replace({config}, pad_inner_dim=True)"
    return config


#: What the files that cannot pad say about converted expert Linears (comment and stderr).
NO_PAD_WORDS = (
    "the routed expert Linears it converts multiply a token count per expert that varies with the routing "
    "and is rarely a multiple of 16, which torch._scaled_mm rejects in the grad_weight GEMM; this format has "
    "no pad_inner_dim switch (torchao's Float8LinearConfig(pad_inner_dim=True) pads it: --format torchao or "
    "accelerate), so the training step may fail on them"
)


def _linear_list_note(advice: Advice, fmt: ConfigFormat) -> list[str]:
    groups = [group for group in advice.experts if group not in grouped_expert_groups(advice.experts)]
    if not groups:
        return []
    lines = _wrapped(
        f"MoE experts as lists of nn.Linear ({_groups_words(groups)}): converted Linear by Linear like any "
        f"layer, as the advice decides them ({_decision_words(advice, groups)})."
    )
    if pads_inner_dim(advice) and fmt in {ConfigFormat.TORCHAO, ConfigFormat.ACCELERATE}:
        lines += _wrapped(
            "pad_inner_dim=True: each expert multiplies the tokens routed to it, rarely a multiple of 16, "
            "which torch._scaled_mm requires of the grad_weight GEMM; torchao pads it."
        )
    elif pads_inner_dim(advice) and fmt in NO_PAD_FORMATS:
        lines += _wrapped(f"WARNING: {NO_PAD_WORDS}.")
    return lines


def expert_notes(advice: Advice, fmt: ConfigFormat) -> list[str]:
    """The comment lines of the file of `fmt` on the MoE experts: what it does with them and why, the
    advice's figures. Empty for a dense model (its files stay byte for byte as before)."""
    if not advice.experts:
        return []
    lines = _linear_list_note(advice, fmt)
    groups = grouped_expert_groups(advice.experts)
    routers = converted_routers(advice)
    if routers:
        lines += _wrapped(
            f"WARNING: {', '.join(routers)} look like MoE routers (N = E next to the experts) and are "
            "converted: routers are too small for float8."
        )
    if not groups:
        return lines
    advice_words = _decision_words(advice, groups)
    modules = converted_expert_modules(advice, fmt)
    entangled = entangled_expert_groups(advice, fmt)
    if entangled:
        lines += _wrapped(f"NOTE: {_entangled_words(entangled)}.")
    if fmt is ConfigFormat.TORCHTITAN_PY:
        lines += _titan_py_expert_note(advice, groups, modules, advice_words)
    elif fmt is ConfigFormat.TORCHAO:
        converting = (
            f"quantize_(model, config=Float8TrainingOpConfig(), filter_fn=expert_filter_fn) swaps the 3-D "
            f"weights of the {len(modules)} modules in FLOAT8_EXPERTS (torchao.prototype.moe_training) for "
            "float8 grouped GEMMs: rowwise (torchao's only grouped recipe) whatever recipe the Linear layers "
            "use."
            if modules
            else "no quantize_ call: they stay bf16."
        )
        lines += _wrapped(f"MoE experts: the advice says {advice_words}. {converting}")
    elif fmt is ConfigFormat.TORCHTITAN_TOML:
        converting = (
            f'the "{TORCHTITAN_0_2_EXPERTS_CONVERTER}" converter (torchtitan v0.2.0 '
            "Float8GroupedMMConverter) swaps the weights of each module whose FQN contains an fqns entry "
            "for float8 rowwise grouped GEMMs, whatever recipe_name says; torchtitan 0.2.0 imports "
            "torchao's MoETrainingConfig (the torchao of its time: later torchao renamed it) and refuses "
            "pipeline and context parallelism with it."
            if modules
            else f'no "{TORCHTITAN_0_2_EXPERTS_CONVERTER}" converter: they stay bf16.'
        )
        lines += _wrapped(f"MoE experts: the advice says {advice_words}. {converting}")
    elif fmt is ConfigFormat.MEGATRON:
        lines += _wrapped(
            "MoE experts: Megatron runs them as Transformer Engine grouped linears under .mlp.experts; the "
            "default_bf16 matcher keeps them in bf16 here. The advice's figures are torchao's rowwise "
            f"grouped GEMMs, which Transformer Engine has no recipe for ({advice_words}): this file does "
            "not carry them. To try them in float8, add a matcher for *.mlp.experts.* before default_bf16 "
            "and measure."
        )
    else:
        name = {
            ConfigFormat.NEMO_AUTOMODEL: "NeMo AutoModel's fp8: section (torchao convert_to_float8_training)",
            ConfigFormat.ACCELERATE: "accelerate's AORecipeKwargs (torchao convert_to_float8_training)",
        }.get(fmt, "a filter_fqns list")
        lines += _wrapped(
            f"MoE experts stay bf16 with this file: {name} converts nn.Linear only, and these experts are "
            f"3-D weights run through grouped GEMMs. The advice says {advice_words}; --format torchtitan-py "
            "or torchao can convert them."
        )
    return lines


def _titan_py_expert_note(advice: Advice, groups, modules: tuple[str, ...], advice_words: str) -> list[str]:
    mixed = len({group.convert for group in groups}) > 1
    if modules:
        lines = _wrapped(
            "MoE experts: Float8GroupedExpertsConverter converts every GroupedExperts of the model (it has "
            "no filter); its grouped GEMMs are float8 rowwise whatever recipe_name says (torchao's "
            f"Float8TrainingOpConfig; token groups padded to 16). The advice says {advice_words}."
        )
    else:
        lines = _wrapped(
            f"MoE experts stay bf16: no Float8GroupedExpertsConverter. The advice says {advice_words}."
        )
    if mixed:
        total = experts_total_speedup(groups)
        shown = "none" if total is None else f"{total:.2f}x"
        lines += _wrapped(
            "torchtitan 0.3 cannot convert some expert groups and not others: this file converts "
            f"{'all' if modules else 'none'} of them, by their total predicted speedup ({shown}, the sum of "
            f"bf16 over float8 times) against --min-speedup {advice.min_speedup:g}. --format torchao "
            "converts exactly the advised groups."
        )
    return lines


def converted_routers(advice: Advice) -> list[str]:
    """Converted Linear layers that look like the router of an expert group: under the same MoE module, with N
    equal to the group's number of experts. The advice never converts a router (N = E is small); this
    guards a hand-built or future advice."""
    found = []
    for group in advice.experts:
        parent = group.group.rpartition(".")[0]
        members = set(group.members)
        for layer in advice.layers:
            if (
                layer.convert
                and layer.N == group.n_experts
                and layer.fqn.startswith(parent + ".")
                and layer.fqn not in members
            ):
                found.append(layer.fqn)
    return sorted(set(found))


def expert_warnings(advice: Advice, fmt: ConfigFormat) -> list[str]:
    """The stderr lines on the experts: advised to convert but kept bf16 by a format that cannot convert them,
    or converted all-or-none against part of the advice (torchtitan 0.3), or a router converted."""
    warnings = []
    routers = converted_routers(advice)
    if routers:
        warnings.append(f"converted Linear layers look like MoE routers: {', '.join(routers)}")
    if pads_inner_dim(advice) and fmt in NO_PAD_FORMATS:
        warnings.append(f"--format {fmt.value}: {NO_PAD_WORDS}")
    groups = grouped_expert_groups(advice.experts)
    advised = [group for group in groups if group.convert]
    if not advised:
        return warnings
    entangled = entangled_expert_groups(advice, fmt)
    if entangled:
        warnings.append(f"--format {fmt.value}: {_entangled_words(entangled)}")
    if fmt not in EXPERT_FORMATS:
        warnings.append(
            f"--format {fmt.value} cannot convert grouped MoE experts: the advice puts "
            f"{_groups_words(advised)} in float8 ({_predicted_words(advised)}), this file keeps them in "
            "bf16; --format torchtitan-py or torchao can convert them"
        )
    elif fmt in ALL_OR_NONE_EXPERT_FORMATS and len(advised) != len(groups):
        what = "all" if converted_expert_modules(advice, fmt) else "none"
        warnings.append(
            "torchtitan 0.3 converts every expert group or none: the advice converts "
            f"{len(advised)} of {len(groups)}, this file converts {what} (by their total predicted "
            "speedup); --format torchao converts exactly the advised groups"
        )
    return warnings


def _torchtitan_py(advice: Advice, header: list[str], request: SuggestRequest) -> str:
    unmatched = unmatched_filter_entries(advice)
    if unmatched:  # the list is derived from these names: an entry naming nothing is a bug, never written
        raise ConfigError(
            f"filter_fqns entries {', '.join(map(repr, unmatched))} name no Linear layer of {request.target}",
            hint="report this: the filter list must come from the model's own Linear FQNs",
        )
    entries = advice.filter_fqns
    filter_value = "[]" if not entries else "[\n" + _string_list_lines(entries, " " * 20) + " " * 16 + "]"
    experts = bool(converted_expert_modules(advice, ConfigFormat.TORCHTITAN_PY))
    linear = bool(advice.convert_fqns)
    converters = ""
    if linear:
        converters += (
            "            Float8LinearConverter.Config(\n"
            + f"                recipe_name={_quoted(advice.recipe.value)},\n"
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
        _comment(header)
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
    return titan.parse_registry_name(request.target) if titan.is_registry_target(request.target) else None


def _torchtitan_model_lines(request: SuggestRequest) -> str:
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
        + ("import dataclasses\n" if pads_inner_dim(advice) else "")
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
        + f"            config={_linear_config(advice)},\n"
        + "            module_filter_func=module_filter_func,\n"
        + "        )\n"
        + "    ],\n"
        + ")\n"
    )


def _torchao(advice: Advice, header: list[str]) -> str:
    experts = converted_expert_modules(advice, ConfigFormat.TORCHAO)
    linear = bool(advice.convert_fqns)
    imports = ("import dataclasses\n\n" if linear and pads_inner_dim(advice) else "") + "import torch\n"
    constants = functions = calls = ""
    if linear:
        imports += "from torchao.float8 import Float8LinearConfig, convert_to_float8_training\n"
        constants += f"FLOAT8_LAYERS = {_exact_set_literal(advice.module_filter_fqns)}\n"
        functions += (
            "\n"
            "\n"
            "def module_filter_fn(module, fqn):\n"
            '    """True: convert this nn.Linear to float8. An exact FQN match, no substring rule."""\n'
            "    return fqn in FLOAT8_LAYERS\n"
        )
        calls += (
            "    convert_to_float8_training(\n"
            "        model,\n"
            f"        config={_linear_config(advice)},\n"
            "        module_filter_fn=module_filter_fn,\n"
            "    )\n"
        )
    if experts:
        imports += (
            "from torchao.prototype.moe_training.config import Float8TrainingOpConfig\n"
            "from torchao.quantization.quant_api import quantize_\n"
        )
        constants += f"FLOAT8_EXPERTS = {_exact_set_literal(experts)}\n"
        functions += (
            "\n"
            "\n"
            "def expert_filter_fn(module, fqn):\n"
            '    """True: swap its expert weights for float8 grouped GEMMs. An exact FQN match."""\n'
            "    return fqn in FLOAT8_EXPERTS\n"
        )
        calls += (
            "    # float8 rowwise grouped GEMMs (torch._grouped_mm on these weights), any Linear recipe\n"
            "    quantize_(model, config=Float8TrainingOpConfig(), filter_fn=expert_filter_fn)\n"
        )
    what = (
        "torchao float8 training on exactly the Linear layers fp8advisor advised.\n"
        if not experts
        else "torchao float8 training on exactly the Linear layers and MoE experts fp8advisor advised.\n"
    )
    return (
        _comment(header)
        + '"""'
        + what
        + "\n"
        + "Call convert_model(model) on the module whose FQNs these are, before wrapping it for data\n"
        + "parallelism: it converts the advised layers and returns the model compiled (torch.compile).\n"
        + '"""\n'
        + "\n"
        + imports
        + "\n"
        + constants
        + functions
        + "\n"
        + "\n"
        + "def convert_model(model: torch.nn.Module) -> torch.nn.Module:\n"
        + calls
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


def _megatron(advice: Advice, request: SuggestRequest, predictor: Predictor | None) -> str:
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
    notes += expert_notes(advice, ConfigFormat.MEGATRON)
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
# Each leaves out what switches float8 on in its framework; `fp8advisor.frameworks.reader` reads each back as
# FP8 off.

_OFF = "FP8 off: nothing is worth converting (see the header), so nothing here enables it."


def _torchtitan_toml_off(header: list[str], _request: SuggestRequest) -> str:
    notes = [
        "torchtitan 0.2.x job config. " + _OFF,
        'Leave "quantize.linear.float8" out of [model] converters and train in bf16.',
    ]
    return _comment(header) + _comment(notes)


def _torchtitan_py_off(header: list[str], request: SuggestRequest) -> str:
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


def _nemo_automodel_off(header: list[str], _request: SuggestRequest) -> str:
    notes = ["NeMo AutoModel: merge the fp8: section into your recipe YAML. " + _OFF]
    body = yaml.safe_dump({"fp8": {"enabled": False}}, sort_keys=False, default_flow_style=False)
    return _comment(header) + _comment(notes) + body


def _accelerate_off(header: list[str], _request: SuggestRequest) -> str:
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


def _torchao_off(header: list[str], _request: SuggestRequest) -> str:
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
    "pinned_command",
    "check",
    "check_format_recipe",
    "converted_expert_modules",
    "converted_routers",
    "expert_notes",
    "expert_warnings",
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
