"""The shortest list of FQN substrings that keeps given layers in bf16 and matches no layer to convert.

`fp8advisor.frameworks.shortest_filter` states the problem; this module solves it as a weighted set cover:
the candidate entries are dot-boundary pieces of the FQNs to keep in bf16 (`_candidates`), each costs one
entry, then its readability (`_readability_rank`), then its length (`_CoverProblem`). `shortest_cover` reduces
the problem by the classic set-cover rules, splits it into independent groups and solves each exactly by
branch and bound; a group that spends `SEARCH_BUDGET` goes to an integer-program solver (scipy.optimize.milp),
and only when that too stops at `SOLVER_NODE_LIMIT` is the list not proven the shortest. Counts, never times,
bound the work: the same inputs give the same list on every machine.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence

#: Work after which the shortest-list search hands a group of layers to an integer-program solver
#: (scipy.optimize.milp): branch-and-bound steps, each counted as the number of layers of its group (what its
#: bound visits), about 0.2 s of search. Real models need a small fraction of it (Llama-70B: a few hundred
#: steps on groups of a handful of layers, whatever the advice).
SEARCH_BUDGET = 1_000_000


#: Branch-and-bound nodes the solver may use; only when it stops short of a proof is `FilterList.shortest`
#: False. Counts, not times: the same inputs give the same list on every machine.
SOLVER_NODE_LIMIT = 10_000


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


def shortest_cover(
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


__all__ = ["SEARCH_BUDGET", "SOLVER_NODE_LIMIT", "shortest_cover"]
