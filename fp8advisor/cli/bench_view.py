"""What `fp8advisor bench` shows of a sweep on the terminal: the summary of what was measured (failures,
suspect times, compiles, a stop on the time budget), then the speedups: heatmaps of the Linear grid, a table
per recipe of the grouped one.

The tables behind the heatmaps, and the PNG of them, come from `fp8advisor.measure.heatmaps`; the pairing of
each float8 point with its bf16 baseline from `fp8advisor.measure.speedups`.
"""

from __future__ import annotations

from rich.columns import Columns
from rich.table import Table
from rich.text import Text

from fp8advisor.cli.application import console, err_console, resume_command
from fp8advisor.cli.terminal import styled


def _speedup_style(speedup: float) -> str:
    if speedup >= 1.05:
        return "bold green"
    if speedup > 0.95:
        return "yellow"
    return "red"


def render_heatmaps(runs) -> None:
    """One block per recipe, a K x N table per M, cells coloured by speedup (green: float8 pays)."""
    from fp8advisor.measure.heatmaps import format_speedup, heatmap_panels
    from fp8advisor.measure.speedups import pair_with_baseline

    speedups = pair_with_baseline(runs)
    panels = heatmap_panels(speedups)
    if not panels:
        console.print("no float8 point has a bf16 baseline yet: no heatmap")
        return
    basis = ", ".join(sorted({speedup.basis for speedup in speedups}))
    for recipe, recipe_panels in panels.items():
        console.rule(styled((recipe, "bold"), f": speedup over bf16 ({basis})"))
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
    from fp8advisor.measure.speedups import pair_with_baseline

    speedups = pair_with_baseline(runs, grouped=True)
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
            styled(
                "compiles in the timing process: ",
                (f"{cold} cold", style),
                f" (inductor compiled from scratch), {len(compiled) - cold} from cache; "
                f"{sum(record['compile']['seconds'] for record in compiled):.0f} s in all",
            )
        )
    if summary.not_precompiled:
        key, reason = next(iter(summary.not_precompiled.items()))
        console.print(
            styled(
                ("not pre-compiled", "yellow"),
                f": {len(summary.not_precompiled)} point(s), e.g. {_point_words(key)}: {reason}",
            ),
            soft_wrap=True,
        )


def print_summary(summary, emulate: bool, grouped: bool = False) -> None:
    """What the sweep measured: its points, their failures and suspect times, the compiles, the probes that
    failed, and whether the times are emulated."""
    from fp8advisor.measure.results import suspect_reason, unreadable_lines

    records = summary.records
    unreadable = unreadable_lines(summary.unreadable)
    if unreadable:  # on stderr, as every warning
        err_console.print(
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
        styled(
            f"measured {len(records)} points in {summary.elapsed_s:.0f} s: ",
            (f"{summary.ok} ok", "green"),
            ", ",
            (f"{summary.failed} failed", "red"),
            f"; {summary.skipped_points} already saved{resumed}",
        )
    )
    console.print(f"results: {summary.path}")
    _print_compiles(summary)

    suspect = summary.suspect
    if suspect:
        first = suspect[0]
        console.print(
            styled(
                ("suspect kernel time", "yellow"),
                f" for {len(suspect)} point(s), left out by `fit` (e.g. "
                f"{_point_words(first)}: {suspect_reason(first)})",
            ),
            soft_wrap=True,
        )
    failed = [record for record in records if record["status"] == "failed"]
    for record in failed[:10]:
        console.print(
            styled("  ", ("failed", "red"), f" {_point_words(record)}: {record['reason']}"), soft_wrap=True
        )
    if len(failed) > 10:
        console.print(f"  ... and {len(failed) - 10} more (see the results file)")
    # The auxiliary probes fail without failing a point: say so, or the nulls would pass unnoticed.
    ceilings = (summary.runs[-1].header.get("ceilings") or {}) if summary.runs else {}
    if "error" in ceilings:
        console.print(
            styled(("device ceilings not measured", "yellow"), f": {ceilings['error']}"), soft_wrap=True
        )
    no_breakdown = [record for record in records if record.get("breakdown_error")]
    if no_breakdown:
        console.print(
            styled(
                ("no GEMM/cast breakdown", "yellow"),
                f" for {len(no_breakdown)} point(s) (their times stand): "
                f"{no_breakdown[0]['breakdown_error']}",
            ),
            soft_wrap=True,
        )
    if emulate:
        what = (
            "an emulated float8 grouped GEMM (torchao's casts, bf16 GEMMs)"
            if grouped
            else ("torchao's emulated float8")
        )
        console.print(
            styled(
                ("EMULATED", "bold yellow"),
                f": CPU wall-clock times of {what}, not GPU measurements; `fp8advisor fit` refuses them for "
                "a real profile.",
            )
        )


def print_budget_stop(summary, time_budget: float) -> None:
    """The sweep stopped on --time-budget: what is saved, what is left, and the command that resumes it."""
    console.print(
        styled(
            ("time budget", "bold yellow"),
            f": stopped after {summary.elapsed_s:.0f} of {time_budget:.0f} s, "
            f"before a point that would not have finished in time; {summary.saved_points} of "
            f"{summary.total_points} points of {_scope(summary)} are saved, {summary.left_points} left. "
            f"Resume with the same command:\n  {resume_command()}",
        ),
        soft_wrap=True,
    )


__all__ = ["print_budget_stop", "print_summary", "render_grouped_speedups", "render_heatmaps"]
