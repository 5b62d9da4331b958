"""Routed experts (MoE): each group decided as one, routers never converted, the imbalance range, the step
model and `suggest`'s section, on hand-built models (no tracing) with stub or roofline predictions."""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _advice_helpers import StubChoice, StubPredictor, layer, modelled_choice  # noqa: E402

from fp8advisor.advice.decide import advise  # noqa: E402
from fp8advisor.advice.experts import check_expert_imbalance, check_expert_parallel  # noqa: E402
from fp8advisor.errors import AdvisorError  # noqa: E402
from fp8advisor.inspect.records import ExpertForm, ExpertGemm, ExpertGroup, LayerStatus, ModelLayers  # noqa: E402
from fp8advisor.predict.speedup import GroupTimes  # noqa: E402
from fp8advisor.recipes import Recipe  # noqa: E402

TOKENS = 8192
HIDDEN, INTER, E, TOP_K = 2048, 1408, 64, 6


def _grouped_group(block: int, *, K=HIDDEN, N=INTER, M_total=TOKENS * TOP_K, top_k=TOP_K) -> ExpertGroup:
    base = f"layers.{block}.moe"
    gemms = (
        ExpertGemm("w1", K, N, (f"{base}.experts.w1",)),
        ExpertGemm("w2", N, K, (f"{base}.experts.w2",)),
        ExpertGemm("w3", K, N, (f"{base}.experts.w3",)),
    )
    return ExpertGroup(
        fqn=f"{base}.experts",
        cls="GroupedExperts",
        form=ExpertForm.GROUPED,
        n_experts=E,
        top_k=top_k,
        top_k_source=f"{base}.router.top_k" if top_k else "not shown",
        tokens=TOKENS,
        M_total=M_total,
        gemms=gemms,
        router=f"{base}.router.gate",
        shared=(f"{base}.shared_experts.w1",),
    )


def grouped_moe(blocks: int = 2, **group_kw) -> ModelLayers:
    """`blocks` MoE blocks: attention wq, a router Linear (N = E = 64, a multiple of 16), one shared expert
    Linear, and routed experts as 3-D grouped weights (GemmLayers that are not Linear)."""
    layers, groups = [], []
    for i in range(blocks):
        group = _grouped_group(i, **group_kw)
        groups.append(group)
        layers.append(layer(f"layers.{i}.attention.wq", HIDDEN, HIDDEN, TOKENS))
        layers.append(layer(f"layers.{i}.moe.router.gate", HIDDEN, E, TOKENS))
        layers.append(layer(f"layers.{i}.moe.shared_experts.w1", HIDDEN, INTER, TOKENS))
        for gemm in group.gemms:
            layers.append(
                replace(
                    layer(
                        gemm.fqns[0],
                        gemm.K,
                        gemm.N,
                        group.M_total or TOKENS,
                        LayerStatus.NOT_CONVERTIBLE,
                        is_linear=False,
                        reason="a 3-D expert weight: not an nn.Linear",
                    ),
                    expert_group=group.fqn,
                )
            )
    return ModelLayers("moe.py", 1, TOKENS, tuple(layers), expert_groups=tuple(groups))


def linear_list_moe(n_experts: int = 4, top_k: int = 2) -> ModelLayers:
    """One block whose experts are a ModuleList of Linears (w1: 1024 -> 512, w2: 512 -> 1024) at the
    balanced M per expert, and a router Linear with N = E."""
    M = TOKENS * top_k // n_experts
    w1 = tuple(f"moe.experts.{e}.w1" for e in range(n_experts))
    w2 = tuple(f"moe.experts.{e}.w2" for e in range(n_experts))
    layers = [layer("attn.wq", 1024, 1024, TOKENS), layer("moe.gate", 1024, n_experts, TOKENS)]
    for e in range(n_experts):
        layers.append(replace(layer(w1[e], 1024, 512, M), expert_group="moe.experts"))
        layers.append(replace(layer(w2[e], 512, 1024, M), expert_group="moe.experts"))
    group = ExpertGroup(
        "moe.experts",
        "ModuleList",
        ExpertForm.LINEAR_LIST,
        n_experts,
        top_k,
        "moe.top_k",
        TOKENS,
        TOKENS * top_k,
        (ExpertGemm("w1", 1024, 512, w1), ExpertGemm("w2", 512, 1024, w2)),
        router="moe.gate",
    )
    return ModelLayers("mixtral_like.py", 1, TOKENS, tuple(layers), expert_groups=(group,))


class StubExperts:
    """An `expert_predictor` stand-in: bf16 = 1 ms per GEMM of the group, float8 = bf16 / `speedup`."""

    def __init__(self, speedup=1.4, provenance="modelled", spread=None):
        self.speedup, self.provenance, self.spread = speedup, provenance, spread
        self.calls: list[tuple[str, float]] = []
        self.groups: list[ExpertGroup] = []  # the groups asked about, as the predictor saw them

    def __call__(self, group, imbalance, recipe):
        self.calls.append((group.fqn, imbalance))
        self.groups.append(group)
        bf16 = 1e-3 * len(group.gemms)
        spread = self.spread if imbalance > 1 else None
        return GroupTimes(bf16, bf16 / self.speedup, self.provenance, "modelled", "stub", spread)


def _advise(model, recipe="rowwise", **kwargs):
    kwargs.setdefault("predictor", StubPredictor())
    kwargs.setdefault("expert_predictor", StubExperts())
    kwargs.setdefault("device_capability", None)
    kwargs.setdefault("compare_torchao_auto", False)
    return advise(model, StubChoice(), recipe, **kwargs)


# --- the group decision -------------------------------------------------------------------------------------


def test_grouped_experts_convert_as_one_group_with_its_figures():
    advice = _advise(grouped_moe())
    assert [e.group for e in advice.experts] == ["layers.0.moe.experts", "layers.1.moe.experts"]
    first = advice.experts[0]
    assert first.convert and first.form == "grouped" and first.recipe == "rowwise"
    assert first.members == tuple(f"layers.0.moe.experts.{w}" for w in ("w1", "w2", "w3"))
    assert (first.n_experts, first.top_k, first.M_per_expert) == (E, TOP_K, TOKENS * TOP_K / E)
    assert first.bf16_time_s == pytest.approx(3e-3) and first.float8_time_s == pytest.approx(3e-3 / 1.4)
    assert first.predicted_speedup == pytest.approx(1.4)
    assert first.reason == "predicted 1.40x >= 1.01 (grouped rowwise)"
    assert advice.converted_expert_groups == advice.experts
    # the 3-D weights are not Linear layers: no Linear converter touches them, the group decision does
    assert not any(layer.convert for layer in advice.layers if ".experts." in layer.fqn)


def test_group_below_the_threshold_stays_bf16():
    advice = _advise(grouped_moe(), expert_predictor=StubExperts(speedup=1.04), min_speedup=1.05)
    assert not any(e.convert for e in advice.experts)
    assert advice.experts[0].reason == "predicted 1.04x < 1.05 (grouped rowwise)"
    assert advice.strategy("advice").expert_groups == ()


def test_a_gemm_not_divisible_by_16_keeps_the_whole_group_bf16():
    advice = _advise(grouped_moe(N=1400), expert_predictor=StubExperts(speedup=3.0))
    (first, _) = advice.experts
    assert not first.convert
    assert first.reason.startswith("K or N not divisible by 16 (w1 2048x1400, w2 1400x2048")
    assert advice.strategy("all_convertible").expert_groups == ()


def test_unknown_M_per_expert_is_not_converted_and_top_k_unknown_is_warned():
    advice = _advise(grouped_moe(M_total=None, top_k=None))
    first = advice.experts[0]
    assert not first.convert and first.predicted_speedup is None and first.M_per_expert is None
    assert first.reason == "M per expert unknown (top_k unknown and the dispatch did not trace)"
    assert any(w.startswith("top_k unknown for 2 expert group(s)") for w in advice.warnings)


def test_small_M_per_expert_is_warned():
    advice = _advise(grouped_moe(M_total=E * 8))
    assert any(w.startswith("M per expert below 16 (8.0)") for w in advice.warnings)
    assert not any("below 16" in w for w in _advise(grouped_moe()).warnings)


def test_router_is_never_converted_even_with_N_a_multiple_of_16():
    # the stub predicts 2x for the router's (M, K, N): it would convert on its own figures
    predictor = StubPredictor(rule=lambda M, K, N: 2.0)
    advice = _advise(grouped_moe(), predictor=predictor)
    router = next(layer for layer in advice.layers if layer.fqn == "layers.0.moe.router.gate")
    assert router.N == 64 and router.predicted_speedup == pytest.approx(2.0)
    assert not router.convert and router.reason == "MoE router: N = E = 64, never converted"
    assert "layers.0.moe.router.gate" not in advice.strategy("all_convertible").converted
    # shared experts stay ordinary Linears, decided on their own figures
    shared = next(layer for layer in advice.layers if layer.fqn == "layers.0.moe.shared_experts.w1")
    assert shared.convert and shared.reason == "predicted 2.00x >= 1.01"
    assert not any("router" in fqn for fqn in advice.filter_list.converted)


def test_linear_list_members_follow_their_group_decision():
    model = linear_list_moe()
    # w1 (1024x512) alone would lose (0.9x), w2 (512x1024) wins (1.5x): the group decides for both
    rule = lambda M, K, N: 0.9 if N == 512 else 1.5  # noqa: E731
    advice = _advise(model, predictor=StubPredictor(rule=rule))
    (group,) = advice.experts
    bf16_w1 = 6 * 4096 * 1024 * 512 / 1e15  # StubPredictor: bf16 = 6 M K N / 1e15, M = 8192 x 2 / 4
    expected = (4 * bf16_w1 * 2) / (4 * bf16_w1 / 0.9 + 4 * bf16_w1 / 1.5)
    assert group.predicted_speedup == pytest.approx(expected)  # 1.125x
    assert group.convert and group.recipe == "rowwise" and group.form == "linear_list"
    members = set(model.expert_groups[0].member_fqns)
    decided = {layer.fqn: layer for layer in advice.layers}
    assert all(decided[fqn].convert for fqn in members)
    assert all(decided[fqn].M == 4096 for fqn in members)  # each keeps its per-expert M
    assert decided["moe.experts.0.w1"].reason.startswith(
        "routed experts moe.experts decided as one: predicted"
    )
    assert not decided["moe.gate"].convert
    # the filter list converts exactly the group (and the other advised Linears)
    assert set(advice.filter_list.converted) == members | {"attn.wq"}

    losing = _advise(model, predictor=StubPredictor(rule=lambda M, K, N: 0.9 if N == 512 else 1.05))
    assert not losing.experts[0].convert
    assert not any(layer.convert for layer in losing.layers if layer.fqn in members)  # w2 alone would convert


def test_linear_list_range_uses_the_linear_predictor_at_routed_rows():
    model = linear_list_moe(n_experts=4, top_k=2)
    rule = lambda M, K, N: 1.0 + M / 10000  # noqa: E731
    advice = _advise(model, predictor=StubPredictor(rule=rule), expert_imbalance=2.0)
    low, high = advice.experts[0].speedup_range
    # balanced: every expert at M = 4096; at imbalance 2: one at 8192, three at 8192 x 2 / 3 ... rows
    balanced = 1 + 4096 / 10000
    assert low == pytest.approx(balanced, rel=1e-3)  # the speedup grows with the busiest expert's share
    busiest, rest = 8192, round(4096 * (4 - 2) / 3)
    bf16 = [busiest, rest, rest, rest]  # bf16 time is proportional to M (same K x N)
    at_two = sum(bf16) / sum(m / (1 + m / 10000) for m in bf16)
    assert high == pytest.approx(at_two, rel=1e-6)


def test_imbalance_range_with_the_roofline():
    advice = advise(
        grouped_moe(blocks=1),
        modelled_choice(),
        "rowwise",
        expert_imbalance=4.0,
        device_capability=None,
        compare_torchao_auto=False,
    )
    (group,) = advice.experts
    assert group.provenance == "modelled" and group.how == "modelled"
    low, high = group.speedup_range
    assert low <= group.predicted_speedup <= high and low < high
    balanced = advise(grouped_moe(blocks=1), modelled_choice(), "rowwise", device_capability=None)
    assert balanced.experts[0].speedup_range is None
    assert balanced.experts[0].predicted_speedup == pytest.approx(group.predicted_speedup)
    assert any("grouped roofline model" in w for w in advice.warnings)


@pytest.mark.parametrize("bad", [0.5, 0.0, -1.0, math.nan, math.inf, "two"])
def test_bad_imbalance_is_one_clear_error(bad):
    with pytest.raises(AdvisorError, match="--expert-imbalance must be a number >= 1.0"):
        check_expert_imbalance(bad)
    with pytest.raises(AdvisorError, match="--expert-imbalance"):
        _advise(grouped_moe(), expert_imbalance=bad)


def test_linear_recipe_other_than_rowwise_is_said():
    advice = _advise(grouped_moe(), recipe="tensorwise")
    assert advice.experts[0].recipe == "rowwise"
    assert any("rowwise only, whatever the Linear recipe (tensorwise)" in note for note in advice.notes)
    assert not any("rowwise only" in note for note in _advise(grouped_moe()).notes)


def test_tensor_parallel_note_says_experts_are_not_sharded():
    advice = _advise(grouped_moe(), tensor_parallel=2)
    assert any("tensor-parallel expert shards are not modelled" in n for n in advice.notes)


def test_strategies_and_the_speedup_counting_the_experts():
    advice = _advise(grouped_moe(blocks=1), expert_predictor=StubExperts(speedup=2.0))
    groups = ("layers.0.moe.experts",)
    assert advice.strategy("advice").expert_groups == groups
    assert advice.strategy("all_convertible").expert_groups == groups
    linear = [layer for layer in advice.layers if layer.counts_in_linear_time]
    linear_bf16 = sum(layer.bf16_time_s for layer in linear)
    advised = sum(layer.float8_time_s if layer.convert else layer.bf16_time_s for layer in linear)
    expected = (linear_bf16 + 3e-3) / (advised + 3e-3 / 2.0)
    assert advice.gemm_speedup_with_experts(advice.strategy("advice")) == pytest.approx(expected)
    assert advice.experts_share == pytest.approx(3e-3 / (3e-3 + linear_bf16))
    data = advice.to_json()
    assert data["experts"][0]["E"] == E and data["experts"][0]["convert"] is True
    assert data["expert_imbalance"] == 1.0
    with_experts = data["summary"]["with_grouped_experts"]
    assert with_experts["gemm_speedup"]["advice"] == pytest.approx(expected, abs=1e-4)


def test_dense_model_has_no_expert_output():
    from _advice_helpers import llama_layers

    advice = _advise(llama_layers(2))
    assert advice.experts == () and advice.experts_share is None
    assert advice.to_json()["summary"]["with_grouped_experts"] is None


# --- the step model -----------------------------------------------------------------------------------------


def _census():
    from fp8advisor.inspect.census import OpCensus

    return OpCensus(tokens=TOKENS, attention=(), matmuls=(), regions=(), output_shape=None, complete=True)


def test_step_counts_grouped_experts_once_per_strategy():
    from fp8advisor.advice.step import Calibration, StepConfig, StepGpu
    from fp8advisor.advice.step_comparison import step_report
    from fp8advisor.gpus import GpuSpecs

    model = replace(grouped_moe(blocks=1), census=_census(), parameter_count=0)
    advice = _advise(model, expert_predictor=StubExperts(speedup=2.0), compare_torchao_auto=True)
    gpu = StepGpu.of(GpuSpecs("TEST", 1e12, 2e12, 1e9, 1.0, 1.0, kernel_floor_s=0.0))
    report = step_report(
        advice, model, StubChoice(), gpu, StepConfig(), Calibration(1.0, "none"), break_even_target=None
    )
    bf16, chosen = report.baseline, report.prediction("advice")
    assert bf16.term("experts_bf16").seconds == pytest.approx(3e-3)
    assert bf16.term("experts_float8").seconds == 0.0
    assert chosen.term("experts_float8").seconds == pytest.approx(1.5e-3)
    assert chosen.term("experts_bf16").seconds == 0.0
    assert chosen.expert_groups == 1 and bf16.expert_groups == 0
    # the Linear terms hold only the Linear layers (the 3-D weights have no Linear time): no double count
    linear = [layer for layer in advice.layers if layer.counts_in_linear_time]
    assert bf16.term("linear_bf16").seconds == pytest.approx(sum(layer.bf16_time_s for layer in linear))
    assert bf16.step_s == pytest.approx(sum(layer.bf16_time_s for layer in linear) + 3e-3)
    # torchao's auto filter sees Linear modules only: the experts stay bf16 there
    torchao = report.prediction("torchao_auto")
    assert torchao.term("experts_bf16").seconds == pytest.approx(3e-3)
    every = report.prediction("all_convertible")
    assert every.term("experts_float8").seconds == pytest.approx(1.5e-3)


def test_step_full_ac_recomputes_the_experts_forward():
    from fp8advisor.advice.step import (
        LINEAR_FORWARD_SHARE,
        Calibration,
        Checkpointing,
        StepConfig,
        StepGpu,
        predict_step,
    )
    from fp8advisor.gpus import GpuSpecs

    model = replace(grouped_moe(blocks=1), census=_census(), parameter_count=0)
    advice = _advise(model, expert_predictor=StubExperts(speedup=2.0))
    gpu = StepGpu.of(GpuSpecs("TEST", 1e12, 2e12, 1e9, 1.0, 1.0, kernel_floor_s=0.0))
    common = dict(gpu=gpu, config=StepConfig(ac=Checkpointing.FULL), calibration=Calibration(1.0, "none"))
    plain = predict_step("a", "a", model, [], (), **common)
    with_experts = predict_step(
        "a", "a", model, [], (), experts=advice.experts, converted_experts=["layers.0.moe.experts"], **common
    )
    assert plain.term("recompute").seconds == 0.0
    assert with_experts.term("recompute").seconds == pytest.approx(LINEAR_FORWARD_SHARE * 1.5e-3)


def test_break_even_rescales_the_expert_groups():
    from fp8advisor.advice.step_comparison import scale_layers

    model = grouped_moe(blocks=1)
    scaled = scale_layers(model, 2 * TOKENS)
    assert scaled.expert_groups[0].M_total == 2 * TOKENS * TOP_K
    assert scaled.expert_groups[0].M_per_expert == 2 * TOKENS * TOP_K / E


# --- suggest ------------------------------------------------------------------------------------------------


@pytest.fixture
def moe_world(monkeypatch):
    import fp8advisor.inspect.layers
    import fp8advisor.predict.selection

    model = replace(grouped_moe(blocks=3), census=_census(), parameter_count=10**9)
    monkeypatch.setattr(fp8advisor.inspect.layers, "inspect_model", lambda target, **kw: model)
    monkeypatch.setattr(
        fp8advisor.predict.selection, "select_profile", lambda requested=None, **kw: modelled_choice()
    )
    monkeypatch.setattr("fp8advisor.advice.caveats._detect_capability", lambda: None)
    return model


def _suggest(*args):
    from typer.testing import CliRunner

    from fp8advisor.cli import app

    return CliRunner().invoke(app, ["suggest", "moe.py", "--recipe", "rowwise", *args], env={"COLUMNS": "80"})


def test_suggest_prints_the_routed_experts_section(moe_world):
    result = _suggest("--expert-imbalance", "2")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("Routed experts"))
    assert "imbalance up to 2" in lines[title] + lines[title + 1]
    legend = next(i for i, line in enumerate(lines) if line.startswith("~ modelled: the grouped roofline"))
    assert all(len(line) <= 80 for line in lines[title : legend + 3])  # the section, its legend wrapped
    row = next(line for line in lines[title:] if line.startswith("layers.{0..2}.moe.experts"))
    assert re.fullmatch(r"\d+\.\d\d-\d+\.\d\d", row.split()[-2])  # the range column, before the decision
    assert " 3 " in row and " 64 " in row and "768" in row and "~" in row  # n, E, M per expert, modelled
    assert "float8" in row or "bf16" in row
    assert "(routed experts' grouped GEMMs excluded)" in " ".join(line.strip() for line in lines)
    share = next(i for i, line in enumerate(lines) if line.startswith("routed experts: "))
    assert "%~ of the predicted bf16 GEMM time" in lines[share] and len(lines[share]) <= 80
    assert any(line.strip().startswith("experts bf16") for line in lines)  # the step's terms


def test_suggest_json_carries_the_experts(moe_world):
    result = _suggest("--json", "--expert-imbalance", "1.5")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [e["group"] for e in data["experts"]] == [f"layers.{i}.moe.experts" for i in range(3)]
    first = data["experts"][0]
    assert first["provenance"] == "modelled" and first["recipe"] == "rowwise"
    low, high = first["speedup_range"]
    assert low <= first["predicted_speedup"] <= high
    assert data["expert_imbalance"] == 1.5
    assert (first["E"], first["top_k"], first["M_per_expert"]) == (E, TOP_K, TOKENS * TOP_K / E)
    assert (first["M_total"], first["tokens"]) == (TOKENS * TOP_K, TOKENS)
    assert "M_total" in first["per_gpu"] and "tokens" in first["per_gpu"]


def test_suggest_json_experts_under_ep_are_one_gpus(moe_world):
    first = json.loads(_suggest("--json", "--ep", "4").output)["experts"][0]
    # a GPU's 16 experts receive, balanced, the same tokens x top_k rows from the 4 GPUs' tokens
    assert (first["E"], first["E_local"], first["M_total"]) == (E, E // 4, TOKENS * TOP_K)
    assert first["M_per_expert"] == TOKENS * TOP_K / (E // 4)


def test_suggest_says_the_imbalance_is_clamped_to_E(moe_world):
    result = _suggest("--expert-imbalance", "300")
    assert result.exit_code == 0, result.output
    assert f"imbalance up to 300, clamped to E = {E})" in " ".join(result.output.split())
    per_gpu = _suggest("--expert-imbalance", "300", "--ep", "4")
    assert f"imbalance up to 300, clamped to E per GPU = {E // 4})" in " ".join(per_gpu.output.split())
    unclamped = _suggest("--expert-imbalance", "2")
    assert "clamped" not in unclamped.output


def test_experts_share_line_marks_its_figures_modelled_even_with_measured_speedups():
    from fp8advisor.cli.suggest_view import _experts_share_line

    model = grouped_moe(blocks=1)
    advice = _advise(model, expert_predictor=StubExperts(speedup=2.0, provenance="measured"))
    line = _experts_share_line(advice)
    assert re.match(r"routed experts: \d+%~ of the predicted bf16 GEMM time", line)
    assert re.search(r"this advice \d+\.\d\dx~", line)


def test_step_experts_float8_seconds_are_modelled_whatever_the_speedups_provenance():
    from fp8advisor.advice.step import Calibration, StepConfig, StepGpu
    from fp8advisor.advice.step_comparison import step_report
    from fp8advisor.gpus import GpuSpecs

    model = replace(grouped_moe(blocks=1), census=_census(), parameter_count=0)
    advice = _advise(model, expert_predictor=StubExperts(speedup=2.0, provenance="measured"))
    gpu = StepGpu.of(GpuSpecs("TEST", 1e12, 2e12, 1e9, 1.0, 1.0, kernel_floor_s=0.0))
    report = step_report(
        advice, model, StubChoice(), gpu, StepConfig(), Calibration(1.0, "none"), break_even_target=None
    )
    term = report.prediction("advice").term("experts_float8")
    assert (
        term.seconds > 0 and term.provenance == "modelled"
    )  # the grouped roofline's bf16 / a measured speedup


def test_step_says_which_expert_groups_it_leaves_out():
    from fp8advisor.advice.step import Calibration, StepConfig, StepGpu
    from fp8advisor.advice.step_comparison import step_report
    from fp8advisor.gpus import GpuSpecs

    model = replace(grouped_moe(blocks=1, M_total=None, top_k=None), census=_census(), parameter_count=0)
    advice = _advise(model)
    assert advice.experts[0].predicted_speedup is None
    gpu = StepGpu.of(GpuSpecs("TEST", 1e12, 2e12, 1e9, 1.0, 1.0, kernel_floor_s=0.0))
    report = step_report(
        advice, model, StubChoice(), gpu, StepConfig(), Calibration(1.0, "none"), break_even_target=None
    )
    note = next(note for note in report.notes if "left out of every step" in note)
    assert "layers.0.moe.experts: M per expert unknown" in note


@pytest.mark.parametrize("bad", ["0.5", "nan"])
def test_suggest_refuses_a_bad_imbalance(moe_world, bad):
    result = _suggest("--expert-imbalance", bad)
    assert result.exit_code == 2
    assert result.output.count("--expert-imbalance must be a number >= 1.0") == 1


def test_recipe_choice_follows_expert_groups():
    advice = _advise(linear_list_moe(), recipe="auto", predictor=StubPredictor(rule=lambda M, K, N: 1.5))
    assert advice.recipe in Recipe
    members = set(linear_list_moe().expert_groups[0].member_fqns)
    assert members <= set(advice.convert_fqns)


# --- expert parallelism (--ep) ------------------------------------------------------------------------------


def test_expert_parallel_predicts_the_local_experts_of_one_gpu():
    """--ep 4 on E = 64: each GPU holds 16 experts; after the all-to-all it multiplies the routed rows of 4
    GPUs' tokens, tokens x top_k = 8192 x 6 = 49152 per GEMM (balanced), 49152 / 16 = 3072 per expert."""
    experts = StubExperts()
    advice = _advise(grouped_moe(), expert_parallel=4, expert_predictor=experts)
    assert {(g.n_experts, g.M_total) for g in experts.groups} == {(16, 49152)}
    first = advice.experts[0]
    assert (first.n_experts, first.E_local, first.M_per_expert) == (64, 16, 3072.0)
    data = advice.to_json()
    assert data["expert_parallel"] == 4
    assert (data["experts"][0]["E"], data["experts"][0]["E_local"], data["experts"][0]["M_per_expert"]) == (
        64,
        16,
        3072.0,
    )
    one = _advise(grouped_moe()).to_json()
    assert one["expert_parallel"] == 1
    assert (one["experts"][0]["E_local"], one["experts"][0]["M_per_expert"]) == (64, 768.0)
    # the dense Linear layers do not depend on P
    assert [layer.to_json() for layer in advice.layers] == [
        layer.to_json() for layer in _advise(grouped_moe()).layers
    ]
    assert any(
        "--ep 4: routed experts are predicted per GPU" in n and "bf16 tokens" in n for n in advice.notes
    )
    assert not any("--ep" in n for n in _advise(grouped_moe()).notes)


def _deepseek_like(blocks: int = 1) -> ModelLayers:
    """DeepSeek-V3's routed experts at seq 8192: E = 256, top 8, w1/w3 7168 -> 2048, w2 2048 -> 7168."""
    model = grouped_moe(blocks=blocks, K=7168, N=2048, M_total=TOKENS * 8, top_k=8)
    groups = tuple(replace(group, n_experts=256) for group in model.expert_groups)
    return replace(model, expert_groups=groups)


def _grouped_roofline_speedup(E_local: int, M_per_expert: float) -> float:
    """By hand: the grouped roofline's bf16 / float8 time over w1, w2, w3 of E_local experts, balanced."""
    from fp8advisor.gpus import GPU_SPECS
    from fp8advisor.predict.roofline import grouped_fwd_bwd_time_s

    rows = [M_per_expert] * E_local
    shapes = [(7168, 2048), (2048, 7168), (7168, 2048)]
    bf16 = sum(grouped_fwd_bwd_time_s(rows, K, N, "bf16", GPU_SPECS["H100"]) for K, N in shapes)
    float8 = sum(grouped_fwd_bwd_time_s(rows, K, N, "rowwise", GPU_SPECS["H100"]) for K, N in shapes)
    return bf16 / float8


def test_expert_parallel_flips_the_deepseek_v3_experts_to_float8():
    """At one GPU each of the 256 experts gets 8192 x 8 / 256 = 256 rows and float8 casts all 256 experts'
    weights: bf16. At --ep 32 a GPU holds 8 experts at 8192 x 8 x 32 / 256 = 8192 rows each: float8."""
    kwargs = dict(device_capability=None, compare_torchao_auto=False)
    alone = advise(_deepseek_like(), modelled_choice(), "rowwise", **kwargs).experts[0]
    wide = advise(_deepseek_like(), modelled_choice(), "rowwise", expert_parallel=32, **kwargs).experts[0]
    assert (alone.E_local, alone.M_per_expert, wide.E_local, wide.M_per_expert) == (None, 256, 8, 8192)
    assert alone.predicted_speedup == pytest.approx(_grouped_roofline_speedup(256, 256), rel=1e-9)
    assert wide.predicted_speedup == pytest.approx(_grouped_roofline_speedup(8, 8192), rel=1e-9)
    assert alone.predicted_speedup < 0.6 and not alone.convert  # 0.50x modelled on the H100
    assert wide.predicted_speedup > 1.1 and wide.convert  # 1.18x


def test_expert_parallel_imbalance_range_is_over_the_local_experts():
    """--expert-imbalance 2 at --ep 4: the busiest of the 16 local experts gets 2 x 3072 rows, the other 15
    share the rest (`routed_rows(49152, 16, f)`), sampled from 1 to 2 as without EP."""
    from fp8advisor.gpus import GPU_SPECS
    from fp8advisor.predict.roofline import grouped_fwd_bwd_time_s, routed_rows
    from fp8advisor.predict.speedup import IMBALANCE_SAMPLES

    advice = advise(
        grouped_moe(blocks=1),
        modelled_choice(),
        "rowwise",
        expert_imbalance=2.0,
        expert_parallel=4,
        device_capability=None,
        compare_torchao_auto=False,
    )
    shapes = [(HIDDEN, INTER), (INTER, HIDDEN), (HIDDEN, INTER)]
    speedups = []
    for i in range(IMBALANCE_SAMPLES):
        rows = routed_rows(TOKENS * TOP_K, 16, 2.0 ** (i / (IMBALANCE_SAMPLES - 1)))
        bf16 = sum(grouped_fwd_bwd_time_s(rows, K, N, "bf16", GPU_SPECS["H100"]) for K, N in shapes)
        float8 = sum(grouped_fwd_bwd_time_s(rows, K, N, "rowwise", GPU_SPECS["H100"]) for K, N in shapes)
        speedups.append(bf16 / float8)
    assert advice.experts[0].speedup_range == pytest.approx((min(speedups), max(speedups)), rel=1e-9)
    # one expert per GPU: no spread between local experts to model
    single = advise(
        grouped_moe(blocks=1), modelled_choice(), "rowwise", expert_imbalance=2.0, expert_parallel=64
    )
    assert single.experts[0].E_local == 1 and single.experts[0].speedup_range is None


def test_expert_parallel_linear_list_is_predicted_at_the_local_rows():
    """A ModuleList of 4 experts at --ep 2: 2 per GPU, each at 8192 x 2 x 2 / 4 = 8192 rows (4096 without)."""
    rule = lambda M, K, N: 1.0 + M / 10000  # noqa: E731
    predictor = StubPredictor(rule=rule)
    advice = _advise(linear_list_moe(n_experts=4, top_k=2), predictor=predictor, expert_parallel=2)
    (group,) = advice.experts
    assert (group.E_local, group.M_per_expert) == (2, 8192)
    assert group.predicted_speedup == pytest.approx(1.8192)  # both GEMMs at M = 8192
    assert group.bf16_time_s == pytest.approx(2 * 6 * 8192 * 1024 * 512 * 2 / 1e15)  # 2 experts x 2 GEMMs
    assert ("rowwise", 8192, 1024, 512) in predictor.calls
    one = _advise(linear_list_moe(n_experts=4, top_k=2), predictor=StubPredictor(rule=rule))
    assert one.experts[0].predicted_speedup == pytest.approx(1.4096)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (0, "--ep must be 1 or more, not 0"),
        (-2, "--ep must be 1 or more, not -2"),
        (3, "--ep 3 does not divide the 64 experts of layers.0.moe.experts"),
        (128, "--ep 128 does not divide the 64 experts of layers.0.moe.experts"),
    ],
)
def test_bad_expert_parallel_is_one_clear_error(bad, message):
    with pytest.raises(AdvisorError, match=re.escape(message)):
        check_expert_parallel(bad, grouped_moe().expert_groups)
    with pytest.raises(AdvisorError, match=re.escape(message)):
        _advise(grouped_moe(), expert_parallel=bad)


def test_expert_parallel_on_a_dense_model_has_no_effect_and_says_so():
    from _advice_helpers import llama_layers

    advice = _advise(llama_layers(2), expert_parallel=8)
    assert advice.expert_parallel == 8 and advice.experts == ()
    assert any("--ep 8 has no effect: the model has no routed experts" in n for n in advice.notes)


def test_step_prices_the_experts_per_gpu_and_its_break_even_keeps_P(monkeypatch):
    """The step's expert terms are the per-GPU grouped roofline times (16 local experts at 3072 rows), and
    the break-even re-decides the experts with the same --ep."""
    import fp8advisor.advice.step_comparison as step_comparison_module
    from fp8advisor.advice.step import Calibration, StepConfig, StepGpu
    from fp8advisor.advice.step_comparison import step_report
    from fp8advisor.gpus import GPU_SPECS, GpuSpecs
    from fp8advisor.predict.roofline import grouped_fwd_bwd_time_s

    model = replace(grouped_moe(blocks=1), census=_census(), parameter_count=0)
    advice = advise(model, modelled_choice(), "rowwise", expert_parallel=4, device_capability=None)
    rows = [3072] * 16
    shapes = [(HIDDEN, INTER), (INTER, HIDDEN), (HIDDEN, INTER)]
    bf16 = sum(grouped_fwd_bwd_time_s(rows, K, N, "bf16", GPU_SPECS["H100"]) for K, N in shapes)
    assert advice.experts[0].bf16_time_s == pytest.approx(bf16, rel=1e-9)
    recorder = StubExperts()
    monkeypatch.setattr(step_comparison_module, "default_expert_predictor", lambda choice: recorder)
    gpu = StepGpu.of(GpuSpecs("TEST", 1e12, 2e12, 1e9, 1.0, 1.0, kernel_floor_s=0.0))
    report = step_report(advice, model, modelled_choice(), gpu, StepConfig(), Calibration(1.0, "none"))
    assert report.baseline.term("experts_bf16").seconds == pytest.approx(bf16, rel=1e-9)
    assert recorder.groups and all(g.n_experts == 16 for g in recorder.groups)  # the break-even's decisions
    assert any("per GPU under --ep 4" in note for note in report.notes)


def test_suggest_shows_and_writes_the_expert_parallel_degree(moe_world, tmp_path):
    from fp8advisor.frameworks.header import read_header

    result = _suggest("--ep", "4")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("Routed experts"))
    assert "per GPU, --ep 4" in lines[title] + lines[title + 1]
    header = next(line for line in lines[title:] if line.split()[:1] == ["experts"])
    assert header.split()[:6] == ["experts", "n", "E", "E/GPU", "k", "M/exp"]
    row = next(line for line in lines[title:] if line.startswith("layers.{0..2}.moe.experts"))
    assert row.split()[1:6] == ["3", "64", "16", "6", "3072"]  # n, E, E/GPU, k, M per expert per GPU
    legend = next(i for i, line in enumerate(lines) if line.startswith("~ modelled: the grouped roofline"))
    assert all(len(line) <= 80 for line in lines[title : legend + 3])
    data = json.loads(_suggest("--ep", "4", "--json").output)
    assert data["expert_parallel"] == 4 and data["experts"][0]["E_local"] == 16
    path = tmp_path / "job.py"
    assert _suggest("--ep", "4", "--format", "torchtitan-py", "-o", str(path)).exit_code == 0
    text = path.read_text()
    assert "expert parallel: 4" in text and "--ep 4 --format torchtitan-py" in text
    assert "E 64 (16 per GPU, --ep 4), top_k 6, 3072 rows per expert" in " ".join(
        text.replace("#", "").split()
    )
    assert read_header(text).request.expert_parallel == 4
    assert _suggest("--ep", "4", "--format", "torchtitan-py", "--check", str(path)).exit_code == 0
    assert _suggest("--ep", "2", "--format", "torchtitan-py", "--check", str(path)).exit_code == 1
    path.write_text(text.replace("--ep 4 ", ""))
    header = read_header(path.read_text())
    assert header.written()["expert_parallel"] is None and header.request.expert_parallel == 1


@pytest.mark.parametrize(
    ("bad", "message"), [("0", "--ep must be 1 or more"), ("5", "--ep 5 does not divide")]
)
def test_suggest_refuses_a_bad_expert_parallel_degree(moe_world, bad, message):
    result = _suggest("--ep", bad)
    assert result.exit_code == 2
    assert result.output.count(message) == 1
