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

The shortest filter list that makes a substring framework convert exactly the advised layers is built in
`fp8advisor.frameworks.shortest_filter`, and checked with `converted_by_framework` here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from fp8advisor.errors import parse_choice
from fp8advisor.frameworks.formats import SUBSTRING_FORMATS, ConfigFormat
from fp8advisor.inspect.records import GemmLayer
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


def included_by_fqns(layers: Sequence[GemmLayer], fqns: Iterable[str]) -> set[str]:
    """The nn.Linear layers torchtitan 0.3's `MXFP8LinearConverter.Config(fqns=[...])` converts: those whose
    FQN contains an entry (substring), every one when `fqns` is empty, whatever K and N
    (torchtitan/components/quantization/mx.py:82-83, `if not fqns or any(target_fqn in fqn ...)`)."""
    entries = list(fqns)
    return {
        layer.fqn
        for layer in layers
        if layer.is_linear and (not entries or matches_filter(layer.fqn, entries))
    }


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


__all__ = [
    "SUBSTRING_FRAMEWORKS",
    "Framework",
    "auto_filter_keeps",
    "converted_by_framework",
    "entries_matching_nothing",
    "included_by_fqns",
    "matches_filter",
    "parse_framework",
]
