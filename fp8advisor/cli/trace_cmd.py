"""`fp8advisor trace`: what the user's own training step ran, whether float8 ran where the config says, and,
given a bf16 and a float8 trace of the same job, what float8 bought there (drawn by `trace_view`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fp8advisor.cli.application import command, err_console
from fp8advisor.errors import TraceError
from fp8advisor.json_output import print_document


@command("trace", short_help="Read training profiler traces: did FP8 run, where, what it bought.")
def trace_command(
    traces: Annotated[
        list[str],
        typer.Argument(
            help="TRACE [TRACE2]: a trace (.json or .json.gz), a folder of rank traces, or torchtitan's "
            "profile folder (its last iteration_N). Two: the bf16 run, then the float8 run of the same job."
        ),
    ],
    rank: int | None = typer.Option(
        None, "--rank", min=0, help="Only this rank's trace (default: every rank)."
    ),
    model: str | None = typer.Option(
        None, "--model", help="The model (as suggest takes it): match the trace's GEMMs to its Linear layers."
    ),
    batch: int = typer.Option(1, "--batch", min=1, help="Sequences per step on one GPU in the traced job."),
    seq: int | None = typer.Option(
        None,
        "--seq",
        min=1,
        show_default=False,
        help="Tokens per sequence in the traced job. Default: read off the trace.",
    ),
    config: str | None = typer.Option(
        None,
        "--config",
        help="The job's float8 config (any format verify reads): exit 1 unless float8 ran exactly there.",
    ),
    trust_config: bool = typer.Option(False, "--trust-config", help="Run a Python config's filter function."),
    recipe: str | None = typer.Option(
        None,
        "--recipe",
        show_default=False,
        help="The float8 trace's recipe. Default: read off its GEMMs' dtypes.",
    ),
    profile: str | None = typer.Option(None, "--profile", help="Profile for the step model's prediction."),
    rules: str | None = typer.Option(
        None,
        "--rules",
        help="Your own kernel rules (TOML [[rule]] kind/op|kernel/source), before the built-in ones.",
    ),
    output: str | None = typer.Option(
        None, "-o", "--output", help="Two traces: write the measured speedups here, for suggest --trace."
    ),
    png: str | None = typer.Option(
        None, "--png", help="Draw the step's breakdown (and, for two traces, the groups)."
    ),
    force: bool = typer.Option(
        False, "--force", help="Replace an existing -o or --png file that fp8advisor did not write."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print everything as one JSON document."),
) -> None:
    """Read one or two profiler traces (torch.profiler, torchtitan's profiling folder).

    One trace: per step, the device's time in bf16 and float8 GEMMs, float8 casts, attention, communication
    and the rest. With --model and --config: every Linear's GEMMs matched by shape, exit 1 unless float8 ran
    exactly where the config converts. Two traces (bf16, float8): each shape group's measured speedup, where
    the step's time went, the step model calibrated to the bf16 trace (with --model), and -o FILE for
    `suggest --trace FILE`.
    """
    from fp8advisor.cli import trace_view
    from fp8advisor.traces.events import trace_files
    from fp8advisor.traces.kernel_rules import RULES, load_rules

    if not 1 <= len(traces) <= 2:
        raise TraceError(
            f"give one or two traces, not {len(traces)}", hint="TRACE, or BF16_TRACE FLOAT8_TRACE"
        )
    if config is not None and model is None:
        raise TraceError("--config needs --model: the config's filter is matched against the model's layers")
    if output is not None and len(traces) != 2:
        raise TraceError(
            "-o writes the speedups measured between two traces", hint="give BF16_TRACE FLOAT8_TRACE"
        )
    chosen_rules = load_rules(rules) if rules is not None else RULES
    files = [trace_files(trace, rank) for trace in traces]
    model_file = model.split(":", 1)[0] if model is not None else None
    _guard_outputs(
        output, png, [*(path for side in files for path in side), config, rules, model_file], force
    )
    sides = [_read_side(trace, paths, chosen_rules) for trace, paths in zip(traces, files, strict=True)]
    document: dict = {"traces": [[trace_view.analysis_json(a) for a in side] for side in sides]}
    if not as_json:
        for trace, side in zip(traces, sides, strict=True):
            trace_view.print_analysis(trace, side)
    failed = False
    traced = None
    if model is not None:
        traced, runs = _match_model(model, sides[-1], batch, seq, config, trust_config, recipe)
        document["layers"] = [trace_view.run_json(run) for run in runs]
        failed = config is not None and not all(run.ok for run in runs)
        if not as_json:
            trace_view.print_layers(traced, runs, config)
    comparison = None
    if len(sides) == 2:
        comparison, calibration = _compare(sides, traced, recipe, profile)
        document["comparison"] = trace_view.comparison_json(comparison, calibration)
        if not as_json:
            trace_view.print_comparison(comparison, calibration)
        if output is not None:
            from fp8advisor.traces.comparison import write_measured

            path = write_measured(output, comparison, traced.batch * traced.seq if traced else None)
            err_console.print(f"wrote {path}: suggest ... --trace {output}")
    if png is not None:
        from fp8advisor.traces.figures import draw

        err_console.print(f"wrote {draw(png, sides, comparison)}")
    if as_json:
        print_document(document)
    if failed:
        raise typer.Exit(1)


def _guard_outputs(output: str | None, png: str | None, inputs: list, force: bool) -> None:
    """-o and --png, checked before the work: never one of the inputs, never a file fp8advisor did not write
    (unless --force), and not the same file twice."""
    from fp8advisor.files import guard_output
    from fp8advisor.traces.comparison import is_measured_file
    from fp8advisor.traces.figures import is_our_picture

    guard_output(output, inputs=inputs, force=force, is_ours=is_measured_file)
    guard_output(png, inputs=inputs, force=force, option="--png", is_ours=is_our_picture)
    if output is not None and png is not None and Path(output).resolve() == Path(png).resolve():
        raise TraceError("-o and --png name the same file", hint="give each its own file")
    if png is not None:  # drawing needs matplotlib: say so before the work
        from fp8advisor.measure.heatmaps import pyplot

        pyplot("no picture", TraceError)


def _read_side(trace: str, paths: list[Path], rules):
    """Every rank's analysis of one TRACE; TraceError when the ranks hold different steps."""
    from fp8advisor.traces.analysis import analyse
    from fp8advisor.traces.events import read_trace

    analyses = []
    for path in paths:
        with err_console.status(f"reading {path} ..."):
            analyses.append(analyse(read_trace(path, rules), rules))
    steps = {analysis.step_numbers for analysis in analyses}
    if len(steps) > 1:
        listed = "; ".join(f"{Path(a.path).name}: {list(a.step_numbers)}" for a in analyses)
        raise TraceError(
            f"the ranks' traces of {trace} hold different steps ({listed})",
            hint="give the traces of one profiling window (torchtitan: one iteration_N folder), or one rank "
            "with --rank",
        )
    return analyses


def _match_model(model, analyses, batch, seq, config, trust_config, recipe):
    from fp8advisor.traces.comparison import detected_recipe
    from fp8advisor.traces.layer_match import check_layers
    from fp8advisor.traces.model_linears import traced_model

    with err_console.status(f"reading {model} on the meta device ..."):
        traced = traced_model(
            model,
            analyses,
            batch=batch,
            seq=seq,
            config_path=config,
            trust_config=trust_config,
            recipe=recipe or detected_recipe(analyses),
        )
    if traced.seq_from_trace:
        err_console.print(f"note: the trace's GEMMs fit {model} at batch {traced.batch} x seq {traced.seq}")
    return traced, check_layers(traced.layers, analyses, traced.lists)


def _compare(sides, traced, recipe, profile):
    """The two traces compared and, with a model, the step model calibrated to the bf16 one."""
    from fp8advisor.traces.comparison import compare

    bf16, float8 = sides
    if _float8_share(bf16) > _float8_share(float8):
        raise TraceError(
            "the first trace ran more float8 GEMMs than the second",
            hint="give the bf16 trace first, then the float8 one",
        )
    layers = traced.layers if traced else ()
    comparison = compare(bf16, float8, layers, recipe)
    calibration = _calibrate(comparison, traced, profile) if traced is not None else None
    return comparison, calibration


def _float8_share(analyses) -> float:
    from fp8advisor.traces.analysis import mean_over_steps

    return mean_over_steps(analyses, lambda step: step.float8_gemm_share)


def _calibrate(comparison, traced, profile):
    """The step model calibrated to the bf16 trace; None when the recipe is unknown or the model too odd."""
    from fp8advisor.advice.decide import advise
    from fp8advisor.advice.step import StepGpu
    from fp8advisor.advice.trace_calibration import calibrate_to_trace
    from fp8advisor.predict.selection import select_profile
    from fp8advisor.predict.speedup import roofline_specs_for
    from fp8advisor.recipes import parse_recipe

    if comparison.recipe not in ("tensorwise", "rowwise", "rowwise_with_gw_hp"):
        return None
    device = next((name for a in comparison.bf16 for name in a.device_names), None)
    choice = select_profile(profile, device_name=device, detect_device=False)
    advice = advise(traced.model_layers, choice, parse_recipe(comparison.recipe), device_capability=None)
    converted = {fqn for group in comparison.groups if group.converted for fqn in group.layers}
    bf16_parts = {part: figures[0] for part, figures in comparison.parts.items()}
    return calibrate_to_trace(
        advice,
        traced.model_layers,
        converted,
        StepGpu.of(roofline_specs_for(choice.primary)),
        bf16_parts,
        comparison.bf16_step_s,
        comparison.float8_step_s,
    )


__all__ = ["trace_command"]
