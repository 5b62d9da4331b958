"""What `fp8advisor suggest --current FILE` shows: the current config's float8 layers and predicted training
step beside bf16's and the advice's, and what changing the config to the advice gives
(`fp8advisor.verification.current.CurrentStep`).

`print_current` is the report's section (stdout, after the advice's step); `print_current_brief` the same in
a few lines on stderr, where stdout holds the config (`--format` without `-o`) or `--check` answers.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from fp8advisor.cli.application import console, err_console
from fp8advisor.cli.marks import seconds_text
from fp8advisor.inspect import folding

#: The most folded name patterns a list shows before "... (N more)".
MAX_PATTERNS = 8


def folded_names(fqns: Sequence[str], limit: int = MAX_PATTERNS) -> str:
    """`layers.{0..31}.attention.wq, output`: FQNs with their repeated blocks folded, at most `limit`
    patterns (`inspect.folding.folded_names`)."""
    return folding.folded_names(fqns, limit)


def _milliseconds(value: float) -> str:
    """A step time in ms to four digits, so that the change line's two steps compare at a glance."""
    return f"{value * 1e3:,.4g} ms"


def change_line(current_step) -> str | None:
    """`changing your config to the advice: step 1,300.0 ms -> 1,262.3 ms, +3.0% tokens/s` (None: no
    step)."""
    gain = current_step.gain
    if gain is None:
        return None
    step_from, step_to = current_step.step.step_s, current_step.advice.step_s
    if gain == 0 and not current_step.only_in_advice and not current_step.only_in_current:
        return f"your config trains the advice's layers: step {_milliseconds(step_from)}, nothing to change"
    return (
        f"changing your config to the advice: step {_milliseconds(step_from)} -> {_milliseconds(step_to)}, "
        f"{gain:+.1%} tokens/s"
    )


def _what(current_step) -> str:
    """`224 Linear layer(s) (rowwise, from the file) in float8` (in MXFP8 for an MXFP8 recipe), or FP8 off."""
    current = current_step.current
    if not current.in_float8:
        return "FP8 off: every layer in bf16" if not current.enabled else "nothing in float8"
    parts = []
    if current.converted:
        parts.append(
            f"{len(current.converted)} Linear layer(s) ({current.recipe.value}, from {current.recipe_from})"
        )
    mx = current.recipe is not None and current.recipe.is_mx
    if current.expert_groups:
        grouped = current.recipe.value if mx else "rowwise"
        parts.append(f"{len(current.expert_groups)} expert group(s) ({grouped} grouped GEMMs)")
    return f"{' and '.join(parts)} in {'MXFP8' if mx else 'float8'}"


def _figures(current_step) -> str:
    """`step 1.300 s, 6,301 tokens/s/GPU, 1.025x over bf16` of the current config."""
    step = current_step.step
    if step is None:
        return f"step {current_step.why_not}"
    span = current_step.interval
    return (
        f"step {seconds_text(step.step_s)}, {step.tokens_per_s:,.0f} tokens/s/GPU, "
        f"{current_step.speedup:.3f}x over bf16" + ("" if span is None else f" ({span[0]:.2f}-{span[1]:.2f})")
    )


def print_current(current_step) -> None:
    """The report's section: the current config's float8 layers, its step beside bf16's and the advice's,
    and what changing to the advice gives."""
    current = current_step.current
    console.print(
        Text(f"Your config: {current.path}", style="bold")
        + Text(f" ({current.format.value}): {_what(current_step)}"),
        soft_wrap=True,
    )
    console.print(Text(f"  read as: {current.conversion}", style="dim"), soft_wrap=True)
    if current.converted:
        console.print(f"  float8: {folded_names(current.converted)}", soft_wrap=True, markup=False)
    if current.expert_groups:
        console.print(f"  expert groups in float8: {', '.join(current.expert_groups)}", markup=False)
    if current_step.step is None:
        console.print(Text(f"your config's step: {current_step.why_not}", style="dim"))
    else:
        console.print(_table(current_step))
        console.print(Text(change_line(current_step) or "", style="bold"), soft_wrap=True)
    _print_differences(console, current_step)
    for note in (*current.notes, *current_step.notes):
        console.print(Text("  note: ", style="dim") + Text(note), soft_wrap=True)


def print_current_brief(current_step) -> None:
    """The same in a few lines on stderr (stdout holds the config, or --check answers); nothing for None."""
    if current_step is None:
        return
    current = current_step.current
    err_console.print(
        Text("your config ", style="bold")
        + Text(f"{current.path} ({current.format.value}): {_what(current_step)}; {_figures(current_step)}"),
        soft_wrap=True,
    )
    line = change_line(current_step)
    if line is not None:
        advice_speedup = current_step.advice_speedup
        err_console.print(Text(f"{line} (the advice: {advice_speedup:.3f}x over bf16)"), soft_wrap=True)
    _print_differences(err_console, current_step)


def _print_differences(out: Console, current_step) -> None:
    """The layers and expert groups the advice trains otherwise than the current config."""
    words = (
        ("the advice converts in addition", current_step.only_in_advice),
        ("the advice keeps in bf16", current_step.only_in_current),
    )
    for lead, fqns in words:
        if fqns:
            out.print(f"  {lead}: {folded_names(fqns)}", soft_wrap=True, markup=False)
    advised, kept = set(current_step.advice_expert_groups), set(current_step.current.expert_groups)
    for lead, groups in (("converts in addition", advised - kept), ("keeps in bf16", kept - advised)):
        if groups:
            named = ", ".join(sorted(groups))
            out.print(f"  the advice {lead} the expert groups: {named}", soft_wrap=True, markup=False)


def _table(current_step) -> Table:
    """bf16, the current config and the advice: float8 layers, step, tokens/s/GPU, speedup over bf16."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name in ("step of", "float8 layers", "step", "tokens/s/GPU", "speedup"):
        table.add_column(name, justify="left" if name == "step of" else "right", no_wrap=True)
    bf16 = current_step.bf16
    for prediction in (bf16, current_step.step, current_step.advice):
        speedup = "-" if prediction is bf16 else f"{prediction.speedup_over(bf16):.3f}x"
        if prediction is current_step.step and current_step.interval is not None:
            speedup += " ({:.2f}-{:.2f})".format(*current_step.interval)
        table.add_row(
            prediction.label,
            str(prediction.converted),
            seconds_text(prediction.step_s),
            f"{prediction.tokens_per_s:,.0f}",
            speedup,
        )
    return table


__all__ = ["MAX_PATTERNS", "change_line", "folded_names", "print_current", "print_current_brief"]
