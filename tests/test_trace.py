"""`fp8advisor trace` on real traces: what ran, whether float8 ran where a config says, what it bought.

The traces, by where they come from:
- data/results/h200-2026-11-26/traces: this project's H200 (torch 2.11, torchao 0.18, 2026-11-26), one
  profiled step of `benchmarks/train_step.py` per variant (Llama-3-8B, 18 blocks, compiled), with the timed
  medians of the same runs in data/results/h200-2026-11-26/train-step;
- tests/data/traces/cpu: torch.profiler on the CPU (`benchmarks/make_cpu_traces.py`): a one-block Llama in
  bf16 and in torchao's float8 (real `_scaled_mm` on the CPU), no device records;
- tests/data/traces/hta: HolisticTraceAnalysis' public A100 / V100 test traces (MIT), with HTA 0.5.0's own
  figures for them in tests/data/traces/hta_figures.json (`benchmarks/hta_peer_figures.py`).
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from fp8advisor.errors import TraceError
from fp8advisor.traces.analysis import analyse
from fp8advisor.traces.comparison import compare, read_measured
from fp8advisor.traces.events import read_trace, trace_files
from fp8advisor.traces.kernel_rules import RULES, Kind, classify, load_rules
from fp8advisor.traces.layer_match import ModelLinear

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "data/results/h200-2026-11-26"
TRACES = H200 / "traces"
CPU = ROOT / "tests/data/traces/cpu"
HTA = ROOT / "tests/data/traces/hta"
LLAMA_18 = f"{ROOT}/data/models/llama3.py:llama3_8b(n_layers=18)"
CPU_MODEL = f"{ROOT}/data/models/llama3.py:build_model(n_layers=1, vocab_size=2048)"


def analysis(path: Path):
    return analyse(read_trace(path))


def timed_median(trace_name: str) -> float:
    for recipe in ("tensorwise", "rowwise"):
        records = json.loads((H200 / f"train-step/train-step-{recipe}.json").read_text())["results"]
        for record in records:
            if record.get("trace") == trace_name:
                return record["median_s"]
    raise KeyError(trace_name)


def test_h200_step_times_agree_with_the_timed_steps_of_the_same_runs():
    """The traced step (device records, first to last kernel of the step) against the CUDA-event median of
    ten timed steps of the same variant: within 3% at 8192 tokens, where the GPU is never starved."""
    for path in sorted(TRACES.glob("*/step-8192-*.json.gz")):
        step = analysis(path).steps[0]
        assert step.step_s == pytest.approx(timed_median(path.name), rel=0.03), path.name


def test_h200_gemms_are_split_into_bf16_and_float8_with_their_shapes():
    bf16 = analysis(TRACES / "tensorwise/step-8192-bf16.json.gz").steps[0]
    everything = analysis(TRACES / "tensorwise/step-8192-float8_all_convertible-tensorwise.json.gz").steps[0]
    # 18 blocks x 7 Linears + the output head, three GEMMs each: 381 GEMMs a step
    assert len(bf16.gemms) == len(everything.gemms) == 381
    assert bf16.counts.get(Kind.FLOAT8_GEMM, 0) == 0 and bf16.counts[Kind.GEMM] == 381
    assert everything.counts[Kind.FLOAT8_GEMM] == 381 and Kind.GEMM not in everything.counts
    assert all(gemm.shape is not None for gemm in everything.gemms)
    # cuBLAS's workspace memsets run under aten::mm: memory, not GEMMs
    assert bf16.counts[Kind.MEMORY] == 355
    assert everything.float8_gemm_share == 1.0
    # tensorwise: the gradient operand in e5m2
    assert {"Float8_e4m3fn", "Float8_e5m2"} <= {t for gemm in everything.gemms for t in gemm.float8_inputs}


def test_h200_step_parts_add_up_to_the_step():
    from fp8advisor.traces.comparison import step_parts

    for path in sorted(TRACES.glob("*/step-8192-*.json.gz")):
        step = analysis(path).steps[0]
        assert sum(step_parts(step).values()) == pytest.approx(step.step_s, rel=0.01), path.name


def test_h200_advice_trace_proves_float8_ran_exactly_where_train_step_converted(cli, tmp_path):
    """The advice variant converted `converted_fqns` (train-step json); its trace, matched to the model's
    layers by shape, must show float8 exactly there: PASS with the matching config, FAIL naming the layer
    with one layer moved."""
    record = next(
        r
        for r in json.loads((H200 / "train-step/train-step-tensorwise.json").read_text())["results"]
        if r.get("trace") == "step-8192-float8_advice-tensorwise.json.gz"
    )
    converted = set(record["converted_fqns"])
    kept = sorted({"wk", "wv"} & {fqn.rsplit(".", 1)[-1] for fqn in converted} ^ {"wk", "wv"})
    assert kept == ["wk", "wv"] and "output" in converted  # what the advice did at 8192 tokens on the H200
    good = _toml(tmp_path / "good.toml", ["wk", "wv"])
    trace = TRACES / "tensorwise/step-8192-float8_advice-tensorwise.json.gz"
    result = cli("trace", trace, "--model", LLAMA_18, "--config", good, "--json")
    assert result.exit_code == 0, result.output
    layers = json.loads(result.stdout)["layers"]
    assert {layer["fqn"] for layer in layers if layer["ran"] == "float8"} == converted
    bad = _toml(tmp_path / "bad.toml", ["wk", "wv", "output"])
    result = cli("trace", trace, "--model", LLAMA_18, "--config", bad)
    assert result.exit_code == 1, result.output
    assert "output: " in result.stdout and "FAIL: 1 layer(s)" in result.stdout


def test_mixed_shape_group_is_judged_by_each_layers_forward(cli, tmp_path):
    """Rowwise advice at 8192 tokens on the H200 converted w1, w3 and output, not w2: w1/w2/w3 share one shape
    group, and w2's input gradient has w1's forward shape. Each layer is judged by its own forward GEMMs."""
    trace = TRACES / "rowwise/step-8192-float8_advice-rowwise.json.gz"
    good = _toml(tmp_path / "good.toml", ["wk", "wo", "wq", "wv", "w2"], recipe="rowwise")
    assert cli("trace", trace, "--model", LLAMA_18, "--config", good).exit_code == 0
    wrong = _toml(tmp_path / "wrong.toml", ["wk", "wo", "wq", "wv"], recipe="rowwise")  # says w2 converts
    result = cli("trace", trace, "--model", LLAMA_18, "--config", wrong, "--json")
    assert result.exit_code == 1
    differs = {layer["fqn"] for layer in json.loads(result.stdout)["layers"] if not layer["ok"]}
    assert differs == {f"layers.{block}.feed_forward.w2" for block in range(18)}


def _toml(path: Path, filter_fqns: list[str], recipe: str = "tensorwise") -> Path:
    fqns = ", ".join(f'"{fqn}"' for fqn in filter_fqns)
    path.write_text(
        '[model]\nconverters = ["quantize.linear.float8"]\n\n'
        '[compile]\nenable = true\ncomponents = ["model"]\n\n'
        f'[quantize.linear.float8]\nrecipe_name = "{recipe}"\nfilter_fqns = [{fqns}]\n'
    )
    return path


def test_h200_two_traces_measure_each_group_and_decompose_the_step(tmp_path):
    from fp8advisor.inspect.layers import inspect_model

    model_layers = inspect_model(LLAMA_18, batch=1, seq=8192)
    layers = [
        ModelLinear(layer.fqn, layer.M, layer.K, layer.N, False)
        for layer in model_layers.layers
        if layer.is_linear
    ]
    bf16 = [analysis(TRACES / "tensorwise/step-8192-bf16.json.gz")]
    float8 = [analysis(TRACES / "tensorwise/step-8192-float8_advice-tensorwise.json.gz")]
    comparison = compare(bf16, float8, layers)
    assert comparison.recipe == "tensorwise"
    by_leaf = {frozenset(f.rsplit(".", 1)[-1] for f in group.layers): group for group in comparison.groups}
    assert not by_leaf[frozenset({"wk", "wv"})].converted  # kept in bf16 by the advice
    ffn = by_leaf[frozenset({"w1", "w2", "w3"})]
    # FFN GEMMs: float8 at about twice the bf16 rate; the casts feeding them cost a few percent
    assert 1.7 < ffn.bf16_s / ffn.float8_gemm_s < 2.1
    assert 1.5 < ffn.speedup < ffn.bf16_s / ffn.float8_gemm_s
    # the parts' differences are the step's difference
    difference = sum(f - b for b, f in comparison.parts.values())
    assert difference == pytest.approx(comparison.float8_step_s - comparison.bf16_step_s, rel=0.02)
    assert comparison.step_speedup == pytest.approx(
        timed_median("step-8192-bf16.json.gz") / timed_median("step-8192-float8_advice-tensorwise.json.gz"),
        rel=0.03,
    )


def test_two_traces_write_measured_speedups_that_suggest_uses(cli, tmp_path):
    measured = tmp_path / "measured.json"
    result = cli(
        "trace",
        TRACES / "tensorwise/step-8192-bf16.json.gz",
        TRACES / "tensorwise/step-8192-float8_advice-tensorwise.json.gz",
        "--model",
        LLAMA_18,
        "-o",
        measured,
    )
    assert result.exit_code == 0, result.output
    assert "calibrated to the bf16 trace" in result.stdout
    speedups = read_measured(measured)
    assert speedups.recipe == "tensorwise" and speedups.gpu == ("NVIDIA H200",)
    ffn = speedups.speedup(8192, 4096, 14336)
    assert ffn is not None and ffn > 1.5
    result = cli("suggest", LLAMA_18, "--seq", 8192, "--recipe", "tensorwise", "--trace", measured, "--json")
    assert result.exit_code == 0, result.output
    layers = {layer["fqn"]: layer for layer in json.loads(result.stdout)["layers"]}
    w1 = layers["layers.0.feed_forward.w1"]
    assert w1["predicted_speedup"] == pytest.approx(ffn, abs=1e-4) and w1["provenance"] == "measured"
    assert layers["layers.0.attention.wk"]["provenance"] != "measured"  # not float8 in the traces: no figure
    assert "the traces ran on H200, the profile is for H100" in result.stderr  # no GPU here: H100's profile
    result = cli(
        "suggest", LLAMA_18, "--seq", 4096, "--recipe", "tensorwise", "--trace", measured, "--gpu", "H200"
    )
    assert result.exit_code == 0 and "no layer took a speedup" in result.stderr
    assert "the traces ran on" not in result.stderr


def test_calibration_scales_the_bf16_step_to_the_measured_parts():
    from fp8advisor.advice.decide import advise
    from fp8advisor.advice.step import StepGpu
    from fp8advisor.advice.trace_calibration import calibrate_to_trace
    from fp8advisor.inspect.layers import inspect_model
    from fp8advisor.predict.selection import select_profile
    from fp8advisor.predict.speedup import roofline_specs_for

    model_layers = inspect_model(LLAMA_18, batch=1, seq=8192)
    choice = select_profile("h200-evidence", detect_device=False)
    advice = advise(model_layers, choice, "tensorwise", device_capability=None)
    measured = {"GEMMs": 0.30, "attention": 0.076, "other kernels": 0.061}
    gpu = StepGpu.of(roofline_specs_for(choice.primary))
    calibration = calibrate_to_trace(advice, model_layers, advice.convert_fqns, gpu, measured, 0.44)
    assert set(calibration.factors) == set(measured)
    assert calibration.bf16_after_s == pytest.approx(sum(measured.values()), rel=1e-6)
    assert calibration.calibrated_efficiency == pytest.approx(
        calibration.in_step_efficiency / calibration.factors["GEMMs"]
    )


# --- CPU traces ---------------------------------------------------------------------------------------------


def test_cpu_float8_trace_says_what_ran_from_the_cpu_ops():
    manifest = json.loads((CPU / "MANIFEST.json").read_text())
    for name in ("llama-float8-tensorwise.json.gz", "llama-float8-rowwise.json.gz"):
        result = analysis(CPU / name)
        assert not result.on_device and any("no device records" in w for w in result.warnings)
        converted = manifest["files"][name]["converted_fqns"]
        for step in result.steps:  # 8 Linears: the converted ones' three GEMMs each in float8
            assert step.counts[Kind.FLOAT8_GEMM] == 3 * len(converted)
            assert step.counts[Kind.GEMM] == 3 * (8 - len(converted))
        assert result.step_numbers == (1, 2)


def test_cpu_trace_layer_check_passes_and_fails(cli, tmp_path):
    trace = CPU / "llama-float8-tensorwise.json.gz"
    good = _toml(tmp_path / "good.toml", ["wk", "wv", "output"])
    result = cli("trace", trace, "--model", CPU_MODEL, "--config", good)
    assert result.exit_code == 0, result.output
    assert "PASS" in result.stdout and "seq 128" in result.stderr  # the token count read off the trace
    wrong = _toml(tmp_path / "wrong.toml", ["wk", "output"])  # says wv converts: the trace says it did not
    result = cli("trace", trace, "--model", CPU_MODEL, "--config", wrong, "--json")
    assert result.exit_code == 1
    differs = [layer["fqn"] for layer in json.loads(result.stdout)["layers"] if not layer["ok"]]
    assert differs == ["layers.0.attention.wv"]


def test_cpu_traces_give_no_speedups(cli):
    result = cli("trace", CPU / "llama-bf16.json.gz", CPU / "llama-float8-tensorwise.json.gz")
    assert result.exit_code == 2 and "no device records" in result.stderr


def test_trace_without_shapes_says_how_to_profile_again(cli):
    result = cli("trace", CPU / "llama-bf16-noshapes.json.gz", "--model", CPU_MODEL, "--seq", "128")
    assert result.exit_code == 2, result.output
    assert "the trace has no input shapes" in result.stderr and "record_shapes=True" in result.stderr
    assert "Traceback" not in result.output and "fit" not in result.stderr  # no guess at the tokens first
    assert cli("trace", CPU / "llama-bf16-noshapes.json.gz").exit_code == 0  # what ran needs no shapes


# --- bad input, folders and ranks ---------------------------------------------------------------------------


def test_bad_traces_get_one_clear_error(cli, tmp_path):
    not_trace = tmp_path / "results.json"
    not_trace.write_text('{"schema": "something", "points": []}')
    result = cli("trace", not_trace)
    assert result.exit_code == 2 and "not a profiler trace" in result.stderr
    whole = (CPU / "llama-bf16.json.gz").read_bytes()
    truncated = tmp_path / "cut.json.gz"
    truncated.write_bytes(whole[: len(whole) // 2])
    result = cli("trace", truncated)
    assert result.exit_code == 2 and "truncated" in result.stderr, result.output
    cut_json = tmp_path / "cut.json"
    cut_json.write_bytes(gzip.decompress(whole)[:50_000])
    result = cli("trace", cut_json)
    assert result.exit_code == 2 and "not complete JSON" in result.stderr
    assert cli("trace", tmp_path / "missing.json").exit_code == 2
    for name, text in (
        ("array.json", "[]"),
        ("five.json", '{"traceEvents": 5}'),
        ("none.json", '{"traceEvents": []}'),
    ):
        (tmp_path / name).write_text(text)
        result = cli("trace", tmp_path / name)
        assert result.exit_code == 2 and "holds no profiler events" in result.stderr, result.output
    noise = tmp_path / "noise.json.gz"
    noise.write_bytes(gzip.compress(bytes(range(256)) * 8))
    result = cli("trace", noise)
    assert result.exit_code == 2 and "not complete JSON" in result.stderr and "\\x" not in result.stderr


def test_torchtitan_folder_takes_the_last_iteration_and_checks_the_ranks_steps(cli, tmp_path):
    folder = tmp_path / "profiling/traces"
    for iteration in (10, 20):
        (folder / f"iteration_{iteration}").mkdir(parents=True)
    shutil.copy(CPU / "llama-bf16-noshapes.json.gz", folder / "iteration_10/rank0_trace.json.gz")
    shutil.copy(CPU / "llama-bf16.json.gz", folder / "iteration_20/rank0_trace.json.gz")
    shutil.copy(CPU / "llama-float8-tensorwise.json.gz", folder / "iteration_20/rank1_trace.json.gz")
    assert [p.name for p in trace_files(folder)] == ["rank0_trace.json.gz", "rank1_trace.json.gz"]
    assert trace_files(folder, rank=1)[0].parent.name == "iteration_20"
    with pytest.raises(TraceError, match="rank 3"):
        trace_files(folder, rank=3)
    assert cli("trace", folder).exit_code == 0  # both ranks hold ProfilerStep#1 and #2
    other = _steps_renumbered(CPU / "llama-float8-tensorwise.json.gz", tmp_path / "renumbered.json.gz")
    shutil.copy(other, folder / "iteration_20/rank1_trace.json.gz")
    result = cli("trace", folder)
    assert result.exit_code == 2 and "different steps" in result.stderr


def _steps_renumbered(source: Path, target: Path) -> Path:
    data = json.loads(gzip.decompress(source.read_bytes()))
    for event in data["traceEvents"]:
        if str(event.get("name", "")).startswith("ProfilerStep#"):
            event["name"] = event["name"].replace("#", "#1")
    target.write_bytes(gzip.compress(json.dumps(data).encode()))
    return target


def test_user_rules_come_first(tmp_path):
    rules_file = tmp_path / "rules.toml"
    rules_file.write_text('[[rule]]\nkind = "float8_gemm"\nkernel = "^my_fp8_kernel"\nsource = "ours"\n')
    rules = load_rules(rules_file)
    assert classify(None, "my_fp8_kernel_v2", rules) is Kind.FLOAT8_GEMM
    assert classify(None, "my_fp8_kernel_v2", RULES) is Kind.OTHER
    rules_file.write_text('[[rule]]\nkind = "fast"\nkernel = "x"\n')
    with pytest.raises(TraceError, match="unknown kind"):
        load_rules(rules_file)


@pytest.mark.parametrize(
    ("kernel", "kind"),
    [
        ("nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_ovscale_TNT", Kind.FLOAT8_GEMM),
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", Kind.GEMM),
        ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128", Kind.FLOAT8_GEMM),
        ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn", Kind.GEMM),
        ("triton_per_fused__to_copy_abs_clamp_max_mul_reciprocal_t_3", Kind.FLOAT8_CAST),
        (
            "triton_poi_fused__fused_rms_norm__scaled_mm__to_copy_add_clamp_mul_reciprocal_t_15",
            Kind.FUSED_CAST,
        ),
        ("triton_poi_fused__to_copy_add_arange_cos_div_mul_pow_reciprocal_sin_slice_stack_8", Kind.OTHER),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", Kind.COMMUNICATION),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7", Kind.ATTENTION),
        ("Memset (Device)", Kind.MEMORY),
    ],
)
def test_kernel_names_from_real_traces(kernel, kind):
    """Names as the H200 and HTA traces have them (the rotary embedding's reciprocal is not a cast)."""
    assert classify(None, kernel) is kind


# --- the peer check: HolisticTraceAnalysis on the same public traces ----------------------------------------


def hta_cases():
    figures = json.loads((ROOT / "tests/data/traces/hta_figures.json").read_text())
    for name, entry in figures["traces"].items():
        mode = entry.get("hta_include_last_profiler_step_no_ns_rounding")
        mode = mode or entry["hta_include_last_profiler_step"]
        (rank,) = mode["ranks"].values()
        yield pytest.param(name, rank, id=name)


@pytest.mark.parametrize(("name", "hta"), list(hta_cases()))
def test_breakdown_agrees_with_holistic_trace_analysis(name, hta):
    """Per step, our communication, memcpy/memset and compute time (GEMMs and everything else) against HTA
    0.5.0's sums of the same step's kernels (its iteration = the launch's ProfilerStep, as ours), within 1%
    of the step; and the step against HTA's main-stream span."""
    result = analysis(HTA / name)
    ours = {step.number: step for step in result.steps}
    for iteration in hta["per_iteration_hta"]:
        step = ours[iteration["iteration"]]
        hta_sums = iteration["sum_dur_by_type"]
        communication = step.seconds.get(Kind.COMMUNICATION, 0.0)
        memory = step.seconds.get(Kind.MEMORY, 0.0)
        compute = sum(step.seconds.values()) - communication - memory
        for mine, theirs in (
            (communication, hta_sums.get("COMMUNICATION", 0)),
            (memory, hta_sums.get("MEMORY", 0)),
            (compute, hta_sums.get("COMPUTATION", 0)),
        ):
            assert abs(mine * 1e6 - theirs) <= 0.01 * step.step_s * 1e6, (iteration, mine, theirs)
        direct = next(d for d in hta["per_iteration_direct"] if d["iteration"] == iteration["iteration"])
        main = max(direct["by_stream"].values(), key=lambda stream: stream["sum_dur"])
        assert step.step_s * 1e6 == pytest.approx(main["span"], rel=0.01)


@pytest.mark.parametrize(("name", "hta"), list(hta_cases()))
def test_gemm_time_agrees_with_hta_kernel_table(name, hta):
    """The GEMMs over the whole trace: ours (op and kernel rules) against HTA's per-kernel-name table with
    our kernel-name rules, within 1% of the steps' time."""
    result = analysis(HTA / name)
    ours = sum(step.gemm_s for step in result.steps) * 1e6
    theirs = sum(row["sum (us)"] for row in hta["kernel_name_table"] if classify(None, row["name"]).is_gemm)
    assert abs(ours - theirs) <= 0.01 * sum(step.step_s for step in result.steps) * 1e6


def test_png_draws_both_panels(cli, tmp_path):
    picture = tmp_path / "step.png"
    result = cli(
        "trace",
        TRACES / "rowwise/step-2048-bf16.json.gz",
        TRACES / "rowwise/step-2048-float8_all_convertible-rowwise.json.gz",
        "--png",
        picture,
    )
    assert result.exit_code == 0, result.output
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_outputs_never_replace_an_input_or_a_file_not_ours(cli, tmp_path):
    bf16 = tmp_path / "bf16.json.gz"
    shutil.copy(TRACES / "rowwise/step-2048-bf16.json.gz", bf16)
    float8 = TRACES / "rowwise/step-2048-float8_all_convertible-rowwise.json.gz"
    before = bf16.read_bytes()
    result = cli("trace", bf16, float8, "-o", bf16)
    assert result.exit_code == 2 and "one of this command's inputs" in result.stderr
    assert bf16.read_bytes() == before
    theirs = tmp_path / "notes.json"
    theirs.write_text("my notes\n")
    result = cli("trace", bf16, float8, "-o", theirs, "--png", tmp_path / "a.png")
    assert result.exit_code == 2 and "not written by fp8advisor" in result.stderr
    assert theirs.read_text() == "my notes\n" and not (tmp_path / "a.png").exists()  # refused before the work
    ours, picture = tmp_path / "measured.json", tmp_path / "step.png"
    for _ in range(2):  # a file this command wrote is replaced
        assert cli("trace", bf16, float8, "-o", ours, "--png", picture).exit_code == 0
    assert read_measured(ours).recipe == "rowwise"
    assert cli("trace", bf16, "-o", tmp_path / "one.json").exit_code == 2  # one trace measures no speedup


def test_casts_count_for_the_next_float8_gemm_on_their_stream_and_backward_is_told_apart():
    """A hand-made step (unit test of the rules, not a trace): on stream 7 a cast, a float8 GEMM, two casts, a
    float8 GEMM launched inside an autograd engine call, a cast then a bf16 GEMM; a cast on stream 9 feeds
    nothing there. Each float8 GEMM takes the casts since the previous one on its stream."""
    from fp8advisor.traces.events import DeviceRecord, Op, RawTrace, Span

    trace = RawTrace(Path("hand-made"), steps=[Span(1, 0.0, 1000.0)], backward_calls=[(500.0, 900.0)])
    kernels = [  # (name, op, start, duration, stream)
        ("triton_red_fused_abs_max_0", None, 10.0, 10.0, 7),
        ("nvjet_sm90_qqtst_a", "aten::_scaled_mm", 20.0, 100.0, 7),
        ("triton_per_fused__to_copy_abs_clamp_max_mul_reciprocal_1", None, 120.0, 5.0, 7),
        ("triton_red_fused_abs_max_2", None, 130.0, 3.0, 7),
        ("nvjet_sm90_qqtst_b", "aten::_scaled_mm", 140.0, 50.0, 7),
        ("triton_red_fused_abs_max_3", None, 200.0, 7.0, 9),
        ("triton_red_fused_abs_max_4", None, 210.0, 2.0, 7),
        ("nvjet_sm90_tst_c", "aten::mm", 220.0, 40.0, 7),
    ]
    for index, (name, op, start, duration, stream) in enumerate(kernels):
        launch = 600.0 if name.endswith("_b") else 10.0 * index  # GEMM b launched in the backward
        trace.launches[index] = (launch, index)
        trace.records.append(DeviceRecord(name, start, duration, stream, 0, index, index))
        if op is not None:
            trace.ops[index] = Op(op, launch, 1.0, ((64, 32), (32, 16)), ("c10::Float8_e4m3fn",))
    step = analyse(trace).steps[0]
    casts = [(gemm.kernel, round(gemm.cast_s * 1e6, 6), gemm.forward) for gemm in step.gemms]
    assert casts == [
        ("nvjet_sm90_qqtst_a", 10.0, True),
        ("nvjet_sm90_qqtst_b", 8.0, False),
        ("nvjet_sm90_tst_c", 0.0, True),
    ]
    assert step.seconds[Kind.FLOAT8_CAST] == pytest.approx(27e-6)
    assert step.step_s == pytest.approx(250e-6)  # stream 7, the main stream: 10 .. 260 us
