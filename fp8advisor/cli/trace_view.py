"""How `fp8advisor trace` shows what it read: a step's breakdown, the layers' check, the two traces compared,
and the same as JSON."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.table import Table
from rich.text import Text

from fp8advisor.cli.application import console, err_console
from fp8advisor.traces.analysis import mean_over_steps
from fp8advisor.traces.kernel_rules import Kind

#: The idle share of a traced step above which `trace` says the step speedup is not the untraced one.
IDLE_WARNING = 0.05


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def print_analysis(trace: str, analyses: Sequence) -> None:
    """One trace: where it comes from, its warnings, and the mean step's time by kind (over steps, ranks)."""
    first = analyses[0]
    ranks = f", {len(analyses)} ranks" if len(analyses) > 1 else ""
    devices = ", ".join(sorted({name for a in analyses for name in a.device_names})) or "no GPU named"
    steps = ", ".join(str(number) for number in first.step_numbers if number is not None) or "the whole trace"
    console.print(Text(f"{trace}: {devices}{ranks}; steps {steps}", style="bold"), soft_wrap=True)
    for warning in dict.fromkeys(w for a in analyses for w in a.warnings):
        err_console.print(Text("warning: ", style="yellow") + Text(warning), soft_wrap=True)
    unit = "device ms" if first.on_device else "CPU ms (no device records)"
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column, justify in (("kind", "left"), (unit, "right"), ("share", "right"), ("count", "right")):
        table.add_column(column, justify=justify, no_wrap=True)
    table.add_column("its largest kernel", overflow="ellipsis", no_wrap=True, max_width=40)
    step_s = mean_over_steps(analyses, lambda step: step.step_s)
    for kind in Kind:
        seconds = mean_over_steps(analyses, lambda step, kind=kind: step.seconds.get(kind, 0.0))
        if not seconds:
            continue
        count = mean_over_steps(analyses, lambda step, kind=kind: step.counts.get(kind, 0))
        top = next(iter(first.steps[0].top_kernels.get(kind, ())), None) if first.steps else None
        table.add_row(
            str(kind),
            _ms(seconds),
            f"{seconds / step_s:.0%}" if step_s else "-",
            f"{count:.0f}",
            (top[0] if top else ""),
        )
    console.print(table)
    busy = mean_over_steps(analyses, lambda step: step.busy_s)
    exposed = mean_over_steps(analyses, lambda step: step.communication_exposed_s)
    share = mean_over_steps(analyses, lambda step: step.float8_gemm_share)
    words = f"step {_ms(step_s)} ms"
    if first.on_device:
        words += f", busy {_ms(busy)} ms, idle {_ms(step_s - busy)} ms"
        words += f", communication not overlapped {_ms(exposed)} ms"
    gemms = mean_over_steps(analyses, lambda step: len(step.gemms))
    float8 = mean_over_steps(analyses, lambda step: sum(g.kind.is_float8_gemm for g in step.gemms))
    words += f"; {float8:.0f} of {gemms:.0f} GEMMs ran in float8"
    if first.on_device:
        words += f" ({share:.0%} of GEMM time)"
    console.print(words, soft_wrap=True)
    if not first.has_shapes:
        err_console.print(
            Text("note: ", style="yellow")
            + Text("no input shapes: GEMMs are not tied to layers (record_shapes=True)"),
            soft_wrap=True,
        )


def analysis_json(analysis) -> dict:
    return {
        "path": analysis.path,
        "rank": analysis.rank,
        "devices": list(analysis.device_names),
        "on_device": analysis.on_device,
        "has_shapes": analysis.has_shapes,
        "warnings": list(analysis.warnings),
        "steps": [
            {
                "number": step.number,
                "step_s": step.step_s,
                "busy_s": step.busy_s,
                "idle_s": step.idle_s,
                "communication_exposed_s": step.communication_exposed_s,
                "seconds": {str(kind): seconds for kind, seconds in step.seconds.items()},
                "counts": {str(kind): count for kind, count in step.counts.items()},
                "gemms": len(step.gemms),
                "float8_gemms": sum(g.kind.is_float8_gemm for g in step.gemms),
                "float8_gemm_share": step.float8_gemm_share,
            }
            for step in analysis.steps
        ],
    }


def print_layers(traced, runs: Sequence, config: str | None) -> None:
    """Each layer's GEMMs in the trace (folded over repeated blocks), and the verdict when there is a config;
    what differs, layer by layer, under the table."""
    from fp8advisor.inspect.folding import fold_repeated

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in ["layer", "M x K x N", "ran"] + (["config", "check"] if config else []):
        table.add_column(column, overflow="fold")
    rows = fold_repeated(runs, lambda run: (run.shape, run.groups, run.ran, run.expected_float8, run.ok))
    for row in rows:
        run = row.members[0]
        cells = [row.pattern, _shape_text(run), run.ran]
        if config:
            check = Text("ok", style="green") if run.ok else Text("DIFFERS", style="bold red")
            cells += ["float8" if run.expected_float8 else "bf16", check]
        table.add_row(*cells)
    console.print(table)
    if not config:
        return
    bad = [run for run in runs if not run.ok]
    for run in bad:
        console.print(Text(f"{run.fqn}: ", style="red") + Text(run.detail), soft_wrap=True)
    if bad:
        console.print(Text(f"FAIL: {len(bad)} layer(s) did not run as {config} says", style="bold red"))
    else:
        console.print(
            Text(f"PASS: float8 ran exactly where {config} converts ({len(runs)} layers)", style="bold green")
        )
    if any(run.how == "group" for run in runs):
        err_console.print(
            Text("note: ", style="yellow")
            + Text(
                "the trace does not tell forward from backward GEMMs: the layers of one shape group are "
                "judged together, by the group's float8 share, not one by one"
            ),
            soft_wrap=True,
        )
    for note in getattr(traced.config, "notes", ()):
        err_console.print(Text("note: ", style="yellow") + Text(note), soft_wrap=True)


def _shape_text(run) -> str:
    """M x K x N; for a 3-D expert weight the groups its grouped GEMMs split M into; for experts held as
    nn.Linear, each expert's own routed rows."""
    M, K, N = run.shape
    text = f"{M}x{K}x{N}" if M else f"routed x {K}x{N}"
    return f"{text} in {run.groups} groups" if run.groups > 1 else text


def run_json(run) -> dict:
    return {
        "fqn": run.fqn,
        "shape": list(run.shape),
        "groups": run.groups,
        "config_float8": run.expected_float8,
        "float8_gemms_per_step": run.float8_gemms,
        "bf16_gemms_per_step": run.bf16_gemms,
        "matched_by": run.how,
        "ran": run.ran,
        "ok": run.ok,
        "detail": run.detail,
    }


def print_comparison(comparison, calibration) -> None:
    """Group by group, the measured speedup; the step's difference by part; the calibrated step model."""
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        title="measured in the step, per shape group (ms per step)",
        caption="bf16: the bf16 run's GEMMs; fp8, kept, casts: the float8 run's float8 GEMMs, GEMMs left in "
        "bf16, and the casts feeding its float8 GEMMs with their share of the fused casts' net cost",
    )
    named = any(group.layers for group in comparison.groups)
    table.add_column("layers" if named else "shapes", overflow="ellipsis", no_wrap=True, max_width=30)
    for column in ("bf16", "fp8", "kept", "casts", "speedup"):
        table.add_column(column, justify="right", no_wrap=True)
    for group in comparison.groups:
        label = group.leaf_names
        speedup = f"{group.speedup:.2f}x" if group.converted else "bf16"
        table.add_row(
            label,
            _ms(group.bf16_s),
            _ms(group.float8_gemm_s),
            _ms(group.float8_bf16_gemm_s),
            _ms(group.cast_s + group.fused_cast_s),
            speedup,
        )
    console.print(table)
    parts = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title="the step, bf16 against float8")
    for column in ("part", "bf16 ms", "float8 ms", "difference ms"):
        parts.add_column(column, justify="left" if column == "part" else "right")
    for part, (bf16, float8) in comparison.parts.items():
        parts.add_row(part, _ms(bf16), _ms(float8), f"{(float8 - bf16) * 1e3:+.2f}")
    parts.add_row(
        "step",
        _ms(comparison.bf16_step_s),
        _ms(comparison.float8_step_s),
        f"{(comparison.float8_step_s - comparison.bf16_step_s) * 1e3:+.2f}",
    )
    console.print(parts)
    console.print(f"measured step speedup {comparison.step_speedup:.3f}x ({comparison.recipe})")
    idle = max(
        comparison.parts["idle"][0] / comparison.bf16_step_s,
        comparison.parts["idle"][1] / comparison.float8_step_s,
    )
    if idle > IDLE_WARNING:
        err_console.print(
            Text("note: ", style="yellow")
            + Text(
                f"the GPU idled {idle:.0%} of a traced step: the CPU did not keep it fed (the profiler's own "
                "overhead adds to that), so the traced step speedup is not the untraced one; the shape "
                "groups' GEMM and cast times are the kernels' own and stand"
            ),
            soft_wrap=True,
        )
    if calibration is not None:
        _print_calibration(calibration)


def _print_calibration(calibration) -> None:
    factors = ", ".join(f"{part} x{factor:.2f}" for part, factor in calibration.factors.items())
    console.print(
        f"step model calibrated to the bf16 trace: measured / predicted {factors}; in-step efficiency "
        f"{calibration.in_step_efficiency:.3f} -> {calibration.calibrated_efficiency:.3f}",
        soft_wrap=True,
    )
    measured = calibration.measured_speedup
    console.print(
        f"predicted step speedup {calibration.speedup_before:.3f}x before, "
        f"{calibration.speedup_after:.3f}x after"
        + (f"; measured {measured:.3f}x" if measured is not None else ""),
        soft_wrap=True,
    )


def comparison_json(comparison, calibration) -> dict:
    from fp8advisor.traces.comparison import measured_record

    record = measured_record(comparison, None)
    record["calibration"] = None
    if calibration is not None:
        record["calibration"] = {
            "factors": calibration.factors,
            "in_step_efficiency": calibration.in_step_efficiency,
            "calibrated_in_step_efficiency": calibration.calibrated_efficiency,
            "predicted_step_speedup_before": calibration.speedup_before,
            "predicted_step_speedup_after": calibration.speedup_after,
            "measured_step_speedup": calibration.measured_speedup,
        }
    return record


__all__ = [
    "analysis_json",
    "comparison_json",
    "print_analysis",
    "print_comparison",
    "print_layers",
    "run_json",
]
