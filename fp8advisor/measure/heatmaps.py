"""Speedup heatmaps of benchmark results: the tables behind them and the PNG (matplotlib, imported lazily).

Layout: one block per recipe; in each, one panel per M with K as rows and N as columns, each cell the speedup
of the float8 recipe over bf16 at that (M, K, N). The terminal rendering of the same tables lives in
`fp8advisor.cli.bench_view`.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fp8advisor.errors import AdvisorError
from fp8advisor.files import write_atomic
from fp8advisor.measure.results import Run
from fp8advisor.measure.speedups import Speedup, pair_with_baseline
from fp8advisor.recipes import ALL_RECIPES


@dataclass(frozen=True)
class HeatmapPanel:
    """Speedups at one M: `cells[i][j]` is at K = Ks[i], N = Ns[j], None where not measured."""

    recipe: str
    M: int
    Ks: tuple[int, ...]
    Ns: tuple[int, ...]
    cells: tuple[tuple[float | None, ...], ...]


def heatmap_panels(speedups: Sequence[Speedup]) -> dict[str, list[HeatmapPanel]]:
    """Panels per recipe (torchao's order: tensorwise, rowwise, rowwise_with_gw_hp), each sorted by M."""
    by_recipe: dict[str, dict[int, dict[tuple[int, int], float]]] = {}
    for speedup in speedups:
        by_recipe.setdefault(speedup.recipe, {}).setdefault(speedup.M, {})[(speedup.K, speedup.N)] = (
            speedup.speedup
        )
    order = {recipe.value: index for index, recipe in enumerate(ALL_RECIPES)}
    panels: dict[str, list[HeatmapPanel]] = {}
    for recipe, by_M in sorted(by_recipe.items(), key=lambda item: (order.get(item[0], len(order)), item[0])):
        panels[recipe] = []
        for M in sorted(by_M):
            cells = by_M[M]
            Ks = tuple(sorted({K for K, _ in cells}))
            Ns = tuple(sorted({N for _, N in cells}))
            rows = tuple(tuple(cells.get((K, N)) for N in Ns) for K in Ks)
            panels[recipe].append(HeatmapPanel(recipe=recipe, M=M, Ks=Ks, Ns=Ns, cells=rows))
    return panels


def format_speedup(speedup: float) -> str:
    """Two decimals, or two significant digits below 0.01 (so that a tiny speedup never reads 0.00)."""
    return f"{speedup:.2f}" if speedup >= 0.01 else f"{speedup:.1e}"


def _size_label(value: int) -> str:
    return f"{value // 1024}k" if value >= 1024 and value % 1024 == 0 else str(value)


def speedup_heatmaps_png(runs: Sequence[Run], path: Path | str, *, title: str | None = None) -> Path:
    """Write the speedup heatmaps of `runs` to a PNG at `path` and return it.

    Raises AdvisorError when matplotlib is missing (install the `plot` extra) or when there is nothing to
    plot.
    """
    plt = pyplot("no heatmap PNG")
    from matplotlib.colors import LogNorm

    speedups = pair_with_baseline(runs)
    panels = heatmap_panels(speedups)
    if not panels:
        raise AdvisorError("no float8 point has a bf16 baseline to compare with: nothing to plot")
    emulated = any(run.emulated for run in runs)
    basis = {speedup.basis for speedup in speedups}
    recipes = list(panels)
    columns = max(len(recipe_panels) for recipe_panels in panels.values())
    figure, axes = plt.subplots(
        len(recipes),
        columns,
        figsize=(3.2 * columns + 1.5, 3.0 * len(recipes) + 1.0),
        squeeze=False,
        layout="constrained",
    )
    values = [
        cell for recipe_panels in panels.values() for p in recipe_panels for row in p.cells for cell in row
    ]
    finite = [value for value in values if value]
    spread = max(max(finite), 1 / min(finite), 1.25)  # symmetric around 1 on a log scale
    norm = LogNorm(vmin=1 / spread, vmax=spread)
    image = None
    for row_index, recipe in enumerate(recipes):
        for column_index in range(columns):
            axis = axes[row_index][column_index]
            if column_index >= len(panels[recipe]):
                axis.axis("off")
                continue
            panel = panels[recipe][column_index]
            grid = [[cell if cell is not None else float("nan") for cell in row] for row in panel.cells]
            image = axis.imshow(grid, cmap="RdYlGn", norm=norm, origin="upper", aspect="auto")
            axis.set_xticks(range(len(panel.Ns)), [_size_label(N) for N in panel.Ns], fontsize=7)
            axis.set_yticks(range(len(panel.Ks)), [_size_label(K) for K in panel.Ks], fontsize=7)
            axis.set_xlabel("N", fontsize=8)
            axis.set_ylabel("K", fontsize=8)
            axis.set_title(f"{recipe}  M={panel.M}", fontsize=9)
            for i, row in enumerate(panel.cells):
                for j, cell in enumerate(row):
                    if cell is not None:
                        axis.text(j, i, format_speedup(cell), ha="center", va="center", fontsize=7)
    if image is not None:
        figure.colorbar(image, ax=axes, shrink=0.8, label="speedup over bf16 (x)")
    heading = [title or "float8 speedup over bf16 (bf16 time / float8 time)", ", ".join(sorted(basis))]
    if emulated:
        heading.append("EMULATED on the CPU: not a GPU measurement")
    figure.suptitle("\n".join(heading), fontsize=9)
    return write_png(figure, path)


def pyplot(without: str, error: type[AdvisorError] = AdvisorError):
    """matplotlib's pyplot on its file-only backend (never a window); `error` ("matplotlib is not
    installed: WITHOUT") when the `plot` extra is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise error(
            f"matplotlib is not installed: {without}", hint="pip install 'fp8advisor[plot]'"
        ) from None
    return plt


def write_png(figure, path: Path | str, software: str | None = None) -> Path:
    """`figure` as a PNG at `path`, written atomically, with `software` in its Software text field; the
    figure is closed."""
    import matplotlib.pyplot as plt

    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=110, metadata={"Software": software} if software else None)
    plt.close(figure)
    return write_atomic(path, image.getvalue())


__all__ = [
    "HeatmapPanel",
    "format_speedup",
    "heatmap_panels",
    "pyplot",
    "speedup_heatmaps_png",
    "write_png",
]
