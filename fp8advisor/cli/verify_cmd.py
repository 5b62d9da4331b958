"""`fp8advisor verify`: does the config convert exactly the advised layers, and do they run in float8?"""

from __future__ import annotations

import math

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from fp8advisor.cli.application import command, console, err_console
from fp8advisor.frameworks.formats import FILTER_FQNS_MEANING
from fp8advisor.json_output import print_document
from fp8advisor.recipes import parse_recipe
from fp8advisor.request import AUTO, DEFAULT_BATCH, DEFAULT_MIN_SPEEDUP, DEFAULT_SEQ

#: Differences listed in full up to this many; the rest are counted (the table and --json have them all).
_MAX_LISTED = 20
#: Short words for the table's check column (the list under the table says it in full).
_SHORT = {
    "converted against the advice": "extra fp8",
    "advised, left in bf16": "missing fp8",
    "converted, never called": "never called",
    "float8 missing where converted": "no fp8 ran",
    "float8 where not converted": "fp8 leak",
    "numerics": "low SQNR",
    "the framework's own conversion differs": "framework differs",
}


@command("verify", short_help="Check that a config converts exactly the advised layers.")
def verify_command(
    target: str = typer.Argument(
        ...,
        help="The model: model.py[:factory(args)], a HF config.json or directory, a Hub id (org/name), or "
        "torchtitan:MODEL/FLAVOR.",
    ),
    config: str = typer.Option(
        ..., "--config", help="The training config to check (any format suggest writes)."
    ),
    batch: int | None = typer.Option(
        None,
        "--batch",
        show_default=False,
        help="Sequences per step on one GPU (for the advice). Default: the config's header, else "
        f"{DEFAULT_BATCH}.",
    ),
    seq: int | None = typer.Option(
        None,
        "--seq",
        show_default=False,
        help=f"Tokens per sequence (for the advice). Default: the config's header, else {DEFAULT_SEQ}.",
    ),
    recipe: str | None = typer.Option(
        None,
        "--recipe",
        show_default=False,
        help="Recipe to advise with. Default: the config's header, else auto: the one the config names "
        "(a bare filter list: the fastest predicted).",
    ),
    profile: str | None = typer.Option(
        None, "--profile", help="Profile name or path, as for suggest. Default: the config's header."
    ),
    grouped_profile: str | None = typer.Option(
        None,
        "--grouped-profile",
        show_default=False,
        help="MoE experts' grouped GEMM profile, as for suggest. Default: the config's header, else found "
        "as suggest finds it.",
    ),
    min_speedup: float | None = typer.Option(
        None,
        "--min-speedup",
        show_default=False,
        help=f"As for suggest. Default: the config's header, else {DEFAULT_MIN_SPEEDUP}.",
    ),
    tensor_parallel: int | None = typer.Option(
        None,
        "--tp",
        min=1,
        show_default=False,
        help="Tensor-parallel degree, as for suggest. Default: the config's header, else 1.",
    ),
    context_parallel: int | None = typer.Option(
        None,
        "--cp",
        min=1,
        show_default=False,
        help="Context-parallel degree, as for suggest. Default: the config's header, else 1.",
    ),
    expert_parallel: int | None = typer.Option(
        None,
        "--ep",
        min=1,
        show_default=False,
        help="Expert-parallel degree, as for suggest. Default: the config's header, else 1.",
    ),
    measured: str | None = typer.Option(
        None,
        "--measured",
        show_default=False,
        help="In-context results, as for suggest --measured. Default: the config's header, else none.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON document."),
    trust_config: bool = typer.Option(
        False,
        "--trust-config",
        help="Run a Python config's filter function (default: evaluate it without running the file's code).",
    ),
) -> None:
    """Convert the model as the config says, run one float8 step, and check it against the advice.

    The batch, seq, recipe, profile, min speedup, --tp, --ep and --measured come from the command line, else
    from the header of a config `fp8advisor suggest` wrote (--trace, the measured speedups of
    `fp8advisor trace`, from the header only). Exit 0 when the config converts exactly the
    advised layers and every check passes; 1 with what differs. A Megatron-Core precision config is checked
    with Megatron's own matcher (simulated without megatron-core) and runs no step.
    """
    if recipe is not None and recipe != AUTO:
        parse_recipe(recipe)  # a clear error before the model is built
    from fp8advisor.verification.settings import advice_settings
    from fp8advisor.verification.verifier import verify

    request, from_header, disagreement = advice_settings(
        config,
        target,
        batch=batch,
        seq=seq,
        recipe=recipe,
        profile=profile,
        min_speedup=min_speedup,
        tensor_parallel=tensor_parallel,
        context_parallel=context_parallel,
        measured=measured,
        expert_parallel=expert_parallel,
        grouped_profile=grouped_profile,
    )
    if disagreement is not None:
        err_console.print(Text("note: ", style="yellow") + Text(disagreement), soft_wrap=True)
    with err_console.status(f"verifying {config} on {target} ..."):
        report = verify(request, config, trust_config=trust_config)
    if as_json:
        print_document(report.to_json())  # plain text, valid JSON (fp8advisor.json_output)
    else:
        _print_report(report, request, from_header)
    if not report.passed:
        raise typer.Exit(report.exit_code)


def _db(value: float | None) -> str:
    if value is None:
        return "-"
    return "inf" if math.isinf(value) else f"{value:.1f}"


def _group(report) -> list[tuple[str, int, object]]:
    """Fold rows that read the same (repeated blocks) into one: (pattern, count, members)."""
    from fp8advisor.inspect.folding import fold_repeated

    def same(layer) -> tuple:
        return (
            layer.K,
            layer.N,
            layer.converted,
            layer.advised,
            layer.calls,
            layer.float8_gemms,
            layer.high_precision_gemms,
            layer.problems,
            layer.status,
        )

    return [(row.pattern, row.count, list(row.members)) for row in fold_repeated(report.layers, same)]


def _print_experts(report) -> None:
    """One line per group of grouped MoE experts: what the config does with it, and the advice."""
    for group in report.experts:
        advised = "fp8" if group.advised else "bf16"
        if group.converted is None:
            state = Text("bf16 (this format cannot convert them)", style="dim")
        else:
            state = Text("fp8", style="green") if group.converted else Text("bf16", style="dim")
        figure = "" if group.predicted_speedup is None else f", predicted {group.predicted_speedup:.2f}x"
        check = (
            Text("ok", style="green") if not group.problems else Text("; ".join(group.problems), style="red")
        )
        console.print(
            Text(f"experts {group.group}: config ")
            + state
            + Text(f", advice {advised}{figure} ({group.provenance or 'no figure'}): ")
            + check,
            soft_wrap=True,
        )


def _print_report(report, settings, from_header: tuple[str, ...]) -> None:
    """The config against the advice: what each says and how the run went, a row per layer (repeated blocks
    folded), the experts, and the verdict with the differences."""
    config = report.config
    console.print(
        Text(report.target, style="bold") + Text(f"  with {config.path} ({config.framework.value})"),
        soft_wrap=True,
    )
    for line in _header_lines(report, settings, from_header):
        console.print(line, soft_wrap=True)
    for note in report.notes:
        console.print(Text(f"note: {note}", style="dim"), soft_wrap=True)
    console.print(_layer_table(report))
    _print_experts(report)
    if _step_ran(report):
        console.print(
            Text(
                f"SQNR dB (output/input gradient): each converted layer alone, {_low(report)} vs its bf16 "
                "twin "
                "on the "
                "same input and gradient (minimum over folded rows); "
                f"flagged under {report.sqnr_threshold_db:g} dB",
                style="dim",
            )
        )
    _print_verdict(report)


def _step_ran(report) -> bool:
    """Whether `verify` ran a step (a Megatron precision config runs none: `megatron_check`)."""
    from fp8advisor.verification.megatron_check import NOT_RUN_MODE

    return report.execution.mode != NOT_RUN_MODE


def _header_lines(report, settings, from_header: tuple[str, ...]) -> list[str]:
    """The config: line (and the size of its filter list), the advice: line, and the run: line (and the
    whole model's SQNR)."""
    config = report.config
    execution = report.execution
    lines = [
        # with FP8 off the recipe is the framework's default, which trains nothing: not worth a word
        f"config:  FP8 {f'on, recipe {report.recipe.value}' if config.enabled else 'OFF'}, "
        f"rule: {config.rule}",
        f"framework: {report.framework}",
        _advice_line(report, settings, from_header),
        f"run:     {execution.device}, {execution.mode}: {execution.why}"
        if _step_ran(report)
        else f"run:     nothing ran: {execution.why}",
    ]
    if execution.model_output_sqnr_db is not None:
        lines.append(
            f"         whole-model output SQNR float8 vs bf16: {_db(execution.model_output_sqnr_db)} dB"
        )
    if config.enabled and config.framework.uses_substring_filter and config.filter_fqns is not None:
        from fp8advisor.frameworks.module_rules import AUTO_FILTER_FLAG

        entries = [entry for entry in config.filter_fqns if entry != AUTO_FILTER_FLAG]
        count = f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}"
        if config.recipe is not None and config.recipe.is_mx:  # an inclusion list: what it names converts
            meaning = "converts to MXFP8 every nn.Linear whose FQN contains an entry (substring match)"
            lines.insert(1, f"         fqns ({count}) {meaning}")
        else:
            lines.insert(1, f"         filter_fqns ({count}) {FILTER_FQNS_MEANING}")
    return lines


def _advice_line(report, settings, from_header: tuple[str, ...]) -> str:
    """What the advice was computed with, and which of its settings came from the config's header."""
    return (
        f"advice:  profile {report.profile}, batch {report.batch} x seq {report.seq}, "
        f"min speedup {report.min_speedup:g}"
        + (
            f", --tp {settings.tensor_parallel}"
            if settings is not None and settings.tensor_parallel > 1
            else ""
        )
        + (
            f", --ep {settings.expert_parallel}"
            if settings is not None and settings.expert_parallel > 1
            else ""
        )
        + (f", in-context results {settings.measured}" if settings is not None and settings.measured else "")
        + (
            f", grouped profile {settings.grouped_profile}"
            if settings is not None and settings.grouped_profile
            else ""
        )
        + (f" ({', '.join(n.replace('_', ' ') for n in from_header)} from its header)" if from_header else "")
    )


def _layer_table(report) -> Table:
    """A row per layer (repeated blocks folded): its shape, the config's decision beside the advice's where
    they differ, the GEMMs that ran per precision, the worst SQNR and what its check found."""
    rows = _group(report)
    table = Table(
        title="Layers (repeated blocks folded)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=0,  # the box's one-space divider separates the columns: more room for the names
        pad_edge=False,
    )
    # FQNs stay whole while the table fits (people search for them). On a terminal too narrow for them they
    # fold: a no_wrap or min_width name column would push the check column off the right edge instead.
    table.add_column("layers", overflow="fold")
    table.add_column("n", justify="right", no_wrap=True)
    table.add_column("K x N", justify="right", no_wrap=True)
    table.add_column("config", no_wrap=True)  # "(advice)" beside it, in red, where the two differ
    table.add_column("fp8/hp", justify="right", no_wrap=True)  # GEMMs that ran, per precision
    table.add_column("SQNR dB", justify="right", no_wrap=True)  # output/input gradient
    table.add_column("check", overflow="fold", min_width=5)
    for pattern, count, members in rows:
        layer = members[0]
        decision = Text("fp8", style="green") if layer.converted else Text("bf16", style="dim")
        if layer.converted != layer.advised:
            decision += Text(f" ({'fp8' if layer.advised else 'bf16'})", style="red")
        outputs = [m.sqnr_output_db for m in members if m.sqnr_output_db is not None]
        grads = [m.sqnr_grad_input_db for m in members if m.sqnr_grad_input_db is not None]
        sqnr = "-" if not outputs else f"{_db(min(outputs))}/{_db(min(grads) if grads else None)}"
        gemms = f"{layer.float8_gemms}/{layer.high_precision_gemms}" if layer.calls else "not run"
        kinds = ", ".join(dict.fromkeys(_SHORT.get(p.split(":")[0], p.split(":")[0]) for p in layer.problems))
        check = Text("ok", style="green") if layer.ok else Text(kinds, style="red")
        table.add_row(pattern, str(count), f"{layer.K}x{layer.N}", decision, gemms, sqnr, check)
    return table


def _framework_summary(report) -> str:
    """What the FAIL line adds when the framework's own conversion differs from fp8advisor's reading of the
    file, whose counts the line gives: where, and how many places."""
    from fp8advisor.verification.report import DifferenceKind

    count = sum(1 for difference in report.differences if difference.kind is DifferenceKind.FRAMEWORK)
    if not count:
        return ""
    return f" (as fp8advisor reads the file); the framework's own conversion differs in {count} place(s)"


def _low(report) -> str:
    """What the converted layers run: "MXFP8" for an MXFP8 recipe, else "float8"."""
    recipe = getattr(report, "recipe", None)
    return "MXFP8" if recipe is not None and recipe.is_mx else "float8"


def _print_verdict(report) -> None:
    """PASS, or FAIL with the differences (the first _MAX_LISTED in full)."""
    from fp8advisor.verification.experts import experts_summary

    config = report.config
    converted, advised = len(report.converted), len(report.advised)
    state_word = "off" if not config.enabled else "on, every layer filtered out"
    if report.passed and not advised:
        console.print(
            Text("PASS: ", style="bold green")
            + Text(
                f"the advice converts no layer and the config converts none (FP8 {state_word}): every "
                "Linear runs in bf16" + experts_summary(report)
            )
        )
        return
    if report.passed:
        low = _low(report)
        ran = (
            f", each ran {low} GEMMs forward and backward, no other layer did, and every SQNR clears the "
            "threshold"
            if _step_ran(report)
            else f" as the framework: line says; nothing ran, so no {low} GEMM or SQNR was checked"
        )
        console.print(
            Text("PASS: ", style="bold green")
            + Text(f"the config converts exactly the {advised} advised layers{ran}" + experts_summary(report))
        )
        return
    console.print(
        Text("FAIL: ", style="bold red")
        + Text(
            f"{len(report.differences)} difference(s); the config converts {converted}, the advice {advised}"
            + _framework_summary(report)
            + experts_summary(report)
        )
    )
    for difference in report.differences[:_MAX_LISTED]:
        console.print(Text("  - ") + Text(difference.describe()), soft_wrap=True)
    if len(report.differences) > _MAX_LISTED:
        console.print(f"  ... and {len(report.differences) - _MAX_LISTED} more (see --json)")
