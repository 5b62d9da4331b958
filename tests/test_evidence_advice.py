"""What the evidence's intervals do to the advice: layers whose interval holds the threshold are marked
uncertain, the step speedup carries an interval and says what the uncertain layers put at stake, `--recipe
auto` ranks by predicted step speedup, and the JSON carries each of these as fields."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fp8advisor.advice.linears import decide_layers
from fp8advisor.advice.recipe_choice import NUMERICS, choose_recipe
from fp8advisor.cli.application import app
from fp8advisor.predict.speedup import LayerTimes, Prediction
from fp8advisor.recipes import FLOAT8_RECIPES, Recipe

LLAMA = "data/models/llama3.py:llama3_8b(n_layers=2)"
runner = CliRunner()


def _predictor(speedups: dict[int, float], interval: tuple[float, float] | None = (0.9, 1.2)):
    """Speedup by N (out_features), with `interval` as ratios of it; 1 ms of bf16 per call."""

    def predict(recipe, M, K, N):
        speedup = speedups.get(N, 1.5)
        span = None if interval is None else (speedup * interval[0], speedup * interval[1])
        prediction = Prediction(speedup, "evidence", "fitted", "test", interval=span)
        return LayerTimes(1e-3, 1e-3 / speedup, prediction, "modelled", "modelled")

    return predict


@pytest.fixture(scope="module")
def llama():
    from fp8advisor.inspect.layers import inspect_model

    return inspect_model(LLAMA, seq=2048)


def test_a_layer_whose_interval_holds_the_threshold_is_uncertain_and_decided_by_its_point(llama):
    # wk/wv (N = 1024): 1.02x, interval 0.92-1.22 holds 1.01; the others 1.5x, interval 1.35-1.8
    decided = decide_layers(llama.layers, Recipe.ROWWISE, _predictor({1024: 1.02}), 1.01, 1)
    by_name = {layer.fqn: layer for layer in decided if layer.predicted_speedup is not None}
    wk, wq = by_name["layers.0.attention.wk"], by_name["layers.0.attention.wq"]
    assert wk.uncertain and wk.convert  # the point prediction decides
    assert wk.speedup_interval == pytest.approx((1.02 * 0.9, 1.02 * 1.2))
    assert not wq.uncertain and wq.convert
    assert wk.to_json()["uncertain"] is True and wk.to_json()["speedup_interval"] == [0.918, 1.224]
    # below the threshold, still uncertain, kept in bf16
    decided = decide_layers(llama.layers, Recipe.ROWWISE, _predictor({1024: 1.0}), 1.01, 1)
    wk = next(layer for layer in decided if layer.fqn == "layers.0.attention.wk")
    assert wk.uncertain and not wk.convert
    # an interval that ends at the threshold does not hold it
    decided = decide_layers(llama.layers, Recipe.ROWWISE, _predictor({1024: 1.01}, (1.0, 1.2)), 1.01, 1)
    wk = next(layer for layer in decided if layer.fqn == "layers.0.attention.wk")
    assert wk.convert and not wk.uncertain
    # without intervals nothing is uncertain
    decided = decide_layers(llama.layers, Recipe.ROWWISE, _predictor({1024: 1.0}, None), 1.01, 1)
    assert not any(layer.uncertain for layer in decided)


def test_the_step_carries_the_interval_and_the_stake_of_the_uncertain_layers(llama):
    from fp8advisor.advice.decide import advise
    from fp8advisor.advice.step import StepConfig, StepGpu
    from fp8advisor.advice.step_comparison import step_report
    from fp8advisor.gpus import get_specs
    from fp8advisor.predict.selection import select_profile

    choice = select_profile("h100-evidence")
    predictor = _predictor({1024: 1.02})
    advice = advise(llama, choice, "rowwise", 1.01, predictor=predictor, device_capability=None)
    step = step_report(
        advice, llama, choice, StepGpu.of(get_specs("H100")), StepConfig(), predictor=predictor
    )
    low, high = step.intervals["advice"]
    assert low < step.speedup("advice") < high
    assert step.stake is not None
    assert set(step.stake.layers) == {f"layers.{i}.attention.{n}" for i in (0, 1) for n in ("wk", "wv")}
    # in float8 (1.02x) the step is faster than with them in bf16
    assert step.stake.with_float8_s < step.stake.with_bf16_s
    document = step.to_json()
    assert document["strategies"]["advice"]["step_speedup_interval"] == [round(low, 4), round(high, 4)]
    assert document["uncertain"]["layers"] == list(step.stake.layers)


def test_auto_ranks_the_recipes_by_predicted_step_speedup(llama):
    step_speedups = {Recipe.TENSORWISE: 1.10, Recipe.ROWWISE: 1.20, Recipe.ROWWISE_WITH_GW_HP: 1.15}

    def step_speedup(recipe, layers, groups):
        return step_speedups[recipe]

    # the Linear times say tensorwise (it gains most per layer); the step speedups say rowwise
    speedup_of = {Recipe.TENSORWISE: 1.6, Recipe.ROWWISE: 1.3, Recipe.ROWWISE_WITH_GW_HP: 1.2}

    def predictor(recipe, M, K, N):
        prediction = Prediction(speedup_of[recipe], "evidence", "fitted", "test")
        return LayerTimes(1e-3, 1e-3 / speedup_of[recipe], prediction, "modelled", "modelled")

    chosen, reason, options = choose_recipe(
        llama, None, predictor, 1.01, 1, FLOAT8_RECIPES, step_speedup=step_speedup
    )
    assert chosen is Recipe.ROWWISE
    assert "highest predicted step speedup" in reason and NUMERICS in reason
    assert {o.recipe: o.predicted_step_speedup for o in options} == step_speedups
    # without a step model: the lowest predicted Linear time
    chosen, reason, _ = choose_recipe(llama, None, predictor, 1.01, 1, FLOAT8_RECIPES)
    assert chosen is Recipe.TENSORWISE and "lowest predicted Linear time" in reason
    # among the recipes the framework supports only
    chosen, _, _ = choose_recipe(
        llama,
        None,
        predictor,
        1.01,
        1,
        (Recipe.TENSORWISE, Recipe.ROWWISE_WITH_GW_HP),
        step_speedup=step_speedup,
    )
    assert chosen is Recipe.ROWWISE_WITH_GW_HP


def test_suggest_json_carries_intervals_and_the_auto_ranking():
    result = runner.invoke(app, ["suggest", LLAMA, "--seq", "2048", "--gpu", "H100", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["profile"] == "h100-evidence"
    options = document["summary"]["recipe_options"]
    best = max(options, key=lambda o: o["predicted_step_speedup"])
    assert document["recipe"] == best["recipe"]
    layers = [layer for layer in document["layers"] if layer["predicted_speedup"] is not None]
    assert all(
        layer["speedup_interval"][0] < layer["predicted_speedup"] <= layer["speedup_interval"][1]
        for layer in layers
    )
    step = document["step"]["strategies"]["advice"]
    assert step["step_speedup_interval"][0] < step["step_speedup"] < step["step_speedup_interval"][1]


def test_the_current_configs_step_carries_its_interval(tmp_path):
    written = tmp_path / "float8.toml"
    args = ["suggest", LLAMA, "--seq", "8192", "--gpu", "H100"]
    assert runner.invoke(app, [*args, "--format", "torchtitan-toml", "-o", str(written)]).exit_code == 0
    result = runner.invoke(app, [*args, "--current", str(written), "--json"])
    assert result.exit_code == 0, result.output
    current = json.loads(result.stdout)["current"]
    low, high = current["step_speedup_interval"]
    assert low < current["speedup"] < high
