"""Which Linear layers each training framework converts to float8, and the shortest exact filter list.

Every framework below visits each `nn.Linear` of the model (including Linear layers the forward never calls)
and asks one question per FQN. The rules here are the frameworks' own, as pure functions on names and shapes,
so that a filter list can be checked by simulation without building the model:

- `torchtitan` (0.2.x, `torchtitan/components/quantization/utils.py::module_filter_fn`), `torchtitan-0.3` (the
  same function on a `Linear.Config`: `in_features`/`out_features`) and `nemo-automodel`
  (`nemo_automodel/components/quantization/fp8.py::_module_filter_fn`): convert unless an entry of
  `filter_fqns` is a **substring** of the FQN, or K or N is not divisible by 16.
- `torchao-auto` (`torchao.float8.float8_linear_utils._auto_filter_for_recipe`): the same substring and
  divisible-by-16 rules, plus per-recipe size thresholds on (K, N) (`auto_filter_keeps`); M is never looked
  at.
- `torchao` and `accelerate`: the user's own `module_filter_fn(module, fqn)`; the configs fp8advisor writes
  for them hold the exact set of FQNs to convert, so the rule is set membership.

`shortest_exact_filter` finds the shortest list of substrings (among dot-boundary pieces of the layers to keep
in bf16) such that the substring frameworks convert exactly the advised layers, by an exact search that says
when it could not finish (`FilterList.shortest`); the result is verified by `converted_by_framework` every
time, never trusted by construction.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from fp8advisor.errors import parse_choice
from fp8advisor.frameworks.formats import SUBSTRING_FORMATS, ConfigFormat
from fp8advisor.inspect.layers import GemmLayer
from fp8advisor.recipes import Recipe, dims_divisible_by_16

#: The frameworks simulated here are the config formats of `fp8advisor.frameworks.formats`: one enum for the
#: writer, the reader and the simulation (`Framework.TORCHTITAN` is `ConfigFormat.TORCHTITAN_TOML`,
#: `TORCHTITAN_0_3` is `TORCHTITAN_PY`).
Framework = ConfigFormat
#: Frameworks whose `filter_fqns` entries keep a layer in bf16 when the entry is a substring of its FQN.
SUBSTRING_FRAMEWORKS = SUBSTRING_FORMATS


def parse_framework(name: str | Framework) -> Framework:
    """`Framework` from its name; a clear error listing the valid names otherwise."""
    return parse_choice(Framework, name, "framework")


def matches_filter(fqn: str, filter_fqns: Iterable[str]) -> bool:
    """True when an entry of `filter_fqns` is a substring of `fqn` (torchtitan, NeMo, torchao auto)."""
    return any(entry in fqn for entry in filter_fqns)


def entries_matching_nothing(filter_fqns: Iterable[str], fqns: Iterable[str]) -> list[str]:
    """The entries of `filter_fqns` that are a substring of none of `fqns`: an entry that keeps nothing."""
    fqns = list(fqns)
    return [entry for entry in filter_fqns if not any(entry in fqn for fqn in fqns)]


def auto_filter_keeps(recipe: Recipe | str, K: int, N: int) -> bool:
    """The size thresholds of torchao's `_auto_filter_for_recipe` (torchao 0.18): True = keep bf16.

    A pure copy, pinned to torchao's own function by a test: simulation, tests, and the advice's comparison
    when the installed torchao is the release it was read from (`compat.auto_filter_copy_matches_installed`;
    any other release: torchao's real function).
    rowwise_with_gw_hp raises NotImplementedError in torchao, and here too.
    """
    recipe = Recipe(recipe)
    if recipe is Recipe.TENSORWISE:
        return K <= 4096 and N <= 1024
    if recipe is Recipe.ROWWISE:
        return N <= 2048 or K <= 1024 or (N <= 4096 and K <= 2048)
    raise NotImplementedError(f"torchao's auto filter does not support recipe {recipe.value}")


def converted_by_framework(
    layers: Sequence[GemmLayer],
    filter_fqns: Iterable[str] | None,
    framework: Framework | str,
    *,
    recipe: Recipe | str | None = None,
    convert_fqns: Iterable[str] | None = None,
) -> set[str]:
    """The FQNs the framework converts to float8, simulated with its own rule.

    `layers`: every layer of `ModelLayers.layers` (only `is_linear` ones are visited, as conversion does,
    whether or not the forward calls them). `filter_fqns`: the substring list (substring frameworks).
    `convert_fqns`: the exact set a `torchao`/`accelerate` module filter accepts. `recipe`: needed by
    `torchao-auto` only.
    """
    framework = parse_framework(framework)
    linear = [layer for layer in layers if layer.is_linear]
    if framework in (Framework.TORCHAO, Framework.ACCELERATE):
        if convert_fqns is None:
            raise ValueError(f"{framework.value} converts an exact set: pass convert_fqns")
        wanted = set(convert_fqns)
        return {layer.fqn for layer in linear if layer.fqn in wanted}
    entries = list(filter_fqns or ())
    converted = set()
    for layer in linear:
        # A module shared by two parents is asked about under each name (`GemmLayer.aliases`): it runs in
        # float8 everywhere only when no name is filtered out.
        names = (layer.fqn, *layer.aliases)
        if any(matches_filter(name, entries) for name in names) or not dims_divisible_by_16(layer.K, layer.N):
            continue
        if framework is Framework.TORCHAO_AUTO:
            if recipe is None:
                raise ValueError("torchao-auto needs the recipe")
            if auto_filter_keeps(recipe, layer.K, layer.N):
                continue
        converted.add(layer.fqn)
    return converted


@dataclass(frozen=True)
class Conflict:
    """A layer to keep in bf16 whose FQN is a substring of a layer to convert: no substring list can tell them
    apart.

    The safe choice keeps `converted_fqn` in bf16 as well.
    """

    bf16_fqn: str  # advised bf16 (e.g. "blocks.0.ff")
    converted_fqn: str  # advised float8, contains bf16_fqn (e.g. "blocks.0.ff2")

    def describe(self) -> str:
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


#: Work after which the shortest-list search hands a group of layers to an integer-program solver
#: (scipy.optimize.milp): branch-and-bound steps, each counted as the number of layers of its group (what its
#: bound visits), about 0.2 s of search. Real models need a small fraction of it (Llama-70B: a few hundred
#: steps on groups of a handful of layers, whatever the advice).
SEARCH_BUDGET = 1_000_000
#: Branch-and-bound nodes the solver may use; only when it stops short of a proof is `FilterList.shortest`
#: False. Counts, not times: the same inputs give the same list on every machine.
SOLVER_NODE_LIMIT = 10_000


class FilterSimulationError(AssertionError):
    """The filter list does not do what it was built to do: a bug in fp8advisor, never the user's fault."""


def _candidates(fqn: str) -> list[str]:
    """The filter entries that may stand for `fqn`: dot-boundary pieces of it.

    'layers.0.attention.wk' -> suffixes 'wk', 'attention.wk', 'layers.0.attention.wk'; and pieces ending at a
    dot 'layers.', 'layers.0.', 'layers.0.attention.', 'attention.'. A piece that starts with a number
    ('0.attention.wk') is left out: it would also match 'layers.10.attention.wk' and reads as if it named one
    layer; a piece that stops before the last name keeps its trailing dot so that 'layers.1.' cannot read as
    'layers.1*'.
    """
    parts = fqn.split(".")
    pieces = []
    for start in range(len(parts)):
        if start > 0 and parts[start].isdigit():
            continue
        for stop in range(start + 1, len(parts) + 1):
            piece = ".".join(parts[start:stop])
            pieces.append(piece if stop == len(parts) else piece + ".")
    return pieces


def _readability_rank(entry: str, whole_fqns: set[str]) -> int:
    """Between entries that keep the same layers in bf16: 0 for a whole FQN or a suffix of two or more
    segments ('attention.wk'), 1 for a piece ending at a dot ('layers.0.'), 2 for a bare last name ('wk').

    `attention.wk` says which module it means (as torchtitan's own examples write it); `attn.` or a bare `wk`
    would also catch layers added later (`attn.extra`, `wkv`).
    """
    if entry in whole_fqns or ("." in entry and not entry.endswith(".")):
        return 0
    return 1 if entry.endswith(".") else 2


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
    `attention.`), never a piece starting with a number (`_candidates`). Among lists of candidates that keep
    every such layer in bf16, an exact search (`_shortest_cover`: reductions, then branch and bound) returns
    one with the fewest entries; among those, the most readable (the smallest sum of `_readability_rank`: a
    named suffix such as `attention.wk` before a piece ending at a dot, before a bare last name), then the
    fewest characters. The entries come out sorted. Layers whose K or N is not divisible by 16 need no entry:
    the framework skips them itself.

    The branch and bound proves real models' lists in milliseconds (Llama-70B with any advice: a few
    hundred small steps); a group of layers that spends `search_budget` (default `SEARCH_BUDGET`) goes to an
    integer-program solver. Only if that stops at its node limit too is the result the shortest list found
    (never longer than a greedy cover), and it says so with `shortest=False`. Shortest means among
    candidate entries: an arbitrary substring (`tention.w`) is never considered.

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
    entries, shortest = _shortest_cover(sorted(eligible - target), convert_names, search_budget)
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


class _FqnIndex:
    """Which FQNs of a list hold a dot-boundary piece (`_candidates`) as a substring, without scanning them.

    An occurrence of 'a.b.c' in an FQN has its inner segment ('b') equal to a whole segment; its first segment
    ('a') ends a segment and its last ('c') starts one. When neither end piece is a proper part of any
    segment of the list, the occurrence is aligned on whole segments and a dictionary of every run of whole
    segments answers; otherwise (a bare 'wk' in 'wkv', 'attention.w1' in 'attention.w13') one search of the
    joined text does (no FQN holds a newline).
    """

    def __init__(self, fqns: Sequence[str]):
        self.text = "\n".join(fqns)
        self.starts = [0]
        for fqn in fqns[:-1]:
            self.starts.append(self.starts[-1] + len(fqn) + 1)
        self.aligned: dict[str, int] = {}
        segments: set[str] = set()
        for index, fqn in enumerate(fqns):
            parts = fqn.split(".")
            segments.update(parts)
            for start in range(len(parts)):
                for stop in range(start + 1, len(parts) + 1):
                    run = ".".join(parts[start:stop])
                    for piece in (run, run + ".") if stop < len(parts) else (run,):
                        self.aligned[piece] = self.aligned.get(piece, 0) | 1 << index
        self.proper_parts = {
            segment[a:b]
            for segment in segments
            for a in range(len(segment))
            for b in range(a + 1, len(segment) + 1)
            if b - a < len(segment)
        }

    def containing(self, piece: str) -> int:
        """Bitmask of the FQNs (by index) that hold `piece` as a substring."""
        parts = piece.removesuffix(".").split(".")
        last_may_be_cut = not piece.endswith(".") and parts[-1] in self.proper_parts
        if parts[0] not in self.proper_parts and not last_may_be_cut:
            return self.aligned.get(piece, 0)
        mask, at = 0, self.text.find(piece)
        while at != -1:
            index = bisect.bisect_right(self.starts, at) - 1
            mask |= 1 << index
            if index + 1 == len(self.starts):
                break
            at = self.text.find(piece, self.starts[index + 1])
        return mask


class _CoverProblem:
    """The filter list as a weighted set cover: which candidate entries keep which bf16 layers in bf16.

    Layers are bit positions (index into the sorted bf16 FQNs); a candidate is an entry and the bitmask of the
    layers whose FQN contains it. Every candidate costs one entry, then its readability rank, then its length,
    folded into one integer (`cost`) that orders lists as (entries, sum of ranks, characters): the spans are
    wide enough because a list found by the search never has more entries than layers, nor an entry longer
    than the FQN it was chosen for.
    """

    def __init__(self, keep_bf16: list[str], convert: list[str]):
        self.fqns = keep_bf16
        kept, converted = _FqnIndex(keep_bf16), _FqnIndex(convert)
        whole_fqns = set(keep_bf16)
        rank_span = 2 * len(keep_bf16) + 1
        self.length_span = sum(map(len, keep_bf16)) + 1
        self.entry_cost = rank_span * self.length_span
        self.masks: dict[str, int] = {}
        self.costs: dict[str, int] = {}
        for fqn in keep_bf16:
            for piece in _candidates(fqn):
                if piece in self.masks or converted.containing(piece):
                    continue
                self.masks[piece] = kept.containing(piece)
                rank = _readability_rank(piece, whole_fqns)
                self.costs[piece] = self.entry_cost + rank * self.length_span + len(piece)

    def key(self, entry: str) -> tuple[int, str]:
        """Between two entries: the cheaper first, then alphabetical."""
        return self.costs[entry], entry

    def greedy(self, universe: int, candidates: Sequence[str]) -> list[str]:
        """Greedy set cover of `universe`, then entries the others make redundant dropped: a first list."""
        uncovered, chosen = universe, []
        while uncovered:
            best = min(
                (entry for entry in candidates if self.masks[entry] & uncovered),
                key=lambda entry: (-(self.masks[entry] & uncovered).bit_count(), *self.key(entry)),
            )
            chosen.append(best)
            uncovered &= ~self.masks[best]
        # Drop an entry when the others already keep all its layers in bf16 (longest first: keep the general
        # ones).
        for entry in sorted(chosen, key=lambda e: (-len(e), e)):
            others = [e for e in chosen if e != entry]
            if self.masks[entry] & universe & ~_union(self.masks[e] for e in others) == 0:
                chosen = others
        return chosen


def _union(masks: Iterable[int]) -> int:
    union = 0
    for mask in masks:
        union |= mask
    return union


def _bits(mask: int) -> Iterator[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


class _SearchBudgetSpent(Exception):
    pass


def _shortest_cover(
    keep_bf16: list[str], convert: list[str], budget: int | None = None
) -> tuple[list[str], bool]:
    """The fewest candidate entries that keep every FQN of `keep_bf16` in bf16 and match no FQN of `convert`.

    Returns (sorted entries, proven). Among shortest lists the tie-break is the sum of the readability ranks,
    then the characters, then the order of search.

    The search space is first reduced by the classic set-cover rules, which keep an optimal list: a candidate
    whose layers another candidate keeps too, at no more cost, is dropped; a layer whose every candidate also
    covers another layer makes that other layer's constraint redundant; a layer with a single candidate
    forces it. What is left splits into independent groups of layers (no candidate spans two), each solved
    by branch and bound: branch on the uncovered layer with the fewest candidates, each candidate in turn
    (and excluded from the later branches), bounded below by a packing of uncovered layers no two of which
    share a candidate (each needs an entry of its own). A group that spends the work `budget` (default
    `SEARCH_BUDGET`) goes to an integer-program solver (`_solve_as_integer_program`); `proven` is False only
    when that too stops short, and the list is then the shortest found (never longer than a greedy cover).
    """
    if not keep_bf16:
        return [], True
    budget = SEARCH_BUDGET if budget is None else budget
    problem = _CoverProblem(keep_bf16, convert)
    masks = problem.masks
    universe = (1 << len(keep_bf16)) - 1
    alive = sorted(masks, key=problem.key)
    chosen: list[str] = []
    while True:  # reduce to a fixed point
        changed = False
        restricted = {entry: masks[entry] & universe for entry in alive}
        # A candidate kept only when no cheaper candidate (or an equal one earlier in the order) covers all
        # its layers; `alive` is in cost order, so the first of equals survives.
        by_layer: dict[int, list[str]] = {}
        survivors = []
        for entry in alive:
            mask = restricted[entry]
            if not mask:
                changed = True
                continue
            lowest = (mask & -mask).bit_length() - 1
            if any(mask & ~restricted[other] == 0 for other in by_layer.get(lowest, ())):
                changed = True
                continue
            survivors.append(entry)
            for layer in _bits(mask):
                by_layer.setdefault(layer, []).append(entry)
        alive = survivors
        # A layer with one candidate forces it.
        forced = sorted({entries[0] for entries in by_layer.values() if len(entries) == 1}, key=problem.key)
        if forced:
            chosen += forced
            universe &= ~_union(masks[entry] for entry in forced)
            alive = [entry for entry in alive if entry not in forced]
            continue
        # A layer whose candidates all cover another layer too makes the other one redundant.
        redundant = 0
        for layer, entries in by_layer.items():
            if redundant >> layer & 1:
                continue
            candidates_of_layer = set(entries)
            fewest = min(entries, key=lambda entry: restricted[entry].bit_count())
            for other in _bits(restricted[fewest] & ~(1 << layer) & ~redundant):
                if candidates_of_layer <= set(by_layer[other]):
                    redundant |= 1 << other
        if redundant:
            universe &= ~redundant
            changed = True
        if not changed:
            break

    proven = True
    steps = [budget]
    for group in _independent_groups(universe, [masks[entry] & universe for entry in alive]):
        entries = [entry for entry in alive if masks[entry] & group]
        try:
            chosen += _branch_and_bound(problem, group, entries, steps)
        except _SearchBudgetSpent as spent:
            found, optimal = _solve_as_integer_program(problem, group, entries, node_limit=SOLVER_NODE_LIMIT)
            candidates = [spent.args[0]] + ([found] if found is not None else [])
            chosen += min(candidates, key=lambda entries: sum(problem.costs[e] for e in entries))
            proven = proven and optimal
    return sorted(chosen), proven


def _solve_as_integer_program(
    problem: _CoverProblem, group: int, entries: list[str], *, node_limit: int
) -> tuple[list[str] | None, bool]:
    """The same set cover as an integer program (scipy.optimize.milp, HiGHS), for a group the branch and bound
    could not finish: (entries or None, proven fewest). The costs are scaled to 1 per entry plus a fraction
    below 1 for readability and length, so that the solver's tolerances never trade an entry for them; the
    tie-break among shortest lists is then as exact as the solver's tolerances allow. `node_limit` keeps the
    answer the same on every machine (no time limit)."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_array

    layers = list(_bits(group))
    row = {layer: index for index, layer in enumerate(layers)}
    rows, columns = [], []
    for column, entry in enumerate(entries):
        for layer in _bits(problem.masks[entry] & group):
            rows.append(row[layer])
            columns.append(column)
    coverage = csr_array((np.ones(len(rows)), (rows, columns)), shape=(len(layers), len(entries)))
    costs = np.array([problem.costs[entry] / problem.entry_cost for entry in entries])
    result = milp(
        costs,
        constraints=LinearConstraint(coverage, lb=1, ub=np.inf),
        integrality=np.ones(len(entries)),
        bounds=Bounds(0, 1),
        options={"mip_rel_gap": 0, "node_limit": max(node_limit, 1)},
    )
    if result.x is None:
        return None, False
    found = [entry for entry, value in zip(entries, result.x, strict=True) if value > 0.5]
    if group & ~_union(problem.masks[entry] for entry in found):
        return None, False  # rounding left a layer uncovered: never trust it
    return found, result.status == 0


def _independent_groups(universe: int, masks: list[int]) -> list[int]:
    """The layers of `universe` split into groups that no candidate mask spans (connected components)."""
    parent = {layer: layer for layer in _bits(universe)}

    def root(layer: int) -> int:
        while parent[layer] != layer:
            parent[layer] = parent[parent[layer]]
            layer = parent[layer]
        return layer

    for mask in masks:
        layers = list(_bits(mask))
        for layer in layers[1:]:
            parent[root(layer)] = root(layers[0])
    groups: dict[int, int] = {}
    for layer in parent:
        groups[root(layer)] = groups.get(root(layer), 0) | 1 << layer
    return sorted(groups.values(), key=lambda group: group & -group)


def _branch_and_bound(problem: _CoverProblem, group: int, entries: list[str], steps: list[int]) -> list[str]:
    """The cheapest list of `entries` that covers `group`; raises `_SearchBudgetSpent(best so far)` when
    `steps[0]` runs out."""
    masks = {entry: problem.masks[entry] & group for entry in entries}
    costs = problem.costs
    candidates_of: dict[int, list[str]] = {layer: [] for layer in _bits(group)}
    for entry in entries:
        for layer in _bits(masks[entry]):
            candidates_of[layer].append(entry)
    # For the bound: the layers any candidate of a layer also covers, and its cheapest candidate.
    neighbours = {layer: _union(masks[e] for e in found) for layer, found in candidates_of.items()}
    cheapest = {layer: min(costs[e] for e in found) for layer, found in candidates_of.items()}
    packing_order = sorted(candidates_of, key=lambda layer: (neighbours[layer].bit_count(), -cheapest[layer]))

    best = problem.greedy(group, entries)
    best_cost = [sum(costs[e] for e in best), best]

    def lower_bound(uncovered: int) -> int:
        bound, blocked = 0, 0
        for layer in packing_order:
            if uncovered >> layer & 1 and not blocked >> layer & 1:
                bound += cheapest[layer]
                blocked |= neighbours[layer]
        return bound

    def search(uncovered: int, chosen: list[str], cost: int, excluded: frozenset[str]) -> None:
        if not uncovered:
            if cost < best_cost[0]:
                best_cost[:] = [cost, list(chosen)]
            return
        steps[0] -= len(packing_order)  # what a step costs: its bound visits every layer of the group
        if steps[0] < 0:
            raise _SearchBudgetSpent(best_cost[1])
        if cost + lower_bound(uncovered) >= best_cost[0]:
            return
        layer = min(
            _bits(uncovered),
            key=lambda layer: (sum(e not in excluded for e in candidates_of[layer]), layer),
        )
        options = sorted(
            (e for e in candidates_of[layer] if e not in excluded),
            key=lambda e: (-(masks[e] & uncovered).bit_count(), *problem.key(e)),
        )
        for index, entry in enumerate(options):
            search(
                uncovered & ~masks[entry],
                [*chosen, entry],
                cost + costs[entry],
                excluded | frozenset(options[:index]),
            )

    search(group, [], 0, frozenset())
    return best_cost[1]


__all__ = [
    "SUBSTRING_FRAMEWORKS",
    "Conflict",
    "FilterList",
    "FilterSimulationError",
    "Framework",
    "auto_filter_keeps",
    "converted_by_framework",
    "dims_divisible_by_16",
    "entries_matching_nothing",
    "matches_filter",
    "parse_framework",
    "shortest_exact_filter",
]
