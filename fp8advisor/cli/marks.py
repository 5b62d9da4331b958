"""How a speedup reads in `suggest`'s tables: its figure and interval, and the mark that sets modelled figures
apart, with its legend (shared by the report, `suggest_view`, and the step, `step_view`).

A speedup resting on modelled (roofline) or emulated figures carries MODELLED_MARK and a legend under its
table; measured, published and evidence figures carry none (an evidence figure carries its interval instead).
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text

from fp8advisor.cli.application import console

#: Marks a speedup resting on modelled (roofline) or emulated figures, not on measured or published ones.
MODELLED_MARK = "~"

LEGEND = (
    f"{MODELLED_MARK} modelled (roofline formula), not measured or published: measure with fp8advisor bench"
)


def speedup_text(value: float | None, interval: tuple[float, float] | None = None, digits: int = 2) -> str:
    """'1.14x', and its interval when it has one: '1.14x (1.02-1.30)'; '-' for none."""
    if value is None:
        return "-"
    text = f"{value:.{digits}f}x"
    return text if interval is None else f"{text} ({interval[0]:.{digits}f}-{interval[1]:.{digits}f})"


def seconds_text(value: float) -> str:
    """A step time as the step tables show it: '930.8 ms' below a second, '1.113 s' from one."""
    return f"{value * 1e3:.1f} ms" if value < 1 else f"{value:.3f} s"


def modelled(provenance: str | None) -> bool:
    """Figures neither measured, published nor chosen by the evidence (the roofline model, or emulated): the
    ones to set apart."""
    return provenance is not None and provenance not in ("measured", "published", "evidence")


def marked(text: str, provenance: str | None) -> str:
    """`text` with MODELLED_MARK when the figures it rests on are `modelled`."""
    return text + MODELLED_MARK if modelled(provenance) else text


def print_legend(provenances: Iterable[str | None]) -> bool:
    """The mark's legend, under a table whose figures (of these provenances) carry it; whether printed."""
    if any(modelled(provenance) for provenance in provenances):
        console.print(Text(LEGEND, style="dim"))
        return True
    return False


__all__ = ["LEGEND", "MODELLED_MARK", "marked", "modelled", "print_legend", "seconds_text", "speedup_text"]
