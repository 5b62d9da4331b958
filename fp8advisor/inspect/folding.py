"""Folding names that differ only in their block indices: how a table of 80 identical blocks reads.

`layers.12.attention.wq` has the block shape `layers.#.attention.wq`; items of one shape that read the same
fold into one row, `layers.{0..79}.attention.wq` (`fold_repeated`); a list of names reads folded the same way
(`folded_names`). The layer table, the advice and the config writers use it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any


def block_shape(fqn: str) -> str:
    """`layers.12.attention.wq` -> `layers.#.attention.wq`: the name with its block indices taken out."""
    return ".".join("#" if part.isdigit() else part for part in fqn.split("."))


def _ranges(numbers: Sequence[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0..2,5,7..8'."""
    runs: list[list[int]] = []
    for number in sorted(set(numbers)):
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ",".join(str(run[0]) if len(run) == 1 else f"{run[0]}..{run[-1]}" for run in runs)


@dataclass(frozen=True)
class Folded:
    """Items that differ only in their block indices and read the same: one table row.

    `pattern` writes the indices as ranges: `layers.{0..79}.attention.wq`.
    """

    pattern: str
    members: tuple[Any, ...]

    @property
    def first(self) -> Any:
        return self.members[0]

    @property
    def count(self) -> int:
        return len(self.members)

    @property
    def fqns(self) -> tuple[str, ...]:
        return tuple(member.fqn for member in self.members)


def fold_repeated(items: Iterable[Any], key: Callable[[Any], Hashable] = lambda item: ()) -> list[Folded]:
    """Fold items (anything with an `fqn`) whose names differ only in their block indices and whose `key` is
    equal into one row each, in order of first appearance; how 80 identical blocks read at a glance."""
    groups: dict[tuple, list[Any]] = {}
    for item in items:
        groups.setdefault((block_shape(item.fqn), key(item)), []).append(item)
    rows = []
    for (shape, _), members in groups.items():
        if len(members) == 1:
            rows.append(Folded(members[0].fqn, tuple(members)))
            continue
        indices = [[int(part) for part in member.fqn.split(".") if part.isdigit()] for member in members]
        words, position = [], 0
        for part in shape.split("."):
            if part != "#":
                words.append(part)
                continue
            values = [numbers[position] for numbers in indices]
            position += 1
            words.append(str(values[0]) if len(set(values)) == 1 else "{" + _ranges(values) + "}")
        rows.append(Folded(".".join(words), tuple(members)))
    return rows


@dataclass(frozen=True)
class _Named:
    fqn: str


def folded_names(fqns: Iterable[str], limit: int | None = None) -> str:
    """`layers.{0..31}.attention.wq, output`: FQNs with their repeated blocks folded (`fold_repeated`), at
    most `limit` patterns then "... (N more)" (None: all)."""
    rows = fold_repeated(_Named(fqn) for fqn in fqns)
    shown = rows if limit is None else rows[:limit]
    text = ", ".join(row.pattern for row in shown)
    return text + (f", ... ({len(rows) - len(shown)} more)" if len(shown) < len(rows) else "")
