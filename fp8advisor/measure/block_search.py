"""Which of a block's Linear layers to train in float8, decided by measuring the block: the local search of
`fp8advisor bench --model`.

The search knows nothing of GPUs: it asks `measure(float8_set)` for a `Timing` and decides from the answers,
so it runs the same on a GPU, on a CPU and on a synthetic table (the tests), and a resumed sweep replays it
from the timings it saved.

The rule:

1. Measure the seeds: all-bf16 (the empty set), every convertible Linear, the profile's advice, torchao's
   auto filter (duplicates once). Start from the best seed (`best_of`).
2. Flip one group at a time (a group: the Linear layers that read one input tensor, e.g. wq, wk and wv), in
   order: a group partly or not at all in float8 goes to float8, a group wholly in float8 goes to bf16.
   Keep the flip when it is `better` than the current set, and start the next round from the new set.
3. Stop after a round in which no flip was kept, or after one round per group (a cap on the measurements:
   every variant is measured once, however often the search comes back to it).

What "better" means is where the noise goes. A set is *clearly faster* than another when its 80th percentile
is below the other's 20th percentile: the middle 60% of their iteration times do not overlap. A flip to more
float8 is kept only when clearly faster; a flip to less float8 is kept when no set measured so far is clearly
faster than it (float8 costs accuracy: a difference inside the noise is no reason to pay it). "No set is
clearly faster than X" is checked against the set with the lowest 80th percentile, the only one that can be:
not the lowest median, which a noisy set may hold. So the chosen set is never clearly slower than any set
measured (seeds included), and no difference inside the noise is ever called a win.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Timing:
    """Iteration times of one variant, in seconds: median and the 20th/80th percentiles."""

    median: float
    p20: float
    p80: float

    @classmethod
    def from_wall(cls, wall: dict) -> Timing:
        """From a results record's `wall_time_s` ({"median", "p20", "p80", ...})."""
        return cls(median=float(wall["median"]), p20=float(wall["p20"]), p80=float(wall["p80"]))

    @property
    def spread(self) -> float:
        return self.p80 - self.p20

    def clearly_faster_than(self, other: Timing) -> bool:
        """Faster by more than the noise: the middle 60% of the two sets of iteration times do not overlap."""
        return self.p80 < other.p20

    def to_json(self) -> dict:
        return {"median": self.median, "p20": self.p20, "p80": self.p80}


Variant = frozenset[str]  # the Linear layers (names relative to the block) in float8; empty: all bf16


def flip(current: Variant, group: Sequence[str]) -> Variant:
    """`group` wholly to bf16 when it is wholly in float8, else wholly to float8."""
    if set(group) <= current:
        return current - frozenset(group)
    return current | frozenset(group)


def better(candidate: Variant, current: Variant, timings: dict[Variant, Timing]) -> bool:
    """Whether the search moves from `current` to `candidate` (the module docstring's rule); `timings` holds
    every variant measured so far, both of these included."""
    new, old = timings[candidate], timings[current]
    if candidate < current:  # fewer layers in float8
        return unbeaten(new, timings.values())
    return new.clearly_faster_than(old)


def unbeaten(timing: Timing, others: Iterable[Timing]) -> bool:
    """No timing of `others` is clearly faster than `timing` (the one with the lowest 80th percentile is the
    only one that could be)."""
    strongest = min(others, key=lambda other: other.p80)
    return not strongest.clearly_faster_than(timing)


def best_of(variants: Iterable[Variant], timings: dict[Variant, Timing]) -> Variant:
    """Among `variants`, the one with the fewest float8 layers that no other is clearly faster than (ties:
    the faster median, then the name order)."""
    candidates = list(dict.fromkeys(variants))
    seeds = [timings[variant] for variant in candidates]
    unbeaten_ones = [variant for variant in candidates if unbeaten(timings[variant], seeds)]
    return min(unbeaten_ones, key=lambda variant: (len(variant), timings[variant].median, sorted(variant)))


@dataclass(frozen=True)
class Step:
    """One flip the search measured: the group, the set it led to, and whether it was kept."""

    group: tuple[str, ...]
    variant: Variant
    kept: bool

    def to_json(self) -> dict:
        return {"group": list(self.group), "float8": sorted(self.variant), "kept": self.kept}


@dataclass(frozen=True)
class SearchResult:
    """Where the search started (`start`, the best seed), where it ended (`chosen`), every flip it measured
    and every variant's timing."""

    start: Variant
    chosen: Variant
    steps: tuple[Step, ...]
    timings: dict[Variant, Timing] = field(compare=False)

    def to_json(self) -> dict:
        return {
            "start": sorted(self.start),
            "chosen": sorted(self.chosen),
            "steps": [step.to_json() for step in self.steps],
        }


def local_search(
    groups: Sequence[Sequence[str]],
    seeds: Iterable[Variant],
    measure: Callable[[Variant], Timing | None],
) -> SearchResult | None:
    """The search of the module docstring. `measure(variant)` returns its timing, or None when it could not
    be measured (failed: the variant is never chosen); the search returns None when no seed was measured."""
    timings: dict[Variant, Timing] = {}
    failed: set[Variant] = set()

    def timing(variant: Variant) -> Timing | None:
        if variant not in timings and variant not in failed:
            result = measure(variant)
            if result is None:
                failed.add(variant)
            else:
                timings[variant] = result
        return timings.get(variant)

    measured = [variant for variant in dict.fromkeys(frozenset(seed) for seed in seeds) if timing(variant)]
    if not measured:
        return None
    start = current = best_of(measured, timings)
    steps: list[Step] = []
    for _ in range(max(1, len(groups))):
        moved = False
        for group in groups:
            candidate = flip(current, group)
            if timing(candidate) is None:
                continue
            kept = better(candidate, current, timings)
            steps.append(Step(tuple(group), candidate, kept))
            if kept:
                current, moved = candidate, True
        if not moved:
            break
    return SearchResult(start=start, chosen=current, steps=tuple(steps), timings=timings)


__all__ = [
    "SearchResult",
    "Step",
    "Timing",
    "Variant",
    "best_of",
    "better",
    "flip",
    "local_search",
    "unbeaten",
]
