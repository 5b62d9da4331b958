"""Break-even thresholds: per recipe and per measured M, which (K, N) pay (speedup > 1), as the simplest rule
on (K, N) that says so, beside torchao's auto filter (`fp8advisor.frameworks.filters`).

`fit` prints this table (`threshold_table`) for people; profiles do not store it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from fp8advisor.predict.figures import SpeedupPoint
from fp8advisor.recipes import Recipe


@dataclass(frozen=True)
class KNRule:
    """A rule on (K, N) that says "convert": `K >= min_K and N >= min_N`, or `K * N >= min_KN`."""

    kind: str  # "and" or "product"
    min_K: int = 0
    min_N: int = 0
    min_KN: int = 0

    def converts(self, K: int, N: int) -> bool:
        if self.kind == "product":
            return K * N >= self.min_KN
        return K >= self.min_K and N >= self.min_N

    def text(self, smallest_K: int = 0, smallest_N: int = 0) -> str:
        """People's words, dropping conditions every measured K or N meets."""
        if self == NEVER:
            return "never"
        if self.kind == "product":
            return f"K*N >= {self.min_KN}" if self.min_KN else "always"
        words = [
            f"K >= {self.min_K}" if self.min_K > smallest_K else "",
            f"N >= {self.min_N}" if self.min_N > smallest_N else "",
        ]
        words = [w for w in words if w]
        return " and ".join(words) or "always"


NEVER = KNRule("product", min_KN=2**62)


@dataclass(frozen=True)
class MThreshold:
    """For one M of one recipe: which measured (K, N) pay (speedup > 1) and the simplest rule that says so."""

    M: int
    cells: int
    paying: int
    rule: KNRule
    rule_text: str
    rule_agreement: int  # cells where the rule's decision equals "speedup > 1"
    torchao_agreement: int | None  # the same for torchao's auto filter (None: it has no rule for this recipe)

    def to_json(self) -> dict:
        return {
            "M": self.M,
            "cells": self.cells,
            "paying": self.paying,
            "rule": self.rule_text,
            "rule_agreement": self.rule_agreement,
            "torchao_auto_filter_agreement": self.torchao_agreement,
        }


def _best_rule(cells: Sequence[tuple[int, int, bool]]) -> KNRule:
    """The rule that agrees with the most cells; on ties the "and" form, then the smaller thresholds."""
    Ks = sorted({K for K, _, _ in cells})
    Ns = sorted({N for _, N, _ in cells})
    candidates = [KNRule("and", min_K=a, min_N=b) for a in Ks for b in Ns]
    candidates += [KNRule("product", min_KN=c) for c in sorted({K * N for K, N, _ in cells})] + [NEVER]

    def agreement(rule: KNRule) -> int:
        return sum(rule.converts(K, N) == pays for K, N, pays in cells)

    # max() keeps the first of equal scores: the "and" rules come first, in increasing thresholds
    return max(candidates, key=agreement)


def threshold_table(points: Sequence[SpeedupPoint], recipe: Recipe | str) -> list[MThreshold]:
    """Per measured M: the (K, N) rule that best separates paying cells, and torchao's auto filter."""
    from fp8advisor.frameworks.filters import auto_filter_keeps

    recipe = Recipe(recipe)
    by_M: dict[int, list[tuple[int, int, bool]]] = defaultdict(list)
    for point in points:
        by_M[point.M].append((point.K, point.N, point.speedup > 1.0))
    table = []
    for M in sorted(by_M):
        cells = by_M[M]
        rule = _best_rule(cells)
        try:
            torchao = sum((not auto_filter_keeps(recipe, K, N)) == pays for K, N, pays in cells)
        except NotImplementedError:
            torchao = None
        table.append(
            MThreshold(
                M=M,
                cells=len(cells),
                paying=sum(pays for _, _, pays in cells),
                rule=rule,
                rule_text=rule.text(min(K for K, _, _ in cells), min(N for _, N, _ in cells)),
                rule_agreement=sum(rule.converts(K, N) == pays for K, N, pays in cells),
                torchao_agreement=torchao,
            )
        )
    return table


__all__ = [
    "NEVER",
    "KNRule",
    "MThreshold",
    "threshold_table",
]
