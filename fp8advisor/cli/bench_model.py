"""`fp8advisor bench --model`: the model's own blocks, measured in context
(`fp8advisor.measure.block_bench`)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

import typer
from rich import box
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from fp8advisor.advice.in_context import in_context_dir
from fp8advisor.cli.application import console, err_console, resume_command, warn_passed_over
from fp8advisor.cli.terminal import styled
from fp8advisor.recipes import BASELINE, Recipe, parse_recipe

#: The recipes measured when --recipes is not given: the two torchtitan and NeMo AutoModel users choose
#: between (rowwise_with_gw_hp on request).
DEFAULT_RECIPES = (Recipe.TENSORWISE.value, Recipe.ROWWISE.value)


def bench_model(
    target: str,
    *,
    batch: int,
    seq: int,
    recipes: Sequence[str] | None,
    out: Path | None,
    emulate: bool,
    time_budget: float | None,
    profile: str | None,
    started: float,
) -> None:
    """`bench --model TARGET`: find the model's distinct blocks, measure each in context from the profile's
    advice and the other seeds, save the results to `out` (resumable) and show what the search chose."""
    from fp8advisor.advice.seeds import seed_sets
    from fp8advisor.device import require_fp8_gpu
    from fp8advisor.files import check_output_directory
    from fp8advisor.inspect.blocks import discover_blocks
    from fp8advisor.inspect.target import load_model
    from fp8advisor.measure.block_sweep import BlockSweepInterrupted, run_block_sweep
    from fp8advisor.measure.protocol import BenchSettings
    from fp8advisor.measure.schedule import check_time_budget
    from fp8advisor.predict.selection import select_profile

    check_time_budget(time_budget)
    chosen_recipes = [parse_recipe(name).value for name in recipes or DEFAULT_RECIPES if name != BASELINE]
    chosen_recipes = list(dict.fromkeys(chosen_recipes))
    out = out if out is not None else in_context_dir()
    check_output_directory(out)
    if not emulate:
        require_fp8_gpu()
        from fp8advisor.measure.recipe_support import check_recipes_on_device, gpu_capability

        check_recipes_on_device(chosen_recipes, gpu_capability())  # MXFP8 on 10.x only
    choice = select_profile(profile)
    warn_passed_over(choice.passed_over)
    # Every unit is compiled: torch._dynamo imported first, so that a Hugging Face model's modules are
    # imported with its real decorators, not with the stand-ins of compat.dynamo_deferred (no-op then).
    import torch._dynamo  # noqa: F401

    with err_console.status(f"inspecting {target} ..."):
        discovery = discover_blocks(
            load_model(target, "meta"), batch=batch, seq=seq, recipes=tuple(chosen_recipes)
        )
    seeds = seed_sets(discovery, chosen_recipes, choice)
    layers = discovery.model_layers
    console.print(
        styled(
            (str(target), "bold"),
            f"  batch {batch} x seq {seq} = {layers.tokens} tokens; {len(discovery.units)} distinct unit(s): "
            + ", ".join(f"{unit.pattern} ({len(unit.convertible)} convertible)" for unit in discovery.units)
            + f"; recipes {', '.join(chosen_recipes)}; advice seeds from {choice.name} -> {out}",
            ("  (emulated on the CPU)", "yellow") if emulate else "",
        ),
        soft_wrap=True,
    )
    progress = Progress(
        TextColumn("measuring"),
        BarColumn(),
        TextColumn("{task.completed} variants"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[point]}", style="dim", markup=False),
        console=console,
    )
    task = progress.add_task("measure", total=None, point="")

    def on_progress(completed: int, description: str) -> None:
        progress.update(task, completed=completed, point=description)

    try:
        with progress:
            summary = run_block_sweep(
                discovery,
                chosen_recipes,
                seeds,
                out,
                BenchSettings(emulate=emulate, breakdown=False),
                seeds_from=choice.name,
                time_budget_s=time_budget,
                started=started,
                on_progress=on_progress,
            )
    except BlockSweepInterrupted as interrupted:
        err_console.print(
            f"\ninterrupted: {len(interrupted.summary.records)} variant(s) of this run are saved in {out}. "
            "Run the same command again to resume."
        )
        raise typer.Exit(130) from None
    _print_summary(summary, discovery, chosen_recipes, out, emulate, time_budget)


def _ms(wall: dict | None) -> str:
    return "-" if not wall else f"{wall['median'] * 1e3:.4g}"


def _passed_over(passed_over: dict[str, str], out: Path) -> str:
    """One line for the in-context runs in `out` that this sweep reuses nothing of (the default directory
    holds every model's runs: one line, not one per run)."""
    (first, why), *more = passed_over.items()
    if not more:
        return f"the earlier run {first} in {out} ({why})"
    return f"{len(more) + 1} earlier runs in {out}, e.g. {first} ({why})"


def _print_summary(summary, discovery, recipes, out: Path, emulate: bool, time_budget) -> None:
    """What the block sweep measured, each block's times by recipe and the layers it chose, then what to do
    next."""
    _print_outcome(summary, out)
    choices = {(choice["block"], choice["recipe"]): choice for choice in summary.choices}
    console.print(_block_table(discovery, recipes, choices))
    console.print(
        "speedup 'noise': the chosen and bf16 times overlap in their 20th-80th percentiles", style="dim"
    )
    for (pattern, recipe), choice in choices.items():
        names = [name or pattern for name in choice["float8"]]
        console.print(
            f"  {pattern} {recipe}: float8 {', '.join(names) or 'none'}", soft_wrap=True, markup=False
        )
    _print_next_step(summary, discovery, out, emulate, time_budget)


def _print_outcome(summary, out: Path) -> None:
    """Unreadable and passed-over earlier results, the variants measured, and the failures."""
    from fp8advisor.measure.results import unreadable_lines

    unreadable = unreadable_lines(summary.unreadable)
    if unreadable:  # on stderr, as every warning
        err_console.print(Text("warning: ", style="yellow") + Text(unreadable), soft_wrap=True)
    if summary.passed_over:
        console.print(
            Text("not reused: ", style="bold") + Text(_passed_over(summary.passed_over, out)), soft_wrap=True
        )
    reused = f"; {summary.reused} reused from {', '.join(summary.resumed_from)}" if summary.reused else ""
    console.print(
        styled(
            f"measured {len(summary.records)} variant(s) in {summary.elapsed_s:.0f} s: ",
            (f"{summary.ok} ok", "green"),
            ", ",
            (f"{summary.failed} failed", "red"),
            reused,
        )
    )
    if summary.path is not None:
        console.print(f"results: {summary.path}")
    for pattern, reason in summary.failed_units.items():
        console.print(styled("  ", ("failed", "red"), f" {pattern}: {reason}"), soft_wrap=True)
    for record in summary.records:
        if record["status"] == "failed" and record["block"] not in summary.failed_units:
            console.print(
                styled(
                    "  ",
                    ("failed", "red"),
                    f" {record['block']} {record['recipe']} {record['float8']}: {record['reason']}",
                ),
                soft_wrap=True,
            )


def _block_table(discovery, recipes, choices: dict) -> Table:
    """A row per block and recipe: the median times of bf16, of the seeds and of the chosen set, and the
    chosen set's speedup ('noise' where its times overlap bf16's)."""
    from fp8advisor.measure.block_search import Timing

    table = Table(
        title="Block forward+backward, median ms (all: every convertible Linear in float8; advice: the "
        "profile's; auto: torchao's filter; chosen: the search's; float8: its layers/convertible)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for name in ("block", "recipe", "bf16", "all", "advice", "auto", "chosen", "float8", "speedup"):
        text = name in ("block", "recipe")  # may wrap; the figures may not
        table.add_column(name, justify="left" if text else "right", no_wrap=not text, overflow="fold")
    for unit in discovery.units:
        for recipe in recipes:
            choice = choices.get((unit.pattern, recipe))
            if choice is None:
                continue
            seeds = choice["seeds"]
            base, chosen = (
                Timing.from_wall(choice["bf16_wall_time_s"]),
                Timing.from_wall(choice["wall_time_s"]),
            )
            if chosen.clearly_faster_than(base) or base.clearly_faster_than(chosen):
                versus = f"{base.median / chosen.median:.3f}x"
            else:
                versus = "noise"
            table.add_row(
                unit.pattern,
                recipe,
                _ms(choice["bf16_wall_time_s"]),
                *(_ms((seeds.get(name) or {}).get("wall_time_s")) for name in ("all", "advice", "auto")),
                _ms(choice["wall_time_s"]),
                f"{len(choice['float8'])}/{len(unit.convertible)}",
                versus,
            )
    return table


def _print_next_step(summary, discovery, out: Path, emulate: bool, time_budget) -> None:
    """The command that resumes a sweep stopped by its budget, the word that emulated times advise nothing,
    or the suggest command these measurements decide."""
    if summary.stopped_by_budget:
        console.print(
            styled(
                ("time budget", "bold yellow"),
                f": stopped after {summary.elapsed_s:.0f} of {time_budget:.0f} s, before a variant that "
                f"would not have finished in time. Resume with the same command:\n  {resume_command()}",
            ),
            soft_wrap=True,
        )
    if emulate:
        console.print(
            styled(
                ("EMULATED", "bold yellow"),
                ": CPU wall-clock times of torchao's emulated float8, not GPU measurements; "
                "`suggest --measured` refuses them for advice.",
            )
        )
    elif summary.choices and not summary.stopped_by_budget:
        layers = discovery.model_layers
        command = f"fp8advisor suggest {shlex.quote(layers.target)} --batch {layers.batch} --seq {layers.seq}"
        if Path(out).resolve() != in_context_dir().resolve():
            command += f" --measured {shlex.quote(str(out))}"
        console.print(f"advice decided by these measurements: {command}", soft_wrap=True, markup=False)


__all__ = ["DEFAULT_RECIPES", "bench_model"]
