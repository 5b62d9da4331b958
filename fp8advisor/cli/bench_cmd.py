"""`fp8advisor bench`: sweep the local GPU (or the CPU emulation) and save the results, then show heatmaps."""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from fp8advisor.cli.application import command, console, err_console, resume_command
from fp8advisor.cli.bench_view import (
    print_budget_stop,
    print_summary,
    render_grouped_speedups,
    render_heatmaps,
)
from fp8advisor.cli.terminal import styled
from fp8advisor.errors import AdvisorError
from fp8advisor.request import DEFAULT_SEQ

if TYPE_CHECKING:
    from fp8advisor.measure.grouped import GroupedGrid
    from fp8advisor.measure.linear import Grid
    from fp8advisor.measure.protocol import BenchSettings
    from fp8advisor.measure.schedule import Shard
    from fp8advisor.measure.workload import Workload

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
            help="With --grouped: tokens per expert (multiples of 16; MXFP8: of 128 on a GPU, 32 under "
            "--emulate), overriding the grid: --M-per-expert 128,1024.",
        ),
    ] = None,
    M: Annotated[
        list[str] | None,
        typer.Option("--M", help="Tokens per step (rows; mxfp8_rceil: multiples of 32), overrides the grid."),
    ] = None,
    K: Annotated[list[str] | None, typer.Option("--K", help="in_features, overriding the grid.")] = None,
    N: Annotated[list[str] | None, typer.Option("--N", help="out_features, overriding the grid.")] = None,
    recipes: Annotated[
        list[str] | None,
        typer.Option(
            "--recipes",
            help="Comma-separated: tensorwise, rowwise, rowwise_with_gw_hp; mxfp8 (= mxfp8_rceil), "
            "mxfp8_rceil_wgrad_with_hp on Blackwell (default: what this GPU runs); bf16 always runs.",
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
            "--compile-workers",
            max=64,
            help="Processes pre-compiling graphs before timing (default: cores - 2, at most 12; at most 64).",
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
    gpus: Annotated[
        str | None,
        typer.Option(
            "--gpus",
            help="all | N: measure the grid in N processes at once, one per GPU of this machine, each its "
            "own --shard, into one --out (started by torchrun, which starts them again should one die; the "
            "same command resumes). With --emulate: N CPU processes. Across machines: torchrun -m "
            "fp8advisor bench ... (see the README).",
        ),
    ] = None,
) -> None:
    """Measure float8 against bf16 on this GPU over a grid of (M, K, N): torchao's LayerNorm-Linear-Sigmoid
    block, forward + backward, under torch.compile. With --model, measure the model's own blocks instead.
    Results go to --out as JSON Lines; Ctrl-C stops cleanly, --time-budget stops in time, and the same
    command resumes. Under torchrun, each of its processes measures shard RANK+1 of WORLD_SIZE on GPU
    LOCAL_RANK."""
    started = time.monotonic()
    options = _BenchOptions(
        grid=grid,
        grouped=grouped,
        E=E,
        M_per_expert=M_per_expert,
        M=M,
        K=K,
        N=N,
        recipes=recipes,
        out=out,
        emulate=emulate,
        compile_workers=compile_workers,
        compile_timeout=compile_timeout,
        time_budget=time_budget,
        shard=shard,
        model=model,
        batch=batch,
        seq=seq,
        profile=profile,
        gpus=gpus,
    )
    worker = _torchrun_worker(options)  # None unless torchrun started this process beside others
    if gpus is not None and _launch(options, png):
        return
    if model is not None:
        _bench_model(options, started)
        return
    _check_grid_options(options)
    sweep = _prepare_sweep(options, worker)
    _print_plan(sweep, options)
    summary = _run_sweep(sweep, options, started, worker)
    print_summary(summary, emulate, grouped)
    if worker is not None:
        _print_worker_end(sweep, summary)
        return
    if summary.stopped_by_budget:
        print_budget_stop(summary, time_budget)
    _render_results(summary.runs, grouped, png, summary.path)


@dataclass(frozen=True)
class _BenchOptions:
    """The options of `bench` that choose and run the measurements, as given (lists as typed:
    `--M 1024,4096 --M 8192`)."""

    grid: str | None
    grouped: bool
    E: list[str] | None
    M_per_expert: list[str] | None
    M: list[str] | None
    K: list[str] | None
    N: list[str] | None
    recipes: list[str] | None
    out: Path | None
    emulate: bool
    compile_workers: int | None
    compile_timeout: float
    time_budget: float | None
    shard: str | None
    model: str | None
    batch: int
    seq: int | None
    profile: str | None
    gpus: str | None = None


def _render_results(runs, grouped: bool, png: bool, latest: Path | None) -> None:
    """The speedups of `runs`: a table per recipe (grouped) or heatmaps, and their PNG beside `latest` (the
    newest run file) with `png`."""
    if not runs:
        return
    if grouped:
        render_grouped_speedups(runs)
        return
    render_heatmaps(runs)
    if png:
        _write_png(runs, latest or runs[-1].path)


# --- several processes: the launcher (--gpus) and torchrun's workers ---------------------------------------


def _torchrun_worker(options: _BenchOptions):
    """This process's place when torchrun started it beside others (`launch.TorchrunWorker`), with its GPU
    chosen (before anything touches CUDA); None otherwise. Options that would give two workers the same
    points are refused."""
    from fp8advisor.measure.launch import TorchrunWorker, pin_gpu

    worker = TorchrunWorker.from_environment()
    if worker is None:
        return None
    if options.gpus is not None:
        raise AdvisorError(
            "--gpus starts torchrun itself: under torchrun, leave it out",
            hint="torchrun --nproc-per-node N -m fp8advisor bench ... (each process measures a shard)",
        )
    if worker.world_size == 1:
        return None
    place = f"this is torchrun's process {worker.rank + 1} of {worker.world_size}"
    if options.shard is not None:
        raise AdvisorError(
            f"--shard {options.shard}: {place}, which measures shard {worker.shard} (RANK+1 of WORLD_SIZE)",
            hint="leave --shard out under torchrun; or run --shard I/N without torchrun",
        )
    if options.model is not None:
        raise AdvisorError(
            f"--model measures one model's blocks in one process, and {place}",
            hint="run bench --model without torchrun (or with one process)",
        )
    if not options.emulate:
        pin_gpu(worker.local_rank)
    return worker


def _launch(options: _BenchOptions, png: bool) -> bool:
    """--gpus: check everything, then run this command in one torchrun process per GPU (or per --emulate'd
    CPU process) and report the whole grid; exits with torchrun's status. False when one process is asked
    for: this one then measures the grid itself."""
    from fp8advisor.measure import launch

    processes = _processes(options)
    _check_grid_options(options)
    sweep = _prepare_sweep(options, None)
    shapes = len(set(sweep.grid.shapes))
    if processes > shapes:
        raise AdvisorError(
            f"--gpus {processes}: the grid has {shapes} shape(s), and each process measures whole shapes",
            hint=f"use --gpus {shapes} or fewer, or a larger grid",
        )
    if processes == 1:
        return False
    with launch.ShardLock(sweep.out, None):
        pass  # nothing else writes to --out now: say so before starting the workers
    arguments = launch.without_gpus(sys.argv[1:])
    _print_plan(sweep, options, processes)
    interrupted, code = launch.run_torchrun(
        launch.torchrun_command(processes, arguments), launch.torchrun_environment()
    )
    saved, runs = _grid_on_disk(sweep)
    total = len(sweep.grid.points())
    console.print(
        f"the whole grid: {saved} of {total} points are saved in {sweep.out}; "
        f"`fp8advisor fit {sweep.out}` merges its {len(runs)} run file(s)"
    )
    if saved < total:
        console.print(
            styled(f"{total - saved} point(s) left: the same command resumes them:\n  {resume_command()}")
        )
    if interrupted:
        raise typer.Exit(130)
    if code != 0:
        err_console.print(f"torchrun ended with status {code} (its workers' messages are above)")
        raise typer.Exit(code)
    _render_results(runs, options.grouped, png, None)
    return True


def _processes(options: _BenchOptions) -> int:
    """--gpus as a number of processes (`launch.process_count`), with no option that picks the points."""
    from fp8advisor.measure.launch import process_count

    assert options.gpus is not None
    for option, given in (("--model", options.model), ("--shard", options.shard)):
        if given is not None:
            where = " (or run --shard I/N on each machine, without --gpus)" if option == "--shard" else ""
            raise AdvisorError(
                f"--gpus gives each process a shard of the grid; {option} does not go with it",
                hint=f"leave {option} out with --gpus{where}",
            )
    return process_count(options.gpus, emulate=options.emulate)


def _grid_on_disk(sweep: _Sweep):
    """The whole grid's points saved in --out (every shard's) and the runs holding them."""
    from fp8advisor.measure.sweep import grid_on_disk

    return grid_on_disk(sweep.grid, sweep.out, sweep.settings, sweep.workload)


def _print_worker_end(sweep: _Sweep, summary) -> None:
    """A torchrun worker's last lines: the whole grid's points saved so far, and how to go on."""
    prefix = f"[shard {summary.shard}]"
    if summary.stopped_by_budget:
        console.print(
            f"{prefix} time budget: stopped before a point that would not have finished in time; "
            f"{summary.left_points} point(s) of the shard left: the same command resumes them"
        )
    saved, _runs = _grid_on_disk(sweep)
    console.print(
        f"{prefix} the whole grid: {saved} of {len(sweep.grid.points())} points are saved in {sweep.out} "
        "(the other shards may be measuring still)"
    )


def _bench_model(options: _BenchOptions, started: float) -> None:
    """--model: no option that describes a grid, then the model's own blocks measured (`bench_model`)."""
    grid_options = {
        "--grid": options.grid,
        "--M": options.M,
        "--K": options.K,
        "--N": options.N,
        "--shard": options.shard,
        "--compile-workers": options.compile_workers is not None,
    }
    given = [name for name, value in grid_options.items() if value]
    given += ["--grouped"] if options.grouped else []
    if given:
        raise AdvisorError(
            f"{', '.join(given)} describe a grid; --model measures the model's own blocks",
            hint="leave them out with --model, or leave --model out for a grid",
        )
    from fp8advisor.cli.bench_model import bench_model

    assert options.model is not None
    bench_model(
        options.model,
        batch=options.batch,
        seq=options.seq if options.seq is not None else (64 if options.emulate else DEFAULT_SEQ),
        recipes=_names(options.recipes),
        out=options.out,
        emulate=options.emulate,
        time_budget=options.time_budget,
        profile=options.profile,
        started=started,
    )


def _check_grid_options(options: _BenchOptions) -> None:
    """Options a grid does not take: --model's (--batch, --seq, --profile), the experts' without --grouped,
    and --M with it."""
    model_options = {"--batch": options.batch != 1, "--seq": options.seq, "--profile": options.profile}
    for name, value in model_options.items():
        if value:
            raise AdvisorError(
                f"{name} goes with --model", hint="e.g. fp8advisor bench --model model.py --seq 8192"
            )
    if not options.grouped:
        for name, value in {"--E": options.E, "--M-per-expert": options.M_per_expert}.items():
            if value:
                raise AdvisorError(
                    f"{name} goes with --grouped", hint="e.g. fp8advisor bench --grouped --E 8,64"
                )
    elif options.M:
        raise AdvisorError(
            "--M is the tokens of a Linear; with --grouped give the tokens per expert",
            hint="e.g. fp8advisor bench --grouped --M-per-expert 128,1024",
        )


@dataclass(frozen=True)
class _Sweep:
    """What one `bench` run measures: the grid (a Linear or a grouped one), where, how, and which shard."""

    grid: Grid | GroupedGrid
    out: Path
    settings: BenchSettings
    workload: Workload  # `measure.linear.LINEAR` or `measure.grouped.GROUPED`
    shard: Shard | None  # None: the whole grid


def _prepare_sweep(options: _BenchOptions, worker) -> _Sweep:
    """Check the shard, budget, compile options, results directory and GPU before the work; then choose the
    grid. A torchrun `worker` measures its own shard."""
    from fp8advisor.device import require_fp8_gpu
    from fp8advisor.files import check_output_directory
    from fp8advisor.measure.linear import LINEAR, make_grid
    from fp8advisor.measure.protocol import BenchSettings
    from fp8advisor.measure.recipe_support import gpu_capability
    from fp8advisor.measure.schedule import Shard, check_time_budget

    out = options.out if options.out is not None else DEFAULT_OUT
    chosen_shard = Shard.parse(options.shard) if options.shard is not None else None
    if worker is not None:
        chosen_shard = worker.shard
    check_time_budget(options.time_budget)
    _check_compile_options(options)
    check_output_directory(out)
    capability = None  # the GPU's compute capability decides the recipes (MXFP8 on 10.x only)
    if not options.emulate:
        require_fp8_gpu()  # exit 2 with a clear message before anything else happens
        capability = gpu_capability()
    settings = BenchSettings(
        emulate=options.emulate,
        compile_workers=options.compile_workers,
        compile_timeout_s=options.compile_timeout,
    )
    if options.grouped:
        from fp8advisor.measure.grouped import GROUPED, make_grouped_grid, with_grouped_defaults

        chosen = make_grouped_grid(
            options.grid,
            E=_integers(options.E, "--E"),
            M_per_expert=_integers(options.M_per_expert, "--M-per-expert"),
            K=_integers(options.K, "--K"),
            N=_integers(options.N, "--N"),
            recipes=_names(options.recipes),
            emulate=options.emulate,
            capability=capability,
        )
        return _Sweep(chosen, out, with_grouped_defaults(settings), GROUPED, chosen_shard)
    chosen = make_grid(
        options.grid,
        M=_integers(options.M, "--M"),
        K=_integers(options.K, "--K"),
        N=_integers(options.N, "--N"),
        recipes=_names(options.recipes),
        emulate=options.emulate,
        capability=capability,
    )
    return _Sweep(chosen, out, settings, LINEAR, chosen_shard)


def _check_compile_options(options: _BenchOptions) -> None:
    if not options.compile_timeout > 0:
        raise AdvisorError(
            f"--compile-timeout must be a positive number of seconds, got {options.compile_timeout}",
            hint="e.g. --compile-timeout 300",
        )
    if options.compile_workers is not None and options.compile_workers < 0:
        raise AdvisorError(
            f"--compile-workers must be 0 or more, got {options.compile_workers}",
            hint="0 compiles in the timing process itself; leave it out for cores - 2",
        )


def _print_plan(sweep: _Sweep, options: _BenchOptions, processes: int | None = None) -> None:
    """The grid about to be measured: its shapes and configurations, where the results go, and its limits;
    `processes`: the torchrun workers that share it."""
    chosen, kind = sweep.grid, "grouped " if options.grouped else ""
    extras = [f"shard {sweep.shard}"] if sweep.shard else []
    if processes is not None:
        extras.append(f"{processes} processes started by torchrun, a shard each")
    extras += [f"time budget {options.time_budget:.0f} s"] if options.time_budget is not None else []
    left_out = getattr(chosen, "left_out", ())
    if left_out:
        extras.append(f"{len(left_out)} shape(s) too large for one GPU left out")
    console.print(
        styled(
            f"{kind}grid ",
            (chosen.name, "bold"),
            f": {len(chosen.shapes)} shape(s) x {len(chosen.recipes)} configurations "
            f"({', '.join(chosen.recipes)}) -> {sweep.out}" + (f" ({', '.join(extras)})" if extras else ""),
            ("  (emulated on the CPU)", "yellow") if options.emulate else "",
        )
    )


def _run_sweep(sweep: _Sweep, options: _BenchOptions, started: float, worker=None):
    """Measure under a progress bar per stage (a torchrun `worker`: a line per point, prefixed with its
    shard); on Ctrl-C, say what is saved and exit 130."""
    from fp8advisor.measure import sweep as bench_module
    from fp8advisor.measure.sweep import SweepInterrupted

    if worker is not None:
        progress, on_progress = contextlib.nullcontext(), _progress_lines(f"[shard {sweep.shard}]")
    else:
        progress, on_progress = _progress_bars()
    try:
        with progress:
            return bench_module.run_sweep(
                sweep.grid,
                sweep.out,
                sweep.settings,
                shard=sweep.shard,
                time_budget_s=options.time_budget,
                started=started,
                on_progress=on_progress,
                **({"workload": sweep.workload} if options.grouped else {}),
            )
    except SweepInterrupted as interrupted:
        summary = interrupted.summary
        err_console.print(  # a Text: the console shows a line break in a string as its escape
            styled(
                f"\ninterrupted: {summary.saved_points} of {summary.total_points} points are saved in "
                f"{sweep.out} ({len(summary.records)} from this run). Run the same command again to resume."
            )
        )
        raise typer.Exit(130) from None


def _progress_lines(prefix: str):
    """on_progress printing a plain line per point compiled or measured: torchrun's workers share a terminal,
    where live bars would draw over each other."""
    shown: dict[str, int] = {}

    def on_progress(stage: str, completed: int, total: int, description: str) -> None:
        if completed > shown.get(stage, 0):
            shown[stage] = completed
            done = "compiled" if stage == "compile" else "measured"
            console.print(f"{prefix} {done} {completed}/{total}: {description}", soft_wrap=True)

    return on_progress


def _progress_bars():
    """A Rich progress display with a bar per stage, and the on_progress that drives it."""
    progress = Progress(
        TextColumn("{task.description:<12}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[point]}", style="dim", markup=False),
        console=console,
        transient=False,
    )
    tasks: dict[str, int] = {}

    def on_progress(stage: str, completed: int, total: int, description: str) -> None:
        if stage not in tasks:
            tasks[stage] = progress.add_task(stage, total=total, point="")
        progress.update(tasks[stage], completed=completed, total=total, point=description)

    return progress, on_progress


def _write_png(runs, latest: Path) -> None:
    """The heatmaps as a PNG beside the latest results file (none, with a word why, without matplotlib)."""
    from fp8advisor.measure.heatmaps import speedup_heatmaps_png

    try:
        written = speedup_heatmaps_png(runs, latest.with_name(latest.stem + "-heatmap.png"))
    except AdvisorError as error:
        err_console.print(styled(("no PNG", "yellow"), f": {error}"), soft_wrap=True)
    else:
        console.print(f"heatmap: {written}")
