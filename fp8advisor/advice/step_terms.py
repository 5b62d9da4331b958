"""The parts of a predicted step (`Term`) and the terms of its Linear layers, other GEMM layers and routed
experts, as `fp8advisor.advice.step` prices them (its docstring has the formulas)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from fp8advisor.inspect.records import ExpertForm

MEASURED, PUBLISHED, MODELLED, CALIBRATED = "measured", "published", "modelled", "calibrated"
#: The term of the GEMM layers the advice has no prediction for (`fp8advisor.advice.step`'s docstring).
OTHER_GEMMS = "other_gemms"


@dataclass(frozen=True)
class Term:
    """One part of a step: its in-step seconds, where the figure comes from and how it is computed."""

    name: str
    seconds: float
    provenance: str  # measured / published / modelled (of the figures it rests on)
    basis: str  # the formula and constants, for people

    def to_json(self, step_s: float) -> dict:
        return {
            "name": self.name,
            "seconds": float(f"{self.seconds:.6g}"),
            "share": round(self.seconds / step_s, 4) if step_s > 0 else None,
            "provenance": self.provenance,
            "basis": self.basis,
        }


def weakest_or_modelled(provenances: Iterable[str]) -> str:
    from fp8advisor.predict.figures import weakest_provenance

    return weakest_provenance(provenances, empty=MODELLED)


def linear_terms(in_float8, in_bf16, scaled: Callable[[float], float], in_step: str) -> list[Term]:
    """The Linear layers' two terms: those in float8, those in bf16."""
    return [
        Term(
            "linear_float8",
            scaled(sum(layer.float8_time_s for layer in in_float8)),
            weakest_or_modelled(
                p for layer in in_float8 for p in (layer.provenance, layer.bf16_provenance) if p
            ),
            f"{len(in_float8)} Linear layer(s) in float8: the profile's bf16 time / predicted speedup"
            + in_step,
        ),
        Term(
            "linear_bf16",
            scaled(sum(layer.bf16_time_s for layer in in_bf16)),
            weakest_or_modelled(layer.bf16_provenance for layer in in_bf16 if layer.bf16_provenance),
            f"{len(in_bf16)} Linear layer(s) in bf16: the profile's bf16 forward+backward time" + in_step,
        ),
    ]


def other_gemm_terms(
    model_layers, timed: Sequence[Any], gpu, scaled: Callable[[float], float], in_step: str
) -> list[Term]:
    """The GEMM layers the forward runs that no prediction prices (`OTHER_GEMMS`), in bf16; none when every
    such layer is priced. Grouped experts' weights are the expert terms' (or, unpriced, noted by the step)."""
    from fp8advisor.predict.roofline import linear_gemm_time_s

    groups = getattr(model_layers, "expert_groups", ())
    skipped = {layer.fqn for layer in timed}
    skipped |= {fqn for group in groups if group.form is ExpertForm.GROUPED for fqn in group.member_fqns}
    others = [
        layer
        for layer in getattr(model_layers, "layers", ())
        if any(M > 0 for M in layer.M_per_call) and layer.fqn not in skipped
    ]
    if not others:
        return []
    seconds = sum(  # output, grad_input and grad_weight GEMMs
        linear_gemm_time_s(M, layer.K, layer.N, "bf16", gpu.specs)
        for layer in others
        for M in layer.M_per_call
        if M > 0
    )
    return [
        Term(
            OTHER_GEMMS,
            scaled(seconds),
            MODELLED,
            f"{len(others)} GEMM layer(s) without a prediction (not convertible, or not nn.Linear; e.g. "
            f"{others[0].fqn}), bf16 at torchao's GEMM roofline, forward and two backward GEMMs" + in_step,
        )
    ]


def speedups_provenance(in_float8, experts_float8) -> str | None:
    """The weakest provenance of the float8 speedups the step rests on (None: nothing in float8)."""
    speedups = (
        weakest_or_modelled(layer.provenance for layer in in_float8 if layer.provenance)
        if in_float8
        else None
    )
    if experts_float8:
        speedups = weakest_or_modelled(
            [*([speedups] if speedups else []), *(e.provenance for e in experts_float8 if e.provenance)]
        )
    return speedups


def expert_terms(experts_float8, experts_bf16, scaled: Callable[[float], float], in_step: str) -> list[Term]:
    """The routed experts' two terms (float8, bf16); none for a model without grouped experts."""
    if not experts_float8 and not experts_bf16:
        return []
    return [
        Term(
            "experts_float8",
            scaled(sum(e.float8_time_s for e in experts_float8)),
            # the weakest of the bf16 time's (always the grouped roofline: `predict.speedup.GroupTimes`) and
            # the speedups' provenance: a measured speedup over a modelled bf16 time gives modelled seconds
            weakest_or_modelled([MODELLED, *(e.provenance for e in experts_float8 if e.provenance)]),
            f"{len(experts_float8)} routed expert group(s) in float8 (rowwise grouped GEMMs): the grouped "
            "roofline's bf16 time / predicted speedup at balanced routing" + in_step,
        ),
        Term(
            "experts_bf16",
            scaled(sum(e.bf16_time_s for e in experts_bf16)),
            MODELLED,
            f"{len(experts_bf16)} routed expert group(s) in bf16: the grouped roofline's forward+backward "
            "time at balanced routing" + in_step,
        ),
    ]


__all__ = [
    "CALIBRATED",
    "MEASURED",
    "MODELLED",
    "OTHER_GEMMS",
    "PUBLISHED",
    "Term",
    "expert_terms",
    "linear_terms",
    "other_gemm_terms",
    "speedups_provenance",
    "weakest_or_modelled",
]
