"""The step model's fitted constants: one in-step efficiency per GPU family.

Kernels laid end to end run faster than a real training step (clock limits under load, communication kernels
sharing the SMs, launch gaps, fusion short of the ideal), so the step model divides every compute term by an
in-step efficiency: modelled kernel time / published step time of one published bf16 run of that GPU family
(`data/anchors/published_step_results.json`, the results marked `fit: true`; written to
`data/anchors/step_calibration.json` by `benchmarks/calibrate_step_model.py`). A family without such a run
takes the default family's (H100's), and says so. No predicted speedup depends on it: it divides every
compute term alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fp8advisor.errors import ProfileError
from fp8advisor.gpus import sibling_family
from fp8advisor.paths import DATA_DIR

CALIBRATION_PATH = DATA_DIR / "anchors" / "step_calibration.json"
CALIBRATION_SCHEMA = "fp8advisor.step-calibration/2"


@dataclass(frozen=True)
class Calibration:
    """The in-step efficiency of one GPU family: modelled kernel time / real step time of its anchor."""

    in_step_efficiency: float
    fitted_to: str  # for people: which published figure
    path: Path | None = None

    @classmethod
    def load(cls, path: Path | str = CALIBRATION_PATH, family: str | None = None) -> Calibration:
        """The calibration of `family` in the file at `path` (`of`)."""
        path = Path(path)
        try:
            return cls.of(json.loads(path.read_text(encoding="utf-8")), family, path)
        except (OSError, ValueError) as error:
            raise ProfileError(
                f"cannot read the step model's calibration {path}: {error}",
                hint="reinstall fp8advisor, or regenerate it: python benchmarks/calibrate_step_model.py",
            ) from None

    @classmethod
    def of(cls, data: dict, family: str | None = None, path: Path | None = None) -> Calibration:
        """The calibration of `family` (None: the default family) in a calibration file's content; a family
        it has no entry for gets its architecture's (`sibling_family`: GB200 and B300 take B200's, H200
        H100's), else the default family's, its `fitted_to` saying so. `ValueError` when the content is not a
        calibration."""
        try:
            if data.get("schema") != CALIBRATION_SCHEMA:
                raise ValueError(f"schema is {data.get('schema')!r}, not {CALIBRATION_SCHEMA!r}")
            families = data["families"]
            default = sibling_family(family, families) or str(data["default_family"])
            entry = families.get(family or default) or families[default]
            efficiency = float(entry["in_step_efficiency"])
            fitted_to = str(entry["fitted_to"])
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"no {error} in it") from None
        if not 0 < efficiency <= 1:
            raise ValueError(f"in_step_efficiency {efficiency} is not in (0, 1]")
        if family is not None and family not in families:
            fitted_to = f"{default}'s, no {family} anchor: {fitted_to}"
        return cls(efficiency, fitted_to, path)


__all__ = ["CALIBRATION_PATH", "CALIBRATION_SCHEMA", "Calibration"]
