"""`fp8advisor fit`: turn bench results (or a published speedup table) into a speedup profile."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from fp8advisor.cli.application import command, console, warn_passed_over
from fp8advisor.cli.terminal import styled
from fp8advisor.errors import ResultsError


def _parse_software(entries: list[str]) -> dict[str, str]:
    software = {}
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or not key:
            raise ResultsError(f"--software {entry!r} is not KEY=VALUE", hint="e.g. --software torch=2.8.0a0")
        software[key.strip()] = value.strip()
    return software


def _percent(value: float) -> str:
    return f"{100 * value:.1f}%"


@command("fit", short_help="Fit a speedup profile from bench results or a published table.")
def fit(
    results: Annotated[
        list[Path], typer.Argument(help="Bench results (.jsonl files or directories) or CSV speedup tables.")
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Profile file to write (default: <user profile dir>/<name>.json)."
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="Profile name (default: <gpu>-<provenance>-<recipes>-<date>).")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Mix results of different GPUs or software versions.")
    ] = False,
    allow_emulated: Annotated[
        bool,
        typer.Option(
            "--allow-emulated",
            help="Accept `bench --emulate` results (the profile says 'emulated'; for tests).",
        ),
    ] = False,
    device: Annotated[
        str | None, typer.Option(help="GPU of a CSV table, e.g. 'NVIDIA H100 80GB HBM3'.")
    ] = None,
    source: Annotated[
        str | None, typer.Option(help="Where the figures come from (default: the inputs).")
    ] = None,
    method: Annotated[
        str | None, typer.Option(help="How they were measured (default: from the results).")
    ] = None,
    software: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE software version of a table (repeatable).")
    ] = None,
    created: Annotated[
        str | None, typer.Option(help="Date stamped in the profile (default: today, UTC).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as one JSON document.")] = False,
) -> None:
    """Fit where float8 pays per recipe from measured speedups; report the error; write a profile."""
    from fp8advisor.files import guard_output
    from fp8advisor.json_output import print_document
    from fp8advisor.predict.fit import fit_profile
    from fp8advisor.predict.profile_files import looks_like_profile, profile_path_for, save_profile

    # Before the work: -o must be writable, not an input, and a profile if it exists (nothing else is
    # replaced; --force is about mixing machines, not about files).
    guard_output(output, inputs=results, is_ours=looks_like_profile, force_flag=None)
    report = fit_profile(
        results,
        name=name,
        force=force,
        allow_emulated=allow_emulated,
        device_name=device,
        source=source,
        method=method,
        software=_parse_software(software or []) or None,
        created=created,
    )
    warn_passed_over(report.passed_over)  # run files of a directory that cannot be read: one line each
    profile = report.profile
    # a plain name (fit_profile checked it): <user profile dir>/<name>.json stays in that directory
    destination = output or profile_path_for(profile.name)
    if output is None:
        guard_output(destination, inputs=results, is_ours=looks_like_profile, force_flag=None)
    if as_json:
        path = save_profile(profile, destination)
        print_document({**report.to_json(), "written": str(path)})  # plain, valid JSON
        return
    _print_report(report)
    path = save_profile(profile, destination)
    console.print(f"wrote {path}")


def _print_report(report) -> None:
    """The profile fitted, its notes, its error beside the roofline's, and where float8 pays per recipe."""
    profile = report.profile
    sources = f"{len(report.sources)} source(s)"
    console.print(
        styled((profile.name, "bold"), f": {profile.provenance}, {profile.device.name}, from {sources}")
    )
    for note in report.notes:
        console.print(styled(("note:", "yellow"), f" {note}"))
    console.print(_error_table(report))
    grouped = profile.grouped
    if grouped is not None:
        speedups = [point.speedup for point in grouped.points]
        console.print(
            f"grouped expert GEMMs: {len(grouped.points)} measured (E, M per expert, K, N) point(s), "
            f"speedup {min(speedups):.2f}x to {max(speedups):.2f}x"
        )
    for recipe, rows in report.thresholds.items():
        console.print(_threshold_table(recipe, rows))


def _error_table(report) -> Table:
    """Per recipe (and the grouped GEMMs), the fit's leave-one-out error and the unfitted roofline's."""
    profile = report.profile
    errors = Table(
        title="Error on the measured points: the profile's predictor (leave-one-out) and, for comparison, "
        "the unfitted roofline model",
        title_justify="left",
    )
    for header in (
        "recipe",
        "predictor",
        "points",
        "median rel. error",
        "worst rel. error",
        "'speedup > 1' right",
    ):
        errors.add_column(header, justify="left" if header in ("recipe", "predictor") else "right")
    for recipe, body in profile.recipes.items():
        for label, error in (("fit, LOO", body.error), ("roofline", report.roofline_errors.get(recipe))):
            errors.add_row(*_error_row(recipe, label, error, len(body.points)))
    grouped = profile.grouped
    if grouped is not None:
        errors.add_row(
            *_error_row(f"grouped {grouped.recipe}", "fit, LOO", grouped.error, len(grouped.points))
        )
    return errors


def _error_row(name: str, label: str, error, points: int) -> list[str]:
    """One row of the error table; '-' for the figures of a predictor without an error (`points` points)."""
    if error is None:
        return [name, label, str(points), "-", "-", "-"]
    return [
        name,
        label,
        str(error.n),
        _percent(error.median_relative_error),
        _percent(error.worst_relative_error),
        _percent(error.sign_accuracy),
    ]


def _threshold_table(recipe: str, rows) -> Table:
    """Per M, how many cells float8 pays in, the fitted rule and its agreement, against torchao's filter."""
    table = Table(
        title=f"{recipe}: where float8 pays (speedup > 1), per M, against torchao's auto filter",
        title_justify="left",
    )
    table.add_column("M", justify="right", no_wrap=True)
    table.add_column("pays", justify="right", no_wrap=True)
    table.add_column("convert when", no_wrap=True)
    table.add_column("agrees", justify="right", no_wrap=True)
    table.add_column("torchao auto filter agrees", justify="right")
    for row in rows:
        torchao = "n/a (no rule)" if row.torchao_agreement is None else f"{row.torchao_agreement}/{row.cells}"
        style = (
            "" if row.torchao_agreement is None or row.torchao_agreement >= row.rule_agreement else "yellow"
        )
        table.add_row(
            str(row.M),
            f"{row.paying}/{row.cells}",
            row.rule_text,
            f"{row.rule_agreement}/{row.cells}",
            Text(torchao, style=style),
        )
    return table
