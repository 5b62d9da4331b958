"""What each format does with the MoE experts: the modules it converts, its comment notes, its warnings.

Grouped experts (3-D weights through grouped GEMMs) are not nn.Linear: each format that can convert them has
its own switch (`fp8advisor.frameworks.formats.EXPERT_FORMATS`): torchtitan 0.2's grouped_mm converter and
torchao's `quantize_` by module name, torchtitan 0.3's converter for every group or none. The others keep them
in bf16 and say so. Experts held as a list of nn.Linear are Linear layers like any other: the advice's filter
converts them, and a format without torchao's `pad_inner_dim` warns that their per-expert token counts may
make the step fail.
"""

from __future__ import annotations

from fp8advisor.advice.records import Advice
from fp8advisor.emit.syntax import wrapped
from fp8advisor.frameworks.formats import (
    ALL_OR_NONE_EXPERT_FORMATS,
    EXPERT_FORMATS,
    TORCHTITAN_0_2_EXPERTS_CONVERTER,
    ConfigFormat,
    all_or_none_converts,
    expert_modules,
    experts_total_speedup,
    file_can_convert,
    grouped_expert_groups,
)
from fp8advisor.inspect.records import ExpertForm


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


#: Which torchao torchtitan 0.2.x's grouped-experts converter needs: torchtitan 0.2.2's
#: `Float8GroupedMMConverter.convert` (torchtitan/components/quantization/float8.py) imports
#: `torchao.prototype.moe_training.conversion_utils.MoETrainingConfig`, which torchao 0.12.0 to 0.16.0 define
#: (pytorch/ao tags v0.12.0..v0.16.0); 0.17.0 replaced it by `config.Float8TrainingOpConfig`, and with it
#: the converter raises ImportError ("torchao installation does not have MoE training support").
TORCHTITAN_0_2_EXPERTS_TORCHAO = (
    "needs torchao 0.12 to 0.16 (it imports torchao.prototype.moe_training.conversion_utils."
    "MoETrainingConfig, which torchao 0.17 replaced: with torchao 0.17 or later it raises ImportError)"
)


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
    lines = wrapped(
        f"MoE experts as lists of nn.Linear ({_groups_words(groups)}): converted Linear by Linear like any "
        f"layer, as the advice decides them ({_decision_words(advice, groups)})."
    )
    if pads_inner_dim(advice) and fmt in {ConfigFormat.TORCHAO, ConfigFormat.ACCELERATE}:
        lines += wrapped(
            "pad_inner_dim=True: each expert multiplies the tokens routed to it, rarely a multiple of 16, "
            "which torch._scaled_mm requires of the grad_weight GEMM; torchao pads it."
        )
    elif pads_inner_dim(advice) and fmt in NO_PAD_FORMATS:
        lines += wrapped(f"WARNING: {NO_PAD_WORDS}.")
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
        lines += wrapped(
            f"WARNING: {', '.join(routers)} look like MoE routers (N = E next to the experts) and are "
            "converted: routers are too small for float8."
        )
    if not groups:
        return lines
    advice_words = _decision_words(advice, groups)
    modules = converted_expert_modules(advice, fmt)
    entangled = entangled_expert_groups(advice, fmt)
    if entangled:
        lines += wrapped(f"NOTE: {_entangled_words(entangled)}.")
    if fmt is ConfigFormat.TORCHTITAN_PY:
        lines += _titan_py_expert_note(advice, groups, modules, advice_words)
    elif fmt is ConfigFormat.TORCHAO and advice.recipe.is_mx:
        converting = (
            f"the quantize_ call's filter also names the {len(modules)} modules in MXFP8_EXPERTS: torchao "
            "swaps their 3-D weights for its MXFP8 training tensor, whose grouped GEMMs run MXFP8 "
            "(MXFP8TrainingOpConfig, the same recipe as the Linear layers)."
            if modules
            else "the quantize_ filter names none of them: they stay bf16."
        )
        lines += wrapped(f"MoE experts: the advice says {advice_words}. {converting}")
    elif fmt is ConfigFormat.TORCHAO:
        converting = (
            f"quantize_(model, config=Float8TrainingOpConfig(), filter_fn=expert_filter_fn) swaps the 3-D "
            f"weights of the {len(modules)} modules in FLOAT8_EXPERTS (torchao.prototype.moe_training) for "
            "float8 grouped GEMMs: rowwise (torchao's only grouped recipe) whatever recipe the Linear layers "
            "use."
            if modules
            else "no quantize_ call: they stay bf16."
        )
        lines += wrapped(f"MoE experts: the advice says {advice_words}. {converting}")
    elif fmt is ConfigFormat.TORCHTITAN_TOML:
        converting = (
            f'the "{TORCHTITAN_0_2_EXPERTS_CONVERTER}" converter (torchtitan 0.2.x '
            "Float8GroupedMMConverter) swaps the weights of each module whose FQN contains an fqns entry "
            "for float8 rowwise grouped GEMMs, whatever recipe_name says. It "
            + TORCHTITAN_0_2_EXPERTS_TORCHAO
            + ", and refuses pipeline and context parallelism."
            if modules
            else f'no "{TORCHTITAN_0_2_EXPERTS_CONVERTER}" converter: they stay bf16.'
        )
        lines += wrapped(f"MoE experts: the advice says {advice_words}. {converting}")
    elif fmt is ConfigFormat.MEGATRON:
        lines += wrapped(
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
        lines += wrapped(
            f"MoE experts stay bf16 with this file: {name} converts nn.Linear only, and these experts are "
            f"3-D weights run through grouped GEMMs. The advice says {advice_words}; --format torchtitan-py "
            "or torchao can convert them."
        )
    return lines


def _titan_py_expert_note(advice: Advice, groups, modules: tuple[str, ...], advice_words: str) -> list[str]:
    mixed = len({group.convert for group in groups}) > 1
    converter = "MXFP8GroupedExpertsConverter" if advice.recipe.is_mx else "Float8GroupedExpertsConverter"
    if modules and advice.recipe.is_mx:
        lines = wrapped(
            "MoE experts: MXFP8GroupedExpertsConverter converts every GroupedExperts of the model (it has no "
            "filter; torchtitan/components/quantization/mx.py:184-200) to torchao's MXFP8 grouped GEMMs, and "
            "swaps the token dispatcher for one padding each expert's token group to pad_multiple = 128 "
            f"rows, what torchao's sm_100 MX cast needs. The advice says {advice_words}."
        )
    elif modules:
        lines = wrapped(
            "MoE experts: Float8GroupedExpertsConverter converts every GroupedExperts of the model (it has "
            "no filter); its grouped GEMMs are float8 rowwise whatever recipe_name says (torchao's "
            f"Float8TrainingOpConfig; token groups padded to 16). The advice says {advice_words}."
        )
    else:
        lines = wrapped(f"MoE experts stay bf16: no {converter}. The advice says {advice_words}.")
    if mixed:
        total = experts_total_speedup(groups)
        shown = "none" if total is None else f"{total:.2f}x"
        lines += wrapped(
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
    if fmt is ConfigFormat.TORCHTITAN_TOML and converted_expert_modules(advice, fmt):
        warnings.append(
            f'--format torchtitan-toml: torchtitan 0.2.x\'s "{TORCHTITAN_0_2_EXPERTS_CONVERTER}" converter '
            + TORCHTITAN_0_2_EXPERTS_TORCHAO
        )
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


__all__ = [
    "NO_PAD_FORMATS",
    "NO_PAD_WORDS",
    "TORCHTITAN_0_2_EXPERTS_TORCHAO",
    "converted_expert_modules",
    "converted_routers",
    "entangled_expert_groups",
    "expert_notes",
    "expert_warnings",
    "pads_inner_dim",
]
