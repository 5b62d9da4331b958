"""`fp8advisor layers TARGET`: every GEMM-bearing layer of a model with the (M, K, N) it really multiplies."""

from __future__ import annotations

from collections.abc import Iterable
from types import SimpleNamespace

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from fp8advisor.cli.application import command, console, state
from fp8advisor.inspect.folding import block_shape, fold_repeated, folded_names
from fp8advisor.inspect.records import ExpertGroup, GemmLayer, LayerStatus, ModelLayers
from fp8advisor.json_output import print_document
from fp8advisor.request import DEFAULT_BATCH, DEFAULT_SEQ
from fp8advisor.untrusted import visible

_STATUS_STYLE = {
    LayerStatus.TRACED: "green",
    LayerStatus.ASSUMED: "yellow",
    LayerStatus.NOT_CALLED: "magenta",
    LayerStatus.NOT_CONVERTIBLE: "red",
}


@command("layers", short_help="List every Linear of a model with the M, K, N it multiplies.")
def layers(
    target: str = typer.Argument(
        ...,
        help="model.py, model.py:NAME, 'model.py:NAME(key=value)', a Hugging Face config.json or its folder, "
        "a Hub id (org/name) or torchtitan:MODEL/FLAVOR.",
    ),
    batch: int = typer.Option(DEFAULT_BATCH, "--batch", "-b", min=1, help="Sequences per step on one GPU."),
    seq: int = typer.Option(DEFAULT_SEQ, "--seq", "-s", min=1, help="Tokens per sequence."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (every layer, never grouped)."),
    expand: bool = typer.Option(
        False, "--all", "--no-group", help="One row per layer instead of grouping repeated blocks."
    ),
) -> None:
    """List every Linear (and other GEMM) of TARGET: K, N, the M each call sees, and whether FP8 can take it.

    Built on the meta device (no memory; a file written for a GPU works), then run once on (batch, seq).

    Example: fp8advisor layers data/models/llama3.py:llama3_70b --batch 1 --seq 8192
    """
    from fp8advisor.inspect.layers import inspect_model

    inspected = inspect_model(target, batch=batch, seq=seq, debug=state.debug)
    if as_json:
        # Plain text, not console.print_json: highlighting 561 layers costs more than inspecting them.
        print_document(inspected.to_json())  # valid JSON (fp8advisor.json_output)
        return
    table, footnotes = render_table(inspected, group=not expand)
    console.print(table)
    for footnote in footnotes:
        console.print(footnote)
    console.print(summary_line(inspected))
    if inspected.expert_groups:
        experts, expert_notes = render_experts(inspected)
        console.print(experts)
        for note in expert_notes:
            console.print(Text(note), soft_wrap=False)
    if inspected.seq_warning:
        console.print(Text("warning: ", style="yellow") + Text(inspected.seq_warning), soft_wrap=True)
    for note in inspected.notes:
        console.print(Text(f"note: {note}", style="dim"))


def group_layers(layers: Iterable[GemmLayer]) -> list[tuple[str, GemmLayer, int]]:
    """Rows for the table: layers that differ only in their block indices, and in nothing else, merge into
    one row `layers.{0..79}.attention.wq` (name, the first layer, count), in order of first appearance."""

    def same(layer: GemmLayer) -> tuple:
        # Ties and aliases merge when they follow the same pattern (layers.N.x tied to layers.N.y).
        tied = block_shape(layer.tied_to) if layer.tied_to else None
        aliases = tuple(block_shape(alias) for alias in layer.aliases)
        return (layer.cls, layer.K, layer.N, layer.M_per_call, layer.status, layer.reason, tied, aliases)

    return [(row.pattern, row.first, row.count) for row in fold_repeated(layers, same)]


def _m_text(layer: GemmLayer) -> str:
    distinct = sorted(set(layer.M_per_call))
    if not distinct:
        return "-"
    return str(distinct[0]) if len(distinct) == 1 else f"{distinct[0]}..{distinct[-1]}"


def render_table(inspected: ModelLayers, *, group: bool = True) -> tuple[Table, list[str]]:
    """The table, and the footnotes its "see" column points to (reasons, ties, aliases; each written once)."""
    rows = group_layers(inspected.layers) if group else [(layer.fqn, layer, 1) for layer in inspected.layers]
    table = Table(
        title=f"{inspected.target}  ·  batch {inspected.batch} x seq {inspected.seq} = "
        f"{inspected.tokens} tokens",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=0,  # the box's one-space divider separates the columns: more room for the names
    )
    footnotes: list[str] = []
    marks = []
    for _, layer, _ in rows:
        row_marks = []
        for note in _row_notes(layer):
            if note not in footnotes:
                footnotes.append(note)
            row_marks.append(f"[{footnotes.index(note) + 1}]")
        marks.append("".join(row_marks))
    # Only the name columns fold on a narrow terminal: numbers and status never do. No min_width here: Rich
    # applies it after shrinking, and the overflow then crops the status column and its footnote marks.
    table.add_column("layer (FQN)", overflow="fold", ratio=1)
    table.add_column("class", overflow="fold", max_width=12)
    for header in ("K", "N", "M", "calls"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)  # with the footnote it points to: "not convertible [1]"
    for (name, layer, count), mark in zip(rows, marks, strict=True):
        # A merged row says how many layers it stands for next to their class: "Linear x80".
        cells = [name, f"{layer.cls} x{count}" if count > 1 else layer.cls]
        cells += [str(layer.K), str(layer.N), _m_text(layer), str(layer.calls)]
        status = Text(layer.status.value, style=_STATUS_STYLE[layer.status])
        cells.append(status + Text(f" {mark}") if mark else status)
        table.add_row(*cells)
    return table, [f"[{number}] {note}" for number, note in enumerate(footnotes, start=1)]


def _m_number(value: float | None) -> str:
    if value is None:
        return "unknown"
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def _expert_shape(group: ExpertGroup) -> tuple:
    """What two MoE layers must share to read as one row: all but their names and block indices."""
    return (
        group.cls,
        group.form,
        group.n_experts,
        group.top_k,
        block_shape(group.top_k_source),
        group.M_total,
        tuple((gemm.name, gemm.K, gemm.N) for gemm in group.gemms),
        group.router is None,
        len(group.shared),
        group.notes,
    )


def render_experts(inspected: ModelLayers) -> tuple[Table, list[str]]:
    """The routed experts, one row per group shape folded over blocks, and the lines that explain it (where
    top_k was read, how M per expert is counted, routers and shared experts, each group's notes)."""
    table = Table(
        title="routed experts: each group converts as one, not as nn.Linear",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=0,
    )
    table.add_column("experts (FQN)", overflow="fold", ratio=1)
    table.add_column("form", no_wrap=True)
    for header in ("E", "top_k", "M/expert", "M total"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("GEMMs K x N", no_wrap=True)
    lines: list[str] = []
    for row in fold_repeated(inspected.expert_groups, _expert_shape):
        group = row.first
        # One line per GEMM: a Text (a string's line breaks are shown as escapes by the console)
        gemms = Text("\n".join(f"{visible(gemm.name)} {gemm.K}x{gemm.N}" for gemm in group.gemms))
        table.add_row(
            row.pattern,
            group.form.value,
            str(group.n_experts),
            "unknown" if group.top_k is None else str(group.top_k),
            _m_number(group.M_per_expert),
            _m_number(group.M_total),
            gemms,
        )
        lines += _expert_lines(row.pattern, row.members)
    lines.append(
        f"M per expert = M total / E: the rows of each expert under balanced routing (tokens x top_k / E at "
        f"{inspected.tokens} tokens)"
    )
    return table, list(dict.fromkeys(lines))


def _expert_lines(pattern: str, groups: tuple[ExpertGroup, ...]) -> list[str]:
    first = groups[0]
    named = [SimpleNamespace(fqn=g.top_k_source) for g in groups]
    folded = fold_repeated(named) if first.top_k is not None else []
    where = folded[0].pattern if len(folded) == 1 else first.top_k_source
    lines = [f"{pattern}: top_k from {where}" if first.top_k is not None else f"{pattern}: top_k {where}"]
    routers = [g.router for g in groups if g.router]
    if routers:
        lines.append(f"  router {folded_names(routers)}: N = E, not one of the experts")
    shared = list(dict.fromkeys(fqn.rpartition(".")[0] or fqn for g in groups for fqn in g.shared))
    if shared:
        lines.append(f"  shared experts {folded_names(shared)}: dense Linears, in the table above")
    lines += [f"  {note}" for note in first.notes]
    return lines


def _row_notes(layer: GemmLayer) -> list[str]:
    notes = []
    if layer.reason:
        notes.append(layer.reason)
    if layer.tied_to:
        notes.append(f"weight tied to {layer.tied_to}")
    if layer.aliases:
        notes.append(f"also registered as {', '.join(layer.aliases)}")
    return notes


def summary_line(inspected: ModelLayers) -> Text:
    counts = {status: 0 for status in LayerStatus}
    for layer in inspected.layers:
        counts[layer.status] += 1
    linear = sum(1 for layer in inspected.layers if layer.is_linear)
    other = len(inspected.layers) - linear
    text = Text(f"{linear} nn.Linear" + (f" + {other} other GEMM parameter(s)" if other else "") + ": ")
    parts = [
        Text(f"{counts[status]} {status.value}", style=_STATUS_STYLE[status])
        for status in LayerStatus
        if counts[status]
    ]
    for i, part in enumerate(parts):
        text.append_text(part)
        if i < len(parts) - 1:
            text.append(", ")
    return text
