"""The grouped section of a profile: what float8 buys for the grouped expert GEMMs (MoE experts) on one GPU.

Measured by `bench --grouped` over (E, M_per_expert, K, N), fitted by `fp8advisor fit` into a profile's
`grouped` section (schema `fp8advisor.profile/1`, optional: profiles without one read and write as before),
and predicted by `fp8advisor.predict.interpolation.GroupedModel` (`GROUPED_INTERPOLATION_MODEL` says its
rule). Its fields are checked on reading with the rest of the profile (`fp8advisor.predict.profile_schema`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fp8advisor.predict.figures import (
    FitError,
    gemm_size,
    stable_float,
    times_from,
    with_times,
)


@dataclass(frozen=True)
class GroupedSpeedupPoint:
    """One measured grouped expert GEMM: E experts of (M_per_expert, K) x (K, N), speedup = bf16 time /
    float8 time of forward + backward (`bench --grouped`)."""

    E: int
    M_per_expert: int
    K: int
    N: int
    speedup: float
    bf16_time_s: float | None = None
    float8_time_s: float | None = None

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.E, self.M_per_expert, self.K, self.N)

    def to_json(self) -> dict:
        data: dict[str, Any] = {
            "E": self.E,
            "M_per_expert": self.M_per_expert,
            "K": self.K,
            "N": self.N,
            "speedup": stable_float(self.speedup),
        }
        return with_times(data, self.bf16_time_s, self.float8_time_s)

    @classmethod
    def from_json(cls, data: Mapping) -> GroupedSpeedupPoint:
        return cls(
            E=gemm_size(data["E"]),
            M_per_expert=gemm_size(data["M_per_expert"]),
            K=gemm_size(data["K"]),
            N=gemm_size(data["N"]),
            speedup=float(data["speedup"]),
            **times_from(data),
        )


#: What a grouped profile's "model" section says; `GroupedProfile.speedup_at` implements it.
GROUPED_INTERPOLATION_MODEL = {
    "kind": "log-linear-interpolation",
    "inside": "multilinear in (log2 E, log2 M_per_expert, log2 K, log2 N) -> log speedup over the measured "
    "product grid (holes first filled from their measured neighbours along each axis)",
    "outside": "E, K or N outside the measured range: no answer; M_per_expert above the largest measured: "
    "clamp to the edge; below the smallest: the edge speedup times the measured trend of the two smallest "
    "M_per_expert (log-log), never above the edge",
}


@dataclass(frozen=True)
class GroupedProfile:
    """What a profile knows of the grouped expert GEMMs (MoE experts) on its GPU: float8 rowwise
    (torchao's grouped recipe) against bf16 `torch._grouped_mm`, measured by `bench --grouped` over
    (E, M_per_expert, K, N), with the held-out error of its predictor (`fp8advisor fit`).

    `speedup_at(E, M_per_expert, K, N)` answers (speedup, "interpolated" | "extrapolated"), or None where it
    cannot (E, K or N outside the measured range; see `GROUPED_INTERPOLATION_MODEL`)."""

    points: tuple[GroupedSpeedupPoint, ...]
    provenance: str = "measured"  # one of PROVENANCES ("emulated" for fits of `bench --emulate`)
    recipe: str = "rowwise"
    error: FitError | None = None
    model: Mapping[str, Any] = field(default_factory=lambda: dict(GROUPED_INTERPOLATION_MODEL), hash=False)

    def speedup_at(self, E: int, M_per_expert: float, K: int, N: int) -> tuple[float, str] | None:
        from fp8advisor.predict.interpolation import grouped_model

        if not self.points:
            return None
        return grouped_model(self.points).speedup_at(E, M_per_expert, K, N)

    def to_json(self) -> dict:
        return {
            "provenance": self.provenance,
            "recipe": self.recipe,
            "points": [point.to_json() for point in sorted(self.points, key=lambda p: p.shape)],
            "model": dict(self.model),
            "error": self.error.to_json() if self.error else None,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> GroupedProfile:
        return cls(
            points=tuple(GroupedSpeedupPoint.from_json(point) for point in data.get("points") or ()),
            provenance=str(data.get("provenance", "measured")),
            recipe=str(data.get("recipe", "rowwise")),
            error=FitError.from_json(data["error"]) if data.get("error") else None,
            model=dict(data.get("model") or GROUPED_INTERPOLATION_MODEL),
        )


__all__ = [
    "GROUPED_INTERPOLATION_MODEL",
    "GroupedProfile",
    "GroupedSpeedupPoint",
]
