"""`fp8advisor bench`: sweep the local GPU (or the CPU emulation) and save the results, then show heatmaps."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.columns import Columns
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from fp8advisor.cli.common import command, console, err_console, resume_command
from fp8advisor.errors import AdvisorError
from fp8advisor.request import DEFAULT_SEQ

DEFAULT_OUT = Path("fp8advisor-results")


def _integers(values: list[str] | None, option: str) -> list[int] | None:
    """`--M 1024,4096 --M 8192` -> [1024, 4096, 8192]."""
    if not values:
        return None
    numbers = []
    for value in values:
        for part in value.replace(" ", "").split(","):
            if not part:
                continue
            try:
                numbers.append(int(part))
            except ValueError:
                raise AdvisorError(
                    f"{option} takes integers, got {part!r}", hint=f"e.g. {option} 1024,4096"
                ) from None
    return numbers


def _names(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [part for value in values for part in value.replace(" ", "").split(",") if part]


def _speedup_style(speedup: float) -> str:
    if speedup >= 1.05:
        return "bold green"
    if speedup > 0.95:
        return "yellow"
    return "red"


def render_heatmaps(runs) -> None:
    """One block per recipe, a K x N table per M, cells coloured by speedup (green: float8 pays)."""
    from fp8advisor.measure.heatmaps import format_speedup, heatmap_panels
    from fp8advisor.measure.results import pair_with_baseline

    speedups = pair_with_baseline(runs)
    panels = heatmap_panels(speedups)
    if not panels:
        console.print("no float8 point has a bf16 baseline yet: no heatmap")
        return
    basis = ", ".join(sorted({speedup.basis for speedup in speedups}))
    for recipe, recipe_panels in panels.items():
        console.rule(f"[bold]{recipe}[/]: speedup over bf16 ({basis})")
        tables = []
        for panel in recipe_panels:
            table = Table(title=f"M = {panel.M}", title_style="bold", show_lines=False, padding=(0, 1))
            table.add_column("K \\ N", justify="right", style="dim")
            for N in panel.Ns:
                table.add_column(str(N), justify="right")
            for K, row in zip(panel.Ks, panel.cells, strict=True):
                cells = [
                    Text("·", style="dim")
                    if cell is None
                    else Text(format_speedup(cell), style=_speedup_style(cell))
                    for cell in row
                ]
                table.add_row(str(K), *cells)
            tables.append(table)
        console.print(Columns(tables, padding=(0, 2)))


def render_grouped_speedups(runs) -> None:
    """One table per recipe of the grouped points' speedups, a row per (E, M per expert, K, N)."""
    from fp8advisor.measure.heatmaps import format_speedup
    from fp8advisor.measure.results import pair_grouped_with_baseline

    speedups = pair_grouped_with_baseline(runs)
    if not speedups:
        console.print("no float8 grouped point has a bf16 baseline yet: no table")
        return
    for recipe in sorted({speedup.recipe for speedup in speedups}):
        rows = [speedup for speedup in speedups if speedup.recipe == recipe]
        basis = ", ".join(sorted({speedup.basis for speedup in rows}))
        table = Table(
            title=f"grouped {recipe}: speedup over bf16 torch._grouped_mm ({basis})", title_justify="left"
        )
        for header in ("E", "M/expert", "K", "N", "speedup"):
            table.add_column(header, justify="right")
        for speedup in rows:
            cells = [str(size) for size in speedup.shape]
            text = Text(format_speedup(speedup.speedup), style=_speedup_style(speedup.speedup))
            table.add_row(*cells, text)
        console.print(table)


def _point_words(key_or_record) -> str:
    """'M=1024 K=4096 N=4096 rowwise' or 'E=8 M/expert=128 K=4096 N=14336 rowwise', from a point key or a
    results record."""
    from fp8advisor.measure.results import GROUPED_AXES, point_key

    key = key_or_record if isinstance(key_or_record, tuple) else point_key(key_or_record)
    *sizes, recipe = key
    names = ("E", "M/expert", "K", "N") if len(sizes) == len(GROUPED_AXES) else ("M", "K", "N")
    return " ".join(f"{name}={size}" for name, size in zip(names, sizes, strict=True)) + f" {recipe}"


def _scope(summary) -> str:
    """'grid 'default'' or 'shard 2/4 of grid 'default''."""
    grid = f"grid {summary.grid.name!r}"
    return f"shard {summary.shard} of {grid}" if summary.shard else grid


def _print_compiles(summary) -> None:
    """Where the timing process's compiles came from, and pre-compilations that did not happen."""
    compiled = [record for record in summary.records if record.get("compile")]
    if compiled:
        cold = summary.cold_compiles
        style = "yellow" if cold else "green"
        console.print(
            f"compiles in the timing process: [{style}]{cold} cold[/] (inductor compiled from scratch), "
            f"{len(compiled) - cold} from cache; "
            f"{sum(record['compile']['seconds'] for record in compiled):.0f} s in all"
        )
    if summary.not_precompiled:
        key, reason = next(iter(summary.not_precompiled.items()))
        console.print(
            f"[yellow]not pre-compiled[/]: {len(summary.not_precompiled)} point(s), e.g. "
            f"{_point_words(key)}: {reason}",
            soft_wrap=True,
        )


def _print_summary(summary, emulate: bool, grouped: bool = False) -> None:
    from fp8advisor.measure.results import suspect_reason, unreadable_lines

    records = summary.records
    unreadable = unreadable_lines(summary.unreadable)
    if unreadable:
        console.print(
            Text("warning: ", style="yellow") + Text(f"{unreadable}; this run measures their points again"),
            soft_wrap=True,
        )
    if summary.path is None:
        if summary.total_points == 0:
            console.print(f"nothing to measure: {_scope(summary)} has no points")
            return
        console.print(
            f"nothing to measure: all {summary.total_points} points of {_scope(summary)} are "
            f"already saved ({', '.join(summary.resumed_from)})"
        )
        return
    resumed = f", continuing {', '.join(summary.resumed_from)}" if summary.resumed_from else ""
    console.print(
        f"measured {len(records)} points in {summary.elapsed_s:.0f} s: [green]{summary.ok} ok[/], "
        f"[red]{summary.failed} failed[/]; {summary.skipped_points} already saved{resumed}"
    )
    console.print(f"results: {summary.path}")
    _print_compiles(summary)

    suspect = summary.suspect
    if suspect:
        first = suspect[0]
        console.print(
            f"[yellow]suspect kernel time[/] for {len(suspect)} point(s), left out by `fit` (e.g. "
            f"{_point_words(first)}: {suspect_reason(first)})",
            soft_wrap=True,
        )
    failed = [record for record in records if record["status"] == "failed"]
    for record in failed[:10]:
        console.print(f"  [red]failed[/] {_point_words(record)}: {record['reason']}", soft_wrap=True)
    if len(failed) > 10:
        console.print(f"  ... and {len(failed) - 10} more (see the results file)")
    # The auxiliary probes fail without failing a point: say so, or the nulls would pass unnoticed.
    ceilings = (summary.runs[-1].header.get("ceilings") or {}) if summary.runs else {}
    if "error" in ceilings:
        console.print(f"[yellow]device ceilings not measured[/]: {ceilings['error']}", soft_wrap=True)
    no_breakdown = [record for record in records if record.get("breakdown_error")]
    if no_breakdown:
        console.print(
            f"[yellow]no GEMM/cast breakdown[/] for {len(no_breakdown)} point(s) (their times stand): "
            f"{no_breakdown[0]['breakdown_error']}",
            soft_wrap=True,
        )
    if emulate:
        what = (
            "an emulated float8 grouped GEMM (torchao's casts, bf16 GEMMs)"
            if grouped
            else ("torchao's emulated float8")
        )
        console.print(
            f"[bold yellow]EMULATED[/]: CPU wall-clock times of {what}, not GPU "
            "measurements; `fp8advisor fit` refuses them for a real profile."
        )


@command("bench", short_help="Measure float8 against bf16 on this GPU (or the CPU emulation).")
def bench(
    grid: Annotated[
        str | None,
        typer.Option(
            "--grid",
            help="quick | default | llama | full (default: default; emulated with --emulate). With "
            "--grouped: quick | default | emulated.",
        ),
    ] = None,
    grouped: Annotated[
        bool,
        typer.Option(
            "--grouped",
            help="Measure MoE grouped expert GEMMs instead: torch._grouped_mm (bf16) against torchao's "
            "float8 rowwise grouped GEMM (torch._scaled_grouped_mm), forward + backward, compiled, over "
            "(E, M per expert, K, N). Default grid: E 8, 64, 256 x M per expert 128, 1024, 8192 x K and N "
            "768, 4096, 14336, less the shapes too large for one GPU (60 shapes, 120 configurations).",
        ),
    ] = False,
    E: Annotated[
        list[str] | None, typer.Option("--E", help="With --grouped: experts, overriding the grid: --E 8,64.")
    ] = None,
    M_per_expert: Annotated[
        list[str] | None,
        typer.Option(
            "--M-per-expert",
            help="With --grouped: tokens per expert (multiples of 16), overriding the grid: --M-per-expert "
            "128,1024.",
        ),
    ] = None,
    M: Annotated[
        list[str] | None,
        typer.Option("--M", help="Tokens per step (rows), overriding the grid: --M 1024,8192."),
    ] = None,
    K: Annotated[list[str] | None, typer.Option("--K", help="in_features, overriding the grid.")] = None,
    N: Annotated[list[str] | None, typer.Option("--N", help="out_features, overriding the grid.")] = None,
    recipes: Annotated[
        list[str] | None,
        typer.Option(
            "--recipes",
            help="Comma-separated: tensorwise, rowwise, rowwise_with_gw_hp (default all); bf16 always runs.",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help=f"Results directory (default {DEFAULT_OUT}); a sweep resumes what is already there."
        ),
    ] = None,
    emulate: Annotated[
        bool,
        typer.Option("--emulate", help="Run on the CPU with emulated float8 (tiny grid, labelled emulated)."),
    ] = False,
    compile_workers: Annotated[
        int | None,
        typer.Option(
            "--compile-workers", help="Processes pre-compiling graphs before timing (default: cores - 2)."
        ),
    ] = None,
    compile_timeout: Annotated[
        float,
        typer.Option(
            "--compile-timeout",
            help="Seconds a compile worker may spend on one configuration before it is killed (the point "
            "then compiles in the timing process).",
        ),
    ] = 300.0,
    time_budget: Annotated[
        float | None,
        typer.Option(
            "--time-budget",
            help="Seconds this command may run: no point starts that would not finish inside it; what is "
            "measured is saved and the same command resumes. E.g. 540 under a 10-minute job limit.",
        ),
    ] = None,
    shard: Annotated[
        str | None,
        typer.Option(
            "--shard",
            help="I/N: measure only the I-th of N deterministic slices of the grid (one per GPU or machine); "
            "`fit` merges the results.",
        ),
    ] = None,
    png: Annotated[bool, typer.Option("--png/--no-png", help="Also write the heatmaps as a PNG.")] = True,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="Measure this model's own blocks in context instead of a grid: model.py[:factory(args)], "
            "a HF config, a Hub id (org/name) or torchtitan:MODEL/FLAVOR (results default to the profile "
            "directory's in-context/, where suggest finds them).",
        ),
    ] = None,
    batch: Annotated[int, typer.Option("--batch", help="With --model: sequences per step on one GPU.")] = 1,
    seq: Annotated[
        int | None,
        typer.Option(
            "--seq", help=f"With --model: tokens per sequence (default {DEFAULT_SEQ}; 64 with --emulate)."
        ),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option("--profile", help="With --model: the profile whose advice seeds the search."),
    ] = None,
) -> None:
    """Measure float8 against bf16 on this GPU over a grid of (M, K, N): torchao's LayerNorm-Linear-Sigmoid
    block, forward + backward, under torch.compile. With --model, measure the model's own blocks instead.
    Results go to --out as JSON Lines; Ctrl-C stops cleanly, --time-budget stops in time, and the same
    command resumes."""
    started = time.monotonic()
    if model is not None:
        grid_options = {
            "--grid": grid,
            "--M": M,
            "--K": K,
            "--N": N,
            "--shard": shard,
            "--compile-workers": compile_workers is not None,
        }
        given = [name for name, value in grid_options.items() if value]
        given += ["--grouped"] if grouped else []
        if given:
            raise AdvisorError(
                f"{', '.join(given)} describe a grid; --model measures the model's own blocks",
                hint="leave them out with --model, or leave --model out for a grid",
            )
        from fp8advisor.cli.bench_model import bench_model

        bench_model(
            model,
            batch=batch,
            seq=seq if seq is not None else (64 if emulate else DEFAULT_SEQ),
            recipes=_names(recipes),
            out=out,
            emulate=emulate,
            time_budget=time_budget,
            profile=profile,
            started=started,
        )
        return
    for name, value in {"--batch": batch != 1, "--seq": seq, "--profile": profile}.items():
        if value:
            raise AdvisorError(
                f"{name} goes with --model", hint="e.g. fp8advisor bench --model model.py --seq 8192"
            )
    if not grouped:
        for name, value in {"--E": E, "--M-per-expert": M_per_expert}.items():
            if value:
                raise AdvisorError(
                    f"{name} goes with --grouped", hint="e.g. fp8advisor bench --grouped --E 8,64"
                )
    elif M:
        raise AdvisorError(
            "--M is the tokens of a Linear; with --grouped give the tokens per expert",
            hint="e.g. fp8advisor bench --grouped --M-per-expert 128,1024",
        )
    out = out if out is not None else DEFAULT_OUT
    from fp8advisor.device import require_fp8_gpu
    from fp8advisor.files import check_output_directory
    from fp8advisor.measure import sweep as bench_module
    from fp8advisor.measure.schedule import Shard, check_time_budget
    from fp8advisor.measure.sweep import BenchSettings, SweepInterrupted, make_grid

    chosen_shard = Shard.parse(shard) if shard is not None else None
    check_time_budget(time_budget)
    if not compile_timeout > 0:
        raise AdvisorError(
            f"--compile-timeout must be a positive number of seconds, got {compile_timeout}",
            hint="e.g. --compile-timeout 300",
        )
    if compile_workers is not None and compile_workers < 0:
        raise AdvisorError(
            f"--compile-workers must be 0 or more, got {compile_workers}",
            hint="0 compiles in the timing process itself; leave it out for cores - 2",
        )
    check_output_directory(out)
    if not emulate:
        require_fp8_gpu()  # exit 2 with a clear message before anything else happens
    settings = BenchSettings(
        emulate=emulate, compile_workers=compile_workers, compile_timeout_s=compile_timeout
    )
    workload = bench_module.LINEAR
    if grouped:
        from fp8advisor.measure.grouped import GROUPED, make_grouped_grid, with_grouped_defaults

        chosen = make_grouped_grid(
            grid,
            E=_integers(E, "--E"),
            M_per_expert=_integers(M_per_expert, "--M-per-expert"),
            K=_integers(K, "--K"),
            N=_integers(N, "--N"),
            recipes=_names(recipes),
            emulate=emulate,
        )
        settings, workload = with_grouped_defaults(settings), GROUPED
    else:
        chosen = make_grid(
            grid,
            M=_integers(M, "--M"),
            K=_integers(K, "--K"),
            N=_integers(N, "--N"),
            recipes=_names(recipes),
            emulate=emulate,
        )
    extras = [f"shard {chosen_shard}"] if chosen_shard else []
    extras += [f"time budget {time_budget:.0f} s"] if time_budget is not None else []
    left_out = getattr(chosen, "left_out", ())
    if left_out:
        extras.append(f"{len(left_out)} shape(s) too large for one GPU left out")
    console.print(
        f"{'grouped ' if grouped else ''}grid [bold]{chosen.name}[/]: {len(chosen.shapes)} shape(s) x "
        f"{len(chosen.recipes)} configurations "
        f"({', '.join(chosen.recipes)}) -> {out}"
        + (f" ({', '.join(extras)})" if extras else "")
        + ("  [yellow](emulated on the CPU)[/]" if emulate else "")
    )
    progress = Progress(
        TextColumn("{task.description:<12}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[point]}", style="dim"),
        console=console,
        transient=False,
    )
    tasks: dict[str, int] = {}

    def on_progress(stage: str, completed: int, total: int, description: str) -> None:
        if stage not in tasks:
            tasks[stage] = progress.add_task(stage, total=total, point="")
        progress.update(tasks[stage], completed=completed, total=total, point=description)

    try:
        with progress:
            summary = bench_module.run_sweep(
                chosen,
                out,
                settings,
                shard=chosen_shard,
                time_budget_s=time_budget,
                started=started,
                on_progress=on_progress,
                **({"workload": workload} if grouped else {}),
            )
    except SweepInterrupted as interrupted:
        summary = interrupted.summary
        err_console.print(
            f"\ninterrupted: {summary.saved_points} of {summary.total_points} points are saved in {out} "
            f"({len(summary.records)} from this run). Run the same command again to resume."
        )
        raise typer.Exit(130) from None
    _print_summary(summary, emulate, grouped)
    if summary.stopped_by_budget:
        console.print(
            f"[bold yellow]time budget[/]: stopped after {summary.elapsed_s:.0f} of {time_budget:.0f} s, "
            f"before a point that would not have finished in time; {summary.saved_points} of "
            f"{summary.total_points} points of {_scope(summary)} are saved, {summary.left_points} left. "
            f"Resume with the same command:\n  {resume_command()}",
            soft_wrap=True,
        )
    if not summary.runs:
        return
    if grouped:
        render_grouped_speedups(summary.runs)
        return
    render_heatmaps(summary.runs)
    if png:
        from fp8advisor.measure.heatmaps import speedup_heatmaps_png

        latest = summary.path or summary.runs[-1].path
        try:
            written = speedup_heatmaps_png(summary.runs, latest.with_name(latest.stem + "-heatmap.png"))
        except AdvisorError as error:
            err_console.print(f"[yellow]no PNG[/]: {error}", soft_wrap=True)
        else:
            console.print(f"heatmap: {written}")
