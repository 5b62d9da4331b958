"""What `fp8advisor suggest` shows on the terminal: the report (layers, routed experts, strategies, recipes
considered, the filter list), the in-context blocks, and the one-line brief when the config goes to stdout.

A speedup resting on modelled (roofline) or emulated figures carries MODELLED_MARK and a legend under its
table (`fp8advisor.cli.marks`); a decision's reason, when the row does not say it all, is a numbered footnote
under the table.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace

from rich import box
from rich.table import Table
from rich.text import Text

from fp8advisor.advice.linears import group_layers
from fp8advisor.advice.records import Advice
from fp8advisor.cli.application import console, err_console
from fp8advisor.cli.marks import LEGEND, MODELLED_MARK, marked, print_legend, speedup_text
from fp8advisor.frameworks.formats import FILTER_FQNS_MEANING

#: Marks a decision whose speedup interval holds the threshold.
UNCERTAIN_MARK = "?"
_INTERVAL_LEGEND = (
    "(low-high): where the speedup is expected to lie 8 times in 10, from the evidence profile's held-out "
    "errors (docs/benchmarks.md)"
)
_UNCERTAIN_LEGEND = (
    f"{UNCERTAIN_MARK} uncertain: the interval holds the threshold; decided by the point prediction. "
    "`fp8advisor bench` on your GPU (or `bench --model` for the block in context) settles it"
)


def _footnoted_reason(reason: str) -> str:
    """The reason a decision row points to with a footnote: '' for 'predicted 1.35x >= 1.20' (the speedup
    has its own column, the threshold is in the title); a block measured in context without its times (the
    in-context section shows them); any other whole."""
    from fp8advisor.advice.in_context import MEASURED_IN_CONTEXT

    if reason.startswith("predicted ") and (" >= " in reason or " < " in reason):
        return ""  # an uncertain one carries UNCERTAIN_MARK instead
    if reason.startswith(MEASURED_IN_CONTEXT):
        return MEASURED_IN_CONTEXT
    return reason


def print_brief(advice: Advice, what_the_file_does: str, fp8_off: bool) -> None:
    """The terminal's part when the config goes to stdout: the advice in one line, and what the file does
    (the line of its header: for megatron, its own module count, not the substring simulation)."""
    err_console.print(
        f"{advice.recipe.value} with profile {advice.profile_name}: "
        f"{len(advice.convert_fqns)} layers advised for float8, "
        f"predicted Linear-time speedup {speedup_text(advice.strategy('advice').predicted_speedup)}"
        + _experts_brief(advice)
        + f"; the file: {what_the_file_does}",
        soft_wrap=True,
    )
    if fp8_off:
        err_console.print(Text("nothing is worth converting: the config leaves FP8 off", style="yellow"))
    for warning in advice.warnings:
        err_console.print(Text("warning: ", style="yellow") + Text(warning), soft_wrap=True)


def _experts_brief(advice: Advice) -> str:
    """' (routed experts excluded); 2 of 3 routed expert groups float8' for a MoE model, '' otherwise."""
    if not advice.experts:
        return ""
    converted = len(advice.converted_expert_groups)
    excluded = " (grouped experts excluded)" if advice.experts_share else ""
    return f"{excluded}; {converted} of {len(advice.experts)} routed expert group(s) advised for float8"


def print_report(advice: Advice, fp8_off: bool) -> None:
    """The terminal report: what the advice rests on, the layers, the routed experts, the strategies
    compared, the recipes considered and the filter list."""
    _print_header(advice)
    _print_layers(advice)
    _print_experts(advice)
    _print_strategies(advice)
    _print_recipe_options(advice)
    _print_filter_list(advice, fp8_off)


def _print_header(advice: Advice) -> None:
    """The target and its tokens per step, the profile, the recipe, the profile's error and the notes."""
    console.print(
        Text(f"{advice.target}", style="bold")
        + Text(f"  batch {advice.batch} x seq {advice.seq} = {advice.batch * advice.seq} tokens per step")
    )
    description = advice.profile_description
    console.print(description if description.startswith("profile") else f"profile: {description}")
    console.print(f"recipe:  {advice.recipe.value} ({advice.recipe_reason})")
    error = advice.prediction_error
    if error is not None:
        console.print(
            f"profile error ({error.method}, {error.n} points): median {error.median_relative_error:.1%}, "
            f"worst {error.worst_relative_error:.1%}, 'speedup > 1' right for {error.sign_accuracy:.0%}"
        )
    for note in advice.notes:
        console.print(Text(f"note: {note}", style="dim"))


def _decision(convert: bool, reason: str, footnotes: list[str], prefix: str = "") -> Text:
    """'float8' or 'bf16', with the number of its reason's footnote ([1], or [e1] with prefix 'e') where the
    row does not say it all; a reason not yet in `footnotes` is added to them."""
    decision = Text("float8", style="green") if convert else Text("bf16", style="dim")
    reason = _footnoted_reason(reason)
    if reason:
        if reason not in footnotes:
            footnotes.append(reason)
        decision.append(f" [{prefix}{footnotes.index(reason) + 1}]")
    return decision


def _print_footnotes(footnotes: list[str], prefix: str = "") -> None:
    for number, reason in enumerate(footnotes, start=1):
        console.print(f"[{prefix}{number}] {reason}", markup=False, highlight=False, soft_wrap=True)


def _print_layers(advice: Advice) -> None:
    """The layer table, its footnotes and the legends of its marks."""
    footnotes: list[str] = []
    console.print(_layer_table(advice, footnotes))
    _print_footnotes(footnotes)
    print_legend(layer.provenance for layer in advice.layers)
    if any(layer.speedup_interval for layer in advice.layers):
        console.print(Text(_INTERVAL_LEGEND, style="dim"))
    if any(layer.uncertain for layer in advice.layers):
        console.print(Text(_UNCERTAIN_LEGEND, style="dim"))
    tp = advice.tensor_parallel
    if tp > 1:
        console.print(
            Text(
                f"per GPU: the 1/{tp} slice predicted, as the framework's TP plan splits the layer (N "
                "column-parallel, K row-parallel); for a layer no plan names, whichever float8 gains less "
                "from",
                style="dim",
            )
        )
    if any(layer.how == "extrapolated" for layer in advice.layers):
        console.print(Text("* outside the profile's measured grid (extrapolated)", style="dim"))


def _layer_table(advice: Advice, footnotes: list[str]) -> Table:
    """One row per group of layers (repeated blocks folded); the reasons its rows point to join
    `footnotes`."""
    groups = group_layers(advice.layers)
    table = Table(
        title=f"Layers: float8 where predicted to reach {advice.min_speedup:.2f}x (repeated blocks folded; "
        "reasons in --json)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=0,  # the box's one-space divider separates the columns
        pad_edge=False,
    )
    # Names fold on a narrow terminal rather than push the decision off its right edge.
    table.add_column("layers", overflow="fold")
    table.add_column("n", justify="right", no_wrap=True)
    table.add_column("M", justify="right", no_wrap=True)
    table.add_column("K x N", justify="right", no_wrap=True)
    tp = advice.tensor_parallel
    if tp > 1:
        table.add_column("per GPU", justify="right", no_wrap=True)
    table.add_column("speedup", justify="right", no_wrap=True)
    table.add_column("decision", no_wrap=True)  # "bf16 [1]": reasons are footnotes, names keep the width
    for group in groups:
        layer = group.first
        speedup = marked(speedup_text(layer.predicted_speedup, layer.speedup_interval), layer.provenance)
        if layer.how == "extrapolated":
            speedup += "*"
        decision = _decision(layer.convert, layer.reason, footnotes)
        if layer.uncertain:
            decision.append(UNCERTAIN_MARK, style="yellow")
        shard = [] if tp == 1 else ["-" if layer.shard is None else "{}x{}".format(*layer.shard)]
        table.add_row(
            group.pattern, str(group.count), str(layer.M), f"{layer.K}x{layer.N}", *shard, speedup, decision
        )
    return table


def _print_strategies(advice: Advice) -> None:
    """The strategies' predicted Linear-time speedups (and, for a MoE model, counting the routed experts)."""
    grouped = bool(advice.experts_share)
    summary = Table(
        title="Predicted Linear-time speedup vs all-bf16"
        + (" (routed experts' grouped GEMMs excluded)" if grouped else ""),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    summary.add_column("strategy", no_wrap=True)
    summary.add_column("layers in float8", justify="right")
    summary.add_column("speedup", justify="right")
    summary.add_column("note")
    for strategy in advice.strategies:
        speedup = marked(
            speedup_text(strategy.predicted_speedup), advice.figures_provenance(strategy.converted)
        )
        summary.add_row(strategy.label, str(len(strategy.converted)), speedup, strategy.note)
    console.print(summary)
    legend = print_legend(advice.figures_provenance(strategy.converted) for strategy in advice.strategies)
    if grouped:
        console.print(_experts_share_line(advice), markup=False, highlight=False)
        if not legend:  # its figures rest on the grouped roofline's bf16 time: marked modelled
            console.print(Text(LEGEND, style="dim"))


def _print_recipe_options(advice: Advice) -> None:
    """The recipes `--recipe auto` chose among, with their provenance, predicted Linear-time speedup and,
    where the step was predicted, the one-GPU step speedup they were ranked by."""
    if not advice.recipe_options:
        return
    options = Table(
        title="Recipes considered (--recipe auto)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    by_step = any(option.predicted_step_speedup is not None for option in advice.recipe_options)
    columns = ("recipe", "provenance", "layers in float8", "speedup")
    ranked_by = "1-GPU step" if advice.tensor_parallel == 1 else f"TP {advice.tensor_parallel} step"
    for name in columns + ((ranked_by,) if by_step else ()):
        options.add_column(name)
    for option in advice.recipe_options:
        step = (
            []
            if not by_step
            else [marked(speedup_text(option.predicted_step_speedup, digits=3), option.provenance)]
        )
        options.add_row(
            option.recipe.value,
            option.provenance,
            str(option.converted),
            marked(speedup_text(option.predicted_speedup), option.provenance),
            *step,
        )
    console.print(options)
    print_legend(option.provenance for option in advice.recipe_options)


def _print_filter_list(advice: Advice, fp8_off: bool) -> None:
    """The filter_fqns list with its proof line, then the conflicts and warnings. For an MXFP8 recipe, the
    list torchtitan 0.3's MX converter takes instead: `fqns`, the layers to convert (`_print_mx_fqns`)."""
    if advice.recipe.is_mx:
        _print_mx_fqns(advice, fp8_off)
    else:
        _print_float8_filter(advice, fp8_off)
    for warning in advice.warnings:
        console.print(Text("warning: ", style="yellow") + Text(warning), soft_wrap=True)


def _print_float8_filter(advice: Advice, fp8_off: bool) -> None:
    """The float8 filter_fqns list (an exclusion list) with its proof line and conflicts."""
    fl = advice.filter_list
    console.print(
        Text("filter_fqns", style="bold") + Text(f" (torchtitan, NeMo AutoModel) {FILTER_FQNS_MEANING}:"),
        soft_wrap=True,
    )
    console.print(json.dumps(list(fl.entries)), markup=False, highlight=False, soft_wrap=True)
    console.print(Text(advice.proof_line(), style="green" if fl.exact else "yellow"), soft_wrap=True)
    if fp8_off:
        console.print(
            Text("nothing is worth converting: the configs --format writes leave FP8 off", style="yellow")
        )
    for conflict in fl.conflicts:
        console.print(Text(f"conflict: {conflict.describe()}", style="yellow"), soft_wrap=True)


def _print_mx_fqns(advice: Advice, fp8_off: bool) -> None:
    """torchtitan 0.3's MX inclusion list (`emit.mx.inclusion_list`) with what it provably converts: the
    float8 exclusion list would mean the opposite in an MX config (`emit.mx` refuses the filter format)."""
    from fp8advisor.emit.mx import inclusion_list

    fl = inclusion_list(advice) if advice.convert_fqns and not fp8_off else None
    if fl is None or not fl.entries:
        what = "nothing is worth converting" if fl is None else "no fqns entry names an advised layer alone"
        console.print(Text(f"{what}: the configs --format writes leave MXFP8 off", style="yellow"))
        if fl is not None:
            for conflict in fl.conflicts:
                console.print(Text(f"conflict: {conflict.describe()}", style="yellow"), soft_wrap=True)
        return
    console.print(
        Text("fqns", style="bold")
        + Text(" (torchtitan 0.3 MXFP8LinearConverter) converts every Linear whose FQN contains an entry:"),
        soft_wrap=True,
    )
    console.print(json.dumps(list(fl.entries)), markup=False, highlight=False, soft_wrap=True)
    words = (
        f"exactly the {len(advice.convert_fqns)} advised layers"
        if fl.exact
        else f"{len(fl.converted)} of the {len(advice.convert_fqns)} advised layers; "
        f"{len(fl.demoted)} stay bf16"
    )
    proof = f"simulated (torchtitan 0.3 MX inclusion rule on all {len(advice.linear_fqns)} nn.Linear FQNs): "
    console.print(Text(proof + f"converts {words}", style="green" if fl.exact else "yellow"), soft_wrap=True)
    for conflict in fl.conflicts:
        console.print(Text(f"conflict: {conflict.describe()}", style="yellow"), soft_wrap=True)


def _print_experts(advice: Advice) -> None:
    """The routed-experts section: one row per group (folded over blocks), decided as one."""

    if not advice.experts:
        return
    rows = expert_rows(advice.experts)
    footnotes: list[str] = []
    console.print(_expert_table(advice, rows, footnotes))
    _print_footnotes(footnotes, prefix="e")
    _print_expert_legends(advice.expert_parallel, rows)


def _expert_table(advice: Advice, rows: list, footnotes: list[str]) -> Table:
    """One row per group of routed experts; the reasons its rows point to join `footnotes`."""
    ranged = any(row.speedup_range for row in rows)
    ep = advice.expert_parallel
    table = Table(
        title="Routed experts: each group converts as one (balanced routing"
        + (f"; per GPU, --ep {ep}" if ep > 1 else "")
        + (f"; range: {_imbalance_words(advice)}" if ranged else "")
        + ")",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=0,
        pad_edge=False,
    )
    table.add_column("experts", overflow="fold")
    for name in (
        "n",
        "E",
        *(["E/GPU"] if ep > 1 else []),
        "k",
        "M/exp",
        "speedup",
        *(["range"] if ranged else []),
    ):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("decision", no_wrap=True)
    for row in rows:
        decision = _decision(row.convert, row.reason, footnotes, prefix="e")
        speedup = row.speedup + (MODELLED_MARK if row.modelled and row.speedup != "-" else "")
        local = [str(row.n_experts if row.E_local is None else row.E_local)] if ep > 1 else []
        cells = [
            row.pattern,
            str(row.count),
            str(row.n_experts),
            *local,
            row.top_k,
            row.M_per_expert,
            speedup,
        ]
        table.add_row(*cells, *([row.speedup_range] if ranged else []), decision)
    return table


def _print_expert_legends(ep: int, rows: list) -> None:
    """What the experts table's columns and marks mean."""
    console.print(
        Text(
            "k: experts per token (top_k, ? unknown); M/exp: rows per expert at balanced routing"
            + (
                f"; E/GPU: the E / {ep} experts each GPU holds, M/exp: tokens x k x {ep} / E"
                if ep > 1
                else ""
            ),
            style="dim",
        )
    )
    if any(row.modelled and row.form == "grouped" for row in rows):
        console.print(
            Text(
                f"{MODELLED_MARK} modelled: the grouped roofline (one cast per group of tokens, per-expert "
                "weight casts), not a measurement: measure with fp8advisor bench --grouped",
                style="dim",
            )
        )
    if any(row.modelled and row.form != "grouped" for row in rows):
        console.print(Text(LEGEND + " (expert Linears)", style="dim"))


def _imbalance_words(advice: Advice) -> str:
    """--expert-imbalance as predicted: the busiest expert gets at most every row, so the prediction clamps
    it to E (per group, E / P under --ep: `predict.predict_expert_group`); said when that happened."""
    imbalance = advice.expert_imbalance
    clamps = sorted(
        {e.experts_per_gpu for e in advice.experts if e.speedup_range and imbalance > e.experts_per_gpu}
    )
    if not clamps:
        return f"imbalance up to {imbalance:g}"
    per_gpu = " per GPU" if advice.expert_parallel > 1 else ""
    return f"imbalance up to {imbalance:g}, clamped to E{per_gpu} = {', '.join(map(str, clamps))}"


def _experts_share_line(advice: Advice) -> str:
    """The routed experts' share of the predicted bf16 GEMM time, and the speedups that count them, each
    marked modelled: the grouped experts' bf16 time is always the grouped roofline's
    (`predict.speedup.GroupTimes`), whatever the provenance of their speedups."""
    share = advice.experts_share or 0.0
    parts = []
    for strategy in advice.strategies:
        value = advice.gemm_speedup_with_experts(strategy) if strategy.predicted_speedup else None
        if value is not None:
            parts.append(f"{strategy.label} {value:.2f}x{MODELLED_MARK}")
    return (
        f"routed experts: {share:.0%}{MODELLED_MARK} of the predicted bf16 GEMM time; counting them, "
        "GEMM-time speedup: " + "; ".join(parts)
    )


def print_in_context(advice: Advice) -> None:
    """The blocks decided by measurement, beside what the profile alone would have advised."""
    found = advice.in_context
    if found is None:
        return
    console.print(Text(found.describe(), style="bold"), soft_wrap=True)
    for choice in found.choices:
        line = (
            f"  {choice.pattern} ({choice.recipe}, {len(choice.instances)} instance(s)): float8 "
            f"{', '.join(name or choice.pattern for name in sorted(choice.float8)) or 'none'}; "
            f"block {choice.time.median * 1e3:.3f} ms, bf16 {choice.bf16_time.median * 1e3:.3f} ms"
        )
        if choice.advice_time is not None and choice.advice_float8 is not None:
            if choice.advice_float8 == choice.float8:
                line += "; the profile advised the same set"
            else:
                difference = choice.advice_time.median / choice.time.median
                line += (
                    f"; the profile's advice ({len(choice.advice_float8)} in float8) measured "
                    f"{choice.advice_time.median * 1e3:.3f} ms ({difference:.3f}x the chosen time)"
                )
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    changed = sorted(
        layer.fqn
        for layer in advice.layers
        if layer.fqn in advice.profile_decisions and advice.profile_decisions[layer.fqn] != layer.convert
    )
    console.print(
        f"  {len(advice.profile_decisions)} layer(s) decided in context, {len(changed)} of them differently "
        "from the profile" + (f" (e.g. {', '.join(changed[:3])})" if changed else ""),
        soft_wrap=True,
        markup=False,
    )
    fallback = [
        layer for layer in advice.layers if layer.counts_in_linear_time and layer.decided_by == "profile"
    ]
    if fallback:
        names = [group.pattern for group in group_layers(fallback)]
        console.print(
            f"  decided by the profile (outside the measured blocks): {', '.join(names)}",
            soft_wrap=True,
            markup=False,
        )


@dataclass(frozen=True)
class ExpertRow:
    """One row of `suggest`'s routed-experts section: expert groups with one decision, folded over blocks.

    `speedup` is the balanced-routing figure ("1.23x", "-" when none); `speedup_range` "low-high" under the
    stated imbalance ("" when balanced only); `modelled` says the figure rests on the roofline. `E_local`: the
    experts per GPU under expert parallelism (`M_per_expert` is per GPU then), None without it."""

    pattern: str
    count: int
    n_experts: int
    top_k: str
    M_per_expert: str
    speedup: str
    speedup_range: str
    modelled: bool
    convert: bool
    reason: str
    form: str
    E_local: int | None = None


def expert_rows(experts: Sequence) -> list[ExpertRow]:
    """The rows of the routed-experts section: `ExpertAdvice` of groups whose names differ only in their
    block indices and whose figures and decision read the same fold into one row
    (`layers.{3..60}.moe.experts`)."""
    from fp8advisor.inspect.folding import fold_repeated

    def key(item) -> tuple:
        e = item.advice
        speedup = None if e.predicted_speedup is None else round(e.predicted_speedup, 2)
        spread = None if e.speedup_range is None else tuple(round(v, 2) for v in e.speedup_range)
        M = None if e.M_per_expert is None else round(e.M_per_expert, 1)
        local = getattr(e, "E_local", None)
        return (e.form, e.n_experts, local, e.top_k, M, speedup, spread, e.convert, e.reason, e.provenance)

    items = [SimpleNamespace(fqn=e.group, advice=e) for e in experts]
    rows = []
    for folded in fold_repeated(items, key):
        e = folded.first.advice
        rows.append(
            ExpertRow(
                pattern=folded.pattern,
                count=len(folded.members),
                n_experts=e.n_experts,
                top_k="?" if e.top_k is None else str(e.top_k),
                M_per_expert="?" if e.M_per_expert is None else f"{e.M_per_expert:g}",
                speedup="-" if e.predicted_speedup is None else f"{e.predicted_speedup:.2f}x",
                speedup_range=""
                if e.speedup_range is None
                else f"{e.speedup_range[0]:.2f}-{e.speedup_range[1]:.2f}",
                modelled=e.provenance not in (None, "measured", "published"),
                convert=e.convert,
                reason=e.reason,
                form=e.form,
                E_local=getattr(e, "E_local", None),
            )
        )
    return rows


__all__ = ["print_brief", "print_in_context", "print_report"]
