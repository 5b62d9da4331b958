"""`fp8advisor suggest`: per-layer float8 advice, an exact filter list and a ready training config."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from fp8advisor.advice.decide import (
    Advice,
    advise,
    check_expert_imbalance,
    default_predictor,
    group_layers,
)
from fp8advisor.cli.common import command, console, err_console
from fp8advisor.emit.writer import (
    ConfigFormat,
    check,
    check_format_recipe,
    format_warnings,
    leaves_fp8_off,
    parse_format,
    pinned_command,
    read_committed,
    render,
    what_the_file_does,
    write,
)
from fp8advisor.errors import AdvisorError
from fp8advisor.files import guard_output
from fp8advisor.frameworks.formats import FILE_FORMATS, FILTER_FQNS_MEANING
from fp8advisor.predict.roofline import get_specs
from fp8advisor.recipes import ALL_RECIPES, Recipe, parse_recipe
from fp8advisor.request import AUTO, DEFAULT_BATCH, DEFAULT_MIN_SPEEDUP, DEFAULT_SEQ, SuggestRequest

_FORMATS = ", ".join(f.value for f in FILE_FORMATS)


def _choices_help(lead: str, names: list[str], width: int = 48) -> str:
    """Help text listing `names` whole: lines broken between names, never inside one ("nemo-" / "automodel"
    is what Click's wrapping does to a hyphenated name); Click keeps the lines of a paragraph led by \\b."""
    lines, line = [lead], ""
    for name in names:
        if line and len(line) + len(name) + 2 > width:
            lines.append(line + ",")
            line = ""
        line = f"{line}, {name}" if line else name
    return "\b\n" + "\n".join([*lines, line + "."])


def _format_for(fmt: str | None, path: str | None) -> ConfigFormat | None:
    """--format, or the one a file name implies (.toml: torchtitan-toml, .json: filter)."""
    if fmt is not None:
        return parse_format(fmt)
    if path is None:
        return None
    lowered = path.lower()
    if lowered.endswith(".toml"):
        return ConfigFormat.TORCHTITAN_TOML
    if lowered.endswith(".json"):
        return ConfigFormat.FILTER
    raise AdvisorError(f"which config format should {path} hold?", hint=f"add --format (one of: {_FORMATS})")


def _input_files(target: str, *profiles: str | None) -> list[Path]:
    """The files `suggest` reads, which -o must never replace: the model file (or config.json) and the
    profiles given as paths. (Not `target.parse_target`: that also checks the file exists, which is the
    model loader's error to give.)"""
    path = Path(target.split(":", 1)[0])
    if path.is_dir():
        path = path / "config.json"
    return [path] + [Path(profile) for profile in profiles if profile is not None]


@command("suggest", short_help="Advise which Linear layers to convert; write the training config.")
def suggest(
    target: str = typer.Argument(
        ...,
        help="The model: model.py[:factory(args)], a HF config.json or directory, a Hub id (org/name), or "
        "torchtitan:MODEL/FLAVOR.",
    ),
    batch: int = typer.Option(DEFAULT_BATCH, "--batch", help="Sequences per step on one GPU."),
    seq: int = typer.Option(DEFAULT_SEQ, "--seq", help="Tokens per sequence."),
    recipe: str = typer.Option(
        AUTO,
        "--recipe",
        help="tensorwise, rowwise, rowwise_with_gw_hp, or auto: of the recipes whose figures have the "
        "strongest provenance (measured, then published, then modelled), the one with the lowest predicted "
        "Linear time; recipes with weaker figures are not ranked against them (torchtitan-py: no "
        "tensorwise).",
    ),
    profile: str | None = typer.Option(
        None, "--profile", help="Profile name or path (default: the best one for this GPU type)."
    ),
    grouped_profile: str | None = typer.Option(
        None,
        "--grouped-profile",
        help="MoE: profile name or path of the experts' grouped GEMM figures (`fit` of `bench --grouped`; "
        "default: the profile's own, else the best one for its GPU type, else the grouped roofline).",
    ),
    min_speedup: float = typer.Option(
        DEFAULT_MIN_SPEEDUP, "--min-speedup", help="Convert a layer when its predicted speedup reaches this."
    ),
    tensor_parallel: int = typer.Option(
        1, "--tp", help="Tensor-parallel degree (each GPU multiplies a slice)."
    ),
    expert_parallel: int = typer.Option(
        1,
        "--ep",
        help="MoE: expert-parallel degree P (each GPU holds E / P experts and multiplies the rows routed to "
        "them from P GPUs' tokens); must divide every expert group's E.",
    ),
    fmt: str | None = typer.Option(
        None, "--format", help=_choices_help("Config to write:", [f.value for f in FILE_FORMATS])
    ),
    output: str | None = typer.Option(None, "-o", "--output", help="Write the config to this file."),
    check_file: str | None = typer.Option(
        None, "--check", help="Exit 0 if FILE equals what would be written now, 1 with a diff otherwise."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the advice as one JSON document."),
    force: bool = typer.Option(
        False, "--force", help="Let -o replace a file that fp8advisor did not write (its inputs never)."
    ),
    gpu: str | None = typer.Option(
        None, "--gpu", help="GPU of the step model and profile: H100, H200, B200, ... (default: this one)."
    ),
    world_size: int = typer.Option(1, "--world-size", help="FSDP degree (GPUs sharing the parameters)."),
    ac: str = typer.Option("none", "--ac", help="Activation checkpointing: none, selective or full."),
    grad_accum: int = typer.Option(1, "--grad-accum", help="Micro-steps per optimizer step."),
    float8_all_gather: bool = typer.Option(
        False, "--float8-all-gather", help="FSDP all-gathers converted weights in float8 (tensorwise)."
    ),
    expert_imbalance: float = typer.Option(
        1.0,
        "--expert-imbalance",
        help="MoE: the busiest expert's rows over the mean (1.0: balanced routing; the others share the "
        "rest equally). Experts are decided at balanced routing; X > 1 adds each group's speedup range over "
        "imbalances from 1 to X.",
    ),
    measured: str | None = typer.Option(
        None,
        "--measured",
        help="Decide the measured blocks from these in-context results (bench --model --out DIR); default: "
        "the profile directory's in-context/ when it holds this model's, for this GPU and token count.",
    ),
) -> None:
    """Decide layer by layer where float8 pays, and write the config that converts exactly those layers."""
    if recipe != AUTO:
        parse_recipe(recipe)  # a clear error before the model is built
    expert_imbalance = check_expert_imbalance(expert_imbalance)
    step_config = _step_config(world_size, ac, grad_accum, float8_all_gather, recipe)
    if gpu is not None:
        get_specs(gpu)  # an unknown GPU fails before the work
    if output is not None and check_file is not None:
        raise AdvisorError(
            "-o and --check do not go together", hint="write with -o, verify in CI with --check"
        )
    config_format = _format_for(fmt, output or check_file)
    if config_format is not None and recipe != AUTO:
        check_format_recipe(config_format, parse_recipe(recipe))  # a recipe its framework lacks: say so now
    # Before the work: a path that cannot be written, or a file that is not ours to replace, fails at once.
    if output is not None:
        guard_output(output, inputs=_input_files(target, profile, grouped_profile), force=force)
    committed = read_committed(check_file) if check_file is not None else None

    from fp8advisor.inspect.layers import inspect_model
    from fp8advisor.predict.profile import select_profile

    with err_console.status(f"inspecting {target} ..."):
        model_layers = inspect_model(target, batch=batch, seq=seq)
    choice = select_profile(profile, grouped=grouped_profile, device_name=gpu)
    allowed = _recipes_the_format_holds(config_format)
    # --check regenerates exactly as the file's own command says: in-context results only when it names them
    automatic = measured is None and check_file is None
    in_context = _in_context_reader(measured, automatic, model_layers, choice, gpu, tensor_parallel)
    with err_console.status("predicting ..."):
        advice = advise(
            model_layers,
            choice,
            recipe,
            min_speedup,
            tensor_parallel=tensor_parallel,
            auto_recipes=allowed,
            in_context=in_context,
            expert_imbalance=expert_imbalance,
            expert_parallel=expert_parallel,
        )
    step = None
    if check_file is None and (as_json or config_format is None or output is not None):
        with err_console.status("predicting the training step ..."):
            step = _step_report(advice, model_layers, choice, gpu, step_config)
    request = SuggestRequest(
        target=target,
        batch=batch,
        seq=seq,
        recipe=recipe,
        profile=profile,
        min_speedup=min_speedup,
        tensor_parallel=tensor_parallel,
        measured=measured,
        expert_parallel=expert_parallel,
        grouped_profile=grouped_profile,
    )
    if config_format is not None:  # on stderr, never in the file: a torchtitan config from other names
        for warning in format_warnings(advice, config_format):
            err_console.print(Text("warning: ", style="yellow") + Text(warning), soft_wrap=True)

    predictor = default_predictor(choice)  # megatron decides a fused GEMM (qkv, gate+up) with it
    if check_file is not None:
        assert config_format is not None
        expected = render(advice, config_format, request, output=check_file, predictor=predictor)
        ok, diff = check(check_file, expected, committed)
        if ok:
            err_console.print(f"{check_file} is up to date ({config_format.value}, {advice.proof_line()})")
            return
        regenerate = pinned_command(request, advice, config_format, check_file)
        print(diff, end="")  # plain print: no Rich markup, emoji or wrapping in a diff
        err_console.print(
            Text(f"{check_file} is stale: ", style="bold red") + Text(f"regenerate it with: {regenerate}")
        )
        raise typer.Exit(1)

    text = None
    if config_format is not None:
        text = render(advice, config_format, request, output=output, predictor=predictor)
    if output is not None:
        assert text is not None
        write(output, text)
    if text is not None and advice.in_context is not None and advice.in_context.automatic:
        err_console.print(
            Text("note: ", style="yellow")
            + Text(
                f"in-context results found in {advice.in_context.source} decided "
                f"{len(advice.profile_decisions)} layers; the config's check command names that directory "
                "with --measured: for CI, commit a copy of it and give --measured its path"
            ),
            soft_wrap=True,
        )
    if as_json:
        document = {**advice.to_json(), "step": None if step is None else step.to_json()}
        print(json.dumps(document, indent=2))  # plain print: Rich would wrap long strings
        return
    if config_format is not None and output is None:
        # stdout holds the config alone, ready to pipe; the people's part goes to stderr
        print(text, end="")
        _print_brief(
            advice,
            what_the_file_does(advice, config_format, predictor),
            leaves_fp8_off(advice, config_format, predictor),
        )
        return
    _print_report(advice, leaves_fp8_off(advice, config_format, predictor))
    _print_in_context(advice)
    _print_step(step, advice)
    if output is not None:
        console.print(f"wrote {output} ({config_format.value})")


def _recipes_the_format_holds(config_format: ConfigFormat | None) -> tuple[Recipe, ...]:
    """What "auto" chooses among: torchtitan 0.3 has no tensorwise, Transformer Engine only tensorwise."""
    if config_format is ConfigFormat.TORCHTITAN_PY:
        return tuple(r for r in ALL_RECIPES if r is not Recipe.TENSORWISE)
    if config_format is ConfigFormat.MEGATRON:
        return (Recipe.TENSORWISE,)
    return ALL_RECIPES


def _in_context_reader(
    measured: str | None, automatic: bool, model_layers, choice, gpu: str | None, tensor_parallel: int
):
    """`measured.in_context_reader` for the GPU family of --gpu, else of the profile."""
    from fp8advisor.advice.in_context import in_context_reader
    from fp8advisor.predict.roofline import gpu_family

    family = gpu_family(gpu) if gpu is not None else choice.primary.family
    return in_context_reader(
        measured,
        automatic=automatic,
        model_layers=model_layers,
        family=family,
        tensor_parallel=tensor_parallel,
    )


def _step_config(world_size: int, ac: str, grad_accum: int, float8_all_gather: bool, recipe: str):
    from fp8advisor.advice.step import Checkpointing, StepConfig
    from fp8advisor.errors import parse_choice

    config = StepConfig(
        world_size=world_size,
        ac=parse_choice(Checkpointing, ac, "--ac value"),
        grad_accum=grad_accum,
        float8_all_gather=float8_all_gather,
    )
    config.check(None if recipe == AUTO else parse_recipe(recipe))
    return config


def _step_report(advice: Advice, model_layers, choice, gpu: str | None, config):
    """The step model for the advice, or None with tensor parallelism (not modelled) or without an op census
    (a model inspected by other means)."""
    from fp8advisor.advice.step import StepGpu, step_report
    from fp8advisor.predict.speedup import roofline_specs_for

    if advice.tensor_parallel > 1 or getattr(model_layers, "census", None) is None:
        return None
    if config.float8_all_gather and advice.recipe is not Recipe.TENSORWISE:
        config = replace(config, float8_all_gather=False)  # auto chose another recipe: nothing to gather
    specs = get_specs(gpu) if gpu is not None else roofline_specs_for(choice.primary)
    return step_report(advice, model_layers, choice, StepGpu.of(specs), config)


def _speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _footnoted_reason(reason: str) -> str:
    """The reason a decision row points to with a footnote: '' for 'predicted 1.35x >= 1.20' (the speedup
    has its own column, the threshold is in the title); a block measured in context without its times (the
    in-context section shows them); any other whole."""
    from fp8advisor.advice.in_context import MEASURED_IN_CONTEXT

    if reason.startswith("predicted ") and (" >= " in reason or " < " in reason):
        return ""
    if reason.startswith(MEASURED_IN_CONTEXT):
        return MEASURED_IN_CONTEXT
    return reason


#: Marks a speedup resting on modelled (roofline) or emulated figures, not on measured or published ones.
MODELLED_MARK = "~"
_LEGEND = (
    f"{MODELLED_MARK} modelled (roofline formula), not measured or published: measure with fp8advisor bench"
)


def _modelled(provenance: str | None) -> bool:
    """Figures neither measured nor published (the roofline model, or emulated): the ones to set apart."""
    return provenance is not None and provenance not in ("measured", "published")


def _marked(text: str, provenance: str | None) -> str:
    """`text` with MODELLED_MARK when the figures it rests on are `_modelled`."""
    return text + MODELLED_MARK if _modelled(provenance) else text


def _print_legend(provenances: Iterable[str | None]) -> bool:
    """The mark's legend, under a table whose figures (of these provenances) carry it; whether printed."""
    if any(_modelled(provenance) for provenance in provenances):
        console.print(Text(_LEGEND, style="dim"))
        return True
    return False


def _print_brief(advice: Advice, what_the_file_does: str, fp8_off: bool) -> None:
    """The terminal's part when the config goes to stdout: the advice in one line, and what the file does
    (the line of its header: for megatron, its own module count, not the substring simulation)."""
    err_console.print(
        f"{advice.recipe.value} with profile {advice.profile_name}: "
        f"{len(advice.convert_fqns)} layers advised for float8, "
        f"predicted Linear-time speedup {_speedup(advice.strategy('advice').predicted_speedup)}"
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


def _print_report(advice: Advice, fp8_off: bool) -> None:
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

    groups = group_layers(advice.layers)
    footnotes: list[str] = []
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
        speedup = _marked(_speedup(layer.predicted_speedup), layer.provenance)
        if layer.how == "extrapolated":
            speedup += "*"
        decision = Text("float8", style="green") if layer.convert else Text("bf16", style="dim")
        reason = _footnoted_reason(layer.reason)
        if reason:
            if reason not in footnotes:
                footnotes.append(reason)
            decision.append(f" [{footnotes.index(reason) + 1}]")
        shard = [] if tp == 1 else ["-" if layer.shard is None else "{}x{}".format(*layer.shard)]
        table.add_row(
            group.pattern, str(group.count), str(layer.M), f"{layer.K}x{layer.N}", *shard, speedup, decision
        )
    console.print(table)
    for number, reason in enumerate(footnotes, start=1):
        console.print(f"[{number}] {reason}", markup=False, highlight=False, soft_wrap=True)
    _print_legend(layer.provenance for layer in advice.layers)
    if tp > 1:
        console.print(
            Text(
                f"per GPU: the 1/{tp} slice predicted, K split (row-parallel) or N (column-parallel), "
                "whichever float8 gains less from",
                style="dim",
            )
        )
    if any(layer.how == "extrapolated" for layer in advice.layers):
        console.print(Text("* outside the profile's measured grid (extrapolated)", style="dim"))

    _print_experts(advice)

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
        speedup = _marked(_speedup(strategy.predicted_speedup), advice.figures_provenance(strategy.converted))
        summary.add_row(strategy.label, str(len(strategy.converted)), speedup, strategy.note)
    console.print(summary)
    legend = _print_legend(advice.figures_provenance(strategy.converted) for strategy in advice.strategies)
    if grouped:
        console.print(_experts_share_line(advice), markup=False, highlight=False)
        if not legend:  # its figures rest on the grouped roofline's bf16 time: marked modelled
            console.print(Text(_LEGEND, style="dim"))

    if advice.recipe_options:
        options = Table(
            title="Recipes considered (--recipe auto)",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
        )
        for name in ("recipe", "provenance", "layers in float8", "speedup"):
            options.add_column(name)
        for option in advice.recipe_options:
            options.add_row(
                option.recipe.value,
                option.provenance,
                str(option.converted),
                _marked(_speedup(option.predicted_speedup), option.provenance),
            )
        console.print(options)
        _print_legend(option.provenance for option in advice.recipe_options)

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
    for warning in advice.warnings:
        console.print(Text("warning: ", style="yellow") + Text(warning), soft_wrap=True)


def _print_experts(advice: Advice) -> None:
    """The routed-experts section: one row per group (folded over blocks), decided as one."""
    from fp8advisor.measure.heatmaps import expert_rows

    if not advice.experts:
        return
    rows = expert_rows(advice.experts)
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
    footnotes: list[str] = []
    for row in rows:
        decision = Text("float8", style="green") if row.convert else Text("bf16", style="dim")
        reason = _footnoted_reason(row.reason)
        if reason:
            if reason not in footnotes:
                footnotes.append(reason)
            decision.append(f" [e{footnotes.index(reason) + 1}]")
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
    console.print(table)
    for number, reason in enumerate(footnotes, start=1):
        console.print(f"[e{number}] {reason}", markup=False, highlight=False, soft_wrap=True)
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
        console.print(Text(_LEGEND + " (expert Linears)", style="dim"))


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
    marked modelled: the grouped experts' bf16 time is always the grouped roofline's (`predict.GroupTimes`),
    whatever the provenance of their speedups."""
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


def _print_in_context(advice: Advice) -> None:
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


def _seconds(value: float) -> str:
    return f"{value * 1e3:.1f} ms" if value < 1 else f"{value:.3f} s"


def _print_step(step, advice: Advice) -> None:
    if step is None:
        console.print(
            Text(
                "training step: not predicted with tensor parallelism (--tp > 1 is not modelled)", style="dim"
            )
        )
        return
    config = step.config
    console.print(
        Text("Predicted training step", style="bold")
        + Text(
            f" ({step.gpu}, {config.world_size} GPU(s), --ac {config.ac.value}"
            + (f", --grad-accum {config.grad_accum}" if config.grad_accum > 1 else "")
            + (", float8 all-gather" if config.float8_all_gather else "")
            + f"; in-step efficiency {step.calibration.in_step_efficiency:.3f}, fitted to one published bf16"
            " throughput, leaves every speedup untouched)"
        ),
        soft_wrap=True,
    )
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name in ("strategy", "float8 layers", "step", "tokens/s/GPU", "speedup"):
        table.add_column(
            name, justify="left" if name == "strategy" else "right", no_wrap=True, min_width=len(name)
        )
    for prediction in step.predictions:
        speedup = (
            "-"
            if prediction.name == "bf16"
            else _marked(f"{step.speedup(prediction.name):.3f}x", prediction.speedup_provenance)
        )
        table.add_row(
            prediction.label,
            str(prediction.converted),
            _seconds(prediction.step_s),
            f"{prediction.tokens_per_s:,.0f}",
            speedup,
        )
    console.print(table)
    _print_legend(prediction.speedup_provenance for prediction in step.predictions)

    advice_step = step.prediction("advice")
    terms = Table(
        title="Where the step goes (all terms in --json)", title_justify="left", box=box.SIMPLE_HEAD
    )
    for name in ("term", "bf16", "share", "this advice", "share", "figures"):
        terms.add_column(name, justify="left" if name in ("term", "figures") else "right")
    for base, mine in zip(step.baseline.terms, advice_step.terms, strict=True):
        if base.seconds == 0 and mine.seconds == 0:
            continue
        terms.add_row(
            base.name.replace("_", " "),
            _seconds(base.seconds),
            f"{base.seconds / step.baseline.step_s:.0%}",
            _seconds(mine.seconds),
            f"{mine.seconds / advice_step.step_s:.0%}",
            mine.provenance if mine.seconds else base.provenance,
        )
    console.print(terms)
    console.print(Text(_break_even_line(step, advice), style="bold"), soft_wrap=True)


def _break_even_line(step, advice: Advice) -> str:
    found = step.break_even
    if found is None:
        return ""
    recipe, target = advice.recipe.value, f"{found.target:.2f}x step speedup"
    if found.tokens is None:
        return f"break-even: {recipe} never reaches {target} up to {found.searched_up_to:,} tokens/GPU step"
    where = f"batch {found.batch} at seq {found.seq}; {found.speedup:.4f}x there"
    if found.speedup_below is not None:
        where += f", {found.speedup_below:.4f}x at {found.tokens - 16:,}"
    return f"break-even: {recipe} reaches {target} from {found.tokens:,} tokens per GPU step ({where})"
