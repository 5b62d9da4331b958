"""The frameworks' layer-selection rules, and the shortest exact filter list, checked by simulation."""

from __future__ import annotations

import itertools
import math
import random
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _advice_helpers import layer, llama_layers  # noqa: E402

from fp8advisor.frameworks.filter_cover import _candidates, _CoverProblem, _FqnIndex, _readability_rank  # noqa: E402
from fp8advisor.frameworks.filters import (  # noqa: E402
    SUBSTRING_FRAMEWORKS,
    Framework,
    auto_filter_keeps,
    converted_by_framework,
    matches_filter,
)
from fp8advisor.frameworks.shortest_filter import shortest_exact_filter  # noqa: E402
from fp8advisor.inspect.records import LayerStatus  # noqa: E402
from fp8advisor.recipes import Recipe  # noqa: E402

WRITABLE = [Framework.TORCHTITAN, Framework.TORCHTITAN_0_3, Framework.NEMO_AUTOMODEL]


@pytest.mark.parametrize(
    "fqn, entries, expected",
    [
        ("layers.0.attention.wk", ["attention.wk"], True),  # suffix
        ("layers.0.attention.wkv", ["attention.wk"], True),  # substring, not a whole name: still matches
        ("layers.10.attention.wq", ["0.attention.wq"], True),  # why numeric suffixes are never emitted
        ("lm_head", ["output"], False),  # torchtitan#4008: a renamed head silently matches nothing
        ("output", [], False),  # empty list keeps nothing
        ("model.layers.0.mlp.up_proj", ["mlp"], True),  # infix
    ],
)
def test_substring_rule(fqn, entries, expected):
    assert matches_filter(fqn, entries) is expected


@pytest.mark.parametrize("framework", sorted(SUBSTRING_FRAMEWORKS - {Framework.TORCHAO_AUTO}))
def test_substring_frameworks_visit_every_linear_and_skip_non_multiples_of_16(framework):
    layers = [
        layer("a.big", 4096, 4096),
        layer("a.unused", 4096, 4096, status=LayerStatus.NOT_CALLED),  # visited although never called
        layer("a.odd", 4096, 1000),  # N % 16 != 0: skipped by the framework itself
        layer("a.experts", 4096, 4096, is_linear=False),  # not an nn.Linear: never visited
        layer("a.skip", 4096, 4096),
    ]
    assert converted_by_framework(layers, ["skip"], framework) == {"a.big", "a.unused"}


def test_exact_frameworks_convert_the_set():
    layers = [layer("x", 32, 32), layer("y", 32, 32), layer("z", 30, 32)]
    for framework in (Framework.TORCHAO, Framework.ACCELERATE):
        assert converted_by_framework(layers, None, framework, convert_fqns={"y", "z"}) == {"y", "z"}
        with pytest.raises(ValueError):
            converted_by_framework(layers, None, framework)


# Boundaries of torchao 0.18's _auto_filter_for_recipe thresholds (True = keep bf16).
AUTO_CASES = [
    ("tensorwise", 4096, 1024, True),  # K <= 4096 and N <= 1024
    ("tensorwise", 4112, 1024, False),  # K just above 4096
    ("tensorwise", 4096, 1040, False),  # N just above 1024
    ("rowwise", 8192, 2048, True),  # N <= 2048
    ("rowwise", 8192, 2064, False),  # N above 2048, K large
    ("rowwise", 1024, 8192, True),  # K <= 1024
    ("rowwise", 2048, 4096, True),  # N <= 4096 and K <= 2048
    ("rowwise", 2064, 4096, False),  # K just above 2048
    ("rowwise", 4096, 14336, False),  # a Llama-3 8B feed-forward
]


@pytest.mark.parametrize("recipe, K, N, keeps", AUTO_CASES)
def test_auto_filter_copy_matches_torchao(recipe, K, N, keeps):
    import torch
    from torch import nn
    from torchao.float8.float8_linear_utils import _auto_filter_for_recipe

    assert auto_filter_keeps(recipe, K, N) is keeps
    real = _auto_filter_for_recipe(recipe, filter_fqns=[])(
        nn.Linear(K, N, bias=False, device=torch.device("meta")), "x"
    )
    assert real is (not keeps)


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_auto_filter_copy_is_torchaos_rule_on_every_size(recipe):
    # The advice answers with the copy instead of importing torchao (fp8advisor.advice.strategies): on every
    # (K, N) of a grid around each threshold, with sizes not divisible by 16 and a substring filter, the copy
    # must convert exactly the Linear layers torchao's own function accepts.
    import torch
    from torch import nn
    from torchao.float8.float8_linear_utils import _auto_filter_for_recipe

    sizes = sorted({base + step for base in (512, 1024, 2048, 4096, 8192) for step in (-16, -8, 0, 8, 16)})
    layers = [layer(f"layers.{K}.{N}", K, N) for K in [*sizes, 65536] for N in [*sizes, 65536]]
    filter_fqns = ["layers.4096."]
    real = _auto_filter_for_recipe(recipe, filter_fqns=filter_fqns)
    accepted = {
        item.fqn
        for item in layers
        if real(nn.Linear(item.K, item.N, bias=False, device=torch.device("meta")), item.fqn)
    }
    assert 0 < len(accepted) < len(layers)
    assert converted_by_framework(layers, filter_fqns, Framework.TORCHAO_AUTO, recipe=recipe) == accepted


def test_auto_filter_rowwise_with_gw_hp_is_not_implemented():
    with pytest.raises(NotImplementedError):
        auto_filter_keeps(Recipe.ROWWISE_WITH_GW_HP, 4096, 4096)


def _llama_advised(model, skip=("attention.wk", "attention.wv", "output")):
    return {l.fqn for l in model.layers if not any(s in l.fqn for s in skip)}


@pytest.mark.parametrize("framework", WRITABLE)
def test_llama_80_layers_short_exact_list(framework):
    model = llama_layers(80)
    advised = _llama_advised(model)
    result = shortest_exact_filter(model.layers, advised, framework)
    assert result.entries == ("attention.wk", "attention.wv", "output")
    assert result.exact and not result.conflicts and not result.demoted
    assert converted_by_framework(model.layers, result.entries, framework) == advised == set(result.converted)


def test_single_layer_entry_never_a_numeric_suffix():
    # keep only layers.0.attention.wq in bf16: "0.attention.wq" would also catch layers.10/20/...
    model = llama_layers(80)
    advised = {l.fqn for l in model.layers} - {"layers.0.attention.wq"}
    result = shortest_exact_filter(model.layers, advised)
    assert result.entries == ("layers.0.attention.wq",)
    assert "layers.10.attention.wq" in result.converted
    assert converted_by_framework(model.layers, result.entries, Framework.TORCHTITAN) == advised


def _redundant_entries(layers, entries) -> list[str]:
    """Entries whose bf16 layers the other entries already keep in bf16."""
    fqns = [l.fqn for l in layers]
    return [
        entry
        for entry in entries
        if {f for f in fqns if entry in f} <= {f for f in fqns for e in entries if e != entry and e in f}
    ]


def test_no_entry_is_redundant():
    # "m." keeps the most layers in bf16 (four), but "p.q" and "r.s" are needed for n.five and n.six anyway
    # and keep those four too: the list is the two of them, never three ("n." would catch n.conv).
    bf16 = ["m.one.p.q", "m.two.p.q", "n.five.p.q", "m.three.r.s", "m.four.r.s", "n.six.r.s"]
    layers = [layer(fqn, 64, 64) for fqn in [*bf16, "n.conv"]]
    result = shortest_exact_filter(layers, {"n.conv"})
    assert result.entries == ("p.q", "r.s")
    assert not _redundant_entries(layers, result.entries)


# Two blocks whose mlp and attn layers all stay bf16, beside a converted "mid.attn.c": "mlp." keeps the most
# layers in bf16 (four), so a greedy cover takes it first and then needs one entry per "attn.c" (3 entries);
# "left." and "right." alone do it in 2.
GREEDY_TRAP = ["left.mlp.a", "left.mlp.b", "left.attn.c", "right.mlp.a", "right.mlp.b", "right.attn.c"]


def test_shorter_than_a_greedy_cover():
    layers = [layer(fqn, 64, 64) for fqn in [*GREEDY_TRAP, "mid.attn.c"]]
    greedy = _CoverProblem(sorted(GREEDY_TRAP), ["mid.attn.c"])
    assert sorted(greedy.greedy((1 << len(GREEDY_TRAP)) - 1, list(greedy.masks))) == [
        "left.attn.c",
        "mlp.",
        "right.attn.c",
    ]
    result = shortest_exact_filter(layers, {"mid.attn.c"})
    assert result.entries == ("left.", "right.") and result.shortest
    assert converted_by_framework(layers, result.entries, Framework.TORCHTITAN) == {"mid.attn.c"}


def test_a_search_out_of_steps_hands_the_group_to_an_integer_program():
    layers = [layer(fqn, 64, 64) for fqn in [*GREEDY_TRAP, "mid.attn.c"]]
    result = shortest_exact_filter(layers, {"mid.attn.c"}, search_budget=0)
    assert result.entries == ("left.", "right.") and result.shortest


def test_without_a_proof_the_list_is_exact_and_says_it_may_not_be_shortest(monkeypatch):
    import scipy.optimize

    # the search out of steps, the solver out of nodes with nothing found: the greedy list, and said so
    monkeypatch.setattr(scipy.optimize, "milp", lambda *args, **kwargs: SimpleNamespace(x=None, status=1))
    layers = [layer(fqn, 64, 64) for fqn in [*GREEDY_TRAP, "mid.attn.c"]]
    result = shortest_exact_filter(layers, {"mid.attn.c"}, search_budget=0)
    assert result.entries == ("left.attn.c", "mlp.", "right.attn.c")
    assert result.exact and not result.shortest and result.to_json()["shortest"] is False
    assert set(result.converted) == {"mid.attn.c"}


def test_fqn_index_finds_every_substring_occurrence():
    """The index answers from whole segments where it can, and must agree with a plain search everywhere:
    pieces cut inside a segment ('w1' in 'w12', 'head' in 'lm_head') included."""
    rng = random.Random(3)
    names = ["w1", "w12", "w2", "head", "lm_head", "ff", "ff2", "0", "10", "attn", "attention"]
    for _ in range(100):
        fqns = sorted(
            {".".join(rng.choice(names) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 12))}
        )
        index = _FqnIndex(fqns)
        for piece in {p for fqn in fqns for p in _candidates(fqn)} | set(names) | {"x", "w1.w12"}:
            expected = sum(1 << i for i, fqn in enumerate(fqns) if piece in fqn)
            assert index.containing(piece) == expected, (piece, fqns)


def _best_by_exhaustion(bf16: list[str], converted: set[str]) -> tuple[int, int, int]:
    """(entries, sum of ranks, characters) of the best list, over every set of candidate entries: the best
    way to reach each subset of the bf16 layers, subsets in increasing order (each step only adds layers)."""
    converted_text = "\n".join(sorted(converted))
    pool = sorted({p for fqn in bf16 for p in _candidates(fqn) if p not in converted_text})
    masks = [sum(1 << i for i, fqn in enumerate(bf16) if p in fqn) for p in pool]
    costs = [(1, _readability_rank(p, set(bf16)), len(p)) for p in pool]
    best = {0: (0, 0, 0)}
    for reached in range(1 << len(bf16)):
        if reached not in best:
            continue
        for mask, cost in zip(masks, costs, strict=True):
            key = tuple(a + b for a, b in zip(best[reached], cost, strict=True))
            if reached | mask != reached and key < best.get(reached | mask, (math.inf,)):
                best[reached | mask] = key
    return best[(1 << len(bf16)) - 1]


def test_shortest_matches_exhaustion_on_small_random_models():
    """Against every set of candidate entries: none shorter, none more readable as short. In 8 of these 200
    cases a greedy cover is longer."""
    rng = random.Random(15)
    cells = [".".join(names) for names in itertools.product("abcd1", "xyz", "uv")]
    checked = 0
    while checked < 200:
        rng.shuffle(cells)
        bf16 = sorted(cells[: rng.randint(2, 8)])
        advised = set(cells[len(bf16) : len(bf16) + rng.randint(0, 5)])
        if any(b in a for b in bf16 for a in advised):
            continue  # a conflict: the bf16 set is no longer the complement of the advice
        layers = [layer(fqn, 64, 64) for fqn in [*bf16, *advised]]
        result = shortest_exact_filter(layers, advised)
        key = (
            len(result.entries),
            sum(_readability_rank(e, set(bf16)) for e in result.entries),
            sum(map(len, result.entries)),
        )
        assert key == _best_by_exhaustion(bf16, advised), (bf16, sorted(advised), result.entries)
        assert result.shortest and set(result.converted) == advised
        checked += 1


def test_all_advised_gives_empty_list_and_non_multiples_need_no_entry():
    layers = [layer("a", 64, 64), layer("b", 64, 60), layer("c", 64, 64)]
    result = shortest_exact_filter(layers, {"a", "c"})
    assert result.entries == () and result.exact


def test_not_called_linear_must_be_filtered():
    # conversion swaps a Linear the forward never calls (nn.MultiheadAttention.out_proj): it needs an entry
    layers = [
        layer("attn.out_proj", 512, 512, status=LayerStatus.NOT_CALLED),
        layer("mlp.fc1", 512, 2048),
        layer("mlp.fc2", 2048, 512),
    ]
    result = shortest_exact_filter(layers, {"mlp.fc1", "mlp.fc2"})
    assert result.entries == ("attn.out_proj",)
    assert converted_by_framework(layers, result.entries, Framework.NEMO_AUTOMODEL) == {"mlp.fc1", "mlp.fc2"}


def test_prefix_conflict_is_reported_and_both_kept_bf16():
    layers = [
        layer("blocks.0.ff", 256, 256),
        layer("blocks.0.ff2", 8192, 8192),
        layer("blocks.0.proj", 8192, 8192),
    ]
    result = shortest_exact_filter(layers, {"blocks.0.ff2", "blocks.0.proj"})
    assert not result.exact
    assert [(c.bf16_fqn, c.converted_fqn) for c in result.conflicts] == [("blocks.0.ff", "blocks.0.ff2")]
    assert result.demoted == {"blocks.0.ff2"}
    assert set(result.converted) == {"blocks.0.proj"}
    assert converted_by_framework(layers, result.entries, Framework.TORCHTITAN) == {"blocks.0.proj"}
    assert (
        "blocks.0.ff" in result.conflicts[0].describe() and "blocks.0.ff2" in result.conflicts[0].describe()
    )


def test_conflicts_cascade():
    # x.f stays bf16 -> x.f1 must too -> x.f10 contains x.f1 -> x.f10 must too
    layers = [layer("x.f", 64, 64), layer("x.f1", 64, 64), layer("x.f10", 64, 64), layer("y", 64, 64)]
    result = shortest_exact_filter(layers, {"x.f1", "x.f10", "y"})
    assert result.demoted == {"x.f1", "x.f10"}
    assert set(result.converted) == {"y"}


def test_result_independent_of_layer_order():
    model = llama_layers(6)
    advised = _llama_advised(model, skip=("attention.wk", "layers.3.feed_forward.w2", "output"))
    shuffled = list(model.layers)
    random.Random(0).shuffle(shuffled)
    assert shortest_exact_filter(model.layers, advised) == shortest_exact_filter(shuffled, advised)


def test_advised_layer_the_framework_cannot_convert_is_an_error():
    with pytest.raises(ValueError, match="divisible by 16"):
        shortest_exact_filter([layer("a", 64, 60)], {"a"})
    with pytest.raises(ValueError, match="not nn.Linear"):
        shortest_exact_filter([layer("a", 64, 64)], {"b"})


def test_random_models_exact_whenever_possible():
    """Property check: on random module trees the list is exact iff no bf16 FQN is a substring of an advised
    one, and the simulated result never converts a layer outside the advice."""
    rng = random.Random(1234)
    names = ["ff", "ff2", "proj", "out", "wq", "wk", "w1", "w12", "head", "lm_head", "gate", "up"]
    for _ in range(200):
        fqns = set()
        for _ in range(rng.randint(1, 25)):
            depth = rng.randint(1, 4)
            parts = [rng.choice(["layers", "blocks", str(rng.randint(0, 12))]) for _ in range(depth - 1)]
            fqns.add(".".join(parts + [rng.choice(names)]))
        layers = [layer(f, 64, 64 if rng.random() > 0.1 else 60) for f in sorted(fqns)]
        eligible = [l.fqn for l in layers if l.N % 16 == 0]
        advised = {f for f in eligible if rng.random() < 0.6}
        result = shortest_exact_filter(layers, advised)
        converted = converted_by_framework(layers, result.entries, Framework.TORCHTITAN)
        assert converted == set(result.converted) <= advised
        possible = not any(b in a for b in set(eligible) - advised for a in advised)
        assert result.exact is possible
        if possible:
            assert converted == advised
            assert len(result.entries) <= len(set(eligible) - advised)
        assert not _redundant_entries(layers, result.entries), result.entries


def test_a_module_shared_by_two_blocks_is_converted_under_both_names():
    # One Linear registered in two blocks: torchtitan asks about it under each name and swaps it per name, so
    # no entry may match either. "blocks.1." would cover both bf16 layers of block 1 and miss its alias.
    shared = replace(layer("blocks.0.shared", 4096, 4096), aliases=("blocks.1.shared",))
    layers = [shared, layer("blocks.0.own", 4096, 4096), layer("blocks.1.own", 4096, 4096)]
    layers.append(layer("blocks.1.out", 4096, 4096))
    result = shortest_exact_filter(layers, {"blocks.0.shared", "blocks.0.own"})
    assert result.exact and set(result.converted) == {"blocks.0.shared", "blocks.0.own"}
    assert not any(entry in "blocks.1.shared" for entry in result.entries), result.entries
    assert converted_by_framework(layers, ["blocks.1."], Framework.TORCHTITAN) == {"blocks.0.own"}
