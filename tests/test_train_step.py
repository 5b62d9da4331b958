"""benchmarks/train_step.py on the CPU: the whole flow under --emulate --tiny --no-compile, and exit paths.

One emulated run (8 variants, 1 warm-up + 2 timed steps each) is shared by the tests through a module-scoped
fixture: measured 10.6 s in the whole suite on the 2-core CI machine (Python 3.11, torch 2.13 CPU), 16 to 19 s
when this file runs alone (it then pays for importing torch and torchao), and several times that when the
machine is loaded. Its times are emulated and never checked as figures; what is checked is that every variant
ran, converted exactly the layers it should, and that the JSON says what it is.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _bench_helpers import load_benchmark  # noqa: E402


@pytest.fixture(scope="module")
def train_step():
    return load_benchmark("train_step")


@pytest.fixture(scope="module")
def emulated_run(train_step, tmp_path_factory):
    """(report, threshold): one emulated run whose advice threshold splits the tiny model's layers."""
    from fp8advisor.predict.selection import select_profile

    # A threshold between the two lowest predicted speedups at seq 64, so that the advice converts some but
    # not all layers there, whatever profile ships: the filter must then pick exactly the advised names.
    settings = train_step.parse_args(["--emulate", "--tiny"])
    advice, _ = train_step.plan_advice(settings, 64, "rowwise", select_profile(detect_device=False))
    speedups = sorted({layer.predicted_speedup for layer in advice.layers if layer.predicted_speedup})
    assert len(speedups) >= 2, "the tiny model needs layers of different predicted speedups"
    threshold = (speedups[0] + speedups[1]) / 2

    out = tmp_path_factory.mktemp("train-step") / "train-step.json"
    argv = ["--emulate", "--tiny", "--no-compile", "--warmup", "1", "--steps", "2"]
    argv += ["--min-speedup", f"{threshold:.6f}", "--out", str(out)]
    argv += ["--trace-dir", str(out.parent / "traces")]
    assert train_step.main(argv) == 0
    return json.loads(out.read_text()), threshold


def _tiny_linears(train_step):
    """(fqn, module) of every nn.Linear of the tiny model, built on the meta device."""
    from torch import nn

    from fp8advisor.inspect.target import load_model

    settings = train_step.parse_args(["--emulate", "--tiny"])
    model = load_model(settings.target, "meta").model
    return [(fqn, module) for fqn, module in model.named_modules() if isinstance(module, nn.Linear)]


def _by_variant(report) -> dict:
    return {(r["tokens_per_step"], r["variant"]): r for r in report["results"]}


def test_every_variant_runs_at_both_token_counts(train_step, emulated_run):
    report, _ = emulated_run
    records = _by_variant(report)
    expected = {(tokens, variant.value) for tokens in (64, 32) for variant in train_step.Variant}
    assert set(records) == expected
    assert len(report["results"]) == 8
    for record in report["results"]:
        assert record["status"] == "ok", record
        assert len(record["step_times_s"]) == 2
        assert record["p20_s"] <= record["median_s"] <= record["p80_s"]
        assert record["recipe"] == (None if record["variant"] == "bf16" else "rowwise")
        # 1 warm-up + 2 timed steps, all finite
        assert len(record["losses"]) == 3 and all(math.isfinite(loss) for loss in record["losses"])


def test_each_variant_keeps_one_profiled_step_as_a_trace_with_its_shapes(emulated_run):
    import gzip

    report, _ = emulated_run
    traces = Path(report["settings"]["trace_dir"])
    names = [record["trace"] for record in report["results"]]
    assert sorted(names) == sorted(path.name for path in traces.iterdir()) and len(set(names)) == 8
    assert "step-64-float8_advice-rowwise.json.gz" in names and "step-32-bf16.json.gz" in names
    for name in names:
        events = json.loads(gzip.decompress((traces / name).read_bytes()))["traceEvents"]
        steps = [event for event in events if event.get("name", "").startswith("ProfilerStep#")]
        assert [event["name"] for event in steps] == ["ProfilerStep#1"], name  # the warm-up step is not kept
        start, end = steps[0]["ts"], steps[0]["ts"] + steps[0]["dur"]
        ops = [event for event in events if event.get("cat") == "cpu_op" and start <= event["ts"] <= end]
        assert any(event["name"] == "aten::mm" and event["args"].get("Input Dims") for event in ops), name


def test_same_seed_and_data_give_the_same_first_loss(emulated_run):
    report, _ = emulated_run
    records = _by_variant(report)
    for tokens in (64, 32):
        baseline = records[(tokens, "bf16")]["losses"][0]
        for variant in ("float8_all_convertible", "float8_torchao_auto", "float8_advice"):
            # float8 rounds the GEMM operands: the first loss moves a little, never far
            assert records[(tokens, variant)]["losses"][0] == pytest.approx(baseline, rel=0.02)


def test_float8_variants_convert_exactly_their_layers(train_step, emulated_run):
    from torchao.float8.float8_linear_utils import _auto_filter_for_recipe

    report, threshold = emulated_run
    records = _by_variant(report)
    linears = _tiny_linears(train_step)
    convertible = {fqn for fqn, m in linears if m.in_features % 16 == 0 and m.out_features % 16 == 0}
    auto_filter = _auto_filter_for_recipe("rowwise", filter_fqns=[])
    auto_accepts = {fqn for fqn, module in linears if auto_filter(module, fqn)}
    assert (
        "output" in auto_accepts
    )  # the tiny sizes are chosen so that torchao's rule keeps the head in float8
    predictions = {p["tokens_per_step"]: p for p in report["predictions"]}

    for tokens in (64, 32):
        assert records[(tokens, "bf16")]["converted"] == 0
        everything = records[(tokens, "float8_all_convertible")]
        assert set(everything["converted_fqns"]) == convertible
        assert everything["converted"] == len(linears) == everything["linear_layers"] == 15

        auto = records[(tokens, "float8_torchao_auto")]
        assert set(auto["converted_fqns"]) == auto_accepts

        advice = records[(tokens, "float8_advice")]
        advised = set(predictions[tokens]["advised_fqns"])
        assert set(advice["converted_fqns"]) == advised
        assert advice["converted"] == advice["expected_converted"] == len(advised)
        assert everything["converted"] >= advice["converted"]
        assert predictions[tokens]["min_speedup"] == pytest.approx(threshold, rel=1e-5)

    # at seq 64 the threshold splits the layers: the advice is neither nothing nor everything
    assert (
        0 < records[(64, "float8_advice")]["converted"] < records[(64, "float8_all_convertible")]["converted"]
    )


def test_predictions_sit_beside_the_emulated_times_but_no_step_model(emulated_run):
    report, _ = emulated_run
    for record in report["results"]:
        if record["variant"] == "bf16":
            assert record["measured_step_speedup"] == pytest.approx(1.0)
            assert record["predicted_linear_speedup"] is None
            continue
        assert record["predicted_linear_speedup"] is not None and record["predicted_linear_speedup"] > 0
        # GPU predictions against CPU emulation times: no step figure may sit beside them
        assert record["predicted_step_speedup"] is None and record["predicted_step_s"] is None
    # the step model's figures are still recorded with each prediction, for the profile's GPU
    for prediction in report["predictions"]:
        strategies = prediction["step"]["strategies"]
        assert {"bf16", "advice", "all_convertible"} <= set(strategies)
        assert strategies["bf16"]["tokens_per_s_per_gpu"] == pytest.approx(
            prediction["tokens_per_step"] / strategies["bf16"]["step_s"], rel=1e-4
        )


def test_json_carries_the_metadata_and_says_emulated(emulated_run):
    report, _ = emulated_run
    for key in ("schema", "device", "software", "command", "date", "method", "settings", "model", "memory"):
        assert key in report, key
    assert report["schema"] == "fp8advisor.train-step/1"
    assert report["emulated"] is True and report["device"]["emulated"] is True
    assert "EMULATED" in report["what"]
    for package in ("torch", "torchao", "triton", "fp8advisor"):
        assert report["software"][package], package
    assert "--emulate" in report["command"]
    assert report["date"].endswith("Z")
    assert report["settings"]["layers"] == 2 and report["settings"]["seqs"] == [64, 32]
    assert report["model"]["parameters"] > 0
    assert set(report["memory"]["estimates"]) == {"64", "32"}


def test_markdown_labels_emulated_figures(train_step, emulated_run):
    report, _ = emulated_run
    text = train_step.markdown(report)
    assert text.startswith("**EMULATED")
    assert text.count("| float8_advice |") == 2


def test_markdown_rows_have_a_cell_per_column_on_a_real_h200_report(train_step):
    # train_step.py's own report from an H200 (2026-11-26): each row as wide as the header, the step model's
    # predicted step time under its column (it was missing, so every later figure sat one column left)
    from fp8advisor.paths import DATA_DIR

    path = DATA_DIR / "results" / "h200-2026-11-26" / "train-step" / "train-step-tensorwise.json"
    table = [
        line for line in train_step.markdown(json.loads(path.read_text())).splitlines() if line[:1] == "|"
    ]
    widths = {line.count("|") for line in table}
    assert len(table) == 10 and widths == {12}
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    bf16 = [cell.strip() for cell in table[2].strip("|").split("|")]
    assert bf16[header.index("predicted step ms")] == "722.4"
    assert bf16[header.index("measured step speedup")] == "1.000x"


def test_without_a_gpu_and_without_emulate_exits_2(train_step, monkeypatch, tmp_path, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "never.json"
    assert train_step.main(["--out", str(out)]) == 2
    assert not out.exists()
    assert "--emulate" in capsys.readouterr().err


def test_a_failing_variant_is_recorded_and_the_others_still_run(train_step, monkeypatch, tmp_path):
    """On the GPU one variant may fail (out of memory, a compile error): the run goes on and says which."""
    real_convert = train_step.convert

    def convert(model, variant, *args, **kwargs):
        if variant is train_step.Variant.ALL_CONVERTIBLE:
            raise RuntimeError("simulated compile failure\nsecond line")
        return real_convert(model, variant, *args, **kwargs)

    monkeypatch.setattr(train_step, "convert", convert)
    out = tmp_path / "partial.json"
    argv = ["--emulate", "--tiny", "--no-compile", "--seqs", "32", "--warmup", "0", "--steps", "1"]
    argv += ["--variants", "float8_all_convertible,bf16", "--out", str(out)]
    assert train_step.main(argv) == 0
    report = json.loads(out.read_text())
    records = {r["variant"]: r for r in report["results"]}
    assert list(records) == ["bf16", "float8_all_convertible"]  # bf16 first, whatever the order asked
    assert records["bf16"]["status"] == "ok"
    failed = records["float8_all_convertible"]
    assert failed["status"] == "failed: RuntimeError"
    assert failed["error"] == "simulated compile failure"
    assert failed["measured_step_speedup"] is None


def test_default_layers_fit_an_h100_by_the_estimate(train_step):
    """The documented default: 18 Llama-3-8B blocks at seq 8192 take 83% of an 80 GB H100 by the estimate."""
    from fp8advisor.inspect.target import load_model

    settings = train_step.parse_args([])
    assert settings.layers == train_step.DEFAULT_LAYERS == 18
    assert settings.seqs == (8192, 2048) and settings.recipes == ("rowwise",) and settings.compile
    model = load_model(settings.target, "meta").model
    parameters = sum(p.numel() for p in model.parameters())
    assert parameters == 18 * 218_112_000 + 2 * 128_256 * 4096 + 4096
    estimate = train_step.estimated_peak_bytes(model.args, parameters, 8192)
    h100_bytes = 85_000_000_000  # total_memory of an H100 80GB HBM3: 79.2 GiB
    assert estimate["total_bytes"] == pytest.approx(70.9e9, rel=0.005)
    assert 0.80 < estimate["total_bytes"] / h100_bytes < 0.86
    # one more block: its weights, gradients and AdamW states (1.745 GB) and its activations at 8192 tokens
    assert estimate["per_block_bytes"] == pytest.approx(1.745e9 + 1.141e9, rel=0.005)
    # 0.95 x 85.0 GB - 70.9 GB leaves 9.85 GB: three more blocks of 2.886 GB
    fit = train_step.layers_that_would_fit(
        18, estimate["total_bytes"], estimate["per_block_bytes"], h100_bytes
    )
    assert fit == 21


def test_a_trace_that_fails_leaves_the_timed_steps_standing(train_step, monkeypatch, tmp_path):
    def broken(step, device, path):
        raise RuntimeError("CUPTI is busy\nmore")

    monkeypatch.setattr(train_step, "trace_step", broken)
    argv = ["--emulate", "--tiny", "--no-compile", "--warmup", "0", "--steps", "1"]
    settings = train_step.parse_args([*argv, "--trace-dir", str(tmp_path)])
    record = train_step.run_variant(settings, 32, None, train_step.Variant.BF16, None)
    assert record["status"] == "ok" and record["median_s"] > 0
    assert record["trace"] is None and record["trace_error"] == "CUPTI is busy"
