"""`trace --png`: the step's breakdown as stacked bars (one per trace), and for two traces each shape group's
bf16 time against its float8 GEMMs and casts (matplotlib, imported here only, as `bench` draws heatmaps)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fp8advisor.errors import TraceError
from fp8advisor.measure.heatmaps import pyplot, write_png
from fp8advisor.traces.analysis import mean_over_steps
from fp8advisor.traces.comparison import PARTS, TraceComparison, step_parts

#: The PNG's Software field: how `-o`'s guard knows a picture this tool drew (`is_our_picture`).
SOFTWARE = "fp8advisor trace"


def is_our_picture(path: Path) -> bool:
    """Whether `path` is a PNG `draw` wrote (its Software text chunk)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError:
        return False
    return head.startswith(b"\x89PNG") and SOFTWARE.encode() in head


def _mean_parts(analyses) -> dict[str, float]:
    return {part: mean_over_steps(analyses, lambda step, part=part: step_parts(step)[part]) for part in PARTS}


def draw(path: str | Path, sides: Sequence[Sequence], comparison: TraceComparison | None) -> Path:
    """Write the picture to `path` (PNG); TraceError when matplotlib is missing."""
    plt = pyplot("no picture", TraceError)
    panels = 2 if comparison is not None else 1
    figure, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.5), squeeze=False)
    _breakdown(axes[0][0], sides)
    if comparison is not None:
        _groups(axes[0][1], comparison)
    figure.tight_layout()
    return write_png(figure, path, SOFTWARE)


def _breakdown(axis, sides: Sequence[Sequence]) -> None:
    labels = ["bf16", "float8"] if len(sides) == 2 else ["trace"]
    bottoms = [0.0] * len(sides)
    for part in PARTS:
        heights = [_mean_parts(side)[part] * 1e3 for side in sides]
        if any(heights):
            axis.bar(labels, heights, bottom=bottoms, label=part)
            bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    axis.set_ylabel("ms per step (device)")
    axis.set_title("where the step's time went")
    axis.legend(fontsize=8)


def _groups(axis, comparison: TraceComparison) -> None:
    groups = [group for group in comparison.groups if group.converted]
    names = [group.leaf_names for group in groups]
    positions = range(len(groups))
    axis.bar([p - 0.2 for p in positions], [g.bf16_s * 1e3 for g in groups], width=0.4, label="bf16 GEMMs")
    axis.bar(
        [p + 0.2 for p in positions], [g.float8_gemm_s * 1e3 for g in groups], width=0.4, label="float8 GEMMs"
    )
    kept = [g.float8_bf16_gemm_s * 1e3 for g in groups]
    axis.bar(
        [p + 0.2 for p in positions],
        kept,
        width=0.4,
        bottom=[g.float8_gemm_s * 1e3 for g in groups],
        label="GEMMs kept bf16",
    )
    axis.bar(
        [p + 0.2 for p in positions],
        [(g.cast_s + g.fused_cast_s) * 1e3 for g in groups],
        width=0.4,
        bottom=[(g.float8_gemm_s + g.float8_bf16_gemm_s) * 1e3 for g in groups],
        label="casts feeding them",
    )
    for position, group in zip(positions, groups, strict=True):
        axis.text(position, group.bf16_s * 1e3, f"{group.speedup:.2f}x", ha="center", va="bottom", fontsize=8)
    axis.set_xticks(list(positions), names, rotation=20, fontsize=7)
    axis.set_ylabel("ms per step (device)")
    axis.set_title(f"per shape group, measured ({comparison.recipe})")
    axis.legend(fontsize=8)


__all__ = ["SOFTWARE", "draw", "is_our_picture"]
