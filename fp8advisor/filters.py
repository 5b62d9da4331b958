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

`shortest_exact_filter` finds a short list of substrings such that the substring frameworks convert exactly
the advised layers; the result is verified by `converted_by_framework` every time, never trusted by
construction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from fp8advisor.errors import parse_choice
from fp8advisor.formats import SUBSTRING_FORMATS, ConfigFormat
from fp8advisor.layers import GemmLayer
from fp8advisor.recipes import Recipe

#: The frameworks simulated here are the config formats of `fp8advisor.formats`: one enum for the writer, the
#: reader and the simulation (`Framework.TORCHTITAN` is `ConfigFormat.TORCHTITAN_TOML`, `TORCHTITAN_0_3` is
#: `TORCHTITAN_PY`).
Framework = ConfigFormat
#: Frameworks whose `filter_fqns` entries keep a layer in bf16 when the entry is a substring of its FQN.
SUBSTRING_FRAMEWORKS = SUBSTRING_FORMATS


def parse_framework(name: str | Framework) -> Framework:
    """`Framework` from its name; a clear error listing the valid names otherwise."""
    return parse_choice(Framework, name, "framework")


def dims_divisible_by_16(K: int, N: int) -> bool:
    """torch._scaled_mm needs K and N divisible by 16; every framework skips other Linear layers."""
    return K % 16 == 0 and N % 16 == 0


def matches_filter(fqn: str, filter_fqns: Iterable[str]) -> bool:
    """True when an entry of `filter_fqns` is a substring of `fqn` (torchtitan, NeMo, torchao auto)."""
    return any(entry in fqn for entry in filter_fqns)


def auto_filter_keeps(recipe: Recipe | str, K: int, N: int) -> bool:
    """The size thresholds of torchao's `_auto_filter_for_recipe` (torchao 0.18): True = keep bf16.

    A pure copy for simulation and tests; the advice's comparison calls torchao's real function instead.
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
    safe choice; with none demoted the list is `exact`.
    """

    entries: tuple[str, ...]
    framework: Framework
    converted: frozenset[str]
    conflicts: tuple[Conflict, ...] = ()
    demoted: frozenset[str] = field(default=frozenset())

    @property
    def exact(self) -> bool:
        """The simulated converted set equals the advised set."""
        return not self.demoted

    def to_json(self) -> dict:
        return {
            "framework": self.framework.value,
            "entries": list(self.entries),
            "exact": self.exact,
            "converted": sorted(self.converted),
            "conflicts": [conflict.to_json() for conflict in self.conflicts],
            "demoted": sorted(self.demoted),
        }


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
    layers: Sequence[GemmLayer], advised: Iterable[str], framework: Framework | str = Framework.TORCHTITAN
) -> FilterList:
    """The shortest list of FQN substrings such that `framework` converts exactly the `advised` layers.

    Candidates are dot-boundary pieces of each layer to keep in bf16: its suffixes (`output`, `attention.wk`,
    the whole FQN) and its pieces ending at a dot (`layers.0.`, `attention.`); a greedy set cover picks the
    candidate that keeps the most remaining layers in bf16 without touching an advised one (ties: a named
    suffix such as `attention.wk` before a piece ending at a dot, before a bare last name; then shorter; then
    alphabetical), then drops entries the others make redundant. The entries come out sorted. Layers whose K
    or N is not divisible by 16 need no entry: the framework skips them itself.

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
    entries = _greedy_cover(sorted(eligible - target), convert_names)
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
    )


def _greedy_cover(keep_bf16: list[str], convert: list[str]) -> list[str]:
    """Greedy set cover of `keep_bf16` by substrings that match no FQN of `convert`; sorted result."""
    if not keep_bf16:
        return []
    # One search in a joined string answers "is this a substring of any converted FQN" (no FQN holds a
    # newline).
    converted_text = "\n".join(convert)
    candidates: dict[str, frozenset[str]] = {}
    for fqn in keep_bf16:
        for piece in _candidates(fqn):
            if piece in candidates or piece in converted_text:
                continue
            candidates[piece] = frozenset(other for other in keep_bf16 if piece in other)
    whole_fqns = set(keep_bf16)
    uncovered = set(keep_bf16)
    chosen: list[str] = []
    while uncovered:
        best = min(
            (entry for entry, hits in candidates.items() if hits & uncovered),
            key=lambda entry: (
                -len(candidates[entry] & uncovered),
                _readability_rank(entry, whole_fqns),
                len(entry),
                entry,
            ),
        )
        chosen.append(best)
        uncovered -= candidates[best]
    # Drop an entry when the others already keep all its layers in bf16 (longest first: keep the general
    # ones).
    for entry in sorted(chosen, key=lambda e: (-len(e), e)):
        others = [e for e in chosen if e != entry]
        if candidates[entry] <= set().union(*(candidates[e] for e in others)):
            chosen = others
    return sorted(chosen)


__all__ = [
    "SUBSTRING_FRAMEWORKS",
    "Conflict",
    "FilterList",
    "FilterSimulationError",
    "Framework",
    "auto_filter_keeps",
    "converted_by_framework",
    "dims_divisible_by_16",
    "matches_filter",
    "parse_framework",
    "shortest_exact_filter",
]
