"""torchtitan 0.3's own models as targets (`torchtitan:llama3/8B`), with the real torchtitan (test extra), and
the torchtitan formats against the version whose names a model has. CPU only."""

from __future__ import annotations

import json
import runpy
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from _advice_helpers import llama_layers, modelled_choice  # noqa: E402

from fp8advisor.advice.decide import advise  # noqa: E402
from fp8advisor.cli import app  # noqa: E402
from fp8advisor.emit.config_file import format_warnings, render  # noqa: E402
from fp8advisor.errors import ConfigError, TargetError  # noqa: E402
from fp8advisor.inspect import titan  # noqa: E402
from fp8advisor.inspect.layers import inspect_model  # noqa: E402
from fp8advisor.inspect.records import LayerStatus  # noqa: E402
from fp8advisor.inspect.target import load_model, parse_target  # noqa: E402
from fp8advisor.request import SuggestRequest  # noqa: E402

pytest.importorskip("torchtitan.models.llama3")  # the test extra installs it: these tests run in CI

runner = CliRunner()
LLAMA3_8B = "torchtitan:llama3/8B"
#: torchtitan 0.3.0's Llama 3 8B block: (K, N) of each Linear, from its llama3_configs["8B"].
BLOCK_8B = {
    "attention.qkv_linear.wqkv": (4096, 6144),  # fused: 32 query heads + 8 + 8 kv heads of 128
    "attention.wo": (4096, 4096),
    "feed_forward.w1": (4096, 14336),
    "feed_forward.w2": (14336, 4096),
    "feed_forward.w3": (4096, 14336),
}


@pytest.fixture(scope="module")
def llama8b():
    """torchtitan 0.3's own Llama 3 8B, built by its model_registry and traced once at batch 1 x seq 8192."""
    return inspect_model(LLAMA3_8B, batch=1, seq=8192)


@pytest.fixture
def fake_world(monkeypatch, llama8b):
    """suggest reads the traced model above (or a 0.2-named Llama) and predicts with the H100 roofline."""
    import fp8advisor.inspect.layers
    import fp8advisor.predict.selection

    models = {LLAMA3_8B: llama8b, "llama02.py": llama_layers(32)}

    def fake_inspect(target, *, batch=1, seq=8192, debug=False):
        return replace(models[target], target=target, batch=batch, seq=seq)

    monkeypatch.setattr(fp8advisor.inspect.layers, "inspect_model", fake_inspect)
    monkeypatch.setattr(
        fp8advisor.predict.selection, "select_profile", lambda requested=None, **kw: modelled_choice()
    )
    monkeypatch.setattr("fp8advisor.advice.caveats._detect_capability", lambda: None)


# ----------------------------------------------------------------------------------------------- target


def test_registry_target_is_recognised_before_any_other_form():
    spec = parse_target(" torchtitan:llama3/8B ")
    assert (spec.kind, spec.name, spec.flavor, spec.path) == ("torchtitan", "llama3", "8B", None)
    # a registry target is never read as model.py:NAME, even where that would parse
    with pytest.raises(TargetError, match="not a torchtitan registry target") as caught:
        parse_target("torchtitan:model.py")
    assert "torchtitan:MODEL/FLAVOR" in caught.value.hint


def test_layers_traces_every_linear_of_llama3_8b(llama8b):
    linear = [layer for layer in llama8b.layers if layer.is_linear]
    assert len(linear) == 32 * 5 + 1
    assert all(layer.status is LayerStatus.TRACED for layer in linear)  # none assumed
    shapes = {(layer.fqn, layer.M, layer.K, layer.N) for layer in linear}
    expected = {(f"layers.{i}.{name}", 8192, K, N) for i in range(32) for name, (K, N) in BLOCK_8B.items()}
    expected.add(("lm_head", 8192, 4096, 128256))
    assert shapes == expected
    note = next(note for note in llama8b.notes if "FlexAttention" in note)
    assert "replaced in 32 attention layer(s)" in note and "scaled_dot_product_attention" in note
    assert any("model_registry('8B')" in note for note in llama8b.notes)
    # the census sees the substitute as 32 fused attention calls, causal, at the full sequence
    attention = llama8b.census.to_json()["attention"]
    assert sum(entry["count"] for entry in attention) == 32
    assert all(entry["causal"] and entry["q_len"] == 8192 for entry in attention)


def test_layers_cli_prints_the_attention_note():
    result = runner.invoke(app, ["layers", LLAMA3_8B, "--seq", "2048", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["target"] == LLAMA3_8B
    assert {layer["status"] for layer in document["layers"]} == {"traced"}
    assert any("FlexAttention" in note and "replaced" in note for note in document["notes"])
    table = runner.invoke(app, ["layers", LLAMA3_8B, "--seq", "2048"])
    assert table.exit_code == 0, table.output
    assert "161 traced" in table.stdout and "scaled_dot_product_attention" in table.stdout


def test_moe_router_autocast_traces_on_meta():
    """deepseek_v3's router runs under torch.autocast(device_type=x.device.type): "meta" has no autocast."""
    layers = inspect_model("torchtitan:deepseek_v3/debugmodel", batch=1, seq=256)
    assert not any("tracing stopped" in note for note in layers.notes)
    linear = [layer for layer in layers.layers if layer.is_linear]
    assert len(linear) == 48 and all(layer.M_per_call == (256,) for layer in linear)  # every one ran
    gates = [layer for layer in linear if layer.fqn.endswith("moe.router.gate")]
    assert len(gates) == 5 and all(layer.status is LayerStatus.NOT_CONVERTIBLE for layer in gates)  # N = 8


def test_unknown_flavor_and_model_list_what_exists():
    result = runner.invoke(app, ["layers", "torchtitan:llama3/9B"])
    assert result.exit_code == 2
    assert "torchtitan's llama3 has no flavor '9B'" in result.stderr
    assert "debugmodel, 1B, 3B, 8B, 70B, 405B" in result.stderr
    result = runner.invoke(app, ["suggest", "torchtitan:llama4/8B"])
    assert result.exit_code == 2
    assert "has no model 'llama4'" in result.stderr and "deepseek_v3" in result.stderr
    assert "llama3" in result.stderr.split("models:", 1)[1]


def test_missing_torchtitan_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchtitan", None)  # `import torchtitan...` now raises ImportError
    monkeypatch.setitem(sys.modules, "torchtitan.models", None)
    with pytest.raises(TargetError, match="needs the torchtitan package") as caught:
        load_model(LLAMA3_8B)
    assert caught.value.hint == "pip install 'fp8advisor[torchtitan]'"
    result = runner.invoke(app, ["layers", LLAMA3_8B])
    assert result.exit_code == 2
    assert "pip install 'fp8advisor[torchtitan]'" in result.stderr


def test_causal_attention_matches_softmax_attention_and_gives_the_logsumexp():
    """The substitute on real tensors: causal softmax attention with grouped kv heads, and gpt_oss's
    out_transform receives the log-sum-exp of the causal scores, (B, L, N)."""
    torch.manual_seed(0)
    attention = titan._causal_attention_class()("FlexAttention")
    q, k, v = torch.randn(2, 6, 4, 8), torch.randn(2, 6, 2, 8), torch.randn(2, 6, 2, 8)  # (B, L, N, H)
    seen = {}

    def out_transform(out, lse):
        seen["lse"] = lse
        return out

    out = attention(q, k, v, scale=0.3, enable_gqa=True, out_transform=out_transform)
    kk, vv = (t.repeat_interleave(2, dim=2).transpose(1, 2) for t in (k, v))
    scores = q.transpose(1, 2) @ kk.transpose(-2, -1) * 0.3
    scores = scores.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))
    expected = (scores.softmax(-1) @ vv).transpose(1, 2)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(seen["lse"], scores.logsumexp(-1).transpose(1, 2))


# ------------------------------------------------------------------------------------------- torchtitan-py


def test_torchtitan_py_from_the_registry_is_accepted_by_torchtitan_and_converts_the_advice(
    fake_world, llama8b, tmp_path, monkeypatch
):
    path = tmp_path / "float8.py"
    # H100 roofline: fused wqkv 1.40x, wo 1.35x, the rest above; 1.38 splits the attention projections
    args = [LLAMA3_8B, "--recipe", "rowwise", "--min-speedup", "1.38", "--format", "torchtitan-py"]
    result = runner.invoke(app, ["suggest", *args, "-o", str(path)])
    assert result.exit_code == 0, result.output
    assert "warning: this model has torchtitan" not in result.stderr  # 0.3 names for a 0.3 config
    text = path.read_text()
    assert "from torchtitan.models.llama3 import model_registry\n" in text  # no EDIT: it is the model
    assert 'FLAVOR = "8B"  # torchtitan:llama3/8B\n' in text
    assert "import llama3_8b as base_recipe" in text  # torchtitan's own recipe for the flavor
    assert "For torchtitan 0.3's llama3 model, flavor 8B" in text and "PLACEHOLDER" not in text
    advice = json.loads(runner.invoke(app, ["suggest", *args[:-2], "--json"]).stdout)
    advised = {layer["fqn"] for layer in advice["layers"] if layer["convert"]}
    linear = set(llama8b.linear_fqns())
    assert "layers.0.attention.qkv_linear.wqkv" in advised and "layers.0.attention.wo" not in advised
    assert advised < linear
    assert all(any(entry in fqn for fqn in linear) for entry in advice["filter_fqns"])

    # torchtitan's own Float8LinearConverter, from the file as written: only its GPU check is lifted (CPU)
    import torchtitan.components.quantization.float8 as float8

    monkeypatch.setattr(float8, "has_cuda_capability", lambda *args: True)
    config = runpy.run_path(str(path))["float8_advised"]()
    with torch.device("meta"):
        model = config.model_spec.model.build()
    converted = {fqn for fqn, module in model.named_modules() if type(module).__name__ == "Float8Linear"}
    assert converted == advised


def test_torchtitan_py_names_a_placeholder_model_for_other_targets(fake_world):
    result = runner.invoke(app, ["suggest", "llama02.py", "--recipe", "rowwise", "--format", "torchtitan-py"])
    assert result.exit_code == 0, result.output
    assert "Written from llama02.py, not from torchtitan's registry" in result.stdout
    assert 'FLAVOR = "8B"  # EDIT: placeholder, your model flavor' in result.stdout


def test_torchtitan_py_for_a_flavor_torchtitan_has_no_recipe_for():
    advice = advise(llama_layers(2), modelled_choice(), "rowwise", device_capability=None)
    text = render(advice, "torchtitan-py", SuggestRequest("torchtitan:llama3/1B", 1, 8192))
    assert 'FLAVOR = "1B"  # torchtitan:llama3/1B' in text
    assert "def base_recipe() -> Trainer.Config:  # EDIT" in text and "config_registry import" not in text
    compile(text, "float8.py", "exec")


def test_torchtitan_py_refuses_filter_entries_that_name_no_linear():
    advice = advise(llama_layers(2), modelled_choice(), "rowwise", device_capability=None)
    broken = replace(
        advice, filter_list=replace(advice.filter_list, entries=("attention.wq", "attention.wqkv"))
    )
    with pytest.raises(ConfigError, match="'attention.wqkv' name no Linear layer of model.py"):
        render(broken, "torchtitan-py", SuggestRequest("model.py", 1, 8192))
    fixed = replace(broken, filter_list=replace(broken.filter_list, entries=("attention.wq",)))
    assert "attention.wq" in render(fixed, "torchtitan-py", SuggestRequest("model.py", 1, 8192))


# ---------------------------------------------------------------------------------- version lookalikes


def test_torchtitan_py_from_0_2_names_warns_and_suggests_the_registry_target(fake_world):
    result = runner.invoke(app, ["suggest", "llama02.py", "--recipe", "rowwise", "--format", "torchtitan-py"])
    assert result.exit_code == 0, result.output
    warning = result.stderr.split("warning: ", 1)[1]
    assert warning.startswith(
        "this model has torchtitan 0.2's Linear names (attention.wq / wk / wv and the head"
    )
    assert "fused attention.qkv_linear.wqkv and lm_head" in warning
    assert "fp8advisor suggest torchtitan:llama3/8B --format torchtitan-py" in warning  # 4096 wide, 32 deep
    assert "torchtitan 0.2's Linear names" not in result.stdout  # the file is the config alone


def test_torchtitan_toml_from_a_0_3_registry_model_is_refused(fake_world):
    result = runner.invoke(app, ["suggest", LLAMA3_8B, "--recipe", "rowwise", "--format", "torchtitan-toml"])
    assert result.exit_code == 2, result.output  # its names are the installed torchtitan's: known
    assert "--format torchtitan-toml is torchtitan 0.2.x's job config" in " ".join(result.stderr.split())
    same = runner.invoke(app, ["suggest", "llama02.py", "--recipe", "rowwise", "--format", "torchtitan-toml"])
    assert same.exit_code == 0 and "Linear names" not in same.stderr


def test_names_look_like():
    old = ["layers.0.attention.wq", "layers.0.attention.wk", "layers.0.feed_forward.w1", "output"]
    assert titan.names_look_like(old) == titan.NamesLookLike("0.2", "attention.wq / wk / wv", "output")
    unfused = ["layers.0.attention.qkv_linear.wq", "layers.0.feed_forward.w1", "lm_head"]
    assert titan.names_look_like(unfused) == titan.NamesLookLike(
        "0.3", "attention.qkv_linear.wq / wk / wv", "lm_head"
    )
    hf = ["model.layers.0.self_attn.q_proj", "model.layers.0.mlp.gate_proj", "lm_head"]
    assert titan.names_look_like(hf) is None
    assert (
        titan.names_look_like(["blocks.0.attention.wq", "blocks.0.attention.wk", "output"]).head is None
    )  # no feed_forward.w1: not torchtitan
    assert titan.llama3_flavor(llama_layers(32).layers) == "8B"
    assert titan.llama3_flavor(llama_layers(3).layers) == "FLAVOR"  # no llama3 flavor is 3 blocks deep


def test_only_torchtitan_formats_warn():
    advice = advise(llama_layers(2), modelled_choice(), "rowwise", device_capability=None)
    assert (
        format_warnings(advice, "nemo-automodel") == [] and format_warnings(advice, "torchtitan-toml") == []
    )
    assert len(format_warnings(advice, "torchtitan-py")) == 1


def test_base_recipe_is_torchtitans_own_for_the_flavor():
    assert titan.base_recipe(titan.RegistryName("llama3", "8B")) == "llama3_8b"  # not llama3_8b_mxfp8
    assert titan.base_recipe(titan.RegistryName("qwen3", "0.6B")) == "qwen3_0_6b"
    assert titan.base_recipe(titan.RegistryName("llama3", "debugmodel")) == "llama3_debugmodel"  # not sft_
    assert titan.base_recipe(titan.RegistryName("deepseek_v3", "16B")) == "deepseek_v3_16b"
    assert titan.base_recipe(titan.RegistryName("llama3", "1B")) is None


def test_real_device_build_is_initialised_as_torchtitan_does_and_runs():
    """On a real device (verify's real run) torchtitan's own init runs and the substitute attention runs."""
    torch.manual_seed(0)
    loaded = load_model("torchtitan:llama3/debugmodel", "cpu")
    head = loaded.model.lm_head.weight  # torchtitan: trunc_normal(std=dim**-0.5); nn.Linear's own: ~0.036
    assert head.std().item() == pytest.approx(256**-0.5, rel=0.1)
    inputs = loaded.example_inputs(1, 32)
    with torch.no_grad():
        logits = loaded.model(*inputs.args, **inputs.kwargs)
    assert logits.shape == (1, 32, 2048) and torch.isfinite(logits).all()
