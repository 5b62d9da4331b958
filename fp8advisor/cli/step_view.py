"""What `fp8advisor suggest` shows of the training step: each strategy's predicted step, time and throughput,
with the interval of its speedup where the Linear figures carry one, what the uncertain layers put at stake,
where the step goes, and the break-even (`fp8advisor.advice.step_comparison.StepReport`)."""

from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from fp8advisor.advice.records import Advice
from fp8advisor.cli.application import console
from fp8advisor.cli.marks import marked, print_legend, seconds_text


def print_step(step, advice: Advice) -> None:
    """The predicted training step: each strategy's step time and throughput, where the step goes, and the
    break-even point."""
    if step is None:
        console.print(
            Text("training step: not predicted (the model was inspected without an op census)", style="dim")
        )
        return
    _print_step_title(step)
    console.print(_step_table(step))
    print_legend(prediction.speedup_provenance for prediction in step.predictions)
    if step.intervals:
        console.print(
            Text(
                "interval: the step with every float8 layer at the low, then the high end of its interval",
                style="dim",
            )
        )
    if step.stake is not None:
        console.print(Text(_stake_line(step.stake), style="yellow"), soft_wrap=True)
    console.print(_terms_table(step))
    console.print(Text(_break_even_line(step, advice), style="bold"), soft_wrap=True)


def _print_step_title(step) -> None:
    """What the step is predicted for: the GPU, the parallelism and the calibration."""
    config = step.config
    console.print(
        Text("Predicted training step", style="bold")
        + Text(
            f" ({step.gpu}, {config.world_size} GPU(s){_parallel_words(config)}, --ac {config.ac.value}"
            + (f", --grad-accum {config.grad_accum}" if config.grad_accum > 1 else "")
            + (", float8 all-gather" if config.float8_all_gather else "")
            + f"; in-step efficiency {step.calibration.in_step_efficiency:.3f} ("
            + step.calibration.fitted_to.split(":")[0]
            + "), a speedup depends on it only where communication shows)"
        ),
        soft_wrap=True,
    )


def _parallel_words(config) -> str:
    """`: FSDP 32 x TP 8` and the like: every degree above 1 (FSDP first), empty for plain FSDP."""
    degrees = [
        ("HSDP replicas", config.dp_replicate),
        ("TP", config.tp),
        ("CP", config.cp),
        ("PP", config.pp),
    ]
    shown = [f"{name} {degree}" for name, degree in degrees if degree > 1]
    if not shown:
        return ""
    fsdp = [f"FSDP {config.dp_shard}"] if config.dp_shard > 1 else []
    return ": " + " x ".join([*fsdp, *shown]) + (", async TP" if config.async_tp else "")


def _step_table(step) -> Table:
    """Each strategy's float8 layers, step time, throughput and step speedup over bf16."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    columns = ("strategy", "float8 layers", "step", "tokens/s/GPU", "speedup")
    for name in columns + (("interval",) if step.intervals else ()):
        table.add_column(
            name,
            justify="left" if name == "strategy" else "right",
            no_wrap=name != "strategy",
            overflow="fold",
            min_width=len(name) if name != "strategy" else None,
        )
    for prediction in step.predictions:
        bf16 = prediction.name == "bf16"
        speedup = "-" if bf16 else f"{step.speedup(prediction.name):.3f}x"
        cells = [
            prediction.label,
            str(prediction.converted),
            seconds_text(prediction.step_s),
            f"{prediction.tokens_per_s:,.0f}",
            speedup if bf16 else marked(speedup, prediction.speedup_provenance),
        ]
        if step.intervals:
            span = step.intervals.get(prediction.name)
            cells.append("-" if span is None else f"{span[0]:.2f}-{span[1]:.2f}")
        table.add_row(*cells)
    return table


def _stake_line(stake) -> str:
    """What the uncertain layers put at stake in the advice's step, and how to settle it."""
    from fp8advisor.inspect.folding import folded_names

    change = stake.with_bf16_s / stake.with_float8_s - 1
    return (
        f"uncertain: {len(stake.layers)} layer(s) ({folded_names(stake.layers)}): the step takes "
        f"{seconds_text(stake.with_float8_s)} with them in float8, {seconds_text(stake.with_bf16_s)} in bf16 "
        f"({change:+.1%}); `fp8advisor bench` on your GPU, or `bench --model` for the block in context, "
        "settles it"
    )


def _terms_table(step) -> Table:
    """The step's terms (those not zero), in bf16 and with the advice, each with its share of the step."""
    advice_step = step.prediction("advice")
    terms = Table(
        title="Where the step goes (all terms in --json)", title_justify="left", box=box.SIMPLE_HEAD
    )
    for name in ("term", "bf16", "share", "this advice", "share", "figures"):
        terms.add_column(name, justify="left" if name in ("term", "figures") else "right")
    for base, mine in zip(step.baseline.terms, advice_step.terms, strict=True):
        if base.seconds == 0 and mine.seconds == 0:
            continue
        terms.add_row(
            base.name.replace("_", " "),
            seconds_text(base.seconds),
            f"{base.seconds / step.baseline.step_s:.0%}",
            seconds_text(mine.seconds),
            f"{mine.seconds / advice_step.step_s:.0%}",
            mine.provenance if mine.seconds else base.provenance,
        )
    return terms


def _break_even_line(step, advice: Advice) -> str:
    found = step.break_even
    if found is None:
        return ""
    recipe, target = advice.recipe.value, f"{found.target:.2f}x step speedup"
    if found.tokens is None:
        return f"break-even: {recipe} never reaches {target} up to {found.searched_up_to:,} tokens/GPU step"
    where = f"batch {found.batch} at seq {found.seq}; {found.speedup:.4f}x there"
    if found.speedup_below is not None:
        where += f", {found.speedup_below:.4f}x at {found.tokens - 16:,}"
    return f"break-even: {recipe} reaches {target} from {found.tokens:,} tokens per GPU step ({where})"


__all__ = ["print_step"]
