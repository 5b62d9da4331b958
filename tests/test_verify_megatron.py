"""`fp8advisor verify` of the Megatron-Core precision config `suggest --format megatron` writes
(`fp8advisor.verification.megatron_check`).

The files are written by `suggest` itself for a dense Llama (data/models/llama3.py:llama3_8b, 32 layers, every
Transformer Engine module in float8) and a Hugging Face config (Llama 3.1 8B, 2 layers, seq 1280: linear_fc1
and linear_fc2 in float8, linear_qkv and linear_proj in bf16). `verify` checks them with Megatron-Core's own
matcher on a real GPTModel's names (the test extra installs megatron-core 0.16.1); an edited file fails naming
each module and the traced Linear layers it fuses; without megatron-core the simulated matcher gives the same
verdicts and the report says it is simulated. Nothing runs in float8, and the report says so.
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fp8advisor.cli import app
from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.reader import read_config
from fp8advisor.verification import native_megatron

pytest.importorskip("megatron.core", reason="the test extra (megatron-core) is not installed")

runner = CliRunner()

DENSE = "data/models/llama3.py:llama3_8b"
HF = "data/models/llama31_8b_hf/config.json:(num_hidden_layers=2)"
#: model -> (TARGET, suggest's other arguments)
#: The hf case is advised with the profile that keeps its attention in bf16 at seq 1280 (HF_FLOAT8).
MODELS = {"dense": (DENSE, ()), "hf": (HF, ("--seq", "1280", "--profile", "h100-published-rowwise-2025-06"))}
#: The traced Linear layers the HF file puts in float8: those of linear_fc1 (gate + up) and linear_fc2 (down).
HF_FLOAT8 = {f"model.layers.{i}.mlp.{name}" for i in (0, 1) for name in ("gate_proj", "up_proj", "down_proj")}


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, tuple[str, Path]]:
    """model -> (TARGET, the megatron file `suggest` wrote for it)."""
    folder = tmp_path_factory.mktemp("megatron")
    files = {}
    for key, (target, extra) in MODELS.items():
        path = folder / f"{key}.yaml"
        result = runner.invoke(app, ["suggest", target, *extra, "--format", "megatron", "-o", str(path)])
        assert result.exit_code == 0, result.output
        files[key] = (target, path)
    return files


def _verify(target: str, path: Path, *options: str):
    return runner.invoke(app, ["verify", target, "--config", str(path), *options])


def _report(target: str, path: Path) -> dict:
    result = _verify(target, path, "--json")
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def _edited(path: Path, old: str, new: str, folder: Path) -> Path:
    """A copy of the file with one line of its YAML body changed (the header is left as suggest wrote it)."""
    text = path.read_text()
    assert text.count(old) == 1, old
    edited = folder / f"edited-{path.name}"
    edited.write_text(text.replace(old, new))
    return edited


def test_a_written_file_passes_with_megatrons_own_matcher(written):
    target, path = written["dense"]
    result = _verify(target, path)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    version = metadata.version("megatron-core")
    assert version.startswith("0.16.")
    assert f"framework: Megatron-Core {version}'s own matcher ran" in text
    assert (
        "real GPTModel's 128 Transformer Engine linear module names: 128 in float8, exactly the advice's"
        in text
    )
    assert "PASS: the config converts exactly the 224 advised layers" in text
    assert "ran float8 GEMMs" not in text and "nothing ran" in text and "SQNR dB (output" not in text

    report = _report(target, path)
    assert report["execution"]["mode"] == "not run"
    linears = {layer["fqn"] for layer in report["layers"]}
    assert set(report["converted"]) == set(report["advised"]) == linears - {"output"}  # the head: never TE
    assert all(layer["calls"] == 0 and layer["float8_gemms"] == 0 for layer in report["layers"])


def test_a_written_hf_file_puts_only_the_advised_modules_in_float8(written):
    target, path = written["hf"]
    report = _report(target, path)
    assert report["passed"], report["differences"]
    assert set(report["converted"]) == set(report["advised"]) == HF_FLOAT8
    assert report["framework"].startswith("Megatron-Core 0.16")


#: edit -> (file, the edit, the modules that then differ, their kind, the parts named for layer 1's module,
#: the traced Linear layers of the differing modules)
EDITS = {
    "pattern": (
        "dense",
        ("pattern: decoder.layers.*.mlp.linear_fc1", "pattern: decoder.layers.*.mlp.linear_fc9"),
        {f"decoder.layers.{i}.mlp.linear_fc1" for i in range(32)},
        "advised, left in bf16",
        "linear_fc1 = layers.1.feed_forward.w1 + layers.1.feed_forward.w3",
        {f"layers.{i}.feed_forward.{w}" for i in range(32) for w in ("w1", "w3")},
    ),
    "config key": (
        "hf",
        ("  default_bf16:\n    config: bf16\n", "  default_bf16:\n    config: float8_tensorwise\n"),
        {f"decoder.layers.{i}.self_attention.{m}" for i in (0, 1) for m in ("linear_qkv", "linear_proj")},
        "converted against the advice",
        "linear_qkv = model.layers.1.self_attn.q_proj + model.layers.1.self_attn.k_proj + "
        "model.layers.1.self_attn.v_proj",
        {f"model.layers.{i}.self_attn.{p}_proj" for i in (0, 1) for p in "qkvo"},
    ),
}


@pytest.mark.parametrize("edit", EDITS)
def test_an_edited_file_fails_naming_each_module_and_its_parts(written, tmp_path, edit):
    key, (old, new), differing, kind, parts, layers = EDITS[edit]
    target, path = written[key]
    edited = _edited(path, old, new, tmp_path)
    result = _verify(target, edited)
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert f"FAIL: {len(differing)} difference(s)" in text and "PASS" not in text
    module = sorted(m for m in differing if ".layers.1." in m)[0]
    assert f"{kind}: {module} (Megatron-Core 0.16.1's matcher puts it in" in text
    assert parts in text

    report = _report(target, edited)
    assert {d["subject"] for d in report["differences"]} == differing
    assert {d["kind"] for d in report["differences"]} == {kind}
    flagged = {layer["fqn"]: layer["problems"] for layer in report["layers"] if layer["problems"]}
    assert set(flagged) == layers  # the table's rows: each part of a differing module, no other layer
    assert all(len(p) == 1 and p[0].startswith(f"{kind}: in linear_") for p in flagged.values())


@pytest.mark.parametrize("case", ["dense", "hf", *EDITS])
def test_without_megatron_core_the_simulation_gives_the_same_verdicts(written, tmp_path, case, monkeypatch):
    if case in EDITS:
        key, (old, new), *_ = EDITS[case]
        target, path = written[key][0], _edited(written[key][1], old, new, tmp_path)
    else:
        target, path = written[case]
    native = _report(target, path)
    monkeypatch.setattr(native_megatron, "installed_version", lambda distribution: None)
    simulated = _report(target, path)
    assert simulated["passed"] == native["passed"] == (case not in EDITS)
    assert simulated["converted"] == native["converted"]
    assert [d["subject"] for d in simulated["differences"]] == [d["subject"] for d in native["differences"]]
    assert simulated["framework"].startswith(
        "simulated: Megatron-Core's own conversion did not run (not installed (pip install megatron-core)); "
        "the first-match glob rule (fnmatch) simulated"
    )
    assert "Megatron-Core 0.16" not in json.dumps(simulated["differences"])


def test_another_recipe_or_format_in_the_float8_config_is_a_difference(written, tmp_path):
    target, path = written["hf"]
    blockwise = _edited(
        path, "fp8_quantization_recipe: tensorwise", "fp8_quantization_recipe: blockwise", tmp_path
    )
    report = _report(target, blockwise)
    assert [(d["kind"], d["subject"]) for d in report["differences"]] == [
        ("recipe differs", f"{blockwise} (configs.float8_tensorwise)")
    ]
    assert "'blockwise'" in report["differences"][0]["detail"]
    e4m3 = _edited(path, "fp8_format: hybrid", "fp8_format: e4m3", tmp_path)
    (difference,) = _report(target, e4m3)["differences"]
    assert difference["kind"] == "setting differs" and "gradients in e4m3" in difference["detail"]


@pytest.mark.parametrize("installed", [True, False])
def test_a_file_megatron_rejects_is_one_clear_error(written, tmp_path, monkeypatch, installed):
    if not installed:
        monkeypatch.setattr(native_megatron, "installed_version", lambda distribution: None)
    target, path = written["hf"]
    edited = _edited(
        path,
        "  default_bf16:\n    config: bf16\n    type: glob\n",
        "  default_bf16:\n    config: bf16\n",
        tmp_path,
    )
    result = _verify(target, edited)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "Traceback" not in text
    if installed:
        assert "Megatron-Core rejects this precision config: AssertionError" in text
    else:
        assert "Megatron-Core would reject this precision config (simulated" in text
        assert "matcher 'default_bf16' has no type; Megatron-Core implements only glob" in text


def test_the_reader_still_refuses_a_megatron_file_and_points_to_verify(written):
    _target, path = written["hf"]
    with pytest.raises(ConfigError, match="Megatron-Core precision config") as caught:
        read_config(path)
    assert "fp8advisor verify TARGET --config" in caught.value.hint
