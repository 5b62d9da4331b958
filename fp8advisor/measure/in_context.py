"""Measure the user's own blocks in context: `fp8advisor bench --model`.

A Linear's float8 speedup depends on its neighbours: `wq`, `wk` and `wv` read one tensor, whose cast
torch.compile may share; `wo` reads attention's output, with nothing to fuse its cast into; `w2` follows a
SiLU-times-gate. The microbenchmark (`fp8advisor.measure.sweep`) sees none of this. So for each distinct unit
of the model (`fp8advisor.inspect.blocks`: one instance of each repeated block, and each Linear outside them),
built for real with random bf16 weights and fed the input it really receives, this times forward + backward
under `torch.compile`, as the training step runs it, for:

- all bf16 (once per unit), then per recipe: every convertible Linear in float8 ("all"), the profile's
  advice ("advice"), torchao's auto filter ("auto"), and the local search of `fp8advisor.measure.block_search`
  from the best of those, flipping one Linear group at a time ("search").

Each variant is one results record (`"kind": "block"`, `"context": "block"`) in the run files of
`fp8advisor.measure.results`, with the same header, metadata, lock, time budget and resume as `bench`: a
variant already saved for the same model fingerprint, device and software is never measured again, so a
resumed sweep replays the search from the saved timings and goes on where it stopped. When a unit's search for
a recipe ends, a `"kind": "block_choice"` record holds the chosen set with the seeds' and the choice's times:
what `suggest --measured` reads. One unit is on the device at a time; a unit that does not fit (or fails
otherwise) is recorded as failed, with the reason, and the sweep goes on.
"""

from __future__ import annotations

import copy
import gc
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fp8advisor.files import DirectoryLock, check_output_directory
from fp8advisor.inspect.blocks import Discovery, Unit, make_inputs, materialize
from fp8advisor.measure import results as results_store
from fp8advisor.measure.block_search import SearchResult, Timing, Variant, local_search
from fp8advisor.measure.schedule import DurationEstimator, TimeBudget
from fp8advisor.measure.sweep import (
    BenchSettings,
    Measurement,
    compile_module,
    failure_reason,
    measurement_fields,
    time_step,
)
from fp8advisor.measure.timers import Timer
from fp8advisor.recipes import BASELINE, float8_config, sqnr_db

CONTEXT = "block"

BLOCK_GPU_METHOD = {
    "workload": "one instance of each distinct block (and each Linear outside the blocks) of the user's "
    "model, random bf16 weights, fed random tensors of the shapes and dtypes it receives in the traced "
    "forward; forward + backward of the block's first floating output against a random gradient",
    "compile": "torch.compile default mode, torch._dynamo.reset() before each variant, compiled in the "
    "timing process",
    "kernel_time": "torch.profiler, 5 iterations in one padded session, as bench",
    "wall_time": "CUDA events per iteration after warm-up, L2 flushed, median and 20th/80th percentiles, "
    "at least 5 iterations (triton.testing.do_bench)",
    "correctness": "SQNR (dB) of float8 output and input gradient against the eager bf16 block",
    "variants": "bf16; per recipe: all convertible Linear, the profile's advice, torchao's auto filter, then "
    "a local search flipping one Linear group (the Linear layers reading one input) at a time from the best",
    "noise": "a variant is clearly faster than another when its 80th percentile is below the other's 20th",
}

BLOCK_EMULATED_METHOD = {
    **BLOCK_GPU_METHOD,
    "compile": "EMULATED: torch.compile with the aot_eager backend on the CPU (dynamo and AOTAutograd, no "
    "inductor code generation: seconds, not minutes, per variant), torchao float8 with emulate=True",
    "kernel_time": None,
    "wall_time": "EMULATED on the CPU, one thread: time.perf_counter per iteration, compile call + 2 warm-up "
    "+ 5 timed iterations, median and 20th/80th percentiles",
}


# --- records ------------------------------------------------------------------------------------------------


def variant_recipe(recipe: str, variant: Variant) -> str:
    """The recipe a variant runs: bf16 when nothing is in float8."""
    return recipe if variant else BASELINE


def block_record(
    run_id: str,
    unit: Unit,
    recipe: str,
    variant: Variant,
    *,
    labels: Sequence[str],
    emulated: bool,
    measurement: Measurement | None = None,
    failure: str | None = None,
    duration_s: float | None = None,
    zeroed_buffers: Sequence[str] = (),
    attention: str | None = None,
) -> dict:
    """The results line of one variant of one unit: ok with a measurement, or failed with a reason.
    `attention` says when a Hugging Face block's eager attention was switched back to sdpa."""
    in_float8 = [list(group) for group in unit.groups if set(group) <= variant]
    return {
        "kind": "block",
        "context": CONTEXT,
        "run_id": run_id,
        "block": unit.pattern,
        "instance": unit.representative,
        "class": unit.cls,
        "recipe": variant_recipe(recipe, variant),
        "float8": sorted(variant),
        "float8_groups": in_float8,
        "variant": list(labels),
        **measurement_fields(measurement, failure),
        "zeroed_buffers": list(zeroed_buffers),
        "attention": attention,
        "duration_s": duration_s,
        "measured_at": results_store.utc_now(),
        "emulated": emulated,
    }


def choice_record(
    run_id: str, unit: Unit, recipe: str, seeds: Mapping[str, Variant], result: SearchResult
) -> dict:
    """The outcome of one unit's search under one recipe: the chosen set and the figures behind it."""

    def timing(variant: Variant) -> dict | None:
        found = result.timings.get(variant)
        return None if found is None else found.to_json()

    return {
        "kind": "block_choice",
        "context": CONTEXT,
        "run_id": run_id,
        "block": unit.pattern,
        "instances": list(unit.instances),
        "recipe": recipe,
        "float8": sorted(result.chosen),
        "wall_time_s": timing(result.chosen),
        "bf16_wall_time_s": timing(frozenset()),
        "seeds": {
            name: {"float8": sorted(variant), "wall_time_s": timing(variant)}
            for name, variant in seeds.items()
        },
        "search": result.to_json(),
        "measured_at": results_store.utc_now(),
    }


def _key(pattern: str, recipe: str, variant: Variant) -> tuple[str, str, Variant]:
    return (pattern, variant_recipe(recipe, variant), frozenset(variant))


def block_timing(record: dict) -> Timing | None:
    """A saved variant's timing, None when it failed."""
    if record.get("status") != "ok":
        return None
    return Timing.from_wall(record["wall_time_s"])


# --- one unit on the device ---------------------------------------------------------------------------------


def _holder_class():
    import torch

    class Holder(torch.nn.Module):
        """The unit under one name, so that a head Linear ("" relative) has an FQN the filter can see."""

        def __init__(self, unit):
            super().__init__()
            self.unit = unit

        def forward(self, *args, **kwargs):
            return self.unit(*args, **kwargs)

    return Holder


def _first_floating(output):
    from fp8advisor.inspect.census import tensors_in

    for tensor in tensors_in(output):
        if tensor.is_floating_point() and tensor.requires_grad:
            return tensor
    raise ValueError("the block returns no floating-point tensor that depends on its weights or input")


class UnitBench:
    """One unit, built for real on the device, and the measurement of its variants."""

    def __init__(self, discovery: Discovery, unit: Unit, settings: BenchSettings, timer: Timer):
        self.unit, self.settings, self.timer = unit, settings, timer
        self.device = "cpu" if timer.emulated else "cuda"
        module, self.zeroed_buffers, self.sdpa = materialize(
            discovery.module(unit), device=self.device, seed=settings.seed
        )
        self.base = _holder_class()(module)
        self.args, self.kwargs, self.x = make_inputs(unit.inputs, device=self.device, seed=settings.seed)
        if self.sdpa and "attention_mask" in self.kwargs:
            self.kwargs["attention_mask"] = None  # causal sdpa, as Hugging Face trains without padding
        output = _first_floating(self.base(*self.args, **self.kwargs))
        self.grad_output = _random_gradient(output, settings.seed + 2)
        output.backward(self.grad_output)
        grad = None if self.x is None else self.x.grad  # None when the output does not depend on x
        self.reference = (output.detach(), None if grad is None else grad.detach())
        self._clear_grads(self.base)

    def _clear_grads(self, module) -> None:
        for parameter in module.parameters():
            parameter.grad = None
        if self.x is not None:
            self.x.grad = None

    def variant_module(self, recipe: str, variant: Variant):
        module = copy.deepcopy(self.base)
        if not variant:
            return module
        from torchao.float8 import convert_to_float8_training

        def chosen(_module, fqn: str) -> bool:
            return fqn.removeprefix("unit").removeprefix(".") in variant

        return convert_to_float8_training(
            module, config=float8_config(recipe, emulate=self.timer.emulated), module_filter_fn=chosen
        )

    def measure(self, recipe: str, variant: Variant) -> Measurement:
        timer, settings = self.timer, self.settings
        timer.release()
        memory_before = timer.memory_allocated()
        module = self.variant_module(recipe, variant)
        module = compile_module(module, backend="aot_eager" if timer.emulated else "inductor")
        self._clear_grads(module)

        def step():
            output = _first_floating(module(*self.args, **self.kwargs))
            output.backward(self.grad_output)
            return output

        grads = [*([self.x] if self.x is not None else []), *module.parameters()]
        measurement = time_step(
            step,
            grads,
            timer=timer,
            settings=settings,
            memory_before=memory_before,
            check=self._check if variant else None,
        )
        self._clear_grads(module)
        return measurement

    def _check(self, output) -> dict[str, float]:
        reference_output, reference_grad = self.reference
        sqnr = {"output": sqnr_db(reference_output, output)}
        if reference_grad is not None:
            sqnr["grad_input"] = sqnr_db(reference_grad, self.x.grad)
        if not all(math.isfinite(value) or value == math.inf for value in sqnr.values()):
            raise FloatingPointError(f"float8 result is not finite (SQNR {sqnr})")
        return sqnr

    def release(self) -> None:
        self.base = self.args = self.kwargs = self.x = self.grad_output = self.reference = None
        self.timer.release()


def _random_gradient(output, seed: int):
    """A random gradient for the block's output, drawn on its device from `seed`."""
    import torch

    generator = torch.Generator(device=output.device).manual_seed(seed)
    return torch.randn(output.shape, dtype=output.dtype, device=output.device, generator=generator)


# --- the sweep ----------------------------------------------------------------------------------------------


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

    header = results_store.make_header(
        run_id=results_store.new_run_id(),
        started=results_store.utc_now(),
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
        self.writer: results_store.RunWriter | None = None
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
        if self.writer is None:  # the run file exists from its first record on: a run that measures nothing
            self.writer = results_store.RunWriter.create(self.out_dir, self.header)  # leaves no file
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
    "BLOCK_EMULATED_METHOD",
    "BLOCK_GPU_METHOD",
    "CONTEXT",
    "BlockSweepInterrupted",
    "BlockSweepSummary",
    "EarlierBlockRuns",
    "UnitBench",
    "block_record",
    "block_timing",
    "choice_record",
    "earlier_block_runs",
    "run_block_sweep",
]
