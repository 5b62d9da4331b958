"""Speedups of float8 over bf16 from results files: each float8 point set against its bf16 baseline.

Speedup of a float8 point = bf16 time / float8 time at the same shape ((M, K, N) for a Linear point;
(E, M_per_expert, K, N) for a grouped expert GEMM point), taken from the same run or from a run with identical
device name and software versions (`pair_with_baseline`). Linear and grouped points are paired by the same
rule; they differ only in the sizes that name them (`Speedup`, `GroupedSpeedup`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fp8advisor.measure.results import Run, is_grouped, point_key, setup_key, suspect_reason
from fp8advisor.recipes import BASELINE


@dataclass(frozen=True)
class Speedup:
    """A float8 point set against its bf16 baseline. `basis` says which time was divided."""

    M: int
    K: int
    N: int
    recipe: str
    speedup: float
    bf16_time_s: float
    float8_time_s: float
    basis: str  # "kernel_time" (GPU kernel time, the published method) or "wall_time_median" (emulated runs)
    device_name: str
    emulated: bool
    run_id: str  # the run of the float8 point

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.M, self.K, self.N)

    def to_json(self) -> dict:
        return {
            "M": self.M,
            "K": self.K,
            "N": self.N,
            "recipe": self.recipe,
            "speedup": self.speedup,
            "bf16_time_s": self.bf16_time_s,
            "float8_time_s": self.float8_time_s,
            "basis": self.basis,
            "device_name": self.device_name,
            "emulated": self.emulated,
            "run_id": self.run_id,
        }


@dataclass(frozen=True)
class GroupedSpeedup:
    """A float8 grouped expert GEMM point set against its bf16 baseline (`torch._grouped_mm`)."""

    E: int
    M_per_expert: int
    K: int
    N: int
    recipe: str
    speedup: float
    bf16_time_s: float
    float8_time_s: float
    basis: str
    device_name: str
    emulated: bool
    run_id: str

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.E, self.M_per_expert, self.K, self.N)


def _point_time(point: dict, basis: str) -> float | None:
    if basis == "kernel_time":
        return point.get("kernel_time_s")
    wall = point.get("wall_time_s") or {}
    return wall.get("median")


def _ok_points(runs: Sequence[Run], grouped: bool) -> tuple[dict[tuple, dict], dict[tuple, tuple[dict, Run]]]:
    """The ok, not suspect points of the runs of one form (grouped or not): the bf16 ones by (setup, *shape),
    the float8 ones (with their run) by (setup, *shape, recipe); a later run's point replaces an earlier's."""
    baselines: dict[tuple, dict] = {}
    float8: dict[tuple, tuple[dict, Run]] = {}
    for run in runs:
        if run.grouped != grouped:
            continue
        setup = setup_key(run.header)
        for point in run.points:
            if point.get("status") != "ok" or suspect_reason(point) or is_grouped(point) != grouped:
                continue
            *shape, recipe = point_key(point)
            if recipe == BASELINE:
                baselines[(setup, *shape)] = point
            else:
                float8[(setup, *shape, recipe)] = (point, run)
    return baselines, float8


def pair_with_baseline(
    runs: Sequence[Run], *, basis: str = "auto", grouped: bool = False
) -> list[Speedup] | list[GroupedSpeedup]:
    """Speedup of every ok float8 point over the ok bf16 point of the same shape and setup: of the Linear
    points (`Speedup`), or with `grouped` of the grouped expert GEMM points (`GroupedSpeedup`, each over the
    ok bf16 point of the same (E, M_per_expert, K, N)).

    `basis`: "kernel_time" (GPU kernel time, as torchao publishes), "wall_time_median", or "auto" (kernel
    time where both points have one, else wall time, which is all an emulated run has). Runs are paired only
    with runs of identical device name and software (`setup_key`); when a shape was measured more than once,
    the later run wins.
    Points without a baseline are left out, and so are points whose profiler session may have lost records
    (`suspect_reason`), float8 or baseline, and the runs of the other form. Sorted by recipe, then the sizes
    (M, K, N; or E, M_per_expert, K, N).
    """
    if basis not in ("auto", "kernel_time", "wall_time_median"):
        raise ValueError(f"unknown basis {basis!r}")
    make = GroupedSpeedup if grouped else Speedup
    baselines, float8 = _ok_points(runs, grouped)
    pairs = []
    for (setup, *key), (point, run) in float8.items():
        baseline = baselines.get((setup, *key[:-1]))
        if baseline is None:
            continue
        chosen = basis
        if basis == "auto":
            has_kernel = point.get("kernel_time_s") and baseline.get("kernel_time_s")
            chosen = "kernel_time" if has_kernel else "wall_time_median"
        bf16_time, float8_time = _point_time(baseline, chosen), _point_time(point, chosen)
        if not bf16_time or not float8_time:
            continue
        pairs.append(
            make(
                *key,
                speedup=bf16_time / float8_time,
                bf16_time_s=bf16_time,
                float8_time_s=float8_time,
                basis=chosen,
                device_name=run.device_name,
                emulated=run.emulated,
                run_id=run.run_id,
            )
        )
    return sorted(pairs, key=lambda pair: (pair.recipe, *pair.shape))


__all__ = ["GroupedSpeedup", "Speedup", "pair_with_baseline"]
