"""`suggest --measured` (fp8advisor.advice.in_context): in-context results decide their blocks, the profile
the rest.

The results here are written by hand, as a GPU run of `bench --model` would write them (the emulated pipeline,
which CI runs, is refused for advice: tests/test_block_bench.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fp8advisor.cli import app
from fp8advisor.inspect.blocks import discover_blocks
from fp8advisor.inspect.target import load_model
from fp8advisor.measure.run_writer import RunWriter, make_header, new_run_id, utc_now
from fp8advisor.paths import MODELS_DIR

runner = CliRunner()
LLAMA = f"{MODELS_DIR / 'llama3.py'}:llama3_8b(n_layers=2)"
H100 = "NVIDIA H100 80GB HBM3"
SEQ = 2048


@pytest.fixture(scope="module")
def discovery():
    return discover_blocks(load_model(LLAMA, "meta"), batch=1, seq=SEQ)


def wall(ms: float) -> dict:
    return {"median": ms / 1e3, "p20": (ms - 0.01) / 1e3, "p80": (ms + 0.01) / 1e3, "iterations": 20}


def write_results(
    directory: Path, discovery, *, device: str = H100, emulated: bool = False, fingerprint=None
):
    """A finished in-context run: the block keeps wq/wk/wv in bf16 and the rest in float8 (faster than the
    profile's advice, which converts wq too); the head was not measured."""
    header = make_header(
        run_id=new_run_id(),
        started=utc_now(),
        device={"name": device, "emulated": emulated},
        software={"torch": "2.11.0"},
        method={},
        grid={"shapes": [], "recipes": ["bf16", "rowwise"]},
    )
    header["context"] = "block"
    header["model"] = {"fingerprint": fingerprint or discovery.fingerprint, "target": LLAMA}
    block = discovery.units[0]
    chosen = ["attention.wo", "feed_forward.w1", "feed_forward.w2", "feed_forward.w3"]
    choice = {
        "kind": "block_choice",
        "context": "block",
        "run_id": header["run_id"],
        "block": block.pattern,
        "instances": list(block.instances),
        "recipe": "rowwise",
        "float8": chosen,
        "wall_time_s": wall(9.0),
        "bf16_wall_time_s": wall(10.0),
        "seeds": {
            "all": {"float8": sorted(block.convertible), "wall_time_s": wall(9.5)},
            "advice": {"float8": sorted([*chosen, "attention.wq"]), "wall_time_s": wall(9.3)},
        },
        "search": {},
        "measured_at": utc_now(),
    }
    directory.mkdir(parents=True, exist_ok=True)
    with RunWriter.create(directory, header) as writer:
        writer.append(choice)
    return chosen


def suggest(*args: str, env: dict | None = None):
    result = runner.invoke(
        app,
        ["suggest", LLAMA, "--seq", str(SEQ), "--recipe", "rowwise", "--profile", "h100-roofline", *args],
        env=env,
    )
    return result


def test_measured_blocks_are_decided_by_the_measurement_and_the_rest_by_the_profile(tmp_path, discovery):
    chosen = write_results(tmp_path / "ctx", discovery)
    result = suggest("--measured", str(tmp_path / "ctx"), "--json")
    assert result.exit_code == 0, result.output
    advice = json.loads(result.stdout)
    layers = {layer["fqn"]: layer for layer in advice["layers"]}
    for instance in ("layers.0", "layers.1"):
        for name in ("attention.wq", "attention.wk", "attention.wv", *chosen):
            layer = layers[f"{instance}.{name}"]
            assert layer["decided_by"] == "measured in context"
            assert layer["convert"] == (name in chosen)
    assert layers["output"]["decided_by"] == "profile"
    context = advice["in_context"]
    assert context["fallback_to_profile"] == ["output"]
    assert len(context["decided"]) == 14
    (block,) = context["blocks"]
    assert block["time_s"] == pytest.approx(9.0e-3) and block["profile_advice_time_s"] == pytest.approx(
        9.3e-3
    )
    # the filter list converts exactly the measured decision (and the profile's for the head)
    converted = set(advice["convert_fqns"])
    assert {f"layers.0.{name}" for name in chosen} <= converted
    assert not any("attention.wq" in fqn or "attention.wk" in fqn for fqn in converted)


def test_the_report_shows_the_profile_advice_beside_the_measured_one(tmp_path, discovery):
    write_results(tmp_path / "ctx", discovery)
    result = suggest("--measured", str(tmp_path / "ctx"), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    # the rows decided in context point to one footnote saying so
    (footnote,) = [line for line in result.output.splitlines() if line.endswith("] measured in context")]
    mark = footnote.split()[0]
    assert any(
        line.rstrip().endswith(f" {mark}") and "attention.wq" in line for line in result.output.splitlines()
    )
    assert "the profile's advice (5 in float8) measured 9.300 ms (1.033x the chosen time)" in result.output
    assert "decided by the profile (outside the measured blocks): output" in result.output


def test_results_in_the_profile_directory_are_used_automatically(tmp_path, discovery, monkeypatch):
    monkeypatch.setenv("FP8ADVISOR_PROFILE_DIR", str(tmp_path / "profiles"))
    without = json.loads(suggest("--json").stdout)
    assert without["in_context"] is None
    write_results(tmp_path / "profiles" / "in-context", discovery)
    found = json.loads(suggest("--json").stdout)
    assert found["in_context"]["automatic"] is True
    assert found["convert_fqns"] != without["convert_fqns"]


def test_results_of_another_token_count_are_not_used(tmp_path, discovery, monkeypatch):
    monkeypatch.setenv("FP8ADVISOR_PROFILE_DIR", str(tmp_path / "profiles"))
    write_results(tmp_path / "profiles" / "in-context", discovery, fingerprint="0123456789abcdef")
    assert json.loads(suggest("--json").stdout)["in_context"] is None  # automatic: silently not this model
    result = suggest("--measured", str(tmp_path / "profiles" / "in-context"))
    assert result.exit_code == 2
    assert "other models or token counts" in result.output


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"emulated": True}, "only emulated in-context results"),
        ({"device": "NVIDIA B200"}, "not for the H100 this advice is for"),
    ],
)
def test_unusable_results_are_refused_with_the_reason(tmp_path, discovery, options, message):
    write_results(tmp_path / "ctx", discovery, **options)
    result = suggest("--measured", str(tmp_path / "ctx"))
    assert result.exit_code == 2 and message in result.output


def test_another_recipe_has_no_finished_search(tmp_path, discovery):
    write_results(tmp_path / "ctx", discovery)
    result = runner.invoke(
        app,
        ["suggest", LLAMA, "--seq", str(SEQ), "--recipe", "tensorwise", "--measured", str(tmp_path / "ctx")],
    )
    assert result.exit_code == 2 and "no finished tensorwise search" in result.output


def test_measured_and_tensor_parallel_do_not_go_together(tmp_path, discovery):
    write_results(tmp_path / "ctx", discovery)
    result = suggest("--measured", str(tmp_path / "ctx"), "--tp", "2")
    assert result.exit_code == 2 and "--tp" in result.output


def test_a_missing_directory_is_a_clear_error(tmp_path):
    result = suggest("--measured", str(tmp_path / "nowhere"))
    assert result.exit_code == 2 and "not a directory" in result.output


def test_a_config_decided_in_context_pins_the_results_in_its_check_command(tmp_path, discovery, monkeypatch):
    monkeypatch.setenv("FP8ADVISOR_PROFILE_DIR", str(tmp_path / "profiles"))
    found = tmp_path / "profiles" / "in-context"
    write_results(found, discovery)
    config = tmp_path / "float8.toml"
    assert suggest("--format", "torchtitan-toml", "-o", str(config)).exit_code == 0
    text = config.read_text()
    assert f"decided in context: 14 layers, from {found}" in text
    assert f"--measured {found} --format torchtitan-toml --check" in text
    # CI, where the profile directory is empty, checks with the pinned results and finds it up to date
    monkeypatch.setenv("FP8ADVISOR_PROFILE_DIR", str(tmp_path / "elsewhere"))
    checked = suggest("--measured", str(found), "--format", "torchtitan-toml", "--check", str(config))
    assert checked.exit_code == 0, checked.output
    stale = suggest("--format", "torchtitan-toml", "--check", str(config))
    assert stale.exit_code == 1 and "is stale" in " ".join(
        stale.output.split()
    )  # without them: the profile's advice differs


def test_a_layer_decided_in_context_is_no_longer_uncertain(tmp_path, discovery):
    """The evidence profile marks layers uncertain and says `bench --model` settles them: once measured in
    context, they are settled (and count in no stake)."""
    write_results(tmp_path / "ctx", discovery)
    args = ["suggest", LLAMA, "--seq", str(SEQ), "--recipe", "rowwise", "--profile", "h100-evidence"]
    plain = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    measured_layers = json.loads(
        runner.invoke(app, [*args, "--measured", str(tmp_path / "ctx"), "--json"]).stdout
    )
    by_fqn = {layer["fqn"]: layer for layer in plain["layers"]}
    settled = [layer for layer in measured_layers["layers"] if layer["decided_by"] == "measured in context"]
    assert any(by_fqn[layer["fqn"]]["uncertain"] for layer in settled)  # uncertain before
    assert settled and not any(layer["uncertain"] for layer in settled)
