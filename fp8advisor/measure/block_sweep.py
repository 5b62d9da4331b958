"""The sweep of `fp8advisor bench --model` over a model's units (`run_block_sweep`): each unit measured in
context (`fp8advisor.measure.block_bench`), its float8 set chosen by the local search of
`fp8advisor.measure.block_search`.

A block sweep has the same header, metadata, lock, time budget and resume as `bench`: a variant already saved
for the same model fingerprint, device and software is never measured again, so a resumed sweep replays the
search from the saved timings and goes on where it stopped. One unit is on the device at a time; a unit that
does not fit (or fails otherwise) is recorded as failed, with the reason, and the sweep goes on. The run file
exists from its first record on: a run that measures nothing leaves no file.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fp8advisor import interrupts
from fp8advisor.files import DirectoryLock, check_output_directory
from fp8advisor.inspect.blocks import Discovery, Unit
from fp8advisor.interrupts import interrupts_kept
from fp8advisor.measure import results as results_store
from fp8advisor.measure.block_bench import (
    BLOCK_EMULATED_METHOD,
    BLOCK_GPU_METHOD,
    CONTEXT,
    UnitBench,
    block_record,
    block_timing,
    choice_record,
    variant_recipe,
)
from fp8advisor.measure.block_search import Timing, Variant, local_search
from fp8advisor.measure.protocol import BenchSettings, failure_reason
from fp8advisor.measure.run_writer import RunWriter, make_header, new_run_id, utc_now
from fp8advisor.measure.schedule import DurationEstimator, TimeBudget
from fp8advisor.recipes import BASELINE


def _key(pattern: str, recipe: str, variant: Variant) -> tuple[str, str, Variant]:
    return (pattern, variant_recipe(recipe, variant), frozenset(variant))


@dataclass
class BlockSweepSummary:
    """What a block sweep did: the records this run wrote, the choices known (this run's and earlier
    ones')."""

    path: Path | None = None
    run_id: str | None = None
    records: list[dict] = field(default_factory=list)
    choices: list[dict] = field(default_factory=list)
    reused: int = 0  # variants saved by earlier runs, not measured again
    resumed_from: list[str] = field(default_factory=list)
    passed_over: dict[str, str] = field(default_factory=dict)  # earlier run id -> why it is not reused
    unreadable: list[str] = field(default_factory=list)
    failed_units: dict[str, str] = field(default_factory=dict)  # pattern -> why
    stopped_by_budget: bool = False
    interrupted: bool = False
    elapsed_s: float = 0.0

    @property
    def ok(self) -> int:
        return sum(record["status"] == "ok" for record in self.records)

    @property
    def failed(self) -> int:
        return sum(record["status"] == "failed" for record in self.records)


class BlockSweepInterrupted(Exception):
    def __init__(self, summary: BlockSweepSummary):
        super().__init__("block sweep interrupted")
        self.summary = summary


class _OutOfBudget(Exception):
    pass


class _UnitFailed(Exception):
    """The unit cannot be measured in this run; the message says why."""


#: on_progress(completed, description)
BlockProgress = Callable[[int, str], None]


def block_header(
    discovery: Discovery, recipes: Sequence[str], settings: BenchSettings, seeds_from: str
) -> dict:
    from fp8advisor.device import describe_device, software_versions

    header = make_header(
        run_id=new_run_id(),
        started=utc_now(),
        device=describe_device(emulate=settings.emulate),
        software=software_versions(),
        method=BLOCK_EMULATED_METHOD if settings.emulate else BLOCK_GPU_METHOD,
        grid={"shapes": [], "recipes": [BASELINE, *recipes]},
    )
    layers = discovery.model_layers
    header["context"] = CONTEXT
    header["model"] = {
        "target": layers.target,
        "fingerprint": discovery.fingerprint,
        "batch": layers.batch,
        "seq": layers.seq,
        "tokens": layers.tokens,
        "units": [unit.to_json() for unit in discovery.units],
    }
    header["seeds_from"] = seeds_from
    return header


@dataclass(frozen=True)
class EarlierBlockRuns:
    """The in-context runs already in a sweep's directory: those it continues, and the others with why not."""

    continued: list[results_store.Run]
    passed_over: dict[str, str]  # run id -> why none of its variants is reused


def earlier_block_runs(out_dir: Path, header: dict, problems: list[str]) -> EarlierBlockRuns:
    """The in-context runs in `out_dir`: a sweep with `header` continues those of the same model fingerprint
    (model, batch and seq), device and software, and reuses nothing of the others. (Block names such as
    `layers.{0..31}` are the same across model sizes: only the fingerprint tells the models apart.)"""
    continued, passed_over = [], {}
    for run in results_store.runs_in(out_dir, problems=problems):
        if run.header.get("context") != CONTEXT:
            continue  # a grid run (`bench`): another kind of file, with no block in it
        why = _why_not_continued(run.header, header)
        if why is None:
            continued.append(run)
        else:
            passed_over[run.run_id] = why
    return EarlierBlockRuns(continued, passed_over)


def _why_not_continued(earlier: dict, header: dict) -> str | None:
    """None when a sweep with `header` may reuse the variants of the earlier run with header `earlier`; else
    why it may not."""
    model, mine = earlier.get("model") or {}, header["model"]
    if model.get("fingerprint") != mine["fingerprint"]:
        described = f"{model.get('target')}, batch {model.get('batch')} x seq {model.get('seq')}"
        if all(model.get(key) == mine[key] for key in ("target", "batch", "seq")):
            return f"the layers of {described} have changed since"
        return f"another model or token count: {described}"
    if not results_store.same_setup(earlier, header):
        return f"another device or software: {', '.join(results_store.setup_changes(earlier, header))}"
    return None


def run_block_sweep(
    discovery: Discovery,
    recipes: Sequence[str],
    seeds: Mapping[str, Mapping[str, Mapping[str, Variant]]],
    out_dir: Path,
    settings: BenchSettings,
    *,
    seeds_from: str,
    time_budget_s: float | None = None,
    started: float | None = None,
    clock: Callable[[], float] | None = None,
    on_progress: BlockProgress | None = None,
) -> BlockSweepSummary:
    """Measure every unit of `discovery` (module docstring) into a new run file in `out_dir`, reusing what
    earlier runs there saved. `seeds[recipe][unit pattern]`: the named float8 sets the search starts from
    ("all", "advice", "auto"), names relative to the unit; `seeds_from` says where they came from."""
    import time

    clock = clock or time.monotonic
    budget = TimeBudget(time_budget_s, clock() if started is None else started, clock)
    if not settings.emulate:
        from fp8advisor.device import require_fp8_gpu

        require_fp8_gpu()
    out_dir = Path(out_dir)
    check_output_directory(out_dir)
    with DirectoryLock(out_dir, what="bench"):
        header = block_header(discovery, recipes, settings, seeds_from)
        summary = BlockSweepSummary()
        earlier = earlier_block_runs(out_dir, header, summary.unreadable)
        summary.resumed_from = [run.run_id for run in earlier.continued]
        summary.passed_over = earlier.passed_over
        header["resumes"] = summary.resumed_from
        sweep = _BlockSweep(
            discovery, recipes, seeds, settings, header, summary, budget, earlier.continued, on_progress
        )
        try:
            with interrupts_kept():  # a Ctrl-C swallowed by a __del__ still stops the sweep (interrupts)
                sweep.run(out_dir)
        except KeyboardInterrupt:
            summary.interrupted = True
            raise BlockSweepInterrupted(summary) from None
        finally:
            sweep.close()
            summary.elapsed_s = budget.elapsed()
        return summary


class _BlockSweep:
    def __init__(self, discovery, recipes, seeds, settings, header, summary, budget, earlier, on_progress):
        self.discovery, self.recipes, self.seeds, self.settings = discovery, recipes, seeds, settings
        self.header, self.summary, self.budget = header, summary, budget
        self.progress = on_progress or (lambda completed, description: None)
        self.saved: dict[tuple, dict] = {}  # every variant saved, by earlier runs or this one
        self.chosen: set[tuple[str, str]] = set()
        for run in earlier:
            for record in run.blocks:
                self.saved[_key(record["block"], record["recipe"], frozenset(record["float8"]))] = record
            for choice in run.choices:
                self.chosen.add((choice["block"], choice["recipe"]))
                summary.choices.append(choice)
        self.earlier = set(self.saved)  # not yet counted as reused
        self.estimator = DurationEstimator()
        self.estimator.observe_records(self.saved.values())
        self.writer: RunWriter | None = None
        self.out_dir: Path | None = None
        self.timer = settings.timer()
        self.measured = 0

    def run(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        threads = None
        if self.settings.emulate:
            import torch

            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # as bench: tiny CPU timings turn bimodal under OpenMP barriers
        try:
            for unit in self.discovery.units:
                self._unit(unit)
        except _OutOfBudget:
            self.summary.stopped_by_budget = True
        finally:
            if threads is not None:
                import torch

                torch.set_num_threads(threads)

    def _write(self, record: dict) -> None:
        interrupts.check()  # a variant a Ctrl-C cut short is not saved
        if self.writer is None:  # the run file exists from its first record on: a run that measures nothing
            self.writer = RunWriter.create(self.out_dir, self.header)  # leaves no file
            self.summary.path, self.summary.run_id = self.writer.path, self.header["run_id"]
        self.writer.append(record)

    def _unit(self, unit: Unit) -> None:
        bench: list[UnitBench | None] = [None]  # built at the first variant not saved yet
        try:
            if unit.problem is not None:
                self._failed_without_measuring(unit, unit.problem)
            else:
                self._search_unit(unit, bench)
        except _UnitFailed as failed:
            self.summary.failed_units[unit.pattern] = str(failed)
        finally:
            if bench[0] is not None:
                bench[0].release()
            gc.collect()

    def _search_unit(self, unit: Unit, bench: list) -> None:
        """bf16, then per recipe the search from the seeds; a choice record when a search ends."""

        def measure(recipe: str, variant: Variant, labels: Sequence[str]) -> Timing | None:
            return self._measure(unit, bench, recipe, variant, labels)

        if measure(BASELINE, frozenset(), ["bf16"]) is None:
            raise _UnitFailed(self.saved[_key(unit.pattern, BASELINE, frozenset())]["reason"])
        for recipe in self.recipes:
            named = dict(self.seeds.get(recipe, {}).get(unit.pattern, {}))
            named.setdefault("all", unit.convertible)

            def labelled(variant: Variant, recipe=recipe, named=named) -> Timing | None:
                labels = [name for name, seed in named.items() if seed == variant] or ["search"]
                return measure(recipe, variant, labels)

            result = local_search(unit.groups, [frozenset(), *named.values()], labelled)
            if result is None or not any(variant for variant in result.timings):
                # not one float8 variant ran: bf16 would be a "choice" nothing was measured against
                self.summary.failed_units[f"{unit.pattern} {recipe}"] = "every float8 variant failed"
                continue
            if (unit.pattern, recipe) not in self.chosen:
                choice = choice_record(self.header["run_id"], unit, recipe, named, result)
                self._write(choice)
                self.summary.choices.append(choice)
                self.chosen.add((unit.pattern, recipe))

    def _failed_without_measuring(self, unit: Unit, reason: str) -> None:
        key = _key(unit.pattern, BASELINE, frozenset())
        if key not in self.saved:
            record = block_record(
                self.header["run_id"],
                unit,
                BASELINE,
                frozenset(),
                labels=["bf16"],
                emulated=self.settings.emulate,
                failure=reason,
            )
            self._write(record)
            self.summary.records.append(record)
            self.saved[key] = record
        self.summary.failed_units[unit.pattern] = reason

    def _measure(self, unit: Unit, bench: list, recipe: str, variant: Variant, labels) -> Timing | None:
        key = _key(unit.pattern, recipe, variant)
        if key in self.saved:
            if key in self.earlier:
                self.summary.reused += 1
                self.earlier.discard(key)  # counted once, however often the search asks
            return block_timing(self.saved[key])
        if not self.budget.allows(self.estimator.estimate(key[1], False)):
            raise _OutOfBudget
        description = f"{unit.pattern} {key[1]} [{', '.join(labels)}] {len(variant)} in float8"
        self.progress(self.measured, description)
        started = self.budget.clock()
        measurement = failure = None
        if bench[0] is None:
            try:
                bench[0] = UnitBench(self.discovery, unit, self.settings, self.timer)
            except Exception as error:  # noqa: BLE001 - the block itself does not fit or run
                failure = failure_reason(error)
            if failure is not None and variant:
                # bf16 was saved by an earlier run: building the block failed now, not this variant
                raise _UnitFailed(f"building the block failed: {failure}")
        if failure is None:
            try:
                measurement = bench[0].measure(recipe, variant)
            except Exception as error:  # noqa: BLE001 - OOM, compile errors...: record it and go on
                failure = failure_reason(error)
        duration = self.budget.clock() - started
        if failure is not None:
            gc.collect()  # outside the except block, whose traceback held the tensors
        record = block_record(
            self.header["run_id"],
            unit,
            recipe,
            variant,
            labels=labels,
            emulated=self.settings.emulate,
            measurement=measurement,
            failure=failure,
            duration_s=duration,
            zeroed_buffers=bench[0].zeroed_buffers if bench[0] is not None else (),
            attention="sdpa (switched back from the traced model's eager)"
            if bench[0] and bench[0].sdpa
            else None,
        )
        self._write(record)
        self.summary.records.append(record)
        self.saved[key] = record
        self.estimator.observe(key[1], False, duration)
        self.measured += 1
        self.progress(self.measured, description)
        return block_timing(record)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


__all__ = [
    "BlockProgress",
    "BlockSweepInterrupted",
    "BlockSweepSummary",
    "EarlierBlockRuns",
    "block_header",
    "earlier_block_runs",
    "run_block_sweep",
]
