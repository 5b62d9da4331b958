"""The shortest exact filter list: which `filter_fqns` make a substring framework convert exactly the advised
layers.

`shortest_exact_filter` finds the shortest list of substrings (among dot-boundary pieces of the layers to keep
in bf16) such that the substring frameworks (`fp8advisor.frameworks.filters`) convert exactly the advised
layers, by an exact search (`fp8advisor.frameworks.filter_cover`) that says when it could not finish
(`FilterList.shortest`); the result is verified by `filters.converted_by_framework` every time, never trusted
by construction. A layer to keep in bf16 whose FQN is a substring of a layer to convert is a `Conflict`: no
list can separate them, and both stay in bf16.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from fp8advisor.frameworks.filter_cover import shortest_cover
from fp8advisor.frameworks.filters import Framework, converted_by_framework, included_by_fqns, parse_framework
from fp8advisor.inspect.records import GemmLayer
from fp8advisor.recipes import Recipe, dims_divisible_by_16, dims_supported


@dataclass(frozen=True)
class Conflict:
    """A layer to keep in bf16 whose FQN is a substring of a layer to convert: no substring list can tell them
    apart.

    The safe choice keeps `converted_fqn` in bf16 as well.
    """

    bf16_fqn: str  # advised bf16 (e.g. "blocks.0.ff")
    converted_fqn: str  # advised float8, contains bf16_fqn (e.g. "blocks.0.ff2")
    #: An inclusion list's conflict (`shortest_inclusion_filter`): the advised FQN is inside the bf16 one
    inclusion: bool = False

    def describe(self) -> str:
        if self.inclusion:
            return (
                f"{self.converted_fqn!r} (advised) is a substring of {self.bf16_fqn!r} (bf16): any fqns "
                "entry that names the first names the second too"
            )
        return (
            f"{self.bf16_fqn!r} (bf16) is a substring of {self.converted_fqn!r} (float8): "
            "any filter entry that "
            f"keeps the first in bf16 keeps the second too"
        )

    def to_json(self) -> dict:
        return {"bf16_fqn": self.bf16_fqn, "converted_fqn": self.converted_fqn}


@dataclass(frozen=True)
class FilterList:
    """A `filter_fqns` list (layers to keep in bf16) and what it provably does under a substring framework.

    `converted` is always the simulated result of `entries` (verified, not assumed). `conflicts` names the
    layers no substring list can separate, and `demoted` the advised layers the list keeps in bf16 as the
    safe choice; with none demoted the list is `exact`. `shortest` is True when no list of candidate entries
    (see `shortest_exact_filter`) with fewer entries does the same; False when the search and its solver
    fallback both stopped at their limits before a proof: the list is then still exact (or the safe subset),
    only perhaps not the shortest.
    """

    entries: tuple[str, ...]
    framework: Framework
    converted: frozenset[str]
    conflicts: tuple[Conflict, ...] = ()
    demoted: frozenset[str] = field(default=frozenset())
    shortest: bool = True

    @property
    def exact(self) -> bool:
        """The simulated converted set equals the advised set."""
        return not self.demoted

    def to_json(self) -> dict:
        return {
            "framework": self.framework.value,
            "entries": list(self.entries),
            "exact": self.exact,
            "shortest": self.shortest,
            "converted": sorted(self.converted),
            "conflicts": [conflict.to_json() for conflict in self.conflicts],
            "demoted": sorted(self.demoted),
        }


class FilterSimulationError(AssertionError):
    """The filter list does not do what it was built to do: a bug in fp8advisor, never the user's fault."""


def shortest_exact_filter(
    layers: Sequence[GemmLayer],
    advised: Iterable[str],
    framework: Framework | str = Framework.TORCHTITAN,
    *,
    search_budget: int | None = None,
) -> FilterList:
    """The shortest list of FQN substrings such that `framework` converts exactly the `advised` layers.

    Candidate entries are dot-boundary pieces of each layer to keep in bf16 that match no layer to convert:
    its suffixes (`output`, `attention.wk`, the whole FQN) and its pieces ending at a dot (`layers.0.`,
    `attention.`), never a piece starting with a number (`filter_cover._candidates`). Among lists of
    candidates that keep every such layer in bf16, an exact search (`filter_cover.shortest_cover`: reductions,
    then branch and bound) returns one with the fewest entries; among those, the most readable (the smallest
    sum of `filter_cover._readability_rank`: a named suffix such as `attention.wk` before a piece ending at a
    dot, before a bare last name), then the fewest characters. The entries come out sorted. Layers whose K or
    N is not divisible by 16 need no entry: the framework skips them itself.

    The branch and bound proves real models' lists in milliseconds (Llama-70B with any advice: a few hundred
    small steps); a group of layers that spends `search_budget` (default `filter_cover.SEARCH_BUDGET`) goes to
    an integer-program solver. Only if that stops at its node limit too is the result the shortest list found
    (never longer than a greedy cover), and it says so with `shortest=False`. Shortest means among candidate
    entries: an arbitrary substring (`tention.w`) is never considered.

    An exact list exists unless a layer to keep in bf16 is a substring of an advised one (`blocks.0.ff` and
    `blocks.0.ff2`); then both stay in bf16 (the safe choice), repeated until no conflict is left, and the
    result says so in `conflicts` and `demoted`. The result is simulated with `converted_by_framework` and an
    inconsistency raises `FilterSimulationError`.
    """
    framework = parse_framework(framework)
    if not framework.uses_substring_filter or framework is Framework.TORCHAO_AUTO:
        raise ValueError(f"{framework.value} takes no filter_fqns list that fp8advisor writes")
    linear = [layer for layer in layers if layer.is_linear]
    eligible = {layer.fqn for layer in linear if dims_divisible_by_16(layer.K, layer.N)}
    advised_set = set(advised)
    unknown = advised_set - {layer.fqn for layer in linear}
    if unknown:
        raise ValueError(f"advised layers that are not nn.Linear of this model: {sorted(unknown)}")
    not_eligible = advised_set - eligible
    if not_eligible:
        raise ValueError(
            f"advised layers {framework.value} never converts (K or N not divisible by 16): "
            f"{sorted(not_eligible)}"
        )

    # Safe choice for conflicts: an advised layer that contains a bf16 layer's FQN goes to bf16 too; repeat,
    # since the demoted layer may itself be a substring of another advised one.
    target = set(advised_set)
    conflicts: list[Conflict] = []
    # A module shared by two parents is converted under each of its names (`GemmLayer.aliases`): all count.
    names_of = {layer.fqn: (layer.fqn, *layer.aliases) for layer in linear}
    names_text = {fqn: "\n".join(names) for fqn, names in names_of.items()}  # no FQN holds a newline
    while True:
        keep_bf16 = eligible - target
        new = sorted(
            {(bf16, conv) for bf16 in keep_bf16 for conv in target if bf16 in names_text[conv]},
            key=lambda pair: (pair[1], pair[0]),
        )
        if not new:
            break
        for bf16, conv in new:
            conflicts.append(Conflict(bf16, conv))
            target.discard(conv)
    demoted = advised_set - target

    # An entry must match no name of a layer to convert, its aliases included.
    convert_names = sorted(name for fqn in target for name in names_of[fqn])
    entries, shortest = shortest_cover(sorted(eligible - target), convert_names, search_budget)
    converted = converted_by_framework(linear, entries, framework)
    if converted != target:
        raise FilterSimulationError(
            f"filter {entries} converts {sorted(converted ^ target)} differently from the advice "
            f"under {framework}"
        )
    return FilterList(
        entries=tuple(entries),
        framework=framework,
        converted=frozenset(converted),
        conflicts=tuple(sorted(set(conflicts), key=lambda c: (c.bf16_fqn, c.converted_fqn))),
        demoted=frozenset(demoted),
        shortest=shortest,
    )


def shortest_inclusion_filter(
    layers: Sequence[GemmLayer],
    advised: Iterable[str],
    recipe: Recipe | str = Recipe.MXFP8_RCEIL,
    *,
    search_budget: int | None = None,
) -> FilterList:
    """The shortest list of FQN substrings that makes torchtitan 0.3's MX converter
    (`MXFP8LinearConverter.Config(fqns=[...])`: convert a Linear whose FQN contains an entry,
    `filters.included_by_fqns`) convert exactly the `advised` layers: the inclusion counterpart of
    `shortest_exact_filter`, solved by the same exact cover (`filter_cover.shortest_cover`) with the roles
    swapped: the candidates are dot-boundary pieces of the advised FQNs (`layers.1.`, never `layers.1`, which
    would also name `layers.10`), and no entry may match a name of any other Linear (torchtitan's MX
    converter checks no K or N: a layer the recipe cannot run must be left out by the list itself).

    An advised layer whose FQN is a substring of another Linear's (`blocks.0.ff` advised, `blocks.0.ff2` not)
    cannot be named alone: it stays in bf16 (`Conflict`, `demoted`), the safe choice. The list is never empty
    when something converts (an empty list converts every Linear); the result is simulated with
    `included_by_fqns` and an inconsistency raises `FilterSimulationError`. `FilterList.entries` are then the
    layers to CONVERT, not to keep in bf16."""
    linear = [layer for layer in layers if layer.is_linear]
    advised_set = set(advised)
    unknown = advised_set - {layer.fqn for layer in linear}
    if unknown:
        raise ValueError(f"advised layers that are not nn.Linear of this model: {sorted(unknown)}")
    unsupported = sorted(
        layer.fqn
        for layer in linear
        if layer.fqn in advised_set and not dims_supported(recipe, layer.K, layer.N)
    )
    if unsupported:
        raise ValueError(f"advised layers {recipe} cannot run (K or N not a multiple of 32): {unsupported}")
    names_of = {layer.fqn: (layer.fqn, *layer.aliases) for layer in linear}
    target = set(advised_set)
    conflicts: list[Conflict] = []
    while True:  # an advised FQN inside another Linear's name: no entry names it alone; demote, repeat
        others = [name for fqn in names_of if fqn not in target for name in names_of[fqn]]
        new = sorted({(fqn, other) for fqn in target for other in others if fqn in other and fqn != other})
        if not new:
            break
        for fqn, other in new:
            conflicts.append(Conflict(bf16_fqn=other, converted_fqn=fqn, inclusion=True))
            target.discard(fqn)
    others = sorted(name for fqn in names_of if fqn not in target for name in names_of[fqn])
    entries, shortest = shortest_cover(sorted(target), others, search_budget)
    converted = included_by_fqns(linear, entries) if entries else set()
    if converted != target:
        raise FilterSimulationError(
            f"fqns {entries} convert {sorted(converted ^ target)} differently from the advice "
            "(torchtitan 0.3 MX)"
        )
    return FilterList(
        entries=tuple(entries),
        framework=Framework.TORCHTITAN_PY,
        converted=frozenset(converted),
        conflicts=tuple(sorted(set(conflicts), key=lambda c: (c.bf16_fqn, c.converted_fqn))),
        demoted=frozenset(advised_set - target),
        shortest=shortest,
    )


__all__ = [
    "Conflict",
    "FilterList",
    "FilterSimulationError",
    "shortest_exact_filter",
    "shortest_inclusion_filter",
]
