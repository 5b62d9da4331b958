"""The figures a profile holds, and where they come from: provenance and its ranks, a measured Linear
point (`SpeedupPoint`), the held-out error of a predictor (`FitError`), and the rules of their JSON (stable
rounding, sizes that must be positive integers, times where measured).

Profiles (`fp8advisor.predict.profile`) and their grouped sections (`fp8advisor.predict.grouped_profile`) are
made of these; `fit` computes them (`fp8advisor.predict.fit`, `fp8advisor.predict.fit_error`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fp8advisor.errors import quote
from fp8advisor.fields import MAX_SIZE

#: Where a figure comes from. `evidence`: predicted by the model that best predicts the published evidence
#: base it was not fitted to (`fp8advisor.predict.loso`), with an interval. `emulated` profiles (fitted from
#: `bench --emulate`) exist for tests and are never selected automatically.
PROVENANCES = ("measured", "evidence", "published", "modelled", "emulated")


#: Evidence ranks, best first (the order above): the profile that answers when several describe one GPU type,
#: and the provenance within which `advise` compares recipes' figures.
PROVENANCE_RANK = {provenance: rank for rank, provenance in enumerate(PROVENANCES)}


def weakest_provenance(provenances, empty: str = "none") -> str:
    """The weakest evidence among `provenances` (an unknown one counts as weakest); `empty` when there is
    none: what a figure made of several others can claim."""
    found = set(provenances)
    return max(found, key=lambda p: PROVENANCE_RANK.get(p, 9)) if found else empty


def stable_float(value: float, digits: int = 6) -> float:
    """A float rounded to `digits` significant digits, so that generated JSON is the same on every machine."""
    if value == 0 or not math.isfinite(value):
        return float(value)
    return float(f"{value:.{digits}g}")


#: The largest GEMM dimension a profile may hold (far beyond any layer): the one bound of `fp8advisor.fields`.
_MAX_SIZE = MAX_SIZE


def gemm_size(value: Any) -> int:
    """A GEMM dimension from a profile: a positive integer (not a float, not a bool), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= _MAX_SIZE:
        raise ValueError(f"size {quote(value)} is not a positive integer")
    return value


def with_times(data: dict[str, Any], bf16_time_s: float | None, float8_time_s: float | None) -> dict:
    """A point's JSON `data` with its measured times, where it has them (speedup points of either kind)."""
    if bf16_time_s is not None:
        data["bf16_time_s"] = stable_float(bf16_time_s)
    if float8_time_s is not None:
        data["float8_time_s"] = stable_float(float8_time_s)
    return data


def times_from(data: Mapping) -> dict[str, float | None]:
    """The `bf16_time_s` / `float8_time_s` keyword arguments of a point read from JSON (None: not given)."""
    return {
        key: None if data.get(key) is None else float(data[key]) for key in ("bf16_time_s", "float8_time_s")
    }


@dataclass(frozen=True)
class SpeedupPoint:
    """One measured shape: speedup = bf16 time / float8 time; the times when the source had them."""

    M: int
    K: int
    N: int
    speedup: float
    bf16_time_s: float | None = None
    float8_time_s: float | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.M, self.K, self.N)

    def to_json(self) -> dict:
        data: dict[str, Any] = {"M": self.M, "K": self.K, "N": self.N, "speedup": stable_float(self.speedup)}
        return with_times(data, self.bf16_time_s, self.float8_time_s)

    @classmethod
    def from_json(cls, data: Mapping) -> SpeedupPoint:
        return cls(
            M=gemm_size(data["M"]),
            K=gemm_size(data["K"]),
            N=gemm_size(data["N"]),
            speedup=float(data["speedup"]),
            **times_from(data),
        )


@dataclass(frozen=True)
class FitError:
    """How well the profile's predictor reproduces measured points it did not see (leave-one-out)."""

    method: str
    median_relative_error: float
    worst_relative_error: float
    sign_accuracy: float  # fraction of held-out points where "speedup > 1" was predicted right
    n: int

    def to_json(self) -> dict:
        return {
            "method": self.method,
            "median_relative_error": stable_float(self.median_relative_error, 4),
            "worst_relative_error": stable_float(self.worst_relative_error, 4),
            "sign_accuracy": stable_float(self.sign_accuracy, 4),
            "n": self.n,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> FitError:
        return cls(
            method=str(data["method"]),
            median_relative_error=float(data["median_relative_error"]),
            worst_relative_error=float(data["worst_relative_error"]),
            sign_accuracy=float(data["sign_accuracy"]),
            n=int(data["n"]),
        )


def absent_or_positive(value: float | None) -> bool:
    """True for a time or rate that is not given, or finite and positive: what a profile's figures may be."""
    return value is None or (math.isfinite(value) and value > 0)


__all__ = [
    "PROVENANCES",
    "PROVENANCE_RANK",
    "FitError",
    "SpeedupPoint",
    "stable_float",
    "weakest_provenance",
]
