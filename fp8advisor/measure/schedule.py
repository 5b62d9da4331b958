"""Which points a sweep measures, in what order, and when it stops: shards, batches and the time budget.

- **Order.** Largest shape first (by M*K*N), each shape's configurations together with bf16 first; with
  batches (below), largest first within each batch, the first batch holding the largest shape. So the
  longest point of a recipe comes first, and "the longest so far" is a safe estimate of the next one.
- **Shards.** `--shard I/N` takes a deterministic slice of the grid's shapes (all of a shape's recipes stay
  together): shapes ordered by size are dealt to the N shards back and forth (1..N, N..1, ...), so the shards
  get similar work. N commands, GPUs or machines with I = 1..N cover the grid exactly once; their results
  merge in `fit` (and in one `--out`, where they resume each other). N is at most the grid's shapes (a shard
  with none is refused, `Shard.check`), and finding a shard's shapes costs the grid's size, whatever N.
- **Batches.** The sweep alternates pre-compiling a batch (workers, in parallel) and measuring it (alone on
  the GPU), so that a time budget is checked before each batch and each point, and a cut costs at most one
  batch of pre-compilation. Shapes are dealt to the batches by size like the shards, so that each batch
  mixes large and small shapes (the workers share the GPU's memory) and the first holds the largest.
- **Time budget.** A number of seconds up to a year (`check_time_budget`). A point starts only if the time
  used, the point's estimate and `FINISH_RESERVE_S` (the summary and heatmaps) fit in the budget. The
  estimate is the longest point measured so far of the same recipe and compile state (pre-compiled by a
  worker or not), in this run or the earlier runs it resumes; with no such point, the longest of any recipe
  in that state; with none in that state, the longest point (plus `FIRST_POINT_ESTIMATE_S` for a cold compile
  when only pre-compiled points were seen); with none at all, `FIRST_POINT_ESTIMATE_S`. Pre-compilation stops
  at the deadline that still leaves room for the batch's first point.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from fp8advisor.errors import AdvisorError, quote

#: Seconds kept at the end of a budget for what follows the last point: the summary, heatmaps and PNG.
FINISH_RESERVE_S = 20.0
#: The longest `--time-budget`, a year: a longer one is no limit (leave the option out).
MAX_TIME_BUDGET_S = 365 * 24 * 3600.0
#: Digits `--shard` reads in I and N: more is no number of machines (and Python refuses to read an int of
#: over 4300 digits).
_MAX_DIGITS = 9
#: The estimate of a point when nothing has been measured yet: a cold compile of a float8 forward + backward
#: (tens of seconds of CPU) and the largest default shape's timing windows.
FIRST_POINT_ESTIMATE_S = 60.0


def shape_size(shape: tuple[int, ...]) -> int:
    """The work of a shape: M*K*N for a Linear, E*M_per_expert*K*N for grouped expert GEMMs."""
    return math.prod(shape)


def sweep_order(points: Sequence) -> list:
    """Largest shape first, a shape's configurations together in their given order (bf16 first)."""
    recipe_rank = {}
    for point in points:
        recipe_rank.setdefault(point.recipe, len(recipe_rank))
    return sorted(points, key=lambda p: (-shape_size(p.shape), p.shape, recipe_rank[p.recipe]))


def hand_of(position: int, count: int) -> int:
    """The hand (0-based) that `deal` gives the item at `position`: back and forth over `count` hands."""
    lap, offset = divmod(position, count)
    return offset if lap % 2 == 0 else count - 1 - offset


def deal(items: Sequence, count: int) -> list[list]:
    """`items` (largest first) dealt to `count` hands back and forth (1..count, count..1, ...), so that the
    hands get similar work and the first holds the largest. `count` is at most len(items) (or 1): no empty
    hands are built."""
    count = max(1, min(count, len(items)))
    hands: list[list] = [[] for _ in range(count)]
    for position, item in enumerate(items):
        hands[hand_of(position, count)].append(item)
    return hands


def batches(points: Sequence, configurations: int) -> list[list]:
    """`points` in batches of whole shapes, about `configurations` each, each batch in sweep order.

    Shapes are dealt to the batches by size (`deal`), so that every batch mixes large and small shapes: the
    pre-compiling workers share the GPU's memory, and a batch of nothing but 32768-wide shapes would let only
    two or three of them compile at once. The first batch holds the largest shape, so the time budget's
    estimates (the longest point so far) are set by it.
    """
    ordered = sweep_order(points)
    shapes = list(dict.fromkeys(point.shape for point in ordered))
    count = max(1, min(len(shapes), -(-len(ordered) // max(1, configurations))))
    batch_of = {shape: index for index, hand in enumerate(deal(shapes, count)) for shape in hand}
    cut: list[list] = [[] for _ in range(count)]
    for point in ordered:
        cut[batch_of[point.shape]].append(point)
    return [batch for batch in cut if batch]


# --- shards -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shard:
    """Shard `index` (1-based) of `count`."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """`I/N` as typed (`--shard`); N is checked against the grid's shapes later (`check`)."""
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text, flags=re.ASCII)
        if match and max(len(match.group(1)), len(match.group(2))) > _MAX_DIGITS:
            raise AdvisorError(
                f"--shard {quote(text)}: N is more than any grid has shapes",
                hint="use N from 1 to the grid's number of shapes (bench prints it), e.g. --shard 2/4",
            )
        if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
            raise AdvisorError(
                f"--shard takes I/N with 1 <= I <= N, got {quote(text)}",
                hint="e.g. --shard 2/4 runs the second of four slices of the grid",
            )
        return cls(int(match.group(1)), int(match.group(2)))

    def check(self, shape_count: int) -> None:
        """`AdvisorError` (exit 2) unless 1 <= index <= count <= `shape_count`, the grid's shapes: a shard
        holds whole shapes, so more shards than shapes would leave some with nothing to measure."""
        if not 1 <= self.index <= self.count:
            raise AdvisorError(
                f"--shard takes I/N with 1 <= I <= N, got {self}",
                hint="e.g. --shard 2/4 runs the second of four slices of the grid",
            )
        if self.count > shape_count:
            raise AdvisorError(
                f"--shard {self}: the grid has {shape_count} shape(s), so it splits into at most "
                f"{shape_count} shard(s), not {self.count:,}",
                hint=f"use N from 1 to {shape_count}, or a larger grid",
            )

    def shapes(self, shapes: Iterable[tuple[int, int, int]]) -> set[tuple[int, int, int]]:
        """The shapes of this shard: by size (largest first), dealt back and forth over the shards (as `deal`
        does, without building the other shards' hands)."""
        ordered = sorted(set(shapes), key=lambda shape: (-shape_size(shape), shape))
        self.check(len(ordered))
        return {
            shape for position, shape in enumerate(ordered) if hand_of(position, self.count) == self.index - 1
        }

    def select(self, points: Sequence) -> list:
        """The points of this shard's shapes (`shapes`), in their given order."""
        mine = self.shapes(point.shape for point in points)
        return [point for point in points if point.shape in mine]

    def to_json(self) -> dict:
        return {"index": self.index, "count": self.count}

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


# --- the time budget ----------------------------------------------------------------------------------------


@dataclass
class DurationEstimator:
    """Seconds the next point will take, from the points measured so far (see the module docstring)."""

    first_point_s: float = FIRST_POINT_ESTIMATE_S
    #: (recipe, precompiled) -> the longest duration seen
    longest: dict[tuple[str, bool], float] = field(default_factory=dict)

    def observe(self, recipe: str, precompiled: bool, seconds: float) -> None:
        key = (recipe, precompiled)
        self.longest[key] = max(seconds, self.longest.get(key, 0.0))

    def observe_records(self, records: Iterable[dict]) -> None:
        """Seed from earlier runs' point records (those that say how long they took)."""
        for record in records:
            seconds = record.get("duration_s")
            if isinstance(seconds, int | float) and seconds > 0:
                self.observe(str(record.get("recipe")), record.get("precompiled") == "ok", seconds)

    def estimate(self, recipe: str, precompiled: bool) -> float:
        if (recipe, precompiled) in self.longest:
            return self.longest[(recipe, precompiled)]
        same_state = [seconds for (_, state), seconds in self.longest.items() if state == precompiled]
        if same_state:
            return max(same_state)
        if not precompiled and self.longest:
            # only pre-compiled points seen: this one also compiles cold
            return max(self.longest.values()) + self.first_point_s
        return max([self.first_point_s, *self.longest.values()])


def check_time_budget(seconds: float | None) -> None:
    """`AdvisorError` (exit 2) unless `seconds` is None (no limit) or a number of seconds in (0,
    `MAX_TIME_BUDGET_S`] (NaN and infinity are no budget: a results header keeps the budget, and JSON holds
    neither)."""
    if seconds is not None and not 0 < seconds <= MAX_TIME_BUDGET_S:  # NaN fails every comparison
        raise AdvisorError(
            f"--time-budget must be a positive number of seconds, at most {MAX_TIME_BUDGET_S:,.0f} (a year), "
            f"got {seconds}",
            hint="e.g. --time-budget 540 for a 10-minute job limit; leave it out for no limit",
        )


@dataclass
class TimeBudget:
    """`seconds` of wall time from `started` (a `clock` reading); None = no limit."""

    seconds: float | None
    started: float
    clock: Callable[[], float] = time.monotonic
    reserve_s: float = FINISH_RESERVE_S

    def __post_init__(self) -> None:
        check_time_budget(self.seconds)

    def elapsed(self) -> float:
        return self.clock() - self.started

    def allows(self, estimate_s: float) -> bool:
        """Whether something expected to take `estimate_s` finishes inside the budget (with the reserve)."""
        return self.seconds is None or self.elapsed() + estimate_s + self.reserve_s <= self.seconds

    def deadline(self, keep_s: float) -> float | None:
        """The clock reading by which to stop a phase so that `keep_s` and the reserve still fit."""
        if self.seconds is None:
            return None
        return self.started + self.seconds - self.reserve_s - keep_s


__all__ = [
    "FINISH_RESERVE_S",
    "FIRST_POINT_ESTIMATE_S",
    "MAX_TIME_BUDGET_S",
    "DurationEstimator",
    "Shard",
    "TimeBudget",
    "batches",
    "check_time_budget",
    "deal",
    "hand_of",
    "shape_size",
    "sweep_order",
]
