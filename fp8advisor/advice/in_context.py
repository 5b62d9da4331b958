"""In-context results (`bench --model`) for `suggest`: which layers the measurement decides, and how that
compares with what the profile alone would have advised.

Results belong to a model at a token count (the fingerprint of `fp8advisor.inspect.blocks.model_fingerprint`)
on a GPU type: `find_in_context` keeps the block choices of runs with this model's fingerprint, measured on a
GPU of the advice's family, for the recipe advised (the latest run wins per block). Emulated runs are never
advice. Every record is checked field by field as the file is read (`fp8advisor.measure.results`): a bad
file or line is passed over and named (one bad file must not break every `suggest`), in the profile
directory's in-context/ and in a directory named with --measured alike; a --measured directory left with
nothing usable for this model is an error.

Every instance of a measured block is decided by its block's chosen set, with provenance "measured in
context"; every other layer falls back to the profile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fp8advisor.errors import AdvisorError, ResultsError
from fp8advisor.inspect.blocks import member_fqn
from fp8advisor.measure.block_search import Timing
from fp8advisor.recipes import Recipe

MEASURED_IN_CONTEXT = "measured in context"


@dataclass(frozen=True)
class BlockChoice:
    """One block's in-context decision under one recipe, with the measured times behind it."""

    pattern: str
    instances: tuple[str, ...]
    recipe: str
    float8: frozenset[str]  # Linear names relative to each instance ("" for a head Linear itself)
    time: Timing
    bf16_time: Timing
    considered: frozenset[str]  # the Linear names the search could put in float8 (its "all" seed)
    advice_float8: frozenset[str] | None  # the profile's advice when it was measured (a seed of the search)
    advice_time: Timing | None
    device: str
    measured_at: str

    def decisions(self) -> dict[str, bool]:
        """Every instance's Linear layers the search decided: FQN -> convert (the layers it could put in
        float8; the block's others are not convertible)."""
        decided: dict[str, bool] = {}
        for instance in self.instances:
            for name in self.considered | self.float8:
                decided[member_fqn(instance, name)] = name in self.float8
        return decided

    def reason(self) -> str:
        versus = ""
        if self.advice_time is not None and self.advice_float8 != self.float8:
            versus = f"; {self.advice_time.median * 1e3:.3f} ms with the profile's advice"
        return (
            f"{MEASURED_IN_CONTEXT}: {self.pattern} {self.recipe} block {self.time.median * 1e3:.3f} ms "
            f"(bf16 {self.bf16_time.median * 1e3:.3f} ms){versus}"
        )


@dataclass(frozen=True)
class InContext:
    """The in-context results that decide part of a model: where they came from and each block's choice."""

    source: Path
    choices: tuple[BlockChoice, ...]
    automatic: bool  # found in the profile directory, not named with --measured

    def decisions(self, convertible: set[str]) -> dict[str, tuple[bool, str]]:
        """FQN -> (convert, reason) for the layers these results decide, among `convertible`."""
        decided = {}
        for choice in self.choices:
            for fqn, convert in choice.decisions().items():
                if fqn in convertible:
                    decided[fqn] = (convert, choice.reason())
        return decided

    def describe(self) -> str:
        devices = ", ".join(sorted({choice.device for choice in self.choices}))
        how = "found in the profile directory" if self.automatic else "--measured"
        return f"in-context results ({how}): {self.source}, {devices}"


def _timing(wall) -> Timing | None:
    try:
        return Timing.from_wall(wall)
    except (KeyError, TypeError, ValueError):
        return None


def _runs(directory: Path, automatic: bool, passed_over: list[str] | None) -> list:
    """The in-context runs in `directory`, every record checked (`fp8advisor.measure.results.read_run`).

    A file in it that cannot be read and a line that cannot be used are passed over and named in
    `passed_over` (each once), whether the directory was found on its own (`automatic`) or named with
    --measured: one bad file never breaks the others. A --measured that is not a directory is an error."""
    from fp8advisor.measure.results import runs_in

    if not automatic and not directory.is_dir():
        raise ResultsError(
            f"--measured {directory} is not a directory", hint="give the --out of bench --model"
        )
    found: list[str] = []
    runs = runs_in(directory, problems=found)
    found += [problem for run in runs for problem in run.problems]
    if passed_over is not None:
        passed_over.extend(problem for problem in found if problem not in passed_over)
    return [run for run in runs if run.in_context]


def find_in_context(
    directory: Path,
    *,
    fingerprint: str,
    family: str | None,
    recipe: str,
    automatic: bool,
    passed_over: list[str] | None = None,
) -> InContext | None:
    """The block choices in `directory` for this model fingerprint, GPU family and recipe; None when there are
    none. Named with --measured (not `automatic`), a directory with nothing usable is an error saying what it
    holds; a file or line in it that cannot be read is named in `passed_over` and skipped (`_runs`), as in
    the profile directory's in-context/. Emulated results are refused either way."""
    from fp8advisor.gpus import gpu_family

    directory = Path(directory)
    runs = _runs(directory, automatic, passed_over)
    mine = [run for run in runs if (run.header.get("model") or {}).get("fingerprint") == fingerprint]
    real = [run for run in mine if not run.emulated]
    on_gpu = [run for run in real if gpu_family(run.device_name) == family]
    latest: dict[str, BlockChoice] = {}
    for run in on_gpu:  # oldest first: a later run's choice replaces an earlier one
        for record in run.choices:  # each checked on reading (`result_records.choice_problem`)
            if record["recipe"] != recipe:
                continue
            time, bf16 = _timing(record["wall_time_s"]), _timing(record["bf16_wall_time_s"])
            if time is None or bf16 is None:
                continue
            seeds = record.get("seeds") or {}
            advice = seeds.get("advice") or {}
            latest[record["block"]] = BlockChoice(
                pattern=record["block"],
                instances=tuple(record["instances"]),
                recipe=recipe,
                float8=frozenset(record["float8"]),
                time=time,
                bf16_time=bf16,
                considered=frozenset((seeds.get("all") or {}).get("float8") or ()),
                advice_float8=frozenset(advice["float8"]) if "float8" in advice else None,
                advice_time=_timing(advice.get("wall_time_s")),
                device=run.device_name,
                measured_at=str(record.get("measured_at")),
            )
    if latest:
        return InContext(source=directory, choices=tuple(latest.values()), automatic=automatic)
    if automatic:
        return None
    if not runs:
        why = "holds no in-context results (bench --model)"
    elif not mine:
        why = "holds in-context results of other models or token counts only"
    elif not real:
        why = "holds only emulated in-context results (bench --model --emulate), which are never advice"
    elif not on_gpu:
        devices = ", ".join(sorted({run.device_name for run in real}))
        why = f"holds this model's results for {devices}, not for the {family} this advice is for"
    else:
        why = f"holds no finished {recipe} search for this model (a sweep stopped early: run it again)"
    hint = "measure with `fp8advisor bench --model TARGET --batch B --seq S` on the GPU (same batch and seq)"
    raise ResultsError(f"{directory} {why}", hint=hint)


def in_context_dir() -> Path:
    """Where in-context results go by default, and where `suggest` looks for them: the profile directory's
    `in-context/`."""
    from fp8advisor.predict.profile_files import user_profile_dir

    return user_profile_dir() / "in-context"


def in_context_reader(
    measured: str | Path | None,
    *,
    automatic: bool,
    model_layers,
    family: str,
    tensor_parallel: int = 1,
    passed_over: list[str] | None = None,
) -> Callable[[Recipe], InContext | None] | None:
    """`recipe -> InContext | None` for `advise`: the results in `measured`, or else (`automatic`) those in
    the profile directory's in-context/ for this model, batch, seq and GPU family. None when neither applies,
    and with tensor parallelism (a block measured on one GPU is not a sharded one). Files and lines of the
    profile directory's in-context/ that cannot be read are named in `passed_over` (`find_in_context`)."""
    from fp8advisor.inspect.blocks import model_fingerprint

    if tensor_parallel > 1:
        if measured is not None:
            raise AdvisorError(
                "--measured does not go with --tp: the blocks were measured whole, on one GPU",
                hint="leave out --measured (or --tp)",
            )
        return None
    if measured is None and not automatic:
        return None
    directory = Path(measured) if measured is not None else in_context_dir()
    fingerprint = model_fingerprint(model_layers)

    def read(recipe: Recipe) -> InContext | None:
        return find_in_context(
            directory,
            fingerprint=fingerprint,
            family=family,
            recipe=recipe.value,
            automatic=measured is None,
            passed_over=passed_over,
        )

    return read


__all__ = [
    "MEASURED_IN_CONTEXT",
    "BlockChoice",
    "InContext",
    "find_in_context",
    "in_context_dir",
    "in_context_reader",
]
