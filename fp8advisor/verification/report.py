"""The records `verify` returns: what differs (`Difference`, of a `DifferenceKind`), each nn.Linear
(`LayerCheck`), each group of grouped MoE experts (`ExpertCheck`), how the step ran (`Execution`), and the
whole `VerifyReport` with its exit code and its JSON form (`fp8advisor verify --json`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from fp8advisor.frameworks.config_record import FrameworkConfig
from fp8advisor.inspect.records import LayerStatus
from fp8advisor.recipes import Recipe
from fp8advisor.verification.numerics import SQNR_THRESHOLD_DB


class DifferenceKind(str, Enum):
    """What makes `verify` exit 1."""

    FP8_OFF = "fp8 off"
    RECIPE = "recipe differs"
    SETTING = "setting differs"
    UNUSED_ENTRY = "filter entry matches no layer"
    AGAINST_ADVICE = "converted against the advice"
    LEFT_BF16 = "advised, left in bf16"
    NEVER_CALLED = "converted, never called"
    NO_FLOAT8 = "float8 missing where converted"
    UNEXPECTED_FLOAT8 = "float8 where not converted"
    NUMERICS = "numerics"
    EXPERTS = "experts differ from the advice"
    FRAMEWORK = "the framework's own conversion differs"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Difference:
    """One thing that makes `verify` exit 1: its kind, what it is about, and the detail."""

    kind: DifferenceKind
    subject: str  # a layer FQN, a filter entry, or the config
    detail: str

    def describe(self) -> str:
        return (
            f"{self.kind.value}: {self.subject} ({self.detail})"
            if self.detail
            else f"{self.kind.value}: {self.subject}"
        )

    def to_json(self) -> dict:
        return {"kind": self.kind.value, "subject": self.subject, "detail": self.detail}


@dataclass(frozen=True)
class LayerCheck:
    """One nn.Linear: what the config does with it, what the advice says, and what ran."""

    fqn: str
    K: int
    N: int
    M: int  # rows per call at the advised batch x seq (0: never called)
    status: LayerStatus
    advised: bool
    advice_reason: str
    predicted_speedup: float | None
    converted: bool
    calls: int  # forward calls in the run
    float8_gemms: int  # forward + backward
    high_precision_gemms: int
    float8_casts: int
    sqnr_output_db: float | None = None
    sqnr_grad_input_db: float | None = None
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        def rounded(value: float | None) -> float | None:
            return None if value is None or not math.isfinite(value) else round(value, 2)

        return {
            "fqn": self.fqn,
            "K": self.K,
            "N": self.N,
            "M": self.M,
            "status": self.status.value,
            "advised": self.advised,
            "advice_reason": self.advice_reason,
            "predicted_speedup": None if self.predicted_speedup is None else round(self.predicted_speedup, 4),
            "converted": self.converted,
            "calls": self.calls,
            "float8_gemms": self.float8_gemms,
            "high_precision_gemms": self.high_precision_gemms,
            "float8_casts": self.float8_casts,
            "sqnr_output_db": rounded(self.sqnr_output_db),
            "sqnr_grad_input_db": rounded(self.sqnr_grad_input_db),
            "problems": list(self.problems),
        }


@dataclass(frozen=True)
class ExpertCheck:
    """One group of grouped MoE experts: what the config does with its 3-D weights, what the advice says."""

    group: str  # ExpertAdvice.group
    modules: tuple[str, ...]  # the modules holding its 3-D weights
    advised: bool  # what the advice says (ExpertAdvice.convert)
    expected: bool  # what a config of this format should do (all-or-none for torchtitan 0.3)
    converted: bool | None  # what the config does; None: its format cannot convert grouped experts
    predicted_speedup: float | None
    provenance: str | None
    problems: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {
            "group": self.group,
            "modules": list(self.modules),
            "advised": self.advised,
            "expected": self.expected,
            "converted": self.converted,
            "predicted_speedup": None if self.predicted_speedup is None else round(self.predicted_speedup, 4),
            "provenance": self.provenance,
            "problems": list(self.problems),
        }


@dataclass(frozen=True)
class Execution:
    """How the forward and backward were run."""

    device: str  # "cpu (torchao emulated float8)" or the GPU name
    emulated: bool
    mode: str  # "model" (the user's forward, real weights) or "shadow" (see the module docstring)
    batch: int
    seq: int
    why: str  # why this mode
    sqnr_scope: str  # which converted layers have an SQNR
    model_output_sqnr_db: float | None = None  # whole-model output, float8 vs bf16 (mode "model" only)

    def to_json(self) -> dict:
        sqnr = self.model_output_sqnr_db
        return {
            "device": self.device,
            "emulated": self.emulated,
            "mode": self.mode,
            "batch": self.batch,
            "seq": self.seq,
            "why": self.why,
            "sqnr_scope": self.sqnr_scope,
            "model_output_sqnr_db": None if sqnr is None or not math.isfinite(sqnr) else round(sqnr, 2),
        }


@dataclass(frozen=True)
class VerifyReport:
    """What `verify` found: per layer and per expert group, how the step ran, and every difference."""

    target: str
    config: FrameworkConfig
    recipe: Recipe
    profile: str
    batch: int
    seq: int
    min_speedup: float
    layers: tuple[LayerCheck, ...]
    differences: tuple[Difference, ...]
    execution: Execution
    sqnr_threshold_db: float = SQNR_THRESHOLD_DB
    notes: tuple[str, ...] = ()
    experts: tuple[ExpertCheck, ...] = ()  # one per group of grouped MoE experts (empty: a dense model)
    #: whether the framework's own conversion ran, and what it found (`native.framework_line`)
    framework: str = ""

    @property
    def passed(self) -> bool:
        return not self.differences

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    @property
    def converted(self) -> tuple[str, ...]:
        return tuple(layer.fqn for layer in self.layers if layer.converted)

    @property
    def advised(self) -> tuple[str, ...]:
        return tuple(layer.fqn for layer in self.layers if layer.advised)

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "config": self.config.to_json(),
            "recipe": self.recipe.value,
            "profile": self.profile,
            "batch": self.batch,
            "seq": self.seq,
            "min_speedup": self.min_speedup,
            "passed": self.passed,
            "execution": self.execution.to_json(),
            "sqnr_threshold_db": self.sqnr_threshold_db,
            "converted": list(self.converted),
            "advised": list(self.advised),
            "differences": [difference.to_json() for difference in self.differences],
            "layers": [layer.to_json() for layer in self.layers],
            "experts": [group.to_json() for group in self.experts],
            "framework": self.framework,
            "notes": list(self.notes),
        }


__all__ = [
    "Difference",
    "DifferenceKind",
    "Execution",
    "ExpertCheck",
    "LayerCheck",
    "VerifyReport",
]
