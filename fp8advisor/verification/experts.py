"""The routed-expert check of `verify`: grouped MoE experts (3-D weights), converted on the meta model as the
config's framework would, against the advice's decision per group (`Advice.experts`).

torchao and torchtitan 0.2 convert with torchao's own `quantize_(model, Float8TrainingOpConfig(),
filter_fn=<the file's filter>)`, which swaps a module's parameters to torchao's float8 weight wrapper;
torchtitan 0.3 converts every expert group or none (`ALL_OR_NONE_EXPERT_FORMATS`). A format that cannot
convert grouped experts keeps them in bf16. The experts are checked, not run: torchao's float8 grouped GEMM
is CUDA only (`EXPERTS_NOT_RUN`). Experts held as lists of nn.Linear are checked as Linear layers.
"""

from __future__ import annotations

from dataclasses import replace

from torch import nn

from fp8advisor.frameworks.config_record import FrameworkConfig
from fp8advisor.frameworks.expert_conversion import convert_experts, swapped_expert_modules
from fp8advisor.frameworks.formats import (
    ALL_OR_NONE_EXPERT_FORMATS,
    all_or_none_converts,
    expert_modules,
    file_can_convert,
    grouped_expert_groups,
)
from fp8advisor.verification.report import Difference, DifferenceKind, ExpertCheck, LayerCheck

#: A module the config's expert filter swaps (torchao's quantize_) that holds no expert group's weights.
NOT_AN_EXPERT_GROUP = (
    "the config's expert filter swaps its parameters to torchao's float8 weight wrapper (its matmuls run "
    "float8): not an expert group"
)


def mark_expert_wrapped(checks: list[LayerCheck], expert_differences: list[Difference]) -> list[LayerCheck]:
    """The Linear checks whose weight the expert conversion wrapped (a router or shared expert under a module
    the expert filter names), with that problem: the Layers table must not show them as bf16 and ok."""
    wrapped = {d.subject for d in expert_differences if d.detail == NOT_AN_EXPERT_GROUP}
    problem = f"{DifferenceKind.EXPERTS.value}: {NOT_AN_EXPERT_GROUP}"
    return [replace(c, problems=(*c.problems, problem)) if c.fqn in wrapped else c for c in checks]


def experts_summary(report) -> str:
    """`; the 2 expert groups: converted as advised, checked on the meta model (not run: ...)`: what the
    PASS/FAIL line says of the grouped experts (empty for a model without them): their conversion is checked
    on the meta model only (`EXPERTS_NOT_RUN`)."""
    checks = [check for check in report.experts if check.converted is not None]
    if not checks:
        return ""
    agree = all(not check.problems for check in checks)
    why = (
        "the step runs them in bf16"
        if report.recipe.is_mx
        else "torchao's float8 grouped GEMM needs a CUDA GPU"
    )
    return (
        f"; the {len(checks)} expert group(s): {'converted as advised' if agree else 'see the differences'}, "
        f"checked on the meta model (not run: {why})"
    )


#: Why the step runs the experts in bf16 (`fp8advisor.verification.execution`: the CPU, emulated).
EXPERTS_NOT_RUN = (
    "the MoE experts' float8 conversion was checked on the meta model (parameters swapped to torchao's "
    "Float8TrainingWeightWrapperTensor), not run: torchao's float8 grouped GEMM casts with Triton kernels "
    "and multiplies with torch._scaled_grouped_mm, CUDA only (no emulated path), so the step runs them"
    " in bf16"
)


#: The same for MXFP8 experts: torchao's EMULATED MX grouped GEMM runs on the CPU (bench --grouped
#: --emulate measures it), but verify's step keeps the experts in bf16 as for float8.
MX_EXPERTS_NOT_RUN = (
    "the MoE experts' MXFP8 conversion was checked on the meta model (parameters swapped to torchao's "
    "MXFP8TrainingWeightWrapperTensor, or torchtitan's MXFP8 GroupedExperts), not run: the step runs them "
    "in bf16 (their emulated MX grouped GEMM is checked against torchao's by the tests of bench --grouped)"
)


def check_experts(
    advice, config: FrameworkConfig, model: nn.Module
) -> tuple[tuple[ExpertCheck, ...], list[Difference], list[str]]:
    """The config's grouped experts against the advice (`Advice.experts`): converted on `model` (the meta
    model) as the framework would; one check per group, the differences, and notes. A format that cannot
    convert grouped experts keeps them in bf16: a note, no difference. Experts held as lists of nn.Linear are
    checked as Linear layers."""
    groups = grouped_expert_groups(advice.experts)
    if not groups:
        return (), [], []
    if config.converts_experts is None:
        advised = [group for group in groups if group.convert]
        said = (
            f"the advice converts {len(advised)} of the {len(groups)} expert groups"
            if advised
            else "so does the advice"
        )
        return (
            tuple(_expert_check(group, group.convert, None, ()) for group in groups),
            [],
            [
                f"{config.framework.value} cannot convert grouped MoE experts: they stay bf16 with this file "
                f"({said}); --format torchtitan-py or torchao can hold that decision"
            ],
        )
    all_or_none = config.framework in ALL_OR_NONE_EXPERT_FORMATS
    together = all_or_none_converts(groups, advice.min_speedup) if all_or_none else None
    swapped = convert_experts(model, config, groups)
    checks, differences = [], []
    for group in groups:
        expected = together if together is not None else group.convert
        if expected and not file_can_convert(group, config.framework):
            expected = False  # its module holds other parameters: the file cannot name it alone (emit's note)
        modules = expert_modules(group)
        done = [module in swapped for module in modules]
        converted = all(done)
        problems = []
        if any(done) and not converted:
            missing = [m for m, d in zip(modules, done, strict=True) if not d]
            problems.append(f"only part of the group converts: {', '.join(missing)} stay bf16")
        elif converted != expected:
            problems.append(_expert_mismatch(group, expected, all_or_none))
        checks.append(_expert_check(group, expected, converted, tuple(problems)))
        differences += [Difference(DifferenceKind.EXPERTS, group.group, problem) for problem in problems]
    known = {module for group in groups for module in expert_modules(group)}
    for module in sorted(swapped - known):
        differences.append(
            Difference(
                DifferenceKind.EXPERTS,
                module,
                NOT_AN_EXPERT_GROUP,
            )
        )
    notes = [MX_EXPERTS_NOT_RUN if config.recipe.is_mx else EXPERTS_NOT_RUN] if swapped else []
    if all_or_none and len({group.convert for group in groups}) > 1:
        notes.append(
            f"{config.framework.value} converts every expert group or none: checked against that choice "
            f"({'all' if together else 'none'}, by the groups' total predicted speedup)"
        )
    return tuple(checks), differences, notes


def _expert_check(group, expected: bool, converted: bool | None, problems: tuple[str, ...]) -> ExpertCheck:
    return ExpertCheck(
        group=group.group,
        modules=expert_modules(group),
        advised=group.convert,
        expected=expected,
        converted=converted,
        predicted_speedup=group.predicted_speedup,
        provenance=group.provenance,
        problems=problems,
    )


def _expert_mismatch(group, expected: bool, all_or_none: bool) -> str:
    figure = (
        "no prediction" if group.predicted_speedup is None else f"predicted {group.predicted_speedup:.2f}x"
    )
    if group.provenance:
        figure += f", {group.provenance}"
    whose = "the all-or-none choice" if all_or_none and expected != group.convert else "the advice"
    if expected:
        return f"{whose} converts it ({figure}), the config keeps it in bf16"
    return f"the config converts it, {whose} keeps it in bf16 ({figure})"


__all__ = [
    "EXPERTS_NOT_RUN",
    "MX_EXPERTS_NOT_RUN",
    "NOT_AN_EXPERT_GROUP",
    "check_experts",
    "convert_experts",
    "experts_summary",
    "mark_expert_wrapped",
    "swapped_expert_modules",
]
