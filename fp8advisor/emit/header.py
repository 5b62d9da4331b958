"""The comment header every file but JSON starts with, and the notes shared by every format.

The header: fp8advisor's version, the model target, batch and seq (and the other settings that are not at
their default: parallel degrees, expert imbalance, FSDP float8 all-gather), recipe and profile as the user
typed them, what the file converts (or why it leaves FP8 off), the command that regenerates or checks it
(`fp8advisor.request.SuggestRequest.command`, with what was chosen automatically pinned), and last the
framework versions the file is for and was checked with (`frameworks.formats.FORMAT_VERSIONS`' line).
Nothing depends on the machine or the time (the versions are the table's, never the installed ones), so the
same inputs give byte-identical files anywhere. A target whose name holds a control character is refused:
the check command must name it exactly, and a comment line cannot hold it.
"""

from __future__ import annotations

from fp8advisor import __version__
from fp8advisor.advice.records import Advice
from fp8advisor.emit.experts import TORCHTITAN_0_2_EXPERTS_TORCHAO, converted_expert_modules
from fp8advisor.errors import TargetError, quote
from fp8advisor.files import GENERATED_MARK
from fp8advisor.frameworks.formats import FOR_PREFIX, FORMAT_VERSIONS, ConfigFormat
from fp8advisor.frameworks.header import CHECK_PREFIX
from fp8advisor.inspect import titan
from fp8advisor.predict.selection import NO_GROUPED_PROFILE
from fp8advisor.request import SuggestRequest


def header_lines(
    advice: Advice, request: SuggestRequest, fmt: ConfigFormat, what: str | None = None
) -> list[str]:
    """The comment header, without comment markers. `what`: the line saying what the file converts, for a
    format that is not a filter list (megatron)."""
    profile = advice.profile_name
    if request.profile is not None and request.profile != advice.profile_name:
        profile += f" (--profile {request.profile})"
    recipe = advice.recipe.value + (" (chosen by --recipe auto)" if request.recipe == "auto" else "")
    lines = [
        f"{GENERATED_MARK} {__version__} (fp8advisor suggest). Do not edit: regenerate it.",
        f"model: {request.target}  batch: {request.batch}  seq: {request.seq}"
        + (f"  tensor parallel: {request.tensor_parallel}" if request.tensor_parallel != 1 else "")
        + (f"  context parallel: {request.context_parallel}" if request.context_parallel != 1 else "")
        + (f"  expert parallel: {request.expert_parallel}" if request.expert_parallel != 1 else "")
        + (f"  expert imbalance: {request.expert_imbalance:g}" if request.expert_imbalance != 1 else "")
        + ("  FSDP float8 all-gather: on" if request.float8_all_gather else ""),
        f"recipe: {recipe}  profile: {profile} ({advice.profile_provenance})  "
        f"min speedup: {advice.min_speedup:g}"
        + (f"  grouped profile: {_grouped_pin(advice)}" if _grouped_pin(advice) else ""),
        what if what is not None else what_it_converts(advice, fmt),
    ]
    if advice.in_context is not None:
        lines.append(
            f"decided in context: {len(advice.profile_decisions)} layers, from {advice.in_context.source}"
        )
    pinned = pinned_command(request, advice, fmt)
    if not pinned.isprintable():
        raise TargetError(
            f"cannot write the check command of the file's header: it would name {quote(request.target)}, "
            "which holds a line break or another control character (a comment cannot hold it as it is)",
            hint="rename the file, folder or argument so that the target is printable text",
        )
    lines.append(f"{CHECK_PREFIX}{pinned} --check <this file>")
    lines.append(versions_line(advice, request, fmt))
    return lines


def versions_line(advice: Advice, request: SuggestRequest, fmt: ConfigFormat) -> str:
    """The header's "for:" line: the format's versions (`FORMAT_VERSIONS`), narrowed where this file needs
    more than the format does: torchtitan 0.2.x's grouped-expert converter needs an older torchao than the
    one its Linear converter was checked with; a filter list read from a torchtitan registry model holds that
    torchtitan's names (0.3: `check_format_target` refuses the other formats that would misread them)."""
    line = FORMAT_VERSIONS[fmt].line()
    if fmt is ConfigFormat.TORCHTITAN_TOML and converted_expert_modules(advice, fmt):
        return f"{line}; its grouped-expert converter {TORCHTITAN_0_2_EXPERTS_TORCHAO}"
    if fmt is ConfigFormat.FILTER and titan.is_registry_target(request.target):
        return (
            FORMAT_VERSIONS[ConfigFormat.TORCHTITAN_PY]
            .line()
            .replace(FOR_PREFIX, f"{FOR_PREFIX}the filter_fqns of ", 1)
            + ": the names of torchtitan 0.3's own model (torchtitan 0.2.x and NeMo AutoModel have others)"
        )
    return line


def what_it_converts(advice: Advice, fmt: ConfigFormat) -> str:
    """The header line saying what the file of `fmt` converts, or why it leaves FP8 off (not megatron)."""
    if not advice.convert_fqns:
        modules = converted_expert_modules(advice, fmt)
        if modules:
            return (
                f"no Linear layer converts ({fp8_off_reason(advice).removesuffix('; train in bf16')}); "
                f"the MoE experts of {len(modules)} module(s) do"
            )
        return f"FP8 left off: {fp8_off_reason(advice)}"
    fl = advice.filter_list
    if fmt is ConfigFormat.TORCHTITAN_PY and advice.recipe.is_mx:  # an inclusion list (fqns)
        from fp8advisor.emit.mx import what_it_converts as mx_what

        return mx_what(advice)
    if fmt in (ConfigFormat.TORCHAO, ConfigFormat.ACCELERATE):
        return f"converts exactly the {len(advice.convert_fqns)} advised Linear layers (exact module filter)"
    if fl.exact:
        return f"filter_fqns simulated: converts exactly the {len(advice.convert_fqns)} advised Linear layers"
    return (
        f"filter_fqns simulated: converts {len(fl.converted)} of the {len(advice.convert_fqns)} "
        "advised layers; "
        f"no substring list can be exact, {len(fl.demoted)} kept in bf16 (see fp8advisor suggest)"
    )


def fp8_off_reason(advice: Advice) -> str:
    """Why the advice converts nothing, in one clause for the header of a file that leaves FP8 off."""
    timed = [layer for layer in advice.layers if layer.counts_in_linear_time]
    if not timed:
        return "nothing is worth converting: no Linear float8 could convert runs in the forward"
    best = max(timed, key=lambda layer: layer.predicted_speedup or 0.0)
    return (
        f"nothing is worth converting: no layer is predicted to reach {advice.min_speedup:.2f}x with "
        f"{advice.recipe.value} (best: {best.fqn} at {best.predicted_speedup:.2f}x); train in bf16"
    )


def pinned_command(
    request: SuggestRequest, advice: Advice, fmt: ConfigFormat, output: str | None = None
) -> str:
    """`request.command` with what was chosen automatically (the profile, the grouped profile, in-context
    results) pinned."""
    source = None if advice.in_context is None else str(advice.in_context.source)
    return request.command(
        fmt.value,
        output,
        chosen_profile=advice.profile_name,
        chosen_measured=source,
        chosen_grouped_profile=_grouped_pin(advice),
    )


def _grouped_pin(advice: Advice) -> str | None:
    """What the check command pins with --grouped-profile for a model with grouped experts: the profile their
    figures came from when it is not the pinned --profile, "none" when the grouped roofline predicted them (so
    that a grouped profile found on the CI machine does not change the advice); None otherwise."""
    if not advice.grouped_experts or advice.grouped_profile == advice.profile_name:
        return None
    return advice.grouped_profile if advice.grouped_profile is not None else NO_GROUPED_PROFILE


#: What the file of a format that leaves FP8 off says about it (with its framework's words around it).
FP8_OFF_NOTE = "FP8 off: nothing is worth converting (see the header), so nothing here enables it."


__all__ = [
    "versions_line",
    "FP8_OFF_NOTE",
    "fp8_off_reason",
    "header_lines",
    "pinned_command",
    "what_it_converts",
]
