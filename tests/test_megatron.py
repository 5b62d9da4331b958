"""--format megatron: the precision config, matched with Megatron's own rule against Megatron's module names,
runs exactly the advised float8 set; fused GEMMs are decided as one; the positional flags and their losses;
the header; models that cannot be named."""

from __future__ import annotations

import fnmatch
import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from _advice_helpers import LLAMA_BLOCK, StubChoice, StubPredictor, layer, prefix_conflict_layers  # noqa: E402

from fp8advisor.advice.decide import advise  # noqa: E402
from fp8advisor.emit import megatron  # noqa: E402
from fp8advisor.emit.config_file import render, write  # noqa: E402
from fp8advisor.errors import ConfigError  # noqa: E402
from fp8advisor.frameworks import reader as configs  # noqa: E402
from fp8advisor.frameworks.formats import ConfigFormat  # noqa: E402
from fp8advisor.inspect.records import ModelLayers  # noqa: E402
from fp8advisor.request import SuggestRequest  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "megatron_gpt_llama_4_layers.txt"
#: Megatron-LM core_v0.16.0: the classes with `finish_init`, whose paths the precision config is matched to.
TE_LINEAR = {
    "TELinear",
    "TEColumnParallelLinear",
    "TERowParallelLinear",
    "TELayerNormColumnParallelLinear",
    "TEGroupedLinear",
    "TEColumnParallelGroupedLinear",
    "TERowParallelGroupedLinear",
}
#: TEQuantizationRecipe's fields (megatron/core/extensions/transformer_engine.py): any other key is refused.
RECIPE_FIELDS = {
    "fp8_quantization_recipe",
    "fp4_quantization_recipe",
    "custom_recipe_factory",
    "fp8_format",
    "override_quantized_autocast",
    "override_nonquantized_autocast",
    "tp_only_amax_red",
}
HF_NAMES = {
    "attention.wq": "self_attn.q_proj",
    "attention.wk": "self_attn.k_proj",
    "attention.wv": "self_attn.v_proj",
    "attention.wo": "self_attn.o_proj",
    "feed_forward.w1": "mlp.gate_proj",
    "feed_forward.w3": "mlp.up_proj",
    "feed_forward.w2": "mlp.down_proj",
}


def _fixture_modules() -> list[tuple[str, str]]:
    rows = []
    for line in FIXTURE.read_text().splitlines():
        if line and not line.startswith("#"):
            name, cls = line.split("\t")
            rows.append(("" if name == "(root)" else name, cls))
    return rows


def megatron_runs_in_float8(document: dict, modules: list[tuple[str, str]]) -> set[str]:
    """The module paths Megatron-LM core_v0.16.0 runs in float8 with `--fp8-format` set, no
    --first-last-layers-bf16, and this precision config, written here from its source, not from fp8advisor:

    RecipeConfig._build_matchers keeps the enabled matchers in file order (type glob needs pattern and
    config); match_to_config_key returns the first whose fnmatch.fnmatch(module_path, pattern) is true;
    GPTModel matches only modules with finish_init (the TE linears); TEQuantizationParams.parse_from_config
    checks the config; in a quantized context a config with a recipe runs float8, an empty training_recipe
    bf16 (override_quantized_autocast defaults to true); no match keeps the context's float8."""
    matchers = []
    for matcher in document["matchers"].values():
        if not matcher.get("enabled", False):
            continue
        assert matcher["type"] == "glob" and matcher["pattern"] is not None and matcher["config"] is not None
        matchers.append((matcher["pattern"], matcher["config"]))
    float8 = set()
    for path, cls in modules:
        if cls not in TE_LINEAR:
            continue  # no finish_init: output_layer (ColumnParallelLinear) and the rest never run in float8
        key = next((config for pattern, config in matchers if fnmatch.fnmatch(path, pattern)), None)
        if key is None:
            float8.add(path)
            continue
        config = document["configs"][key]
        assert config["transformer_engine_config_type"] == "TEQuantizationParams"
        assert set(config) == {"transformer_engine_config_type", "training_recipe"}
        recipe = config["training_recipe"]
        assert set(recipe) <= RECIPE_FIELDS
        assert recipe.get("fp8_quantization_recipe") != "delayed"  # refused per module
        assert recipe.get("override_quantized_autocast", True)
        if recipe.get("fp8_quantization_recipe") is not None:
            float8.add(path)
    return float8


def _model(names=None, M=None, n_layers=4, head="output") -> ModelLayers:
    """A Llama-3-8B-shaped model of `n_layers` layers; `names` renames the Linear inside a block, `M` gives
    each layer its own rows per call (default 8192)."""
    names = names or {}
    rows = M or [8192] * n_layers
    layers = [
        layer(f"{prefix}layers.{i}.{names.get(name, name)}", K, N, rows[i])
        for i in range(n_layers)
        for prefix in [("model." if names else "")]
        for name, (K, N) in LLAMA_BLOCK.items()
    ]
    layers.append(layer(head, 4096, 128256, 8192))
    return ModelLayers("llama_like.py", 1, 8192, tuple(layers))


def _advice(model, rule, recipe="tensorwise"):
    return advise(
        model,
        StubChoice(),
        recipe,
        predictor=StubPredictor(rule=rule),
        device_capability=None,
        compare_torchao_auto=False,
    )


def _document(text: str) -> dict:
    return yaml.safe_load(text)


REQUEST = SuggestRequest("llama_like.py", 1, 8192, recipe="tensorwise", profile="stub-profile")


def BY_SIZE(M, K, N):
    """Big GEMMs gain, small ones lose: q, o (4096x4096), k, v lose; gate, up, down, fused qkv, fc1 gain."""
    return 1.3 if K * N >= 4096 * 6144 else 0.9


def _only_fc(M, K, N):
    """Only N >= 20000 gains: the fused linear_fc1 (N = 28672) and the head; its parts (14336) lose."""
    return 1.2 if N >= 20000 else 0.95


def test_fixture_is_megatrons_gpt_naming():
    names = [name for name, _ in _fixture_modules()]
    te = [name for name, cls in _fixture_modules() if cls in TE_LINEAR]
    assert len(te) == 16 and "output_layer" in names and len(set(names)) == len(names)
    assert {name.split(".", 3)[3] for name in te} == {
        "self_attention.linear_qkv",
        "self_attention.linear_proj",
        "mlp.linear_fc1",
        "mlp.linear_fc2",
    }


@pytest.mark.parametrize(
    "build",
    [lambda: _model(), lambda: _model(HF_NAMES, head="lm_head"), lambda: _torchtitan_03_model()],
    ids=["torchtitan-0.2", "hugging-face", "torchtitan-0.3"],
)
def test_precision_config_selects_exactly_the_advice_on_megatron_names(build):
    advice = _advice(build(), BY_SIZE)
    plan = megatron.plan(advice, StubPredictor(rule=BY_SIZE))
    # qkv (4096 x 6144) and fc1 (4096 x 28672) gain as one GEMM; linear_proj (4096 x 4096) loses
    expected = {
        f"decoder.layers.{i}.{module}"
        for i in range(4)
        for module in ("self_attention.linear_qkv", "mlp.linear_fc1", "mlp.linear_fc2")
    }
    assert set(plan.float8_names) == expected
    text = render(advice, "megatron", REQUEST, predictor=StubPredictor(rule=BY_SIZE))
    assert megatron_runs_in_float8(_document(text), _fixture_modules()) == expected


def _torchtitan_03_model() -> ModelLayers:
    layers = []
    for i in range(4):
        layers.append(layer(f"layers.{i}.attention.qkv_linear.wqkv", 4096, 6144))
        layers += [
            layer(f"layers.{i}.{name}", K, N)
            for name, (K, N) in LLAMA_BLOCK.items()
            if name not in ("attention.wq", "attention.wk", "attention.wv")
        ]
    layers.append(layer("lm_head", 4096, 128256))
    return ModelLayers("torchtitan:llama3", 1, 8192, tuple(layers))


def test_per_layer_decisions_and_exceptions_first():
    """Layers 0 and 3 see few rows (all bf16), 1 and 2 many: per-layer matchers; 3 of 4 layers: the two
    exceptions come before the layer-wide pattern, which only works because the first match wins."""
    rule = lambda M, K, N: 1.3 if M >= 8192 else 0.8  # noqa: E731
    for rows, expected_layers in (([1024, 8192, 8192, 1024], {1, 2}), ([8192, 8192, 1024, 8192], {0, 1, 3})):
        advice = _advice(_model(M=rows), rule)
        text = render(advice, "megatron", REQUEST, predictor=StubPredictor(rule=rule))
        document = _document(text)
        expected = {
            f"decoder.layers.{i}.{module}" for i in expected_layers for module in megatron.BLOCK_MODULES
        }
        assert megatron_runs_in_float8(document, _fixture_modules()) == expected
        assert "--pipeline-model-parallel-size 1" in text  # layer numbers are per pipeline stage
    patterns = [m["pattern"] for m in document["matchers"].values()]
    assert patterns.index("decoder.layers.2.mlp.linear_fc1") < patterns.index(
        "decoder.layers.*.mlp.linear_fc1"
    )
    assert patterns[-1] == "*"


def test_fused_gemms_decided_as_one_with_the_predictor_or_by_the_sum_of_parts():
    advice = _advice(_model(), _only_fc)
    assert not any("feed_forward.w1" in fqn or "feed_forward.w3" in fqn for fqn in advice.convert_fqns)
    predicted = megatron.plan(advice, StubPredictor(rule=_only_fc))
    summed = megatron.plan(advice)
    fc1 = {f"decoder.layers.{i}.mlp.linear_fc1" for i in range(4)}
    assert set(predicted.float8_names) == fc1  # (4096, 14336 + 14336) predicted as one GEMM: 1.2x
    assert predicted.fused_rule == megatron.RULE_PREDICTED
    assert summed.float8_names == ()  # the parts' own times: 0.95x
    assert summed.fused_rule == megatron.RULE_SUM
    module = next(m for m in predicted.modules if m.name == "decoder.layers.0.mlp.linear_fc1")
    assert (module.K, module.N) == (4096, 28672) and module.speedup == pytest.approx(1.2)
    text = render(advice, "megatron", REQUEST, predictor=StubPredictor(rule=_only_fc))
    one_line = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    assert megatron.RULE_PREDICTED in one_line
    assert "4 of the 8 differ from their parts' own advice: decoder.layers.{0..3}.mlp.linear_fc1" in one_line
    summed_text = " ".join(render(advice, "megatron", REQUEST).split())
    assert megatron.RULE_SUM in summed_text.replace("# ", "")


def test_fused_sum_rule_weighs_the_parts_times():
    """q gains 1.5x, k and v lose 0.9x: by the sum of times the fused qkv gains (big q dominates)."""
    rule = lambda M, K, N: 1.5 if N == 4096 and K == 4096 else (1.3 if K * N > 4096 * 8192 else 0.9)  # noqa: E731
    advice = _advice(_model(), rule)
    plan = megatron.plan(advice)
    qkv = next(m for m in plan.modules if m.name == "decoder.layers.0.self_attention.linear_qkv")
    # bf16 time is proportional to N: (4096 + 1024 + 1024) / (4096/1.5 + 2 * 1024/0.9)
    assert qkv.speedup == pytest.approx(6144 / (4096 / 1.5 + 2048 / 0.9)) and qkv.float8


def test_positional_flags_keep_whole_end_layers():
    rule = lambda M, K, N: 1.3 if M >= 8192 else 0.8  # noqa: E731
    advice = _advice(_model(M=[1024, 8192, 8192, 1024]), rule)
    flags = megatron.positional_flags(megatron.plan(advice, StubPredictor(rule=rule)))
    assert (flags.start, flags.end) == (1, 1)
    assert flags.converts_against_advice == () and flags.gives_up == ()
    assert flags.arguments(advice.recipe) == (
        "--fp8-format hybrid --fp8-recipe tensorwise --first-last-layers-bf16 "
        "--num-layers-at-start-in-bf16 1 --num-layers-at-end-in-bf16 1"
    )


def test_positional_flags_state_what_they_lose():
    """Every layer: qkv and proj bf16, fc1 and fc2 float8; layer 0 all bf16. Positional flags can only
    keep layer 0 in bf16 and must run qkv and proj of layers 1..3 in float8 against the advice."""
    rule = lambda M, K, N: 0.8 if M < 8192 else (1.3 if K * N > 4096 * 8192 else 0.9)  # noqa: E731
    advice = _advice(_model(M=[1024, 8192, 8192, 8192]), rule)
    plan = megatron.plan(advice, StubPredictor(rule=rule))
    flags = megatron.positional_flags(plan)
    assert (flags.start, flags.end) == (1, 0)
    assert megatron.folded(flags.converts_against_advice) == (
        "decoder.layers.{1..3}.self_attention.linear_proj, decoder.layers.{1..3}.self_attention.linear_qkv"
    )
    assert flags.gives_up == ()
    # no other start/end has a lower predicted time
    for start in range(5):
        for end in range(5 - start):
            chosen = [m.name for m in plan.modules if start <= m.layer < 4 - end]
            assert plan.predicted_speedup(chosen) <= flags.predicted_speedup + 1e-12
    assert flags.predicted_speedup < plan.predicted_speedup(plan.float8_names)
    text = render(advice, "megatron", REQUEST, predictor=StubPredictor(rule=rule))
    comments = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    assert (
        "--first-last-layers-bf16 --num-layers-at-start-in-bf16 1 --num-layers-at-end-in-bf16 0" in comments
    )
    assert "runs in float8 against the advice: decoder.layers.{1..3}.self_attention.linear_proj" in comments
    assert "keeps in bf16 against the advice: none" in comments


def test_positional_flags_give_up_float8_when_keeping_bf16_pays_more():
    """Only layer 1's fc1 gains, a little; the rest of every layer loses: positional flags keep everything
    in bf16 (no --fp8-format) and give that one module up."""
    rule = lambda M, K, N: 1.05 if M == 4096 and N > 20000 else 0.7  # noqa: E731
    advice = _advice(_model(M=[8192, 4096, 8192, 8192]), rule)
    flags = megatron.positional_flags(megatron.plan(advice, StubPredictor(rule=rule)))
    assert not flags.fp8_enabled and flags.arguments(advice.recipe).startswith("(no --fp8-format")
    assert [m.name for m in flags.gives_up] == ["decoder.layers.1.mlp.linear_fc1"]


def test_header_says_where_the_speed_figures_come_from():
    advice = _advice(_model(), BY_SIZE)
    text = render(advice, "megatron", REQUEST, predictor=StubPredictor(rule=BY_SIZE))
    lines = text.splitlines()
    assert lines[0].startswith("# Generated by fp8advisor") and "recipe: tensorwise" in lines[2]
    assert "12 of the 16 Transformer Engine linear modules in float8" in lines[3]
    assert "--format megatron --check <this file>" in lines[4]
    comments = " ".join(line.lstrip("# ") for line in lines if line.startswith("#"))
    assert "--fp8-format hybrid --fp8-recipe tensorwise --te-precision-config-file <this file>" in comments
    assert "torchao's float8 tensorwise figures (published, profile stub-profile)" in comments
    assert "not measurements of Transformer Engine's kernels" in comments
    assert "torchao tensorwise maps to TE's tensorwise (Float8CurrentScaling" in comments
    assert "torchao rowwise has no TE equivalent" in comments
    assert "the advice converts output to float8: that is lost" in comments  # output_layer is not TE
    assert megatron.MEGATRON_SOURCE in comments
    assert "pipeline" not in comments  # layer-wide patterns only: right with any pipeline split
    document = _document(text)
    assert document["configs"]["float8_tensorwise"]["training_recipe"] == {
        "fp8_quantization_recipe": "tensorwise",  # Megatron's --fp8-recipe tensorwise: Float8CurrentScaling
        "fp8_format": "hybrid",  # torchao tensorwise: e4m3 forward, e5m2 grad_output
    }
    # the same advice from shuffled layers renders byte-identical text
    shuffled = list(_model().layers)
    random.Random(7).shuffle(shuffled)
    again = _advice(replace(_model(), layers=tuple(shuffled)), BY_SIZE)
    assert render(again, "megatron", REQUEST, predictor=StubPredictor(rule=BY_SIZE)) == text


def test_rowwise_has_no_transformer_engine_recipe():
    advice = _advice(_model(), BY_SIZE, recipe="rowwise")
    with pytest.raises(ConfigError, match="Transformer Engine has no rowwise recipe") as caught:
        render(advice, "megatron", REQUEST)
    assert "--recipe tensorwise" in caught.value.hint


@pytest.mark.parametrize(
    ("model", "named"),
    [
        (prefix_conflict_layers(), "blocks.0.ff"),  # not a decoder at all
        (_model({"feed_forward.w1": "feed_forward.experts.w1"}), "layers.{0..3}.feed_forward.experts.w1"),
    ],
)
def test_a_model_that_cannot_be_named_is_one_clear_error(model, named):
    advice = _advice(model, BY_SIZE)
    with pytest.raises(ConfigError, match="--format megatron cannot name") as caught:
        render(advice, "megatron", REQUEST)
    assert named in caught.value.message
    assert "Llama/GPT-style decoder" in caught.value.hint


def test_a_layer_missing_a_part_cannot_be_named():
    model = _model()
    model = replace(model, layers=tuple(g for g in model.layers if g.fqn != "layers.2.attention.wv"))
    with pytest.raises(ConfigError, match="without exactly q/k/v") as caught:
        megatron.plan(_advice(model, BY_SIZE))
    assert "layers.2.attention.wk" in caught.value.message


def test_read_config_refuses_a_megatron_file_and_points_to_verify(tmp_path):
    """The torchao reader cannot read a Megatron precision config; `verify` checks it on its own path
    (`verification.megatron_check`, tests/test_verify_megatron.py)."""
    advice = _advice(_model(), BY_SIZE)
    path = write(tmp_path / "precision.yaml", render(advice, "megatron", REQUEST))
    assert configs.detect_framework(path, path.read_text()) is ConfigFormat.MEGATRON
    with pytest.raises(ConfigError, match="Megatron-Core precision config") as caught:
        configs.read_config(path)
    assert "fp8advisor verify TARGET --config" in caught.value.hint


def test_positional_flags_minimise_predicted_time_not_disagreements():
    """Layer 0 all bf16; in layers 1..3 only fc1 gains (1.5x), the rest loses a little (0.95x). Keeping all
    in bf16 would disagree with the advice on 3 modules, start=1 on 9, yet start=1 is predicted faster."""
    rule = lambda M, K, N: 0.8 if M < 8192 else (1.5 if N > 20000 else 0.95)  # noqa: E731
    advice = _advice(_model(M=[1024, 8192, 8192, 8192]), rule)
    flags = megatron.positional_flags(megatron.plan(advice, StubPredictor(rule=rule)))
    assert (flags.start, flags.end) == (1, 0) and len(flags.converts_against_advice) == 9
    assert flags.predicted_speedup > 1


def test_the_written_matchers_are_checked_against_the_plan():
    advice = _advice(_model(), BY_SIZE)
    plan = megatron.plan(advice, StubPredictor(rule=BY_SIZE))
    document = megatron.precision_config(plan, advice.recipe)
    megatron.check_selects_exactly(plan, document)
    del document["matchers"]["linear_fc2_float8"]
    with pytest.raises(AssertionError, match="decoder.layers.0.mlp.linear_fc2"):
        megatron.check_selects_exactly(plan, document)


def test_render_refuses_matchers_that_miss_the_plan(monkeypatch):
    advice = _advice(_model(), BY_SIZE)
    written = megatron.precision_config

    def dropping_fc2(plan, recipe):
        document = written(plan, recipe)
        del document["matchers"]["linear_fc2_float8"]
        return document

    monkeypatch.setattr(megatron, "precision_config", dropping_fc2)
    with pytest.raises(AssertionError, match="selects"):
        render(advice, "megatron", REQUEST)


def _only_the_head(M, K, N):
    """Only the head (N = 128256) gains: Megatron keeps output_layer in bf16, so its file trains no float8."""
    return 1.5 if N > 100000 else 0.9


def test_fp8_is_off_where_the_megatron_plan_converts_nothing():
    """The plan, not the per-layer advice, says whether a Megatron file trains float8 (the head is bf16 there,
    the fused GEMMs are decided as one): suggest's "leaves FP8 off" line follows it."""
    from fp8advisor.emit.config_file import leaves_fp8_off

    predictor = StubPredictor(rule=_only_the_head)
    advice = _advice(_model(), _only_the_head)
    assert advice.convert_fqns == ("output",)
    assert leaves_fp8_off(advice, ConfigFormat.MEGATRON, predictor)
    assert not leaves_fp8_off(advice, ConfigFormat.TORCHTITAN_TOML, predictor)
    fused = _advice(_model(), _only_fc)  # the parts lose, the fused linear_fc1 gains: on in Megatron only
    assert fused.convert_fqns == ("output",)
    assert not leaves_fp8_off(fused, ConfigFormat.MEGATRON, StubPredictor(rule=_only_fc))


def test_a_recipe_the_framework_lacks_is_refused_even_when_fp8_is_off():
    """torchtitan 0.3 has no tensorwise: no file of it is written, also when nothing converts (FP8 off)."""
    from fp8advisor.emit.config_file import check_format_recipe

    advice = _advice(_model(), lambda M, K, N: 0.5)  # nothing pays
    assert advice.convert_fqns == ()
    with pytest.raises(ConfigError, match="torchtitan 0.3 has no tensorwise"):
        render(advice, ConfigFormat.TORCHTITAN_PY, REQUEST)
    with pytest.raises(ConfigError, match="Transformer Engine has no rowwise"):
        check_format_recipe(ConfigFormat.MEGATRON, "rowwise")
    check_format_recipe(ConfigFormat.TORCHTITAN_TOML, "tensorwise")  # 0.2 has it
