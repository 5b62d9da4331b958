"""Per-layer decisions, recipe choice, the three-strategy summary and the warnings, with stub predictions."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _advice_helpers import (  # noqa: E402
    StubChoice,
    StubPredictor,
    layer,
    llama_layers,
    modelled_choice,
    prefix_conflict_layers,
)

from fp8advisor.advice.decide import advise  # noqa: E402
from fp8advisor.advice.linears import group_layers  # noqa: E402
from fp8advisor.advice.strategies import predicted_linear_speedup  # noqa: E402
from fp8advisor.errors import AdvisorError  # noqa: E402
from fp8advisor.frameworks.filters import Framework, converted_by_framework  # noqa: E402
from fp8advisor.inspect.records import LayerStatus, ModelLayers  # noqa: E402
from fp8advisor.recipes import Recipe  # noqa: E402
from fp8advisor.request import DEFAULT_MIN_SPEEDUP  # noqa: E402


def _advise(model, recipe="rowwise", **kwargs):
    kwargs.setdefault("predictor", StubPredictor())
    kwargs.setdefault("device_capability", None)
    kwargs.setdefault("compare_torchao_auto", False)
    return advise(model, StubChoice(), recipe, **kwargs)


def _one(layers, **kwargs):
    return _advise(ModelLayers("m.py", 1, 8192, tuple(layers)), **kwargs)


@pytest.mark.parametrize(
    "speedup, min_speedup, converts",
    [
        (1.05, 1.05, True),  # exactly at the threshold: convert
        (1.0499, 1.05, False),  # just below
        (0.9, 0.8, True),  # a user may accept slower layers
        (2.0, 2.5, False),
    ],
)
def test_threshold(speedup, min_speedup, converts):
    predictor = StubPredictor(rule=lambda M, K, N: speedup)
    advice = _one([layer("a", 4096, 4096)], predictor=predictor, min_speedup=min_speedup)
    (decided,) = advice.layers
    assert decided.convert is converts
    assert decided.predicted_speedup == pytest.approx(speedup)
    assert (">=" if converts else "<") in decided.reason


@pytest.mark.parametrize(
    "speedup, converts",
    [
        (1.0, False),  # a tie at the published table's 0.01 resolution: bf16
        (1.009, False),  # faster, but by less than 1%: bf16 too
        (1.01, True),  # exactly at the default threshold: convert
        (1.3, True),
    ],
)
def test_default_min_speedup_keeps_gains_below_one_percent_in_bf16(speedup, converts):
    advice = _one([layer("a", 4096, 4096)], predictor=StubPredictor(rule=lambda M, K, N: speedup))
    (decided,) = advice.layers
    assert decided.convert is converts
    assert advice.min_speedup == DEFAULT_MIN_SPEEDUP


def test_default_advice_may_be_predicted_slower_than_converting_everything_by_under_one_percent():
    # the layers the default leaves in bf16 for a gain under 1% are what "convert everything" is ahead by
    predictor = StubPredictor(rule=lambda M, K, N: 1.5 if K == 8192 else 1.005)
    advice = _one([layer("big", 8192, 8192), layer("small", 4096, 4096)], predictor=predictor)
    assert advice.convert_fqns == ("big",)
    mine = advice.strategy("advice").predicted_speedup
    everything = advice.strategy("all_convertible").predicted_speedup
    assert mine < everything < mine * 1.01


@pytest.mark.parametrize(
    "status, K, N, is_linear, reason_part",
    [
        (LayerStatus.NOT_CALLED, 4096, 4096, True, "not called"),
        (LayerStatus.NOT_CONVERTIBLE, 4096, 4096, True, "own forward"),
        (LayerStatus.TRACED, 4096, 4096, False, "float8 conversion does not apply"),
        (LayerStatus.TRACED, 4096, 1000, True, "not divisible by 16"),
    ],
)
def test_layers_that_never_convert(status, K, N, is_linear, reason_part):
    reason = "Linear subclass with its own forward" if status is LayerStatus.NOT_CONVERTIBLE else None
    advice = _one(
        [layer("x", K, N, status=status, is_linear=is_linear, reason=reason)],
        predictor=StubPredictor(rule=lambda M, K, N: 3.0),
    )
    (decided,) = advice.layers
    assert not decided.convert
    assert reason_part in decided.reason


def test_multi_call_layer_is_judged_on_total_time():
    # 2 calls: M=16384 at 2.0x and M=1024 at 0.5x; times weight by M (bf16 time = 6*M*K*N/1e15)
    predictor = StubPredictor(rule=lambda M, K, N: 2.0 if M == 16384 else 0.5)
    advice = _one([layer("shared", 4096, 4096, M=(16384, 1024))], predictor=predictor)
    (decided,) = advice.layers
    bf16 = [6 * M * 4096 * 4096 / 1e15 for M in (16384, 1024)]
    expected = sum(bf16) / (bf16[0] / 2.0 + bf16[1] / 0.5)
    assert decided.predicted_speedup == pytest.approx(expected)
    assert decided.calls == 2 and decided.M == 16384
    assert {call[1] for call in predictor.calls} == {16384, 1024}


def test_llama_advice_filter_and_summary():
    model = llama_layers(80)
    advice = _advise(model)
    # the stub puts wk/wv (4096 x 1024) at exactly 1.0x: below the default 1.01, kept bf16
    assert advice.filter_fqns == ("attention.wk", "attention.wv")
    assert len(advice.convert_fqns) == 80 * 5 + 1
    assert converted_by_framework(model.layers, advice.filter_fqns, Framework.TORCHTITAN) == set(
        advice.convert_fqns
    )
    assert "converts exactly the 401 advised layers" in advice.proof_line()
    mine = advice.strategy("advice").predicted_speedup
    everything = advice.strategy("all_convertible").predicted_speedup
    assert mine >= everything > 1  # converting 1.0x layers can only add the same time
    assert advice.strategy("torchao_auto").predicted_speedup is None  # not computed here


def test_predicted_linear_speedup_by_hand():
    advice = _one(
        [layer("a", 4096, 4096), layer("b", 4096, 4096)],
        predictor=StubPredictor(rule=lambda M, K, N: 2.0),
    )
    # two equal layers at 2x: convert one -> 2 / 1.5
    assert predicted_linear_speedup(advice.layers, {"a"}) == pytest.approx(2 / 1.5)
    assert predicted_linear_speedup(advice.layers, set()) == pytest.approx(1.0)


def test_group_layers_folds_80_blocks():
    advice = _advise(llama_layers(80))
    groups = group_layers(advice.layers)
    patterns = [g.pattern for g in groups]
    assert patterns[:2] == ["layers.{0..79}.attention.wq", "layers.{0..79}.attention.wk"]
    assert patterns[-1] == "output"
    assert len(groups) == 8 and sum(g.count for g in groups) == 561


def test_group_layers_splits_on_different_decisions():
    layers = [layer(f"blocks.{i}.mlp", 4096, 4096) for i in range(6)]
    # blocks 2 and 5 get a slow figure
    predictor = StubPredictor(rule=lambda M, K, N: 1.5)
    advice = _one(layers, predictor=predictor)
    mixed = [
        l if l.fqn not in ("blocks.2.mlp", "blocks.5.mlp") else type(l)(**{**l.__dict__, "convert": False})
        for l in advice.layers
    ]
    patterns = [g.pattern for g in group_layers(mixed)]
    assert patterns == ["blocks.{0..1,3..4}.mlp", "blocks.{2,5}.mlp"]


def test_auto_picks_lowest_time_within_one_provenance():
    predictor = StubPredictor(per_recipe={"tensorwise": 1.2, "rowwise": 1.0, "rowwise_with_gw_hp": 0.9})
    advice = _advise(llama_layers(2), recipe="auto", predictor=predictor)
    assert advice.recipe is Recipe.TENSORWISE
    assert "lowest predicted Linear time" in advice.recipe_reason
    assert {o.recipe for o in advice.recipe_options} == set(Recipe)


def test_auto_can_be_restricted():
    predictor = StubPredictor(per_recipe={"tensorwise": 1.2, "rowwise": 1.0, "rowwise_with_gw_hp": 0.9})
    allowed = (Recipe.ROWWISE, Recipe.ROWWISE_WITH_GW_HP)
    advice = _advise(llama_layers(1), recipe="auto", predictor=predictor, auto_recipes=allowed)
    assert advice.recipe is Recipe.ROWWISE
    assert "tensorwise" not in advice.recipe_reason


def test_auto_does_not_rank_across_provenance():
    # tensorwise looks fastest but is only modelled; rowwise has published figures: rowwise wins, and says why
    predictor = StubPredictor(
        per_recipe={"tensorwise": 1.5, "rowwise": 1.0, "rowwise_with_gw_hp": 0.9},
        provenance={"tensorwise": "modelled", "rowwise": "published", "rowwise_with_gw_hp": "modelled"},
    )
    advice = _advise(llama_layers(2), recipe="auto", predictor=predictor)
    assert advice.recipe is Recipe.ROWWISE
    assert "cannot be ranked" in advice.recipe_reason and "tensorwise (modelled" in advice.recipe_reason


def _torchao_accepts(layers, recipe):
    from torch import nn
    from torchao.float8 import _auto_filter_for_recipe

    module_filter = _auto_filter_for_recipe(recipe, filter_fqns=[])
    return {
        item.fqn
        for item in layers
        if item.is_linear and module_filter(nn.Linear(item.K, item.N, bias=False, device="meta"), item.fqn)
    }


@pytest.mark.parametrize("known_release", [True, False])
def test_torchao_auto_filter_is_torchaos_rule(monkeypatch, known_release):
    # For the torchao release the copy was read from, the copy answers and torchao is not imported; for any
    # other, torchao's real function is called. Either way: what torchao's function accepts.
    import torchao.float8 as utils  # where fp8advisor.compat finds it

    from fp8advisor import compat

    real = utils._auto_filter_for_recipe
    seen = []

    def spy(recipe, filter_fqns):
        seen.append((recipe, list(filter_fqns)))
        return real(recipe, filter_fqns)

    monkeypatch.setattr(utils, "_auto_filter_for_recipe", spy)
    if not known_release:
        monkeypatch.setattr(compat, "installed_torchao_version", lambda: "0.99.0")
    model = llama_layers(2)
    advice = _advise(model, compare_torchao_auto=True)
    assert seen == ([] if known_release else [("rowwise", [])])
    auto = advice.strategy("torchao_auto")
    assert set(auto.converted) == _torchao_accepts(model.layers, "rowwise")
    # rowwise thresholds: wk/wv (N = 1024 <= 2048) stay bf16; wq (4096 x 4096) and w1 (4096 x 14336) convert
    assert "layers.0.attention.wk" not in auto.converted
    assert {"layers.0.attention.wq", "layers.0.feed_forward.w1", "output"} <= set(auto.converted)
    assert auto.predicted_speedup is not None and auto.predicted_speedup > 1


def test_auto_filter_copy_is_used_for_the_release_it_was_read_from(monkeypatch):
    from fp8advisor import compat

    installed = compat.installed_torchao_version()
    assert compat.auto_filter_copy_matches_installed() is installed.startswith(compat.AUTO_FILTER_COPIED_FROM)
    for version, matches in [("0.18.0", True), ("0.18.1+cu128", True), ("0.19.0", False), ("0.1.18", False)]:
        monkeypatch.setattr(compat, "installed_torchao_version", lambda version=version: version)
        assert compat.auto_filter_copy_matches_installed() is matches
    monkeypatch.setattr(compat, "installed_torchao_version", lambda: None)
    assert compat.auto_filter_copy_matches_installed() is False


def test_torchao_auto_filter_not_available_for_gw_hp():
    advice = _advise(llama_layers(1), recipe="rowwise_with_gw_hp", compare_torchao_auto=True)
    auto = advice.strategy("torchao_auto")
    assert auto.predicted_speedup is None and "not available" in auto.note


@pytest.mark.parametrize(
    "capability, warns",
    [((8, 0), True), ((8, 6), True), ((8, 9), False), ((9, 0), False), (None, False)],
)
def test_gpu_without_fp8_tensor_cores(capability, warns):
    advice = _advise(llama_layers(1), device_capability=capability)
    assert any("no FP8 tensor cores" in w for w in advice.warnings) is warns


def test_token_count_not_divisible_by_16_suggests_padding():
    advice = _advise(llama_layers(1, tokens=8190))
    assert any("pad_seq_len_divisible: 16" in w for w in advice.warnings)
    assert not any("pad_seq_len" in w for w in _advise(llama_layers(1, tokens=8192)).warnings)


def test_nothing_worth_converting():
    advice = _advise(llama_layers(1), predictor=StubPredictor(rule=lambda M, K, N: 0.9))
    assert advice.convert_fqns == ()
    assert any("nothing worth converting" in w for w in advice.warnings)
    assert advice.filter_fqns == ("layers.", "output")


def test_tensor_parallel_predicts_the_slower_shard():
    predictor = StubPredictor()
    advice = _advise(llama_layers(1), tensor_parallel=8, predictor=predictor)
    assert (("rowwise", 8192, 512, 4096) in predictor.calls) and (
        ("rowwise", 8192, 4096, 512) in predictor.calls
    )
    assert any("tensor parallelism 8" in w for w in advice.warnings)
    wq = next(l for l in advice.layers if l.fqn == "layers.0.attention.wq")
    assert wq.predicted_speedup == pytest.approx(StubPredictor.default_rule(8192, 512, 4096))


def test_modelled_figures_are_flagged():
    modelled = StubPredictor(provenance={"rowwise": "modelled"})
    assert any("roofline model" in w for w in _advise(llama_layers(1), predictor=modelled).warnings)
    assert not any("roofline model" in w for w in _advise(llama_layers(1)).warnings)


def test_prefix_conflict_cost_and_warning():
    advice = _advise(prefix_conflict_layers())
    assert set(advice.convert_fqns) == {"blocks.0.ff2", "blocks.0.proj"}  # the advice itself is unchanged
    assert not advice.filter_list.exact
    via = advice.strategy("advice_filter")
    assert via.converted == ("blocks.0.proj",)
    assert via.predicted_speedup < advice.strategy("advice").predicted_speedup
    (warning,) = [w for w in advice.warnings if "no filter_fqns list can be exact" in w]
    assert "'blocks.0.ff'" in warning and "'blocks.0.ff2'" in warning and "instead of" in warning


def test_proof_line_says_when_the_list_is_not_proven_shortest(monkeypatch):
    import scipy.optimize

    import fp8advisor.frameworks.filter_cover

    # "mlp." tempts a greedy cover; "left." and "right." are shorter: a search with no steps and a solver
    # with no answer leave a longer list, and the proof line must not let it pass for the shortest
    names = ["left.mlp.a", "left.mlp.b", "left.attn.c", "right.mlp.a", "right.mlp.b", "right.attn.c"]
    layers = [layer(name, 64, 64) for name in names] + [layer("mid.attn.c", 8192, 8192)]
    assert "may exist" not in _one(layers).proof_line()
    monkeypatch.setattr(fp8advisor.frameworks.filter_cover, "SEARCH_BUDGET", 0)
    monkeypatch.setattr(scipy.optimize, "milp", lambda *args, **kwargs: SimpleNamespace(x=None, status=1))
    advice = _one(layers)
    assert advice.filter_fqns == ("left.attn.c", "mlp.", "right.attn.c")
    assert "converts exactly the 1 advised layers; a shorter list may exist" in advice.proof_line()
    assert advice.to_json()["summary"]["filter"]["shortest"] is False


def test_invalid_inputs():
    with pytest.raises(AdvisorError):
        _advise(llama_layers(1), min_speedup=0)
    with pytest.raises(AdvisorError):
        _advise(llama_layers(1), tensor_parallel=0)
    with pytest.raises(AdvisorError):
        _advise(llama_layers(1), recipe="fp4")


def test_to_json_schema():
    data = json.loads(json.dumps(_advise(prefix_conflict_layers(), compare_torchao_auto=True).to_json()))
    assert {"recipe", "profile", "filter_fqns", "layers", "summary", "warnings"} <= set(data)
    assert set(data["layers"][0]) >= {"fqn", "M", "K", "N", "predicted_speedup", "convert", "reason"}
    assert set(data["summary"]["strategies"]) == {
        "advice",
        "advice_filter",
        "all_convertible",
        "torchao_auto",
    }
    assert data["summary"]["filter"]["conflicts"] == [
        {"bf16_fqn": "blocks.0.ff", "converted_fqn": "blocks.0.ff2"}
    ]


def test_real_predictor_with_a_modelled_profile():
    # the integration with fp8advisor.predict.speedup: H100 roofline, Llama-3 8B shapes at 8192 tokens
    advice = advise(
        llama_layers(2), modelled_choice(), "rowwise", device_capability=None, compare_torchao_auto=False
    )
    w1 = next(l for l in advice.layers if l.fqn == "layers.0.feed_forward.w1")
    assert w1.provenance == "modelled" and w1.how == "modelled"
    assert 1 < w1.predicted_speedup < 2.1  # the fp8 peak is twice bf16's
    assert math.isfinite(advice.strategy("advice").predicted_speedup)


def _rowwise_at_tp4(model_layers, rule):
    """The rowwise advice at --tp 4 with a stub predictor whose speedup follows `rule(M, K, N)`."""
    from _advice_helpers import StubChoice, StubPredictor

    return advise(
        model_layers,
        StubChoice(),
        "rowwise",
        tensor_parallel=4,
        predictor=StubPredictor(rule=rule),
        device_capability=None,
        compare_torchao_auto=False,
    )


@pytest.mark.parametrize(
    "rule, shard, split",
    [
        (lambda M, K, N: 1.5 if K >= N else 1.1, (1024, 4096), "K"),  # splitting K gains less
        (lambda M, K, N: 1.5 if N >= K else 1.1, (4096, 1024), "N"),  # splitting N gains less
    ],
)
def test_tensor_parallel_without_a_plan_predicts_the_slower_slice(rule, shard, split):
    """--tp, a layer no framework plan names (wq renamed `mix`: 4096 x 4096, tp 4): the slicing float8 gains
    less from, recorded with which dimension it splits."""
    from dataclasses import replace

    layers = llama_layers(1)
    renamed = replace(
        layers,
        layers=tuple(
            replace(layer, fqn="layers.0.attention.mix") if layer.fqn == "layers.0.attention.wq" else layer
            for layer in layers.layers
        ),
    )
    advice = _rowwise_at_tp4(renamed, rule)
    mix = next(layer for layer in advice.layers if layer.fqn == "layers.0.attention.mix")
    assert mix.shard == shard and mix.predicted_speedup == pytest.approx(1.1)
    assert mix.to_json()["shard"] == {"K": shard[0], "N": shard[1], "split": split}


@pytest.mark.parametrize(
    "rule", [lambda M, K, N: 1.5 if K >= N else 1.1, lambda M, K, N: 1.5 if N >= K else 1.1]
)
def test_tensor_parallel_follows_the_frameworks_plan(rule):
    """--tp 4 on torchtitan's names: wq and w1 column-parallel (N split), wo and w2 row-parallel (K split),
    whichever slicing the predictor favours."""
    advice = _rowwise_at_tp4(llama_layers(1), rule)
    by_name = {layer.fqn.rsplit(".", 1)[-1]: layer for layer in advice.layers}
    assert by_name["wq"].shard == (by_name["wq"].K, by_name["wq"].N // 4)
    assert by_name["w1"].shard == (by_name["w1"].K, by_name["w1"].N // 4)
    assert by_name["wo"].shard == (by_name["wo"].K // 4, by_name["wo"].N)
    assert by_name["w2"].shard == (by_name["w2"].K // 4, by_name["w2"].N)
